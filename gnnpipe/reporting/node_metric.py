"""The node task's metrics from a model's logits, and the one rule that picks the metric a run
is judged on (``evaluate.metric``): the verdict, its interval, the seeds, the headline and
early stopping on val in train and baseline all read ``resolve_metric``.

Accuracy cannot rank models on an imbalanced task (a majority-class predictor scores the base
rate), so ``auto`` judges two classes on ROC-AUC and a majority class above one half on
macro-F1. ROC-AUC and average precision rank a score per node: for two classes the log-odds
``logit_1 - logit_0``; for more, one-vs-rest per class on the log-softmax of that class,
averaged (macro) over the classes that have both positives and negatives among the items.
"""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.reporting.metrics import (average_precision, classification_metrics,
                                       confusion_matrix, per_class_f1, roc_auc)

NODE_METRICS = ("accuracy", "macro_f1", "roc_auc", "average_precision")
RANKING = ("roc_auc", "average_precision")  # metrics of a score per node, not of its argmax
# how a sentence names each metric
METRIC_NAMES = {"accuracy": "accuracy", "macro_f1": "macro-F1", "roc_auc": "ROC-AUC",
                "average_precision": "average precision", "mrr": "MRR"}


def resolve_metric(choice: str, y: np.ndarray, num_classes: int) -> str:
    """``choice`` (``evaluate.metric``) made concrete: ``auto`` gives ``roc_auc`` for
    ``num_classes == 2``, ``macro_f1`` when the most frequent class of ``y`` (int (L,), the
    labelled nodes' class codes, -1 ignored) holds more than half of them, else ``accuracy``."""
    if choice != "auto":
        return choice
    if num_classes == 2:
        return "roc_auc"
    y = np.asarray(y, dtype=np.int64)
    counts = np.bincount(y[y >= 0], minlength=num_classes)
    return "macro_f1" if counts.sum() and counts.max() * 2 > counts.sum() else "accuracy"


def ranking_scores(logits: torch.Tensor | np.ndarray) -> np.ndarray:
    """float64 (M, C) per-class scores to rank: log-softmax of ``logits`` (M, C); two classes:
    column 1 is the log-odds ``logit_1 - logit_0`` (column 0 its negative)."""
    z = torch.as_tensor(logits).double()
    if z.shape[1] == 2:
        odds = (z[:, 1] - z[:, 0]).numpy()
        return np.stack([-odds, odds], axis=1)
    return torch.log_softmax(z, dim=1).numpy()


def ranking_metric(metric: str, y: np.ndarray, scores: np.ndarray) -> float | None:
    """``roc_auc`` or ``average_precision`` of ``scores`` (M, C) from ``ranking_scores`` against
    the classes ``y`` int (M,): binary on class 1; else the mean over the classes with both
    positives and negatives among ``y``. None when no class has both (undefined)."""
    fn = {"roc_auc": roc_auc, "average_precision": average_precision}[metric]
    classes = [1] if scores.shape[1] == 2 else range(scores.shape[1])
    values = []
    for c in classes:
        positive = y == c
        if positive.any() and not positive.all():
            values.append(fn(scores[positive, c], scores[~positive, c]))
    return float(np.mean(values)) if values else None


def node_metrics(y: np.ndarray, logits: torch.Tensor, num_classes: int) -> dict:
    """Every node metric of ``y`` int (M,) against ``logits`` (M, C): ``classification_metrics``
    (accuracy, macro-F1, per-class F1, confusion, count) plus ``roc_auc`` and
    ``average_precision`` (None where undefined: one class only), rounded to 6 places."""
    y = np.asarray(y, dtype=np.int64)
    predicted = torch.as_tensor(logits).argmax(dim=1).numpy()
    out = classification_metrics(y, predicted, num_classes)
    scores = ranking_scores(logits)
    for metric in RANKING:
        value = ranking_metric(metric, y, scores)
        out[metric] = None if value is None else round(value, 6)
    return out


def node_metric(metric: str, y: np.ndarray, logits: torch.Tensor, num_classes: int) -> float:
    """One concrete metric (``NODE_METRICS``) of ``y`` int (M,) against ``logits`` (M, C), not
    rounded: what early stopping maximises. A ranking metric with one class among ``y`` is
    undefined and raises ValueError."""
    y = np.asarray(y, dtype=np.int64)
    if metric in RANKING:
        value = ranking_metric(metric, y, ranking_scores(logits))
        if value is None:
            raise ValueError(f"{METRIC_NAMES[metric]} needs nodes of two classes to rank; these "
                             f"{y.size} nodes hold one: set evaluate.metric to accuracy or "
                             "macro_f1, or a split with more val/test nodes")
        return value
    predicted = torch.as_tensor(logits).argmax(dim=1).numpy()
    if metric == "accuracy":
        return float((predicted == y).mean())
    if metric == "macro_f1":
        confusion = confusion_matrix(y, predicted, num_classes)
        present = (confusion.sum(axis=0) + confusion.sum(axis=1)) > 0
        return float(per_class_f1(confusion)[present].mean())
    raise ValueError(f"unknown node metric {metric!r}; one of {', '.join(NODE_METRICS)}")
