"""One hop of neighbour sampling on CSR arrays: which in-edges each frontier node keeps.

The shared bottom of ``gnnpipe.sampling.neighbor`` (the sampler) and
``gnnpipe.sampling.temporal`` (its time-bounded rows), so neither imports the other's module.
"""

from __future__ import annotations

import numpy as np


def _floyd(deg: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` distinct offsets in ``[0, deg[r])`` for each row r: int64 (k, R); needs ``deg > k``.

    Floyd's algorithm run for all rows at once: step ``i`` draws ``t`` in ``[0, j]`` with
    ``j = deg - k + i`` and keeps ``j`` instead when ``t`` was already chosen. Each row gets a
    uniform k-subset; the cost is O(R k^2) whatever the degrees (a hub costs no more). Laid out
    (k, R) so every step works on contiguous rows (NumPy reduces a short inner axis slowly).
    """
    chosen = np.empty((k, deg.size), dtype=np.int64)
    draws = rng.random((k, deg.size))
    for i in range(k):
        j = deg - (k - i)  # (R,): the largest offset allowed at this step
        t = (draws[i] * (j + 1)).astype(np.int64)
        if i:
            taken = chosen[0] == t
            for c in range(1, i):
                taken |= chosen[c] == t
            np.copyto(t, j, where=taken)
        chosen[i] = t
    return chosen


def pick_edges(start: np.ndarray, deg: np.ndarray, k: int, replace: bool,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Sampled in-edges of a frontier: CSR positions (E,) and their frontier row (E,), int64.

    ``start``/``deg`` (M,) are ``indptr[v]`` and the in-degree of each frontier node ``v``;
    edges come grouped by frontier row, in frontier order. ``k = -1`` takes every in-edge.
    """
    if k < 0:
        counts = deg
    elif replace:
        counts = np.where(deg > 0, k, 0)
    else:
        counts = np.minimum(deg, k)
    owner = np.repeat(np.arange(deg.size), counts)
    if k >= 0 and replace:
        offset = (rng.random(owner.size) * np.repeat(deg, counts)).astype(np.int64)
        return np.repeat(start, counts) + offset, owner
    first = np.cumsum(counts) - counts  # (M,): output slot of each row's first edge
    pos = np.arange(owner.size) + np.repeat(start - first, counts)  # every in-edge of the row ...
    big = np.flatnonzero(deg > k) if k >= 0 else np.empty(0, dtype=np.int64)
    if big.size:  # ... except rows with more than k in-edges: k distinct ones
        slots = first[big] + np.arange(k)[:, None]  # (k, R)
        pos[slots] = start[big] + _floyd(deg[big], k, rng)
    return pos, owner


def pick_weighted(start: np.ndarray, deg: np.ndarray, k: int, replace: bool, weight: np.ndarray,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """As ``pick_edges``, but a row's in-edges are drawn with probability proportional to
    ``weight`` (E,) float64 >= 0, in CSR order (pyg-lib's ``weight_attr`` sampling).

    As pyg-lib: ``k = -1``, or ``deg <= k`` without replacement, takes every in-edge (zero
    weights too); with replacement, ``k`` independent draws (multinomial); without, ``k``
    distinct edges by Efraimidis-Spirakis keys ``u ** (1 / w)`` (the ``k`` largest), i.e.
    successive draws proportional to the weights of the edges left (keys compared to float64
    precision at the row's index: weights ~1e9 apart in one row may tie). Zero-weight edges are
    drawn only when a row has fewer than ``k`` positive ones (then uniformly among them, where
    pyg-lib's ``topk`` takes an unspecified tie). Costs O(deg) per drawn row, as pyg-lib.
    """
    if k < 0 or not replace:
        counts = deg if k < 0 else np.minimum(deg, k)
        owner = np.repeat(np.arange(deg.size), counts)
        first = np.cumsum(counts) - counts  # (M,): output slot of each row's first edge
        pos = np.arange(owner.size) + np.repeat(start - first, counts)  # all of small rows ...
        big = np.flatnonzero(deg > k) if k > 0 else np.empty(0, dtype=np.int64)
        if big.size == 0:  # k = 0 draws nothing, k = -1 takes all
            return pos, owner
        bdeg = deg[big]  # ... and k of each big row, by the k smallest keys Exp(1) / w
        bfirst = np.cumsum(bdeg) - bdeg
        seg = np.repeat(np.arange(big.size), bdeg)  # (F,) which big row each in-edge is of
        every = np.arange(seg.size) + np.repeat(start[big] - bfirst, bdeg)  # CSR positions
        w = weight[every]
        e = rng.standard_exponential(seg.size)
        with np.errstate(invalid="ignore", divide="ignore"):
            # one float sort for all rows: 2 * row + E / (E + w), which orders a row like
            # E / w does (< 1); zero-weight edges go after, in random order (1 + ...)
            t = e / (e + w)
            zero = w == 0
            if zero.any():
                t[zero] = 1.0 + e[zero] / (1.0 + e[zero])
        order = np.argsort(2.0 * seg + t, kind="stable")  # timsort: rows come sorted already
        keep = order[np.arange(seg.size) - bfirst[seg] < k]  # the first k of each row's block
        slots = (first[big][:, None] + np.arange(k)).reshape(-1)  # (R * k,) row-major
        pos[slots] = every[keep]
        return pos, owner
    counts = np.where(deg > 0, k, 0)
    owner = np.repeat(np.arange(deg.size), counts)
    rows = np.flatnonzero(counts)
    if rows.size == 0:
        return np.empty(0, dtype=np.int64), owner
    rdeg = deg[rows]
    every = np.arange(rdeg.sum()) + np.repeat(start[rows] - (np.cumsum(rdeg) - rdeg), rdeg)
    w = weight[every]
    total = np.add.reduceat(w, np.cumsum(rdeg) - rdeg)  # (R,) weight of each row
    if (total <= 0).any():
        raise ValueError("weighted sampling with replacement reached a node whose in-edge "
                         "weights are all zero (PyG's multinomial draw fails on it too)")
    cum = np.cumsum(w / np.repeat(total, rdeg))  # (F,) each row's block rises by 1
    end = np.cumsum(rdeg)  # (R,) one past each row's last in-edge in ``every``
    low = np.concatenate(([0.0], cum[end[:-1] - 1]))  # (R,) cum before each row
    high = cum[end - 1]
    x = np.repeat(low, k) + rng.random(owner.size) * np.repeat(high - low, k)
    at = np.minimum(np.searchsorted(cum, x, side="right"), np.repeat(end - 1, k))
    return every[at], owner
