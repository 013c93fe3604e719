"""``split.assign: hash``: roles from a seeded hash of each node (or node pair of a link
split), so a split can be computed block by block and comes out the same for any number of
blocks or workers.

Every id gets a key ``mix(seed, step, id)`` (gnnpipe/runtime/rng.py): a seeded bijection of
uint64, so keys never tie. Ranking the ids of a group (the labelled nodes; one class of a
stratified split) by key and cutting the ranking at cumulative counts is what the permutation
path does with ``rng.permutation``; here the cut is a key threshold, found without sorting all
keys in one place by radix selection: ``RADIX_BITS`` bits per round, each round a per-block
histogram of the keys still matching the threshold's prefix (``radix_counts``), summed
(``select_keys``). An id then gets its role alone from its key and its group's thresholds
(``phase_codes``).
"""

from __future__ import annotations

import zlib
from typing import Callable

import numpy as np

from gnnpipe.data.graph import ROLE_CODES
from gnnpipe.runtime.engine import run_blocks

RADIX_BITS = 8
RADIX_BINS = 1 << RADIX_BITS
# the key streams (``mix(seed, STEP, ids)``): distinct ids never share a key within one
NODE_STEP = zlib.crc32(b"split.node")  # node ids
PAIR_STEP = zlib.crc32(b"split.link.pair")  # pair ids of the link split (``Held.pair_keys``)
FLIP_STEP = zlib.crc32(b"split.link.flip")  # its bit 0: an undirected positive stored high -> low
ORDER_STEP = zlib.crc32(b"split.link.order")  # positives ``src * N_dst + dst``: row order in a role
PHASES = ("train", "val", "test")  # phase codes 0, 1, 2
UNUSED = ROLE_CODES["unused"]  # phase code of a node no phase took (train 0, val 1, test 2)


def _runs(keys: np.ndarray, groups: np.ndarray, wanted: np.ndarray, prefixes: np.ndarray,
          span: int):
    """For each threshold t: the sorted keys of group ``wanted[t]`` whose bits from ``span`` up
    equal ``prefixes[t]``'s (one run of the block's keys sorted by group, then key)."""
    order = np.lexsort((keys, groups))
    keys, groups = keys[order], groups[order]
    for group, prefix in zip(wanted.tolist(), prefixes.tolist()):
        lo, hi = np.searchsorted(groups, [group, group + 1])
        if span < 64:
            run = keys[lo:hi]
            base = (prefix >> span) << span
            top = base + (1 << span)
            start = lo + int(np.searchsorted(run, np.uint64(base)))
            hi = hi if top >= 1 << 64 else lo + int(np.searchsorted(run, np.uint64(top)))
            lo = start
        yield keys[lo:hi]


def radix_counts(keys: np.ndarray, groups: np.ndarray, wanted: np.ndarray, prefixes: np.ndarray,
                 shift: int, gather: bool = False) -> np.ndarray | list[np.ndarray]:
    """One block's radix histogram: int64 (T, RADIX_BINS), row t counting the keys of group
    ``wanted[t]`` whose bits above ``shift + RADIX_BITS`` equal ``prefixes[t]``'s, by their
    next ``RADIX_BITS`` bits. ``keys`` uint64 (n,), ``groups`` int (n,) (-1: in no group).
    ``gather``: instead, per threshold the keys whose bits from ``shift`` up equal the
    prefix's (uint64, sorted)."""
    if gather:
        return [run.copy() for run in _runs(keys, groups, wanted, prefixes, shift)]
    out = np.zeros((wanted.size, RADIX_BINS), dtype=np.int64)
    for t, run in enumerate(_runs(keys, groups, wanted, prefixes, shift + RADIX_BITS)):
        digits = (run >> np.uint64(shift)) & np.uint64(RADIX_BINS - 1)
        out[t] = np.bincount(digits.astype(np.int64), minlength=RADIX_BINS)
    return out


Count = Callable[..., np.ndarray]
GATHER_KEYS = 1 << 16  # a bin this small per threshold is gathered and finished in one step


def select_keys(count: Count, wanted: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """The key of rank ``ranks[t]`` (1 = smallest) within group ``wanted[t]``: uint64 (T,).

    ``count(wanted, prefixes, shift, gather=False)`` is ``radix_counts`` over every block,
    summed (``gather``: the keys per threshold, concatenated). A round narrows every threshold
    to one bin of ``RADIX_BITS`` more bits; once each bin holds at most ``GATHER_KEYS`` keys
    (keys are hashes: after a round or two) they are gathered and ranked here. A rank past its
    group's size is an internal error."""
    prefixes = np.zeros(wanted.size, dtype=np.uint64)
    remaining = np.asarray(ranks, dtype=np.int64).copy()
    rows = np.arange(wanted.size)
    for shift in range(64 - RADIX_BITS, -1, -RADIX_BITS):
        cumulative = np.cumsum(count(wanted, prefixes, shift), axis=1)  # (T, RADIX_BINS)
        digit = np.array([np.searchsorted(row, r) for row, r in zip(cumulative, remaining)],
                         dtype=np.int64)
        assert (digit < RADIX_BINS).all(), "a rank past its group's size"
        below = np.where(digit > 0, cumulative[rows, digit - 1], 0)
        remaining -= below
        prefixes |= digit.astype(np.uint64) << np.uint64(shift)
        if shift and (cumulative[rows, digit] - below).max() <= GATHER_KEYS:
            found = count(wanted, prefixes, shift, gather=True)
            return np.array([np.sort(keys)[r - 1] for keys, r in zip(found, remaining)],
                            dtype=np.uint64)
    return prefixes


def summed(results: list, gather: bool):
    """Block results of ``radix_counts`` combined: histograms added, gathered keys joined."""
    if gather:
        return [np.concatenate(parts) for parts in zip(*results)]
    return sum(results)


def thresholds(client, histogram, calls: list[tuple], counts: np.ndarray, **common
               ) -> tuple[np.ndarray, np.ndarray]:
    """Key thresholds of every phase and group from the phase counts int64 (3, G): the key of
    rank ``counts[:p + 1, g].sum()`` in group g, uint64 (3, G), and whether it exists (a
    cumulative count of 0 takes no key), bool (3, G). ``histogram(*call, wanted=, prefixes=,
    shift=, gather=, **common)`` is one block's ``radix_counts``, run for every call on
    ``client`` (``runtime.engine.run_blocks``)."""
    def count(wanted: np.ndarray, prefixes: np.ndarray, shift: int, gather: bool = False):
        return summed(run_blocks(client, histogram, calls, wanted=wanted, prefixes=prefixes,
                                 shift=shift, gather=gather, **common), gather)

    cumulative = np.cumsum(counts, axis=0)
    phases, groups = np.nonzero(cumulative > 0)
    keys = np.zeros(counts.shape, dtype=np.uint64)
    if phases.size:
        keys[phases, groups] = select_keys(count, groups, cumulative[phases, groups])
    return keys, cumulative > 0


def phase_codes(keys: np.ndarray, groups: np.ndarray, limits: np.ndarray, has: np.ndarray,
                rank: np.ndarray | None = None, before: np.ndarray | None = None
                ) -> np.ndarray:
    """Phase code int8 (n,) of consecutive ids (0 train, 1 val, 2 test, ``UNUSED``): the first
    phase p whose threshold of the id's group g (``limits`` / ``has`` (3, G) from
    ``thresholds``) takes it: a key below ``limits[p, g]``, or at it (hash keys never tie;
    ``rank`` / ``before`` (3, G) for keys that do: at it among the first ``rank[p, g]`` such
    keys of the group in id order, ``before[p, g]`` of them in earlier blocks). ``groups`` -1:
    in no group, unused."""
    code = np.full(keys.size, UNUSED, dtype=np.int8)
    member = groups >= 0
    g, k = groups[member], keys[member]
    taken = np.full(k.size, UNUSED, dtype=np.int8)
    for p in range(limits.shape[0] - 1, -1, -1):  # the earliest phase wins
        lim = limits[p, g]
        inside = k <= lim
        if rank is not None:
            at = k == lim
            position = np.zeros(k.size, dtype=np.int64)  # 1-based among the group's tied keys
            for group in np.unique(g[at]).tolist():
                tied = at & (g == group)
                position[tied] = before[p, group] + np.arange(1, int(tied.sum()) + 1)
            inside = (k < lim) | (at & (position <= rank[p, g]))
        taken = np.where(has[p, g] & inside, np.int8(p), taken)
    code[member] = taken
    return code
