"""What a two_tower run records beside the loop's result (seed report 003): the
settings in force (``extra_settings``: the model, the mining, FAISS's process and its
threads, the data) and the ``finish`` hook's task metrics and mining totals."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from trainbench.workloads import two_tower_warmup as warmup
from trainbench.workloads.common import best_epoch_metrics


def tower_name(model_settings: dict) -> str:
    """``TwoTower(LSTM, mean pooling, dim 64, separate towers)``."""
    return (
        f"TwoTower({model_settings['rnn'].upper()}, {model_settings['pooling']} pooling, "
        f"dim {model_settings['output_dim']}, "
        f"{'shared' if model_settings['shared_weights'] else 'separate'} towers)"
    )


DATA_FACTS = (
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
MODEL_FACTS = ("rnn", "pooling", "embedding_dim", "hidden_dim", "output_dim", "embedding_init_std")


@dataclass(frozen=True)
class MiningPlan:
    """What the schedule, the config and the bank make of mining: each epoch's mode,
    ``k`` hard negatives per query among the ``candidates`` nearest documents of the
    bank, and the ranking depth of the metrics."""

    bank_size: int
    per_epoch: list[str]
    k: int
    candidates: int
    metric_depth: int


def two_tower_settings(
    settings: dict, meta: dict, plan: MiningPlan, threads: dict, baseline: dict
) -> dict:
    """The run's settings recorded with its result (``extra_settings``)."""
    model_settings, opt = settings["model"], settings["optimizer"]
    return {
        "faiss_version": threads["faiss_version"],
        **{key: model_settings[key] for key in MODEL_FACTS},
        "shared_weights": bool(model_settings["shared_weights"]),
        "temperature": float(settings["temperature"]),
        "learning_rate": opt["lr"],
        "weight_decay": opt["weight_decay"],
        "mine_schedule": settings["mine_schedule"],
        "mining_per_epoch": plan.per_epoch,
        "mining": {
            "k": plan.k,
            "candidates": plan.candidates,
            "index": "IndexFlatIP",
            "faiss_threads_requested": settings["mining"].get("faiss_threads"),
            "faiss_threads_in_force": threads["faiss"],
            "faiss_process": "FAISS searches in a process of its own (one OpenMP runtime "
            "per process: torch's and faiss's wheels each ship one on a Mac); arrays go "
            "there and back by pipe, inside search_seconds; started and warmed with one "
            "search before the first timed step, its OpenMP threads passive (they sleep "
            "when a search ends, never spin into the timed steps that follow it)",
            "faiss_wait_policy": threads["wait_policy"],
            "faiss_start_seconds": threads["start_seconds"],
            "faiss_warmup_search_seconds": threads["warmup_search_seconds"],
            "torch_threads_before_faiss": threads["torch"],
            "torch_threads_after_faiss": torch.get_num_threads(),
            "timing": "before each epoch, outside every timed region; device synced at its edges",
            "phase_warmup": "the first epoch of a new phase of the schedule warms its step "
            f"({warmup.PASSES} untimed forward and backward passes, no optimizer step) "
            "before its first timed step: extra.mining.phase_warmup of that epoch",
        },
        "bank_size": plan.bank_size,
        "metric_depth": plan.metric_depth,
        "metrics": "recall@k and MRR (1/rank within the top metric_depth, else 0) of the "
        "true document among the whole bank, held-out queries, IndexFlatIP",
        "random_baseline": baseline,
        "eval_samples_are": "held-out queries + bank documents encoded per evaluation",
        "data": {key: meta[key] for key in DATA_FACTS if key in meta},
    }


def mining_summary(baseline: dict, per_epoch: list[str]) -> Callable[[dict], dict]:
    """The ``finish`` hook: the best epoch's metrics, the random baseline, and the
    mining time of the whole run."""

    def finish(result: dict) -> dict:
        """Workload facts added to the loop's result."""
        best_metrics = best_epoch_metrics(result)
        if best_metrics is not None:
            result["task"].update(best_metrics)
        result["task"]["random_baseline"] = baseline
        result["mining"] = {
            "seconds": sum(
                e.get("extra", {}).get("mining", {}).get("seconds", 0.0) for e in result["epochs"]
            ),
            "epochs_mined": sum(mode == "faiss" for mode in per_epoch),
            "phase_warmup_seconds": sum(
                e.get("extra", {}).get("mining", {}).get("phase_warmup", {}).get("seconds", 0.0)
                for e in result["epochs"]
            ),
            "method": "faiss.IndexFlatIP over the whole bank before each faiss epoch; "
            "not in timed.seconds (nor is the phase warm-up)",
        }
        return result

    return finish
