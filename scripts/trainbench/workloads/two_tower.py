"""Seed report 003: a two-tower retriever trained with FAISS hard-negative mining.

Query and document towers (embedding, LSTM or GRU with ``batch_first=True``,
masked mean or last-token pooling, a projection, L2-normalised output) are
trained with a softmax over query-document similarities / temperature: every
other document of the batch is a negative, and in the epochs ``mine_schedule``
names ``faiss``, so are ``mining.k`` hard negatives per query, mined before the
epoch from the whole document bank with ``faiss.IndexFlatIP``.

Mining runs in the training loop's ``before_epoch`` hook, outside every timed
region; it syncs the device at its edges, times itself, and is recorded per
epoch under ``extra.mining``. Everything handed to FAISS goes through
:func:`to_faiss` (``x.detach().to("cpu", torch.float32).contiguous().numpy()``):
FAISS reads any non-CUDA tensor's pointer as CPU memory
(docs/measurement-reference.md section 8). Metrics: recall@1/5/10 and MRR of
the true document among the whole bank, for the held-out queries.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..context import RunContext
from ..data import BatchTensorDataset, make_loader
from ..devices import fused_optimizer
from ..training import TrainingParts, run_training
from .two_tower_data import (  # noqa: F401 (the data API, also reached as two_tower.*)
    KEY,
    PAD,
    UNK,
    PairsFileError,
    build_bank,
    load_pairs,
    pad_sequences,
    pairs_from_frame,
    read_pairs_file,
    split_indices,
    synthetic_pairs,
    token_overlap,
    whitespace_vocabulary,
)

DATA_FILE = "dataset.npz"
SCHEDULE_KEY = f"{KEY}.mine_schedule"
MINING_MODES = ("none", "faiss")
RECALL_KS = (1, 5, 10)
MRR_DEPTH = 100  # MRR counts the true document's rank within the top 100 (else 0)


# ----------------------------------------------------------------------------- schedule

_RANGE = re.compile(r"^\s*(\d+)(?:\s*-\s*(\d+))?\s*:\s*([A-Za-z_]+)\s*$")
_SCHEDULE_HELP = (
    "write comma-separated 0-based epoch ranges START-END:MODE (or EPOCH:MODE) with MODE "
    "none or faiss, e.g. '0-1:none,2-9:faiss'"
)


def parse_mine_schedule(text: str) -> list[tuple[int, int, str]]:
    """``"0-1:none,2-9:faiss"`` -> ``[(0, 1, "none"), (2, 9, "faiss")]``, sorted.

    Ranges are 0-based and inclusive; they must not overlap. Raises ValueError
    naming ``workloads.two_tower.mine_schedule`` and the fix."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"`{SCHEDULE_KEY}` is empty; {_SCHEDULE_HELP}")
    ranges = []
    for part in text.split(","):
        match = _RANGE.match(part)
        if not match:
            raise ValueError(
                f"`{SCHEDULE_KEY}`: cannot read {part.strip()!r} in {text!r}; {_SCHEDULE_HELP}"
            )
        start = int(match[1])
        end = int(match[2]) if match[2] is not None else start
        mode = match[3]
        if mode not in MINING_MODES:
            raise ValueError(
                f"`{SCHEDULE_KEY}`: unknown mode {match[3]!r} in {part.strip()!r}; "
                f"allowed modes: {', '.join(MINING_MODES)}"
            )
        if end < start:
            raise ValueError(
                f"`{SCHEDULE_KEY}`: range {part.strip()!r} ends before it starts; "
                f"write START-END with START <= END"
            )
        ranges.append((start, end, mode))
    ranges.sort()
    for (s0, e0, m0), (s1, e1, m1) in zip(ranges, ranges[1:], strict=False):
        if s1 <= e0:
            raise ValueError(
                f"`{SCHEDULE_KEY}`: ranges {s0}-{e0}:{m0} and {s1}-{e1}:{m1} overlap "
                f"(epoch {s1} is in both); give every epoch at most one mode"
            )
    return ranges


def mining_mode(schedule: list[tuple[int, int, str]], epoch0: int) -> str:
    """The mode for 0-based ``epoch0``; epochs no range covers use ``none``."""
    for start, end, mode in schedule:
        if start <= epoch0 <= end:
            return mode
    return "none"


def check_mining(settings: dict, bank_size: int | None = None) -> None:
    """Mining settings a schema cannot relate to each other or to the data."""
    mining = settings["mining"]
    k, candidates = int(mining["k"]), int(mining["candidates"])
    if candidates <= k:
        raise ValueError(
            f"`{KEY}.mining.candidates` ({candidates}) must exceed `{KEY}.mining.k` ({k}): the "
            "positive is dropped from the candidates and k must remain. Fix: raise candidates."
        )
    if bank_size is not None and bank_size - 1 < k:
        raise ValueError(
            f"`{KEY}.mining.k` ({k}) exceeds the {bank_size - 1} documents a query can have as "
            "negatives. Fix: lower mining.k or add documents."
        )


# ----------------------------------------------------------------------------- FAISS


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
    (n_queries, k), best first. ``k`` is capped at the number of documents."""
    import faiss

    q, d = to_faiss(queries), to_faiss(docs)
    if q.shape[1] != d.shape[1]:
        raise ValueError(f"query dim {q.shape[1]} != document dim {d.shape[1]}")
    index = faiss.IndexFlatIP(d.shape[1])
    index.add(d)
    scores, ids = index.search(q, min(int(k), d.shape[0]))
    return scores, ids.astype(np.int64)


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


def mine_hard_negatives(
    query_emb: np.ndarray, doc_emb: np.ndarray, positives: np.ndarray, k: int, candidates: int
) -> tuple[np.ndarray, dict]:
    """Search the ``candidates`` nearest bank documents of every query
    (IndexFlatIP) and keep the first ``k`` that are not its positive."""
    _, ids = faiss_search(query_emb, doc_emb, candidates)
    return select_hard_negatives(ids, positives, k)


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


# ----------------------------------------------------------------------------- data


def prepare_data(settings: dict, out_dir: str | Path, seed: int) -> dict:
    """Build the pairs and the document bank once; every device and repeat reads them."""
    from ..records import atomic_write_json

    parse_mine_schedule(settings["mine_schedule"])  # fail at the data step, not in every cell
    check_mining(settings)
    data = settings["data"]
    source = data["source"]
    if source == "synthetic":
        if not data.get("n_train"):
            raise ValueError(
                f"`{KEY}.data.n_train` is null; synthetic data needs a number of training pairs. "
                "Fix: set it (null only caps a pairs_file)."
            )
        n_train, n_heldout = int(data["n_train"]), int(data["n_heldout"])
        queries, docs, _ = synthetic_pairs(
            n_train + n_heldout,
            int(data["vocab_size"]),
            int(data["doc_length"]),
            int(data["query_length"]),
            int(data["topics"]),
            float(data["noise"]),
            seed,
        )
        pairs = {
            "train_query": queries[:n_train],
            "train_doc": docs[:n_train],
            "heldout_query": queries[n_train:],
            "heldout_doc": docs[n_train:],
            "vocab_size": int(data["vocab_size"]),
            "facts": {"tokenizer": "synthetic token ids"},
        }
    elif source == "pairs_file":
        pairs = load_pairs(data, seed)
    else:
        raise ValueError(f"unknown `{KEY}.data.source` {source!r}; allowed: synthetic, pairs_file")
    bank, train_pos, heldout_pos, merged = build_bank(pairs["train_doc"], pairs["heldout_doc"])
    check_mining(settings, len(bank))

    own = token_overlap(pairs["heldout_query"], pairs["heldout_doc"])
    shifted = np.roll(pairs["heldout_doc"], 1, axis=0)
    other = token_overlap(pairs["heldout_query"], shifted)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{DATA_FILE}.tmp.npz"
    np.savez(
        tmp,
        train_query=pairs["train_query"].astype(np.int32),
        train_pos=train_pos.astype(np.int64),
        heldout_query=pairs["heldout_query"].astype(np.int32),
        heldout_pos=heldout_pos.astype(np.int64),
        bank=bank.astype(np.int32),
    )
    tmp.replace(out_dir / DATA_FILE)
    meta = {
        "source": source,
        "path": data.get("path"),
        "n_train": int(len(train_pos)),
        "n_heldout": int(len(heldout_pos)),
        "bank_size": int(len(bank)),
        "duplicate_documents_merged": int(merged),
        "vocab_size": int(pairs["vocab_size"]),
        "query_length": int(pairs["train_query"].shape[1]),
        "doc_length": int(bank.shape[1]),
        "heldout_token_overlap": {
            "own_document": float(own.mean()),
            "other_document": float(other.mean()),
        },
        **pairs["facts"],
        "seed": seed,
    }
    atomic_write_json(out_dir / "meta.json", meta)
    return meta


# ----------------------------------------------------------------------------- model


class Tower(nn.Module):
    """Token ids (B, L), 0 = padding -> L2-normalised float32 embeddings (B, output_dim)."""

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int,
        hidden_dim: int,
        output_dim: int,
        rnn: str = "lstm",
        pooling: str = "mean",
        embedding_init_std: float = 1.0,
    ):
        super().__init__()
        if rnn not in ("lstm", "gru"):
            raise ValueError(f"`{KEY}.model.rnn` is {rnn!r}; allowed: lstm, gru")
        if pooling not in ("mean", "last"):
            raise ValueError(f"`{KEY}.model.pooling` is {pooling!r}; allowed: mean, last")
        self.pooling = pooling
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=PAD)
        with torch.no_grad():  # N(0, std^2) instead of PyTorch's N(0, 1); padding row stays 0
            self.embedding.weight.normal_(0.0, embedding_init_std)
            self.embedding.weight[PAD].zero_()
        cls = nn.LSTM if rnn == "lstm" else nn.GRU
        self.rnn = cls(embedding_dim, hidden_dim, batch_first=True)
        self.projection = nn.Linear(hidden_dim, output_dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = ids != PAD
        outputs, _ = self.rnn(self.embedding(ids))
        if self.pooling == "mean":
            weights = mask.unsqueeze(-1).to(outputs.dtype)
            pooled = (outputs * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        else:  # right padding: the output at the last real token ignores the padding after it
            last = mask.sum(dim=1).clamp(min=1) - 1
            pooled = outputs[torch.arange(ids.shape[0], device=ids.device), last]
        return F.normalize(self.projection(pooled).float(), dim=-1)


class TwoTower(nn.Module):
    def __init__(self, vocab_size: int, model: dict):
        super().__init__()
        args = (
            vocab_size,
            int(model["embedding_dim"]),
            int(model["hidden_dim"]),
            int(model["output_dim"]),
            model["rnn"],
            model["pooling"],
            float(model["embedding_init_std"]),
        )
        self.shared = bool(model["shared_weights"])
        self.query_tower = Tower(*args)
        self.doc_tower = self.query_tower if self.shared else Tower(*args)

    def encode_query(self, ids: torch.Tensor) -> torch.Tensor:
        return self.query_tower(ids)

    def encode_doc(self, ids: torch.Tensor) -> torch.Tensor:
        return self.doc_tower(ids)


def contrastive_logits(
    q: torch.Tensor,
    d: torch.Tensor,
    positives: torch.Tensor | None = None,
    hard: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, B [+ k]) float32 similarities: the batch's documents (column i is query i's
    positive), then each query's own hard negatives (B, k, dim) when given. Another
    pair of the batch with the same positive document is masked out (not a negative).

    The products run in float32 with autocast off, whatever the caller's autocast: at
    initialisation every cosine similarity of a row lies within a few thousandths of the
    others, which a bf16 product (8 mantissa bits) rounds to a few distinct values, so
    the softmax over the batch sees mostly rounding noise and training stalls near
    ln(batch size). ``(q @ d.T).float()`` under autocast would only cast the rounded
    result."""
    with torch.autocast(device_type=q.device.type, enabled=False):
        q = q.float()
        logits = q @ d.float().T
        if positives is not None:
            same = positives[:, None] == positives[None, :]
            same &= ~torch.eye(len(q), dtype=torch.bool, device=q.device)
            logits = logits.masked_fill(same, float("-inf"))
        if hard is not None:
            logits = torch.cat([logits, torch.einsum("bd,bkd->bk", q, hard.float())], dim=1)
    return logits


def contrastive_loss(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax cross-entropy over each row (column i is row i's positive), in float32
    with autocast off."""
    with torch.autocast(device_type=logits.device.type, enabled=False):
        labels = torch.arange(len(logits), device=logits.device)
        return F.cross_entropy(logits.float() / temperature, labels)


# ----------------------------------------------------------------------------- run


def encode_all(encode, ids: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Encode ``ids`` (already on the device) in slices; the result stays on the device."""
    return torch.cat([encode(ids[i : i + batch_size]) for i in range(0, len(ids), batch_size)])


def build_parts(ctx: RunContext) -> TrainingParts:
    """Model, optimizer, data and step for one cell (the benchmarks reuse them)."""
    import faiss

    settings = ctx.workload_settings
    schedule = parse_mine_schedule(settings["mine_schedule"])
    data_dir = Path(ctx.spec["data_path"])
    meta = json.loads((data_dir / "meta.json").read_text())
    with np.load(data_dir / DATA_FILE) as arrays:
        train_query = torch.from_numpy(arrays["train_query"].astype(np.int64))
        train_pos = torch.from_numpy(arrays["train_pos"].astype(np.int64))
        heldout_query = torch.from_numpy(arrays["heldout_query"].astype(np.int64))
        heldout_pos = torch.from_numpy(arrays["heldout_pos"].astype(np.int64))
        bank = torch.from_numpy(arrays["bank"].astype(np.int64))
    bank_size, n_train = len(bank), len(train_query)
    check_mining(settings, bank_size)
    device, dev = ctx.torch_device, ctx.device
    epochs = int(settings["epochs"])
    per_epoch = [mining_mode(schedule, e) for e in range(epochs)]
    mining = settings["mining"]
    k, candidates = int(mining["k"]), int(mining["candidates"])
    search_depth = min(candidates, bank_size)
    metric_depth = min(MRR_DEPTH, bank_size)
    temperature = float(settings["temperature"])
    encode_bs = ctx.eval_batch_size
    amp = ctx.amp
    autocast_dtype = getattr(torch, amp.dtype) if amp.enabled else None

    torch_threads_before = torch.get_num_threads()
    if mining.get("faiss_threads"):
        faiss.omp_set_num_threads(int(mining["faiss_threads"]))
    faiss_threads = int(faiss.omp_get_max_threads())

    torch.manual_seed(ctx.run_seed)  # weights drawn on the CPU, then moved
    model = TwoTower(int(meta["vocab_size"]), settings["model"]).to(device)
    opt = settings["optimizer"]
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=opt["lr"],
        weight_decay=opt["weight_decay"],
        fused=fused_optimizer("auto", device.type),
    )

    train_loader = make_loader(
        BatchTensorDataset(
            query=train_query, doc=bank[train_pos], pos=train_pos, index=torch.arange(n_train)
        ),
        ctx.batch_size,
        True,
        ctx.generator(1),
        ctx.loader_kwargs,
    )
    eval_loader = make_loader(
        BatchTensorDataset(query=heldout_query, pos=heldout_pos),
        ctx.eval_batch_size,
        False,
        None,
        ctx.loader_kwargs,
    )
    # The bank lives on the device: hard negatives are gathered from it inside the
    # step without a host round trip, and mining/evaluation encode it in place.
    bank_dev = bank.to(device)
    train_query_dev = train_query.to(device) if "faiss" in per_epoch else None
    train_pos_np = train_pos.numpy()
    # Hard negatives of the current epoch: (n_train, k) bank indices on the device,
    # gathered by each batch's pair index (None = in-batch negatives only).
    state: dict = {"hard": None}

    def loss_fn(model, batch):
        q = model.encode_query(batch["query"])
        n = len(q)
        hard = None
        if state["hard"] is None:
            d = model.encode_doc(batch["doc"])
        else:  # positives and hard negatives through the document tower in one call
            neg = state["hard"][batch["index"]]  # (B, k) bank indices, on the device
            docs = model.encode_doc(torch.cat([batch["doc"], bank_dev[neg.reshape(-1)]]))
            d, hard = docs[:n], docs[n:].view(n, neg.shape[1], -1)
        logits = contrastive_logits(q, d, batch["pos"], hard)
        loss = contrastive_loss(logits, temperature)
        labels = torch.arange(n, device=q.device)
        return loss, {"correct": (logits.argmax(dim=1) == labels).sum()}

    def before_epoch(epoch: int) -> dict:
        mode = per_epoch[epoch - 1]  # the loop counts epochs from 1, the schedule from 0
        if mode == "none":
            state["hard"] = None
            return {
                "mining": {
                    "mode": "none",
                    "seconds": 0.0,
                    "encode_seconds": 0.0,
                    "search_seconds": 0.0,
                    "index": None,
                    "bank_size": bank_size,
                    "k": 0,
                }
            }
        was_training = model.training
        model.eval()
        dev.synchronize()
        t0 = time.perf_counter()
        with (
            torch.no_grad(),
            torch.autocast(device_type=device.type, dtype=autocast_dtype, enabled=amp.enabled),
        ):
            q_emb = encode_all(model.encode_query, train_query_dev, encode_bs)
            d_emb = encode_all(model.encode_doc, bank_dev, encode_bs)
        q_np, d_np = to_faiss(q_emb), to_faiss(d_emb)
        dev.synchronize()
        t1 = time.perf_counter()
        negatives, facts = mine_hard_negatives(q_np, d_np, train_pos_np, k, search_depth)
        t2 = time.perf_counter()
        state["hard"] = torch.from_numpy(negatives).to(device)
        dev.synchronize()
        t3 = time.perf_counter()
        model.train(was_training)
        return {
            "mining": {
                "mode": "faiss",
                "seconds": t3 - t0,
                "encode_seconds": t1 - t0,
                "search_seconds": t2 - t1,
                "index": "IndexFlatIP",
                "bank_size": bank_size,
                "queries": n_train,
                "k": k,
                "candidates": search_depth,
                "faiss_threads": faiss_threads,
                **facts,
            }
        }

    def evaluate(model, loader, ctx):
        queries, positives = [], []
        for batch in loader:
            queries.append(model.encode_query(batch["query"].to(device, non_blocking=True)))
            positives.append(batch["pos"])
        docs = encode_all(model.encode_doc, bank_dev, encode_bs)
        q = torch.cat(queries)
        # One transfer at the end; FAISS gets CPU float32 contiguous arrays only.
        return {
            "outputs": (to_faiss(q), to_faiss(docs), torch.cat(positives).cpu().numpy()),
            "samples": len(q) + bank_size,
        }

    def score(outputs) -> dict:
        q, d, positives = outputs
        _, ranked = faiss_search(q, d, metric_depth)
        return retrieval_metrics(ranked, positives)

    baseline = random_baseline(bank_size, metric_depth)
    model_settings = settings["model"]
    parts = TrainingParts(
        model=model,
        optimizer=optimizer,
        train_loader=train_loader,
        eval_loader=eval_loader,
        loss_fn=loss_fn,
        evaluate=evaluate,
        score=score,
        before_epoch=before_epoch,
        primary_metric="mrr",
        higher_is_better=True,
        train_metrics=lambda sums, n: {"in_batch_accuracy": sums["correct"] / n},
        model_name=(
            f"TwoTower({model_settings['rnn'].upper()}, {model_settings['pooling']} pooling, "
            f"dim {model_settings['output_dim']}, "
            f"{'shared' if model_settings['shared_weights'] else 'separate'} towers)"
        ),
        extra_settings={
            "faiss_version": faiss.__version__,
            "rnn": model_settings["rnn"],
            "pooling": model_settings["pooling"],
            "embedding_dim": model_settings["embedding_dim"],
            "hidden_dim": model_settings["hidden_dim"],
            "output_dim": model_settings["output_dim"],
            "embedding_init_std": model_settings["embedding_init_std"],
            "shared_weights": bool(model_settings["shared_weights"]),
            "temperature": temperature,
            "learning_rate": opt["lr"],
            "weight_decay": opt["weight_decay"],
            "mine_schedule": settings["mine_schedule"],
            "mining_per_epoch": per_epoch,
            "mining": {
                "k": k,
                "candidates": search_depth,
                "index": "IndexFlatIP",
                "faiss_threads_requested": mining.get("faiss_threads"),
                "faiss_threads_in_force": faiss_threads,
                "torch_threads_before_faiss": torch_threads_before,
                "torch_threads_after_faiss": torch.get_num_threads(),
                "timing": "before each epoch, outside every timed region; "
                "device synced at its edges",
            },
            "bank_size": bank_size,
            "metric_depth": metric_depth,
            "metrics": "recall@k and MRR (1/rank within the top metric_depth, else 0) of the "
            "true document among the whole bank, held-out queries, IndexFlatIP",
            "random_baseline": baseline,
            "eval_samples_are": "held-out queries + bank documents encoded per evaluation",
            "data": {
                key: meta[key]
                for key in (
                    "source",
                    "n_train",
                    "n_heldout",
                    "bank_size",
                    "vocab_size",
                    "query_length",
                    "doc_length",
                    "duplicate_documents_merged",
                    "heldout_token_overlap",
                    "tokenizer",
                )
                if key in meta
            },
        },
    )

    def finish(result: dict) -> dict:
        """Workload facts added to the loop's result."""
        best = result["task"]["best_epoch"]
        if best is not None:
            result["task"].update(result["epochs"][best - 1]["eval_metrics"])
        result["task"]["random_baseline"] = baseline
        result["mining"] = {
            "seconds": sum(
                e.get("extra", {}).get("mining", {}).get("seconds", 0.0) for e in result["epochs"]
            ),
            "epochs_mined": sum(mode == "faiss" for mode in per_epoch),
            "method": "faiss.IndexFlatIP over the whole bank before each faiss epoch; "
            "not in timed.seconds",
        }
        return result

    parts.finish = finish
    return parts


def run(ctx: RunContext) -> dict:
    return run_training(build_parts(ctx), ctx)
