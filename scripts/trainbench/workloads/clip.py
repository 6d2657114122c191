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

import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..context import RunContext
from ..data import BatchTensorDataset, make_loader
from ..devices import fused_optimizer
from ..training import TrainingParts, run_training

DATA_FILE = "dataset.npz"

# ----------------------------------------------------------------------------- scenes

COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (1.0, 0.0, 0.0),
    "green": (0.0, 0.85, 0.0),
    "blue": (0.0, 0.2, 1.0),
    "yellow": (1.0, 1.0, 0.0),
    "purple": (0.75, 0.0, 1.0),
    "cyan": (0.0, 1.0, 1.0),
    "white": (1.0, 1.0, 1.0),
}
SHAPES = ("circle", "square", "triangle", "cross", "diamond")
# Position name -> (row, column) of its centre as a fraction of the image side.
POSITIONS: dict[str, tuple[float, float]] = {
    "top left": (0.25, 0.25),
    "top right": (0.25, 0.75),
    "bottom left": (0.75, 0.25),
    "bottom right": (0.75, 0.75),
    "center": (0.5, 0.5),
}
# Size name -> shape radius as a fraction of the image side.
SIZES: dict[str, float] = {"small": 0.11, "large": 0.2}
BACKGROUND_MAX = 0.25  # the background is a flat grey in [0, BACKGROUND_MAX]
JITTER = 0.03  # position jitter, fraction of the side
PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIAL_TOKENS = ["<pad>", "<unk>", "<bos>", "<eos>"]
WORDS_PER_OBJECT = 8  # "a large red circle at the top left"


def shape_mask(shape: str, size: int, cy: float, cx: float, r: float) -> np.ndarray:
    """Boolean (size, size) mask of one shape centred at (cy, cx) with radius r (pixels)."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    dy, dx = yy - cy, xx - cx
    if shape == "circle":
        return dy * dy + dx * dx <= r * r
    if shape == "square":
        h = 0.85 * r  # about the circle's area
        return (np.abs(dy) <= h) & (np.abs(dx) <= h)
    if shape == "triangle":  # apex up
        return (dy >= -r) & (dy <= r) & (np.abs(dx) <= (dy + r) / 2)
    if shape == "cross":
        arm = 0.35 * r
        return ((np.abs(dx) <= arm) & (np.abs(dy) <= r)) | ((np.abs(dy) <= arm) & (np.abs(dx) <= r))
    if shape == "diamond":
        return np.abs(dx) + np.abs(dy) <= r
    raise ValueError(f"unknown shape {shape!r}")


def sample_objects(rng: np.random.Generator, max_shapes: int) -> list[dict]:
    """1..max_shapes objects at distinct positions, listed in the canonical position
    order (so one scene has exactly one caption)."""
    count = int(rng.integers(1, max_shapes + 1))
    names = list(POSITIONS)
    chosen = sorted(rng.choice(len(names), size=count, replace=False).tolist())
    colours, sizes = list(COLOURS), list(SIZES)
    return [
        {
            "shape": SHAPES[int(rng.integers(len(SHAPES)))],
            "colour": colours[int(rng.integers(len(colours)))],
            "position": names[p],
            "size": sizes[int(rng.integers(len(sizes)))],
        }
        for p in chosen
    ]


def caption_of(objects: list[dict]) -> str:
    """ "a large red circle at the top left and a small blue square at the center"."""
    return " and ".join(
        f"a {o['size']} {o['colour']} {o['shape']} at the {o['position']}" for o in objects
    )


def render(objects: list[dict], size: int, noise: float, rng: np.random.Generator) -> np.ndarray:
    """A (3, size, size) uint8 image of ``objects`` (drawn in order; the center, last in
    the canonical order, wins where a large center shape touches a large corner one)."""
    image = np.full((3, size, size), rng.uniform(0.0, BACKGROUND_MAX), dtype=np.float32)
    for obj in objects:
        fy, fx = POSITIONS[obj["position"]]
        cy = (fy + rng.uniform(-JITTER, JITTER)) * size
        cx = (fx + rng.uniform(-JITTER, JITTER)) * size
        r = SIZES[obj["size"]] * size * rng.uniform(0.9, 1.1)
        mask = shape_mask(obj["shape"], size, cy, cx, r)
        colour = np.asarray(COLOURS[obj["colour"]], dtype=np.float32) * rng.uniform(0.85, 1.0)
        image[:, mask] = colour[:, None]
    if noise > 0:
        image += noise * rng.standard_normal(image.shape).astype(np.float32)
    return np.round(np.clip(image, 0.0, 1.0) * 255.0).astype(np.uint8)


def make_pairs(
    n: int, size: int, max_shapes: int, noise: float, rng: np.random.Generator
) -> tuple[np.ndarray, list[str], list[list[dict]]]:
    """n rendered scenes: (uint8 images (n, 3, size, size), captions, object lists)."""
    images = np.empty((n, 3, size, size), dtype=np.uint8)
    captions, scenes = [], []
    for i in range(n):
        objects = sample_objects(rng, max_shapes)
        images[i] = render(objects, size, noise, rng)
        captions.append(caption_of(objects))
        scenes.append(objects)
    return images, captions, scenes


def text_length_for(max_shapes: int) -> int:
    """Tokens of the longest possible caption plus BOS and EOS."""
    return WORDS_PER_OBJECT * max_shapes + (max_shapes - 1) + 2


def build_vocab(captions: list[str]) -> list[str]:
    """Special tokens (pad = 0), then the training captions' words, sorted."""
    words = sorted({w for c in captions for w in c.split()})
    return SPECIAL_TOKENS + words


def tokenize(captions: list[str], vocab: list[str], length: int) -> np.ndarray:
    """<bos> words <eos>, padded with 0 to ``length``; unknown words -> <unk>."""
    index = {w: i for i, w in enumerate(vocab)}
    out = np.zeros((len(captions), length), dtype=np.int64)
    for row, caption in enumerate(captions):
        ids = [BOS, *(index.get(w, UNK) for w in caption.split()), EOS]
        if len(ids) > length:
            raise ValueError(
                f"caption of {len(ids)} tokens exceeds the length {length}: {caption!r}"
            )
        out[row, : len(ids)] = ids
    return out


def caption_groups(captions: list[str]) -> np.ndarray:
    """An id per caption string: equal ids = identical captions (counted as correct)."""
    ids: dict[str, int] = {}
    return np.asarray([ids.setdefault(c, len(ids)) for c in captions], dtype=np.int64)


def chance_top1(groups: np.ndarray) -> float:
    """Expected top-1 of a random ranking under the identical-caption rule."""
    counts = np.bincount(groups)
    return float(np.mean(counts[groups]) / len(groups))


def prepare_data(settings: dict, out_dir: str | Path, seed: int) -> dict:
    """Render the training and held-out pairs once; every device and repeat reads them."""
    from ..records import atomic_write_json

    data = settings["data"]
    size, max_shapes, noise = int(data["image_size"]), int(data["max_shapes"]), float(data["noise"])
    n_train, n_heldout = int(data["n_train"]), int(data["n_heldout"])
    if max_shapes > len(POSITIONS):
        raise ValueError(
            f"data.max_shapes is {max_shapes}; there are only {len(POSITIONS)} positions"
        )
    rng = np.random.default_rng(seed)
    train_images, train_captions, _ = make_pairs(n_train, size, max_shapes, noise, rng)
    heldout_images, heldout_captions, _ = make_pairs(n_heldout, size, max_shapes, noise, rng)
    vocab = build_vocab(train_captions)
    length = text_length_for(max_shapes)
    groups = caption_groups(heldout_captions)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{DATA_FILE}.tmp.npz"
    np.savez(
        tmp,
        train_images=train_images,
        train_tokens=tokenize(train_captions, vocab, length),
        heldout_images=heldout_images,
        heldout_tokens=tokenize(heldout_captions, vocab, length),
        heldout_groups=groups,
        train_captions=np.asarray(train_captions),
        heldout_captions=np.asarray(heldout_captions),
    )
    tmp.replace(out_dir / DATA_FILE)
    seen = set(train_captions)
    meta = {
        "source": "synthetic shapes",
        "n_train": n_train,
        "n_heldout": n_heldout,
        "image_shape": [3, size, size],
        "max_shapes": max_shapes,
        "noise": noise,
        "text_length": length,
        "vocab": vocab,
        "vocab_size": len(vocab),
        "heldout_distinct_captions": int(groups.max() + 1) if len(groups) else 0,
        "heldout_captions_unseen_in_train": float(
            np.mean([c not in seen for c in heldout_captions])
        ),
        "chance_top1": chance_top1(groups),
        "seed": seed,
    }
    atomic_write_json(out_dir / "meta.json", meta)
    return meta


# ----------------------------------------------------------------------------- model


def _transformer(width: int, layers: int, heads: int) -> nn.TransformerEncoder:
    """Pre-LN blocks as in CLIP (GELU, 4x MLP, no dropout)."""
    if width % heads:
        raise ValueError(f"width {width} is not divisible by {heads} heads")
    layer = nn.TransformerEncoderLayer(
        width,
        heads,
        dim_feedforward=4 * width,
        dropout=0.0,
        activation="gelu",
        batch_first=True,
        norm_first=True,
    )
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def _pixels(images: torch.Tensor) -> torch.Tensor:
    """uint8 images (stored and moved as bytes: a quarter of the transfer) -> [-1, 1]."""
    if images.dtype == torch.uint8:
        return images.float() / 127.5 - 1.0
    return images


class CNNImageEncoder(nn.Module):
    """``layers`` blocks of conv3x3 + BatchNorm + ReLU + 2x2 max-pool (channels
    width, 2*width, 4*width, then 4*width), flattened (position matters) and projected."""

    def __init__(self, image_size: int, width: int, layers: int, embed_dim: int, channels: int = 3):
        super().__init__()
        if image_size % (2**layers):
            raise ValueError(f"image_size {image_size} is not divisible by 2**{layers}")
        blocks: list[nn.Module] = []
        cin = channels
        for i in range(layers):
            cout = width * 2 ** min(i, 2)
            blocks += [
                nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            cin = cout
        self.features = nn.Sequential(*blocks)
        self.proj = nn.Linear(cin * (image_size // 2**layers) ** 2, embed_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(self.features(_pixels(images)).flatten(1))


class ViTImageEncoder(nn.Module):
    """CLIP's VisionTransformer: patch embedding (no bias), class token, positions,
    ln_pre, pre-LN blocks, ln_post on the class token, projection (no bias)."""

    def __init__(
        self,
        image_size: int,
        patch_size: int,
        width: int,
        layers: int,
        heads: int,
        embed_dim: int,
        channels: int = 3,
    ):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} is not divisible by patch_size {patch_size}")
        self.patch = nn.Conv2d(channels, width, patch_size, stride=patch_size, bias=False)
        scale = width**-0.5
        self.class_embedding = nn.Parameter(scale * torch.randn(width))
        tokens = (image_size // patch_size) ** 2 + 1
        self.positional_embedding = nn.Parameter(scale * torch.randn(tokens, width))
        self.ln_pre = nn.LayerNorm(width)
        self.transformer = _transformer(width, layers, heads)
        self.ln_post = nn.LayerNorm(width)
        self.proj = nn.Linear(width, embed_dim, bias=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch(_pixels(images)).flatten(2).transpose(1, 2)  # (B, patches, width)
        cls = self.class_embedding.to(x.dtype).expand(x.shape[0], 1, -1)
        x = torch.cat([cls, x], dim=1) + self.positional_embedding.to(x.dtype)
        x = self.transformer(self.ln_pre(x))
        return self.proj(self.ln_post(x[:, 0]))


class TextEncoder(nn.Module):
    """Token + position embeddings, a pre-LN transformer over the non-pad tokens
    (key padding mask), ln_final, the EOS token's state projected (no bias)."""

    def __init__(
        self, vocab_size: int, context: int, width: int, layers: int, heads: int, embed_dim: int
    ):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, width)
        self.positional_embedding = nn.Parameter(0.01 * torch.randn(context, width))
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        self.transformer = _transformer(width, layers, heads)
        self.ln_final = nn.LayerNorm(width)
        self.proj = nn.Linear(width, embed_dim, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        x = self.token_embedding(tokens) + self.positional_embedding[:length]
        pad = tokens == PAD
        x = self.transformer(x, src_key_padding_mask=pad)
        eos = (~pad).sum(dim=1) - 1  # EOS is the last non-pad token
        x = self.ln_final(x[torch.arange(x.shape[0], device=x.device), eos])
        return self.proj(x)


LOGIT_SCALE_INIT = math.log(1 / 0.07)
LOGIT_SCALE_MAX = math.log(100.0)


class CLIP(nn.Module):
    def __init__(self, image_encoder: nn.Module, text_encoder: nn.Module):
        super().__init__()
        self.visual = image_encoder
        self.text = text_encoder
        self.logit_scale = nn.Parameter(torch.tensor(LOGIT_SCALE_INIT))

    def scale(self) -> torch.Tensor:
        """exp(logit_scale), clamped at 100 (CLIP clamps the parameter at log(100))."""
        return self.logit_scale.clamp(max=LOGIT_SCALE_MAX).exp()

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.visual(images).float(), dim=-1)

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.text(tokens).float(), dim=-1)

    def forward(self, images: torch.Tensor, tokens: torch.Tensor):
        return self.encode_image(images), self.encode_text(tokens), self.scale()


def clip_loss(
    image_emb: torch.Tensor, text_emb: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric InfoNCE on L2-normalised embeddings; logits in fp32, outside autocast.
    Returns (loss, image->text logits)."""
    with torch.autocast(device_type=image_emb.device.type, enabled=False):
        logits = scale.float() * image_emb.float() @ text_emb.float().T
        target = torch.arange(logits.shape[0], device=logits.device)
        loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
    return loss, logits


def model_sizes(settings: dict, vocab_size: int, text_length: int) -> dict:
    """The model sizes in force: nulls resolved from the data, consistency checked."""
    m = settings["model"]
    rows = m.get("vocab_size") or vocab_size
    if rows < vocab_size:
        raise ValueError(
            f"workloads.clip.model.vocab_size ({rows}) is smaller than the data's vocabulary "
            f"({vocab_size}); raise it or set it to null"
        )
    context = m.get("max_text_length") or text_length
    if context < text_length:
        raise ValueError(
            f"workloads.clip.model.max_text_length ({context}) is below the captions' token "
            f"length ({text_length}); raise it or set it to null"
        )
    width = int(m["image_width"])
    heads = m.get("image_heads") or max(1, width // 64)
    return {
        "image_encoder": m["image_encoder"],
        "embed_dim": int(m["embed_dim"]),
        "image_width": width,
        "image_layers": int(m["image_layers"]),
        "image_heads": int(heads) if m["image_encoder"] == "vit" else None,
        "patch_size": int(m["patch_size"]) if m["image_encoder"] == "vit" else None,
        "text_width": int(m["text_width"]),
        "text_layers": int(m["text_layers"]),
        "text_heads": int(m["text_heads"]),
        "max_text_length": int(context),
        "vocab_size": int(rows),
    }


def build_model(settings: dict, vocab_size: int, text_length: int) -> tuple[CLIP, dict]:
    sizes = model_sizes(settings, vocab_size, text_length)
    image_size = int(settings["data"]["image_size"])
    if sizes["image_encoder"] == "vit":
        visual: nn.Module = ViTImageEncoder(
            image_size,
            sizes["patch_size"],
            sizes["image_width"],
            sizes["image_layers"],
            sizes["image_heads"],
            sizes["embed_dim"],
        )
    else:
        visual = CNNImageEncoder(
            image_size, sizes["image_width"], sizes["image_layers"], sizes["embed_dim"]
        )
    text = TextEncoder(
        sizes["vocab_size"],
        sizes["max_text_length"],
        sizes["text_width"],
        sizes["text_layers"],
        sizes["text_heads"],
        sizes["embed_dim"],
    )
    return CLIP(visual, text), sizes


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


def build_parts(ctx: RunContext) -> TrainingParts:
    """Model, optimizer, data and step for one cell (the benchmarks reuse them)."""
    settings = ctx.workload_settings
    data_dir = Path(ctx.spec["data_path"])
    meta = json.loads((data_dir / "meta.json").read_text())
    arrays = np.load(data_dir / DATA_FILE)

    torch.manual_seed(ctx.run_seed)  # weights drawn on the CPU, then moved
    model, sizes = build_model(settings, int(meta["vocab_size"]), int(meta["text_length"]))
    model = model.to(ctx.torch_device)
    context = sizes["max_text_length"]  # every batch padded to it (fixed shapes, as CLIP's 77)
    train = BatchTensorDataset(
        image=torch.from_numpy(arrays["train_images"]),
        tokens=_pad_tokens(arrays["train_tokens"], context),
    )
    heldout = BatchTensorDataset(
        image=torch.from_numpy(arrays["heldout_images"]),
        tokens=_pad_tokens(arrays["heldout_tokens"], context),
    )
    groups = arrays["heldout_groups"]

    opt = settings["optimizer"]
    optimizer = torch.optim.AdamW(
        param_groups(model, float(opt["weight_decay"])),
        lr=opt["lr"],
        betas=(0.9, 0.98),
        eps=1e-6,
        fused=fused_optimizer("auto", ctx.torch_device.type),
    )
    train_loader = make_loader(train, ctx.batch_size, True, ctx.generator(1), ctx.loader_kwargs)
    eval_loader = make_loader(heldout, ctx.eval_batch_size, False, None, ctx.loader_kwargs)

    # Linear warm-up, then cosine decay to 0, per optimizer step (as CLIP).
    steps_per_epoch = len(train_loader)
    if settings.get("max_steps_per_epoch"):
        steps_per_epoch = min(steps_per_epoch, int(settings["max_steps_per_epoch"]))
    accumulation = int(settings["gradient_accumulation"])
    total = max(1, -(-steps_per_epoch // accumulation) * int(settings["epochs"]))
    warmup = int(round(float(opt["warmup_ratio"]) * total))
    cosine = opt["schedule"] == "cosine"

    def lr_factor(update: int) -> float:
        if update < warmup:
            return (update + 1) / warmup
        if not cosine:
            return 1.0
        progress = (update - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    step_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)

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
            batch = {k: v.to(ctx.torch_device, non_blocking=True) for k, v in batch.items()}
            images.append(model.encode_image(batch["image"]))
            texts.append(model.encode_text(batch["tokens"]))
            n += len(batch["image"])
        dim = images[0].shape[1]
        packed = torch.cat(
            [torch.cat(images).flatten(), torch.cat(texts).flatten(), model.scale().reshape(1)]
        ).float()
        return {"outputs": (packed.cpu(), n, dim), "samples": n}

    def score(outputs) -> dict:
        packed, n, dim = outputs
        image_emb = packed[: n * dim].reshape(n, dim)
        text_emb = packed[n * dim : 2 * n * dim].reshape(n, dim)
        scale = packed[-1]
        metrics = retrieval_metrics(image_emb @ text_emb.T, groups)
        loss, _ = clip_loss(image_emb, text_emb, scale)
        metrics["loss"] = float(loss)  # InfoNCE over the whole held-out set
        metrics["logit_scale"] = float(scale)
        metrics["temperature"] = 1.0 / float(scale)
        return metrics

    n_params = sum(p.numel() for p in model.parameters())
    parts = TrainingParts(
        model=model,
        optimizer=optimizer,
        train_loader=train_loader,
        eval_loader=eval_loader,
        loss_fn=loss_fn,
        evaluate=evaluate,
        score=score,
        step_scheduler=step_scheduler,
        primary_metric="retrieval_top1",
        train_metrics=lambda sums, n: {
            "in_batch_i2t_top1": sums["i2t_correct"] / n,
            "in_batch_t2i_top1": sums["t2i_correct"] / n,
        },
        model_name=(
            f"CLIP({sizes['image_encoder']} image encoder + text transformer, "
            f"embed {sizes['embed_dim']}, {n_params:,} parameters)"
        ),
        extra_settings={
            "model_sizes": sizes,
            "learning_rate": opt["lr"],
            "weight_decay": opt["weight_decay"],
            "lr_schedule": (
                f"linear warm-up over {warmup} of {total} updates, then "
                + ("cosine decay to 0" if cosine else "constant")
            ),
            "logit_scale_init": LOGIT_SCALE_INIT,
            "logit_scale_max": LOGIT_SCALE_MAX,
            "data": {
                k: meta[k]
                for k in (
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
            },
        },
    )

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

    parts.finish = finish
    return parts


def run(ctx: RunContext) -> dict:
    return run_training(build_parts(ctx), ctx)
