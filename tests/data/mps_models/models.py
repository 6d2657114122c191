"""Own models for `make mps-ready` (tests/test_mps_emulated.py): correct ones of several
kinds, which must be ready, and ones that break an MPS rule, which must not, naming the
rule and the line."""

import torch
import torch.nn.functional as F
from torch import nn
from trainbench import BatchTensorDataset, TrainingParts, make_loader


def _parts(ctx, model, x, y, loss, opt=None, metric="accuracy", evaluate=None, higher=True):
    n = len(x)

    def loader(rows, shuffle):
        return make_loader(
            BatchTensorDataset(x=x[rows], y=y[rows]),
            ctx.batch_size,
            shuffle,
            ctx.generator(2),
            ctx.loader_kwargs,
        )

    def default_eval(model, loader, ctx):
        hits = total = 0
        for b in loader:
            b = {k: v.to(ctx.torch_device) for k, v in b.items()}
            out = model(b["x"])
            hits += (out.argmax(-1) == b["y"]).sum().item()
            total += len(b["y"])
        return {"metrics": {"accuracy": hits / total}, "samples": total}

    model = model.to(ctx.torch_device)
    return TrainingParts(
        model=model,
        optimizer=opt(model) if opt else torch.optim.AdamW(model.parameters(), lr=1e-3),
        train_loader=loader(slice(0, n - 256), True),
        eval_loader=loader(slice(n - 256, n), False),
        loss_fn=loss,
        evaluate=evaluate or default_eval,
        primary_metric=metric,
        higher_is_better=higher,
    )


def _data(ctx, shape, classes=4, n=1280, dtype=torch.float32):
    g = ctx.generator(1)
    x = torch.randn(n, *shape, generator=g).to(dtype)
    y = torch.randint(0, classes, (n,), generator=g)
    return x, y


def ce(model, b):
    return F.cross_entropy(model(b["x"]).float(), b["y"]), {}


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 32, batch_first=True, num_layers=2)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def lstm(ctx):
    x, y = _data(ctx, (12, 8))
    return _parts(ctx, LSTMNet(), x, y, ce)


class GRUNet(LSTMNet):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(8, 32, batch_first=True)


def gru(ctx):
    x, y = _data(ctx, (12, 8))
    return _parts(
        ctx,
        GRUNet(),
        x,
        y,
        ce,
        opt=lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
    )


def convbn(ctx):
    x, y = _data(ctx, (3, 16, 16))
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3),
        nn.GroupNorm(4, 16),
        nn.GELU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.1),
        nn.Linear(16, 4),
    )
    return _parts(ctx, model, x, y, ce)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.pos = nn.Parameter(torch.zeros(1, 16, 32))
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.mha = nn.MultiheadAttention(32, 4, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, tokens):
        pad = tokens == 0
        h = self.enc(self.emb(tokens) + self.pos, src_key_padding_mask=pad)
        h, _ = self.mha(h, h, h, key_padding_mask=pad)
        h = h.masked_fill(pad.unsqueeze(-1), 0).sum(1) / (~pad).sum(1, keepdim=True).clamp(min=1)
        return self.head(h)


def transformer(ctx):
    g = ctx.generator(1)
    x = torch.randint(1, 50, (1280, 16), generator=g)
    x[:, 12:] = 0
    y = x[:, 0] % 4

    def loss(model, b):
        logits = model(b["x"])
        return F.cross_entropy(logits, b["y"], label_smoothing=0.1), {
            "hits": (logits.argmax(1) == b["y"]).sum()
        }

    def opt(m):
        return torch.optim.Adam(m.parameters(), lr=1e-3)

    return _parts(ctx, Tiny(), x, y, loss, opt=opt)


class EmbBag(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(100, 16, mode="mean")
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        idx = (x.abs() * 10).long().clamp(max=99)
        return self.head(self.bag(idx))


def embbag(ctx):
    x, y = _data(ctx, (6,))

    def loss(model, b):
        out = model(b["x"])
        return F.cross_entropy(out, b["y"]), {}

    return _parts(ctx, EmbBag(), x, y, loss)


def regression(ctx):
    """A regression with an MSE metric, where, cdist, einsum and a fused AdamW."""
    x, _ = _data(ctx, (10,))
    target = x.sum(1, keepdim=True)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(10, 16)
            self.b = nn.Linear(16, 1)
            self.c = nn.Parameter(torch.randn(3, 16))

        def forward(self, x):
            h = torch.tanh(self.a(x))
            d = torch.cdist(h, self.c).min(dim=1).values.unsqueeze(1)
            h = torch.where(h > 0, h, 0.1 * h) + torch.einsum("bi,ji->bj", h, self.c).mean(
                1, keepdim=True
            )
            return self.b(h) + 0 * d

    def loss(model, b):
        return F.mse_loss(model(b["x"]).float(), b["y"]), {}

    def evaluate(model, loader, ctx):
        se = n = 0.0
        for b in loader:
            b = {k: v.to(ctx.torch_device) for k, v in b.items()}
            se += float(((model(b["x"]) - b["y"]) ** 2).sum())
            n += len(b["y"])
        return {"metrics": {"mse": se / n}, "samples": int(n)}

    def fused(model):
        return torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)

    return _parts(ctx, Net(), x, target, loss, fused, "mse", evaluate, higher=False)


class Float64Forward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        scale = torch.tensor(1.5, dtype=torch.float64, device=x.device)
        return self.lin(x) * scale


def float64_forward(ctx):
    x, y = _data(ctx, (8,))
    return _parts(ctx, Float64Forward(), x, y, ce)


def float64_eval(ctx):
    x, y = _data(ctx, (8,))

    def evaluate(model, loader, ctx):
        total = 0.0
        n = 0
        for b in loader:
            b = {k: v.to(ctx.torch_device) for k, v in b.items()}
            probs = model(b["x"]).double().softmax(-1)
            total += probs.max(-1).values.sum().item()
            n += len(b["y"])
        return {"metrics": {"accuracy": total / n}, "samples": n}

    return _parts(ctx, nn.Linear(8, 4), x, y, ce, evaluate=evaluate)


def cpu_weight(ctx):
    x, y = _data(ctx, (8,))
    weight = torch.tensor([1.0, 2.0, 1.0, 1.0])

    def loss(model, b):
        return F.cross_entropy(model(b["x"]), b["y"], weight=weight), {}

    return _parts(ctx, nn.Linear(8, 4), x, y, loss)


def mps_generator(ctx):
    """A generator on the device, and a state dict saved and loaded (torch.save)."""
    import io

    x, y = _data(ctx, (8,))
    gen = torch.Generator(device=ctx.torch_device)
    gen.manual_seed(0)

    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 4)

        def forward(self, x):
            return self.lin(x + 0.01 * torch.randn(x.shape, generator=gen, device=x.device))

    model = Noisy().to(ctx.torch_device)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    model.load_state_dict(torch.load(buffer))
    return _parts(ctx, model, x, y, ce)
