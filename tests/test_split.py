"""Node splits: sizes, stratification, per-phase message graphs, and the audit catching leaks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gnnpipe import audit
from gnnpipe.config import NodeSplitParams
from gnnpipe.graph import Csr, Graph
from gnnpipe.rng import make_rng
from gnnpipe.split import message_graphs, split_nodes


def _split(graph, seed=0, **kw):
    return split_nodes(graph, NodeSplitParams(**kw), make_rng(seed, "split"))


def _audit(graph, node_split):
    return audit.audit_node_split(node_split.roles, graph.y.numpy(), graph.num_classes,
                                  node_split.message_graphs, graph.csr, node_split.mode)


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


def test_transductive_phases_share_the_whole_graph(small_graph):
    node_split = _split(small_graph)
    graphs = node_split.message_graphs
    assert graphs["train"] is graphs["val"] is graphs["test"] is small_graph.csr
    report = _audit(small_graph, node_split)
    assert report["passed"] and report["structure_shared_across_phases"]


def test_inductive_message_graphs_hide_val_and_test(small_graph):
    node_split = _split(small_graph, mode="inductive")
    roles = node_split.roles
    for phase, visible in (("train", {"train"}), ("val", {"train", "val"})):
        src, dst = node_split.message_graphs[phase].edge_index().numpy()
        assert set(roles[src]) <= visible and set(roles[dst]) <= visible, phase
    # Nothing lost that the phase may see: every full-graph edge among train nodes is kept.
    src, dst = small_graph.csr.edge_index().numpy()
    inside = (roles[src] == "train") & (roles[dst] == "train")
    assert node_split.message_graphs["train"].num_edges == int(inside.sum()) > 0
    assert node_split.message_graphs["test"] is small_graph.csr
    assert _audit(small_graph, node_split)["passed"]


def test_audit_catches_a_test_edge_in_the_train_graph(small_graph):
    node_split = _split(small_graph, mode="inductive")
    leaky = dict(node_split.message_graphs, train=small_graph.csr)  # the classic mistake
    report = audit.audit_node_split(node_split.roles, small_graph.y.numpy(), 3, leaky,
                                    small_graph.csr, "inductive")
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
    report = audit.audit_node_split(roles, tiny_graph.y.numpy(), 3, graphs, tiny_graph.csr,
                                    "transductive")
    assert [c["check"] for c in report["checks"] if not c["passed"]] == ["message_test_within_graph"]


def test_message_graphs_restrict_by_role(tiny_graph):
    roles = np.array(["train"] * 4 + ["val"] * 4 + ["test"] * 4, dtype=object)
    graphs = message_graphs(tiny_graph.csr, roles, "inductive")
    src, dst = graphs["train"].edge_index()
    assert bool(((src < 4) & (dst < 4)).all())
    src, dst = graphs["val"].edge_index()
    assert bool(((src < 8) & (dst < 8)).all())
    assert graphs["val"].num_edges > graphs["train"].num_edges
