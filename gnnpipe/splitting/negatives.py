"""Negative sampling for link prediction: corrupted targets that are never a forbidden edge.

Every negative keeps the head (source) of a positive and draws a new target, uniformly or in
proportion to the train graph's degree (``degree``: "hard", degree-matched negatives, so a model
cannot win by scoring popular targets high). Candidates are drawn for all slots at once and only
the rejected ones are redrawn: a candidate is rejected when it is the head itself (a self-loop) or
when ``(head, target)`` or ``(target, head)`` is in the forbidden edge set, tested by binary
search in its sorted ``src * N + dst`` keys.

Which edges are forbidden is the leakage question:

* **Fixed val/test negatives** (drawn once by the split stage, written to disk) are checked
  against *every* true edge of the graph, in every split and both directions. They are only ever
  read by evaluation, so this uses no information training could exploit, and it guarantees that
  no true edge is scored as a negative.
* **Training negatives** (drawn afresh every epoch inside training) are checked only against the
  edges training may see: its message and supervision edges. They must *not* be filtered against
  the held-out val/test edges: a pair that is never drawn as a training negative would then be,
  more often than chance, a held-out positive, so the set of negatives itself would carry the
  held-out edges into training (and a real deployment does not know its future edges either). The
  price is that a held-out edge is drawn as a training negative with probability about
  ``|E_heldout| / N**2`` per draw, which is what an honest evaluation must accept.

Repeats are possible among the negatives of one positive (sampling with replacement), as in OGB.
The split's fixed negatives come from ``hashed_negatives``: each slot's draws are hashes of
(seed, positive, slot, round), so any blocks draw the same ones.
"""

from __future__ import annotations

import zlib
from typing import Callable, Iterable

import numpy as np

from gnnpipe.data.edges import contains, sorted_unique
from gnnpipe.runtime.rng import mix

MAX_ROUNDS = 1000  # redraw rounds before a head is declared impossible to corrupt
NEGATIVE_STEP = zlib.crc32(b"split.link.negatives")  # hashed negatives: round r uses step + 1 + r
BUCKET_KEYS = 1 << 20  # keys sorted at a time by forbidden_keys (8 MiB of int64)


def forbidden_keys(blocks: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]],
                   num_nodes: int, alloc: Callable[[int], np.ndarray | None] | None = None
                   ) -> np.ndarray:
    """The int64 keys ``u * N + v`` of every edge, in both directions, of the (src (m,), dst
    (m,)) blocks that ``blocks()`` yields (called twice: to count, then to place), built
    without the whole key set in anonymous memory: the 2E keys go by head into buckets of
    consecutive heads (about ``BUCKET_KEYS`` keys each; one head's keys are never split) of
    ``alloc(2E)`` (an int64 (2E,) array, e.g. ``mapped_keys``'s scratch file; None, or alloc
    giving None: memory), then each bucket is sorted and deduplicated in turn and moved down.
    Returns the sorted unique keys (K,): the first K entries of that array (in memory: a copy
    of them). Memory: an int64 count per node, ``BUCKET_KEYS`` / 4 edges of a block and one
    bucket at a time."""

    def chunks():  # a big block (a whole edge list) a slice at a time
        step = max(1, BUCKET_KEYS // 4)
        for src, dst in blocks():
            for lo in range(0, len(src), step):
                yield (np.asarray(src[lo:lo + step], dtype=np.int64),
                       np.asarray(dst[lo:lo + step], dtype=np.int64))

    counts = np.zeros(num_nodes, dtype=np.int64)  # keys per head
    for src, dst in chunks():
        counts += np.bincount(np.concatenate([src, dst]), minlength=num_nodes)
    total = int(counts.sum())
    first = np.cumsum(counts)
    first -= counts  # where each head's keys begin
    del counts
    bucket = first // BUCKET_KEYS
    lows = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])  # first head of each bucket
    begins = np.r_[first[lows], total]  # the buckets' key ranges [begins[i], begins[i + 1])
    del first, bucket
    keys = None if alloc is None else alloc(total)
    mapped = keys is not None
    keys = keys if mapped else np.empty(total, dtype=np.int64)
    fill = begins[:-1].copy()
    for src, dst in chunks():
        block = np.sort(np.concatenate([src * num_nodes + dst, dst * num_nodes + src]))
        owner = np.searchsorted(lows, block // num_nodes, side="right") - 1  # ascending
        per = np.bincount(owner, minlength=lows.size)
        # the i-th key of a bucket in this block goes after what earlier blocks put there
        keys[fill[owner] + np.arange(block.size) - (np.cumsum(per) - per)[owner]] = block
        fill += per
    kept = 0
    for lo, hi in zip(begins[:-1], begins[1:]):
        unique = sorted_unique(keys[lo:hi])  # a sorted copy: the slots below are free
        keys[kept:kept + unique.size] = unique
        kept += unique.size
    return keys[:kept] if mapped else keys[:kept].copy()  # memory: only the K kept


def mapped_keys(count: int) -> np.ndarray | None:
    """``forbidden_keys``' int64 (count,) array in a mapped scratch file of the stage
    (``gnnpipe.io.temps.scratch_array``: file pages, never anonymous memory, unlinked at once);
    None outside a stage (or for no keys): memory."""
    from gnnpipe.io.temps import scratch_array

    keys = scratch_array(count, 1, np.int64)
    return None if keys is None else keys.reshape(count)


def saturated_heads(forbidden: np.ndarray, num_nodes: int) -> np.ndarray:
    """bool (N,): the heads whose forbidden keys (sorted unique (K,) ``u * N + v``) reach every
    other node, so no negative exists for them; read ``BUCKET_KEYS`` keys / heads at a time."""
    partners = np.zeros(num_nodes, dtype=np.int64)  # forbidden targets per head
    for lo in range(0, forbidden.size, BUCKET_KEYS):
        heads = np.asarray(forbidden[lo:lo + BUCKET_KEYS]) // num_nodes  # ascending
        partners[heads[0]:heads[-1] + 1] += np.bincount(heads - heads[0])
    for lo in range(0, num_nodes, BUCKET_KEYS):  # a self-loop key is no partner
        loops = np.arange(lo, min(num_nodes, lo + BUCKET_KEYS), dtype=np.int64) * (num_nodes + 1)
        partners[lo:lo + loops.size] -= contains(forbidden, loops)
    return partners >= num_nodes - 1


class NegativeSampler:
    """Draws targets ``t`` for heads ``h`` with ``t != h`` and ``(h, t)`` not a forbidden edge.

    ``forbidden``: the sorted unique int64 keys (K,) of the forbidden edges, both directions
    (``forbidden_keys``), kept as given (a memory-mapped array stays file pages: searched in
    place, never copied). ``weights`` (N,) non-negative: draw targets in proportion to them
    (``None``: uniformly).
    """

    def __init__(self, forbidden: np.ndarray, num_nodes: int, weights: np.ndarray | None = None):
        if num_nodes < 2:
            raise ValueError("negative sampling needs a graph of at least 2 nodes")
        self.num_nodes = num_nodes
        self.forbidden = forbidden
        self.cumulative = None
        if weights is not None:
            weights = np.asarray(weights, dtype=np.float64)
            if weights.shape != (num_nodes,) or (weights < 0).any() or weights.sum() <= 0:
                raise ValueError("negative sampling weights must be (N,), >= 0, not all zero "
                                 "(degree negatives need a train graph with edges)")
            self.cumulative = np.cumsum(weights)
        # A head adjacent to every other node has no valid negative at all.
        self.saturated = saturated_heads(forbidden, num_nodes)

    def _draw(self, count: int, rng: np.random.Generator) -> np.ndarray:
        if self.cumulative is None:
            return rng.integers(0, self.num_nodes, size=count)
        u = rng.random(count) * self.cumulative[-1]
        return np.minimum(np.searchsorted(self.cumulative, u, side="right"), self.num_nodes - 1)

    def sample(self, heads: np.ndarray, per_head: int, rng: np.random.Generator) -> np.ndarray:
        """Targets int64 (len(heads), per_head); row i holds the negatives of ``heads[i]``."""
        heads = np.asarray(heads, dtype=np.int64)
        stuck = heads[self.saturated[heads]] if heads.size else heads
        if stuck.size:
            raise ValueError(f"node {int(stuck[0])} is linked to every other node, so no negative "
                             f"edge exists for it ({np.unique(stuck).size} such heads)")
        n = self.num_nodes
        return _redrawn(heads, per_head, lambda slots, _: self._draw(slots.size, rng),
                       lambda h, t: (h == t) | contains(self.forbidden, h * n + t))


def _redrawn(heads: np.ndarray, per_head: int, draw: Callable[[np.ndarray, int], np.ndarray],
            refused: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Targets int64 (P, per_head) for ``heads`` int64 (P,): ``draw(slots, round)`` gives the
    targets of the chosen flat slots (of P * per_head), every slot in round 0; a slot is drawn
    again, next round, while ``refused(h, t)`` (bool) turns its target down for its head."""
    flat_heads = np.repeat(heads, per_head)
    todo = np.arange(flat_heads.size)
    targets = draw(todo, 0)
    for round_ in range(1, MAX_ROUNDS + 1):
        todo = todo[refused(flat_heads[todo], targets[todo])]
        if todo.size == 0:
            return targets.reshape(heads.size, per_head)
        targets[todo] = draw(todo, round_)
    raise ValueError(
        f"could not draw a valid negative for {todo.size} slots after {MAX_ROUNDS} rounds "
        f"(first head: node {int(flat_heads[todo[0]])}): the targets the sampler can draw "
        "are (almost) all its neighbours; use split.link.negative_strategy=uniform")


def hashed_negatives(heads: np.ndarray, edges: np.ndarray, per_head: int, seed: int,
                     num_nodes: int, cumulative: np.ndarray | None,
                     refused: Callable[[np.ndarray, np.ndarray], np.ndarray],
                     step: int = NEGATIVE_STEP) -> np.ndarray:
    """Targets int64 (P, per_head) in ``[0, num_nodes)`` for ``heads`` (P,) drawn from a hash
    of (seed, positive, slot, round) instead of a generator, so each positive's negatives do
    not depend on which block draws them. ``edges`` (P,) int64 ids of the positives;
    ``cumulative`` (num_nodes,) the running sum of integer weights (float or int; None:
    uniform); ``refused(h, t)`` bool: the target may not be drawn for the head (a true pair,
    the head itself). A slot is redrawn, next round, while its target is refused. ``step``: the
    stream (another for each kind of negatives)."""
    slots = np.arange(per_head, dtype=np.uint64)
    with np.errstate(over="ignore"):  # a slot's stream id: the positive's hash plus the slot
        ids = (mix(seed, step, np.asarray(edges, dtype=np.int64))[:, None]
               + slots[None, :]).reshape(-1)

    def draw(slots: np.ndarray, round_: int) -> np.ndarray:
        unit = (mix(seed, step + 1 + round_, ids[slots]) >> np.uint64(11)) * 2.0 ** -53
        if cumulative is None:
            return np.floor(unit * num_nodes).astype(np.int64)
        x = np.floor(unit * float(cumulative[-1])).astype(cumulative.dtype)
        return np.minimum(np.searchsorted(cumulative, x, side="right"), num_nodes - 1)

    return _redrawn(np.asarray(heads, dtype=np.int64), per_head, draw, refused)


def training_sampler_of_blocks(visible: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]],
                               num_nodes: int, weights: np.ndarray | None = None
                               ) -> NegativeSampler:
    """The per-epoch sampler of training: forbids only the edges training may see, the
    (src, dst) blocks ``visible()`` yields, which must be the train phase's message and
    supervision edges and nothing else (see the module docstring for why held-out edges must
    not be forbidden here). Its keys are built by ``forbidden_keys`` into ``mapped_keys``: no
    O(E) array of edges or keys in anonymous memory at any point."""
    return NegativeSampler(forbidden_keys(visible, num_nodes, mapped_keys), num_nodes, weights)
