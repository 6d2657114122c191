"""Task metrics, computed with scikit-learn so they mean what the field means."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import f1_score, precision_recall_fscore_support


def multilabel_metrics(y_true: np.ndarray, y_pred: np.ndarray, label_names: list[str]) -> dict:
    """Micro/macro F1 and per-label precision, recall, F1, accuracy and support.

    ``y_true`` and ``y_pred`` are (n, labels) 0/1 arrays. Labels without positive
    predictions or positive truths score 0 (``zero_division=0``), as sklearn warns.
    """
    y_true = np.asarray(y_true).astype(int)
    y_pred = np.asarray(y_pred).astype(int)
    precision, recall, f1, support = precision_recall_fscore_support(
        y_true, y_pred, average=None, zero_division=0
    )
    accuracy = (y_true == y_pred).mean(axis=0)
    return {
        "micro_f1": float(f1_score(y_true, y_pred, average="micro", zero_division=0)),
        "macro_f1": float(f1_score(y_true, y_pred, average="macro", zero_division=0)),
        "subset_accuracy": float((y_true == y_pred).all(axis=1).mean()),
        "per_label": [
            {
                "label": name,
                "precision": float(precision[i]),
                "recall": float(recall[i]),
                "f1": float(f1[i]),
                "accuracy": float(accuracy[i]),
                "support": int(support[i]),
                "predicted_positive": int(y_pred[:, i].sum()),
            }
            for i, name in enumerate(label_names)
        ],
    }
