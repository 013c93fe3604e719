"""graphops.rings: a shard's rings as bitmaps give the members and local ids that sorted id
arrays give, and a shard task's memory does not grow with its shard."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from gnnpipe.graphops import rings as rings_module
from gnnpipe.graphops.rings import Rings


def _naive(marks: list[np.ndarray]) -> list[np.ndarray]:
    """Each ring's ids ascending, less those of earlier rings."""
    seen, out = np.zeros(marks[0].size, dtype=bool), []
    for mark in marks:
        out.append(np.flatnonzero(mark & ~seen))
        seen |= mark
    return out


@pytest.mark.parametrize("num_nodes", [1, 63, 64, 1000, 4163])
def test_rings_list_members_and_local_ids_as_sorted_ids_would(num_nodes, monkeypatch):
    monkeypatch.setattr(rings_module, "SCAN_WORDS", 3)  # listing crosses many windows
    rng = np.random.default_rng(num_nodes)
    marks = [rng.random(num_nodes) < p for p in (0.2, 0.5, 0.9)]  # overlapping: later rings lose
    rings = Rings(num_nodes)
    for mark in marks:
        rings.add(mark.copy())
    expected = _naive(marks)
    assert len(rings) == 3
    assert rings.ptr.tolist() == np.cumsum([0] + [r.size for r in expected]).tolist()
    for r, ids in enumerate(expected):
        pieces = list(rings.ring(r, 5))
        assert all(0 < p.size <= 5 and p.dtype == np.int64 for p in pieces)
        assert np.array_equal(np.concatenate(pieces or [np.zeros(0, np.int64)]), ids)
    node_id = np.concatenate(expected)
    assert np.array_equal(np.concatenate(list(rings.nodes(7)) or [np.zeros(0, np.int64)]),
                          node_id)
    asked = rng.integers(0, num_nodes, 3 * num_nodes)  # repeats, any order
    inside, local = rings.local(asked)
    where = {int(v): i for i, v in enumerate(node_id)}
    assert inside.tolist() == [int(v) in where for v in asked]
    assert local.tolist() == [where[int(v)] for v in asked if int(v) in where]


def test_a_ring_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match=r"a ring's flags must be \(10,\), found \(9,\)"):
        Rings(10).add(np.ones(9, dtype=bool))


def _shard_task_peak(n: int, folder) -> tuple[int, int]:
    """Traced peak bytes of writing a shard that owns half of a random graph of ``n`` nodes
    (4 in-edges a node) with one halo hop, and the shard's node count."""
    from gnnpipe import io
    from gnnpipe.data.edges import csr_from_edges
    from gnnpipe.graphops.partition import shard_rings, shard_rows
    from shard_oracle import csr_rows

    rng = np.random.default_rng(0)
    rows = csr_rows(csr_from_edges(rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n), n))
    owned = np.zeros(n, dtype=bool)
    owned[: n // 2] = True
    tracemalloc.start()
    try:
        rings = shard_rings(rows, owned, 1)
        with io.shard_writer(folder, 0, 2, n, rings.ptr) as writer:
            for chunk in shard_rows(rows, rings):
                writer.add(*chunk)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, writer.summary["owned"] + writer.summary["halo"]


def test_a_shard_task_holds_under_a_byte_a_graph_node_whatever_its_shard(tmp_path, monkeypatch):
    # sorted-id membership held 24 B a shard node: lp's shard tasks grew 200 MiB at 160M edges
    from gnnpipe.graphops import partition

    monkeypatch.setattr(partition, "SHARD_ROWS", 256)  # one read: a few KiB, the same at any n
    monkeypatch.setattr(rings_module, "SCAN_WORDS", 16)
    small, _ = _shard_task_peak(40_000, tmp_path / "small")
    large, nodes = _shard_task_peak(160_000, tmp_path / "large")
    assert nodes > 0.9 * 160_000  # the shard is nearly the whole graph
    growth = (large - small) / 120_000
    assert growth < 1.0, f"{growth:.2f} bytes more a graph node"  # sorted ids: 8 B and more
