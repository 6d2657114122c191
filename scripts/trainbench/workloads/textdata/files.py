"""Text data sets read from files: the GoEmotions TSVs (``original``: 28 labels,
``ekman``: 7) and any CSV/TSV with a text column and named 0/1 label columns."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
from trainbench.workloads.textdata.dataset import CONFIG_KEY, TextDataset

GOEMOTIONS_SPLITS = ("train", "dev", "test")
# What the path must name, in every message that asks for it: the user's own copy.
GOEMOTIONS_FOLDER = (
    "the folder where you keep your copy of GoEmotions, the one holding labels.txt (one "
    "label name per line, in id order) and train.tsv, dev.tsv (text, comma-separated label "
    "ids, comment id); a relative path counts from the working directory the workflow runs in"
)


def load_goemotions(folder: str | Path, split: str) -> TextDataset:
    """One GoEmotions split from ``folder`` (holding labels.txt and {split}.tsv).

    TSV columns, no header: text, comma-separated label ids, comment id.
    """
    folder = Path(folder)
    if split not in GOEMOTIONS_SPLITS:
        raise ValueError(f"GoEmotions split must be one of {GOEMOTIONS_SPLITS}, got {split!r}")
    labels_file, tsv = folder / "labels.txt", folder / f"{split}.tsv"
    if not labels_file.is_file() or not tsv.is_file():
        hint = ""
        subs = sorted(p.parent.name for p in folder.glob("*/labels.txt"))
        if subs:
            hint = f" (it has label sets {subs}: point at one of them, e.g. {folder / subs[0]})"
        raise FileNotFoundError(
            f"{folder}: no labels.txt and {split}.tsv; point {CONFIG_KEY}.path at "
            f"{GOEMOTIONS_FOLDER}{hint}"
        )
    label_names = [line.strip() for line in labels_file.read_text().splitlines() if line.strip()]
    frame = pd.read_csv(
        tsv,
        sep="\t",
        header=None,
        quoting=csv.QUOTE_NONE,
        dtype=str,
        keep_default_na=False,
        names=["text", "labels", "id"],
    )
    labels = np.zeros((len(frame), len(label_names)), dtype=np.uint8)
    for row, ids in enumerate(frame["labels"].tolist()):
        try:
            index = [int(k) for k in ids.split(",")]
        except ValueError:
            raise ValueError(f"{tsv}, row {row + 1}: label ids {ids!r} are not integers") from None
        if min(index) < 0 or max(index) >= len(label_names):
            raise ValueError(
                f"{tsv}, row {row + 1}: label id out of range in {ids!r} "
                f"({len(label_names)} labels in {labels_file})"
            )
        labels[row, index] = 1
    return TextDataset(texts=frame["text"].tolist(), labels=labels, label_names=label_names)


_BINARY = {"0": 0, "1": 1, "0.0": 0, "1.0": 1}


def load_table(
    path: str | Path, text_column: str = "text", label_columns: list[str] | None = None
) -> TextDataset:
    """A CSV/TSV (tab for .tsv/.tab, else comma) with a text column and 0/1 label columns
    (``label_columns`` None: every column except the text column)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such table file; point {CONFIG_KEY}.path (or .dev_path) at a CSV/TSV"
        )
    sep = "\t" if path.suffix.lower() in (".tsv", ".tab") else ","
    frame = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False)
    columns = [str(c) for c in frame.columns]
    if text_column not in columns:
        raise ValueError(
            f"{path}: no text column {text_column!r} (columns: {columns}); "
            f"set {CONFIG_KEY}.text_column to the column holding the text"
        )
    if label_columns is None:
        label_columns = [c for c in columns if c != text_column]
    else:
        label_columns = list(label_columns)
        missing = [c for c in label_columns if c not in columns]
        if missing:
            raise ValueError(
                f"{path}: label column(s) {missing} not found (columns: {columns}); "
                f"fix {CONFIG_KEY}.label_columns"
            )
    if not label_columns:
        raise ValueError(
            f"{path}: no label columns besides {text_column!r}; add 0/1 label columns "
            f"or set {CONFIG_KEY}.label_columns"
        )
    if text_column in label_columns:
        raise ValueError(f"{path}: {text_column!r} is both the text column and a label column")
    labels = np.zeros((len(frame), len(label_columns)), dtype=np.uint8)
    for j, column in enumerate(label_columns):
        values = frame[column].str.strip()
        bad = ~values.isin(list(_BINARY))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(
                f"{path}: label column {column!r} must hold only 0/1, found "
                f"{frame[column].iloc[row]!r} in data row {row + 1}; fix the file or leave "
                f"the column out of {CONFIG_KEY}.label_columns"
            )
        labels[:, j] = values.map(_BINARY).to_numpy(dtype=np.uint8)
    return TextDataset(texts=frame[text_column].tolist(), labels=labels, label_names=label_columns)
