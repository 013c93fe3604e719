"""Link splits: edge hold-out, per-phase message graphs, fixed negatives, and the audit catching leaks."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from gnnpipe import io
from gnnpipe.splitting import audit
from gnnpipe.cli import main
from gnnpipe.config import LinkSplitParams
from gnnpipe.data.graph import EDGE, ROLE_CODES, Graph, phase_csrs
from gnnpipe.data.edges import csr_from_edges
from graph_oracle import normalize_edges
from link_oracle import is_symmetric, split_links
from gnnpipe.runtime.rng import make_rng
import link_oracle
from conftest import as_graph


def _graph(csr):
    """``csr`` as a typed graph of one type (no features or labels: a link split reads edges)."""
    n = csr.num_nodes
    return Graph.homogeneous(csr, torch.zeros(n, 1), torch.zeros(n, dtype=torch.int64),
                             num_classes=1)


def _split(csr, seed=0, **kw):
    return split_links(_graph(csr), LinkSplitParams(**kw), make_rng(seed, "split"))


def _audit(csr, link, disjoint=False):
    return link_oracle.audit_link_split(_graph(csr), link.edge_type, link.edges, link.negatives,
                                  link.message_graphs, disjoint=disjoint)


def _pairs(edges: torch.Tensor) -> set[tuple[int, int]]:
    """Unordered pairs of an int64 (2, E) edge tensor."""
    src, dst = edges.tolist()
    return {(min(u, v), max(u, v)) for u, v in zip(src, dst)}


def _failed(report) -> list[str]:
    return [c["check"] for c in report["checks"] if not c["passed"]]


def test_every_pair_lands_in_exactly_one_role_with_the_requested_sizes(small_graph):
    link = _split(small_graph.csr, val=0.1, test=0.2)
    full = _pairs(small_graph.csr.edge_index())
    roles = {role: _pairs(link.edges[role]) for role in link.edges}
    assert link.undirected
    assert len(roles["val"]) == round(0.1 * len(full)) and len(roles["test"]) == round(0.2 * len(full))
    assert roles["train_supervision"] == roles["message"]  # no disjoint supervision by default
    assert roles["message"] | roles["val"] | roles["test"] == full
    assert len(roles["message"]) + len(roles["val"]) + len(roles["test"]) == len(full)
    # undirected positives are stored once per pair
    assert all(link.edges[role].shape[1] == len(roles[role]) for role in roles)
    assert _audit(small_graph.csr, link)["passed"]


def test_held_out_pairs_are_absent_in_both_directions_from_earlier_phases(small_graph):
    link = _split(small_graph.csr)
    graphs = phase_csrs(link.message_graphs)
    directed = {phase: set(map(tuple, graphs[phase].edge_index().T.tolist())) for phase in graphs}
    for role, phases in (("val", ("train", "val")), ("test", ("train", "val", "test"))):
        for u, v in link.edges[role].T.tolist():
            for phase in phases:
                assert (u, v) not in directed[phase] and (v, u) not in directed[phase], (role, phase)
    # what each phase may see is there, in both directions
    train_pairs = _pairs(link.edges["message"])
    assert _pairs(graphs["train"].edge_index()) == train_pairs
    assert graphs["train"].num_edges == 2 * len(train_pairs)
    assert _pairs(graphs["test"].edge_index()) == train_pairs | _pairs(link.edges["val"])
    # same edges without disjoint supervision: one file
    assert link.message_graphs["val"] is link.message_graphs["train"]


def test_disjoint_supervision_is_hidden_from_the_train_graph_but_not_from_val(small_graph):
    link = _split(small_graph.csr, disjoint_train_ratio=0.3)
    message, supervision = _pairs(link.edges["message"]), _pairs(link.edges["train_supervision"])
    assert not message & supervision
    assert len(supervision) == round(0.3 * (len(message) + len(supervision)))
    assert _pairs(link.message_graphs["train"][EDGE].edge_index()) == message
    assert _pairs(link.message_graphs["val"][EDGE].edge_index()) == message | supervision
    assert _audit(small_graph.csr, link, disjoint=True)["passed"]
    # the same split audited as if supervision had to be the message edges fails, and vice versa
    assert "supervision_is_message" in _failed(_audit(small_graph.csr, link, disjoint=False))
    leaky = dataclasses.replace(link, message_graphs=dict(link.message_graphs,
                                                          train=link.message_graphs["val"]))
    assert _failed(_audit(small_graph.csr, leaky, disjoint=True)) == [
        "message_train_hides_val_test_train_supervision"]


def test_duplicate_edges_and_self_loops_are_handled():
    n = 40
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, n, 300), rng.integers(0, n, 300)
    src = np.concatenate([src, src[:50], dst[50:80], np.arange(5)])  # repeats, reverses, loops
    dst = np.concatenate([dst, dst[:50], src[50:80], np.arange(5)])
    csr, _ = normalize_edges(src, dst, n, undirected=True, dedup=False, remove_self_loops=False)
    link = _split(csr, val=0.2, test=0.2)
    report = _audit(csr, link)
    assert report["passed"], _failed(report)
    loops = {(v, v) for v in range(5)}
    for phase, graph in phase_csrs(link.message_graphs).items():  # every phase keeps the self-loops
        assert loops <= set(map(tuple, graph.edge_index().T.tolist())), phase
    for role, edges in link.edges.items():  # a pair is a positive once, never a self-loop
        assert bool((edges[0] != edges[1]).all()), role
        assert edges.shape[1] == len(_pairs(edges)), role
    # all copies of a held-out pair left every earlier graph together
    test_pairs = _pairs(link.edges["test"])
    assert not _pairs(link.message_graphs["val"][EDGE].edge_index()) & test_pairs


def test_directed_graph_holds_out_reciprocal_edges_together():
    n = 30
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, n, 150), rng.integers(0, n, 150)
    src = np.concatenate([src, dst[:40]])  # 40 reciprocal pairs
    dst = np.concatenate([dst, src[:40]])
    csr, _ = normalize_edges(src, dst, n, undirected=False, dedup=True, remove_self_loops=True)
    assert not is_symmetric(csr)
    link = _split(csr, val=0.2, test=0.2)
    assert not link.undirected
    stored = set(map(tuple, csr.edge_index().T.tolist()))
    for role, edges in link.edges.items():
        directed = set(map(tuple, edges.T.tolist()))
        assert directed <= stored, role  # directed positives are real directed edges
        for u, v in directed:  # a reciprocal edge is a positive of the same role
            assert (v, u) not in stored or (v, u) in directed, role
    assert _audit(csr, link)["passed"]


def test_isolated_nodes_take_part_as_negative_targets_only(tiny_graph):
    n = tiny_graph.num_nodes + 5  # five extra nodes without any edge
    src, dst = tiny_graph.csr.edge_index().numpy()
    csr = csr_from_edges(src, dst, n)
    link = _split(csr, val=3, test=3, num_val_negatives=40, num_test_negatives=40)
    assert link.message_graphs["test"][EDGE].num_nodes == n
    negatives = torch.cat([link.negatives["val"].reshape(-1), link.negatives["test"].reshape(-1)])
    assert bool((negatives >= tiny_graph.num_nodes).any())
    assert _audit(csr, link)["passed"]


@pytest.mark.parametrize("kw, message", [
    ({"val": 0.00001}, r"split.link.val=1e-05 resolves to 0 of the graph's \d+ edges"),
    ({"val": 0.6, "test": 0.5}, "leaves none of the graph's"),
    ({"val": 10_000}, "leaves none"),
    ({"disjoint_train_ratio": 0.99999}, "leaves no supervision or no message edge"),
])
def test_impossible_link_sizes_are_rejected(small_graph, kw, message):
    with pytest.raises(ValueError, match=message):
        _split(small_graph.csr, **kw)


def test_a_graph_without_edges_is_rejected():
    csr = csr_from_edges(np.array([3]), np.array([3]), 5)  # a self-loop only
    with pytest.raises(ValueError, match="needs edges between distinct nodes"):
        _split(csr)


def test_negatives_never_hit_a_true_edge_of_any_split(small_graph):
    link = _split(small_graph.csr, negative_strategy="degree")
    full = set(map(tuple, small_graph.csr.edge_index().T.tolist()))
    for phase in ("val", "test"):
        heads = link.edges[phase][0]
        assert link.negatives[phase].shape == (heads.numel(), 100)
        pairs = zip(heads.repeat_interleave(100).tolist(), link.negatives[phase].reshape(-1).tolist())
        assert not any((h, t) in full or (t, h) in full or h == t for h, t in pairs), phase


# -------------------------------------------------------------------------- the audit on leaks
def test_audit_catches_a_test_edges_reverse_left_in_the_train_graph(small_graph):
    link = _split(small_graph.csr)
    u, v = link.edges["test"][:, 0].tolist()
    train = link.message_graphs["train"][EDGE]
    src, dst = train.edge_index().numpy()
    leaky_train = csr_from_edges(np.append(src, v), np.append(dst, u), train.num_nodes)  # one direction
    leaky = dataclasses.replace(link, message_graphs=dict(link.message_graphs,
                                                          train={EDGE: leaky_train}))
    report = _audit(small_graph.csr, leaky)
    assert _failed(report) == ["message_train_hides_val_test"]
    with pytest.raises(audit.LeakageError, match=rf"message_train_hides_val_test: .*test.*1 pairs "
                                                 rf"\(first: {min(u, v)}-{max(u, v)}\)"):
        audit.raise_if_failed(report)


def test_audit_catches_the_test_graph_holding_test_edges(small_graph):
    link = _split(small_graph.csr)
    leaky = dataclasses.replace(link, message_graphs=dict(link.message_graphs,
                                                                  test={EDGE: small_graph.csr}))
    assert _failed(_audit(small_graph.csr, leaky)) == ["message_test_hides_test"]


def test_audit_catches_a_positive_among_the_negatives_and_overlapping_positives(small_graph):
    link = _split(small_graph.csr)
    negatives = link.negatives["test"].clone()
    negatives[0, 3] = link.edges["test"][1, 0]  # the positive itself
    negatives[1, 0] = link.edges["test"][0, 1]  # a self-loop
    report = _audit(small_graph.csr, dataclasses.replace(link, negatives=dict(link.negatives,
                                                                              test=negatives)))
    assert _failed(report) == ["negatives_test_no_self_loops", "negatives_test_not_edges"]
    val = torch.cat([link.edges["val"], link.edges["test"][:, :2].flip(0)], dim=1)  # reversed
    overlapping = dataclasses.replace(link, edges=dict(link.edges, val=val),
                                      negatives=dict(link.negatives, val=torch.cat(
                                          [link.negatives["val"], link.negatives["test"][:2]])))
    assert "positives_disjoint" in _failed(_audit(small_graph.csr, overlapping))


def test_audit_catches_a_lost_edge_and_an_invented_positive(small_graph):
    link = _split(small_graph.csr)
    dropped = dataclasses.replace(link, edges=dict(link.edges, test=link.edges["test"][:, 1:]),
                                  negatives=dict(link.negatives, test=link.negatives["test"][1:]))
    assert _failed(_audit(small_graph.csr, dropped)) == ["every_edge_assigned"]
    invented = link.edges["val"].clone()
    invented[1, 0] = link.negatives["val"][0, 0]  # a non-edge presented as a positive
    assert "positives_are_graph_edges" in _failed(
        _audit(small_graph.csr, dataclasses.replace(link, edges=dict(link.edges, val=invented))))


# ------------------------------------------------------------------------ artifacts and stage
def test_same_seed_gives_identical_artifacts_and_another_seed_does_not(tmp_path, small_graph):
    def written(seed, folder):
        link = _split(small_graph.csr, seed=seed)
        link_oracle.write_link_split(folder, as_graph(small_graph), link,
                                     {"undirected": link.undirected})
        return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}

    first, again, other = written(0, tmp_path / "a"), written(0, tmp_path / "b"), written(1, tmp_path / "c")
    assert first == again
    assert set(first) == {"nodes_node.parquet", "meta.json", "message_train.pt", "message_test.pt",
                          "edges_message.parquet", "edges_train_supervision.parquet",
                          "edges_val.parquet", "edges_test.parquet", "negatives_val.parquet",
                          "negatives_test.parquet"}
    assert first["edges_test.parquet"] != other["edges_test.parquet"]


def test_link_artifacts_round_trip_and_reject_tampering(tmp_path, small_graph):
    link = _split(small_graph.csr, disjoint_train_ratio=0.2)
    n = small_graph.num_nodes
    link_oracle.write_link_split(tmp_path, as_graph(small_graph), link, {})
    edges = io.read_link_edges(tmp_path, n)
    assert all(torch.equal(edges[role], link.edges[role]) for role in link.edges)
    negatives = io.read_link_negatives(tmp_path, edges, n)
    assert all(torch.equal(negatives[p], link.negatives[p]) for p in ("val", "test"))
    _, graphs = io.read_typed_message_graphs(tmp_path)
    assert all(torch.equal(graphs[p][EDGE].indices, link.message_graphs[p][EDGE].indices)
               for p in graphs)
    assert set(io.read_typed_role_codes(tmp_path)) == {ROLE_CODES["unused"]}  # no label role
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["task"] == "link" and meta["num_negatives"] == {"val": 100, "test": 100}
    # negatives that belong to other positives than their rows say are rejected
    shifted = dict(edges, test=edges["test"].roll(1, dims=1))
    with pytest.raises(ValueError, match="negatives_test.parquet: rows must be grouped by positive"):
        io.read_link_negatives(tmp_path, shifted, n)
    with pytest.raises(ValueError, match="rows do not make 100 negatives"):
        io.read_link_negatives(tmp_path, dict(edges, val=edges["val"][:, 1:]), n)


def _link_params(tmp_path, **link):
    params = {"dataset": {"task": "link", "synthetic": {"num_nodes": 600, "num_features": 8}},
              "split": {"link": link}}
    import yaml

    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))


def test_split_stage_writes_a_link_split_with_a_passing_audit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _link_params(tmp_path, disjoint_train_ratio=0.2)
    assert main(["prepare"]) == 0
    assert main(["split"]) == 0
    report = json.loads((tmp_path / "metrics/split_audit.json").read_text())
    assert report["passed"] and report["task"] == "link" and report["disjoint_supervision"]
    assert report["undirected"] and report["negatives"]["test"]["per_positive"] == 100
    assert (tmp_path / "data/split/negatives_test.parquet").exists()


def test_split_stage_fails_on_an_injected_link_leak(tmp_path, monkeypatch, capsys):
    from gnnpipe.splitting import link_split, stage

    def leaky_split(client, graph, graph_file, *args):  # train's graph: the prepared one
        split = link_split.split_links(client, graph, graph_file, *args)
        for path, tensor in zip(split.message["train"][0], (graph.csr[EDGE].indptr,
                                                             graph.csr[EDGE].indices)):
            np.save(path, tensor.numpy())
        return split

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(stage, "split_links", leaky_split)
    _link_params(tmp_path)
    assert main(["prepare"]) == 0
    assert main(["split"]) == 1
    assert "split audit failed" in capsys.readouterr().err
    report = json.loads((tmp_path / "metrics/split_audit.json").read_text())
    assert not report["passed"]
    assert "message_train_hides_val_test" in _failed(report)
    assert not (tmp_path / "data/split").exists()  # nothing leaky reaches downstream stages


def test_csr_symmetry_detection(tiny_graph):
    assert is_symmetric(tiny_graph.csr)
    assert not is_symmetric(csr_from_edges(np.array([0, 1]), np.array([1, 2]), 3))
    assert is_symmetric(csr_from_edges(np.array([0, 1, 1, 2]), np.array([1, 0, 2, 1]), 3))


@pytest.mark.parametrize("raw, message", [
    ({"split": {"link": {"val": 0}}}, r"split.link.val=0 is out of range; expected > 0.0"),
    ({"split": {"link": {"disjoint_train_ratio": 1.0}}}, r"disjoint_train_ratio=1.0 is out of range"),
    ({"split": {"link": {"negative_strategy": "hard"}}}, r"expected one of: uniform, degree"),
    ({"split": {"link": {"num_test_negatives": 0}}}, r"num_test_negatives=0 is out of range"),
    ({"dataset": {"task": "edge"}}, r"dataset.task='edge' is not valid; expected one of: node, link"),
    ({"evaluate": {"hits_k": [10, 0]}}, r"evaluate.hits_k\[1\]=0 is out of range; expected >= 1"),
    ({"evaluate": {"hits_k": 10}}, r"evaluate.hits_k=10 is not valid; expected a non-empty list"),
])
def test_link_params_are_validated(raw, message):
    from gnnpipe.config import ParamsError, params_from_dict

    with pytest.raises(ParamsError, match=message):
        params_from_dict(raw)
    assert params_from_dict({"evaluate": {"hits_k": [1, 20]}}).evaluate.hits_k == (1, 20)
