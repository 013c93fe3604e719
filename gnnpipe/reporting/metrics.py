"""Node classification and link prediction metrics, computed on target nodes/edges only.

Never on sampled neighbours: callers pass exactly the seed nodes (or held-out edges) of a split.
"""

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
    """Accuracy, macro-F1 (over classes present in truth or prediction), per-class F1, confusion.

    ``y_true`` must be class codes in ``[0, num_classes)``: an unlabelled node (-1) has no truth
    to score against, and would land in another class's cell of the flattened confusion count.
    """
    if y_true.size == 0:
        raise ValueError("no target nodes to score")
    y_true = np.asarray(y_true, dtype=np.int64)
    if int(y_true.min()) < 0 or int(y_true.max()) >= num_classes:
        raise ValueError(f"true labels must be class codes in [0, {num_classes}); found "
                         f"{int(y_true.min())}..{int(y_true.max())} (an unlabelled node, -1, "
                         "cannot be scored)")
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


# ------------------------------------------------------------------------------ link metrics
# Shapes shared by the link metrics below:
#   pos  float (P,)    score of every positive (held-out) edge
#   neg  float (P, K)  K fixed negatives *per positive* (row i is ranked against pos[i]), or
#        float (Q,)    one pool of Q fixed negatives shared by every positive.
# Higher score = more likely an edge. ROC-AUC and AP treat the negatives as one pool (a (P, K)
# array is flattened); Hits@K and MRR rank each positive against its own row or the shared pool.


def _link_inputs(pos, neg) -> tuple[np.ndarray, np.ndarray]:
    pos = np.asarray(pos, dtype=np.float64)
    neg = np.asarray(neg, dtype=np.float64)
    if pos.ndim != 1 or pos.size == 0:
        raise ValueError(f"positive scores must be a non-empty 1-D array (P,), got shape {pos.shape}")
    if neg.size == 0 or neg.ndim not in (1, 2) or (neg.ndim == 2 and neg.shape[0] != pos.size):
        raise ValueError(f"negative scores must be (P, K) per positive (P={pos.size}) or (Q,) "
                         f"shared, non-empty; got shape {neg.shape}")
    if not (np.isfinite(pos).all() and np.isfinite(neg).all()):
        raise ValueError("link scores must be finite (found NaN or inf)")
    return pos, neg


def roc_auc(pos, neg) -> float:
    """ROC-AUC of positives against all negatives: P(score_pos > score_neg), ties count 1/2.

    The Mann-Whitney U statistic with average ranks over the pooled scores; equals sklearn's
    ``roc_auc_score`` on ``[1]*P + [0]*Q``.
    """
    pos, neg = _link_inputs(pos, neg)
    neg = neg.reshape(-1)
    scores = np.concatenate([pos, neg])
    order = np.argsort(scores, kind="stable")
    sorted_scores = scores[order]
    # average rank (1-based) of every tie group
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], scores.size]
    group_rank = (starts + 1 + ends) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(scores.size)
    ranks[order] = np.repeat(group_rank, ends - starts)
    u = ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2.0
    return float(u / (pos.size * neg.size))


def average_precision(pos, neg) -> float:
    """Average precision, sum over distinct thresholds of (R_n - R_{n-1}) * P_n.

    The step-wise (non-interpolated) definition of sklearn's ``average_precision_score``;
    tied scores form one threshold.
    """
    pos, neg = _link_inputs(pos, neg)
    neg = neg.reshape(-1)
    scores = np.concatenate([pos, neg])
    labels = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
    order = np.argsort(-scores, kind="stable")
    scores, labels = scores[order], labels[order]
    last_of_group = np.r_[scores[1:] != scores[:-1], True]  # one threshold per distinct score
    tp = np.cumsum(labels)[last_of_group]
    predicted = (np.flatnonzero(last_of_group) + 1).astype(np.float64)
    precision = tp / predicted
    recall_gain = np.diff(np.r_[0.0, tp]) / pos.size
    return float((recall_gain * precision).sum())


def link_ranks(pos, neg) -> np.ndarray:
    """Rank of every positive among its negatives: float (P,), 1 = scored above all of them.

    ``1 + #(neg > pos) + 0.5 * #(neg == pos)``: a tie counts half (the mean of the optimistic
    and pessimistic rank, as OGB's link evaluators do).
    """
    pos, neg = _link_inputs(pos, neg)
    if neg.ndim == 2:  # (P, K): each positive against its own row
        above = (neg > pos[:, None]).sum(axis=1)
        ties = (neg == pos[:, None]).sum(axis=1)
    else:  # (Q,) shared: one sort, then binary search per positive (memory O(P + Q))
        sorted_neg = np.sort(neg)
        at_most = np.searchsorted(sorted_neg, pos, side="right")
        below = np.searchsorted(sorted_neg, pos, side="left")
        above, ties = neg.size - at_most, at_most - below
    return 1.0 + above + 0.5 * ties


def hits_at_k(pos, neg, k: int) -> float:
    """Fraction of positives ranked within the top ``k`` of their negatives (``link_ranks <= k``)."""
    if int(k) != k or k < 1:
        raise ValueError(f"hits_at_k: k must be an integer >= 1, got {k!r}")
    return float((link_ranks(pos, neg) <= k).mean())


def mrr(pos, neg) -> float:
    """Mean reciprocal rank of the positives (``mean(1 / link_ranks)``)."""
    return float((1.0 / link_ranks(pos, neg)).mean())


def link_metrics(pos, neg, ks: tuple[int, ...] = (10, 50, 100)) -> dict:
    """All link metrics at once, JSON-ready and rounded like ``classification_metrics``."""
    ranks = link_ranks(pos, neg)
    out = {"roc_auc": round(roc_auc(pos, neg), 6),
           "average_precision": round(average_precision(pos, neg), 6),
           "mrr": round(float((1.0 / ranks).mean()), 6),
           "count": int(ranks.size)}
    out.update({f"hits@{k}": round(float((ranks <= k).mean()), 6) for k in ks})
    return out
