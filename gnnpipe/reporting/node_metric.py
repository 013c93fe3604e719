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

from typing import Callable

import numpy as np

from gnnpipe import LazyModule
from gnnpipe.data.graph import ROLE_CODES
from gnnpipe.io.common import PHASES
from gnnpipe.io.temps import scratch_or_memory
from gnnpipe.reporting.metrics import (TIE_RTOL, average_precision, classification_metrics,
                                       confusion_matrix, per_class_f1, roc_auc, tie_groups)

torch = LazyModule("torch", globals())  # imported on first use: the report needs none

SPLIT_CODES = tuple(ROLE_CODES[phase] for phase in PHASES)  # the nodes a run is judged over
NODE_METRICS = ("accuracy", "macro_f1", "roc_auc", "average_precision")
RANKING = ("roc_auc", "average_precision")  # metrics of a score per node, not of its argmax
# how a sentence names each metric
METRIC_NAMES = {"accuracy": "accuracy", "macro_f1": "macro-F1", "roc_auc": "ROC-AUC",
                "average_precision": "average precision", "mrr": "MRR"}


def class_counts(y, roles: np.ndarray | None, num_classes: int,
                 codes: tuple[int, ...] = SPLIT_CODES, step: int = 1 << 20) -> np.ndarray:
    """int64 (C,) labelled nodes (``y`` >= 0) of each class among the nodes whose role code
    (``roles`` int8 (N,), ``ROLE_CODES``) is one of ``codes`` (default: train, val and test;
    ``roles`` None: every node); ``y`` int64 (N,), a tensor or an array (memory-mapped: read
    ``step`` nodes at a time, no (N,) temporaries)."""
    labels = y.numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    counts = np.zeros(num_classes, dtype=np.int64)
    for a in range(0, labels.size, step):
        block = labels[a:a + step]
        keep = block >= 0
        if roles is not None:
            keep &= np.isin(roles[a:a + step], codes)
        counts += np.bincount(block[keep], minlength=num_classes)
    return counts


def resolve_metric(choice: str, counts: np.ndarray) -> str:
    """``choice`` (``evaluate.metric``) made concrete from ``counts`` int (C,), the labelled
    split nodes of each class (``class_counts``, summed over ranks where each holds a share):
    ``auto`` gives ``roc_auc`` for two classes, ``macro_f1`` when the largest class holds more
    than half of the nodes, else ``accuracy``."""
    if choice != "auto":
        return choice
    counts = np.asarray(counts, dtype=np.int64)
    if counts.size == 2:
        return "roc_auc"
    return "macro_f1" if counts.sum() and counts.max() * 2 > counts.sum() else "accuracy"


def ranking_scores(logits: torch.Tensor | np.ndarray, rows: int = 1 << 16) -> np.ndarray:
    """float64 (M, C) per-class scores to rank: log-softmax of ``logits`` (M, C); two classes:
    column 1 is the log-odds ``logit_1 - logit_0`` (column 0 its negative). Filled ``rows``
    rows at a time (each row's value is the whole-array one): the output is the only (M, C)
    float64 table, no float64 copy of the logits beside it, and in a stage a mapped scratch
    table (``io.scratch_or_memory``), not anonymous memory."""
    z = torch.as_tensor(logits)
    out = scratch_or_memory(tuple(z.shape), np.float64)
    for a in range(0, z.shape[0], rows):
        block = z[a:a + rows].double()  # (B, C)
        if z.shape[1] == 2:
            odds = (block[:, 1] - block[:, 0]).numpy()
            out[a:a + rows, 0], out[a:a + rows, 1] = -odds, odds
        else:
            out[a:a + rows] = torch.log_softmax(block, dim=1).numpy()
    return out


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


# ------------------------------------------------------------------- resampled (bootstrap) form
# A bootstrap resample of M items is a row of M item indices drawn with replacement. The metric
# of a resample is the metric of the drawn items (repeats included); the functions below sort
# the items once and then score a chunk of B resamples, idx int64 (B, M), by counting the drawn
# items per tie group of scores (one ``np.bincount``), in O(B M) per class instead of re-sorting
# every resample. The tie groups are the items' own: they equal a resample's whenever no chain
# of near-ties (``metrics.tie_groups``, anchored at a group's lowest score) loses its anchor
# in the resample, i.e. always for exact ties and for scores apart by more than the tolerance.
Resampled = Callable[[np.ndarray], np.ndarray]  # drawn indices (B, M) -> metric per resample (B,)


def _counts(idx: np.ndarray, code: np.ndarray, size: int) -> np.ndarray:
    """How many drawn items of each resample carry each ``code`` (int64 (M,) in [0, size)):
    int64 (B, size) for the drawn indices ``idx`` (B, M)."""
    rows = idx.shape[0]
    flat = code[idx]
    flat += (np.arange(rows, dtype=np.int64) * size)[:, None]  # one bin range per resample
    return np.bincount(flat.ravel(), minlength=rows * size).reshape(rows, size)


def _group_codes(scores: np.ndarray, positive: np.ndarray) -> tuple[np.ndarray, int]:
    """Each item's tie group of ``scores`` (M,), numbered in ascending score order
    (``metrics.tie_groups``: the near-ties ``roc_auc`` and ``average_precision`` rank as
    ties), plus the group count ``G`` for the positives (``positive`` bool (M,)): int64 (M,)
    in [0, 2G), and G. A count over these codes holds the negatives of group g at g, its
    positives at G + g."""
    order = np.argsort(scores, kind="stable")
    starts = tie_groups(scores[order], TIE_RTOL)
    group = np.empty(scores.size, dtype=np.int64)
    group[order] = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, scores.size]))
    return group + starts.size * positive.astype(np.int64), int(starts.size)


def _resampled_auc(scores: np.ndarray, positive: np.ndarray) -> Resampled:
    """ROC-AUC of ``scores`` float (M,) for ``positive`` bool (M,) on each resample: the
    Mann-Whitney U of the drawn items (a tie counts 1/2), NaN without both classes."""
    code, size = _group_codes(scores, positive)

    def auc(idx: np.ndarray) -> np.ndarray:
        counts = _counts(idx, code, 2 * size)
        neg, pos = counts[:, :size], counts[:, size:]
        below = np.cumsum(neg, axis=1) - neg  # negatives scored below each group
        twice_u = (pos * (2 * below + neg)).sum(axis=1)  # integers: exact
        pairs = pos.sum(axis=1) * neg.sum(axis=1)
        return np.divide(twice_u / 2.0, pairs, out=np.full(pairs.size, np.nan),
                         where=pairs > 0)

    return auc


def _resampled_ap(scores: np.ndarray, positive: np.ndarray) -> Resampled:
    """Average precision (``metrics.average_precision``: one threshold per distinct score) of
    ``scores`` (M,) for ``positive`` bool (M,) on each resample, NaN without a positive."""
    code, size = _group_codes(scores, positive)

    def ap(idx: np.ndarray) -> np.ndarray:
        counts = _counts(idx, code, 2 * size)
        pos = counts[:, :size - 1:-1]  # highest group first: one threshold each, going down
        hits = np.cumsum(pos, axis=1)
        seen = np.cumsum(counts[:, size - 1::-1], axis=1) + hits
        positives = hits[:, -1:].astype(np.float64)
        # sum over thresholds of recall gain * precision; a group nobody drew adds 0
        terms = np.divide(pos, positives, out=np.zeros(pos.shape), where=positives > 0)
        terms *= np.divide(hits, seen, out=np.zeros(pos.shape), where=seen > 0)
        return np.where(positives[:, 0] > 0, terms.sum(axis=1), np.nan)

    return ap


def _resampled_ranking(metric: str, y: np.ndarray, scores: np.ndarray) -> Resampled:
    """``ranking_metric`` on each resample: binary on class 1, else the mean over the classes
    with both positives and negatives in that resample (NaN where none has)."""
    build = {"roc_auc": _resampled_auc, "average_precision": _resampled_ap}[metric]
    classes = [1] if scores.shape[1] == 2 else range(scores.shape[1])
    # a class without both kinds among all items has neither in any resample
    per_class = [build(scores[:, c], y == c) for c in classes
                 if (y == c).any() and not (y == c).all()]

    def mean(idx: np.ndarray) -> np.ndarray:
        total, count = np.zeros(idx.shape[0]), np.zeros(idx.shape[0])
        for fn in per_class:
            value = fn(idx)
            defined = np.isfinite(value)
            total += np.where(defined, value, 0.0)
            count += defined
        return np.divide(total, count, out=np.full(count.size, np.nan), where=count > 0)

    return mean


def _resampled_labels(metric: str, y: np.ndarray, predicted: np.ndarray,
                      num_classes: int) -> Resampled:
    """Accuracy or macro-F1 (``classification_metrics``: over the classes present in truth or
    prediction) of the argmax ``predicted`` (M,) on each resample."""
    cell = y * num_classes + predicted  # confusion cell of each item

    def accuracy(idx: np.ndarray) -> np.ndarray:
        return (predicted[idx] == y[idx]).mean(axis=1)

    def macro_f1(idx: np.ndarray) -> np.ndarray:
        confusion = _counts(idx, cell, num_classes * num_classes).reshape(
            -1, num_classes, num_classes).astype(np.float64)  # (B, true, predicted)
        hits = np.diagonal(confusion, axis1=1, axis2=2)
        denom = confusion.sum(axis=1) + confusion.sum(axis=2)  # 2TP + FP + FN per class
        f1 = np.divide(2 * hits, denom, out=np.zeros_like(denom), where=denom > 0)
        return f1.sum(axis=1) / (denom > 0).sum(axis=1)

    return {"accuracy": accuracy, "macro_f1": macro_f1}[metric]


def resampled_metric(metric: str, y: np.ndarray, logits: torch.Tensor | np.ndarray,
                     num_classes: int) -> Resampled:
    """``node_metric(metric, y, logits, num_classes)`` of bootstrap resamples of the M items:
    a function of the drawn item indices int64 (B, M) (one resample per row, drawn with
    replacement) -> float64 (B,), NaN where a resample leaves the metric undefined (a ranking
    metric with one class). Sorts the items once here; each call counts the drawn items per
    tie group, O(B M) per class."""
    y = np.asarray(y, dtype=np.int64)
    if metric in RANKING:
        return _resampled_ranking(metric, y, ranking_scores(logits))
    if metric not in NODE_METRICS:
        raise ValueError(f"unknown node metric {metric!r}; one of {', '.join(NODE_METRICS)}")
    predicted = torch.as_tensor(logits).argmax(dim=1).numpy()
    return _resampled_labels(metric, y, predicted, num_classes)
