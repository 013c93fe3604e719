"""Node splits: sizes, stratification, per-phase message graphs, and the audit catching leaks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gnnpipe.splitting import audit
from gnnpipe.config import NodeSplitParams
from gnnpipe.data.graph import EDGE, Csr, Graph
from split_oracle import audit_node_split, split_nodes
from node_oracle import message_graphs
from conftest import as_graph


def _split(graph, seed=0, **kw):
    return split_nodes(as_graph(graph), NodeSplitParams(**kw), seed=seed)


def _audit(graph, node_split):
    return audit_node_split(as_graph(graph), node_split.roles, node_split.message_graphs,
                            node_split.mode)


def test_a_homogeneous_graph_is_the_one_type_case_of_a_typed_graph(small_graph):
    from gnnpipe.data.graph import NODE, phase_csrs

    typed = as_graph(small_graph)
    assert typed.is_homogeneous and typed.target == NODE and typed.edge_types == (EDGE,)
    assert typed.csr[EDGE] is small_graph.csr and typed.x[NODE] is small_graph.x
    assert typed.y is small_graph.y and typed.reverse == {EDGE: EDGE}
    assert typed.link_edge_type == EDGE and typed.node_time == {}
    assert typed.target_view().csr is small_graph.csr
    graphs = _split(small_graph, mode="inductive").message_graphs
    assert phase_csrs(graphs)["test"] is small_graph.csr
    assert phase_csrs(graphs)["train"] is graphs["train"][EDGE]


def test_stratified_fractions_give_exact_sizes_and_class_balance(small_graph):
    node_split = _split(small_graph, train=0.5, val=0.25, test=0.25)
    n = small_graph.num_nodes
    sizes = {role: int((node_split.roles == role).sum()) for role in ("train", "val", "test")}
    assert sizes == {"train": round(0.5 * n), "val": round(0.25 * n), "test": round(0.25 * n)}
    y = small_graph.y.numpy()
    overall = np.bincount(y) / n
    for role in ("train", "val", "test"):
        share = np.bincount(y[node_split.roles == role], minlength=overall.size) / sizes[role]
        assert np.abs(share - overall).max() < 0.01, role


def test_counts_and_per_class_counts(small_graph):
    counted = _split(small_graph, train=30, val=40, test=50)
    assert [(counted.roles == r).sum() for r in ("train", "val", "test")] == [30, 40, 50]
    assert (counted.roles == "unused").sum() == small_graph.num_nodes - 120
    per_class = _split(small_graph, train=20, val=0.2, test=0.2, per_class=True)
    y = small_graph.y.numpy()
    assert np.bincount(y[per_class.roles == "train"]).tolist() == [20] * small_graph.num_classes


def test_random_strategy_and_seed_determinism(small_graph):
    first = _split(small_graph, strategy="random", seed=3)
    again = _split(small_graph, strategy="random", seed=3)
    other = _split(small_graph, strategy="random", seed=4)
    assert np.array_equal(first.roles, again.roles)
    assert not np.array_equal(first.roles, other.roles)


@pytest.mark.parametrize("kw, message", [
    ({"train": 0.7, "val": 0.2, "test": 0.2, "strategy": "random"}, "exceeds the graph"),
    ({"train": 0.7, "val": 0.2, "test": 0.2}, "only .* remain"),
    ({"train": 0.6, "val": 0.0001, "test": 0.2}, "split.node.val resolves to 0 nodes"),
    ({"train": 600, "per_class": True}, "class 0 has only"),
    ({"train": 0.5, "per_class": True}, "count per class"),
])
def test_impossible_sizes_are_rejected(small_graph, kw, message):
    with pytest.raises(ValueError, match=message):
        _split(small_graph, **kw)


def test_class_with_one_member_is_kept_in_train_and_reported(small_graph):
    y = small_graph.y.clone()
    y[y == 2] = 1
    y[0] = 2  # class 2 now has exactly one node
    graph = dataclasses.replace(small_graph, y=y)
    node_split = _split(graph)
    assert node_split.roles[0] == "train"
    report = _audit(graph, node_split)
    assert report["passed"]
    assert report["classes_missing"] == {"val": [2], "test": [2]}


def test_every_labelled_class_gets_a_train_node_from_the_largest():
    from gnnpipe.splitting.split import _one_each

    assert _one_each(np.array([5, 0, 3, 0]), np.array([10, 1, 6, 0])).tolist() == [4, 1, 3, 0]
    assert _one_each(np.array([1, 0]), np.array([1, 1])).tolist() == [1, 0]  # one to give: kept
    assert _one_each(np.array([2, 2, 0, 0]), np.array([4, 4, 2, 1])).tolist() == [1, 1, 1, 1]


def test_transductive_phases_share_the_whole_graph(small_graph):
    node_split = _split(small_graph)
    graphs = node_split.message_graphs
    assert graphs["train"] is graphs["val"] is graphs["test"]
    assert graphs["train"][EDGE] is small_graph.csr
    report = _audit(small_graph, node_split)
    assert report["passed"] and report["structure_shared_across_phases"]


def test_inductive_message_graphs_hide_val_and_test(small_graph):
    node_split = _split(small_graph, mode="inductive")
    roles = node_split.roles
    for phase, visible in (("train", {"train"}), ("val", {"train", "val"})):
        src, dst = node_split.message_graphs[phase][EDGE].edge_index().numpy()
        assert set(roles[src]) <= visible and set(roles[dst]) <= visible, phase
    # Nothing lost that the phase may see: every full-graph edge among train nodes is kept.
    src, dst = small_graph.csr.edge_index().numpy()
    inside = (roles[src] == "train") & (roles[dst] == "train")
    assert node_split.message_graphs["train"][EDGE].num_edges == int(inside.sum()) > 0
    assert node_split.message_graphs["test"][EDGE] is small_graph.csr
    assert _audit(small_graph, node_split)["passed"]


def test_audit_catches_a_test_edge_in_the_train_graph(small_graph):
    node_split = _split(small_graph, mode="inductive")
    leaky = dict(node_split.message_graphs, train={EDGE: small_graph.csr})  # the classic mistake
    report = audit_node_split(as_graph(small_graph), node_split.roles, leaky, "inductive")
    assert not report["passed"]
    failed = [c["check"] for c in report["checks"] if not c["passed"]]
    assert failed == ["message_train_sees_only_train"]
    with pytest.raises(audit.LeakageError, match="message_train_sees_only_train: .* edges touch"):
        audit.raise_if_failed(report)


def test_audit_catches_an_edge_the_graph_does_not_have(tiny_graph):
    roles = np.array(["train"] * 6 + ["val"] * 3 + ["test"] * 3)
    invented = Csr(tiny_graph.csr.indptr.clone(), tiny_graph.csr.indices.clone())
    invented.indices[0] = 6  # node 0 never linked to node 6
    graphs = {"train": tiny_graph.csr, "val": tiny_graph.csr, "test": invented}
    report = audit_node_split(as_graph(tiny_graph), roles,
                              {p: {EDGE: csr} for p, csr in graphs.items()}, "transductive")
    assert [c["check"] for c in report["checks"] if not c["passed"]] == ["message_test_within_graph"]


def test_message_graphs_restrict_by_role(tiny_graph):
    roles = np.array(["train"] * 4 + ["val"] * 4 + ["test"] * 4, dtype=object)
    graphs = message_graphs(as_graph(tiny_graph), roles, "inductive")
    src, dst = graphs["train"][EDGE].edge_index()
    assert bool(((src < 4) & (dst < 4)).all())
    src, dst = graphs["val"][EDGE].edge_index()
    assert bool(((src < 8) & (dst < 8)).all())
    assert graphs["val"][EDGE].num_edges > graphs["train"][EDGE].num_edges


# ------------------------------------------------------------ graph-aware strategies (cluster,
# time)
def _caveman(num_caves: int = 12, size: int = 10) -> Graph:
    """Cliques of ``size`` nodes joined in a ring by one edge each, plus 3 isolated nodes."""
    from graph_oracle import normalize_edges

    u, v = np.triu_indices(size, k=1)
    starts = np.arange(num_caves) * size
    src = np.concatenate([(starts[:, None] + u).ravel(), starts])
    dst = np.concatenate([(starts[:, None] + v).ravel(), (starts + size + 1) % (num_caves * size)])
    n = num_caves * size + 3
    csr, _ = normalize_edges(src, dst, n, undirected=True, dedup=True, remove_self_loops=True)
    x = torch.arange(n, dtype=torch.float32)[:, None]
    return Graph.homogeneous(csr=csr, x=x, y=torch.arange(n) % 3, num_classes=3).target_view()


def _cross(node_split, graph):
    return _audit(graph, node_split)["cross_split_edges"]


def test_connected_components_match_scipy_with_isolated_nodes():
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components as scipy_components

    from gnnpipe.data.edges import csr_from_edges
    from gnnpipe.graphops.analyze import connected_components

    rng = np.random.default_rng(0)
    n = 500
    src, dst = rng.integers(0, n, 300), rng.integers(0, n, 300)  # many small components
    csr = csr_from_edges(src, dst, n)  # directed storage: components are weak
    labels = connected_components(csr)
    count, expected = scipy_components(sp.coo_matrix((np.ones(300), (src, dst)), shape=(n, n)),
                                       directed=True, connection="weak")
    assert np.unique(labels).size == count
    # same partition of the nodes, and every label is the smallest id of its component
    assert np.unique(np.stack([labels, expected]), axis=1).shape[1] == count
    assert bool((labels <= np.arange(n)).all()) and bool((labels[labels] == labels).all())


def test_component_clusters_leave_no_edge_between_splits():
    graph = _caveman()
    # ring cut open: remove the ring edges so every cave is its own component
    from gnnpipe.data.edges import csr_from_edges

    src, dst = graph.csr.edge_index().numpy()
    same_cave = src // 10 == dst // 10
    graph = dataclasses.replace(graph, csr=csr_from_edges(src[same_cave], dst[same_cave],
                                                          graph.num_nodes))
    node_split = _split(graph, strategy="cluster", cluster="component", train=0.5, val=0.25,
                        test=0.25)
    roles = node_split.roles
    for cave in range(12):  # whole caves only
        assert np.unique(roles[cave * 10:(cave + 1) * 10]).size == 1
    report = audit_node_split(as_graph(graph), roles, node_split.message_graphs,
                              "transductive", separated=True)
    assert report["passed"] and set(report["cross_split_edges"].values()) == {0}
    counts = {r: int((roles == r).sum()) for r in ("train", "val", "test")}
    # 123 nodes: 62 + 31 + 31 by rounding is one too many; sizes are met to within a cave
    assert abs(counts["train"] - 62) <= 5 and counts["val"] and counts["test"]
    assert sum(counts.values()) == 123


def test_separated_audit_fails_when_splits_touch(tiny_graph):
    roles = np.array(["train"] * 6 + ["val"] * 3 + ["test"] * 3)
    graphs = {p: {EDGE: tiny_graph.csr} for p in ("train", "val", "test")}
    report = audit_node_split(as_graph(tiny_graph), roles, graphs, "transductive",
                              separated=True)
    assert [c["check"] for c in report["checks"] if not c["passed"]] == ["splits_not_adjacent"]


def test_metis_clusters_cut_far_fewer_train_test_edges_than_a_random_split():
    graph = _caveman(num_caves=20)
    clustered = _split(graph, strategy="cluster", num_clusters=20, train=0.5, val=0.25, test=0.2)
    random = _split(graph, strategy="random", train=0.5, val=0.25, test=0.2)
    assert _cross(clustered, graph)["train-test"] <= 2 * 20  # at most the ring edges, both ways
    assert _cross(random, graph)["train-test"] > 5 * _cross(clustered, graph)["train-test"]
    assert _audit(graph, clustered)["passed"]
    again = _split(graph, strategy="cluster", num_clusters=20, train=0.5, val=0.25, test=0.2)
    assert np.array_equal(clustered.roles, again.roles)


def test_cluster_strategy_rejects_a_giant_component_and_too_many_clusters(small_graph):
    with pytest.raises(ValueError, match=r"strategy=cluster leaves split.node.\w+ without nodes: "
                                         r"the largest of \d+ clusters \(component\) holds"):
        _split(small_graph, strategy="cluster", cluster="component")
    with pytest.raises(ValueError, match="split.node.num_clusters=5000 exceeds the graph's 1500"):
        _split(small_graph, strategy="cluster", num_clusters=5000)
    with pytest.raises(ValueError, match="needs split.node.strategy=stratified"):
        _split(small_graph, strategy="cluster", train=20, per_class=True)


def test_time_split_orders_splits_by_timestamp_and_the_audit_proves_it(small_graph):
    t = torch.from_numpy(np.random.default_rng(0).permutation(small_graph.num_nodes) // 3 * 1.0)
    graph = dataclasses.replace(small_graph, timestamps=t.double())  # ties: 3 nodes per time
    node_split = _split(graph, strategy="time", train=0.5, val=0.2, test=0.3, mode="inductive")
    roles, ts = node_split.roles, t.numpy()
    assert ts[roles == "train"].max() <= ts[roles == "val"].min()
    assert ts[roles == "val"].max() <= ts[roles == "test"].min()
    assert [(roles == r).sum() for r in ("train", "val", "test")] == [750, 300, 450]
    report = audit_node_split(as_graph(graph), roles, node_split.message_graphs,
                              "inductive", timed=True)
    assert report["passed"]
    swapped = roles.copy()
    first_train, last_test = np.argmin(np.where(roles == "train", ts, np.inf)), np.argmax(ts)
    swapped[[first_train, last_test]] = ["test", "train"]
    report = audit_node_split(as_graph(graph), swapped, node_split.message_graphs,
                              "inductive", timed=True)
    assert "splits_in_time_order" in [c["check"] for c in report["checks"] if not c["passed"]]


def test_time_split_without_timestamps_is_rejected(small_graph):
    with pytest.raises(ValueError, match="strategy=time needs node timestamps.*dataset.synthetic"
                                         ".timestamps: true"):
        _split(small_graph, strategy="time")


def test_synthetic_timestamps_reach_the_split_stage_without_changing_the_graph(tmp_path,
                                                                                 monkeypatch):
    import json

    import yaml

    from conftest import small_params
    from gnnpipe import io
    from gnnpipe.cli import main
    from graph_oracle import prepare

    plain = prepare(small_params().dataset, 0)[0].target_view()
    timed = prepare(small_params(timestamps=True).dataset, 0)[0].target_view()
    assert plain.timestamps is None and timed.timestamps.shape == (1500,)
    assert torch.equal(plain.csr.indices, timed.csr.indices) and torch.equal(plain.x, timed.x)
    io.write_prepared(tmp_path / "prepared", as_graph(timed))
    back = io.read_graph(tmp_path / "prepared").target_view()
    assert torch.equal(back.timestamps, timed.timestamps)

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({
        "dataset": {"synthetic": {"num_nodes": 400, "num_features": 4, "timestamps": True}},
        "split": {"node": {"strategy": "time", "mode": "inductive"}}}))
    assert main(["prepare"]) == 0 and main(["split"]) == 0
    report = json.loads((tmp_path / "metrics/split_audit.json").read_text())
    assert report["passed"]
    assert "splits_in_time_order" in [c["check"] for c in report["checks"]]


def test_fractions_that_add_up_to_one_never_round_past_the_graph(tiny_graph):
    from gnnpipe.splitting.split import resolve_sizes

    for n in (7, 203, 1001):
        sizes = resolve_sizes(NodeSplitParams(train=0.5, val=0.25, test=0.25), n)
        assert sum(sizes.values()) == n, (n, sizes)
    assert resolve_sizes(NodeSplitParams(train=0.5, val=0.25, test=0.25), 203) == \
        {"train": 102, "val": 50, "test": 51}
    assert resolve_sizes(NodeSplitParams(train=20, val=0.5, test=0.5), 100) == \
        {"train": 20, "val": 50, "test": 50}
