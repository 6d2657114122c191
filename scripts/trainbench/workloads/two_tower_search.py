"""The two_tower workload's search over the document bank (seed report 003): the
FAISS process's start and warm-up (:func:`set_faiss_threads`), the arrays handed to
FAISS (:func:`to_faiss`), exact inner-product search, the choice
of hard negatives among the ranked candidates, and the retrieval metrics of a
ranking (recall@k, MRR) with those of a random one."""

from __future__ import annotations

import numpy as np
import torch
from trainbench.workloads.faiss_process import faiss_process
from trainbench.workloads.two_tower_data import KEY

RECALL_KS = (1, 5, 10)
MRR_DEPTH = 100  # MRR counts the true document's rank within the top 100 (else 0)


def to_faiss(x: torch.Tensor | np.ndarray) -> np.ndarray:
    """What FAISS may read: a CPU, float32, C-contiguous numpy array.

    Tensors go through ``x.detach().to("cpu", torch.float32).contiguous().numpy()``
    (never a device tensor: FAISS reads an MPS tensor's pointer as CPU memory)."""
    if isinstance(x, torch.Tensor):
        out = x.detach().to("cpu", torch.float32).contiguous().numpy()
    else:
        out = np.ascontiguousarray(x, dtype=np.float32)
    if out.ndim != 2:
        raise ValueError(f"FAISS needs a 2-D (n, dim) array, got shape {out.shape}")
    return out


def faiss_search(
    queries: torch.Tensor | np.ndarray, docs: torch.Tensor | np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product search (``faiss.IndexFlatIP``): (scores, ids), each
    (n_queries, k), best first. ``k`` is capped at the number of documents. FAISS runs
    in a process of its own (:mod:`.faiss_process`: one OpenMP runtime per process)."""
    q, d = to_faiss(queries), to_faiss(docs)
    if q.shape[1] != d.shape[1]:
        raise ValueError(f"query dim {q.shape[1]} != document dim {d.shape[1]}")
    return faiss_process().search(q, d, min(int(k), d.shape[0]))


def set_faiss_threads(mining: dict, dim: int) -> dict:
    """Start the cell's FAISS process (:mod:`.faiss_process`; a cell without FAISS fails
    here), give it the OpenMP threads the config names, else the cell's own torch
    thread count, and warm it with one search of ``dim``-dimensional vectors, outside
    every timed region: its OpenMP team starts and its BLAS kernels are read (from disk,
    in a run's first cell) before any search that counts. The facts in force: torch's
    threads, FAISS's, its version and wait policy, and the seconds of its start (numpy's
    and faiss's imports) and of the warm-up search."""
    process = faiss_process()
    torch_threads = torch.get_num_threads()
    threads = process.set_threads(int(mining.get("faiss_threads") or torch_threads))
    process.warm_up(int(dim), int(mining["candidates"]))
    return {
        "torch": torch_threads,
        "faiss": threads,
        "faiss_version": process.facts["faiss_version"],
        "wait_policy": process.facts["omp_wait_policy"],
        "start_seconds": process.facts["start_seconds"],
        "warmup_search_seconds": process.facts["warmup_search_seconds"],
    }


def select_hard_negatives(
    ids: np.ndarray, positives: np.ndarray, k: int
) -> tuple[np.ndarray, dict]:
    """From ranked candidate ids (n, C), drop each row's positive (and FAISS's -1
    fillers) and keep the first ``k``: (n, k) int64, distinct per row."""
    ids = np.asarray(ids, dtype=np.int64)
    positives = np.asarray(positives, dtype=np.int64)
    keep = (ids != positives[:, None]) & (ids >= 0)
    short = np.flatnonzero(keep.sum(axis=1) < k)
    if short.size:
        raise ValueError(
            f"{short.size} queries have fewer than k={k} candidates besides their positive; "
            f"raise `{KEY}.mining.candidates` or lower `{KEY}.mining.k`"
        )
    order = np.argsort(~keep, axis=1, kind="stable")  # kept candidates first, rank order kept
    negatives = np.take_along_axis(ids, order, axis=1)[:, :k]
    is_pos = ids == positives[:, None]
    facts = {
        "positive_in_candidates": float(is_pos.any(axis=1).mean()),
        "positive_at_rank1": float(is_pos[:, 0].mean()),
    }
    return np.ascontiguousarray(negatives), facts


def retrieval_metrics(
    ranked: np.ndarray, positives: np.ndarray, ks: tuple[int, ...] = RECALL_KS
) -> dict:
    """recall@k (the true document among the top k) and MRR (1/rank of the true
    document within the ranked depth, 0 when it is not there), averaged over queries."""
    ranked = np.asarray(ranked)
    hits = ranked == np.asarray(positives)[:, None]
    found = hits.any(axis=1)
    rank = hits.argmax(axis=1) + 1
    out = {f"recall@{k}": float(hits[:, :k].any(axis=1).mean()) for k in ks}
    out["mrr"] = float(np.where(found, 1.0 / rank, 0.0).mean())
    return out


def random_baseline(bank_size: int, depth: int, ks: tuple[int, ...] = RECALL_KS) -> dict:
    """The metrics of a ranking that ignores the query (uniformly random)."""
    out = {f"recall@{k}": min(k, bank_size) / bank_size for k in ks}
    out["mrr"] = sum(1.0 / r for r in range(1, min(depth, bank_size) + 1)) / bank_size
    return out
