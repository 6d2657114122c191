"""Seed report 003: a two-tower retriever trained with FAISS hard-negative mining.

Query and document towers (embedding, LSTM or GRU with ``batch_first=True``,
masked mean or last-token pooling, a projection, L2-normalised output) are
trained with a softmax over query-document similarities / temperature: every
other document of the batch is a negative, and in the epochs ``mine_schedule``
names ``faiss``, so are ``mining.k`` hard negatives per query, mined before the
epoch from the whole document bank with ``faiss.IndexFlatIP``.

Mining runs in the training loop's ``before_epoch`` hook, outside every timed
region; it syncs the device at its edges, times itself, and is recorded per
epoch under ``extra.mining``. The first epoch of a new phase of the schedule then warms
the phase's step there, untimed (:mod:`.two_tower_warmup`), and the FAISS process is
started and warmed before the first timed step (:func:`set_faiss_threads`). Everything handed to FAISS goes through
:func:`to_faiss` (``x.detach().to("cpu", torch.float32).contiguous().numpy()``):
FAISS reads any non-CUDA tensor's pointer as CPU memory
(docs/measurement-reference.md section 8). Metrics: recall@1/5/10 and MRR of
the true document among the whole bank, for the held-out queries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from trainbench.measure.context import RunContext
from trainbench.measure.data import BatchTensorDataset, copy_to
from trainbench.measure.training import TrainingParts, run_training
from trainbench.workloads.common import (
    Step,
    adam,
    assemble_parts,
    cell_loaders,
    load_cell_data,
)
from trainbench.workloads.two_tower_data import (  # noqa: F401 (the data API, also reached as two_tower.*)
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
from trainbench.workloads.two_tower_model import (  # noqa: F401 (the model API, also reached as two_tower.*)
    Tower,
    TwoTower,
    contrastive_logits,
    contrastive_loss,
    encode_all,
)
from trainbench.workloads.two_tower_record import (  # noqa: F401 (also reached as two_tower.*)
    MiningPlan,
    mining_summary,
    tower_name,
    two_tower_settings,
)
from trainbench.workloads.two_tower_schedule import (  # noqa: F401 (the schedule API, also reached as two_tower.*)
    MINING_MODES,
    SCHEDULE_KEY,
    check_mining,
    mining_mode,
    parse_mine_schedule,
)
from trainbench.workloads.two_tower_search import (  # noqa: F401 (the search API, also reached as two_tower.*)
    MRR_DEPTH,
    RECALL_KS,
    faiss_search,
    random_baseline,
    retrieval_metrics,
    select_hard_negatives,
    set_faiss_threads,
    to_faiss,
)
from trainbench.workloads.two_tower_warmup import process_counters, warm_phase

DATA_FILE = "dataset.npz"
PAIR_ARRAYS = ("train_query", "train_pos", "heldout_query", "heldout_pos", "bank")


# ----------------------------------------------------------------------------- mining

# Mining and scoring call faiss_search through this module's global, looked up at call
# time: replacing two_tower.faiss_search reaches both.


def mine_hard_negatives(
    query_emb: np.ndarray, doc_emb: np.ndarray, positives: np.ndarray, k: int, candidates: int
) -> tuple[np.ndarray, dict]:
    """Search the ``candidates`` nearest bank documents of every query
    (IndexFlatIP) and keep the first ``k`` that are not its positive."""
    _, ids = faiss_search(query_emb, doc_emb, candidates)
    return select_hard_negatives(ids, positives, k)


# ----------------------------------------------------------------------------- data


def prepare_data(settings: dict, out_dir: str | Path, seed: int) -> dict:
    """Build the pairs and the document bank once; every device and repeat reads them."""
    from trainbench.common.records import atomic_write_json

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


# ----------------------------------------------------------------------------- run


# The work per step of each mining mode (TrainingParts.epoch_phases).
PHASES = {
    "none": "in-batch negatives",
    "faiss": "in-batch and FAISS-mined hard negatives",
}


def mining_plan(settings: dict, schedule: list[tuple[int, int, str]], bank_size: int) -> MiningPlan:
    """The cell's :class:`MiningPlan`, its settings checked against the bank."""
    check_mining(settings, bank_size)
    mining = settings["mining"]
    return MiningPlan(
        bank_size=bank_size,
        per_epoch=[mining_mode(schedule, e) for e in range(int(settings["epochs"]))],
        k=int(mining["k"]),
        candidates=min(int(mining["candidates"]), bank_size),
        metric_depth=min(MRR_DEPTH, bank_size),
    )


def load_pair_tensors(ctx: RunContext) -> tuple[dict, dict[str, torch.Tensor]]:
    """The cell's prepared pairs: meta, and the queries, positives and bank as int64."""
    meta, arrays = load_cell_data(ctx, DATA_FILE)
    with arrays:
        tensors = {name: torch.from_numpy(arrays[name].astype(np.int64)) for name in PAIR_ARRAYS}
    return meta, tensors


@dataclass
class HardNegatives:
    """The ``before_epoch`` hook: in each ``faiss`` epoch it mines every training
    query's hard negatives from the whole bank, outside every timed region with the
    device synced at its edges, and holds them for the step in ``current``: (n_train,
    k) bank indices on the device, gathered by each batch's pair index (None = in-batch
    negatives only)."""

    model: TwoTower
    ctx: RunContext
    plan: MiningPlan
    queries: torch.Tensor | None  # the training queries on the device (None: no faiss epoch)
    bank: torch.Tensor  # the document bank on the device
    positives: np.ndarray  # each training query's bank index
    faiss_threads: int
    current: torch.Tensor | None = None
    # The step's loss (retrieval_step's loss_fn): the phase warm-up runs it.
    loss_fn: Callable | None = None

    def before_epoch(self, epoch: int) -> dict:
        """Mine (or clear) the epoch's hard negatives and, in the first epoch of a new
        phase, warm the phase's step (:func:`.two_tower_warmup.warm_phase`); the facts
        recorded with it, with this process's counters when the hook began (their
        differences from one epoch's hook to the next: that epoch's steps and passes)."""
        counters = process_counters()
        per_epoch = self.plan.per_epoch
        mode = per_epoch[epoch - 1]  # the loop counts epochs from 1, the schedule from 0
        if mode == "none":
            self.current = None
            facts = self.skipped()
        else:
            facts = self.mine()
        if epoch > 1 and mode != per_epoch[epoch - 2] and self.loss_fn is not None:
            facts["phase_warmup"] = warm_phase(
                self.loss_fn, self.model, self.warmup_batch(), self.ctx
            )
        facts["process_counters"] = counters
        return {"mining": facts}

    def warmup_batch(self) -> dict:
        """The phase warm-up's batch: the first ``batch_size`` training pairs, in order
        (nothing drawn from the loader, whose order stays the run's), on the device."""
        n = min(self.ctx.batch_size, len(self.positives))
        device = self.ctx.torch_device
        pos = torch.from_numpy(self.positives[:n]).to(device)
        return {
            "query": self.queries[:n],
            "doc": self.bank[pos],
            "pos": pos,
            "index": torch.arange(n, device=device),
        }

    def skipped(self) -> dict:
        """The facts of an epoch that mines nothing."""
        return {
            "mode": "none",
            "seconds": 0.0,
            "encode_seconds": 0.0,
            "search_seconds": 0.0,
            "index": None,
            "bank_size": self.plan.bank_size,
            "k": 0,
        }

    def mine(self) -> dict:
        """Encode the queries and the bank, search, keep k negatives per query; timed."""
        model, device, dev, amp = self.model, self.ctx.torch_device, self.ctx.device, self.ctx.amp
        autocast_dtype = getattr(torch, amp.dtype) if amp.enabled else None
        encode_bs = self.ctx.eval_batch_size
        was_training = model.training
        model.eval()
        dev.synchronize()
        t0 = time.perf_counter()
        with (
            torch.no_grad(),
            torch.autocast(device_type=device.type, dtype=autocast_dtype, enabled=amp.enabled),
        ):
            q_emb = encode_all(model.encode_query, self.queries, encode_bs)
            d_emb = encode_all(model.encode_doc, self.bank, encode_bs)
        q_np, d_np = to_faiss(q_emb), to_faiss(d_emb)
        dev.synchronize()
        t1 = time.perf_counter()
        k, candidates = self.plan.k, self.plan.candidates
        negatives, facts = mine_hard_negatives(q_np, d_np, self.positives, k, candidates)
        t2 = time.perf_counter()
        self.current = torch.from_numpy(negatives).to(device)
        dev.synchronize()
        t3 = time.perf_counter()
        model.train(was_training)
        return {
            "mode": "faiss",
            "seconds": t3 - t0,
            "encode_seconds": t1 - t0,
            "search_seconds": t2 - t1,
            "index": "IndexFlatIP",
            "bank_size": self.plan.bank_size,
            "queries": len(self.queries),
            "k": k,
            "candidates": candidates,
            "faiss_threads": self.faiss_threads,
            **facts,
        }


def retrieval_step(
    negatives: HardNegatives, temperature: float, encode_bs: int, metric_depth: int
) -> Step:
    """Contrastive step over the batch's documents and the mined hard negatives;
    evaluation encodes the held-out queries and the whole bank, and ``score`` ranks the
    bank (FAISS) for recall@k and MRR."""
    bank = negatives.bank

    def loss_fn(model, batch):
        q = model.encode_query(batch["query"])
        n = len(q)
        hard = None
        if negatives.current is None:
            d = model.encode_doc(batch["doc"])
        else:  # positives and hard negatives through the document tower in one call
            neg = negatives.current[batch["index"]]  # (B, k) bank indices, on the device
            docs = model.encode_doc(torch.cat([batch["doc"], bank[neg.reshape(-1)]]))
            d, hard = docs[:n], docs[n:].view(n, neg.shape[1], -1)
        logits = contrastive_logits(q, d, batch["pos"], hard)
        loss = contrastive_loss(logits, temperature)
        labels = torch.arange(n, device=q.device)
        return loss, {"correct": (logits.argmax(dim=1) == labels).sum()}

    def evaluate(model, loader, ctx):
        queries, positives, on = [], [], ctx.torch_device
        for batch in loader:
            queries.append(model.encode_query(copy_to(batch["query"], on)))
            positives.append(batch["pos"])
        docs = encode_all(model.encode_doc, bank.to(on), encode_bs)
        q = torch.cat(queries)
        # One transfer at the end; FAISS gets CPU float32 contiguous arrays only.
        return {
            "outputs": (to_faiss(q), to_faiss(docs), torch.cat(positives).cpu().numpy()),
            "samples": len(q) + negatives.plan.bank_size,
        }

    def score(outputs) -> dict:
        q, d, positives = outputs
        _, ranked = faiss_search(q, d, metric_depth)
        return retrieval_metrics(ranked, positives)

    return Step(loss_fn, evaluate, score)


def build_parts(ctx: RunContext) -> TrainingParts:
    """Model, optimizer, data and step for one cell (the benchmarks reuse them)."""
    settings = ctx.workload_settings
    # First: a cell without FAISS fails before reading its data.
    threads = set_faiss_threads(settings["mining"], int(settings["model"]["output_dim"]))
    schedule = parse_mine_schedule(settings["mine_schedule"])
    meta, data = load_pair_tensors(ctx)
    bank, train_query, train_pos = data["bank"], data["train_query"], data["train_pos"]
    plan = mining_plan(settings, schedule, len(bank))
    device = ctx.torch_device

    torch.manual_seed(ctx.run_seed)  # weights drawn on the CPU, then moved
    model = TwoTower(int(meta["vocab_size"]), settings["model"]).to(device)
    optimizer = adam(model, settings["optimizer"], device)
    loaders = cell_loaders(
        ctx,
        BatchTensorDataset(
            query=train_query,
            doc=bank[train_pos],
            pos=train_pos,
            index=torch.arange(len(train_query)),
        ),
        BatchTensorDataset(query=data["heldout_query"], pos=data["heldout_pos"]),
    )
    # The bank lives on the device: hard negatives are gathered from it inside the
    # step without a host round trip, and mining/evaluation encode it in place.
    negatives = HardNegatives(
        model=model,
        ctx=ctx,
        plan=plan,
        queries=train_query.to(device) if "faiss" in plan.per_epoch else None,
        bank=bank.to(device),
        positives=train_pos.numpy(),
        faiss_threads=threads["faiss"],
    )
    step = retrieval_step(
        negatives, float(settings["temperature"]), ctx.eval_batch_size, plan.metric_depth
    )
    negatives.loss_fn = step.loss_fn
    baseline = random_baseline(plan.bank_size, plan.metric_depth)
    return assemble_parts(
        model,
        optimizer,
        loaders,
        step,
        before_epoch=negatives.before_epoch,
        epoch_phases=[PHASES[mode] for mode in plan.per_epoch],
        primary_metric="mrr",
        higher_is_better=True,
        train_metrics=lambda sums, n: {"in_batch_accuracy": sums["correct"] / n},
        model_name=tower_name(settings["model"]),
        extra_settings=two_tower_settings(settings, meta, plan, threads, baseline),
        finish=mining_summary(baseline, plan.per_epoch),
    )


def run(ctx: RunContext) -> dict:
    return run_training(build_parts(ctx), ctx)
