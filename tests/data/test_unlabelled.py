"""Unlabelled nodes (label code -1, gnnpipe issue 18): in no split, message carriers of every
phase, audited (splits_labelled_only, label_coverage), ignored by homophily and class counts,
refused by the metrics, and shown in the report."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
import yaml

from conftest import as_graph, small_params
from gnnpipe import io
from gnnpipe.splitting import audit
from gnnpipe.graphops.analyze import label_distribution
from test_analyze import homophily
from gnnpipe.config import AnalyzeParams, NodeSplitParams, params_from_dict
from gnnpipe.reporting.evaluate import confusion_rows, score_predictions
from gnnpipe.data.graph import EDGE, ROLE_CODES, ROLES, UNLABELLED, Csr, Graph, phase_csrs
from gnnpipe.data.edges import csr_from_edges, edge_pairs
from gnnpipe.data.synthetic import CITES, WRITES
from gnnpipe.reporting.metrics import classification_metrics
from graph_oracle import edge_keys, normalize_edges, prepare
from gnnpipe.runtime.rng import make_rng
from split_oracle import audit_node_split, split_nodes

from test_hetero_data import small_hetero
from test_report import _inputs
from tests.graphops.test_analyze import blocks_report as analyze_graph  # the block path, here

PHASES = ("train", "val", "test")
N = 1500  # small_params' synthetic graph
M = 750  # labelled nodes: half the graph
# 0.6 / 0.2 / 0.2 of the 750 labelled nodes; of all 1500 it would be 900 / 300 / 300
SIZES = {"train": 450, "val": 150, "test": 150}


@pytest.fixture(scope="module")
def half():
    """The synthetic graph with a random half of its nodes unlabelled, node times that
    interleave labelled and unlabelled nodes, and an official split naming both."""
    graph = prepare(small_params().dataset, 0)[0].target_view()
    rng = np.random.default_rng(7)
    y = graph.y.clone()
    y[torch.from_numpy(rng.permutation(N)[: N - M])] = UNLABELLED
    times = torch.from_numpy(rng.permutation(N).astype(np.float64))
    official = torch.from_numpy(rng.choice(4, N, p=[0.4, 0.2, 0.2, 0.2]).astype(np.int8))
    return dataclasses.replace(graph, y=y, timestamps=times, public_roles=official)


def _split(graph, **kw):
    return split_nodes(as_graph(graph), NodeSplitParams(**kw), make_rng(0, "split"))


def _audit(graph, node_split, **kw):
    return audit_node_split(as_graph(graph), node_split.roles, node_split.message_graphs,
                            node_split.mode, **kw)


def _failed(report):
    return [c["check"] for c in report["checks"] if not c["passed"]]


def _counts(roles):
    return {role: int((roles == role).sum()) for role in PHASES}


def _edges_within(csr: Csr, keep: np.ndarray) -> np.ndarray:
    """Sorted ``src * N + dst`` keys of the edges of ``csr`` with both endpoints in ``keep``."""
    src, dst = csr.indices.numpy(), csr.targets().numpy()
    both = keep[src] & keep[dst]
    return np.sort(src[both] * csr.num_nodes + dst[both])


# ------------------------------------------------------------------------ 1. splits skip them
STRATEGIES = {
    "random": dict(strategy="random"),
    "stratified": dict(strategy="stratified"),
    "per_class": dict(strategy="stratified", per_class=True, train=20),
    "cluster": dict(strategy="cluster", num_clusters=32),
    "time": dict(strategy="time"),
    "public": dict(strategy="public"),
}


@pytest.mark.parametrize("mode", ["transductive", "inductive"])
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_every_strategy_splits_only_labelled_nodes(half, name, mode):
    if name == "time" and mode == "inductive":  # a time split's leak-free mode is time
        mode = "time"  # (inductive phases still see later nodes: tests/splitting/test_time_split.py)
    node_split = _split(half, mode=mode, **STRATEGIES[name])
    roles, y = node_split.roles, half.y.numpy()
    labelled = y != UNLABELLED
    assert (roles[~labelled] == "unused").all()
    assert not np.isin(roles[~labelled], PHASES).any()
    counts = _counts(roles)
    if name in ("random", "stratified"):  # fractions of the labelled nodes, exactly
        assert counts == SIZES
    elif name == "per_class":  # 20 labelled nodes of each class; val/test fractions of 750
        assert np.bincount(y[roles == "train"], minlength=half.num_classes).tolist() == \
            [20] * half.num_classes
        assert counts["val"] == 150 and counts["test"] == 150
    elif name == "cluster":  # whole clusters: sizes met to within a cluster's labelled nodes
        for role in PHASES:
            assert abs(counts[role] - SIZES[role]) <= 40, (role, counts)
    elif name == "time":  # the earliest labelled nodes train, whatever unlabelled nodes lie between
        assert counts == SIZES
        t = half.timestamps.numpy()
        order = np.flatnonzero(labelled)[np.argsort(t[labelled], kind="stable")]
        assert np.array_equal(np.sort(order[:450]), node_split.nodes("train"))
        assert np.array_equal(np.sort(order[450:600]), node_split.nodes("val"))
        assert np.array_equal(np.sort(order[600:]), node_split.nodes("test"))
    else:  # public: the official roles of the labelled nodes; unlabelled ones dropped, counted
        official = np.asarray(ROLES)[half.public_roles.numpy()]
        assert np.array_equal(roles[labelled], official[labelled])
        dropped = {role: int(((official == role) & ~labelled).sum()) for role in PHASES}
        assert node_split.unlabelled_dropped == dropped
        assert all(dropped.values())  # the official split did name unlabelled nodes
    report = _audit(half, node_split,
                    timed=name == "time",
                    future_visible=name == "time" and mode == "transductive")  # the opt-in
    assert report["passed"], _failed(report)
    coverage = report["label_coverage"]
    assert coverage["per_role"]["unused"]["unlabelled"] == N - M
    assert all(coverage["per_role"][role]["unlabelled"] == 0 for role in PHASES)
    assert {role: coverage["per_role"][role]["labelled"] for role in PHASES} == counts


def test_all_labelled_graph_splits_as_before(half):
    """The labelled-only path must not change a fully labelled graph: 0.6 of all 1500 nodes."""
    graph = prepare(small_params().dataset, 0)[0].target_view()
    node_split = _split(graph, strategy="random")
    assert _counts(node_split.roles) == {"train": 900, "val": 300, "test": 300}


def test_sizes_are_checked_against_labelled_nodes(half):
    with pytest.raises(ValueError, match=r"train\+val\+test = 800 nodes exceeds the graph's 750 "
                                         r"labelled nodes \(of 1500\)"):
        _split(half, strategy="random", train=600, val=100, test=100)
    unlabelled = dataclasses.replace(half, y=torch.full((N,), UNLABELLED))
    with pytest.raises(ValueError, match="no labelled node"):
        _split(unlabelled)


def test_public_split_unlabelled_is_reported_by_the_split_stage(half, tmp_path, monkeypatch):
    from gnnpipe.cli import main

    io.write_prepared(tmp_path / "data/prepared", as_graph(half))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(
        {"split": {"node": {"strategy": "public", "mode": "inductive"}}}))
    assert main(["split"]) == 0
    report = json.loads((tmp_path / "metrics/split_audit.json").read_text())
    official = np.asarray(ROLES)[half.public_roles.numpy()]
    unlabelled = half.y.numpy() == UNLABELLED
    assert report["passed"]
    assert report["label_coverage"]["public_split_unlabelled"] == \
        {role: int(((official == role) & unlabelled).sum()) for role in PHASES}
    roles = io.read_typed_role_codes(tmp_path / "data/split")
    assert (roles[unlabelled] == ROLE_CODES["unused"]).all()


def test_typed_split_keeps_unlabelled_papers_out_of_splits_and_in_every_graph():
    graph = small_hetero()
    n = graph.num_nodes_dict["paper"]
    y = graph.y.clone()
    unlabelled = np.zeros(n, dtype=bool)
    unlabelled[np.random.default_rng(3).permutation(n)[: n // 2]] = True
    y[torch.from_numpy(unlabelled)] = UNLABELLED
    graph = dataclasses.replace(graph, y=y)
    cfg = params_from_dict({"split": {"node": {"mode": "inductive"}}}).split.node
    node_split = split_nodes(graph, cfg, make_rng(0, "split"))
    roles = node_split.roles
    assert (roles[unlabelled] == "unused").all()
    assert _counts(roles) == {"train": 180, "val": 60, "test": 60}  # 0.6/0.2/0.2 of 300 papers
    train_seen = (roles == "train") | unlabelled
    for edge_type in (WRITES, CITES):  # every typed train graph keeps the unlabelled papers' edges
        src, dst = edge_pairs(graph.csr[edge_type])
        keep = train_seen[dst] & (train_seen[src] if edge_type[0] == "paper" else True)
        s, d = edge_pairs(node_split.message_graphs["train"][edge_type])
        assert np.array_equal(np.sort(s * n + d), np.sort(src[keep] * n + dst[keep])), edge_type
        assert unlabelled[d].any()
    report = audit_node_split(graph, roles, node_split.message_graphs, node_split.mode)
    assert report["passed"], _failed(report)
    assert report["label_coverage"]["unlabelled"] == n // 2
    doctored = roles.copy()
    doctored[np.flatnonzero(unlabelled)[0]] = "val"
    report = audit_node_split(graph, doctored, node_split.message_graphs, node_split.mode)
    assert "splits_labelled_only" in _failed(report)


# ---------------------------------------------------------------- 2. they carry messages
def test_unlabelled_nodes_are_in_every_inductive_phase_graph(half):
    node_split = _split(half, strategy="random", mode="inductive")
    roles, graphs, full = node_split.roles, phase_csrs(node_split.message_graphs), half.csr
    carriers = half.y.numpy() == UNLABELLED
    train_seen = (roles == "train") | carriers
    assert np.array_equal(edge_keys(graphs["train"]).numpy(), _edges_within(full, train_seen))
    assert np.array_equal(edge_keys(graphs["val"]).numpy(),
                          _edges_within(full, train_seen | (roles == "val")))
    assert graphs["test"] is full
    # a train - unlabelled edge survives in the train graph (both directions: undirected)
    src, dst = graphs["train"].indices.numpy(), graphs["train"].targets().numpy()
    assert ((roles[src] == "train") & carriers[dst]).sum() > 0
    assert ((carriers[src] & carriers[dst])).sum() > 0
    report = _audit(half, node_split)
    assert report["passed"], _failed(report)
    # carriers are seen by every phase, but they are no channel for a held-out node's edges
    leak_src, leak_dst = src, dst
    full_src, full_dst = full.indices.numpy(), full.targets().numpy()
    bridge = np.flatnonzero(carriers[full_src] & (roles[full_dst] == "test"))[0]
    leaked = csr_from_edges(np.append(leak_src, full_src[bridge]),
                            np.append(leak_dst, full_dst[bridge]), half.num_nodes)
    report = audit_node_split(as_graph(half), roles,
                              {**node_split.message_graphs, "train": {EDGE: leaked}},
                              "inductive")
    assert _failed(report) == ["message_train_sees_only_train"]


def test_transductive_phases_share_the_whole_graph_with_unlabelled_nodes(half):
    node_split = _split(half, mode="transductive")
    assert all(node_split.message_graphs[p][EDGE] is half.csr for p in PHASES)
    assert _audit(half, node_split)["passed"]


def test_a_labelled_node_no_split_took_stays_hidden_in_inductive_graphs(half):
    """Only *unlabelled* unused nodes are carriers: a labelled node left out by the sizes is not."""
    node_split = _split(half, strategy="random", mode="inductive", train=100, val=50, test=50)
    roles, y = node_split.roles, half.y.numpy()
    spare = (roles == "unused") & (y != UNLABELLED)
    assert spare.sum() == M - 200
    src, dst = (node_split.message_graphs["train"][EDGE].indices.numpy(),
                node_split.message_graphs["train"][EDGE].targets().numpy())
    assert not spare[src].any() and not spare[dst].any()
    # and the audit does not take such a node for a carrier: its edge in the train graph fails
    full_src, full_dst = half.csr.indices.numpy(), half.csr.targets().numpy()
    edge = np.flatnonzero(spare[full_src] & (roles[full_dst] == "train"))[0]
    leaked = csr_from_edges(np.append(src, full_src[edge]), np.append(dst, full_dst[edge]),
                            half.num_nodes)
    report = audit_node_split(as_graph(half), roles,
                              {**node_split.message_graphs, "train": {EDGE: leaked}},
                              "inductive")
    assert _failed(report) == ["message_train_sees_only_train"]


# -------------------------------------------------------------------------- 3. the audit
def test_audit_fails_when_an_unlabelled_node_is_in_a_split(half):
    node_split = _split(half, mode="inductive")
    y = half.y.numpy()
    check = _check(_audit(half, node_split), "splits_labelled_only")
    assert check["passed"]
    assert "750 unlabelled nodes are unused" in check["detail"]
    victim = int(np.flatnonzero(y == UNLABELLED)[3])
    doctored = node_split.roles.copy()
    doctored[victim] = "train"
    report = audit_node_split(as_graph(half), doctored, node_split.message_graphs,
                              "inductive")
    assert not report["passed"]
    assert "splits_labelled_only" in _failed(report)
    detail = next(c["detail"] for c in report["checks"] if c["check"] == "splits_labelled_only")
    assert detail.startswith("unlabelled nodes in splits: {'train': 1, 'val': 0, 'test': 0} "
                             f"(first: node {victim}, train)")
    with pytest.raises(audit.LeakageError, match="splits_labelled_only"):
        audit.raise_if_failed(report)
    assert report["label_coverage"]["per_role"]["train"]["unlabelled"] == 1


def _check(report: dict, name: str) -> dict:
    return next(c for c in report["checks"] if c["check"] == name)


def test_label_coverage_counts_exactly():
    y = torch.tensor([0, 1, -1, 2, -1, 0, -1])
    roles = np.array(["train", "train", "train", "val", "unused", "test", "unused"])
    csr = csr_from_edges(np.array([0, 3]), np.array([1, 5]), 7)  # no edge across phases
    graph = Graph.homogeneous(csr=csr, x=torch.zeros(7, 2), y=y, num_classes=3)
    report = audit_node_split(graph, roles, {p: {EDGE: csr} for p in PHASES},
                              "transductive")
    assert report["label_coverage"] == {
        "labelled": 4, "unlabelled": 3, "labelled_fraction": 0.571429,
        "per_role": {"train": {"labelled": 2, "unlabelled": 1},
                     "val": {"labelled": 1, "unlabelled": 0},
                     "test": {"labelled": 1, "unlabelled": 0},
                     "unused": {"labelled": 0, "unlabelled": 2}}}
    check = _check(report, "splits_labelled_only")
    assert not check["passed"] and "first: node 2, train" in check["detail"]


def test_class_balance_counts_labelled_nodes_only(half):
    node_split = _split(half)
    y = half.y.numpy()
    report = _audit(half, node_split)
    for role in PHASES:
        want = np.bincount(y[node_split.roles == role], minlength=half.num_classes).tolist()
        assert report["class_balance"][role]["count"] == want
        assert sum(want) == SIZES[role]


# ------------------------------------------------------------------------- 4. analyze
def _tiny_mixed() -> Graph:
    """Labelled 0..3 (classes 0, 0, 1, 1), unlabelled 4 and 5.

    Labelled-labelled edges 0-1, 2-3 (same class) and 0-2 (different); unlabelled edges 4-0,
    4-2, 5-1 and 4-5. Over labelled pairs h_edge = 4/6; counting every edge (-1 == -1 as a
    "class") would give 6/14.
    """
    src = np.array([0, 2, 0, 4, 4, 5, 4])
    dst = np.array([1, 3, 2, 0, 2, 1, 5])
    csr, _ = normalize_edges(src, dst, 6, undirected=True, dedup=True, remove_self_loops=True)
    y = torch.tensor([0, 0, 1, 1, UNLABELLED, UNLABELLED])
    return Graph.homogeneous(csr=csr, x=torch.zeros(6, 1), y=y, num_classes=2).target_view()


def test_homophily_runs_over_edges_between_labelled_nodes():
    graph = _tiny_mixed()
    h = homophily(graph.csr, graph.y.numpy(), 2)
    assert h["edge"] == pytest.approx(4 / 6, abs=1e-6)
    # node: 0 -> {1, 2} 1/2, 1 -> {0} 1, 2 -> {3, 0} 1/2, 3 -> {2} 1
    assert h["node"] == pytest.approx(0.75, abs=1e-6)
    assert h["per_class"] == pytest.approx([2 / 3, 2 / 3], abs=1e-6)
    # class shares of the 4 labelled nodes (1/2 each), not of all 6 nodes
    assert h["class_insensitive"] == pytest.approx(2 * (2 / 3 - 1 / 2), abs=1e-6)
    assert h["adjusted"] == pytest.approx((4 / 6 - 0.5) / 0.5, abs=1e-6)
    assert label_distribution(graph.y.numpy(), 2) == {"count": [2, 2], "fraction": [0.5, 0.5],
                                                      "majority_fraction": 0.5}
    assert analyze_graph(graph, AnalyzeParams())[0]["label_coverage"] == {
        "labelled": 4, "unlabelled": 2, "labelled_fraction": 0.666667,
        "edges_between_labelled": 6}


@pytest.mark.parametrize("seed", [0, 1])
def test_homophily_equals_that_of_the_labelled_subgraph(seed):
    rng = np.random.default_rng(seed)
    n, c = 80, 3
    csr, _ = normalize_edges(rng.integers(0, n, 300), rng.integers(0, n, 300), n,
                             undirected=True, dedup=True, remove_self_loops=True)
    y = rng.integers(0, c, n)
    y[rng.random(n) < 0.4] = UNLABELLED
    labelled = y != UNLABELLED
    new_id = np.cumsum(labelled) - 1
    src, dst = csr.indices.numpy(), csr.targets().numpy()
    both = labelled[src] & labelled[dst]
    sub = csr_from_edges(new_id[src[both]], new_id[dst[both]], int(labelled.sum()))
    got, want = homophily(csr, y, c), homophily(sub, y[labelled], c)
    assert got == want
    assert got != homophily(csr, np.where(labelled, y, 0), c)  # the unlabelled edges do matter


def test_analyze_report_has_label_coverage_and_labelled_class_counts():
    graph = _tiny_mixed()
    report, _ = analyze_graph(graph, AnalyzeParams())
    assert report["label_coverage"]["labelled"] == 4
    assert report["label_coverage"]["edges_between_labelled"] == 6
    assert report["labels"]["count"] == [2, 2]
    assert report["homophily"]["edge"] == pytest.approx(4 / 6, abs=1e-6)
    assert not any("homophily cannot be measured" in w for w in report["warnings"])


def test_no_edge_between_labelled_nodes_leaves_homophily_undefined_with_a_warning():
    # a star: the unlabelled centre 0 joins labelled leaves 1..4, which touch nothing else
    csr, _ = normalize_edges(np.zeros(4, dtype=np.int64), np.arange(1, 5), 5, undirected=True,
                             dedup=True, remove_self_loops=True)
    graph = Graph.homogeneous(csr, torch.zeros(5, 1), torch.tensor([UNLABELLED, 0, 1, 0, 1]),
                              num_classes=2).target_view()
    report, _ = analyze_graph(graph, AnalyzeParams())
    h = report["homophily"]
    assert h["edge"] is None and h["node"] is None and h["adjusted"] is None
    assert h["class_insensitive"] is None and h["per_class"] == [0.0, 0.0]
    assert report["low_homophily"] is False
    assert report["label_coverage"]["edges_between_labelled"] == 0
    assert ("no edge joins two labelled nodes (4 of 5 nodes are labelled): homophily cannot be "
            "measured") in report["warnings"]
    assert not any("has no edges" in w for w in report["warnings"])


# --------------------------------------------------------------------- 5. evaluate / metrics
def _one_line_value_error(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def test_metrics_refuse_unlabelled_truth():
    _one_line_value_error(lambda: classification_metrics(np.array([0, -1, 1]), np.array([0, 1, 1]), 2),
                          r"unlabelled node, -1, cannot be scored")
    assert classification_metrics(np.array([0, 1, 1]), np.array([0, 1, 1]), 2)["accuracy"] == 1.0


def test_evaluate_refuses_an_unlabelled_split_node():
    y = np.array([0, 1, UNLABELLED, 1, 0, 1])
    roles = io.role_codes(np.array(["train", "train", "test", "val", "test", "unused"]))
    node_id = torch.arange(6)
    logits = torch.eye(2)[[0, 1, 0, 1, 0, 1]]
    _one_line_value_error(lambda: score_predictions(node_id, logits, y, roles, 2),
                          r"1 test nodes of the split are unlabelled \(first: node 2\)")
    _one_line_value_error(lambda: confusion_rows(node_id, logits, y, roles),
                          r"1 test nodes of the split are unlabelled")
    fine = roles.copy()
    fine[2] = ROLE_CODES["unused"]  # the same predictions score once the unlabelled node is unused
    assert score_predictions(node_id, logits, y, fine, 2)["test"]["count"] == 1


# ------------------------------------------------------------------------------ 6. report
PREPARE_COVERAGE = {"labelled": 70, "unlabelled": 30, "labelled_fraction": 0.7}
AUDIT_COVERAGE = {"labelled": 70, "unlabelled": 30, "labelled_fraction": 0.7,
                  "per_role": {"train": {"labelled": 42, "unlabelled": 0},
                               "val": {"labelled": 14, "unlabelled": 0},
                               "test": {"labelled": 14, "unlabelled": 0},
                               "unused": {"labelled": 0, "unlabelled": 30}},
                  "public_split_unlabelled": {"train": 3, "val": 0, "test": 2}}


def _coverage_inputs(**over):
    base = _inputs()
    return _inputs(prepare={**base.prepare, "label_coverage": PREPARE_COVERAGE},
                   split_audit={**base.split_audit, "label_coverage": AUDIT_COVERAGE}, **over)


def test_report_shows_label_coverage_overall_and_per_role():
    from gnnpipe.reporting.report import render

    page = render(_coverage_inputs()).html
    assert "<h3>Label coverage</h3>" in page
    assert "<td>labelled nodes</td><td>70</td>" in page
    assert "<td>unlabelled nodes</td><td>30</td>" in page
    assert "<td>labelled share</td><td>70.0%</td>" in page
    assert "<th>role</th><th>labelled</th><th>unlabelled</th>" in page
    assert "<tr><td>train</td><td>42</td><td>0</td></tr>" in page
    assert "<tr><td>unused</td><td>0</td><td>30</td></tr>" in page
    assert "official split names 5 unlabelled nodes" in page
    plain = render(_inputs()).html  # no coverage anywhere: no section
    assert "Label coverage" not in plain


def test_report_overall_coverage_prefers_prepare_and_falls_back_to_the_audit():
    from gnnpipe.reporting.report import render

    base = _inputs()
    other = {**AUDIT_COVERAGE, "labelled": 71, "unlabelled": 29, "labelled_fraction": 0.71}
    page = render(_inputs(prepare={**base.prepare, "label_coverage": PREPARE_COVERAGE},
                          split_audit={**base.split_audit, "label_coverage": other})).html
    assert "<td>labelled nodes</td><td>70</td>" in page and "<td>71</td>" not in page
    page = render(_inputs(split_audit={**base.split_audit, "label_coverage": other})).html
    assert "<td>labelled nodes</td><td>71</td>" in page and "71.0%" in page


def test_report_label_tables_show_class_names():
    from gnnpipe.reporting.report import render

    named = render(_coverage_inputs(classes=["cat", "dog"])).html
    # the dataset's Labels table and the per-class F1 table: code and the user's label value
    assert named.count("<td>0</td><td>cat</td>") == 2
    assert named.count("<td>1</td><td>dog</td>") == 2
    assert "<th>code</th><th>label</th><th>nodes</th>" in named
    assert "<th>code</th><th>label</th><th>test nodes</th>" in named
    by_code = render(_coverage_inputs()).html
    assert "<td>cat</td>" not in by_code and "<th>class</th><th>nodes</th>" in by_code
