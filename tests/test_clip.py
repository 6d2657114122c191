"""The clip workload (seed report 004): rendered scenes and captions, the symmetric InfoNCE
loss, retrieval metrics, the full-scale size, and a tiny cpu run through the launcher."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import small_config
from helpers import tiny_config
from trainbench import config as tbconfig
from trainbench.common.records import read_record
from trainbench.launch.launcher import run_cell
from trainbench.workloads import clip

REPO = Path(__file__).resolve().parents[1]
FULL_CONFIG = REPO / "configs" / "clip-full.yaml"
SEED_PARAMETERS = 76.7e6


def clip_settings(**overrides) -> dict:
    config = small_config()
    config["workloads"] = {"clip": overrides}
    return tbconfig.validate_config(config)["workloads"]["clip"]


# ----------------------------------------------------------------------------- data


def test_rendering_is_deterministic_for_a_seed():
    a = clip.make_pairs(40, 32, 2, 0.05, np.random.default_rng(7))
    b = clip.make_pairs(40, 32, 2, 0.05, np.random.default_rng(7))
    c = clip.make_pairs(40, 32, 2, 0.05, np.random.default_rng(8))
    assert a[0].dtype == np.uint8 and a[0].shape == (40, 3, 32, 32)
    assert np.array_equal(a[0], b[0]) and a[1] == b[1]
    assert not np.array_equal(a[0], c[0]) and a[1] != c[1]


def _colour_labels(image: np.ndarray) -> np.ndarray:
    """Per pixel: index into COLOURS of the nearest (brightness-normalised) colour,
    or -1 for the dark background."""
    names = list(clip.COLOURS)
    palette = np.stack([np.asarray(clip.COLOURS[n]) / max(clip.COLOURS[n]) for n in names])
    x = image.astype(np.float32) / 255.0
    brightest = x.max(axis=0)
    normed = x / np.maximum(brightest, 1e-6)
    distance = ((normed[None] - palette[:, :, None, None]) ** 2).sum(axis=1)
    labels = distance.argmin(axis=0)
    labels[brightest < 0.5] = -1
    return labels


def test_caption_matches_what_was_drawn():
    size = 32
    images, captions, scenes = clip.make_pairs(300, size, 2, 0.05, np.random.default_rng(3))
    names = list(clip.COLOURS)
    yy, xx = np.mgrid[0:size, 0:size] + 0.5
    half = 0.09 * size  # inside even a small, jittered triangle or cross
    counts = set()
    for image, caption, objects in zip(images, captions, scenes, strict=True):
        assert caption == clip.caption_of(objects)
        assert len(objects) == caption.count(" and ") + 1 == caption.count(" at the ")
        counts.add(len(objects))
        labels = _colour_labels(image)
        at = {o["position"]: o for o in objects}
        occupied = 0
        for position, (fy, fx) in clip.POSITIONS.items():
            region = labels[(np.abs(yy - fy * size) <= half) & (np.abs(xx - fx * size) <= half)]
            coloured = region[region >= 0]
            if position in at:
                named = names.index(at[position]["colour"])
                assert (
                    f"{at[position]['colour']} {at[position]['shape']} at the {position}" in caption
                )
                # The named colour dominates the named position's region.
                assert np.bincount(coloured, minlength=len(names)).argmax() == named, caption
                assert (region == named).mean() > 0.3, caption
            if (region >= 0).mean() > 0.3:
                occupied += 1
        assert occupied == len(objects), caption  # shape count matches the caption
    assert counts == {1, 2}


def test_large_shapes_cover_more_than_small_ones():
    rng = np.random.default_rng(0)
    areas = {}
    for size_name in clip.SIZES:
        obj = {"shape": "square", "colour": "red", "position": "center", "size": size_name}
        image = clip.render([obj], 32, 0.0, rng)
        areas[size_name] = int((_colour_labels(image) == 0).sum())
    assert areas["large"] > 2.5 * areas["small"] > 0


def test_tokenizer_vocabulary_padding_and_unknown_words():
    captions = ["a small red circle at the center", "a large blue cross at the top left"]
    vocab = clip.build_vocab(captions)
    assert vocab[: len(clip.SPECIAL_TOKENS)] == clip.SPECIAL_TOKENS and vocab[0] == "<pad>"
    length = clip.text_length_for(2)
    assert length == 19
    tokens = clip.tokenize([*captions, "a small green circle at the center"], vocab, length)
    assert tokens.shape == (3, 19)
    assert tokens[0, 0] == clip.BOS and tokens[0, 8] == clip.EOS and (tokens[0, 9:] == 0).all()
    assert [vocab[i] for i in tokens[1, 1:9]] == captions[1].split()
    assert tokens[2, 3] == clip.UNK  # "green" is not in the training captions
    longest = " and ".join(["a large white triangle at the bottom right"] * 2)
    assert (clip.tokenize([longest], clip.build_vocab([longest]), length)[0] != 0).all()
    with pytest.raises(ValueError, match="exceeds"):
        clip.tokenize([longest], vocab, length - 1)


def test_prepare_data_writes_a_heldout_split_with_unseen_pairs(tmp_path):
    settings = clip_settings(data={"n_train": 300, "n_heldout": 80})
    meta = clip.prepare_data(settings, tmp_path, seed=0)
    again = clip.prepare_data(settings, tmp_path / "again", seed=0)
    assert meta == again
    arrays = np.load(tmp_path / clip.DATA_FILE)
    assert arrays["train_images"].shape == (300, 3, 32, 32)
    assert arrays["heldout_tokens"].shape == (80, meta["text_length"])
    assert meta["vocab_size"] == len(meta["vocab"]) < 40
    assert 0 < meta["heldout_captions_unseen_in_train"] < 1
    groups = arrays["heldout_groups"]
    captions = list(arrays["heldout_captions"])
    for i in range(80):
        for j in range(80):
            assert (groups[i] == groups[j]) == (captions[i] == captions[j])
    assert meta["chance_top1"] >= 1 / 80


# ----------------------------------------------------------------------------- loss


def test_symmetric_infonce_equals_a_hand_computation():
    image = torch.nn.functional.normalize(torch.tensor([[1.0, 0.2], [0.1, 1.0], [-1.0, 0.5]]))
    text = torch.nn.functional.normalize(torch.tensor([[0.9, 0.1], [0.3, 1.0], [0.2, -1.0]]))
    scale = torch.tensor(1 / 0.07)
    loss, logits = clip.clip_loss(image, text, scale)

    sim = image.numpy().astype(np.float64) @ text.numpy().astype(np.float64).T * (1 / 0.07)
    i2t = -np.mean([sim[i, i] - math.log(np.exp(sim[i]).sum()) for i in range(3)])
    t2i = -np.mean([sim[j, j] - math.log(np.exp(sim[:, j]).sum()) for j in range(3)])
    assert loss.item() == pytest.approx((i2t + t2i) / 2, rel=1e-5)
    assert i2t != pytest.approx(t2i)  # the two directions really differ here
    assert np.allclose(logits.numpy(), sim, rtol=1e-5)


def test_logit_scale_is_a_learnable_clamped_parameter():
    settings = clip_settings()
    model, sizes = clip.build_model(settings, vocab_size=30, text_length=19)
    assert sizes["vocab_size"] == 30 and sizes["max_text_length"] == 19
    assert isinstance(model.logit_scale, torch.nn.Parameter) and model.logit_scale.requires_grad
    assert model.logit_scale.item() == pytest.approx(math.log(1 / 0.07))
    images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    tokens = torch.tensor([[2, 5, 6, 3] + [0] * 15, [2, 7, 3] + [0] * 16] * 2)
    image_emb, text_emb, scale = model(images, tokens)
    assert image_emb.shape == text_emb.shape == (4, 128)
    assert torch.allclose(image_emb.norm(dim=1), torch.ones(4), atol=1e-5)
    loss, _ = clip.clip_loss(image_emb, text_emb, scale)
    loss.backward()
    assert model.logit_scale.grad is not None and model.logit_scale.grad.abs().item() > 0
    with torch.no_grad():
        model.logit_scale.fill_(10.0)
    assert model.scale().item() == pytest.approx(100.0)  # clamped at log(100)


def test_text_embedding_does_not_depend_on_padding_length():
    settings = clip_settings(model={"max_text_length": 77})
    model, _ = clip.build_model(settings, vocab_size=30, text_length=19)
    model.eval()
    tokens = torch.tensor([[2, 5, 6, 7, 3] + [0] * 14, [2, 9, 3] + [0] * 16])
    padded = torch.nn.functional.pad(tokens, (0, 77 - 19))
    with torch.no_grad():
        assert torch.allclose(model.encode_text(tokens), model.encode_text(padded), atol=1e-5)


def test_vit_encoder_and_size_checks():
    settings = clip_settings(
        model={"image_encoder": "vit", "image_width": 64, "image_layers": 1, "patch_size": 8}
    )
    model, sizes = clip.build_model(settings, vocab_size=30, text_length=19)
    assert sizes["image_heads"] == 1 and sizes["patch_size"] == 8
    emb = model.encode_image(torch.zeros((2, 3, 32, 32), dtype=torch.uint8))
    assert emb.shape == (2, 128)
    assert model.visual.positional_embedding.shape == (16 + 1, 64)
    with pytest.raises(ValueError, match="max_text_length"):
        clip.build_model(clip_settings(model={"max_text_length": 10}), 30, 19)
    with pytest.raises(ValueError, match="vocab_size"):
        clip.build_model(clip_settings(model={"vocab_size": 10}), 30, 19)
    with pytest.raises(tbconfig.ConfigError, match="image_encoder"):
        clip_settings(model={"image_encoder": "resnet"})
    with pytest.raises(tbconfig.ConfigError, match="unknown key"):
        clip_settings(data={"n_test": 5})


# ----------------------------------------------------------------------------- metrics


def test_retrieval_metrics_on_a_hand_made_matrix():
    # sim[i, j]: image i vs caption j. Distinct captions first.
    sim = np.array(
        [
            [0.9, 0.1, 0.0, 0.2, 0.3, 0.4],  # image 0: own caption first
            [0.8, 0.7, 0.1, 0.0, 0.2, 0.3],  # image 1: own caption 2nd
            [0.2, 0.3, 0.0, 0.4, 0.5, 0.6],  # image 2: own caption last (6th)
            [0.0, 0.1, 0.2, 0.9, 0.3, 0.4],  # image 3: first
            [0.5, 0.4, 0.3, 0.2, 0.1, 0.0],  # image 4: own caption 5th
            [0.1, 0.1, 0.1, 0.1, 0.1, 0.9],  # image 5: first
        ]
    )
    groups = np.arange(6)
    m = clip.retrieval_metrics(sim, groups)
    assert m["i2t_top1"] == pytest.approx(3 / 6)  # images 0, 3, 5
    assert m["i2t_top5"] == pytest.approx(5 / 6)  # all but image 2
    # Caption j ranks the images by column sim[:, j]: captions 0, 1, 3, 5 find their
    # image first; caption 4's image is 5th (0.1 after 0.5, 0.3, 0.3, 0.2); caption 2's
    # image ties image 0 at 0.0 for last place and the stable order puts it 6th.
    assert m["t2i_top1"] == pytest.approx(4 / 6)
    assert m["t2i_top5"] == pytest.approx(5 / 6)
    assert m["retrieval_top5"] == pytest.approx(5 / 6)
    assert m["retrieval_top1"] == pytest.approx((3 / 6 + 4 / 6) / 2)

    # Captions 1 and 2 are the same string: image 1 retrieving caption 0 is still wrong,
    # and a retrieval of caption 1 for image 2 (or of image 1 for caption 2) is right.
    sim2 = np.array([[0.9, 0.0, 0.0], [0.8, 0.1, 0.5], [0.0, 0.9, 0.2]])
    plain = clip.retrieval_metrics(sim2, np.array([0, 1, 2]), ks=(1,))
    same = clip.retrieval_metrics(sim2, np.array([0, 1, 1]), ks=(1,))
    assert plain["i2t_top1"] == pytest.approx(1 / 3)  # image 0 only
    assert same["i2t_top1"] == pytest.approx(2 / 3)  # image 2 -> caption 1 counts
    assert plain["t2i_top1"] == pytest.approx(1 / 3)  # caption 0 only
    assert same["t2i_top1"] == pytest.approx(3 / 3)  # caption 2 -> image 1 counts
    assert clip.chance_top1(np.array([0, 1, 1])) == pytest.approx((1 + 2 + 2) / 3 / 3)


# ----------------------------------------------------------------------------- full size


def _clip_parameter_formula(s: dict, image_size: int) -> int:
    """CLIP's parameter count written out: ViT + text transformer + logit_scale."""

    def block(w: int) -> int:  # attention (qkv + out, with biases), 2 LayerNorms, 4x MLP
        return 12 * w * w + 13 * w

    iw, tw, e = s["image_width"], s["text_width"], s["embed_dim"]
    patches = (image_size // s["patch_size"]) ** 2
    visual = (
        3 * s["patch_size"] ** 2 * iw  # patch embedding, no bias
        + iw  # class token
        + (patches + 1) * iw  # positions
        + 2 * iw  # ln_pre
        + s["image_layers"] * block(iw)
        + 2 * iw  # ln_post
        + iw * e  # projection, no bias
    )
    text = (
        s["vocab_size"] * tw
        + s["max_text_length"] * tw
        + s["text_layers"] * block(tw)
        + 2 * tw
        + tw * e
    )
    return visual + text + 1


def test_full_scale_config_reproduces_the_seed_parameter_count():
    full = yaml.safe_load(FULL_CONFIG.read_text())
    assert set(full) == {"run_name", "workloads"} and set(full["workloads"]) == {"clip"}
    config = small_config()
    config["devices"] = ["cpu", "mps", "cuda"]
    config["workloads"] = copy.deepcopy(full["workloads"])
    settings = tbconfig.validate_config(config)["workloads"]["clip"]
    text_length = clip.text_length_for(settings["data"]["max_shapes"])
    model, sizes = clip.build_model(settings, vocab_size=40, text_length=text_length)
    count = sum(p.numel() for p in model.parameters())
    assert abs(count - SEED_PARAMETERS) <= 0.01 * SEED_PARAMETERS, (
        f"full-scale CLIP has {count:,} parameters; seed report 004 says 76.7M (+-1%)"
    )
    assert sizes["image_encoder"] == "vit"
    assert (sizes["vocab_size"], sizes["max_text_length"]) == (49408, 77)
    assert count == _clip_parameter_formula(sizes, settings["data"]["image_size"]), count
    assert count == 76_433_921, f"{count:,}"


# ----------------------------------------------------------------------------- launcher


@pytest.mark.slow
def test_tiny_cpu_run_through_the_launcher(tmp_path):
    wl = {
        "batch_sizes": [32],
        "epochs": 3,
        "warmup_steps": 1,
        "data": {"n_train": 384, "n_heldout": 64},
        "optimizer": {"lr": 0.002},
    }
    # One thread: the run is tiny, and spinning OpenMP threads on a busy 2-core machine
    # can make it ten times slower.
    config = tiny_config(devices=["cpu"], workloads={"clip": wl})
    config["device_settings"] = {"cpu": {"threads": 1}}
    config = tbconfig.validate_config(config)
    meta = clip.prepare_data(config["workloads"]["clip"], tmp_path / "data", config["seed"])
    cell = tbconfig.Cell("clip", "cpu", 32, 0)
    spec = tbconfig.cell_spec(config, cell, data_path=str(tmp_path / "data"))
    returned = run_cell(spec, tmp_path / "metrics.json", tmp_path / "cell.log")
    record = read_record(tmp_path / "metrics.json")
    assert record["status"] == "ok", (record.get("error"), (tmp_path / "cell.log").read_text())
    assert record["result"] == returned["result"]
    result = record["result"]
    assert result["settings"]["steps_per_epoch"] == 384 // 32
    assert result["model"]["parameters"] > 0 and "cnn" in result["model"]["name"]
    keys = ("i2t_top1", "i2t_top5", "t2i_top1", "t2i_top5", "retrieval_top1")
    for epoch in result["epochs"]:
        metrics = epoch["eval_metrics"]
        for key in keys:
            assert 0.0 <= metrics[key] <= 1.0, (key, metrics)
        assert metrics["i2t_top5"] >= metrics["i2t_top1"]
        assert metrics["logit_scale"] == pytest.approx(1 / metrics["temperature"])
        assert 1.0 <= metrics["logit_scale"] <= 100.0
        assert epoch["eval_samples"] == 64
    task = result["task"]
    assert task["primary_metric"] == "retrieval_top1"
    assert task["chance_top1"] == meta["chance_top1"] < 0.05
    first, final = (result["epochs"][i]["eval_metrics"]["retrieval_top1"] for i in (0, -1))
    assert task["final"] == final > 3 * meta["chance_top1"], result["epochs"]
    assert final > first
