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
#
# Near-ties rank as ties. Two scores a, b are tied when |a - b| <= rtol * (|a| + |b|)
# (``TIE_RTOL``; ``near``): a float32 score carries about 7 significant digits, so scores closer
# than that are equal up to rounding, and an encoder that collapsed (every pair scored about
# the same) would otherwise be ranked by its rounding noise. Ties take the average rank, so a
# constant scorer gets ROC-AUC 0.5 and rank 1 + K/2 among K negatives (MRR 1 / (1 + K/2)).
# Exact ties (rtol 0) behave as plain average ranks. The relation is relative: 0 ties only 0.

TIE_RTOL = 1e-5
_ROW_CHUNK = 1 << 20  # (positive, negative) pairs compared at once: ~8 MB per float64 temporary


def near(a, b, rtol: float = TIE_RTOL) -> np.ndarray:
    """bool, the broadcast shape of ``a`` and ``b``: tied, |a - b| <= rtol (|a| + |b|)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return np.abs(a - b) <= rtol * (np.abs(a) + np.abs(b))


def _check_rtol(rtol: float) -> float:
    if not 0.0 <= rtol < 1.0:
        raise ValueError(f"tie tolerance rtol must be in [0, 1), got {rtol!r}")
    return float(rtol)


def tie_bounds(scores: np.ndarray, rtol: float = TIE_RTOL) -> tuple[np.ndarray, np.ndarray]:
    """The lowest and highest score tied with each of ``scores`` (float64 (n,) each), from
    the tie rule solved for b: a positive s ties [s (1-r)/(1+r), s (1+r)/(1-r)], a negative
    one the mirror image, 0 only 0. Computed in float64, so a score within an ulp of a bound
    may fall either side of it."""
    return tie_bound(scores, rtol, upper=False), tie_bound(scores, rtol, upper=True)


def tie_bound(scores: np.ndarray, rtol: float, *, upper: bool) -> np.ndarray:
    """``tie_bounds``' highest (``upper``) or lowest score tied with each of ``scores``: one
    float64 (n,) table, filled in place (no temporaries beside it: millions of node scores)."""
    s = np.asarray(scores, dtype=np.float64)
    shrink, grow = (1.0 - rtol) / (1.0 + rtol), (1.0 + rtol) / (1.0 - rtol)
    positive_factor, other_factor = (grow, shrink) if upper else (shrink, grow)
    out = s * positive_factor
    np.multiply(s, other_factor, out=out, where=s <= 0)  # 0 and the negatives: the mirror
    return out


def tie_groups(sorted_scores: np.ndarray, rtol: float = TIE_RTOL) -> np.ndarray:
    """Start positions int64 (G,) of the tie groups of ascending ``sorted_scores`` (n,).

    Anchored, not chained: a group starts at its lowest score and holds every later score tied
    with that start; the first score past it starts the next group. So a cluster narrower than
    the tolerance is one group, and no group is wider than the tolerance of its start. (Chaining
    consecutive gaps within the tolerance would let a dense pool merge into one group: 5M
    pooled N(0, 1) float32 scores chain 1.8M of them together, and a real scorer's ROC-AUC
    falls from 0.855 to 0.814.) Equal scores are always in one group; with ``rtol`` 0 the
    groups are the distinct scores.

    The greedy walk start -> first score past its tolerance is followed by pointer doubling:
    O(D log G) for D distinct scores and G groups, no Python loop over the groups.
    """
    s = np.asarray(sorted_scores, dtype=np.float64)
    if s.size == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])  # first position of each distinct score
    distinct = s[first]
    d = distinct.size
    # the distinct score each one's tolerance ends before (> itself), then d: past the end
    jump = np.append(np.searchsorted(distinct, tie_bound(distinct, rtol, upper=True),
                                     side="right"), d)
    on = np.zeros(d + 1, dtype=bool)  # on[i]: distinct score i starts a group
    on[0] = True
    while jump[0] < d:  # after t rounds every start reachable in < 2^t jumps is marked
        on[jump[np.flatnonzero(on)]] = True
        jump = jump[jump]
    return first[on[:d]]


def row_ties(pos: np.ndarray, neg: np.ndarray, rtol: float = TIE_RTOL
             ) -> tuple[np.ndarray, np.ndarray]:
    """Per positive ``pos`` (P,) against its own negatives ``neg`` (P, K): how many negatives
    score above it and how many are tied with it (``near``), int64 (P,) each. Rows are taken
    in chunks, so the temporaries stay bounded whatever P x K is."""
    pos = np.asarray(pos, dtype=np.float64)
    neg = np.asarray(neg)
    above = np.empty(pos.size, dtype=np.int64)
    ties = np.empty(pos.size, dtype=np.int64)
    step = max(1, _ROW_CHUNK // max(neg.shape[1], 1))
    for lo in range(0, pos.size, step):
        p, n = pos[lo:lo + step, None], neg[lo:lo + step].astype(np.float64, copy=False)
        tied = near(n, p, rtol)
        ties[lo:lo + step] = tied.sum(axis=1)
        above[lo:lo + step] = ((n > p) & ~tied).sum(axis=1)
    return above, ties


def _pooled(pos: np.ndarray, neg: np.ndarray, rtol: float
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positives and pooled negatives sorted ascending: (is positive (n,) bool in sorted order,
    group starts (G,), group ends (G,)) of their tie groups."""
    scores = np.concatenate([pos, neg.reshape(-1)])
    order = np.argsort(scores, kind="stable")
    scores = scores[order]  # ascending; the unsorted pool is freed (millions of node scores)
    positive = order < pos.size
    del order
    starts = tie_groups(scores, _check_rtol(rtol))
    return positive, starts, np.r_[starts[1:], scores.size]


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


def _auc(positive: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> float:
    """Mann-Whitney U / (P Q) from the sorted labels and tie groups of ``_pooled``."""
    p = int(positive.sum())
    group_rank = (starts + 1 + ends) / 2.0  # mean of ranks starts+1 .. ends
    pos_in_group = np.add.reduceat(positive.astype(np.float64), starts)
    u = float((pos_in_group * group_rank).sum()) - p * (p + 1) / 2.0
    return u / (p * (positive.size - p))


def _ap(positive: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> float:
    """Average precision from the sorted labels and tie groups of ``_pooled``: one threshold
    per group, taken from the highest group down."""
    p = int(positive.sum())
    tp = np.add.reduceat(positive.astype(np.float64), starts)[::-1]  # highest group first
    cum_tp = np.cumsum(tp)
    predicted = np.cumsum((ends - starts)[::-1]).astype(np.float64)
    return float((tp / p * (cum_tp / predicted)).sum())


def roc_auc(pos, neg, *, rtol: float = TIE_RTOL) -> float:
    """ROC-AUC of positives against all negatives: P(score_pos > score_neg), ties count 1/2.

    The Mann-Whitney U statistic with average ranks over the pooled scores, near-ties
    (``tie_groups`` with ``rtol``) ranked as ties; with no near-tie between distinct scores
    it equals sklearn's ``roc_auc_score`` on ``[1]*P + [0]*Q``.
    """
    pos, neg = _link_inputs(pos, neg)
    return _auc(*_pooled(pos, neg, rtol))


def average_precision(pos, neg, *, rtol: float = TIE_RTOL) -> float:
    """Average precision, sum over thresholds of (R_n - R_{n-1}) * P_n.

    The step-wise (non-interpolated) definition of sklearn's ``average_precision_score``; one
    threshold per tie group (``tie_groups`` with ``rtol``: tied and near-tied scores).
    """
    pos, neg = _link_inputs(pos, neg)
    return _ap(*_pooled(pos, neg, rtol))


def link_ranks(pos, neg, *, rtol: float = TIE_RTOL) -> np.ndarray:
    """Rank of every positive among its negatives: float (P,), 1 = scored above all of them.

    ``1 + #(neg above pos) + 0.5 * #(neg tied with pos)``: a tie counts half (the mean of the
    optimistic and pessimistic rank, as OGB's link evaluators do), and a negative within the
    tolerance of its positive (``near``, pairwise) is a tie, not above or below.
    """
    return ranks_and_ties(pos, neg, rtol=rtol)[0]


def ranks_and_ties(pos, neg, *, rtol: float = TIE_RTOL) -> tuple[np.ndarray, np.ndarray]:
    """``link_ranks`` float (P,) and how many negatives are tied with each positive, int64
    (P,), from one comparison of the scores (what a train epoch's MRR and tied share share)."""
    pos, neg = _link_inputs(pos, neg)
    rtol = _check_rtol(rtol)
    if neg.ndim == 2:  # (P, K): each positive against its own row
        above, ties = row_ties(pos, neg, rtol)
    else:  # (Q,) shared: one sort, then binary search per positive (memory O(P + Q))
        sorted_neg = np.sort(neg)
        low, high = tie_bounds(pos, rtol)
        at_most = np.searchsorted(sorted_neg, high, side="right")
        below = np.searchsorted(sorted_neg, low, side="left")
        above, ties = neg.size - at_most, at_most - below
    return 1.0 + above + 0.5 * ties, ties


def hits_at_k(pos, neg, k: int, *, rtol: float = TIE_RTOL) -> float:
    """Fraction of positives ranked within the top ``k`` of their negatives (``link_ranks <= k``)."""
    if int(k) != k or k < 1:
        raise ValueError(f"hits_at_k: k must be an integer >= 1, got {k!r}")
    return float((link_ranks(pos, neg, rtol=rtol) <= k).mean())


def mrr(pos, neg, *, rtol: float = TIE_RTOL) -> float:
    """Mean reciprocal rank of the positives (``mean(1 / link_ranks)``)."""
    return float((1.0 / link_ranks(pos, neg, rtol=rtol)).mean())


def link_metrics(pos, neg, ks: tuple[int, ...] = (10, 50, 100), *,
                 rtol: float = TIE_RTOL) -> dict:
    """All link metrics at once, JSON-ready and rounded like ``classification_metrics``; one
    sort of the pooled scores serves ROC-AUC and AP."""
    ranks = link_ranks(pos, neg, rtol=rtol)
    pooled = _pooled(*_link_inputs(pos, neg), rtol)
    out = {"roc_auc": round(_auc(*pooled), 6),
           "average_precision": round(_ap(*pooled), 6),
           "mrr": round(float((1.0 / ranks).mean()), 6),
           "count": int(ranks.size)}
    out.update({f"hits@{k}": round(float((ranks <= k).mean()), 6) for k in ks})
    return out
