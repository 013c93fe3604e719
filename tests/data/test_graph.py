"""Edge policies and the CSR layout, checked against a plain-Python reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnpipe.data.graph import Csr
from gnnpipe.data.edges import csr_from_edges
from graph_oracle import edge_keys, normalize_edges, restrict


def reference_normalize(src, dst, n, *, undirected, dedup, remove_self_loops):
    """Sorted list of stored directed (src, dst) pairs plus (loops removed, dups removed)."""
    pairs = list(zip(map(int, src), map(int, dst)))
    loops = sum(1 for u, v in pairs if u == v) if remove_self_loops else 0
    if remove_self_loops:
        pairs = [(u, v) for u, v in pairs if u != v]
    if undirected:
        keys = [(min(u, v), max(u, v)) for u, v in pairs]
    else:
        keys = list(pairs)
    kept = sorted(set(keys)) if dedup else keys
    dups = len(keys) - len(kept)
    stored = []
    for u, v in kept:
        stored.append((u, v))
        if undirected and u != v:
            stored.append((v, u))
    return sorted(stored), loops, dups


def stored_pairs(csr: Csr) -> list[tuple[int, int]]:
    """Every stored edge as (source, target), read row by row from the CSR."""
    out = []
    indptr, indices = csr.indptr.tolist(), csr.indices.tolist()
    for v in range(csr.num_nodes):
        out.extend((u, v) for u in indices[indptr[v]:indptr[v + 1]])
    return sorted(out)


def assert_csr_invariants(csr: Csr, n: int) -> None:
    assert csr.indptr.dtype == torch.int64 and csr.indices.dtype == torch.int64
    assert csr.num_nodes == n
    assert int(csr.indptr[0]) == 0 and int(csr.indptr[-1]) == csr.num_edges
    assert bool((csr.indptr[1:] >= csr.indptr[:-1]).all())
    for v in range(n):
        row = csr.indices[csr.indptr[v]:csr.indptr[v + 1]]
        assert bool((row[1:] >= row[:-1]).all()), f"row {v} not sorted by source"
    if csr.num_edges:
        assert 0 <= int(csr.indices.min()) and int(csr.indices.max()) < n


def random_edges(seed: int, n: int = 15, m: int = 60):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, size=m)
    dst = rng.integers(0, n, size=m)
    # make sure the interesting cases are present: a loop, an exact repeat, a reversed repeat
    src[:3] = [2, 4, 7]
    dst[:3] = [2, 5, 8]
    src[3:5] = [4, 8]
    dst[3:5] = [5, 7]
    return src, dst, n


POLICIES = [
    dict(undirected=u, dedup=d, remove_self_loops=r)
    for u in (True, False) for d in (True, False) for r in (True, False)
]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: "-".join(
    f"{k}={int(v)}" for k, v in p.items()))
def test_normalize_edges_matches_reference(seed, policy):
    src, dst, n = random_edges(seed)
    csr, report = normalize_edges(src, dst, n, **policy)
    want, loops, dups = reference_normalize(src, dst, n, **policy)
    assert stored_pairs(csr) == want
    assert report.input_edges == src.size
    assert report.self_loops_removed == loops
    assert report.duplicates_removed == dups
    assert report.output_edges == csr.num_edges == len(want)
    assert_csr_invariants(csr, n)


def test_undirected_stores_every_edge_both_ways():
    src = np.array([0, 1, 3])
    dst = np.array([1, 2, 0])
    csr, report = normalize_edges(src, dst, 4, undirected=True, dedup=True, remove_self_loops=True)
    assert stored_pairs(csr) == sorted([(0, 1), (1, 0), (1, 2), (2, 1), (3, 0), (0, 3)])
    assert report.output_edges == 6
    # undirected: in-degree == out-degree
    ei = csr.edge_index()
    assert torch.equal(torch.bincount(ei[0], minlength=4), csr.degrees())


def test_reverse_pair_counts_as_duplicate_when_undirected():
    src = np.array([0, 1, 0, 2])
    dst = np.array([1, 0, 1, 3])
    csr, report = normalize_edges(src, dst, 4, undirected=True, dedup=True, remove_self_loops=True)
    assert report.duplicates_removed == 2  # (1, 0) and the second (0, 1)
    assert stored_pairs(csr) == [(0, 1), (1, 0), (2, 3), (3, 2)]
    directed, dreport = normalize_edges(src, dst, 4, undirected=False, dedup=True,
                                        remove_self_loops=True)
    assert dreport.duplicates_removed == 1  # only the exact repeat of (0, 1)
    assert stored_pairs(directed) == [(0, 1), (1, 0), (2, 3)]


def test_self_loops_removed_are_counted():
    src = np.array([0, 1, 1, 2, 2])
    dst = np.array([0, 1, 2, 2, 0])
    csr, report = normalize_edges(src, dst, 3, undirected=True, dedup=True, remove_self_loops=True)
    assert report.self_loops_removed == 3
    assert report.duplicates_removed == 0
    assert all(u != v for u, v in stored_pairs(csr))
    assert csr.num_edges == 4


def test_kept_self_loop_is_stored_once():
    src = np.array([1, 0, 1])
    dst = np.array([1, 1, 1])
    csr, report = normalize_edges(src, dst, 2, undirected=True, dedup=True, remove_self_loops=False)
    assert report.self_loops_removed == 0
    assert report.duplicates_removed == 1  # the repeated loop
    assert stored_pairs(csr) == [(0, 1), (1, 0), (1, 1)]
    assert csr.degrees().tolist() == [1, 2]


def test_directed_mode_keeps_direction():
    src = np.array([0, 0, 2])
    dst = np.array([1, 2, 1])
    csr, _ = normalize_edges(src, dst, 3, undirected=False, dedup=True, remove_self_loops=True)
    assert stored_pairs(csr) == [(0, 1), (0, 2), (2, 1)]
    # row v lists the sources pointing into v
    assert csr.degrees().tolist() == [0, 2, 1]
    assert csr.indices[csr.indptr[1]:csr.indptr[2]].tolist() == [0, 2]


def test_without_dedup_repeats_are_kept():
    src = np.array([0, 0, 1])
    dst = np.array([1, 1, 0])
    csr, report = normalize_edges(src, dst, 2, undirected=True, dedup=False, remove_self_loops=True)
    assert report.duplicates_removed == 0
    assert csr.num_edges == 6
    assert stored_pairs(csr) == [(0, 1)] * 3 + [(1, 0)] * 3


def test_isolated_nodes_get_empty_rows():
    csr, _ = normalize_edges(np.array([1]), np.array([3]), 6, undirected=True, dedup=True,
                             remove_self_loops=True)
    assert csr.indptr.tolist() == [0, 0, 1, 1, 2, 2, 2]
    assert csr.indices.tolist() == [3, 1]
    assert_csr_invariants(csr, 6)


# ---------------------------------------------------------------------------------- Csr helpers
@pytest.mark.parametrize("seed", [0, 5, 9])
def test_csr_from_edges_edge_index_round_trip(seed):
    rng = np.random.default_rng(seed)
    n, m = 20, 70
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    csr = csr_from_edges(src, dst, n)
    assert_csr_invariants(csr, n)
    ei = csr.edge_index()
    assert ei.shape == (2, m) and ei.dtype == torch.int64
    got = sorted(zip(ei[0].tolist(), ei[1].tolist()))
    assert got == sorted(zip(src.tolist(), dst.tolist()))
    # edge_index is grouped by target in CSR order
    assert torch.equal(ei[1], csr.targets())
    assert bool((ei[1][1:] >= ei[1][:-1]).all())
    assert torch.equal(csr.degrees(), torch.bincount(torch.as_tensor(dst), minlength=n))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_edge_keys_are_sorted_src_times_n_plus_dst(seed):
    src, dst, n = random_edges(seed)
    csr, _ = normalize_edges(src, dst, n, undirected=False, dedup=False, remove_self_loops=False)
    keys = edge_keys(csr)
    assert keys.dtype == torch.int64
    assert keys.tolist() == sorted(int(u) * n + int(v) for u, v in zip(src, dst))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_restrict_keeps_edges_inside_kept_nodes(seed):
    src, dst, n = random_edges(seed)
    csr, _ = normalize_edges(src, dst, n, undirected=True, dedup=True, remove_self_loops=True)
    keep = torch.from_numpy(np.random.default_rng(100 + seed).random(n) < 0.6)
    sub = restrict(csr, keep)
    assert sub.num_nodes == n
    kept = keep.tolist()
    want = [(u, v) for u, v in stored_pairs(csr) if kept[u] and kept[v]]
    assert stored_pairs(sub) == want
    assert_csr_invariants(sub, n)
    assert all(sub.degrees()[~keep] == 0)
    assert csr.num_edges >= sub.num_edges  # original untouched
    assert stored_pairs(csr) == reference_normalize(src, dst, n, undirected=True, dedup=True,
                                                    remove_self_loops=True)[0]


def test_restrict_all_and_none():
    src, dst, n = random_edges(7)
    csr, _ = normalize_edges(src, dst, n, undirected=True, dedup=True, remove_self_loops=True)
    full = restrict(csr, torch.ones(n, dtype=torch.bool))
    assert torch.equal(full.indptr, csr.indptr) and torch.equal(full.indices, csr.indices)
    empty = restrict(csr, torch.zeros(n, dtype=torch.bool))
    assert empty.num_nodes == n and empty.num_edges == 0
    assert empty.indptr.tolist() == [0] * (n + 1)


def test_tiny_graph_fixture_structure(tiny_graph):
    """The conftest graph is a symmetric ring plus chords without loops or repeats."""
    csr = tiny_graph.csr
    pairs = stored_pairs(csr)
    assert len(pairs) == len(set(pairs))
    assert set(pairs) == {(v, u) for u, v in pairs}
    for v in range(12):
        assert ((v + 1) % 12, v) in set(pairs)
