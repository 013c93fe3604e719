"""Graph diagnostics against brute-force definitions and scipy, and the low-homophily warning.
The report comes from block tasks (here in this process; on LocalClusters in
tests/graphops/test_analyze_engines.py): for any block size it equals a whole-graph oracle kept
here (the counts of every row at once, scipy's components)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components as scipy_components

from conftest import as_graph, small_params
from gnnpipe.graphops import analyze
from gnnpipe.graphops.analyze import (BLOCK_ROWS, analyze_blocks, component_stats,
                                      degree_histogram, degree_stats, graph_report, homophily_of,
                                      min_label_components, phase_sizes, row_counts)
from gnnpipe.config import AnalyzeParams, NodeSplitParams
from gnnpipe.data.graph import ROLE_CODES, UNLABELLED, Graph, TargetView, phase_csrs
from gnnpipe.data.edges import csr_from_edges
from graph_oracle import normalize_edges, prepare
from gnnpipe.io.common import role_codes
from block_files import block_graph, save_stored_csr
from gnnpipe.runtime.rng import make_rng


def blocks_report(graph: TargetView, cfg: AnalyzeParams = AnalyzeParams(), *phases,
                  block_rows: int = BLOCK_ROWS, scratch: Path | None = None
                  ) -> tuple[dict, list]:
    """``analyze_blocks`` of ``graph`` written as block files in a temp folder (in ``scratch``,
    else a fresh one), its tasks in this process."""
    with tempfile.TemporaryDirectory() as tmp, \
            block_graph(graph.csr, scratch or Path(tmp), name="analyze-graph") as folder:
        return analyze_blocks(None, folder, graph.y.numpy(), graph.num_classes, cfg,
                              *with_train(folder, *phases), block_rows=block_rows)


def with_train(folder: Path, message_graphs=None, roles=None) -> tuple:
    """``analyze_blocks``'s phase arguments: the train graph saved in ``folder`` as a stored
    graph (as the split stores it), read by rows where it lies; () without phases."""
    if message_graphs is None:
        return ()
    return message_graphs, roles, save_stored_csr(folder / "train.pt", message_graphs["train"])


def _all_rows(csr, y, c):
    return row_counts(csr.indptr.numpy(), y, y[csr.indices.numpy()], c)


def homophily(csr, y, num_classes: int) -> dict:
    """The oracle's ``homophily_of`` of an in-memory ``csr``, all rows as one block (``y`` int
    (N,), ``UNLABELLED`` for none)."""
    y = np.asarray(y)
    return homophily_of(_all_rows(csr, y, num_classes), num_classes)


def whole_graph_report(graph: TargetView, cfg: AnalyzeParams, message_graphs=None, roles=None
                       ) -> tuple[dict, list]:
    """The oracle: every row counted at once over the graph held whole, scipy's weak
    components."""
    y, c, csr = graph.y.numpy(), graph.num_classes, graph.csr
    phases = None
    if message_graphs is not None:
        y_train = np.where(roles == ROLE_CODES["train"], y, UNLABELLED)  # train's labels only
        train = _all_rows(message_graphs["train"], y_train, c)
        phases = {**phase_sizes(message_graphs, roles),
                  "train_label_homophily": homophily_of(train, c)["edge"]}
    return graph_report(graph.num_nodes, y, c, _all_rows(csr, y, c),
                        component_stats(scipy_labels(csr)), phases, cfg)


def scipy_labels(csr) -> np.ndarray:
    n = csr.num_nodes
    adj = sp.coo_matrix((np.ones(csr.num_edges), (csr.indices.numpy(), csr.targets().numpy())),
                        shape=(n, n))
    return scipy_components(adj, directed=True, connection="weak")[1]


def block_components(csr, block_rows: int = BLOCK_ROWS) -> np.ndarray:
    """``min_label_components`` of ``csr``, numbered 0.. by least member."""
    with tempfile.TemporaryDirectory() as tmp, block_graph(csr, Path(tmp)) as folder:
        labels = min_label_components(None, folder, csr.num_nodes, block_rows)
    return np.unique(labels, return_inverse=True)[1]


def _undirected(src, dst, n):
    csr, _ = normalize_edges(np.asarray(src), np.asarray(dst), n, undirected=True, dedup=True,
                             remove_self_loops=True)
    return csr


def _random_graph(seed: int, n: int = 60, m: int = 150, c: int = 4):
    rng = np.random.default_rng(seed)
    csr = _undirected(rng.integers(0, n, m), rng.integers(0, n, m), n)
    y = rng.integers(0, c, n)
    return csr, y, c


def _brute_homophily(csr, y, c):
    """The textbook definitions with Python loops over edges/nodes/classes."""
    src, dst = csr.indices.tolist(), csr.targets().tolist()
    edges = list(zip(src, dst))
    edge_h = sum(y[a] == y[b] for a, b in edges) / len(edges)
    nbrs = {v: [] for v in range(y.size)}
    for a, b in edges:
        nbrs[b].append(a)
    node_h = np.mean([np.mean([y[u] == y[v] for u in nbrs[v]]) for v in nbrs if nbrs[v]])
    ci = 0.0
    for k in range(c):
        members = [v for v in nbrs if y[v] == k]
        total = sum(len(nbrs[v]) for v in members)
        same = sum(sum(y[u] == k for u in nbrs[v]) for v in members)
        h_k = same / total if total else 0.0
        ci += max(0.0, h_k - len(members) / y.size)
    ci /= c - 1
    # Platonov et al.: degree-weighted class shares of an undirected graph
    degree = np.bincount(np.asarray(dst), minlength=y.size)
    share = np.array([degree[y == k].sum() for k in range(c)]) / len(edges)  # D_k / 2|E|
    chance = (share ** 2).sum()
    adjusted = (edge_h - chance) / (1 - chance)
    return edge_h, node_h, ci, adjusted


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_homophily_matches_brute_force_definitions(seed):
    csr, y, c = _random_graph(seed)
    got = homophily(csr, y, c)
    edge_h, node_h, ci, adjusted = _brute_homophily(csr, y, c)
    assert got["edge"] == pytest.approx(edge_h, abs=1e-6)
    assert got["node"] == pytest.approx(node_h, abs=1e-6)
    assert got["class_insensitive"] == pytest.approx(ci, abs=1e-6)
    assert got["adjusted"] == pytest.approx(adjusted, abs=1e-6)
    assert len(got["per_class"]) == c


def test_homophily_hand_computed():
    # path 0-1-2-3 with labels 0,0,1,1: edges (0,1) same, (1,2) differ, (2,3) same
    csr = _undirected([0, 1, 2], [1, 2, 3], 4)
    got = homophily(csr, np.array([0, 0, 1, 1]), 2)
    assert got["edge"] == pytest.approx(2 / 3)
    # node 0: 1/1, node 1: 1/2, node 2: 1/2, node 3: 1/1
    assert got["node"] == pytest.approx(0.75)
    # degree shares 1/2 each: chance 1/2 -> (2/3 - 1/2) / (1/2) = 1/3
    assert got["adjusted"] == pytest.approx(1 / 3, abs=1e-6)
    # h_k = 2/3 for both classes, class shares 1/2: (1/6 + 1/6) / 1
    assert got["class_insensitive"] == pytest.approx(1 / 3, abs=1e-6)
    # bipartite labelling: perfectly heterophilous
    het = homophily(csr, np.array([0, 1, 0, 1]), 2)
    assert het["edge"] == 0.0 and het["class_insensitive"] == 0.0 and het["adjusted"] < 0


def test_homophily_of_edgeless_graph_is_undefined_not_a_crash():
    csr = csr_from_edges(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 5)
    got = homophily(csr, np.arange(5) % 2, 2)
    assert got["edge"] is None and got["node"] is None and got["adjusted"] is None


def test_directed_adjusted_homophily_uses_source_and_target_class_shares():
    # 0 -> 1, 0 -> 2, 1 -> 2 (stored as rows = targets); labels 0, 0, 1
    csr = csr_from_edges(np.array([0, 0, 1]), np.array([1, 2, 2]), 3)
    y = np.array([0, 0, 1])
    got = homophily(csr, y, 2)
    p = np.array([3, 0]) / 3  # every source in class 0
    q = np.array([1, 2]) / 3  # targets: 1 (class 0), 2 and 2 (class 1)
    chance = p @ q
    assert got["edge"] == pytest.approx(1 / 3)
    assert got["adjusted"] == pytest.approx((1 / 3 - chance) / (1 - chance), abs=1e-6)


# ------------------------------------------------------------------------------- components
@pytest.mark.parametrize("seed", range(4))
def test_components_by_blocks_match_scipy(seed):
    rng = np.random.default_rng(seed)
    n = 300
    m = int(rng.integers(50, 400))  # sparse enough to leave many components and isolated nodes
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    csr = csr_from_edges(src, dst, n)  # directed: components are weak
    got = block_components(csr, int(rng.integers(1, 400)))
    adj = sp.coo_matrix((np.ones(m), (src, dst)), shape=(n, n))
    count, want = scipy_components(adj, directed=True, connection="weak")
    assert got.max() + 1 == count
    # the same partition: labels correspond one to one
    assert np.unique(np.stack([got, want]), axis=1).shape[1] == count
    # numbered by smallest member: first appearances in node order are 0, 1, 2, ...
    _, first = np.unique(got, return_index=True)
    assert np.array_equal(got[np.sort(first)], np.arange(count))


def test_components_of_a_long_chain_with_shuffled_ids():
    n = 5000
    order = np.random.default_rng(0).permutation(n)
    csr = _undirected(order[:-1], order[1:], n)
    labels = block_components(csr, 700)
    assert labels.max() == 0
    two = _undirected(np.r_[order[:2000 - 1], order[2000:-1]], np.r_[order[1:2000], order[2001:]], n)
    labels = block_components(two)
    assert labels.max() == 1
    assert np.bincount(labels).tolist() in ([2000, 3000], [3000, 2000])


# ---------------------------------------------------------------------------------- degrees
def test_degree_histogram_log2_bins():
    rows = degree_histogram(np.array([0, 0, 1, 2, 3, 4, 7, 8, 8, 15, 16]))
    assert [r["bin"] for r in rows] == ["0", "1", "2-3", "4-7", "8-15", "16-31"]
    assert [r["nodes"] for r in rows] == [2, 1, 2, 2, 3, 1]
    assert [r["log2_bin"] for r in rows] == list(range(6))
    assert sum(r["nodes"] for r in rows) == 11
    # empty bins between are kept so the plot's axis has no gaps
    gap = degree_histogram(np.array([1, 40]))
    assert [r["nodes"] for r in gap] == [0, 1, 0, 0, 0, 0, 1]


# ------------------------------------------------------------------------- the full report
def _synthetic(homophily_value: float) -> Graph:
    params = small_params(homophily=homophily_value, num_nodes=2000, num_classes=5)
    return prepare(params.dataset, params.seed)[0].target_view()


def test_low_homophily_warns_and_high_does_not():
    high, _ = blocks_report(_synthetic(0.8), AnalyzeParams())
    low, _ = blocks_report(_synthetic(0.2), AnalyzeParams())
    assert high["homophily"]["edge"] == pytest.approx(0.8, abs=0.03)
    assert high["homophily"]["adjusted"] > 0.6 and not high["low_homophily"]
    assert not any("homophily" in w for w in high["warnings"])
    # 5 balanced classes with 20% of edges inside a class: chance level, adjusted ~ 0
    assert low["homophily"]["adjusted"] == pytest.approx(0.0, abs=0.05)
    assert low["low_homophily"]
    assert any("low homophily" in w and "MLP" in w and "analyze.low_homophily" in w
               for w in low["warnings"])
    json.dumps(high), json.dumps(low)  # JSON-ready


def test_report_counts_are_consistent(tiny_graph):
    report, hist = blocks_report(tiny_graph, AnalyzeParams())
    assert report["nodes"] == tiny_graph.num_nodes
    assert report["edges"] == tiny_graph.csr.num_edges
    assert sum(row["nodes"] for row in hist) == tiny_graph.num_nodes
    assert report["components"]["count"] == 1  # a ring plus chords
    assert report["degree"]["isolated_nodes"] == 0
    assert report["labels"]["count"] == [4, 4, 4]


def test_isolated_nodes_warning():
    csr = _undirected([0, 1], [1, 2], 10)  # 7 of 10 nodes isolated
    graph = Graph.homogeneous(csr, torch.zeros(10, 1), torch.arange(10) % 2, 2).target_view()
    report, _ = blocks_report(graph, AnalyzeParams())
    assert report["degree"]["isolated_nodes"] == 7
    assert report["components"]["count"] == 8 and report["components"]["singletons"] == 7
    assert any("no neighbours" in w for w in report["warnings"])


def test_phase_stats_of_an_inductive_split():
    from split_oracle import split_nodes

    graph = _synthetic(0.8)
    split = split_nodes(as_graph(graph), NodeSplitParams(mode="inductive"), make_rng(0, "split"))
    report, _ = blocks_report(graph, AnalyzeParams(), phase_csrs(split.message_graphs),
                              role_codes(split.roles))
    phases = report["phases"]
    assert phases["train"]["edges"] < phases["val"]["edges"] < phases["test"]["edges"]
    assert phases["test"]["edges"] == graph.csr.num_edges
    # a train node loses its val/test neighbours in the train graph: more isolated than in full
    assert phases["train"]["isolated_fraction"] > report["degree"]["isolated_fraction"]
    assert phases["train_label_homophily"] == pytest.approx(0.8, abs=0.05)


# ------------------------------------------------------------- blocks against the oracle
def _graph(seed: int, n: int = 150, m: int = 120, undirected: bool = True) -> TargetView:
    """Random edges (sparse: many components and isolated nodes), 4 classes, a fifth of the
    nodes unlabelled."""
    rng = np.random.default_rng(seed)
    csr, _ = normalize_edges(rng.integers(0, n, m), rng.integers(0, n, m), n,
                             undirected=undirected, dedup=undirected, remove_self_loops=False)
    y = rng.integers(0, 4, n)
    y[rng.random(n) < 0.2] = UNLABELLED
    return Graph.homogeneous(csr=csr, x=torch.zeros(n, 1), y=torch.from_numpy(y),
                             num_classes=4).target_view()


def node_phases(graph: TargetView):
    """An inductive node split's message graphs and role codes of ``graph``."""
    from split_oracle import split_nodes

    labelled = Graph.homogeneous(csr=graph.csr, x=graph.x, y=graph.y.clamp_min(0), num_classes=4)
    split = split_nodes(labelled, NodeSplitParams(mode="inductive"), make_rng(0, "split"))
    return phase_csrs(split.message_graphs), role_codes(split.roles)


@pytest.mark.parametrize("block_rows", [5, 16, 1000])
@pytest.mark.parametrize("seed, undirected", [(0, True), (1, False)])
def test_blocks_give_the_whole_graph_report_for_any_block_size(tmp_path, block_rows, seed,
                                                               undirected):
    graph = _graph(seed, undirected=undirected)
    phases = node_phases(graph)
    want = whole_graph_report(graph, AnalyzeParams(), *phases)
    got = blocks_report(graph, AnalyzeParams(), *phases, block_rows=block_rows, scratch=tmp_path)
    assert got == want
    assert want[0]["components"]["count"] > 5 and want[0]["degree"]["isolated_nodes"] > 0
    assert list(tmp_path.iterdir()) == []  # block files removed


def test_a_link_split_and_an_edgeless_graph_match_the_oracle():
    graph = _graph(2)
    assert blocks_report(graph, block_rows=13) == whole_graph_report(graph, AnalyzeParams())
    empty = csr_from_edges(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 5)
    bare = Graph.homogeneous(csr=empty, x=torch.zeros(5, 1), y=torch.arange(5) % 2,
                             num_classes=2).target_view()
    assert blocks_report(bare) == whole_graph_report(bare, AnalyzeParams())


def test_components_of_a_long_shuffled_chain_take_few_sweeps(monkeypatch, tmp_path):
    """Roots hook onto roots: a 4000-node path in random id order needs a few dozen sweeps."""
    n = 4000
    order = np.random.default_rng(0).permutation(n)
    csr = csr_from_edges(order[:-1], order[1:], n)  # one direction only: weak connectivity
    sweeps = []
    real = analyze.min_label_sweep
    monkeypatch.setattr(analyze, "min_label_sweep",
                        lambda *a, **k: sweeps.append(a[0]) or real(*a, **k))
    with block_graph(csr, tmp_path) as folder:
        labels = min_label_components(None, folder, n, 500)
    assert (labels == 0).all() and (scipy_labels(csr) == 0).all()
    assert len(sweeps) // 8 < 20, len(sweeps) // 8  # 9 here


def test_component_labels_go_int64_past_int32_nodes(monkeypatch, tmp_path):
    """Past 2**31 - 1 nodes the labels are stored int64 (here with the limit lowered)."""
    monkeypatch.setattr(analyze, "INT32_NODES", 10)
    csr = csr_from_edges(np.array([11, 3]), np.array([2, 4]), 12)
    with block_graph(csr, tmp_path) as folder:
        labels = min_label_components(None, folder, 12, 5)
    assert labels.dtype == np.int64 and labels[11] == 2 and labels[4] == 3


def test_component_figures_take_least_member_labels_as_they_come():
    """``component_stats`` of least-member labels (ids with gaps, as the sweeps and
    ``connected_components`` give them) equals that of the labels numbered 0..C-1."""
    labels = np.array([0, 0, 2, 2, 2, 5, 6, 6], dtype=np.int32)
    expected = {"count": 4, "largest": 3, "largest_fraction": 0.375, "singletons": 1}
    assert component_stats(labels) == expected
    assert component_stats(np.unique(labels, return_inverse=True)[1]) == expected


def test_degree_figures_from_counts_equal_numpy_on_every_node():
    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(1, 400))
        degrees = (rng.pareto(1.1, n) * rng.integers(1, 20)).astype(np.int64)
        values, nodes = np.unique(degrees, return_counts=True)
        p50, p90, p99 = np.percentile(degrees, [50, 90, 99])
        got = degree_stats(values, nodes)
        assert got == degree_stats(degrees)
        assert (got["median"], got["p90"], got["p99"]) == (round(float(p50), 6),
                                                          round(float(p90), 6),
                                                          round(float(p99), 6)), trial
        assert got["mean"] == round(float(degrees.mean()), 6)
