"""The clip workload's data (seed report 004): deterministic synthetic scenes of
coloured shapes at named positions, rendered with numpy, each with the caption that
describes it; the word vocabulary, tokenization, identical-caption groups, and the
prepared training and held-out pairs. The workload (:mod:`trainbench.workloads.clip`)
trains on them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
    from trainbench.common.records import atomic_write_json

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
