"""Your own model (config: examples/my_model.yaml): build(ctx) returns TrainingParts."""

import torch
from torch import nn
from trainbench import BatchTensorDataset, TrainingParts, make_loader


def build(ctx):
    x = torch.randn(4096, 32, generator=ctx.generator(1))  # data drawn on the CPU, seeded
    y = (x.sum(dim=1) > 0).long()
    torch.manual_seed(ctx.run_seed)
    hidden = ctx.workload_settings["settings"].get("hidden", 64)
    model = nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def evaluate(model, loader, ctx):
        batches = [{k: v.to(ctx.torch_device) for k, v in b.items()} for b in loader]
        hits = sum((model(b["x"]).argmax(1) == b["y"]).sum().item() for b in batches)
        return {"metrics": {"accuracy": hits / 512}, "samples": 512}

    def loader(rows, shuffle):
        data = BatchTensorDataset(x=x[rows], y=y[rows])
        return make_loader(data, ctx.batch_size, shuffle, ctx.generator(2), ctx.loader_kwargs)

    return TrainingParts(
        model=model.to(ctx.torch_device),
        optimizer=torch.optim.Adam(model.parameters(), lr=1e-3),
        train_loader=loader(slice(0, 3584), True),
        eval_loader=loader(slice(3584, 4096), False),
        loss_fn=lambda model, b: (nn.functional.cross_entropy(model(b["x"]).float(), b["y"]), {}),
        evaluate=evaluate,
        primary_metric="accuracy",
    )
