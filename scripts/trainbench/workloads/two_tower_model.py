"""The two_tower workload's model (seed report 003): query and document towers
(embedding, LSTM or GRU, masked mean or last-token pooling, a projection,
L2-normalised output), the in-batch contrastive logits with hard negatives and their
softmax loss, in float32 whatever the autocast."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from trainbench.measure.precision import upcast
from trainbench.workloads.two_tower_data import KEY, PAD


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
        return F.normalize(upcast(self.projection(pooled)), dim=-1)


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
        q = upcast(q)
        logits = q @ upcast(d).T
        if positives is not None:
            same = positives[:, None] == positives[None, :]
            same &= ~torch.eye(len(q), dtype=torch.bool, device=q.device)
            logits = logits.masked_fill(same, float("-inf"))
        if hard is not None:
            logits = torch.cat([logits, torch.einsum("bd,bkd->bk", q, upcast(hard))], dim=1)
    return logits


def contrastive_loss(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax cross-entropy over each row (column i is row i's positive), in float32
    with autocast off."""
    with torch.autocast(device_type=logits.device.type, enabled=False):
        labels = torch.arange(len(logits), device=logits.device)
        return F.cross_entropy(upcast(logits) / temperature, labels)


def encode_all(encode, ids: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Encode ``ids`` (already on the device) in slices; the result stays on the device."""
    return torch.cat([encode(ids[i : i + batch_size]) for i in range(0, len(ids), batch_size)])
