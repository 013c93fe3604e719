"""Partitioning: METIS beats random on a community graph, shapes and ranges, exact reports;
backends, weights, the BFS fallback, and per-part shards with their halo."""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections import deque

import numpy as np
import pytest
import torch

from gnnpipe.data import synthetic
from gnnpipe.config import PartitionParams, SyntheticParams
from gnnpipe.data.graph import EDGE, NODE, Csr
from gnnpipe.data.edges import csr_from_edges
from graph_oracle import normalize_edges
from gnnpipe.graphops.heuristics import train_projection
from gnnpipe.graphops.partition import (symmetric_simple, assign_parts, bfs_order, halo_report,
                               rank_parts, projection_meta, resolve_backend)
from shard_oracle import (build_shard, build_shards, partition_report, shard_summary,
                          write_partition_shard)

# pymetis >= 2025.2 deprecates the xadj/adjncy keywords: gnnpipe passes a CSRAdjacency instead
pytestmark = pytest.mark.filterwarnings("error:Passing xadj/adjncy is deprecated")


def _synthetic_csr(cfg: SyntheticParams, seed: int) -> Csr:
    raw = synthetic.generate(cfg, np.random.default_rng(seed))
    csr, _ = normalize_edges(raw["src"], raw["dst"], cfg.num_nodes, undirected=True, dedup=True,
                             remove_self_loops=True)
    return csr


@pytest.fixture(scope="module")
def community_csr() -> Csr:
    return _synthetic_csr(SyntheticParams(num_nodes=2000, num_classes=4, num_features=2,
                                          avg_degree=8.0, homophily=0.95, degree_skew=0.0), 0)


def test_a_typed_train_graph_is_partitioned_in_to_homogeneous_ids():
    """author 0..2 then paper 3..6: ``author writes paper`` and ``paper cites paper`` edges land
    at the offset ids; a homogeneous layout's one CSR is partitioned as it is."""
    writes, cites = ("author", "writes", "paper"), ("paper", "cites", "paper")
    sizes = [("author", 3), ("paper", 4)]
    train = {writes: csr_from_edges(np.array([0, 2]), np.array([1, 3]), 4, num_src=3),
             cites: csr_from_edges(np.array([0]), np.array([2]), 4)}
    csr = train_projection(sizes, train)
    assert csr.num_nodes == 7
    assert sorted(zip(csr.targets().tolist(), csr.indices.tolist())) == [(4, 0), (5, 3), (6, 2)]
    assert projection_meta(sizes, list(train)) == {
        "projection": "to_homogeneous", "node_types": [["author", 0, 3], ["paper", 3, 4]]}
    one = csr_from_edges(np.array([0, 1]), np.array([1, 2]), 3)
    assert train_projection([(NODE, 3)], {EDGE: one}) is one
    assert projection_meta([(NODE, 3)], [EDGE]) == {}


def _parts(csr, method, k, seed=0, **kw):
    return assign_parts(csr, PartitionParams(method=method, num_parts=k, **kw),
                        np.random.default_rng(seed))


def test_metis_cuts_far_fewer_edges_than_random(community_csr):
    metis = _parts(community_csr, "metis", 4)
    rand = _parts(community_csr, "random", 4)
    m_rep = partition_report(community_csr, metis, 4)
    r_rep = partition_report(community_csr, rand, 4)
    assert r_rep["edge_cut_fraction"] == pytest.approx(0.75, abs=0.03)  # 1 - 1/k for random
    assert m_rep["edge_cut_fraction"] < 0.5 * r_rep["edge_cut_fraction"]
    assert m_rep["balance"] <= 1.1
    assert sum(m_rep["part_sizes"]) == community_csr.num_nodes
    assert min(m_rep["part_sizes"]) > 0


@pytest.mark.parametrize("method", ["metis", "random", "bfs"])
@pytest.mark.parametrize("k", [2, 3, 7])
def test_assign_parts_shape_dtype_and_range(community_csr, method, k):
    parts = _parts(community_csr, method, k)
    assert parts.dtype == np.int32
    assert parts.shape == (community_csr.num_nodes,)
    assert parts.min() >= 0 and parts.max() < k
    assert np.unique(parts).size == k  # every part used on a 2000-node graph


@pytest.mark.parametrize("method", ["metis", "random", "bfs"])
def test_num_parts_above_node_count_raises(tiny_graph, method):
    with pytest.raises(ValueError, match=r"partition\.num_parts=13 exceeds the graph's 12 nodes"):
        _parts(tiny_graph.csr, method, 13)


@pytest.mark.parametrize("method", ["metis", "random", "bfs"])
def test_one_part_is_all_zeros(tiny_graph, method):
    parts = _parts(tiny_graph.csr, method, 1)
    assert parts.dtype == np.int32 and parts.tolist() == [0] * 12


def test_num_parts_equal_to_node_count_is_allowed(tiny_graph):
    parts = _parts(tiny_graph.csr, "random", 12)
    assert parts.shape == (12,) and parts.max() < 12


@pytest.mark.parametrize("method", ["metis", "random", "bfs"])
def test_same_seed_same_parts(community_csr, method):
    first = _parts(community_csr, method, 4, seed=11)
    again = _parts(community_csr, method, 4, seed=11)
    assert np.array_equal(first, again)


def test_random_parts_depend_on_seed(community_csr):
    assert not np.array_equal(_parts(community_csr, "random", 4, seed=1),
                              _parts(community_csr, "random", 4, seed=2))


def test_metis_separates_two_cliques_joined_by_one_edge():
    a = [(u, v) for u in range(5) for v in range(5) if u < v]
    b = [(u + 5, v + 5) for u, v in a]
    edges = np.array(a + b + [(4, 5)])
    csr, _ = normalize_edges(edges[:, 0], edges[:, 1], 10, undirected=True, dedup=True,
                             remove_self_loops=True)
    parts = _parts(csr, "metis", 2)
    assert len(set(parts[:5])) == 1 and len(set(parts[5:])) == 1 and parts[0] != parts[5]
    rep = partition_report(csr, parts, 2)
    assert rep["edge_cut"] == 2  # (4, 5) stored both ways
    assert rep["balance"] == 1.0


def test_metis_tolerates_directed_loops_and_repeats():
    src = np.array([0, 1, 1, 2, 3, 3, 4, 5, 5, 0])
    dst = np.array([1, 2, 2, 2, 4, 4, 5, 3, 0, 0])
    csr = csr_from_edges(src, dst, 6)  # raw: self-loops, repeats, one direction only
    simple = symmetric_simple(csr)
    pairs = set(zip(*simple.edge_index().tolist()))
    assert all(u != v for u, v in pairs)
    assert pairs == {(v, u) for u, v in pairs}
    assert simple.num_edges == len(pairs)
    parts = _parts(csr, "metis", 2)
    assert parts.shape == (6,) and set(parts.tolist()) <= {0, 1}


def test_partition_report_exact_on_hand_made_graph():
    # path 0-1-2-3 stored both ways (6 directed edges) plus edge 0-3 (8 in all)
    src = np.array([0, 1, 2, 0])
    dst = np.array([1, 2, 3, 3])
    csr, _ = normalize_edges(src, dst, 4, undirected=True, dedup=True, remove_self_loops=True)
    assert csr.num_edges == 8
    parts = np.array([0, 0, 1, 1], dtype=np.int32)
    # cut edges: 1-2 and 0-3, both directions -> 4 of 8
    assert partition_report(csr, parts, 2) == {
        "num_parts": 2, "edge_cut": 4, "edge_cut_fraction": 0.5, "balance": 1.0,
        "part_sizes": [2, 2]}
    uneven = np.array([0, 0, 0, 1], dtype=np.int32)
    # cut: 2-3 and 0-3 -> 4 of 8; sizes [3, 1], mean 2 -> balance 1.5
    assert partition_report(csr, uneven, 2) == {
        "num_parts": 2, "edge_cut": 4, "edge_cut_fraction": 0.5, "balance": 1.5,
        "part_sizes": [3, 1]}
    # an empty third part counts in the mean: sizes [3, 1, 0], mean 4/3 -> balance 2.25
    rep = partition_report(csr, uneven, 3)
    assert rep["part_sizes"] == [3, 1, 0] and rep["balance"] == 2.25
    singles = np.arange(4, dtype=np.int32)
    rep = partition_report(csr, singles, 4)
    assert rep["edge_cut"] == 8 and rep["edge_cut_fraction"] == 1.0 and rep["balance"] == 1.0


def test_partition_report_edgeless_graph():
    csr = Csr(torch.zeros(4, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
    rep = partition_report(csr, np.array([0, 1, 1], dtype=np.int32), 2)
    assert rep["edge_cut"] == 0 and rep["edge_cut_fraction"] == 0.0
    assert rep["part_sizes"] == [1, 2]
    assert rep["balance"] == pytest.approx(4 / 3, abs=1e-6)


# ------------------------------------------------------------------------- balance and weights
@pytest.mark.parametrize("imbalance", [0.01, 0.03, 0.1])
def test_metis_balance_within_its_tolerance(community_csr, imbalance):
    for k in (4, 8):
        parts = _parts(community_csr, "metis", k, imbalance=imbalance)
        sizes = np.bincount(parts, minlength=k)
        # METIS rounds the target to whole vertices: one vertex of slack on top of the tolerance
        assert sizes.max() <= (1 + imbalance) * community_csr.num_nodes / k + 1, (k, sizes)


@pytest.fixture(scope="module")
def skewed_csr() -> Csr:
    return _synthetic_csr(SyntheticParams(num_nodes=1500, num_classes=3, num_features=2,
                                          avg_degree=8.0, homophily=0.9, degree_skew=1.5), 1)


@pytest.mark.parametrize("method", ["metis", "bfs"])
def test_degree_weights_balance_work_not_node_counts(skewed_csr, method):
    k = 4
    work = skewed_csr.degrees().numpy() + 1

    def imbalance(parts, weights):
        per_part = np.bincount(parts, weights=weights, minlength=k)
        return per_part.max() / per_part.mean()

    plain = _parts(skewed_csr, method, k)
    weighted = _parts(skewed_csr, method, k, node_weight="degree")
    assert imbalance(weighted, work) < imbalance(plain, work)
    assert imbalance(weighted, work) <= (1.04 if method == "metis" else 1.02)
    assert imbalance(weighted, np.ones_like(work)) > imbalance(plain, np.ones_like(work))


def test_edge_multiplicity_counts_directions_and_repeats():
    # 0->1 and 1->0 (2 stored edges), 1->2 twice (repeat), 2->3 once, loop 3->3 dropped
    csr = csr_from_edges(np.array([0, 1, 1, 1, 2, 3]), np.array([1, 0, 2, 2, 3, 3]), 4)
    simple, counts = symmetric_simple(csr, with_counts=True)
    weight = {(int(u), int(v)): int(c) for (u, v), c in zip(simple.edge_index().T, counts)}
    assert weight == {(0, 1): 2, (1, 0): 2, (1, 2): 2, (2, 1): 2, (2, 3): 1, (3, 2): 1}
    assert torch.equal(simple.indptr, symmetric_simple(csr).indptr)


def test_metis_with_edge_weights_keeps_heavy_edges_inside():
    # a ring of 8 whose edges 0-1, 2-3, 4-5, 6-7 are stored 3 times: 4 parts must keep those
    ring = np.arange(8)
    heavy = np.repeat(ring[::2], 3)
    src = np.concatenate([ring, heavy, heavy + 1])
    dst = np.concatenate([(ring + 1) % 8, heavy + 1, heavy])
    csr = csr_from_edges(src, dst, 8)
    parts = _parts(csr, "metis", 4, edge_weight="multiplicity")
    assert all(parts[u] == parts[u + 1] for u in ring[::2])
    assert np.unique(parts).size == 4


# ---------------------------------------------------------------------------------- backends
def test_auto_backend_is_pymetis_here_and_ignored_for_cheap_methods():
    assert resolve_backend(PartitionParams()) == "pymetis"
    assert resolve_backend(PartitionParams(method="random", backend="pyg_lib")) == "none"
    assert resolve_backend(PartitionParams(method="bfs", backend="torch_sparse")) == "none"


@pytest.mark.parametrize("backend, install", [("pyg_lib", "pyg-lib"),
                                              ("torch_sparse", "torch-sparse built with a 64-bit-idx_t METIS")])
def test_explicit_backend_that_is_not_installed_says_what_to_install(community_csr, backend,
                                                                     install, monkeypatch):
    monkeypatch.delitem(sys.modules, backend, raising=False)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    with pytest.raises(ValueError, match=rf"partition\.backend='{backend}' needs {install}.*"
                                         r"it is not installed here.*pymetis"):
        _parts(community_csr, "metis", 2, backend=backend)


def _fake_module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def test_auto_prefers_pyg_lib_and_hands_it_the_symmetric_graph_and_weights(monkeypatch):
    calls = []

    def metis(rowptr, col, num_partitions, node_weight=None, edge_weight=None, recursive=False):
        calls.append((rowptr, col, num_partitions, node_weight, edge_weight, recursive))
        return torch.arange(rowptr.numel() - 1) % num_partitions

    fake = _fake_module("pyg_lib", partition=types.SimpleNamespace(metis=metis))
    monkeypatch.setitem(sys.modules, "pyg_lib", fake)
    csr = csr_from_edges(np.array([0, 1, 2, 2]), np.array([1, 2, 3, 0]), 4)  # directed
    cfg = PartitionParams(num_parts=2, node_weight="degree", edge_weight="multiplicity")
    assert resolve_backend(cfg) == "pyg_lib"
    parts = assign_parts(csr, cfg, np.random.default_rng(0))
    assert parts.dtype == np.int32 and parts.tolist() == [0, 1, 0, 1]
    (rowptr, col, k, node_w, edge_w, recursive), = calls
    simple, counts = symmetric_simple(csr, with_counts=True)
    assert torch.equal(rowptr, simple.indptr) and torch.equal(col, simple.indices)
    assert k == 2 and recursive is False
    assert node_w.tolist() == (csr.degrees() + 1).tolist()
    assert edge_w.tolist() == counts.tolist()


def test_torch_sparse_without_metis_falls_back_or_fails_clearly(community_csr, monkeypatch):
    def partition2(*args):
        raise RuntimeError("Not compiled with METIS support")

    monkeypatch.setitem(sys.modules, "torch_sparse", _fake_module("torch_sparse"))
    monkeypatch.setattr(torch.ops, "torch_sparse", types.SimpleNamespace(partition2=partition2),
                        raising=False)
    monkeypatch.delitem(sys.modules, "pyg_lib", raising=False)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr("importlib.util.find_spec",
                        lambda name, *a: None if name == "pyg_lib" else real_find_spec(name, *a))
    assert resolve_backend(PartitionParams()) == "pymetis"
    with pytest.raises(ValueError, match="torch-sparse was built without METIS"):
        resolve_backend(PartitionParams(backend="torch_sparse"))


def test_torch_sparse_backend_passes_weights_in_its_argument_order(monkeypatch):
    calls = []

    def partition2(rowptr, col, value, node_weight, num_parts, recursive):
        calls.append((value, node_weight, num_parts, recursive))
        return torch.zeros(rowptr.numel() - 1, dtype=torch.int64) + (num_parts - 1)

    monkeypatch.setitem(sys.modules, "torch_sparse", _fake_module("torch_sparse"))
    monkeypatch.setattr(torch.ops, "torch_sparse", types.SimpleNamespace(partition2=partition2),
                        raising=False)
    csr = csr_from_edges(np.array([0, 1, 1, 2]), np.array([1, 0, 2, 1]), 3)
    parts = _parts(csr, "metis", 3, backend="torch_sparse", node_weight="degree")
    assert parts.tolist() == [2, 2, 2]
    value, node_w, k, recursive = calls[-1]
    assert value is None and node_w.tolist() == [2, 3, 2] and k == 3 and recursive is False


# -------------------------------------------------------------------------------------- bfs
def _bfs_distances(csr: Csr, start: int) -> dict[int, int]:
    simple = symmetric_simple(csr)
    dist, queue = {start: 0}, deque([start])
    while queue:
        u = queue.popleft()
        for v in simple.indices[simple.indptr[u]:simple.indptr[u + 1]].tolist():
            if v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


def test_bfs_order_is_a_breadth_first_permutation_over_components():
    # two paths (0..4 and 5..7), node 8 isolated, edges stored one way only
    csr = csr_from_edges(np.array([0, 1, 2, 3, 5, 6]), np.array([1, 2, 3, 4, 6, 7]), 9)
    for seed in range(5):
        order = bfs_order(csr, np.random.default_rng(seed))
        assert sorted(order.tolist()) == list(range(9))
        assert order[-1] == 8  # isolated nodes last
        first = order[0]
        component = sorted(_bfs_distances(csr, int(first)))
        head = order[:len(component)].tolist()
        assert sorted(head) == component  # a whole component before the next starts
        dist = _bfs_distances(csr, int(first))
        assert [dist[v] for v in head] == sorted(dist[v] for v in head)  # level by level


def test_bfs_parts_are_exactly_balanced_and_cut_less_than_random(community_csr):
    for k in (3, 4, 8):
        parts = _parts(community_csr, "bfs", k)
        sizes = np.bincount(parts, minlength=k)
        assert sizes.max() - sizes.min() <= 1
    bfs = partition_report(community_csr, _parts(community_csr, "bfs", 4), 4)
    rand = partition_report(community_csr, _parts(community_csr, "random", 4), 4)
    assert bfs["edge_cut_fraction"] < rand["edge_cut_fraction"] - 0.05


def test_bfs_depends_on_seed(community_csr):
    assert not np.array_equal(_parts(community_csr, "bfs", 4, seed=1),
                              _parts(community_csr, "bfs", 4, seed=2))


# ----------------------------------------------------------------------------------- shards
def _in_distance(csr: Csr, sources: set[int], hops: int) -> dict[int, int]:
    """Hop distance along in-edges (row v lists the sources feeding v), up to ``hops``."""
    dist = {v: 0 for v in sources}
    frontier = set(sources)
    for h in range(1, hops + 1):
        nxt = set()
        for v in frontier:
            for u in csr.indices[csr.indptr[v]:csr.indptr[v + 1]].tolist():
                if u not in dist:
                    dist[u] = h
                    nxt.add(u)
        frontier = nxt
    return dist


@pytest.mark.parametrize("halo_hops", [0, 1, 2])
def test_shards_own_every_node_once_and_hold_exactly_their_halo(community_csr, halo_hops):
    k = 4
    parts = _parts(community_csr, "metis", k)
    owned_all = []
    for shard in build_shards(community_csr, parts, k, halo_hops):
        assert shard.halo_hops == halo_hops and shard.num_nodes == community_csr.num_nodes
        owned = shard.owned().numpy()
        assert np.array_equal(owned, np.flatnonzero(parts == shard.part))
        owned_all.append(owned)
        dist = _in_distance(community_csr, set(owned.tolist()), halo_hops)
        assert sorted(shard.node_id.tolist()) == sorted(dist)
        for ring in range(halo_hops + 1):
            ids = shard.node_id[shard.ring_ptr[ring]:shard.ring_ptr[ring + 1]].tolist()
            assert ids == sorted(ids) and all(dist[v] == ring for v in ids)
        assert torch.equal(shard.degree, community_csr.degrees()[shard.node_id])
        # local edges are exactly the global edges among the local nodes
        local = set(shard.node_id.tolist())
        src, dst = community_csr.edge_index().tolist()
        want = {(u, v) for u, v in zip(src, dst) if u in local and v in local}
        lsrc, ldst = shard.csr.edge_index()
        got = list(zip(shard.node_id[lsrc].tolist(), shard.node_id[ldst].tolist()))
        assert len(got) == len(want) and set(got) == want
        for v in range(shard.csr.num_nodes):  # columns sorted within each row
            row = shard.csr.indices[shard.csr.indptr[v]:shard.csr.indptr[v + 1]]
            assert torch.equal(row, torch.sort(row).values)
    assert np.array_equal(np.sort(np.concatenate(owned_all)), np.arange(community_csr.num_nodes))


def _sym_hops(indptr, indices, degree, x, hops):
    """``hops`` steps of D^-1/2 (A + I) D^-1/2 with the given degrees (float64 numpy)."""
    n = indptr.numel() - 1
    rows = torch.repeat_interleave(torch.arange(n), indptr[1:] - indptr[:-1])
    d = (degree.double() + 1) ** -0.5
    out = x.double()
    for _ in range(hops):
        agg = out * d[:, None] ** 2  # the self-loop
        agg.index_add_(0, rows, out[indices] * (d[rows] * d[indices])[:, None])
        out = agg
    return out


@pytest.mark.parametrize("halo_hops", [1, 2])
def test_a_halo_of_k_hops_makes_k_layers_exact_on_the_owned_nodes(community_csr, halo_hops):
    """What ClusterGCN / per-rank training relies on: no neighbour of an owned node is missing."""
    x = torch.from_numpy(np.random.default_rng(3).standard_normal((community_csr.num_nodes, 3)))
    full = _sym_hops(community_csr.indptr, community_csr.indices, community_csr.degrees(), x,
                     halo_hops)
    parts = _parts(community_csr, "metis", 4)
    for shard in build_shards(community_csr, parts, 4, halo_hops):
        local = _sym_hops(shard.csr.indptr, shard.csr.indices, shard.degree, x[shard.node_id],
                          halo_hops)
        np.testing.assert_allclose(local[:shard.num_owned].numpy(),
                                   full[shard.owned()].numpy(), atol=1e-12)
        if halo_hops == 2:  # one hop less of halo is visibly wrong somewhere
            short = build_shard(community_csr, parts, shard.part, 4, 1)
            wrong = _sym_hops(short.csr.indptr, short.csr.indices, short.degree,
                              x[short.node_id], 2)
            assert not np.allclose(wrong[:short.num_owned].numpy(),
                                   full[short.owned()].numpy(), atol=1e-6)


def test_halo_follows_in_edges_of_a_directed_graph():
    # 2 -> 0 -> 1 and 3 -> 2: node 0 aggregates from 2, which aggregates from 3
    csr = csr_from_edges(np.array([2, 0, 3]), np.array([0, 1, 2]), 4)
    parts = np.array([0, 1, 1, 1], dtype=np.int32)
    shard = build_shard(csr, parts, 0, 2, 2)
    assert shard.node_id.tolist() == [0, 2, 3] and shard.ring_ptr.tolist() == [0, 1, 2, 3]
    assert shard.csr.edge_index().tolist() == [[1, 2], [0, 1]]  # 2->0 and 3->2, local ids


def test_halo_report_sums_shards(tiny_graph):
    parts = np.array([0] * 6 + [1] * 6, dtype=np.int32)
    summaries = [shard_summary(s) for s in build_shards(tiny_graph.csr, parts, 2, 1)]
    report = halo_report(summaries)
    assert [s["owned"] for s in summaries] == [6, 6]
    assert report["halo_sizes"] == [s["halo"] for s in summaries]
    assert report["halo_fraction"] == round(sum(report["halo_sizes"]) / 12, 6)
    assert all(h > 0 for h in report["halo_sizes"])  # the ring crosses between the halves


def test_rank_parts_deals_round_robin():
    assert [rank_parts(8, r, 3) for r in range(3)] == [[0, 3, 6], [1, 4, 7], [2, 5]]
    with pytest.raises(ValueError, match=r"partition\.num_parts=2 is below the 4 ranks"):
        rank_parts(2, 0, 4)
    with pytest.raises(ValueError, match=r"rank 3 is outside \[0, 3\)"):
        rank_parts(8, 3, 3)


# ------------------------------------------------------------------------ artifacts and stage
def test_shard_files_round_trip_and_a_rank_reads_only_its_own(community_csr, tmp_path):
    from gnnpipe import io

    parts = _parts(community_csr, "metis", 4)
    shards = list(build_shards(community_csr, parts, 4, 1))
    for shard in shards:
        write_partition_shard(tmp_path, shard)
    io.write_json(tmp_path / "meta.json", {"num_parts": 4, "halo_hops": 1,
                                           "num_nodes": community_csr.num_nodes})
    for k in (0, 2, 3):  # other ranks' files: never read
        (tmp_path / f"part_{k}" / "indices.npy").write_bytes(b"not a shard")
    got = io.read_partition_shard(tmp_path, 1)
    want = shards[1]
    assert (got.part, got.num_parts, got.num_nodes, got.num_owned) == (1, 4, 2000, want.num_owned)
    for name in ("node_id", "ring_ptr", "degree"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert torch.equal(got.csr.indptr, want.csr.indptr)
    assert torch.equal(got.csr.indices, want.csr.indices)
    with pytest.raises(ValueError, match=r"part_0/indices\.npy: not a readable \.npy array"):
        io.read_partition_shard(tmp_path, 0)
    np.save(tmp_path / "part_2" / "indices.npy", np.zeros(3, dtype=np.int32))
    with pytest.raises(ValueError, match=r"part_2/indices\.npy: expected int64 \(n,\), found int32"):
        io.read_partition_shard(tmp_path, 2)
    (tmp_path / "part_3" / "meta.json").unlink()
    with pytest.raises(ValueError, match=r"part_3: shard not found \(no meta\.json\)"):
        io.read_partition_shard(tmp_path, 3)
    with pytest.raises(ValueError, match=r"no part 4; the partition has parts 0\.\.3"):
        io.read_partition_shard(tmp_path, 4)


def test_shard_reader_rejects_a_shard_of_another_partition(community_csr, tmp_path):
    from gnnpipe import io

    parts = _parts(community_csr, "random", 2)
    write_partition_shard(tmp_path, build_shard(community_csr, parts, 1, 2, 1))
    io.write_json(tmp_path / "meta.json", {"num_parts": 3, "halo_hops": 1, "num_nodes": 2000})
    with pytest.raises(ValueError, match=r"part_1: shard meta .* disagrees with meta\.json"):
        io.read_partition_shard(tmp_path, 1)
    io.write_json(tmp_path / "meta.json", {"num_parts": 2, "halo_hops": 2, "num_nodes": 2000})
    with pytest.raises(ValueError, match=r"ring_ptr must rise from 0 to \d+ in 4 entries"):
        io.read_partition_shard(tmp_path, 1)


def test_a_shard_written_by_rows_is_the_bytes_of_the_whole_one_or_nothing(community_csr, tmp_path,
                                                                          monkeypatch):
    # lp's shard tasks stream a shard's edges to disk (io.shard_writer) as they read its rows
    from gnnpipe import io
    from gnnpipe.graphops import partition
    from gnnpipe.graphops.partition import shard_rings, shard_rows, write_shard
    from shard_oracle import csr_rows

    parts = _parts(community_csr, "random", 3)
    write_partition_shard(tmp_path / "whole", build_shard(community_csr, parts, 1, 3, 2))
    rows = csr_rows(community_csr)
    rings = shard_rings(rows, parts == 1, 2)
    monkeypatch.setattr(partition, "SHARD_ROWS", 50)
    summary = write_shard(rows, parts == 1, tmp_path / "rows", 1, 3, community_csr.num_nodes, 2)
    with pytest.raises(RuntimeError, match="disk gone"):
        with io.shard_writer(tmp_path / "rows", 2, 3, community_csr.num_nodes, rings.ptr) as w:
            w.add(*next(shard_rows(rows, rings)))
            raise RuntimeError("disk gone")
    names = sorted(p.name for p in (tmp_path / "whole/part_1").iterdir())
    assert names == ["degree.npy", "indices.npy", "indptr.npy", "meta.json", "node_id.npy",
                     "ring_ptr.npy"]
    for name in names:
        assert ((tmp_path / "rows/part_1" / name).read_bytes()
                == (tmp_path / "whole/part_1" / name).read_bytes()), name
    assert summary == shard_summary(build_shard(community_csr, parts, 1, 3, 2))
    assert sorted(p.name for p in (tmp_path / "rows").iterdir()) == ["part_1"]  # no part_2, no temp


@pytest.fixture(scope="module")
def split_folder(tmp_path_factory):
    """prepare + split of a small graph in a scratch folder (cwd-relative default paths)."""
    import os

    import yaml

    from gnnpipe.cli import main

    folder = tmp_path_factory.mktemp("stage")
    params = {"dataset": {"synthetic": {"num_nodes": 1200, "num_features": 8,
                                        "num_classes": 3}},
              "partition": {"num_parts": 4, "halo_hops": 1}}
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        assert main(["prepare"]) == 0 and main(["split"]) == 0
    finally:
        os.chdir(cwd)
    return folder


def test_partition_stage_writes_shards_metrics_and_perf_apart(split_folder, monkeypatch):
    import json

    from gnnpipe import io
    from gnnpipe.cli import main

    monkeypatch.chdir(split_folder)
    assert main(["partition"]) == 0
    out = split_folder / "data/partition"
    assert sorted(p.name for p in out.iterdir()) == [
        "meta.json", "node_to_part.parquet", "part_0", "part_1", "part_2", "part_3"]
    parts = io.read_partition(out)
    metrics = json.loads((split_folder / "metrics/partition.json").read_text())
    assert metrics["method"] == "metis" and metrics["backend"] == "pymetis"
    assert metrics["num_parts"] == 4 and metrics["halo_hops"] == 1
    assert metrics["part_sizes"] == np.bincount(parts, minlength=4).tolist()
    assert metrics["balance"] <= 1.03 + 4 / 1200
    assert len(metrics["halo_sizes"]) == 4 and all(h > 0 for h in metrics["halo_sizes"])
    for k in range(4):
        shard = io.read_partition_shard(out, k)
        assert np.array_equal(shard.owned().numpy(), np.flatnonzero(parts == k))
        assert shard.node_id.numel() - shard.num_owned == metrics["halo_sizes"][k]
    assert not any(key in metrics for key in ("seconds", "peak_rss_mb"))
    perf = json.loads((split_folder / "metrics/perf/partition.json").read_text())
    assert perf["seconds"] >= perf["assign_seconds"] >= 0 and perf["peak_rss_mb"] > 50

    files = lambda: {p.relative_to(out): p.read_bytes()  # noqa: E731
                     for p in sorted(out.rglob("*")) if p.is_file()}
    first = files()
    assert len(first) == 2 + 4 * 6
    first_metrics = (split_folder / "metrics/partition.json").read_bytes()
    assert main(["partition"]) == 0  # a rerun is byte-identical, apart from perf
    assert files() == first
    assert (split_folder / "metrics/partition.json").read_bytes() == first_metrics


def test_partition_stage_with_a_missing_backend_fails_in_one_line(split_folder, monkeypatch,
                                                                  capsys):
    import yaml

    from gnnpipe.cli import main

    monkeypatch.chdir(split_folder)
    params = yaml.safe_load((split_folder / "params.yaml").read_text())
    params["partition"]["backend"] = "pyg_lib"
    (split_folder / "other.yaml").write_text(yaml.safe_dump(params))
    assert main(["partition", "--params", "other.yaml", "--out", "elsewhere"]) == 1
    err = capsys.readouterr().err
    assert "partition.backend='pyg_lib' needs pyg-lib" in err and err.count("\n") == 1
    assert not (split_folder / "elsewhere").exists()


@pytest.mark.parametrize("raw, message", [
    ({"method": "metiss"}, r"partition\.method='metiss' is not valid; expected one of: metis, "
                           r"lp, random, bfs"),
    ({"backend": "kahip"}, r"partition\.backend='kahip' is not valid; expected one of: auto, "
                           r"pymetis, torch_sparse, pyg_lib"),
    ({"node_weight": "edges"}, r"partition\.node_weight='edges' .* none, degree"),
    ({"imbalance": 0.0}, r"partition\.imbalance=0\.0 is out of range; expected >= 0\.001"),
    ({"halo_hops": -1}, r"partition\.halo_hops=-1 is out of range; expected >= 0"),
])
def test_partition_params_are_validated(raw, message):
    from gnnpipe.config import ParamsError, params_from_dict

    with pytest.raises(ParamsError, match=message):
        params_from_dict({"partition": raw})


def test_symmetric_simple_takes_an_undirected_simple_graph_as_it_is(community_csr):
    simple, counts = symmetric_simple(community_csr, with_counts=True)
    assert simple is community_csr and counts.tolist() == [2] * community_csr.num_edges
    # one direction of one edge missing: the general path restores it
    src, dst = community_csr.edge_index().numpy()
    drop = np.flatnonzero((src == 0) | (dst == 0))[0]
    keep = np.arange(src.size) != drop
    lopsided = csr_from_edges(src[keep], dst[keep], community_csr.num_nodes)
    rebuilt, counts = symmetric_simple(lopsided, with_counts=True)
    assert torch.equal(rebuilt.indptr, community_csr.indptr)
    assert torch.equal(rebuilt.indices, community_csr.indices)
    assert sorted(counts.tolist()) == [1, 1] + [2] * (community_csr.num_edges - 2)
