"""``partition.method: lp``: balanced label propagation by blocks of rows, under a hard size cap.

The graph lies in a folder of memory-mapped arrays (gnnpipe/io/csr_blocks.py); a task reads one
block of rows (its in- and out-edges) and the previous sweep's labels of those rows and their
neighbours only, so no process holds the whole graph (the stage's driver holds the labels).
Parts come from recursive bisection: each level splits every range of parts in two (first ids
left, in proportion) and sweeps move nodes only between the two halves; then k-way
sweeps polish. One synchronous sweep:

1. ``propose`` (per block): every node counts its neighbours' labels (stored edges, either
   direction) and proposes the best allowed label; the gain is the cut edges it would save.
   Its key is (gain bucket, a seeded permutation of its id): unique, so "the m best" is exact.
   The task stores its proposals in the block folder for step 5 (``propose_block``), so no
   worker holds a sweep's proposals (32 bytes a node) between the passes.
2. histogram (per block, ``propose_block``'s result): proposals per (target, key cell,
   source), summed over blocks as the tasks end (``_cell_counts``).
3. ``swap_limits`` (bisection only): the m best of the two directions swap while the m-th pair
   still gains (Kernighan-Lin's pairing: a node that loses a little may leave for one that gains
   more); beyond them only nodes that gain on their own move.
4. ``plan_inflow`` (once): how many proposals each part takes in without passing its cap: at
   most its room plus what it surely sends out (a decreasing fixpoint, so swaps between two
   full parts go through).
5. ``block_cell_keys`` (per block), then the exact key threshold of every target; ``block_moves``
   (per block): the proposals at or above their target's threshold move.

Every decision depends only on (seed, sweep, node), the previous labels and block sums, so the
parts are the same for any number of blocks or workers (after Spinner, Martella et al. 2017, and
Ugander & Backstrom's balanced label propagation, 2013, with exact caps).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnpipe.config import PartitionParams
from gnnpipe.runtime.engine import fold_blocks, run_blocks
from gnnpipe.runtime.rng import MIX_MULTIPLIERS, mix
from gnnpipe.io.csr_blocks import (gather_block_rows, gather_labels, num_block_nodes,
                                   remove_labels, row_ranges, save_node_array, write_labels)

CELL_BITS = 8  # histogram cells per gain bucket (top bits of the permuted id)
COUNT_CELLS = 1 << 22  # (rows, parts) label counts held at once inside a block
FIXPOINT_ROUNDS = 100
_M1, _M2 = MIX_MULTIPLIERS


def id_bits(num_nodes: int) -> int:
    return max(CELL_BITS, int(num_nodes - 1).bit_length())


def permute(seed: int, step: int, nodes: np.ndarray, bits: int) -> np.ndarray:
    """A seeded bijection of ``[0, 2**bits)``, int64 (n,): distinct ids get distinct values."""
    mask = np.uint64((1 << bits) - 1)
    salt = mix(seed, step, np.array([0, 1]))
    with np.errstate(over="ignore"):
        z = (nodes.astype(np.uint64) ^ salt[0]) & mask
        for multiplier in (_M1, _M2):  # odd multipliers and xorshifts are bijective mod 2**bits
            z = (z * multiplier) & mask
            z ^= z >> np.uint64(bits // 2 + 1)
        return ((z + salt[1]) & mask).astype(np.int64)


GAIN_ZERO = 64  # the bucket of gain 0; buckets of gains of either sign lie in [1, 128)


def _gain_bucket(gain: np.ndarray) -> np.ndarray:
    """Monotone bucket of a gain, in [1, 128): exact for |gain| < 16, then four per octave."""
    size = np.abs(gain)
    octaves = np.log2(np.maximum(size, 16) / 16.0)
    bucket = np.where(size < 16, size, 16 + np.minimum(47, (4 * octaves).astype(np.int64)))
    return GAIN_ZERO + np.sign(gain) * bucket


def bucket_gain(bucket: np.ndarray) -> np.ndarray:
    """The gain a bucket stands for, on the cautious side: the least a positive bucket's gains
    are, the most a negative bucket's lose (float64)."""
    signed = bucket - GAIN_ZERO
    size = np.abs(signed)
    low = np.where(size < 16, size, 16 * 2.0 ** ((size - 16) / 4))
    high = np.where(size < 16, size, 16 * 2.0 ** ((size - 15) / 4))
    return np.where(signed > 0, low, -high)


@dataclass(frozen=True)
class Proposals:
    """The nodes of one block that want to move: ids int64 (m,), from / to part int64 (m,),
    key int64 (m,) = gain bucket << bits | permuted id (unique), ``shift``: key >> shift is the
    key's histogram cell."""

    node: np.ndarray
    source: np.ndarray
    target: np.ndarray
    key: np.ndarray
    shift: int


def label_counts(row: np.ndarray, neighbour: np.ndarray, label: np.ndarray, start: int,
                 stop: int, num_parts: int) -> np.ndarray:
    """Edges of rows ``start..stop`` per (row, label of the other end), self-loops left out:
    int64 (stop - start, num_parts). ``row`` local int64 (D,), ``neighbour`` its ids (D,),
    ``label`` their labels (D,) (``gather_block_rows``)."""
    cell = row * num_parts + label
    counts = np.bincount(cell, minlength=(stop - start) * num_parts)
    # a self-loop is never cut: counted, then taken out (fewer copies than masking every edge)
    counts -= np.bincount(cell[neighbour == row + start], minlength=counts.size)
    return counts.reshape(stop - start, num_parts)


def propose(block: tuple[int, int], folder: Path, step: int, num_parts: int, seed: int,
            sibling: np.ndarray | None = None) -> Proposals:
    """Proposals of rows ``block = (start, stop)`` from ``labels_<step>``; with ``sibling``
    (int32 (k,), -1: none) a node may only move to its part's sibling (a bisection step)."""
    start, stop = block
    k, bits = num_parts, id_bits(num_block_nodes(folder))
    chunk = max(1, COUNT_CELLS // k)  # bounds the (rows, k) counts
    found = []
    for lo in range(start, stop, chunk):
        hi = min(stop, lo + chunk)
        rows = np.arange(hi - lo)
        row, neighbour = gather_block_rows(folder, slice(lo, hi))
        counts = label_counts(row, neighbour, gather_labels(folder, step, neighbour), lo, hi, k)
        nodes = np.arange(lo, hi, dtype=np.int64)
        current = gather_labels(folder, step, slice(lo, hi)).astype(np.int64)
        if sibling is None:  # ties between labels go to a hashed rotation, not to part 0
            turn = (mix(seed, step, nodes) % np.uint64(k)).astype(np.int64)
            rotated = (np.arange(k) + turn[:, None]) % k
            best = rotated[rows, np.argmax(np.take_along_axis(counts, rotated, 1), 1)]
        else:
            best = np.where(sibling[current] >= 0, sibling[current], current)
        gain = counts[rows, best] - counts[rows, current]
        # bisection: every node of a split range proposes (a loss can pay for a swap's gain)
        move = gain > 0 if sibling is None else sibling[current] >= 0
        key = (_gain_bucket(gain[move]) << bits) | permute(seed, step, nodes[move], bits)
        found.append((nodes[move], current[move], best[move], key))
    node, source, target, key = (np.concatenate(parts) for parts in zip(*found))
    return Proposals(node, source, target, key, bits - CELL_BITS)


CELL_SPAN = 1 << (7 + CELL_BITS)  # distinct cells: 7 bits of gain bucket, CELL_BITS of id


def _cell_counts(target: np.ndarray, cell: np.ndarray, source: np.ndarray, weight, k: int
                 ) -> np.ndarray:
    """Summed ``weight`` per distinct (target, cell, source): int64 (4, b), rows target, cell,
    source, count (one int64 key per triple: a 1-d sort, far faster than unique rows)."""
    key = (target * CELL_SPAN + cell) * k + source
    distinct, where = np.unique(key, return_inverse=True)
    counts = np.bincount(where.ravel(), weights=weight, minlength=distinct.size)
    return np.vstack([distinct // k // CELL_SPAN, distinct // k % CELL_SPAN, distinct % k,
                      counts.astype(np.int64)])


@dataclass(frozen=True)
class Inflow:
    """Per target part: proposals taken in, int64 (k,); the cell holding the last one taken
    (-1: none or all) and that one's rank inside the cell, 1-based, int64 (k,)."""

    taken: np.ndarray
    cell: np.ndarray
    rank: np.ndarray


def plan_inflow(hist: np.ndarray, sizes: np.ndarray, cap: np.ndarray,
                limit: np.ndarray | None = None) -> Inflow:
    """How many of its best proposals every part ``p`` takes in, so that it ends at most at
    ``cap[p]``: at most ``cap - size`` plus a lower bound of what it sends out. Starts from
    every proposal (at most ``limit``, int64 (k,)) and lowers the counts to the fixpoint (a swap
    between two full parts stays)."""
    k = sizes.size
    target, cell, source, count = hist
    order = np.lexsort((source, -cell, target))  # by target, best cells first
    target, cell, source, count = target[order], cell[order], source[order], count[order]
    # per entry: proposals into its target in better cells, and in its own cell
    first = np.ones(target.size, dtype=bool)
    first[1:] = (target[1:] != target[:-1]) | (cell[1:] != cell[:-1])
    group = np.cumsum(first) - 1
    cell_total = np.bincount(group, weights=count).astype(np.int64)[group]
    cum = np.cumsum(count)
    target_start = np.concatenate([[0], cum])[np.searchsorted(target, target)]
    before = np.concatenate([[0], cum])[np.flatnonzero(first)][group] - target_start
    offered = np.bincount(target, weights=count, minlength=k).astype(np.int64)
    taken = offered if limit is None else np.minimum(offered, limit)
    for _ in range(FIXPOINT_ROUNDS):
        partial = np.clip(taken[target] - before, 0, cell_total)  # taken inside the entry's cell
        surely = np.maximum(0, partial - (cell_total - count))  # from this source, at least
        out = np.bincount(source, weights=surely, minlength=k).astype(np.int64)
        lowered = np.minimum(taken, cap - sizes + out)
        if np.array_equal(lowered, taken):
            break
        taken = lowered
    else:  # not settled: take in only what fits without counting on anything sent out
        taken = np.minimum(taken, cap - sizes)
    edge = (before < taken[target]) & (before + cell_total >= taken[target])
    edge &= (taken[target] > 0) & (taken[target] < offered[target])
    boundary_cell, rank = np.full(k, -1), np.zeros(k, dtype=np.int64)
    boundary_cell[target[edge]] = cell[edge]
    rank[target[edge]] = taken[target[edge]] - before[edge]
    return Inflow(taken, boundary_cell, rank)


def swap_limits(hist: np.ndarray, sibling: np.ndarray, shift_bits: int) -> np.ndarray:
    """Bisection: how many proposals every part may take in from its sibling, int64 (k,): the
    ``m`` best of each direction swap while the m-th pair still gains (Kernighan-Lin's pairing,
    on bucketed gains), and beyond them only proposals that gain on their own."""
    k = sibling.size
    target, cell, _, count = hist
    gain = bucket_gain(cell >> shift_bits)
    limit = np.bincount(target, weights=count * (gain > 0), minlength=k).astype(np.int64)
    for a in np.flatnonzero(sibling > np.arange(k)):
        b = sibling[a]
        ranked = []
        for t in (a, b):  # gain of the r-th best proposal into t: a step function of r
            mine = np.flatnonzero(target == t)
            order = mine[np.argsort(-cell[mine], kind="stable")]
            ranked.append((np.cumsum(count[order]), gain[order]))
        if min(r[0].size for r in ranked) == 0:
            continue
        starts = np.unique(np.concatenate([np.concatenate([[1], c[:-1] + 1]) for c, _ in ranked]))
        starts = starts[starts <= min(c[-1] for c, _ in ranked)]
        pair_gain = sum(g[np.searchsorted(c, starts)] for c, g in ranked)
        losing = np.flatnonzero(pair_gain <= 0)
        pairs = (starts[losing[0]] - 1 if losing.size else min(c[-1] for c, _ in ranked))
        limit[a], limit[b] = max(limit[a], pairs), max(limit[b], pairs)
    return limit


def thresholds(inflow: Inflow, found: list[np.ndarray]) -> np.ndarray:
    """Lowest accepted key of every target, int64 (k,) (0: all, 2**62: none)."""
    limit = np.where(inflow.taken > 0, 0, 1 << 62)
    keys = np.concatenate(found, axis=1)
    for b in np.flatnonzero(inflow.cell >= 0):
        mine = np.sort(keys[1, keys[0] == b])[::-1]
        limit[b] = mine[inflow.rank[b] - 1]
    return limit


# ------------------------------------------------------------------------- the block tasks
# A sweep's proposals wait for its later passes in the block folder, not in worker memory: held
# on the workers they were 32 bytes a node of the graph (every node proposes in a bisection).
def _stored(folder: Path, name: str, block: tuple[int, int]) -> Path:
    return Path(folder) / f"{name}_{block[0]}.npy"


def propose_block(block: tuple[int, int], folder: Path, step: int, num_parts: int, seed: int,
                  sibling: np.ndarray | None = None) -> np.ndarray:
    """``propose`` for rows ``block``, stored in ``folder`` (``proposals_<start>.npy``) for the
    sweep's later passes; returns their histogram: proposals per (target, cell, source),
    int64 (4, b) rows target, cell, source, count."""
    found = propose(block, folder, step, num_parts, seed, sibling)
    save_node_array(folder, _stored(folder, "proposals", block).stem,
                    np.stack([found.node, found.source, found.target, found.key]))
    return _cell_counts(found.target, found.key >> found.shift, found.source, None, num_parts)


def stored_proposals(block: tuple[int, int], folder: Path) -> Proposals:
    """The proposals ``propose_block`` stored for ``block``."""
    node, source, target, key = np.load(_stored(folder, "proposals", block))
    return Proposals(node, source, target, key, id_bits(num_block_nodes(folder)) - CELL_BITS)


def block_cell_keys(block: tuple[int, int], folder: Path, boundary_cell: np.ndarray
                    ) -> np.ndarray:
    """Keys of ``block``'s stored proposals in their target's boundary cell: int64 (2, m) rows
    target, key."""
    found = stored_proposals(block, folder)
    inside = (found.key >> found.shift) == boundary_cell[found.target]
    return np.stack([found.target[inside], found.key[inside]])


def block_moves(block: tuple[int, int], folder: Path, limit: np.ndarray) -> int:
    """The nodes of ``block``'s stored proposals at or above their target's threshold ``limit``
    and their new parts, stored beside them (``moves_<start>.npy``, int64 (2, m): nodes, new
    parts; a task run twice, as Dask does after a worker dies, writes the same file); how many
    nodes move."""
    found = stored_proposals(block, folder)
    move = found.key >= limit[found.target]
    save_node_array(folder, _stored(folder, "moves", block).stem,
                    np.stack([found.node[move], found.target[move]]))
    return int(move.sum())


def apply_moves(folder: Path, blocks: list[tuple[int, int]], labels: np.ndarray) -> None:
    """Every block's stored moves into ``labels`` (int32 (N,), in place), one block at a time;
    the sweep's files (proposals, moves) are removed."""
    for block in blocks:
        node, part = np.load(_stored(folder, "moves", block))
        labels[node] = part
        for name in ("proposals", "moves"):
            _stored(folder, name, block).unlink()


# ------------------------------------------------------------------------------------ driver
def part_caps(num_nodes: int, num_parts: int, imbalance: float) -> np.ndarray:
    """``cap[r]``: most nodes a range of ``r`` final parts may hold, int64 (k + 1,)."""
    r = np.arange(num_parts + 1)
    return np.ceil((1 + imbalance) * num_nodes * r / num_parts - 1e-9).astype(np.int64)


def split_ranges(labels: np.ndarray, ranges: list[tuple[int, int]], caps: np.ndarray
                 ) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray]:
    """One bisection level: every range ``(lo, hi)`` of parts with more than one part splits at
    ``mid``; its nodes (labelled ``lo``) keep ``lo`` for the first ids, in proportion to the
    halves' part counts, and take ``mid`` for the rest. Returns the new ranges, the sibling
    table int32 (k,) and the cap of every label int64 (k,). ``labels`` changes in place."""
    k = caps.size - 1
    sibling, cap = np.full(k, -1, dtype=np.int32), np.zeros(k, dtype=np.int64)
    order = np.argsort(labels, kind="stable")  # nodes by label, ids ascending inside each
    starts = np.searchsorted(labels[order], np.arange(k + 1))
    new = []
    for lo, hi in ranges:
        if hi - lo == 1:
            new.append((lo, hi))
            cap[lo] = caps[1]
            continue
        mid = lo + (hi - lo) // 2
        members = order[starts[lo]:starts[lo + 1]]
        size = members.size
        left = int(np.clip(round(size * (mid - lo) / (hi - lo)), size - caps[hi - mid],
                           caps[mid - lo]))
        labels[members[left:]] = mid
        sibling[lo], sibling[mid] = mid, lo
        cap[lo], cap[mid] = caps[mid - lo], caps[hi - mid]
        new += [(lo, mid), (mid, hi)]
    return new, sibling, cap


def _sweeps(folder: Path, labels: np.ndarray, step: int, cfg: PartitionParams, seed: int,
            client, ranges: list[tuple[int, int]], cap: np.ndarray,
            sibling: np.ndarray | None) -> int:
    """Up to ``cfg.iterations`` synchronous sweeps from ``labels_<step>``; returns the step of
    the last labels written (``labels`` is updated in place); tasks on ``client`` (None: here)."""
    n, k = labels.size, cfg.num_parts
    calls = [(block,) for block in ranges]
    for _ in range(cfg.iterations):
        hist = fold_blocks(client, propose_block, calls,
                           lambda a, b: _cell_counts(*np.concatenate([a, b], axis=1), k),
                           folder=folder, step=step, num_parts=k, seed=seed, sibling=sibling)
        if hist.shape[1] == 0:  # nobody proposes: the stored (empty) proposals go
            for block in ranges:
                _stored(folder, "proposals", block).unlink()
            break
        limit = None if sibling is None else swap_limits(hist, sibling, CELL_BITS)
        inflow = plan_inflow(hist, np.bincount(labels, minlength=k), cap, limit)
        found = run_blocks(client, block_cell_keys, calls, folder=folder,
                           boundary_cell=inflow.cell)
        lowest = thresholds(inflow, found)
        moved = sum(run_blocks(client, block_moves, calls, folder=folder, limit=lowest))
        apply_moves(folder, ranges, labels)
        write_labels(folder, step + 1, labels)
        remove_labels(folder, step)
        step += 1
        if moved <= cfg.min_moved * n:
            break
    return step


def lp_parts(folder: Path, cfg: PartitionParams, seed: int, client=None) -> np.ndarray:
    """Part id for every node of the graph in ``folder``: int32 (N,), every part at most
    ``ceil((1 + cfg.imbalance) * N / k)`` nodes. Recursive bisection (each level: the nodes of a
    range of parts split in two, then sweeps that move nodes only between the two halves), then
    k-way sweeps. Block tasks on ``client`` (``runtime.engine.run_blocks``; None: here)."""
    n, k = num_block_nodes(folder), cfg.num_parts
    caps = part_caps(n, k, cfg.imbalance)
    rows = row_ranges(n, cfg.block_rows)
    labels, ranges, step = np.zeros(n, dtype=np.int32), [(0, k)], 0
    levels = max(1, (k - 1).bit_length())
    for depth in range(1, levels + 1):
        # the cap loosens with depth: a split starts with room for net flows, not only swaps
        level_caps = part_caps(n, k, cfg.imbalance * depth / levels)
        ranges, sibling, cap = split_ranges(labels, ranges, level_caps)
        write_labels(folder, step, labels)
        step = _sweeps(folder, labels, step, cfg, seed, client, rows, cap, sibling)
        remove_labels(folder, step)
    write_labels(folder, step, labels)
    step = _sweeps(folder, labels, step, cfg, seed, client, rows, np.full(k, caps[1]), None)
    remove_labels(folder, step)
    return labels
