"""Own models for the GPU-host sweep (benchmarks/suites/gpu-host.yaml), one of each kind:
a convolutional net, a recurrent net (GRU), a transformer encoder and a Linear-only MLP.
Each trains a seeded synthetic classification task through the own-model contract
(docs/configuration.md): build(ctx) returns TrainingParts."""

import torch
from torch import nn
from trainbench import BatchTensorDataset, TrainingParts, make_loader

N_TRAIN, N_EVAL = 4096, 1024


def _parts(ctx, model, x, y):
    """Loaders, Adam, cross-entropy and accuracy over the last N_EVAL rows."""

    def loader(rows, shuffle):
        data = BatchTensorDataset(x=x[rows], y=y[rows])
        return make_loader(data, ctx.batch_size, shuffle, ctx.generator(2), ctx.loader_kwargs)

    def evaluate(model, loader, ctx):
        hits, seen = 0, 0
        for b in loader:
            xb, yb = b["x"].to(ctx.torch_device), b["y"].to(ctx.torch_device)
            hits += (model(xb).argmax(1) == yb).sum().item()
            seen += len(yb)
        return {"metrics": {"accuracy": hits / seen}, "samples": seen}

    model = model.to(ctx.torch_device)
    return TrainingParts(
        model=model,
        optimizer=torch.optim.Adam(model.parameters(), lr=1e-3),
        train_loader=loader(slice(0, N_TRAIN), True),
        eval_loader=loader(slice(N_TRAIN, N_TRAIN + N_EVAL), False),
        loss_fn=lambda model, b: (nn.functional.cross_entropy(model(b["x"]).float(), b["y"]), {}),
        evaluate=evaluate,
        primary_metric="accuracy",
    )


def _labels(score):
    return (score > score.median()).long()


def conv(ctx):
    """Conv2d x 3 with batch norm on 3x32x32 images: class = which half is brighter."""
    g = ctx.generator(1)
    x = torch.randn(N_TRAIN + N_EVAL, 3, 32, 32, generator=g)
    y = _labels(x[:, :, :16].mean((1, 2, 3)) - x[:, :, 16:].mean((1, 2, 3)))
    torch.manual_seed(ctx.run_seed)
    width = int(ctx.workload_settings["settings"].get("width", 64))
    model = nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1, stride=2), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1, stride=2), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, 2),
    )  # fmt: skip
    return _parts(ctx, model, x, y)


class _Gru(nn.Module):
    def __init__(self, features, hidden):
        super().__init__()
        self.gru = nn.GRU(features, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, 2)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1])


def gru(ctx):
    """A 2-layer GRU over 48 steps of 16 features: class = sign of a running sum."""
    g = ctx.generator(1)
    x = torch.randn(N_TRAIN + N_EVAL, 48, 16, generator=g)
    y = _labels(x[:, :, 0].sum(1))
    torch.manual_seed(ctx.run_seed)
    hidden = int(ctx.workload_settings["settings"].get("hidden", 128))
    return _parts(ctx, _Gru(16, hidden), x, y)


class _Encoder(nn.Module):
    def __init__(self, vocab, dim, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.zeros(1, 64, dim))
        layer = nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 2)

    def forward(self, x):
        h = self.embed(x) + self.position[:, : x.shape[1]]
        return self.head(self.encoder(h).mean(1))


def transformer(ctx):
    """A 2-layer transformer encoder on 64 tokens of 32: class = more 3s than 5s."""
    g = ctx.generator(1)
    x = torch.randint(0, 32, (N_TRAIN + N_EVAL, 64), generator=g)
    y = ((x == 3).sum(1) > (x == 5).sum(1)).long()
    torch.manual_seed(ctx.run_seed)
    dim = int(ctx.workload_settings["settings"].get("dim", 128))
    return _parts(ctx, _Encoder(32, dim, 2), x, y)


def mlp(ctx):
    """Linear layers only (what cuBLAS runs with TF32 off by PyTorch's default)."""
    g = ctx.generator(1)
    x = torch.randn(N_TRAIN + N_EVAL, 256, generator=g)
    y = _labels(x[:, :128].sum(1) - x[:, 128:].sum(1))
    torch.manual_seed(ctx.run_seed)
    width = int(ctx.workload_settings["settings"].get("width", 1024))
    model = nn.Sequential(
        nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 2)
    )
    return _parts(ctx, model, x, y)
