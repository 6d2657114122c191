"""The container every text data source returns, and the config key their errors name."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CONFIG_KEY = "workloads.text_multilabel.data"


@dataclass
class TextDataset:
    texts: list[str]
    labels: np.ndarray  # (n, n_labels) uint8, values 0/1
    label_names: list[str]

    def __post_init__(self) -> None:
        self.texts = list(self.texts)
        self.label_names = list(self.label_names)
        self.labels = np.asarray(self.labels, dtype=np.uint8).reshape(
            len(self.texts), len(self.label_names)
        )
        if self.labels.size and self.labels.max() > 1:
            raise ValueError("labels must be 0/1")

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, indices) -> TextDataset:
        """Rows by position (a sequence of ints or a boolean mask), in the given order."""
        index = np.asarray(indices)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        index = index.astype(np.int64).reshape(-1)
        return TextDataset(
            texts=[self.texts[i] for i in index.tolist()],
            labels=self.labels[index],
            label_names=list(self.label_names),
        )
