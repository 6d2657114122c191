"""Seed report 000: DistilBERT multi-label text classification.

``DistilBertForSequenceClassification`` with ``problem_type="multi_label_classification"``
and max pooling by default (``text_multilabel_model.PooledDistilBert``; ``model.pooling: cls`` reads
the first token as DistilBERT does) (BCE-with-logits, computed here in float32 outside
autocast), AdamW, gradient
accumulation, one fixed sequence length per run (varying shapes make MPS recompile).
The default model is a small DistilBERT built from ``DistilBertConfig`` with a
WordPiece tokenizer trained offline on the training split, which writes every text
as ``[CLS] ... [SEP]``;
``model.pretrained`` loads a hub id or local folder instead, and fails loudly (never
falls back) when it cannot.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from trainbench.measure.context import RunContext
from trainbench.measure.data import BatchTensorDataset
from trainbench.measure.devices import fused_optimizer
from trainbench.measure.precision import upcast
from trainbench.measure.training import TrainingParts, run_training
from trainbench.workloads.common import (
    Step,
    assemble_parts,
    best_epoch_metrics,
    cell_loaders,
    load_cell_data,
    optimizer_updates,
    to_device,
    warmup_updates,
)
from trainbench.workloads.metrics import multilabel_metrics

DATA_FILE = "dataset.npz"
TOKENIZER_DIR = "tokenizer"
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


class PretrainedLoadError(RuntimeError):
    """A pretrained model or tokenizer could not be loaded (no silent fallback)."""


def load_help(name: str) -> str:
    return (
        f"could not load pretrained model {name!r}. Provide it as a local folder written by "
        "save_pretrained (set workloads.text_multilabel.model.pretrained to that path), or "
        "download it once on a machine with a network and run with HF_HUB_OFFLINE=1 so the "
        "Hugging Face cache is used. trainbench never falls back to a random model."
    )


def continuing_subwords(texts: list[str], lowercase: bool) -> list[str]:
    """Every ``##c`` token WordPiece training creates for ``texts``, sorted.

    The trainer (tokenizers 0.23.3) gives these tokens ids in hash-map order, and
    those ids break ties between equally frequent merges, so the same texts gave a
    different vocabulary on each run (huggingface/tokenizers#1794). Declared up
    front, they get ids in this sorted order and training is deterministic."""
    from tokenizers import BertWordPieceTokenizer

    probe = BertWordPieceTokenizer(lowercase=lowercase)
    chars: set[str] = set()
    for text in texts:
        for word, _ in probe.pre_tokenizer.pre_tokenize_str(probe.normalizer.normalize_str(text)):
            chars.update(word[1:])
    return ["##" + char for char in sorted(chars)]


def train_wordpiece(texts: list[str], vocab_size: int, min_frequency: int, lowercase: bool):
    """A WordPiece tokenizer trained on the training split only (no network); the same
    texts give the same vocabulary on every run and machine."""
    from tokenizers import BertWordPieceTokenizer
    from tokenizers.processors import BertProcessing
    from transformers import PreTrainedTokenizerFast

    trainer = BertWordPieceTokenizer(lowercase=lowercase)
    trainer.train_from_iterator(
        texts,
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS + continuing_subwords(texts, lowercase),
        show_progress=False,
    )
    # The trained vocabulary in a fresh tokenizer: only SPECIAL_TOKENS are special.
    wordpiece = BertWordPieceTokenizer(vocab=trainer.get_vocab(), lowercase=lowercase)
    # "[CLS] text [SEP]" as BERT's own tokenizer writes it: the classification head
    # reads position 0, which must be [CLS] and not the document's first word.
    wordpiece._tokenizer.post_processor = BertProcessing(
        ("[SEP]", wordpiece.token_to_id("[SEP]")), ("[CLS]", wordpiece.token_to_id("[CLS]"))
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=wordpiece._tokenizer,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def load_pretrained_tokenizer(name: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except Exception as exc:  # OSError, HFValidationError, connection errors...
        raise PretrainedLoadError(f"{load_help(name)} ({type(exc).__name__}: {exc})") from exc


def prepare_data(settings: dict, out_dir: str | Path, seed: int) -> dict:
    """Tokenize every split once, at the fixed sequence length, and cache the tokenizer."""
    from trainbench.common.records import atomic_write_json
    from trainbench.workloads.textdata.splits import load_splits

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    splits = load_splits(settings["data"], seed)
    train, dev = splits["train"], splits["dev"]
    pretrained = settings["model"].get("pretrained")
    tok_settings = settings["tokenizer"]
    if pretrained:
        tokenizer = load_pretrained_tokenizer(pretrained)
        tokenizer_kind = f"pretrained {pretrained}"
    else:
        tokenizer = train_wordpiece(
            train.texts,
            tok_settings["vocab_size"],
            tok_settings["min_frequency"],
            tok_settings["lowercase"],
        )
        tokenizer_kind = "WordPiece trained on the training split"
    tokenizer.save_pretrained(str(out_dir / TOKENIZER_DIR))

    max_length = int(settings["max_length"])
    arrays: dict[str, np.ndarray] = {}
    truncated: dict[str, float] = {}
    for name, split in (("train", train), ("dev", dev)):
        full = tokenizer(split.texts, truncation=False, padding=False)["input_ids"]
        truncated[name] = float(np.mean([len(ids) > max_length for ids in full])) if full else 0.0
        enc = tokenizer(
            split.texts,
            truncation=True,
            padding="max_length",
            max_length=max_length,
            return_tensors="np",
        )
        arrays[f"{name}_input_ids"] = enc["input_ids"].astype(np.int32)
        arrays[f"{name}_attention_mask"] = enc["attention_mask"].astype(np.uint8)
        arrays[f"{name}_labels"] = split.labels.astype(np.uint8)
    tmp = out_dir / f".{DATA_FILE}.tmp.npz"
    np.savez(tmp, **arrays)
    tmp.replace(out_dir / DATA_FILE)
    meta = {
        "source": settings["data"]["source"],
        "label_names": list(train.label_names),
        "n_train": len(train),
        "n_dev": len(dev),
        "label_frequency_train": {
            n: float(train.labels[:, i].mean()) for i, n in enumerate(train.label_names)
        },
        "label_frequency_dev": {
            n: float(dev.labels[:, i].mean()) for i, n in enumerate(dev.label_names)
        },
        "max_length": max_length,
        "truncated_fraction": truncated,
        "vocab_size": len(tokenizer),
        "tokenizer": tokenizer_kind,
        "seed": seed,
    }
    atomic_write_json(out_dir / "meta.json", meta)
    return meta


def build_model(settings: dict, num_labels: int, vocab_size: int, pad_token_id: int = 0):
    """The small default DistilBERT, or the pretrained one named in the config."""
    from trainbench.workloads.text_multilabel_model import PooledDistilBert
    from transformers import DistilBertConfig

    model_settings = settings["model"]
    pretrained = model_settings.get("pretrained")
    if pretrained:
        try:
            model = PooledDistilBert.from_pretrained(
                pretrained,
                num_labels=num_labels,
                problem_type="multi_label_classification",
            )
        except Exception as exc:
            raise PretrainedLoadError(
                f"{load_help(pretrained)} ({type(exc).__name__}: {exc})"
            ) from exc
        model.config.pooling = model_settings["pooling"]
        return model
    rows = model_settings.get("vocab_size") or vocab_size
    if rows < vocab_size:
        raise ValueError(
            f"workloads.text_multilabel.model.vocab_size ({rows}) is smaller than the tokenizer's "
            f"vocabulary ({vocab_size}); raise it or set it to null"
        )
    positions = model_settings.get("max_position_embeddings") or int(settings["max_length"])
    if positions < int(settings["max_length"]):
        raise ValueError(
            f"workloads.text_multilabel.model.max_position_embeddings ({positions}) is below "
            f"max_length ({settings['max_length']})"
        )
    config = DistilBertConfig(
        vocab_size=rows,
        max_position_embeddings=positions,
        dim=model_settings["dim"],
        n_layers=model_settings["n_layers"],
        n_heads=model_settings["n_heads"],
        hidden_dim=model_settings["hidden_dim"],
        dropout=model_settings["dropout"],
        attention_dropout=model_settings["attention_dropout"],
        num_labels=num_labels,
        problem_type="multi_label_classification",
        pad_token_id=pad_token_id,
        pooling=model_settings["pooling"],
    )
    return PooledDistilBert(config)


def multilabel_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy with logits (what the model computes with
    ``problem_type="multi_label_classification"``), in float32 with autocast off on
    every device: the loss and its gradient are not left to each backend's autocast
    op lists."""
    with torch.autocast(device_type=logits.device.type, enabled=False):
        return F.binary_cross_entropy_with_logits(upcast(logits), upcast(labels))


def fused_adamw(setting, device_type: str) -> bool | None:
    """Fused AdamW where it exists (CUDA); None = torch's choice."""
    return fused_optimizer(setting, device_type)


def token_dataset(arrays, split: str) -> BatchTensorDataset:
    """One tokenized split (``train`` or ``dev``) as int64 ids and mask, float labels."""
    return BatchTensorDataset(
        input_ids=torch.from_numpy(arrays[f"{split}_input_ids"].astype(np.int64)),
        attention_mask=torch.from_numpy(arrays[f"{split}_attention_mask"].astype(np.int64)),
        labels=torch.from_numpy(arrays[f"{split}_labels"].astype(np.float32)),
    )


def warmup_linear_decay(
    optimizer: torch.optim.Optimizer, warmup: int, total: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup`` updates, then linear decay to 0 at ``total``,
    per optimizer step, as in BERT fine-tuning."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda update: (
            (update + 1) / max(1, warmup)
            if update < warmup
            else max(0.0, (total - update) / max(1, total - warmup))
        ),
    )


def multilabel_step(threshold: float, label_names: list[str]) -> Step:
    """BCE step; evaluation gathers logits and labels on the device, and ``score``
    thresholds the sigmoid at ``threshold`` for the multi-label metrics."""

    def loss_fn(model, batch):
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return multilabel_loss(out.logits, batch["labels"]), {}

    def evaluate(model, loader, ctx):
        logits, labels, loss_sum, n = [], [], torch.zeros((), device=ctx.torch_device), 0
        for batch in loader:
            batch = to_device(batch, ctx.torch_device)
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
            loss_sum += multilabel_loss(out.logits, batch["labels"]) * len(batch["labels"])
            logits.append(upcast(out.logits))
            labels.append(batch["labels"])
            n += len(batch["labels"])
        # One transfer at the end: the predictions leave the device once.
        return {
            "outputs": (torch.cat(logits).cpu(), torch.cat(labels).cpu(), (loss_sum / n).item()),
            "samples": n,
        }

    def score(outputs) -> dict:
        logits, labels, loss = outputs
        predictions = (torch.sigmoid(logits) >= threshold).numpy().astype(int)
        metrics = multilabel_metrics(labels.numpy().astype(int), predictions, label_names)
        metrics["loss"] = loss
        return metrics

    return Step(loss_fn, evaluate, score)


def best_epoch_facts(threshold: float) -> Callable[[dict], dict]:
    """The ``finish`` hook: the best epoch's per-label and F1 metrics into the task."""

    def finish(result: dict) -> dict:
        """Workload facts added to the loop's result."""
        best_metrics = best_epoch_metrics(result)
        if best_metrics is not None:
            result["task"].update(
                {
                    "per_label": best_metrics["per_label"],
                    "micro_f1": best_metrics["micro_f1"],
                    "macro_f1": best_metrics["macro_f1"],
                    "threshold": threshold,
                }
            )
        return result

    return finish


DATA_FACTS = (
    "source",
    "n_train",
    "n_dev",
    "label_names",
    "truncated_fraction",
    "tokenizer",
    "vocab_size",
)


def build_parts(ctx: RunContext) -> TrainingParts:
    """Model, optimizer, data and step for one cell (the benchmarks reuse them)."""
    settings = ctx.workload_settings
    meta, arrays = load_cell_data(ctx, DATA_FILE)
    label_names = meta["label_names"]

    torch.manual_seed(ctx.run_seed)  # weights drawn on the CPU, then moved
    model = build_model(settings, len(label_names), int(meta["vocab_size"])).to(ctx.torch_device)
    opt = settings["optimizer"]
    fused = fused_adamw(opt["fused"], ctx.torch_device.type)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=opt["lr"], weight_decay=opt["weight_decay"], fused=fused
    )
    loaders = cell_loaders(ctx, token_dataset(arrays, "train"), token_dataset(arrays, "dev"))
    total_updates = optimizer_updates(settings, loaders[0])
    warmup = warmup_updates(opt, total_updates)
    threshold = float(settings["threshold"])
    return assemble_parts(
        model,
        optimizer,
        loaders,
        multilabel_step(threshold, label_names),
        step_scheduler=warmup_linear_decay(optimizer, warmup, total_updates),
        primary_metric="micro_f1",
        model_name=settings["model"].get("pretrained")
        or "DistilBERT (DistilBertConfig, random init)",
        extra_settings={
            "max_length": int(meta["max_length"]),
            "threshold": threshold,
            "fused_adamw": fused,
            "learning_rate": opt["lr"],
            "lr_schedule": f"linear warm-up over {warmup} of {total_updates} updates, then linear decay",
            "data": {k: meta[k] for k in DATA_FACTS},
        },
        finish=best_epoch_facts(threshold),
    )


def run(ctx: RunContext) -> dict:
    return run_training(build_parts(ctx), ctx)
