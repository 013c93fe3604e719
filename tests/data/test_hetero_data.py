"""The heterogeneous generator and its artifacts: determinism, reverse types, round-trip, schema."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
import torch

from gnnpipe import io
from gnnpipe.config import params_from_dict
from gnnpipe.data.graph import EDGE, NODE
from gnnpipe.data.edges import edge_pairs, homogeneous_csr
from graph_oracle import REV_WRITES, prepare_dataset
from prepared_oracle import read_typed_edge_table, read_typed_node_table, write_node_ids
from gnnpipe.data.synthetic import CITES, PUBLISHED_IN, WRITES
from conftest import as_graph

SMALL = {"num_nodes": 600, "num_features": 16, "num_classes": 3,
         "avg_degree": 6.0, "num_authors": 200, "num_venues": 6}


def small_hetero(seed: int = 0, **synthetic):
    params = params_from_dict({"seed": seed, "dataset": {"layout": "typed",
                                                         "synthetic": {**SMALL, **synthetic}}})
    return prepare_dataset(params.dataset, seed).graph


def test_generator_is_deterministic_and_seed_dependent():
    a, b, other = small_hetero(0), small_hetero(0), small_hetero(1)
    for t in a.node_types:
        assert torch.equal(a.x[t], b.x[t])
    for e in a.edge_types:
        assert torch.equal(a.csr[e].indptr, b.csr[e].indptr)
        assert torch.equal(a.csr[e].indices, b.csr[e].indices)
    assert torch.equal(a.y, b.y)
    assert not torch.equal(a.x["author"], other.x["author"])
    assert not torch.equal(a.csr[WRITES].indices, other.csr[WRITES].indices)


def test_generator_types_sizes_and_reverse_edges():
    g = small_hetero()
    assert g.node_types == ("paper", "author", "venue") and g.target == "paper"
    assert [g.num_nodes_dict[t] for t in g.node_types] == [600, 200, 6]
    assert [g.x[t].shape[1] for t in g.node_types] == [16, 8, 4]  # typed widths differ
    assert g.y.shape == (600,) and g.num_classes == 3
    for edge_type, reverse in g.reverse.items():  # every reverse type holds the flipped edges
        src, dst = edge_pairs(g.csr[edge_type])
        r_src, r_dst = edge_pairs(g.csr[reverse])
        forward = np.sort(src * 10_000 + dst)
        assert np.array_equal(forward, np.sort(r_dst * 10_000 + r_src))
    assert g.reverse[CITES] == CITES and g.reverse[WRITES] == REV_WRITES
    assert g.csr[PUBLISHED_IN].degrees().numpy().sum() == 600  # one venue per paper
    assert (np.bincount(edge_pairs(g.csr[PUBLISHED_IN])[0], minlength=600) == 1).all()
    # homophilous authorships: most author-paper pairs share the class of the author's papers
    a, p = edge_pairs(g.csr[WRITES])
    counts = np.zeros((200, 3))
    np.add.at(counts, (a, g.y.numpy()[p]), 1)
    author_class = counts.argmax(1)
    assert (author_class[a] == g.y.numpy()[p]).mean() > 0.7


def test_homogeneous_projection_offsets_every_type():
    g = small_hetero()
    csr = homogeneous_csr(g.sizes(), g.csr)
    assert csr.num_nodes == 806 and csr.num_edges == sum(c.num_edges for c in g.csr.values())
    off = g.offsets()
    src, dst = edge_pairs(csr)
    w_src, w_dst = edge_pairs(g.csr[WRITES])
    keys = set((src * 806 + dst).tolist())
    assert set(((w_src + off["author"]) * 806 + w_dst + off["paper"]).tolist()) <= keys


def test_artifacts_round_trip_with_tables(tmp_path):
    g = small_hetero()
    io.write_prepared(tmp_path, g)
    assert io.read_description(tmp_path)["layout"] == "typed"
    assert not (tmp_path / "hetero.json").exists()
    back = io.read_graph(tmp_path)
    assert back.node_types == g.node_types and back.edge_types == g.edge_types
    assert back.reverse == g.reverse and back.link_edge_type == g.link_edge_type
    assert torch.equal(back.y, g.y) and back.num_classes == g.num_classes
    for t in g.node_types:
        assert torch.equal(back.x[t], g.x[t])
        table = read_typed_node_table(tmp_path, t)
        assert ("label" in table.column_names) == (t == "paper")
        x = np.stack(table.column("x").to_numpy(zero_copy_only=False))
        assert np.array_equal(x, g.x[t].numpy())
    for e in g.edge_types:
        assert torch.equal(back.csr[e].indptr, g.csr[e].indptr)
        table = read_typed_edge_table(tmp_path, e)
        src, dst = edge_pairs(g.csr[e])
        assert np.array_equal(table.column("src").to_numpy(), src)
        assert np.array_equal(table.column("dst").to_numpy(), dst)
    meta = json.loads((tmp_path / "graph.json").read_text())
    assert meta["edge_types"][1] == "author__writes__paper"


def test_one_layout_names_every_file_from_the_types(tmp_path, tiny_graph):
    """A typed graph and a homogeneous one write the same kinds of files under one schema,
    named from their types."""
    io.write_prepared(tmp_path / "typed", small_hetero())
    io.write_prepared(tmp_path / "one", as_graph(tiny_graph))
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == [
        "edges_node__to__node.parquet", "graph.json", "graph.pt", "nodes_node.parquet"]
    typed = sorted(p.name for p in (tmp_path / "typed").iterdir())
    assert typed == sorted(["graph.json", "graph.pt"]
                           + [f"nodes_{t}.parquet" for t in small_hetero().node_types]
                           + [f"edges_{'__'.join(e)}.parquet" for e in small_hetero().edge_types])
    for folder in ("typed", "one"):
        payload = torch.load(tmp_path / folder / "graph.pt", weights_only=True)
        assert payload["schema"] == io.GRAPH_SCHEMA


def test_typed_readers_read_a_homogeneous_graph_as_its_one_type_graph(tmp_path, tiny_graph):
    """The homogeneous graph's files read as the typed graph of node type NODE and edge
    type EDGE: the same tensors, and the tables of that type."""
    io.write_prepared(tmp_path, as_graph(tiny_graph))
    write_node_ids(tmp_path, NODE, pa.array([f"n{i}" for i in range(12)]))
    back = io.read_graph(tmp_path)
    assert back.layout == "homogeneous" and back.metadata() == ([NODE], [EDGE])
    assert back.target == NODE and back.reverse == {EDGE: EDGE} and back.link_edge_type == EDGE
    assert torch.equal(back.x[NODE], tiny_graph.x) and torch.equal(back.y, tiny_graph.y)
    assert torch.equal(back.csr[EDGE].indptr, tiny_graph.csr.indptr)
    assert torch.equal(back.csr[EDGE].indices, tiny_graph.csr.indices)
    nodes = read_typed_node_table(tmp_path, NODE)
    assert nodes.column("label").to_pylist() == tiny_graph.y.tolist()
    src, dst = tiny_graph.csr.edge_index().numpy()
    edges = read_typed_edge_table(tmp_path, EDGE)
    assert np.array_equal(edges.column("src").to_numpy(), src)
    assert np.array_equal(edges.column("dst").to_numpy(), dst)
    ids = io.read_typed_node_ids(tmp_path, NODE)
    assert ids.column("original_id").to_pylist() == [f"n{i}" for i in range(12)]
    with pytest.raises(ValueError, match="no node type 'paper'"):
        read_typed_node_table(tmp_path, "paper")
    with pytest.raises(ValueError, match="no edge type 'paper__cites__paper'"):
        read_typed_edge_table(tmp_path, CITES)


def test_schema_checks_name_file_and_problem(tmp_path):
    g = small_hetero()
    io.write_prepared(tmp_path, g)
    meta_path = tmp_path / "graph.json"
    meta = json.loads(meta_path.read_text())
    bad = dict(meta, node_types=[["paper", 601, 16]] + meta["node_types"][1:])
    meta_path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"graph.pt: 'x.paper' has shape \(600, 16\), "
                                         r"graph.json says \(601, 16\)"):
        io.read_graph(tmp_path)
    meta_path.write_text(json.dumps(dict(meta, edge_types=meta["edge_types"] + ["a__b__paper"])))
    with pytest.raises(ValueError, match="edge type a__b__paper joins unknown node types"):
        io.read_graph(tmp_path)
    meta_path.write_text(json.dumps(meta))
    (tmp_path / "edges_author__writes__paper.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match="edges_author__writes__paper.parquet: not a readable"):
        read_typed_edge_table(tmp_path, WRITES)
    with pytest.raises(ValueError, match="no node type 'user'"):
        read_typed_node_table(tmp_path, "user")


def test_out_of_range_ids_in_graph_pt_are_refused(tmp_path):
    g = small_hetero()
    csr = dict(g.csr)
    bad = csr[WRITES]
    indices = bad.indices.clone()
    indices[0] = 200  # one past the last author
    csr[WRITES] = type(bad)(bad.indptr, indices)
    io.write_prepared(tmp_path, type(g)(**{**g.__dict__, "csr": csr}))
    with pytest.raises(ValueError, match=r"author__writes__paper\): indices hold author ids "
                                         r"outside \[0, 200\)"):
        io.read_graph(tmp_path)


def test_artifacts_are_byte_identical_for_the_same_seed(tmp_path):
    for name in ("a", "b"):
        io.write_prepared(tmp_path / name, small_hetero())
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert "nodes_venue.parquet" in files and "edges_paper__cites__paper.parquet" in files
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
