"""Hard negatives of a link split (split.link.num_hard_negatives): never a true edge of any
role, of the held-out target type, audited, written beside the random ones, which stay as
they were."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.config import LinkSplitParams, params_from_dict
from gnnpipe.data.graph import Graph
from gnnpipe.data.edges import csr_from_edges, edge_pairs
from gnnpipe.runtime.rng import make_rng
from link_oracle import hard_link_negatives, split_links

import link_oracle
from test_hetero_data import small_hetero


def _graph(n: int = 120, e: int = 500, seed: int = 0):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    csr = csr_from_edges(np.concatenate([src, dst]), np.concatenate([dst, src]), n)
    return Graph.homogeneous(csr, torch.zeros(n, 1), torch.zeros(n, dtype=torch.int64),
                             num_classes=1)


def _hard(graph, k=10, seed=0, **cfg):
    link = split_links(graph, LinkSplitParams(num_val_negatives=5, num_test_negatives=5, **cfg),
                       make_rng(seed, "split"))
    return link, hard_link_negatives(graph, link, k, make_rng(seed, "split.hard"))[0]


@pytest.mark.parametrize("disjoint", [0.0, 0.3])
def test_hard_negatives_are_never_a_true_edge_of_any_role_nor_the_source(disjoint):
    graph = _graph()
    link, hard = _hard(graph, disjoint_train_ratio=disjoint)
    true = link_oracle.true_pairs(graph)
    for phase in ("val", "test"):
        heads = link.edges[phase][0]
        assert hard[phase].shape == (heads.numel(), 10)
        for h, row in zip(heads.tolist(), hard[phase].tolist()):
            assert h not in row and not any((h, t) in true for t in row)
    report = link_oracle.audit_link_split(graph, link.edge_type, link.edges, link.negatives,
                                    link.message_graphs, disjoint=disjoint > 0, hard=hard)
    assert report["passed"] and report["hard_negatives"]["test"]["per_positive"] == 10
    assert {"hard_negatives_val_not_edges", "hard_negatives_test_not_edges"} <= {
        c["check"] for c in report["checks"]}


def test_hard_negatives_are_closer_to_the_source_than_random_ones():
    """Most hard negatives are 2 hops from their source in the train graph; random ones rarely."""
    graph = _graph(n=400, e=1200)
    link, hard = _hard(graph, k=5)
    train = link.message_graphs["train"][graph.edge_types[0]]
    adjacency = np.zeros((400, 400), dtype=bool)
    a, b = edge_pairs(train)
    adjacency[a, b] = adjacency[b, a] = True
    two_hop = (adjacency.astype(int) @ adjacency.astype(int)) > 0
    heads = link.edges["test"][0].numpy()[:, None]
    near = {name: two_hop[heads, t.numpy()[:, :5]].mean()
            for name, t in (("hard", hard["test"]), ("random", link.negatives["test"]))}
    assert near["hard"] > 0.9 and near["random"] < 0.3


def test_the_audit_fails_a_hard_negative_that_is_a_true_edge():
    graph = _graph()
    link, hard = _hard(graph)
    hard = {p: t.clone() for p, t in hard.items()}
    hard["val"][0, 3] = link.edges["val"][1, 0]  # the positive's own target
    report = link_oracle.audit_link_split(graph, link.edge_type, link.edges, link.negatives,
                                    link.message_graphs, disjoint=False, hard=hard)
    assert [c["check"] for c in report["checks"] if not c["passed"]] == [
        "hard_negatives_val_not_edges"]


def test_typed_hard_negatives_are_papers_reached_through_other_edge_types():
    """author writes paper is bipartite: 2 hops from an author are authors, so candidates come
    from the whole train graph (writes then cites) kept to papers."""
    graph = small_hetero()
    link, hard = _hard(graph)
    n_papers, offsets = graph.num_nodes_dict["paper"], graph.offsets()
    true = link_oracle.true_pairs(graph)
    for phase in ("val", "test"):
        targets = hard[phase]
        assert ((targets >= 0) & (targets < n_papers)).all()
        heads = link.edges[phase][0] + offsets["author"]
        for h, row in zip(heads.tolist(), (targets + offsets["paper"]).tolist()):
            assert not any((h, t) in true for t in row)
    report = link_oracle.audit_link_split(graph, link.edge_type, link.edges, link.negatives,
                                    link.message_graphs, disjoint=False, hard=hard)
    assert report["passed"]
    assert "hard_negatives_test_are_paper_nodes" in {c["check"] for c in report["checks"]}
    # ranked, not filled: a typical author reaches papers in 2 hops through what it wrote
    assert len({tuple(r) for r in hard["test"].tolist()}) > 1


def _split_folder(folder, monkeypatch, **link):
    folder.mkdir()
    monkeypatch.chdir(folder)
    params = {"dataset": {"task": "link", "synthetic": {"num_nodes": 300, "num_features": 4}},
              "split": {"link": {"num_val_negatives": 7, "num_test_negatives": 9, **link}},
              "evaluate": {"link": {"negatives": "random" if link else "both"}}}
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    for stage in ("prepare", "split"):
        assert main([stage]) == 0, stage
    return folder / "data/split"


def test_the_split_stage_writes_hard_negatives_and_leaves_the_random_ones_as_they_were(
        tmp_path, monkeypatch):
    without = _split_folder(tmp_path / "without", monkeypatch, num_hard_negatives=0)
    with_hard = _split_folder(tmp_path / "with", monkeypatch)
    names = {p.name for p in without.iterdir()}
    assert {p.name for p in with_hard.iterdir()} - names == {
        "negatives_hard_val.parquet", "negatives_hard_test.parquet"}
    for name in names - {"meta.json"}:  # random negatives, positives, message graphs
        assert (without / name).read_bytes() == (with_hard / name).read_bytes(), name
    meta = json.loads((with_hard / "meta.json").read_text())
    assert meta["num_hard_negatives"] == {"val": 100, "test": 100}
    assert "num_hard_negatives" not in json.loads((without / "meta.json").read_text())
    graph = io.read_graph(tmp_path / "with/data/prepared")
    _, edges, _ = io.read_typed_link_split(with_hard, graph)
    hard = io.read_link_negatives(with_hard, edges, graph.num_nodes, hard=True)
    assert hard["test"].shape == (edges["test"].shape[1], 100)
    assert io.read_link_negatives(without, edges, graph.num_nodes, hard=True) is None
    audit_report = json.loads((tmp_path / "with/metrics/split_audit.json").read_text())
    assert audit_report["passed"] and "hard_negatives" in audit_report
    ranked = audit_report["hard_negatives"]["ranked_fraction"]
    assert set(ranked) == {"val", "test"} and all(0 < f <= 1 for f in ranked.values())


def test_hard_evaluation_without_hard_negatives_is_refused_at_load_time():
    with pytest.raises(ValueError, match=r"evaluate.link.negatives='hard' needs hard negatives "
                                         r"from the split: set split.link.num_hard_negatives"):
        params_from_dict({"dataset": {"task": "link"}, "evaluate": {"link": {"negatives": "hard"}},
                          "split": {"link": {"num_hard_negatives": 0}}})
    # the node task never reads them
    params_from_dict({"evaluate": {"link": {"negatives": "hard"}},
                      "split": {"link": {"num_hard_negatives": 0}}})
