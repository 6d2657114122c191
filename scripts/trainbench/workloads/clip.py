"""Seed report 004: a small CLIP trained on image-caption pairs.

The seed trained a 76.7M-parameter CLIP (image encoder + text transformer,
contrastive loss) on CPU and MPS. Here the data are deterministic synthetic
scenes rendered with numpy: 1..max_shapes coloured shapes at named positions,
each with the caption that describes it ("a large red circle at the top left
and a small blue square at the center"), tokenized with a word vocabulary built
from the training captions.

Model: an image encoder (a small CNN, or a ViT with patch embedding) and a text
transformer (token + position embeddings, ``nn.TransformerEncoder``, pooled at
the EOS token), each projected to ``embed_dim`` and L2-normalised, and a learnable
temperature ``logit_scale`` (init log(1/0.07), clamped at log(100) as in CLIP).
Loss: symmetric InfoNCE, (CE(image->text) + CE(text->image)) / 2.

Metrics on the held-out pairs: image->text and text->image top-1/top-5 retrieval
over the whole held-out set. Identical caption strings occur (a one-shape scene
has few variants), and their text embeddings are identical, so a retrieval that
lands on a pair with the same caption string counts as correct, in both
directions. Primary metric: ``retrieval_top1`` = mean of the two top-1 values.

``configs/clip-full.yaml`` holds the full-scale size: a ViT-image CLIP with
CLIP's own text tower, 76,433,921 parameters (seed report 004: 76.7M).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from trainbench.measure.context import RunContext
from trainbench.measure.data import BatchTensorDataset
from trainbench.measure.devices import fused_optimizer
from trainbench.measure.precision import upcast
from trainbench.measure.training import TrainingParts, run_training
from trainbench.workloads.clip_data import (  # noqa: F401 (the data API, also reached as clip.*)
    BOS,
    COLOURS,
    DATA_FILE,
    EOS,
    PAD,
    POSITIONS,
    SHAPES,
    SIZES,
    SPECIAL_TOKENS,
    UNK,
    build_vocab,
    caption_groups,
    caption_of,
    chance_top1,
    make_pairs,
    prepare_data,
    render,
    sample_objects,
    shape_mask,
    text_length_for,
    tokenize,
)
from trainbench.workloads.clip_model import (  # noqa: F401 (the model API, also reached as clip.*)
    CLIP,
    LOGIT_SCALE_INIT,
    LOGIT_SCALE_MAX,
    CNNImageEncoder,
    TextEncoder,
    ViTImageEncoder,
    build_model,
    clip_loss,
    model_sizes,
)
from trainbench.workloads.common import (
    Step,
    assemble_parts,
    cell_loaders,
    load_cell_data,
    optimizer_updates,
    to_device,
    warmup_updates,
)

# ----------------------------------------------------------------------------- metrics


def retrieval_metrics(
    similarity: np.ndarray | torch.Tensor, groups: np.ndarray, ks: tuple[int, ...] = (1, 5)
) -> dict:
    """Top-k retrieval both ways over the whole set. ``similarity[i, j]`` = image i vs
    caption j; pair i is image i with caption i. A hit is any retrieved item whose
    caption string equals the query pair's (``groups`` ids): identical captions are
    indistinguishable, so retrieving either counts as correct."""
    sim = torch.as_tensor(similarity, dtype=torch.float32)
    g = torch.as_tensor(groups)
    n = sim.shape[0]
    out: dict[str, float] = {}
    for name, matrix in (("i2t", sim), ("t2i", sim.T)):
        order = torch.argsort(matrix, dim=1, descending=True, stable=True)
        hit = g[order] == g[:, None]  # (queries, ranked candidates)
        for k in ks:
            out[f"{name}_top{k}"] = float(hit[:, : min(k, n)].any(dim=1).float().mean())
    for k in ks:
        out[f"retrieval_top{k}"] = (out[f"i2t_top{k}"] + out[f"t2i_top{k}"]) / 2
    return out


# ----------------------------------------------------------------------------- run


def _pad_tokens(tokens: np.ndarray, length: int) -> torch.Tensor:
    out = np.zeros((len(tokens), length), dtype=np.int64)
    out[:, : tokens.shape[1]] = tokens
    return torch.from_numpy(out)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only; none on biases, norms, 1-D embeddings, logit_scale."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def clip_datasets(arrays, context: int) -> tuple[BatchTensorDataset, BatchTensorDataset]:
    """The training and held-out pairs, tokens padded to ``context`` (fixed shapes,
    as CLIP's 77)."""
    train = BatchTensorDataset(
        image=torch.from_numpy(arrays["train_images"]),
        tokens=_pad_tokens(arrays["train_tokens"], context),
    )
    heldout = BatchTensorDataset(
        image=torch.from_numpy(arrays["heldout_images"]),
        tokens=_pad_tokens(arrays["heldout_tokens"], context),
    )
    return train, heldout


def clip_optimizer(model: nn.Module, opt: dict, device: torch.device) -> torch.optim.AdamW:
    """AdamW as CLIP trains: betas (0.9, 0.98), eps 1e-6, decay on matrices only."""
    return torch.optim.AdamW(
        param_groups(model, float(opt["weight_decay"])),
        lr=opt["lr"],
        betas=(0.9, 0.98),
        eps=1e-6,
        fused=fused_optimizer("auto", device.type),
    )


def warmup_cosine(
    optimizer: torch.optim.Optimizer, warmup: int, total: int, cosine: bool
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup`` updates, then cosine decay to 0 at ``total``
    (constant when not ``cosine``), per optimizer step (as CLIP)."""

    def lr_factor(update: int) -> float:
        if update < warmup:
            return (update + 1) / warmup
        if not cosine:
            return 1.0
        progress = (update - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)


def contrastive_step(groups: np.ndarray) -> Step:
    """InfoNCE step (counting in-batch top-1 both ways); evaluation embeds every
    held-out pair, and ``score`` ranks them all under the identical-caption rule."""

    def loss_fn(model, batch):
        image_emb, text_emb, scale = model(batch["image"], batch["tokens"])
        loss, logits = clip_loss(image_emb, text_emb, scale)
        target = torch.arange(logits.shape[0], device=logits.device)
        return loss, {
            "i2t_correct": (logits.argmax(dim=1) == target).sum(),
            "t2i_correct": (logits.argmax(dim=0) == target).sum(),
        }

    def evaluate(model, loader, ctx):
        """Embeddings of every held-out pair on the device; one transfer at the end."""
        images, texts, n = [], [], 0
        for batch in loader:
            batch = to_device(batch, ctx.torch_device)
            images.append(model.encode_image(batch["image"]))
            texts.append(model.encode_text(batch["tokens"]))
            n += len(batch["image"])
        dim = images[0].shape[1]
        packed = torch.cat(
            [torch.cat(images).flatten(), torch.cat(texts).flatten(), model.scale().reshape(1)]
        )
        packed = upcast(packed).cpu()
        # Three outputs again, each on its own scale: the embeddings (unit norm) and the
        # logit scale (up to 100) are compared apart (trainbench.measure.eval_parity).
        outputs = (
            packed[: n * dim].reshape(n, dim),
            packed[n * dim : 2 * n * dim].reshape(n, dim),
            packed[-1:],
        )
        return {"outputs": outputs, "samples": n}

    def score(outputs) -> dict:
        image_emb, text_emb, scale = outputs
        scale = scale[0]
        metrics = retrieval_metrics(image_emb @ text_emb.T, groups)
        loss, _ = clip_loss(image_emb, text_emb, scale)
        metrics["loss"] = float(loss)  # InfoNCE over the whole held-out set
        metrics["logit_scale"] = float(scale)
        metrics["temperature"] = 1.0 / float(scale)
        return metrics

    return Step(loss_fn, evaluate, score)


def in_batch_top1(sums: dict, n: int) -> dict:
    """Per-epoch train metrics: in-batch top-1 retrieval both ways."""
    return {
        "in_batch_i2t_top1": sums["i2t_correct"] / n,
        "in_batch_t2i_top1": sums["t2i_correct"] / n,
    }


DATA_FACTS = (
    "source",
    "n_train",
    "n_heldout",
    "image_shape",
    "max_shapes",
    "noise",
    "text_length",
    "vocab_size",
    "heldout_distinct_captions",
    "heldout_captions_unseen_in_train",
    "chance_top1",
)


def clip_settings(sizes: dict, opt: dict, schedule: tuple[int, int, bool], meta: dict) -> dict:
    """The run's settings recorded with its result (``extra_settings``); ``schedule``
    is (warm-up updates, total updates, cosine decay)."""
    warmup, total, cosine = schedule
    return {
        "model_sizes": sizes,
        "learning_rate": opt["lr"],
        "weight_decay": opt["weight_decay"],
        "lr_schedule": (
            f"linear warm-up over {warmup} of {total} updates, then "
            + ("cosine decay to 0" if cosine else "constant")
        ),
        "logit_scale_init": LOGIT_SCALE_INIT,
        "logit_scale_max": LOGIT_SCALE_MAX,
        "data": {k: meta[k] for k in DATA_FACTS},
    }


def retrieval_facts(meta: dict) -> Callable[[dict], dict]:
    """The ``finish`` hook: chance level, the final temperature and the retrieval rule."""

    def finish(result: dict) -> dict:
        """Workload facts added to the loop's result."""
        last = result["epochs"][-1]["eval_metrics"] if result["epochs"] else {}
        result["task"].update(
            {
                "chance_top1": meta["chance_top1"],
                "final_logit_scale": last.get("logit_scale"),
                "final_temperature": last.get("temperature"),
                "identical_captions_rule": (
                    "a retrieved pair whose caption string equals the query's counts as correct"
                ),
            }
        )
        return result

    return finish


def build_parts(ctx: RunContext) -> TrainingParts:
    """Model, optimizer, data and step for one cell (the benchmarks reuse them)."""
    settings = ctx.workload_settings
    meta, arrays = load_cell_data(ctx, DATA_FILE)

    torch.manual_seed(ctx.run_seed)  # weights drawn on the CPU, then moved
    model, sizes = build_model(settings, int(meta["vocab_size"]), int(meta["text_length"]))
    model = model.to(ctx.torch_device)
    datasets = clip_datasets(arrays, sizes["max_text_length"])
    opt = settings["optimizer"]
    optimizer = clip_optimizer(model, opt, ctx.torch_device)
    loaders = cell_loaders(ctx, *datasets)
    total = optimizer_updates(settings, loaders[0])
    warmup = warmup_updates(opt, total)
    cosine = opt["schedule"] == "cosine"
    n_params = sum(p.numel() for p in model.parameters())
    return assemble_parts(
        model,
        optimizer,
        loaders,
        contrastive_step(arrays["heldout_groups"]),
        step_scheduler=warmup_cosine(optimizer, warmup, total, cosine),
        primary_metric="retrieval_top1",
        train_metrics=in_batch_top1,
        model_name=(
            f"CLIP({sizes['image_encoder']} image encoder + text transformer, "
            f"embed {sizes['embed_dim']}, {n_params:,} parameters)"
        ),
        extra_settings=clip_settings(sizes, opt, (warmup, total, cosine), meta),
        finish=retrieval_facts(meta),
    )


def run(ctx: RunContext) -> dict:
    return run_training(build_parts(ctx), ctx)
