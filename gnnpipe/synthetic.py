"""The embedded default dataset: a contextual, degree-corrected stochastic block model.

Node ``v`` gets class ``y[v]``, a degree propensity ``theta[v]`` (log-normal, ``degree_skew`` is
its sigma) and features ``x[v] = mu[y[v]] + noise``. Each edge picks a source with probability
proportional to ``theta``; with probability ``homophily`` its target is drawn from the source's
class, otherwise from another class, again proportionally to ``theta`` within that class.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from gnnpipe.config import SyntheticParams


# values per streamed feature block: 16M float64 draws (128 MiB) whatever the width
BLOCK_VALUES = 1 << 24


def generate(cfg: SyntheticParams, rng: np.random.Generator,
             feature_sink: Callable[[np.ndarray], None] | None = None) -> dict[str, np.ndarray]:
    """Raw graph arrays: ``x`` float32 (N, F), ``y`` int64 (N,), ``src``/``dst`` int64 (M,),
    plus ``timestamps`` float64 (N,) when ``cfg.timestamps``.

    ``feature_sink``: x is instead handed over in consecutive row blocks (float32 (B, F), about
    ``BLOCK_VALUES`` values each) and never held whole; the output then has no ``x``. The
    values are the same either way (the generator draws the same stream in the same order).

    ``M = round(N * avg_degree / 2)`` undirected edge draws; duplicates and self-loops may occur
    and are left to the dataset's edge policies, as with any real input.
    """
    n, c, f = cfg.num_nodes, cfg.num_classes, cfg.num_features
    weights = (np.arange(c) + 1.0) ** -cfg.class_imbalance
    y = rng.choice(c, size=n, p=weights / weights.sum()).astype(np.int64)
    theta = np.exp(cfg.degree_skew * rng.standard_normal(n))

    # Nodes grouped by class with cumulative propensity, so "a node of class k drawn
    # proportionally to theta" is one searchsorted into that class's slice.
    by_class = np.argsort(y, kind="stable")
    cum = np.cumsum(theta[by_class])
    class_end = np.searchsorted(y[by_class], np.arange(c), side="right")
    class_start = np.concatenate([[0], class_end[:-1]])
    low = np.where(class_start > 0, cum[np.maximum(class_start - 1, 0)], 0.0)
    high = cum[np.maximum(class_end - 1, 0)]
    populated = class_end > class_start

    m = int(round(n * cfg.avg_degree / 2))
    src = rng.choice(n, size=m, p=theta / theta.sum())
    same = rng.random(m) < cfg.homophily
    shift = rng.integers(1, c, size=m)  # another class, uniformly
    target_class = np.where(same, y[src], (y[src] + shift) % c)
    target_class = np.where(populated[target_class], target_class, y[src])
    u = low[target_class] + rng.random(m) * (high[target_class] - low[target_class])
    pos = np.searchsorted(cum, u, side="right")
    pos = np.clip(pos, class_start[target_class], class_end[target_class] - 1)
    dst = by_class[pos]

    means = rng.standard_normal((c, f))
    means *= cfg.feature_signal / np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    x = None
    if feature_sink is None:  # before the edge copies below: prepare's peak memory stays put
        x = (means[y] + rng.standard_normal((n, f))).astype(np.float32)  # unit noise
    else:
        step = max(1, BLOCK_VALUES // max(f, 1))
        for lo in range(0, n, step):
            rows = y[lo:lo + step]
            feature_sink((means[rows] + rng.standard_normal((rows.size, f))).astype(np.float32))
    out = {"y": y, "src": src.astype(np.int64), "dst": dst.astype(np.int64)}
    if x is not None:
        out["x"] = x
    if cfg.timestamps:  # drawn last, so the graph itself is the same with or without them
        out["timestamps"] = rng.random(n)  # float64 (N,): arrival time of every node
    return out


def keep_labels(y: np.ndarray, rate: float, rng: np.random.Generator) -> np.ndarray:
    """``y`` (N,) with all but ``rate`` of each class set to -1 (unlabelled): per class
    ``max(1, round(rate * n_c))`` labels kept, drawn by ``rng``. ``rate`` 1.0 returns ``y``."""
    if rate >= 1.0:
        return y
    out = np.full_like(y, -1)
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        keep = rng.choice(members, size=max(1, int(round(rate * members.size))), replace=False)
        out[keep] = c
    return out
