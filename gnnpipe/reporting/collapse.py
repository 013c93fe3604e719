"""Collapsed link scores: an encoder whose pairs all score about the same.

A link encoder can collapse (every embedding pointing one way, the dot products of all pairs
equal up to float rounding): its positives and negatives then differ only by rounding noise,
and a ranking metric that breaks those "ties" by the noise can report any figure (ROC-AUC
0.96 on a run where 92.5% of the test pairs were equal within float rounding). The metrics
rank near-ties as ties (gnnpipe/reporting/metrics.py ``TIE_RTOL``); this module measures how
much of a run that is, so train, evaluate and predict can say so:

* ``tied_share``: the share of (positive, one of its negatives) pairs whose scores are tied
  within ``TIE_RTOL`` (``metrics.near``): 1 for a constant scorer, about 0 for a working one;
* ``relative_spread``: the standard deviation of every score (positives and negatives) over
  their mean magnitude: how far the scores move against their size (0 when all are equal).

``collapsed`` when ``tied_share >= COLLAPSE_SHARE``: then most rankings of a positive against
its negatives are decided by nothing the model learned.
"""

from __future__ import annotations

import numpy as np

from gnnpipe.reporting.metrics import TIE_RTOL, row_ties

COLLAPSE_SHARE = 0.5  # tied (positive, negative) pairs from which the scores count as collapsed
_CHUNK = 1 << 20  # scores converted to float64 at once


def _significant(value: float) -> float:
    """``value`` to 4 significant digits: a spread of 3e-7 must not round to 0."""
    return float(f"{value:.4g}")


def collapse(pos, neg, rtol: float = TIE_RTOL) -> dict:
    """How collapsed the scores ``pos`` float (P,) and their negatives ``neg`` float (P, K)
    (row i is positive i's) are: ``{"tied_share", "relative_spread", "collapsed", "pairs"}``,
    JSON-ready (module docstring)."""
    pos = np.asarray(pos, dtype=np.float64).reshape(-1)
    neg = np.asarray(neg)
    if neg.ndim != 2 or neg.shape[0] != pos.size or pos.size == 0 or neg.shape[1] == 0:
        raise ValueError(f"collapse: negatives must be (P, K) with P={pos.size} >= 1, K >= 1; "
                         f"got shape {neg.shape}")
    share = float(row_ties(pos, neg, rtol)[1].sum()) / neg.size
    spread = _relative_spread(pos, neg)
    return {"tied_share": round(share, 6), "relative_spread": _significant(spread),
            "collapsed": share >= COLLAPSE_SHARE, "pairs": int(neg.size)}


def _relative_spread(pos: np.ndarray, neg: np.ndarray) -> float:
    """std / mean |x| over ``pos`` (P,) and ``neg`` (P, K) together, two passes over row
    chunks in float64 (the mean first: no E[x^2] - E[x]^2 cancellation when all are nearly
    equal; no (P x K) float64 copy). 0 when every score is 0."""
    rows = max(1, _CHUNK // neg.shape[1])
    chunks = [neg[lo:lo + rows] for lo in range(0, neg.shape[0], rows)]
    count = pos.size + neg.size
    total = pos.sum() + sum(float(c.sum(dtype=np.float64)) for c in chunks)
    magnitude = (np.abs(pos).sum() + sum(float(np.abs(c.astype(np.float64)).sum())
                                         for c in chunks)) / count
    if magnitude == 0:
        return 0.0
    mean = total / count
    squares = ((pos - mean) ** 2).sum() + sum(float(((c.astype(np.float64) - mean) ** 2).sum())
                                              for c in chunks)
    return float(np.sqrt(squares / count)) / magnitude


def collapse_line(stats: dict, what: str, rtol: float = TIE_RTOL) -> str:
    """``collapse`` figures in words: ``what`` names the pairs (e.g. "test")."""
    return (f"{stats['tied_share']:.1%} of the ({what} positive, negative) score pairs are "
            f"equal within {rtol:g} relative (scores spread {stats['relative_spread']:.3g} of "
            "their mean magnitude)")


def collapse_warning(phases: dict[str, dict], who: str) -> str | None:
    """One line when the scores of any phase of ``phases`` (phase -> ``collapse``) collapsed,
    else None; ``who`` names the model (e.g. "the link encoder")."""
    bad = [phase for phase, stats in phases.items() if stats["collapsed"]]
    if not bad:
        return None
    return (f"{who}'s link scores collapsed: {collapse_line(phases[bad[-1]], bad[-1])}; its "
            "rankings are rounding noise, not skill (likely causes: unscaled input features, "
            "e.g. degree features of featureless node types, or too large a learning rate; "
            "docs/link-prediction.md)")
