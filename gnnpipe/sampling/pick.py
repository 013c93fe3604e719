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
