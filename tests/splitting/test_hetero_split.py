"""Splits of a graph of several types and their audit: disjoint roles, leak-free graphs per
edge type, injected leaks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gnnpipe import io
from gnnpipe.splitting import audit
from gnnpipe.commands.variant import split_task
from gnnpipe.config import params_from_dict
from gnnpipe.data.synthetic import CITES, WRITES
from graph_oracle import REV_WRITES
from gnnpipe.data.graph import EDGE, NODE
from gnnpipe.data.edges import csr_from_edges, edge_pairs
from link_oracle import split_links
from gnnpipe.runtime.rng import make_rng
from split_oracle import audit_node_split, split_nodes
import link_oracle
from conftest import as_graph

from test_hetero_data import small_hetero


@pytest.fixture(scope="module")
def graph():
    return small_hetero()


def node_split(graph, mode="inductive"):
    cfg = params_from_dict({"split": {"node": {"mode": mode}}}).split.node
    return split_nodes(graph, cfg, make_rng(0, "split"))


def link_split(graph, **link):
    cfg = params_from_dict({"split": {"link": {"num_val_negatives": 20,
                                               "num_test_negatives": 20, **link}}}).split.link
    return split_links(graph, cfg, make_rng(0, "split"))


def _with_edge(graph, csr, edge_type, src, dst):
    """``csr`` of ``edge_type`` with the edge src -> dst added."""
    s, d = edge_pairs(csr)
    return csr_from_edges(np.append(s, src), np.append(d, dst), graph.num_nodes_dict[edge_type[2]],
                          graph.num_nodes_dict[edge_type[0]])


def failed(report):
    return [c["check"] for c in report["checks"] if not c["passed"]]


def test_typed_node_split_is_disjoint_and_covers_the_target_type(graph):
    split = node_split(graph, "transductive")
    assert split.roles.shape == (graph.num_nodes_dict["paper"],)
    counts = {r: int((split.roles == r).sum()) for r in ("train", "val", "test")}
    assert counts == {"train": 360, "val": 120, "test": 120}
    assert all(split.message_graphs[p] is graph.csr for p in ("train", "val", "test"))
    report = audit_node_split(graph, split.roles, split.message_graphs, split.mode)
    assert report["passed"], failed(report)
    assert report["sizes"] == counts and report["target"] == "paper"


def test_inductive_phase_graphs_hide_other_papers_in_every_edge_type(graph):
    split = node_split(graph)
    train = split.roles == "train"
    for edge_type, csr in split.message_graphs["train"].items():
        src, dst = edge_pairs(csr)
        if edge_type[0] == "paper":
            assert train[src].all(), edge_type
        if edge_type[2] == "paper":
            assert train[dst].all(), edge_type
    # authors and venues keep their edges among train papers: the typed graph is not emptied
    assert 0 < split.message_graphs["train"][WRITES].num_edges < graph.csr[WRITES].num_edges
    assert split.message_graphs["test"] is graph.csr
    report = audit_node_split(graph, split.roles, split.message_graphs, split.mode)
    assert report["passed"], failed(report)
    names = [c["check"] for c in report["checks"]]
    assert "message_train[author__writes__paper]_sees_only_train" in names
    assert "message_val[venue__rev_published_in__paper]_sees_only_train_val" in names


@pytest.mark.parametrize("edge_type", [WRITES, REV_WRITES, CITES])
def test_node_audit_catches_a_test_paper_in_any_train_edge_type(graph, edge_type):
    split = node_split(graph)
    graphs = {p: dict(g) for p, g in split.message_graphs.items()}
    # a true edge of the graph (so only the visibility check can fail) to a test paper, from
    # an author, or from a train paper for cites
    src, dst = edge_pairs(graph.csr[edge_type])
    paper_side, other = (dst, src) if edge_type[2] == "paper" else (src, dst)
    ok = split.roles[paper_side] == "test"
    if edge_type == CITES:
        ok &= split.roles[other] == "train"
    first = int(np.flatnonzero(ok)[0])
    src, dst = int(src[first]), int(dst[first])
    graphs["train"][edge_type] = _with_edge(graph, graphs["train"][edge_type], edge_type, src, dst)
    report = audit_node_split(graph, split.roles, graphs, split.mode)
    name = "__".join(edge_type)
    assert failed(report) == [f"message_train[{name}]_sees_only_train"]
    with pytest.raises(audit.LeakageError, match=rf"message_train\[{name}\]_sees_only_train: 1 "
                                                 "edges touch paper nodes of other splits"):
        audit.raise_if_failed(report)


def test_link_split_holds_out_each_pair_in_both_edge_types(graph):
    split = link_split(graph)
    n_papers = graph.num_nodes_dict["paper"]
    assert split.edge_type == WRITES and split.reverse == REV_WRITES
    test_keys = split.edges["test"][0].numpy() * n_papers + split.edges["test"][1].numpy()
    val_keys = split.edges["val"][0].numpy() * n_papers + split.edges["val"][1].numpy()
    for phase, hidden in (("train", (test_keys, val_keys)), ("val", (test_keys, val_keys)),
                          ("test", (test_keys,))):
        w_src, w_dst = edge_pairs(split.message_graphs[phase][WRITES])
        r_src, r_dst = edge_pairs(split.message_graphs[phase][REV_WRITES])
        for keys in hidden:
            assert not np.isin(w_src * n_papers + w_dst, keys).any(), phase
            assert not np.isin(r_dst * n_papers + r_src, keys).any(), phase  # the reverse too
    # val edges are known at test time, in both directions
    r_src, r_dst = edge_pairs(split.message_graphs["test"][REV_WRITES])
    assert np.isin(val_keys, r_dst * n_papers + r_src).all()
    assert split.message_graphs["train"][CITES] is graph.csr[CITES]  # other types whole
    # typed negatives: papers, never a true authorship
    all_pairs = set((edge_pairs(graph.csr[WRITES])[0] * n_papers
                     + edge_pairs(graph.csr[WRITES])[1]).tolist())
    for phase in ("val", "test"):
        neg = split.negatives[phase]
        assert neg.shape == (split.edges[phase].shape[1], 20)
        assert int(neg.min()) >= 0 and int(neg.max()) < n_papers
        heads = split.edges[phase][0][:, None].expand_as(neg)
        assert not set((heads * n_papers + neg).reshape(-1).tolist()) & all_pairs
    report = link_oracle.audit_link_split(graph, split.edge_type, split.edges, split.negatives,
                                    split.message_graphs, disjoint=False)
    assert report["passed"], failed(report)
    assert report["reverse_edge_type"] == "paper__rev_writes__author"


@pytest.mark.parametrize("leak_into", [WRITES, REV_WRITES])
def test_link_audit_catches_a_test_pair_kept_in_the_type_or_its_reverse(graph, leak_into):
    split = link_split(graph)
    a, p = (int(v) for v in split.edges["test"][:, 0])
    graphs = {phase: dict(g) for phase, g in split.message_graphs.items()}
    edge = (a, p) if leak_into == WRITES else (p, a)
    graphs["train"][leak_into] = _with_edge(graph, graphs["train"][leak_into], leak_into, *edge)
    report = link_oracle.audit_link_split(graph, split.edge_type, split.edges, split.negatives, graphs,
                                    disjoint=False)
    assert failed(report) == [
        "message_train_hides_val_test[author__writes__paper+paper__rev_writes__author]"]


def test_link_audit_catches_a_negative_that_is_a_true_pair_or_of_another_type(graph):
    split = link_split(graph)
    negatives = {p: t.clone() for p, t in split.negatives.items()}
    negatives["test"][0, 0] = split.edges["test"][1, 0]  # the positive's own paper
    report = link_oracle.audit_link_split(graph, split.edge_type, split.edges, negatives,
                                    split.message_graphs, disjoint=False)
    assert failed(report) == ["negatives_test_not_edges[author__writes__paper+"
                              "paper__rev_writes__author]"]
    negatives["test"][0, 0] = graph.num_nodes_dict["paper"]  # past the last paper
    report = link_oracle.audit_link_split(graph, split.edge_type, split.edges, negatives,
                                    split.message_graphs, disjoint=False)
    assert "negatives_test_are_paper_nodes" in failed(report)


def test_disjoint_supervision_pairs_are_absent_from_the_train_graph(graph):
    split = link_split(graph, disjoint_train_ratio=0.3)
    report = link_oracle.audit_link_split(graph, split.edge_type, split.edges, split.negatives,
                                    split.message_graphs, disjoint=True)
    assert report["passed"], failed(report)
    assert split.message_graphs["val"] is not split.message_graphs["train"]
    n_papers = graph.num_nodes_dict["paper"]
    sup = split.edges["train_supervision"].numpy()
    r_src, r_dst = edge_pairs(split.message_graphs["train"][REV_WRITES])
    assert not np.isin(sup[0] * n_papers + sup[1], r_dst * n_papers + r_src).any()


def test_split_artifacts_round_trip(graph, tmp_path):
    node = node_split(graph)
    io.write_split(tmp_path / "node", graph, node.message_graphs,
                   {"task": "node", "mode": node.mode}, roles=node.roles)
    meta = io.read_split_meta(tmp_path / "node")
    assert meta["layout"] == "typed" and "hetero" not in meta and meta["task"] == "node"
    assert meta["node_types"] == [list(s) for s in graph.sizes()] and meta["target"] == "paper"
    codes = io.read_typed_role_codes(tmp_path / "node", graph)
    assert codes.dtype == np.int8 and np.array_equal(codes, io.role_codes(node.roles))
    assert io.role_names(codes).to_pylist() == node.roles.tolist()  # names <-> codes
    sizes, graphs = io.read_typed_message_graphs(tmp_path / "node", graph)
    assert sizes == graph.sizes()
    for phase in ("train", "val", "test"):
        for e in graph.edge_types:
            assert torch.equal(graphs[phase][e].indices, node.message_graphs[phase][e].indices)
    link = link_split(graph)
    link_oracle.write_link_split(tmp_path / "link", graph, link,
                                 {"task": "link", "edge_type": "author__writes__paper"})
    edge_type, edges, negatives = io.read_typed_link_split(tmp_path / "link", graph)
    assert split_task(tmp_path / "link") == "link" and split_task(tmp_path / "node") == "node"
    assert edge_type == WRITES
    assert all(torch.equal(edges[r], link.edges[r]) for r in link.edges)
    assert all(torch.equal(negatives[p], link.negatives[p]) for p in link.negatives)
    _, graphs = io.read_typed_message_graphs(tmp_path / "link")
    assert graphs["val"] is graphs["train"]  # stored once, shared when read back
    other = small_hetero(num_authors=150)
    with pytest.raises(ValueError, match="the split is of another graph"):
        io.read_typed_message_graphs(tmp_path / "link", other)


def test_message_graphs_read_memory_mapped_stay_views_of_the_file(graph, tmp_path):
    """``mmap=True``: the CSRs equal the eager read and their file is mapped into the process
    (analyze and evaluate read every phase's graph without copying it)."""
    node = node_split(graph)
    io.write_split(tmp_path, graph, node.message_graphs, {"task": "node", "mode": node.mode},
                   roles=node.roles)
    name = str((tmp_path / io.read_split_meta(tmp_path)["message_graph"]["train"]).resolve())

    def mapped() -> bool:
        return name in Path("/proc/self/maps").read_text()

    _, eager = io.read_typed_message_graphs(tmp_path, graph)
    assert not mapped()
    _, lazy = io.read_typed_message_graphs(tmp_path, graph, mmap=True)
    assert mapped()
    for e in graph.edge_types:
        assert torch.equal(lazy["train"][e].indptr, eager["train"][e].indptr)
        assert torch.equal(lazy["train"][e].indices, eager["train"][e].indices)


def test_typed_readers_read_a_homogeneous_split_as_its_one_type_split(small_graph, tmp_path):
    """A homogeneous split's files read by the one set of readers: message graphs as
    ``{EDGE: csr}`` (shared per file), roles of the one type and the link split with edge type
    ``EDGE``: the values written."""
    g = as_graph(small_graph)
    n = small_graph.num_nodes
    node = node_split(g)
    io.write_split(tmp_path / "node", g, node.message_graphs, {"mode": node.mode},
                   roles=node.roles)
    sizes, graphs = io.read_typed_message_graphs(tmp_path / "node", g)
    plain = node.message_graphs
    assert sizes == [(NODE, n)] and all(set(graphs[p]) == {EDGE} for p in plain)
    assert all(torch.equal(graphs[p][EDGE].indices, plain[p][EDGE].indices) for p in plain)
    assert all((graphs[p] is graphs[q]) == (plain[p][EDGE] is plain[q][EDGE])
               for p in plain for q in plain)
    assert sorted(p.name for p in (tmp_path / "node").iterdir())[-1] == "nodes_node.parquet"
    assert np.array_equal(io.read_typed_role_codes(tmp_path / "node", g), io.role_codes(node.roles))
    assert np.array_equal(io.read_typed_role_codes(tmp_path / "node"), io.role_codes(node.roles))
    with pytest.raises(ValueError, match=f"{n} split roles of 'node' nodes for 1499 'node' "
                                         "nodes"):
        io.read_typed_role_codes(tmp_path / "node", as_graph(
            type(small_graph)(csr=csr_from_edges([], [], 1499), x=small_graph.x[:1499],
                              y=small_graph.y[:1499], num_classes=small_graph.num_classes)))
    link = link_split(g)
    link_oracle.write_link_split(tmp_path / "link", g, link, {"edge_type": "node__to__node"})
    edge_type, edges, negatives = io.read_typed_link_split(tmp_path / "link", g)
    plain_edges = io.read_link_edges(tmp_path / "link", n)
    plain_negatives = io.read_link_negatives(tmp_path / "link", plain_edges, n)
    assert edge_type == EDGE
    assert all(torch.equal(edges[r], plain_edges[r]) for r in plain_edges)
    assert all(torch.equal(negatives[p], plain_negatives[p]) for p in plain_negatives)
    _, graphs = io.read_typed_message_graphs(tmp_path / "link")
    assert graphs["val"] is graphs["train"]  # stored once, shared when read back


def test_component_clusters_audit_every_split_pair_of_the_own_relation(graph):
    """``separated`` (strategy cluster by components) checks the target's own relation of a
    typed graph as of a homogeneous one: a cites edge between two splits fails it."""
    split = node_split(graph, "transductive")
    report = audit_node_split(graph, split.roles, split.message_graphs, split.mode,
                              separated=True)
    assert failed(report) == ["splits_not_adjacent"]
    assert report["cross_split_edges_relation"] == "paper__cites__paper"


def test_one_audit_report_layout_for_both_kinds(graph, small_graph):
    """A homogeneous graph's report has the typed report's keys (target, message edges per
    edge type; link: the held-out and reverse edge types), and neither says "hetero"."""
    homogeneous = as_graph(small_graph)
    reports = {}
    for name, g in (("typed", graph), ("homogeneous", homogeneous)):
        split = node_split(g)
        reports[name, "node"] = audit_node_split(g, split.roles, split.message_graphs,
                                                 split.mode)
        link = link_split(g)
        reports[name, "link"] = link_oracle.audit_link_split(g, link.edge_type, link.edges,
                                                       link.negatives, link.message_graphs,
                                                       disjoint=False)
    for task in ("node", "link"):
        assert set(reports["typed", task]) == set(reports["homogeneous", task]), task
        assert "hetero" not in reports["typed", task]
    node = reports["homogeneous", "node"]
    assert node["target"] == "node" and node["cross_split_edges_relation"] == "node__to__node"
    assert set(node["message_edges"]["train"]) == {"node__to__node"}
    link = reports["homogeneous", "link"]
    assert link["edge_type"] == link["reverse_edge_type"] == "node__to__node"
    assert reports["typed", "link"]["edge_type"] == "author__writes__paper"
