"""The clip workload's model (seed report 004): a CNN or ViT image encoder and a
text transformer, each projected to ``embed_dim`` and L2-normalised, a learnable
temperature, the symmetric InfoNCE loss, and the model sizes a config puts in force.
The workload (:mod:`trainbench.workloads.clip`) trains it."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from trainbench.measure.precision import upcast
from trainbench.workloads.clip_data import PAD

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
        return upcast(images) / 127.5 - 1.0
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
        return F.normalize(upcast(self.visual(images)), dim=-1)

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.normalize(upcast(self.text(tokens)), dim=-1)

    def forward(self, images: torch.Tensor, tokens: torch.Tensor):
        return self.encode_image(images), self.encode_text(tokens), self.scale()


def clip_loss(
    image_emb: torch.Tensor, text_emb: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric InfoNCE on L2-normalised embeddings; logits in fp32, outside autocast.
    Returns (loss, image->text logits)."""
    with torch.autocast(device_type=image_emb.device.type, enabled=False):
        logits = upcast(scale) * upcast(image_emb) @ upcast(text_emb).T
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
