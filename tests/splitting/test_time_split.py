"""Time splits: time-respecting message graphs by default, the ``time_respecting`` audit check,
the explicit transductive opt-in, unlabelled nodes under the time cut, and the cluster batch
rule (train.cluster.parts_per_batch <= partition.num_parts)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from gnnpipe.splitting import audit
from gnnpipe.config import NodeSplitParams, ParamsError, params_from_dict
from gnnpipe.data.graph import EDGE, UNLABELLED, Graph
from graph_oracle import normalize_edges
from gnnpipe.runtime.rng import make_rng
from split_oracle import audit_node_split, split_nodes
from node_oracle import message_graphs
from conftest import as_graph


def timed_graph(n: int = 300, unlabelled_every: int = 5) -> Graph:
    """Random graph with timestamps in 30 ticks (ties), every ``unlabelled_every``-th node
    unlabelled, so unlabelled nodes exist before, between and after the cuts."""
    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, n, 6 * n), rng.integers(0, n, 6 * n)
    csr, _ = normalize_edges(src, dst, n, undirected=True, dedup=True, remove_self_loops=True)
    y = torch.from_numpy(rng.integers(0, 3, n))
    y[::unlabelled_every] = UNLABELLED
    t = torch.from_numpy(rng.integers(0, 30, n).astype(np.float64))
    return Graph.homogeneous(csr, torch.randn(n, 4), y, num_classes=3,
                             timestamps=t).target_view()


def _edges(csr) -> set[tuple[int, int]]:
    return set(zip(csr.targets().tolist(), csr.indices.tolist()))


def _audit(graph, roles, graphs, mode, **kw):
    return audit_node_split(as_graph(graph), roles, graphs, mode, timed=True, **kw)


def _check(report, name="time_respecting"):
    return next(c for c in report["checks"] if c["check"] == name)


def test_default_time_split_has_no_train_edge_touching_a_later_node():
    graph = timed_graph()
    cfg = NodeSplitParams(strategy="time", train=0.5, val=0.25, test=0.25)
    assert cfg.mode == "time" and not cfg.future_visible  # auto resolved for strategy time
    node_split = split_nodes(as_graph(graph), cfg, make_rng(0, "split"))
    roles, t = node_split.roles, graph.timestamps.numpy()
    y = graph.y.numpy()
    assert node_split.mode == "time"
    cuts = {"train": t[roles == "train"].max(), "val": t[np.isin(roles, ["train", "val"])].max()}
    for phase, seen_roles in (("train", {"train"}), ("val", {"train", "val"})):
        edges = _edges(node_split.message_graphs[phase][EDGE])
        ends = np.array(sorted({v for e in edges for v in e}))
        assert t[ends].max() <= cuts[phase], phase
        # exactly the edges among own/earlier split nodes and unlabelled nodes <= the cut
        ok = [(roles[v] in seen_roles) or (y[v] == UNLABELLED and t[v] <= cuts[phase])
              for v in range(graph.num_nodes)]
        want = {(a, b) for a, b in _edges(graph.csr) if ok[a] and ok[b]}
        assert edges == want, phase
        assert 0 < len(edges) < graph.csr.num_edges, phase  # non-trivial: some edges dropped
    assert node_split.message_graphs["test"][EDGE] is graph.csr
    # unlabelled nodes at or before the train cut carry train messages; later ones do not
    train_nodes = {v for e in _edges(node_split.message_graphs["train"][EDGE]) for v in e}
    unl = np.flatnonzero(y == UNLABELLED)
    assert any(v in train_nodes for v in unl[t[unl] <= cuts["train"]])
    assert not any(v in train_nodes for v in unl[t[unl] > cuts["train"]])
    assert (roles[unl] == "unused").all()

    report = _audit(graph, roles, node_split.message_graphs, node_split.mode)
    assert report["passed"] and _check(report)["passed"] and report["warnings"] == []
    assert "train phase: 0 of" in _check(report)["detail"]
    audit.raise_if_failed(report)


def test_audit_fails_for_transductive_and_inductive_message_graphs_of_a_time_split():
    graph = timed_graph()
    node_split = split_nodes(as_graph(graph), NodeSplitParams(strategy="time"),
                             make_rng(0, "split"))
    roles = node_split.roles
    shared = message_graphs(as_graph(graph), roles, "transductive")
    report = _audit(graph, roles, shared, "transductive")
    entry = _check(report)
    assert not report["passed"] and not entry["passed"] and "waived" not in entry
    assert "split.node.mode: auto" in entry["detail"]
    with pytest.raises(audit.LeakageError, match="time_respecting: train phase: [1-9]"):
        audit.raise_if_failed(report)
    # inductive hides later *labelled* nodes only; unlabelled ones past the cut still leak
    inductive = message_graphs(as_graph(graph), roles, "inductive")
    report = _audit(graph, roles, inductive, "inductive")
    assert not _check(report)["passed"]
    assert _check(report, "message_train_sees_only_train")["passed"]  # the role check alone
    assert "unused" in _check(report)["detail"]  # the first late node is an unlabelled one


def test_audit_catches_one_injected_edge_to_a_later_node():
    graph = timed_graph()
    node_split = split_nodes(as_graph(graph), NodeSplitParams(strategy="time"),
                             make_rng(0, "split"))
    roles, t, y = node_split.roles, graph.timestamps.numpy(), graph.y.numpy()
    cut = t[roles == "train"].max()
    late = int(np.flatnonzero((y == UNLABELLED) & (t > cut))[0])
    early = int(np.flatnonzero(roles == "train")[0])
    train = node_split.message_graphs["train"][EDGE]
    src = torch.cat([train.indices, torch.tensor([late])])
    dst = torch.cat([train.targets(), torch.tensor([early])])
    tampered, _ = normalize_edges(src.numpy(), dst.numpy(), graph.num_nodes, undirected=False,
                                  dedup=True, remove_self_loops=True)
    graphs = {**node_split.message_graphs, "train": {EDGE: tampered}}
    report = _audit(graph, roles, graphs, "time")
    assert not report["passed"]
    assert _check(report)["detail"].startswith("train phase: 1 of")
    assert f"first: node {late}, unused" in _check(report)["detail"]


def test_explicit_transductive_is_an_opt_in_the_audit_warns_about():
    cfg = params_from_dict({"split": {"node": {"strategy": "time",
                                               "mode": "transductive"}}}).split.node
    assert cfg.mode == "transductive" and cfg.future_visible
    graph = timed_graph()
    node_split = split_nodes(as_graph(graph), cfg, make_rng(0, "split"))
    assert all(g[EDGE] is graph.csr for g in node_split.message_graphs.values())
    report = _audit(graph, node_split.roles, node_split.message_graphs, "transductive",
                    future_visible=True)
    entry = _check(report)
    assert report["passed"] and not entry["passed"] and entry["waived"]
    assert report["warnings"] == [f"time_respecting: {entry['detail']}"]
    assert "chosen explicitly" in entry["detail"]
    audit.raise_if_failed(report)  # waived: no error
    # the waiver covers a leak only when asked for
    assert not _audit(graph, node_split.roles, node_split.message_graphs,
                      "transductive")["passed"]


def test_mode_defaults_and_the_time_mode_rule():
    assert params_from_dict({}).split.node.mode == "transductive"  # default strategy unchanged
    assert params_from_dict({"split": {"node": {"strategy": "time"}}}).split.node.mode == "time"
    assert params_from_dict({"split": {"node": {"strategy": "time", "mode": "inductive"}}}
                            ).split.node.mode == "inductive"
    assert not params_from_dict({"split": {"node": {"mode": "transductive"}}}
                                ).split.node.future_visible
    with pytest.raises(ParamsError) as err:
        params_from_dict({"split": {"node": {"strategy": "random", "mode": "time"}}})
    line = str(err.value)
    assert "\n" not in line and "split.node.mode='time'" in line
    assert "split.node.strategy=time (found 'random')" in line
    with pytest.raises(ValueError, match="split.node.mode=time needs split.node.strategy=time"):
        split_nodes(as_graph(timed_graph()), NodeSplitParams(strategy="random", mode="time"),
                    make_rng(0, "split"))


def test_split_stage_writes_a_time_respecting_split_and_warns_on_the_opt_in(tmp_path,
                                                                             monkeypatch, capsys):
    import yaml

    from gnnpipe import io
    from gnnpipe.cli import main

    monkeypatch.chdir(tmp_path)
    synthetic = {"num_nodes": 400, "num_features": 4, "timestamps": True, "label_rate": 0.7}
    for mode, waived in (("auto", False), ("transductive", True)):
        (tmp_path / "params.yaml").write_text(yaml.safe_dump({
            "dataset": {"synthetic": synthetic},
            "split": {"node": {"strategy": "time", "mode": mode}}}))
        if mode == "auto":
            assert main(["prepare"]) == 0
        capsys.readouterr()
        assert main(["split"]) == 0
        out = capsys.readouterr().out
        report = json.loads((tmp_path / "metrics/split_audit.json").read_text())
        entry = _check(report)
        assert report["passed"] and entry["passed"] != waived and entry.get("waived", False) == waived
        assert ("WARNING: time_respecting" in out) == waived
        assert io.read_split_meta(tmp_path / "data/split")["mode"] == (
            "transductive" if waived else "time")


def test_typed_time_split_cuts_every_edge_type_at_the_target_times():
    from test_hetero_data import small_hetero

    base = small_hetero()
    n = base.num_nodes_dict[base.target]
    y = base.y.clone()
    y[::4] = UNLABELLED
    t = torch.from_numpy(np.random.default_rng(3).integers(0, 20, n))
    graph = dataclasses.replace(base, y=y, node_time={base.target: t})
    node_split = split_nodes(graph, NodeSplitParams(strategy="time"), make_rng(0, "split"))
    assert node_split.mode == "time"
    report = audit_node_split(graph, node_split.roles, node_split.message_graphs,
                              node_split.mode, timed=True)
    assert report["passed"] and _check(report)["passed"]
    assert _check(report, "splits_in_time_order")["passed"]
    # inductive graphs cut by role only keep later unlabelled targets: the check sees it
    by_role = message_graphs(graph, node_split.roles, "inductive")
    report = audit_node_split(graph, node_split.roles, by_role, "time", timed=True)
    assert not report["passed"] and not _check(report)["passed"]


def test_parts_per_batch_above_num_parts_is_refused_in_one_line():
    raw = {"train": {"sampler": "cluster", "cluster": {"parts_per_batch": 5}},
           "partition": {"num_parts": 4}}
    with pytest.raises(ParamsError) as err:
        params_from_dict(raw)
    line = str(err.value)
    assert "\n" not in line
    assert "train.cluster.parts_per_batch=5 exceeds partition.num_parts=4" in line
    raw["train"]["cluster"]["parts_per_batch"] = 4  # equal is fine
    assert params_from_dict(raw).train.cluster.parts_per_batch == 4
    # without the cluster sampler the key is unused: a one-part partition stays allowed
    assert params_from_dict({"partition": {"num_parts": 1}}).partition.num_parts == 1
