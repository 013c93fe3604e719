"""Partitioning: METIS beats random on a community graph, shapes and ranges, exact reports."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnpipe import synthetic
from gnnpipe.config import PartitionParams, SyntheticParams
from gnnpipe.graph import Csr, csr_from_edges, normalize_edges
from gnnpipe.partition import _symmetric_simple, assign_parts, partition_report

# pymetis >= 2025 deprecates the xadj/adjncy keywords gnnpipe/partition.py passes (reported)
pytestmark = pytest.mark.filterwarnings("ignore:Passing xadj/adjncy is deprecated")


@pytest.fixture(scope="module")
def community_csr() -> Csr:
    cfg = SyntheticParams(num_nodes=2000, num_classes=4, num_features=2, avg_degree=8.0,
                          homophily=0.95, degree_skew=0.0)
    raw = synthetic.generate(cfg, np.random.default_rng(0))
    csr, _ = normalize_edges(raw["src"], raw["dst"], cfg.num_nodes, undirected=True, dedup=True,
                             remove_self_loops=True)
    return csr


def _parts(csr, method, k, seed=0):
    return assign_parts(csr, PartitionParams(method=method, num_parts=k),
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


@pytest.mark.parametrize("method", ["metis", "random"])
@pytest.mark.parametrize("k", [2, 3, 7])
def test_assign_parts_shape_dtype_and_range(community_csr, method, k):
    parts = _parts(community_csr, method, k)
    assert parts.dtype == np.int32
    assert parts.shape == (community_csr.num_nodes,)
    assert parts.min() >= 0 and parts.max() < k
    assert np.unique(parts).size == k  # every part used on a 2000-node graph


@pytest.mark.parametrize("method", ["metis", "random"])
def test_num_parts_above_node_count_raises(tiny_graph, method):
    with pytest.raises(ValueError, match=r"partition\.num_parts=13 exceeds the graph's 12 nodes"):
        _parts(tiny_graph.csr, method, 13)


@pytest.mark.parametrize("method", ["metis", "random"])
def test_one_part_is_all_zeros(tiny_graph, method):
    parts = _parts(tiny_graph.csr, method, 1)
    assert parts.dtype == np.int32 and parts.tolist() == [0] * 12


def test_num_parts_equal_to_node_count_is_allowed(tiny_graph):
    parts = _parts(tiny_graph.csr, "random", 12)
    assert parts.shape == (12,) and parts.max() < 12


@pytest.mark.parametrize("method", ["metis", "random"])
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
    simple = _symmetric_simple(csr)
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
