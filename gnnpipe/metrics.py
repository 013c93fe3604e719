"""Classification metrics computed on target nodes only (never on sampled neighbours)."""

from __future__ import annotations

import numpy as np


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int) -> np.ndarray:
    """int64 (C, C): row = true class, column = predicted class."""
    flat = np.asarray(y_true, dtype=np.int64) * num_classes + np.asarray(y_pred, dtype=np.int64)
    return np.bincount(flat, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def per_class_f1(confusion: np.ndarray) -> np.ndarray:
    """float64 (C,); a class absent from both truth and prediction scores 0 (as sklearn)."""
    tp = np.diag(confusion).astype(np.float64)
    denom = confusion.sum(axis=0) + confusion.sum(axis=1)  # 2TP + FP + FN
    return np.divide(2 * tp, denom, out=np.zeros_like(tp), where=denom > 0)


def classification_metrics(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int) -> dict:
    """Accuracy, macro-F1 (over classes present in truth or prediction), per-class F1, confusion."""
    if y_true.size == 0:
        raise ValueError("no target nodes to score")
    confusion = confusion_matrix(y_true, y_pred, num_classes)
    f1 = per_class_f1(confusion)
    present = (confusion.sum(axis=0) + confusion.sum(axis=1)) > 0
    return {
        "accuracy": round(float(np.trace(confusion) / confusion.sum()), 6),
        "macro_f1": round(float(f1[present].mean()), 6),
        "per_class_f1": [round(float(v), 6) for v in f1],
        "confusion": confusion.tolist(),
        "count": int(y_true.size),
    }
