"""Seed report 002: the CNN on CIFAR-10 / MNIST-like images.

conv 3->32->64->128 (3x3, pad 1), each with ReLU and 2x2 max-pool, then FC
2048->512->256->10 with dropout 0.5: 1,276,234 parameters on 3x32x32 input.
Adam (weight decay 1e-4), StepLR(step 5, gamma 0.1), cross-entropy.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import torch
from torch import nn
from trainbench.measure.context import RunContext
from trainbench.measure.data import BatchTensorDataset
from trainbench.measure.precision import upcast
from trainbench.measure.training import TrainingParts, run_training
from trainbench.workloads.common import (
    Step,
    adam,
    assemble_parts,
    cell_loaders,
    load_cell_data,
    to_device,
)

DATA_FILE = "dataset.npz"
IMAGE_ARRAYS = ("x_train", "y_train", "x_test", "y_test")


class SeedCNN(nn.Module):
    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        image_size: int = 32,
        dropout: float = 0.5,
    ):
        super().__init__()

        def block(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]

        self.features = nn.Sequential(*block(in_channels, 32), *block(32, 64), *block(64, 128))
        flat = 128 * (image_size // 8) ** 2
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(flat, 512),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(512, 256),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(256, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


# ----------------------------------------------------------------------------- data


def _resize(images: np.ndarray, size: int) -> np.ndarray:
    """(N, C, H, W) float32 -> (N, C, size, size), bilinear."""
    if images.shape[-1] == size and images.shape[-2] == size:
        return images
    tensor = torch.from_numpy(np.ascontiguousarray(images))
    out = torch.nn.functional.interpolate(
        tensor, size=(size, size), mode="bilinear", align_corners=False
    )
    return out.numpy()


def _standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean/std from the training split, applied to both splits."""
    mean = train.mean(axis=(0, 2, 3), keepdims=True)
    std = train.std(axis=(0, 2, 3), keepdims=True) + 1e-6
    return (train - mean) / std, (test - mean) / std


def _split(x: np.ndarray, y: np.ndarray, n_train: int | None, n_test: int | None, seed: int):
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = n_test or max(1, len(x) // 5)
    test_idx, rest = order[:n_test], order[n_test:]
    train_idx = rest[:n_train] if n_train else rest
    return x[train_idx], y[train_idx], x[test_idx], y[test_idx]


def synthetic_images(n: int, channels: int, size: int, num_classes: int, noise: float, seed: int):
    """Class-dependent images: each class has a smooth random prototype; a sample
    is its prototype, shifted by up to 3 px, scaled in contrast, plus pixel noise.
    Deterministic in ``seed``; learnable but not trivial, so accuracy means something."""
    rng = np.random.default_rng(seed)
    coarse = rng.standard_normal((num_classes, channels, 4, 4)).astype(np.float32)
    prototypes = _resize(coarse, size)
    labels = rng.integers(0, num_classes, size=n)
    shifts = rng.integers(-3, 4, size=(n, 2))
    contrast = rng.uniform(0.6, 1.4, size=(n, 1, 1, 1)).astype(np.float32)
    images = np.empty((n, channels, size, size), dtype=np.float32)
    for i in range(n):
        images[i] = np.roll(prototypes[labels[i]], shift=tuple(shifts[i]), axis=(1, 2))
    images = images * contrast + noise * rng.standard_normal(images.shape).astype(np.float32)
    return images, labels.astype(np.int64)


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (optionally gzipped), as used by MNIST."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        zero, dtype_code, ndim = struct.unpack(">HBB", fh.read(4))
        if zero != 0 or dtype_code != 0x08:
            raise ValueError(f"{path}: not an unsigned-byte IDX file")
        shape = struct.unpack(">" + "I" * ndim, fh.read(4 * ndim))
        data = np.frombuffer(fh.read(), dtype=np.uint8)
    return data.reshape(shape)


def _find(folder: Path, stem: str) -> Path | None:
    for name in (f"{stem}.gz", stem):
        if (folder / name).exists():
            return folder / name
    return None


def load_mnist_idx(
    folder: Path,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """MNIST from IDX files. Uses the train split when present; otherwise only the
    t10k split exists and the caller splits it."""
    test_x, test_y = (
        _find(folder, "t10k-images-idx3-ubyte"),
        _find(folder, "t10k-labels-idx1-ubyte"),
    )
    train_x, train_y = (
        _find(folder, "train-images-idx3-ubyte"),
        _find(folder, "train-labels-idx1-ubyte"),
    )
    if test_x is None or test_y is None:
        raise FileNotFoundError(
            f"{folder}: no t10k-images-idx3-ubyte(.gz) and t10k-labels-idx1-ubyte(.gz); "
            "point workloads.image_cnn.data.path at the MNIST IDX folder"
        )
    x = read_idx(test_x)[:, None].astype(np.float32) / 255.0
    y = read_idx(test_y).astype(np.int64)
    if train_x is not None and train_y is not None:
        tx = read_idx(train_x)[:, None].astype(np.float32) / 255.0
        return tx, read_idx(train_y).astype(np.int64), x, y
    return x, y, None, None


def load_torchvision(dataset: str, root: str, download: bool):
    try:
        import torchvision
    except Exception as exc:  # the registry's CUDA-only build fails to import over CPU torch
        raise RuntimeError(
            f"data source torchvision needs an importable torchvision ({type(exc).__name__}: {exc}). "
            "Install a build matching your torch (`pip install -e .[vision]`) or use source "
            "synthetic, digits or mnist_idx."
        ) from exc
    cls = {"cifar10": torchvision.datasets.CIFAR10, "mnist": torchvision.datasets.MNIST}[dataset]
    train = cls(root=root, train=True, download=download)
    test = cls(root=root, train=False, download=download)

    def arrays(ds):
        data = np.asarray(ds.data, dtype=np.float32) / 255.0
        data = data.transpose(0, 3, 1, 2) if data.ndim == 4 else data[:, None]
        return data, np.asarray(ds.targets, dtype=np.int64)

    return (*arrays(train), *arrays(test))


def prepare_data(settings: dict, out_dir: str | Path, seed: int) -> dict:
    """Build the data set once per workload; every device and repeat reads it."""
    from trainbench.common.records import atomic_write_json

    data = settings["data"]
    source, size = data["source"], int(data["image_size"])
    n_train, n_test = data.get("n_train"), data.get("n_test")
    if source == "synthetic":
        total = int(n_train) + int(n_test)
        x, y = synthetic_images(
            total, data["channels"], size, data["num_classes"], data["noise"], seed
        )
        xtr, ytr, xte, yte = (
            x[: int(n_train)],
            y[: int(n_train)],
            x[int(n_train) :],
            y[int(n_train) :],
        )
    elif source == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = (digits.images.astype(np.float32) / 16.0)[:, None]
        xtr, ytr, xte, yte = _split(
            _resize(x, size), digits.target.astype(np.int64), n_train, n_test, seed
        )
    elif source == "mnist_idx":
        tx, ty, vx, vy = load_mnist_idx(Path(data["path"]))
        if vx is None:
            xtr, ytr, xte, yte = _split(tx, ty, n_train, n_test, seed)
        else:
            xtr, ytr, xte, yte = (
                tx[:n_train] if n_train else tx,
                ty[:n_train] if n_train else ty,
                vx,
                vy,
            )
            if n_test:
                xte, yte = xte[:n_test], yte[:n_test]
        xtr, xte = _resize(xtr, size), _resize(xte, size)
    elif source == "torchvision":
        xtr, ytr, xte, yte = load_torchvision(
            data["dataset"], data.get("path") or "results/data/torchvision", data["download"]
        )
        if n_train:
            xtr, ytr = xtr[:n_train], ytr[:n_train]
        if n_test:
            xte, yte = xte[:n_test], yte[:n_test]
        xtr, xte = _resize(xtr, size), _resize(xte, size)
    else:
        raise ValueError(f"unknown image source {source!r}")
    xtr, xte = _standardise(xtr.astype(np.float32), xte.astype(np.float32))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{DATA_FILE}.tmp.npz"
    np.savez(
        tmp, x_train=xtr.astype(np.float32), y_train=ytr, x_test=xte.astype(np.float32), y_test=yte
    )
    tmp.replace(out_dir / DATA_FILE)
    meta = {
        "source": source,
        "n_train": int(len(xtr)),
        "n_test": int(len(xte)),
        "shape": list(xtr.shape[1:]),
        "num_classes": int(max(ytr.max(), yte.max()) + 1),
        "class_counts_train": np.bincount(ytr).tolist(),
        "seed": seed,
    }
    atomic_write_json(out_dir / "meta.json", meta)
    return meta


# ----------------------------------------------------------------------------- run


def build_model(settings: dict, channels: int, num_classes: int, image_size: int) -> SeedCNN:
    return SeedCNN(channels, num_classes, image_size, settings["model"]["dropout"])


def load_image_data(ctx: RunContext) -> tuple[dict, dict[str, torch.Tensor]]:
    """The cell's prepared images: meta and the train/test tensors."""
    meta, arrays = load_cell_data(ctx, DATA_FILE)
    tensors = {name: torch.from_numpy(arrays[name]) for name in IMAGE_ARRAYS}
    return meta, tensors


def classification_step(loss_module: nn.Module) -> Step:
    """Cross-entropy step (counting correct predictions); evaluation gathers the
    logits on the device (per-sample outputs, one transfer at the end) and ``score``
    computes accuracy and mean loss from them."""

    def loss_fn(model, batch):
        logits = model(batch["image"])
        loss = loss_module(upcast(logits), batch["label"])
        correct = (logits.argmax(dim=1) == batch["label"]).sum()
        return loss, {"correct": correct}

    def evaluate(model, loader, ctx):
        logits, labels = [], []
        for batch in loader:
            batch = to_device(batch, ctx.torch_device)
            logits.append(upcast(model(batch["image"])))
            labels.append(batch["label"])
        outputs = (torch.cat(logits).cpu(), torch.cat(labels).cpu())
        return {"outputs": outputs, "samples": len(outputs[1])}

    def score(outputs) -> dict:
        logits, labels = outputs
        loss = loss_module(logits, labels)
        correct = (logits.argmax(dim=1) == labels).sum()
        return {"accuracy": int(correct) / len(labels), "loss": float(loss)}

    return Step(loss_fn, evaluate, score)


def build_parts(ctx: RunContext) -> TrainingParts:
    """Model, optimizer, data and step for one cell (the benchmarks reuse them)."""
    settings = ctx.workload_settings
    meta, data = load_image_data(ctx)
    channels, image_size = int(data["x_train"].shape[1]), int(data["x_train"].shape[-1])
    num_classes = int(meta["num_classes"])

    torch.manual_seed(ctx.run_seed)  # weights drawn on the CPU, then moved
    model = build_model(settings, channels, num_classes, image_size).to(ctx.torch_device)
    opt = settings["optimizer"]
    optimizer = adam(model, opt, ctx.torch_device)
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=opt["step_size"], gamma=opt["gamma"]
    )
    loaders = cell_loaders(
        ctx,
        BatchTensorDataset(image=data["x_train"], label=data["y_train"]),
        BatchTensorDataset(image=data["x_test"], label=data["y_test"]),
    )
    return assemble_parts(
        model,
        optimizer,
        loaders,
        classification_step(nn.CrossEntropyLoss()),
        scheduler=scheduler,
        primary_metric="accuracy",
        train_metrics=lambda sums, n: {"accuracy": sums["correct"] / n},
        model_name=f"SeedCNN({channels}x{image_size}x{image_size}, {num_classes} classes)",
        extra_settings={"data": {**meta, "eval_samples": int(len(data["x_test"]))}},
    )


def run(ctx: RunContext) -> dict:
    return run_training(build_parts(ctx), ctx)
