"""The image_cnn workload's data sources and model (seed report 002)."""

from __future__ import annotations

import gzip
import hashlib
import json

import numpy as np
import pytest
import torch
from conftest import small_config
from trainbench.config import validate_config
from trainbench.workloads import image_cnn


def image_settings(**data) -> dict:
    config = small_config()
    config["workloads"]["image_cnn"]["data"].update(data)
    return validate_config(config)["workloads"]["image_cnn"]


def test_seed_cnn_has_the_seed_parameter_count():
    # Seed report 002: 3 conv + 3 FC on 3x32x32, 1,276,234 parameters.
    model = image_cnn.SeedCNN(in_channels=3, num_classes=10, image_size=32)
    assert sum(p.numel() for p in model.parameters()) == 1_276_234
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_channel_count_follows_the_data():
    model = image_cnn.SeedCNN(in_channels=1, num_classes=10, image_size=32)
    assert model(torch.zeros(2, 1, 32, 32)).shape == (2, 10)


def test_synthetic_data_is_deterministic_and_class_dependent(tmp_path):
    settings = image_settings(n_train=400, n_test=100, image_size=16, noise=0.5)
    meta_a = image_cnn.prepare_data(settings, tmp_path / "a", seed=3)
    meta_b = image_cnn.prepare_data(settings, tmp_path / "b", seed=3)
    a, b = np.load(tmp_path / "a" / "dataset.npz"), np.load(tmp_path / "b" / "dataset.npz")
    assert meta_a == meta_b
    assert np.array_equal(a["x_train"], b["x_train"]) and np.array_equal(a["y_test"], b["y_test"])
    # Class means differ far more than noise would allow: the label is learnable.
    x, y = a["x_train"], a["y_train"]
    means = np.stack([x[y == c].mean(axis=0) for c in range(10)])
    spread = np.abs(means[:, None] - means[None]).mean(axis=(2, 3, 4))
    assert spread[~np.eye(10, dtype=bool)].min() > 0.1
    other = image_cnn.prepare_data(settings, tmp_path / "c", seed=4)
    assert other["class_counts_train"] != meta_a["class_counts_train"] or not np.array_equal(
        np.load(tmp_path / "c" / "dataset.npz")["x_train"], x
    )


def test_digits_source_resizes_scikit_learn_digits(tmp_path):
    settings = image_settings(source="digits", n_train=None, n_test=300, image_size=32)
    meta = image_cnn.prepare_data(settings, tmp_path, seed=0)
    assert meta["shape"] == [1, 32, 32]
    assert meta["n_test"] == 300 and meta["n_train"] == 1797 - 300
    assert meta["num_classes"] == 10


def test_mnist_idx_reader_matches_the_published_file(shared_data):
    folder = shared_data / "mnist-t10k"
    raw = gzip.decompress((folder / "t10k-images-idx3-ubyte.gz").read_bytes())
    assert hashlib.md5(raw).hexdigest() == "2646ac647ad5339dbf082846283269ea"
    images = image_cnn.read_idx(folder / "t10k-images-idx3-ubyte.gz")
    labels = image_cnn.read_idx(folder / "t10k-labels-idx1-ubyte.gz")
    assert images.shape == (10_000, 28, 28) and images.dtype == np.uint8
    assert labels[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]


def test_mnist_idx_source_splits_the_test_file(tmp_path, shared_data):
    settings = image_settings(
        source="mnist_idx", path=str(shared_data / "mnist-t10k"), n_train=1000, n_test=200
    )
    meta = image_cnn.prepare_data(settings, tmp_path, seed=0)
    assert meta == json.loads((tmp_path / "meta.json").read_text())
    assert meta["shape"] == [1, 8, 8]  # resized to the configured image_size
    assert (meta["n_train"], meta["n_test"], meta["num_classes"]) == (1000, 200, 10)


def test_mnist_idx_without_files_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        image_cnn.load_mnist_idx(tmp_path)


def test_torchvision_source_explains_how_to_install(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "torchvision":
            raise RuntimeError("operator torchvision::nms does not exist")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(RuntimeError, match=r"pip install -e \.\[vision\]"):
        image_cnn.load_torchvision("cifar10", str(tmp_path), download=False)
