"""A shard's node rings as bitmaps over the graph's ids: membership and local ids in memory that
is 1/4 byte a graph node, whatever the shard's size.

Ring 0 is a part's nodes, ring ``r`` the nodes ``r`` in-hops away that no earlier ring holds; a
shard lists them ring by ring, ascending inside each ring, so the local id of node ``v`` of ring
``r`` is ``ptr[r]`` plus the number of ring-``r`` nodes below ``v``. A ring is stored as one bit a
graph node (uint64 words, node ``v`` at bit ``v & 63`` of word ``v >> 6``) and the number of its
nodes before each word (int64 a word), so counting the nodes below ``v`` is one lookup and one
popcount. Sorted id arrays would cost 8-24 bytes a *shard* node instead, which grows with the
graph at a fixed number of parts (lp's shard tasks at 160M edges: 4M nodes a shard).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

SCAN_WORDS = 1 << 14  # words unpacked at once when listing a ring (1M ids, 1 MiB of flags)
_ONE = np.uint64(1)


def _packed(mark: np.ndarray) -> np.ndarray:
    """bool (N,) as uint64 words (ceil(N / 64),), node ``v`` at bit ``v & 63`` of word ``v >> 6``."""
    flags = np.packbits(mark, bitorder="little")
    words = np.zeros(-(-mark.size // 64) * 8, dtype=np.uint8)
    words[:flags.size] = flags
    return words.view("<u8")


class Rings:
    """The rings of one shard over a graph of ``num_nodes`` nodes, added in order (``add``)."""

    def __init__(self, num_nodes: int):
        self.num_nodes = num_nodes
        self._bits: list[np.ndarray] = []  # uint64 (W,) a ring
        self._before: list[np.ndarray] = []  # int64 (W + 1,): the ring's nodes in earlier words
        self.ptr = np.zeros(1, dtype=np.int64)  # int64 (rings + 1,): where each ring starts

    def __len__(self) -> int:
        return len(self._bits)

    def add(self, mark: np.ndarray) -> None:
        """A new ring: the nodes flagged in ``mark`` (bool (N,)) that no earlier ring holds."""
        if mark.shape != (self.num_nodes,):
            raise ValueError(f"a ring's flags must be ({self.num_nodes},), found {mark.shape}")
        bits = _packed(mark)
        for earlier in self._bits:
            bits &= ~earlier
        before = np.zeros(bits.size + 1, dtype=np.int64)
        np.cumsum(np.bitwise_count(bits), out=before[1:])
        self._bits.append(bits)
        self._before.append(before)
        self.ptr = np.append(self.ptr, self.ptr[-1] + before[-1])

    def ring(self, r: int, chunk: int) -> Iterator[np.ndarray]:
        """The nodes of ring ``r``, int64 ascending, in consecutive pieces of at most ``chunk``."""
        bits, before = self._bits[r], self._before[r]
        for w in range(0, bits.size, SCAN_WORDS):
            if before[min(w + SCAN_WORDS, bits.size)] == before[w]:  # a small ring skips most
                continue
            flags = np.unpackbits(bits[w:w + SCAN_WORDS].view(np.uint8), bitorder="little")
            ids = np.flatnonzero(flags).astype(np.int64) + 64 * w
            for lo in range(0, ids.size, chunk):
                yield ids[lo:lo + chunk]

    def nodes(self, chunk: int) -> Iterator[np.ndarray]:
        """Every node in local order (ring by ring), in pieces of at most ``chunk``."""
        for r in range(len(self)):
            yield from self.ring(r, chunk)

    def local(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of ``ids`` (int64 (m,), in [0, N)) are in the shard, bool (m,), and the local
        ids of those, int64 (inside count,), in the order of ``ids``."""
        word, bit = ids >> 6, (ids & 63).astype(np.uint64)
        inside = np.zeros(ids.size, dtype=bool)
        local = np.zeros(ids.size, dtype=np.int64)
        for r, (bits, before) in enumerate(zip(self._bits, self._before)):
            found = bits[word]
            hit = ((found >> bit) & _ONE).astype(bool)
            below = found[hit] & ((_ONE << bit[hit]) - _ONE)  # the ring's nodes below, same word
            local[hit] = self.ptr[r] + before[word[hit]] + np.bitwise_count(below)
            inside |= hit
        return inside, local[inside]
