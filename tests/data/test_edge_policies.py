"""The edge policies of both graph kinds pinned against a brute-force statement of the rule:
which input row each stored edge comes from (edge weights / times follow it), for directed and
undirected input, with and without dedup and self-loop removal.

Rule (tests/graph_oracle.py ``normalize_edges``): self-loops go first (same-type edges only);
dedup keeps, per pair (unordered when undirected), the row with the earliest time, then the
first row; an undirected edge is stored both ways (a kept self-loop once), both directions from
the same row. Copies of one stored edge (no dedup) come by (time, row), in either layout.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

from gnnpipe.config import params_from_dict
from graph_oracle import TableRelation, build, raw_homogeneous
from gnnpipe.data.edges import edge_pairs
from gnnpipe.data.graph import EDGE
from gnnpipe.sources.base import RawGraph, RawNodeType

N = 5  # few nodes, many rows: every pair repeats, in both orientations, with loops
POLICIES = list(itertools.product([True, False], [True, False], [True, False]))


def _rows(seed: int, size: int = 60, num_src: int = N, num_dst: int = N):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_src, size).astype(np.int64)
    dst = rng.integers(0, num_dst, size).astype(np.int64)
    time = rng.integers(0, 6, size).astype(np.int64)  # ties, and out of row order
    return src, dst, time


def _cfg(undirected: bool, dedup: bool, remove_loops: bool, **extra):
    return params_from_dict({"dataset": {
        "source": "parquet", "path": "unused", "undirected": undirected, "dedup": dedup,
        "self_loops": "remove" if remove_loops else "keep", **extra}}).dataset


def expected(src, dst, time, *, undirected, dedup, remove_loops, pairs=None):
    """(src, dst, row) of every stored edge in CSR order (by dst, then src), by the rule above;
    ``pairs``: undirected pair keys (default: ``undirected``; a cross-type relation has none)."""
    pairs = undirected if pairs is None else pairs
    rows = [i for i in range(src.size) if not (remove_loops and src[i] == dst[i])]
    if dedup:
        best = {}
        for i in rows:
            key = (min(src[i], dst[i]), max(src[i], dst[i])) if pairs else (src[i], dst[i])
            if key not in best or (time[i], i) < (time[best[key]], best[key]):
                best[key] = i
        rows = sorted(best.values())
    stored = []
    for i in rows:
        stored.append((int(src[i]), int(dst[i]), 0, i))
        if pairs and src[i] != dst[i]:
            stored.append((int(dst[i]), int(src[i]), 1, i))
    stored.sort(key=lambda e: (e[1], e[0], time[e[3]], e[3]))
    return [(s, d, i) for s, d, _, i in stored]


def _homogeneous(src, dst, time, cfg, with_time=True):
    x = np.zeros((N, 1), dtype=np.float32)
    y = np.arange(N, dtype=np.int64) % 2
    raw = raw_homogeneous(x, y, src, dst, "test",
                          edge_weight=pa.array(np.arange(src.size, dtype=np.float64)),
                          edge_time=pa.array(time) if with_time else None)
    return build(raw, cfg)


@pytest.mark.parametrize("undirected,dedup,remove_loops", POLICIES)
@pytest.mark.parametrize("seed", [0, 1])
def test_homogeneous_rows_follow_the_rule(undirected, dedup, remove_loops, seed):
    src, dst, time = _rows(seed)
    prepared = _homogeneous(src, dst, time, _cfg(undirected, dedup, remove_loops))
    s, d = prepared.graph.target_view().csr.edge_index().numpy()
    rows = np.asarray(prepared.edge_attrs[EDGE]["weight"].to_pylist(), dtype=np.int64)
    want = expected(src, dst, time, undirected=undirected, dedup=dedup,
                    remove_loops=remove_loops)
    assert list(zip(s.tolist(), d.tolist(), rows.tolist())) == want
    assert prepared.edge_attrs[EDGE]["timestamp"].to_pylist() == time[rows].tolist()
    report = prepared.report
    loops = int((src == dst).sum()) if remove_loops else 0
    kept = {i for _, _, i in want}
    assert report["self_loops_removed"] == loops
    assert report["duplicates_removed"] == src.size - loops - len(kept)
    assert report["edges"] == len(want)


@pytest.mark.parametrize("undirected,dedup,remove_loops", POLICIES)
def test_homogeneous_weights_alone_follow_the_row_order(undirected, dedup, remove_loops):
    src, dst, _ = _rows(2)
    prepared = _homogeneous(src, dst, None, _cfg(undirected, dedup, remove_loops),
                            with_time=False)
    s, d = prepared.graph.target_view().csr.edge_index().numpy()
    rows = prepared.edge_attrs[EDGE]["weight"].to_pylist()
    want = expected(src, dst, np.zeros(src.size, dtype=np.int64), undirected=undirected,
                    dedup=dedup, remove_loops=remove_loops)
    assert list(zip(s.tolist(), d.tolist(), [int(r) for r in rows])) == want
    assert "timestamp" not in prepared.edge_attrs[EDGE]


def _typed(relations: dict, sizes: dict, cfg):
    nodes = {t: RawNodeType(num_nodes=n, x=np.zeros((n, 1), dtype=np.float32), where=t)
             for t, n in sizes.items()}
    raw = RawGraph(
        nodes=nodes, relations={e: TableRelation(s, d, "/".join(e), pa.array(t))
                                for e, (s, d, t) in relations.items()},
        target="a", y=np.arange(sizes["a"], dtype=np.int64) % 2, where="test")
    return build(raw, cfg)


def _stored(csr, time) -> list[tuple[int, int, int]]:
    s, d = edge_pairs(csr)
    return list(zip(s.tolist(), d.tolist(), time.tolist()))


@pytest.mark.parametrize("undirected,dedup,remove_loops", POLICIES)
@pytest.mark.parametrize("seed", [0, 1])
def test_typed_same_type_relation_follows_the_rule(undirected, dedup, remove_loops, seed):
    src, dst, time = _rows(seed)
    rel = ("a", "r", "a")
    prepared = _typed({rel: (src, dst, time)}, {"a": N},
                      _cfg(undirected, dedup, remove_loops, layout="typed"))
    graph = prepared.graph
    want = expected(src, dst, time, undirected=undirected, dedup=dedup,
                    remove_loops=remove_loops)
    assert _stored(graph.csr[rel], graph.edge_time[rel]) == [(s, d, time[i]) for s, d, i in want]
    assert graph.reverse == ({rel: rel} if undirected else {})
    loops = int((src == dst).sum()) if remove_loops else 0
    assert prepared.report["self_loops_removed"] == loops
    assert prepared.report["duplicates_removed"] == src.size - loops - len({i for *_, i in want})


@pytest.mark.parametrize("undirected,dedup,remove_loops", POLICIES)
def test_typed_cross_type_relation_and_its_reverse_follow_the_rule(undirected, dedup,
                                                                   remove_loops):
    src, dst, time = _rows(3, num_src=N, num_dst=3)
    rel, rev = ("a", "r", "b"), ("b", "rev_r", "a")
    prepared = _typed({rel: (src, dst, time)}, {"a": N, "b": 3},
                      _cfg(undirected, dedup, remove_loops, layout="typed"))
    graph = prepared.graph
    # self-loops mean nothing across types: nothing is removed as one
    want = expected(src, dst, time, undirected=False, dedup=dedup, remove_loops=False)
    assert _stored(graph.csr[rel], graph.edge_time[rel]) == [(s, d, time[i]) for s, d, i in want]
    assert prepared.report["self_loops_removed"] == 0
    if undirected:
        flipped = expected(dst, src, time, undirected=False, dedup=dedup, remove_loops=False)
        assert _stored(graph.csr[rev], graph.edge_time[rev]) == [(s, d, time[i])
                                                                 for s, d, i in flipped]
        assert graph.reverse == {rel: rev, rev: rel}
    else:
        assert list(graph.csr) == [rel]


@pytest.mark.parametrize("undirected,dedup,remove_loops", POLICIES)
def test_a_one_type_typed_graph_is_built_as_the_homogeneous_one(undirected, dedup, remove_loops):
    """One build path: the homogeneous graph is the one-type case, so the same rows as a typed
    relation inside one type give the same CSR, times per stored edge and counts."""
    src, dst, time = _rows(4)
    homogeneous = _homogeneous(src, dst, time, _cfg(undirected, dedup, remove_loops))
    rel = ("a", "r", "a")
    typed = _typed({rel: (src, dst, time)}, {"a": N},
                   _cfg(undirected, dedup, remove_loops, layout="typed"))
    flat, own = homogeneous.graph.csr[EDGE], typed.graph.csr[rel]
    assert np.array_equal(flat.indptr, own.indptr) and np.array_equal(flat.indices, own.indices)
    assert homogeneous.edge_attrs[EDGE]["timestamp"].to_pylist() == \
        typed.graph.edge_time[rel].tolist() == typed.edge_attrs[rel]["timestamp"].to_pylist()
    shared = ("nodes", "edges", "features", "classes", "input_edges", "duplicates_removed",
              "self_loops_removed", "isolated_nodes")
    assert {k: homogeneous.report[k] for k in shared} == {k: typed.report[k] for k in shared}
    assert homogeneous.graph.layout == "homogeneous" and typed.graph.layout == "typed"
