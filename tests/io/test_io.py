"""Atomic writes, Parquet tables and torch artifacts: round trips and every way a read must fail."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from gnnpipe.commands.variant import split_task
from gnnpipe.data.graph import EDGE, Graph
from gnnpipe.io.atomic import atomic_dir, atomic_path
from gnnpipe.io.common import EDGES_SCHEMA
from gnnpipe.io.description import DESCRIPTION_SCHEMA, read_description
from gnnpipe.io.parquet import SCHEMA_KEY, read_table, write_table
from gnnpipe.io.prepared import GRAPH_SCHEMA, write_prepared
from gnnpipe.io.splits import read_split_meta, write_split
from gnnpipe.io.typed import read_graph, read_typed_role_codes
from gnnpipe.io.tensors import load_tensors, save_tensors

from conftest import as_graph, make_tiny_graph
from prepared_oracle import read_typed_edge_table, read_typed_node_table


class Boom(Exception):
    pass


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _graph_payload(graph: Graph, **override) -> dict:
    """graph.pt's tensors of a one-type graph (``TargetView``), ``override`` by short name."""
    names = {"x": "x.node", "y": "y", "indptr": "node__to__node.indptr",
             "indices": "node__to__node.indices"}
    tensors = {"x": graph.x, "y": graph.y, "indptr": graph.csr.indptr,
               "indices": graph.csr.indices}
    tensors.update(override)
    return {names[k]: v for k, v in tensors.items()}


def _save_graph_pt(prepared: Path, payload: dict, schema: str = GRAPH_SCHEMA, **meta) -> None:
    """graph.pt beside the graph.json of the tiny graph (written first)."""
    write_prepared(prepared, as_graph(make_tiny_graph()))
    save_tensors(prepared / "graph.pt", schema, payload,
                 meta={"num_classes": 3, "target": "node", **meta})


# ------------------------------------------------------------------------------------- atomic
def test_atomic_path_success_replaces_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp != target
        tmp.write_text("new")
        assert target.read_text() == "old"  # not visible before the block ends
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_atomic_path_exception_leaves_original_untouched(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(Boom):
        with atomic_path(target) as tmp:
            tmp.write_text("half written")
            raise Boom
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_atomic_path_exception_creates_nothing_when_absent(tmp_path):
    target = tmp_path / "sub" / "out.txt"
    with pytest.raises(Boom):
        with atomic_path(target) as tmp:
            tmp.write_text("x")
            raise Boom
    assert not target.exists()
    assert list((tmp_path / "sub").iterdir()) == []


def test_atomic_dir_replaces_full_directory(tmp_path):
    target = tmp_path / "stage"
    target.mkdir()
    (target / "stale.txt").write_text("stale")
    (target / "nested").mkdir()
    (target / "nested" / "a.txt").write_text("a")
    with atomic_dir(target) as tmp:
        (tmp / "fresh.txt").write_text("fresh")
        assert (target / "stale.txt").exists()  # old folder still whole meanwhile
    assert sorted(p.name for p in target.iterdir()) == ["fresh.txt"]
    assert (target / "fresh.txt").read_text() == "fresh"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stage"]  # no .tmp / .old left


def test_atomic_dir_creates_when_absent(tmp_path):
    target = tmp_path / "stage"
    with atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("a")
    assert (target / "a.txt").read_text() == "a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stage"]


def test_atomic_dir_exception_keeps_old_directory(tmp_path):
    target = tmp_path / "stage"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(Boom):
        with atomic_dir(target) as tmp:
            (tmp / "new.txt").write_text("new")
            (tmp / "deep").mkdir()
            (tmp / "deep" / "b.txt").write_text("b")
            raise Boom
    assert sorted(p.name for p in target.iterdir()) == ["old.txt"]
    assert (target / "old.txt").read_text() == "old"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "stage"]
    assert leftovers == []
    assert not any(p.name.endswith(".tmp") for p in tmp_path.rglob("*"))


# ---------------------------------------------------------------------------- prepared graph
@pytest.mark.parametrize("mmap", [False, True])
def test_write_prepared_read_graph_round_trip(tmp_path, tiny_graph, mmap):
    write_prepared(tmp_path, as_graph(tiny_graph))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "edges_node__to__node.parquet", "graph.json", "graph.pt", "nodes_node.parquet"]
    assert set(torch.load(tmp_path / "graph.pt", weights_only=True)) == {
        "schema", "meta", "x.node", "y", "node__to__node.indptr", "node__to__node.indices"}
    back = read_graph(tmp_path, mmap=mmap).target_view()
    assert back.num_classes == tiny_graph.num_classes
    assert back.x.dtype == torch.float32 and torch.equal(back.x, tiny_graph.x)
    assert back.y.dtype == torch.int64 and torch.equal(back.y, tiny_graph.y)
    assert torch.equal(back.csr.indptr, tiny_graph.csr.indptr)
    assert torch.equal(back.csr.indices, tiny_graph.csr.indices)


def test_homogeneous_graph_is_described_as_one_node_and_one_edge_type(tmp_path, tiny_graph):
    timed = Graph.homogeneous(tiny_graph.csr, tiny_graph.x, tiny_graph.y, num_classes=3,
                              timestamps=torch.arange(tiny_graph.num_nodes, dtype=torch.float64))
    write_prepared(tmp_path, timed)
    meta = json.loads((tmp_path / "graph.json").read_text())
    assert meta == {"schema": DESCRIPTION_SCHEMA, "node_types": [["node", 12, 2]],
                    "edge_types": ["node__to__node"], "target": "node", "num_classes": 3,
                    "reverse": {"node__to__node": "node__to__node"},
                    "link_edge_type": "node__to__node", "node_time": ["node"]}
    assert read_description(tmp_path)["layout"] == "homogeneous"  # derived, not stored
    (tmp_path / "ext").mkdir()
    write_prepared(tmp_path / "ext", as_graph(tiny_graph), features="external")
    assert read_description(tmp_path / "ext")["features"] == ["node"]
    assert (tmp_path / "ext" / "features_node.npy").exists()
    assert read_graph(tmp_path / "ext").target_view().x.shape == (12, 2)


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(node_types=[["node", 13, 2]]),
     r"graph\.pt: 'x\.node' has shape \(12, 2\), graph\.json says \(13, 2\)"),
    (lambda m: m.update(num_classes=4), r"graph\.pt: meta num_classes is 3, graph\.json says 4"),
    (lambda m: m.update(node_time=["node"]),
     r"graph\.pt: 'time\.node' must be a float or int64 tensor of one dim, found None"),
    (lambda m: m.update(features=["node"]),
     r"graph\.pt: meta features is \[\], graph\.json says \['node'\]"),
    (lambda m: m.update(schema="gnnpipe.hetero/1"), r"graph\.json: expected a "
     "'gnnpipe.graph_description/1' file, found 'gnnpipe.hetero/1'"),
    (lambda m: m.update(node_types=[["paper", 12, 2]], edge_types=["paper__cites__paper"],
                        target="paper", reverse={}, link_edge_type="paper__cites__paper"),
     r"graph\.pt: missing tensor 'paper__cites__paper\.indptr'"),
    (lambda m: m.update(edge_types=["node__to__venue"]),
     r"graph\.json: edge type node__to__venue joins unknown"),
])
def test_read_graph_checks_graph_json_against_graph_pt(tmp_path, tiny_graph, edit, message):
    write_prepared(tmp_path, as_graph(tiny_graph))
    meta = json.loads((tmp_path / "graph.json").read_text())
    edit(meta)
    (tmp_path / "graph.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=message):
        read_graph(tmp_path)


def test_split_meta_lists_the_types_for_a_homogeneous_graph_too(tmp_path, tiny_graph):
    graph = as_graph(tiny_graph)
    roles = np.array(["train", "val", "test", "unused"] * 3, dtype=object)
    write_split(tmp_path, graph, {p: {EDGE: tiny_graph.csr} for p in ("train", "val", "test")},
                {"mode": "transductive"}, roles=roles)
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["task"] == "node" and "hetero" not in meta
    assert (meta["target"], meta["node_types"], meta["edge_types"]) == (
        "node", [["node", 12]], ["node__to__node"])
    assert read_split_meta(tmp_path)["layout"] == "homogeneous"
    assert split_task(tmp_path) == "node"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["message_train.pt", "meta.json",
                                                          "nodes_node.parquet"]
    (tmp_path / "meta.json").write_text(json.dumps({**meta, "edge_types": ["node__to"]}))
    with pytest.raises(ValueError, match=r"meta\.json: node_types / edge_types missing or "
                                         "malformed"):
        read_split_meta(tmp_path)


def test_role_codes_read_back_as_written_and_ids_out_of_order_fail(tmp_path, tiny_graph):
    """int8 codes in, int8 codes out (writable); node_id is checked a row group at a time."""
    codes = np.array([0, 1, 2, 3] * 3, dtype=np.int8)
    write_split(tmp_path, as_graph(tiny_graph),
                {p: {EDGE: tiny_graph.csr} for p in ("train", "val", "test")},
                {"mode": "transductive"}, roles=codes)
    read = read_typed_role_codes(tmp_path)
    assert read.dtype == np.int8 and read.flags.writeable and np.array_equal(read, codes)
    path = tmp_path / "nodes_node.parquet"
    table = pq.read_table(path)
    pq.write_table(table, path, row_group_size=5)  # three chunks, still in order
    assert np.array_equal(read_typed_role_codes(tmp_path), codes)
    ids = pa.array(np.r_[np.arange(5), 6, 5, np.arange(7, 12)])  # a swap in the second chunk
    pq.write_table(table.set_column(0, "node_id", ids).replace_schema_metadata(
        table.schema.metadata), path, row_group_size=5)
    with pytest.raises(ValueError, match=r"nodes_node\.parquet: node_id must be 0\.\.11 in "
                                         "order"):
        read_typed_role_codes(tmp_path)


def test_node_table_round_trip_returns_features_as_written(tmp_path):
    graph = make_tiny_graph()
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((graph.num_nodes, 5)).astype(np.float32))
    graph = Graph.homogeneous(graph.csr, x, graph.y, graph.num_classes)
    write_prepared(tmp_path, graph)
    table = read_typed_node_table(tmp_path, "node")
    assert table.column_names == ["node_id", "label", "x"]
    assert table.schema.field("x").type == pa.list_(pa.float32(), 5)
    assert table.column("node_id").to_numpy().tolist() == list(range(graph.num_nodes))
    assert np.array_equal(table.column("label").to_numpy(), graph.y.numpy())
    flat = table.column("x").combine_chunks().flatten().to_numpy()
    assert np.array_equal(flat.reshape(graph.num_nodes, 5), x.numpy())  # bit-exact


def test_edge_table_round_trip_matches_csr(tmp_path, tiny_graph):
    write_prepared(tmp_path, as_graph(tiny_graph))
    table = read_typed_edge_table(tmp_path, EDGE)
    ei = tiny_graph.csr.edge_index().numpy()
    assert np.array_equal(table.column("src").to_numpy(), ei[0])
    assert np.array_equal(table.column("dst").to_numpy(), ei[1])


def test_read_graph_missing_file(tmp_path, tiny_graph):
    with pytest.raises(ValueError, match=r"graph\.json: file not found"):
        read_graph(tmp_path)
    write_prepared(tmp_path, as_graph(tiny_graph))
    (tmp_path / "graph.pt").unlink()
    with pytest.raises(ValueError, match=r"graph\.pt: file not found"):
        read_graph(tmp_path)


def test_read_graph_rejects_truncated_file(tmp_path, tiny_graph):
    write_prepared(tmp_path, as_graph(tiny_graph))
    path = tmp_path / "graph.pt"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="not a readable gnnpipe torch artifact"):
        read_graph(tmp_path)


def test_read_graph_rejects_other_schema_tag(tmp_path, tiny_graph):
    _save_graph_pt(tmp_path, _graph_payload(tiny_graph), "gnnpipe.graph/1")
    with pytest.raises(ValueError, match=r"expected a 'gnnpipe.graph/2' artifact, found "
                                         r"'gnnpipe.graph/1'"):
        read_graph(tmp_path)


def test_read_graph_rejects_bare_tensor(tmp_path):
    write_prepared(tmp_path, as_graph(make_tiny_graph()))
    torch.save(torch.zeros(3), tmp_path / "graph.pt")
    with pytest.raises(ValueError, match="expected a 'gnnpipe.graph/2' artifact, found 'Tensor'"):
        read_graph(tmp_path)


def _side_effect(path: str) -> None:  # what unpickling SomeClass would run
    Path(path).write_text("unpickled!")


class SomeClass:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (_side_effect, (self.marker,))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_read_graph_never_unpickles_arbitrary_objects(tmp_path):
    marker = tmp_path / "marker"
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    write_prepared(prepared, as_graph(make_tiny_graph()))
    torch.save(SomeClass(marker), prepared / "graph.pt")
    with pytest.raises(ValueError, match="not a readable gnnpipe torch artifact"):
        read_graph(prepared)
    assert not marker.exists()
    # a plain pickle (not torch's zip format) of the same object is refused too
    with open(prepared / "graph.pt", "wb") as handle:
        pickle.dump(SomeClass(marker), handle)
    with pytest.raises(ValueError, match="not a readable gnnpipe torch artifact"):
        read_graph(prepared)
    assert not marker.exists()


@pytest.mark.parametrize("content", [b"hello world, not a torch file", b"a,b\n1,2\n"])
def test_read_graph_rejects_text_file_with_value_error(tmp_path, content):
    write_prepared(tmp_path, as_graph(make_tiny_graph()))
    (tmp_path / "graph.pt").write_bytes(content)
    with pytest.raises(ValueError, match="not a readable gnnpipe torch artifact"):
        read_graph(tmp_path)


@pytest.mark.parametrize("override, message", [
    ({"x": torch.zeros(12, 2, dtype=torch.float64)},
     r"tensor 'x.node' must be torch.float32 \(or float16 / bfloat16\), found torch.float64"),
    ({"y": torch.zeros(12, dtype=torch.int32)}, r"tensor 'y' must be torch.int64, found torch.int32"),
    ({"indices": torch.zeros(5, dtype=torch.int32)},
     r"tensor 'node__to__node.indices' must be torch.int64"),
    ({"x": torch.zeros(12, dtype=torch.float32)},
     r"tensor 'x.node' must have 2 dims, found shape \(12,\)"),
    ({"y": torch.zeros(11, dtype=torch.int64)}, r"11 labels for 12 node nodes"),
    ({"y": torch.arange(12) % 4}, r"labels outside \[0, 3\)"),
    ({"y": torch.arange(12) - 2}, r"labels outside \[0, 3\) \(or -1: unlabelled\)"),
    ({"indptr": torch.zeros(12, dtype=torch.int64)}, r"indptr has 12 entries, expected 13"),
    ({"indices": torch.full((32,), 12, dtype=torch.int64)}, r"indices hold node ids outside"),
])
def test_read_graph_rejects_bad_tensors(tmp_path, tiny_graph, override, message):
    assert tiny_graph.csr.num_edges == 32  # the indices override keeps indptr consistent
    _save_graph_pt(tmp_path, _graph_payload(tiny_graph, **override))
    with pytest.raises(ValueError, match=message):
        read_graph(tmp_path)


def test_read_graph_rejects_missing_tensor_and_bad_num_classes(tmp_path, tiny_graph):
    payload = _graph_payload(tiny_graph)
    del payload["y"]
    _save_graph_pt(tmp_path, payload)
    with pytest.raises(ValueError, match="missing tensor 'y'"):
        read_graph(tmp_path)
    _save_graph_pt(tmp_path, _graph_payload(tiny_graph), num_classes=1)
    with pytest.raises(ValueError, match=r"meta num_classes is 1, graph.json says 3"):
        read_graph(tmp_path)


def test_read_graph_without_meta_raises_value_error(tmp_path, tiny_graph):
    write_prepared(tmp_path, as_graph(tiny_graph))
    torch.save({"schema": GRAPH_SCHEMA, **_graph_payload(tiny_graph)}, tmp_path / "graph.pt")
    with pytest.raises(ValueError, match="missing the 'meta' mapping"):
        read_graph(tmp_path)


def test_load_tensors_any_float_spec(tmp_path):
    save_tensors(tmp_path / "h.pt", "gnnpipe.hop/1", {"x": torch.ones(2, 3, dtype=torch.float64)})
    assert load_tensors(tmp_path / "h.pt", "gnnpipe.hop/1", {"x": (None, 2)})["x"].dtype == \
        torch.float64
    save_tensors(tmp_path / "h.pt", "gnnpipe.hop/1", {"x": torch.ones(2, 3, dtype=torch.int64)})
    with pytest.raises(ValueError, match="tensor 'x' must be floating point, found torch.int64"):
        load_tensors(tmp_path / "h.pt", "gnnpipe.hop/1", {"x": (None, 2)})


# ------------------------------------------------------------------------------------ parquet
def _edges(n: int = 10) -> pa.Table:
    return pa.table({"src": np.arange(n, dtype=np.int64), "dst": np.arange(n, dtype=np.int64)[::-1]})


def test_read_table_rejects_non_parquet_file(tmp_path):
    path = tmp_path / "edges.parquet"
    path.write_text("src,dst\n0,1\n")
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        read_table(path, EDGES_SCHEMA, "gnnpipe.edges/1")


def test_read_table_rejects_missing_file(tmp_path):
    with pytest.raises(ValueError, match="file not found"):
        read_table(tmp_path / "nope.parquet", EDGES_SCHEMA, "gnnpipe.edges/1")


def test_read_table_rejects_missing_column(tmp_path):
    path = tmp_path / "edges.parquet"
    table = pa.table({"src": np.arange(3, dtype=np.int64)}).replace_schema_metadata(
        {SCHEMA_KEY: b"gnnpipe.edges/1"})
    pq.write_table(table, path)
    with pytest.raises(ValueError, match=r"missing column 'dst' \(int64\)"):
        read_table(path, EDGES_SCHEMA, "gnnpipe.edges/1")


def test_read_table_rejects_wrong_column_type(tmp_path):
    path = tmp_path / "edges.parquet"
    table = pa.table({"src": np.arange(3, dtype=np.int64), "dst": np.arange(3, dtype=np.int32)})
    pq.write_table(table.replace_schema_metadata({SCHEMA_KEY: b"gnnpipe.edges/1"}), path)
    with pytest.raises(ValueError, match=r"column 'dst' must be int64, found int32"):
        read_table(path, EDGES_SCHEMA, "gnnpipe.edges/1")


def test_read_table_rejects_untagged_and_other_tag(tmp_path):
    path = tmp_path / "edges.parquet"
    pq.write_table(_edges(), path)
    with pytest.raises(ValueError, match=r"expected a 'gnnpipe.edges/1' table, found "
                                         r"'an untagged table'"):
        read_table(path, EDGES_SCHEMA, "gnnpipe.edges/1")
    write_table(path, _edges(), EDGES_SCHEMA, "gnnpipe.other/1")
    with pytest.raises(ValueError, match=r"found 'gnnpipe.other/1'"):
        read_table(path, EDGES_SCHEMA, "gnnpipe.edges/1")


def test_write_table_casts_and_read_selects_schema_columns(tmp_path):
    path = tmp_path / "edges.parquet"
    narrow = pa.table({"src": np.arange(4, dtype=np.int32), "dst": np.arange(4, dtype=np.int32)})
    write_table(path, narrow, EDGES_SCHEMA, "gnnpipe.edges/1")
    back = read_table(path, EDGES_SCHEMA, "gnnpipe.edges/1")
    assert back.schema.field("src").type == pa.int64()
    assert back.column("dst").to_pylist() == [0, 1, 2, 3]
    with pytest.raises((pa.ArrowInvalid, ValueError)):
        write_table(path, pa.table({"src": ["a"], "dst": ["b"]}), EDGES_SCHEMA, "gnnpipe.edges/1")
    assert read_table(path, EDGES_SCHEMA, "gnnpipe.edges/1").num_rows == 4  # old file intact


def test_parquet_writes_are_byte_identical(tmp_path, tiny_graph):
    a, b = tmp_path / "a", tmp_path / "b"
    write_prepared(a, as_graph(tiny_graph))
    write_prepared(b, as_graph(make_tiny_graph()))
    for name in ("nodes_node.parquet", "edges_node__to__node.parquet"):
        assert _sha(a / name) == _sha(b / name), name
    write_table(a / "e.parquet", _edges(50), EDGES_SCHEMA, "gnnpipe.edges/1")
    first = _sha(a / "e.parquet")
    write_table(a / "e.parquet", _edges(50), EDGES_SCHEMA, "gnnpipe.edges/1")
    assert _sha(a / "e.parquet") == first
    write_table(a / "e.parquet", _edges(51), EDGES_SCHEMA, "gnnpipe.edges/1")
    assert _sha(a / "e.parquet") != first  # the hash does see the data
