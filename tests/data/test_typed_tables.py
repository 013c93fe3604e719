"""Typed graphs from users' own tables (dataset.layout: typed, gnnpipe/sources/tables.py,
gnnpipe/data/prepare.py): one table per node type and relation, ids remapped per type."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from gnnpipe.cli import main
from gnnpipe.config import ParamsError, params_from_dict
from graph_oracle import prepare_dataset
from test_sources import block_prepare
from gnnpipe import io
from gnnpipe.data.edges import edge_pairs

# user ids out of order: node i of the graph is row i of the table, whatever its id
USERS = ["u3", "u0", "u5", "u1", "u4", "u2"]
ITEMS = [30, 10, 20, 40]
BUYS = [("u3", 30, 5), ("u0", 10, 1), ("u5", 20, 2), ("u1", 30, 7), ("u4", 40, 3),
        ("u2", 10, 4), ("u3", 30, 2), ("u0", 20, 6)]  # (u3, 30) twice: times 5 and 2
FOLLOWS = [("u3", "u0"), ("u0", "u3"), ("u5", "u1"), ("u4", "u4"), ("u2", "u5")]


def _write(path: Path, table: pa.Table, fmt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        pq.write_table(table, path.with_suffix(".parquet"))
    else:
        pacsv.write_csv(table, path.with_suffix(".csv"))


def user_table() -> pa.Table:
    """f0 = the number in the user's id, so a wrong row mapping shows in the features."""
    number = np.array([int(u[1:]) for u in USERS], dtype=np.float64)
    return pa.table({"id": USERS, "f0": number, "f1": -number,
                     "label": [int(n) % 2 for n in number], "t": [10, 11, 12, 13, 14, 15]})


def make_tables(root: Path, fmt: str = "parquet", *, follows: bool = True) -> Path:
    _write(root / "nodes" / "user", user_table(), fmt)
    _write(root / "nodes" / "item", pa.table({"id": ITEMS}), fmt)  # featureless, int ids
    src, dst, t = zip(*BUYS)
    _write(root / "edges" / "user__buys__item",
           pa.table({"src": list(src), "dst": list(dst), "t": list(t)}), fmt)
    if follows:
        src, dst = zip(*FOLLOWS)
        _write(root / "edges" / "user__follows__user",
               pa.table({"src": list(src), "dst": list(dst)}), fmt)
    return root


def dataset(root: Path, fmt: str = "parquet", **extra):
    raw = {"source": fmt, "path": str(root), "layout": "typed",
           "nodes": {"features": "f*", "timestamp": "t"}, "edges": {"timestamp": "t"}}
    for key, value in extra.items():
        if isinstance(value, dict):
            raw.setdefault(key, {}).update(value)
        else:
            raw[key] = value
    return params_from_dict({"dataset": raw}).dataset


def pairs(csr) -> set[tuple[int, int]]:
    src, dst = edge_pairs(csr)
    return set(zip(src.tolist(), dst.tolist()))


@pytest.fixture(params=["parquet", "csv"])
def prepared(request, tmp_path):
    fmt = request.param
    return prepare_dataset(dataset(make_tables(tmp_path / "raw", fmt), fmt), 0)


# ------------------------------------------------------------------------------ the graph
def test_target_is_the_table_with_the_label_column_and_ids_map_to_rows(prepared):
    graph = prepared.graph
    assert graph.target == "user" and graph.node_types == ("item", "user")  # name order
    assert graph.x["user"][:, 0].tolist() == [3, 0, 5, 1, 4, 2]  # row order, not id order
    assert graph.y.tolist() == [1, 0, 1, 1, 0, 0] and graph.num_classes == 2
    assert prepared.node_ids["user"].to_pylist() == USERS
    assert prepared.node_ids["item"].to_pylist() == ITEMS
    assert prepared.report["target"] == "user" and prepared.report["classes"] == 2


def test_edges_are_remapped_per_type(prepared):
    graph = prepared.graph
    u, i = {k: n for n, k in enumerate(USERS)}, {k: n for n, k in enumerate(ITEMS)}
    want = {(u[s], i[d]) for s, d, _ in BUYS}  # deduplicated
    assert pairs(graph.csr[("user", "buys", "item")]) == want
    assert prepared.report["duplicates_removed"] >= 1


def test_reverse_edge_types_are_added_and_a_same_type_relation_is_its_own(prepared):
    graph = prepared.graph
    buys, rev = ("user", "buys", "item"), ("item", "rev_buys", "user")
    follows = ("user", "follows", "user")
    assert graph.edge_types == (buys, rev, follows)  # each relation, then its reverse
    assert pairs(graph.csr[rev]) == {(d, s) for s, d in pairs(graph.csr[buys])}
    assert graph.reverse == {buys: rev, rev: buys, follows: follows}
    u = {k: n for n, k in enumerate(USERS)}
    one_way = {(u[s], u[d]) for s, d in FOLLOWS if s != d}  # the self-loop u4 is removed
    assert pairs(graph.csr[follows]) == one_way | {(d, s) for s, d in one_way}
    assert prepared.report["self_loops_removed"] == 1


def test_directed_tables_get_no_reverse_types(tmp_path):
    graph = prepare_dataset(dataset(make_tables(tmp_path), undirected=False), 0).graph
    assert graph.edge_types == (("user", "buys", "item"), ("user", "follows", "user"))
    assert graph.reverse == {}


def test_featureless_type_gets_log1p_in_degree_per_incoming_edge_type(prepared):
    graph = prepared.graph
    degrees = graph.csr[("user", "buys", "item")].degrees().float()
    assert graph.x["item"].shape == (4, 1)  # one edge type points into item
    assert torch.allclose(graph.x["item"][:, 0], torch.log1p(degrees))
    assert graph.x["item"][:, 0].tolist() != [0.0] * 4
    assert prepared.report["featureless"] == {"item": "degree"}


def test_featureless_constant_is_a_column_of_ones(tmp_path):
    cfg = dataset(make_tables(tmp_path), typed={"featureless": "constant"})
    assert torch.equal(prepare_dataset(cfg, 0).graph.x["item"], torch.ones(4, 1))


def test_node_and_edge_timestamps_are_int64_in_csr_order(prepared):
    graph = prepared.graph
    assert graph.node_time["user"].tolist() == [10, 11, 12, 13, 14, 15]
    assert "item" not in graph.node_time  # its table has no t column
    u, i = {k: n for n, k in enumerate(USERS)}, {k: n for n, k in enumerate(ITEMS)}
    earliest = {}
    for s, d, t in BUYS:  # a merged duplicate keeps its earliest time
        earliest[u[s], i[d]] = min(t, earliest.get((u[s], i[d]), t))
    for edge_type, flip in ((("user", "buys", "item"), False),
                            (("item", "rev_buys", "user"), True)):
        times = graph.edge_time[edge_type]
        assert times.dtype == torch.int64
        src, dst = edge_pairs(graph.csr[edge_type])
        keys = zip(dst, src) if flip else zip(src, dst)
        assert times.tolist() == [earliest[int(a), int(b)] for a, b in keys]
    assert earliest[u["u3"], i[30]] == 2
    assert ("user", "follows", "user") not in graph.edge_time  # no t column there


def test_target_can_be_named_and_link_edge_type_defaults_to_the_first_touching_it(tmp_path):
    root = make_tables(tmp_path)
    graph = prepare_dataset(dataset(root, typed={"target": "user"}), 0).graph
    assert graph.target == "user" and graph.link_edge_type == ("user", "buys", "item")
    cfg = dataset(root, typed={"link_edge_type": "user__follows__user"})
    assert prepare_dataset(cfg, 0).graph.link_edge_type == ("user", "follows", "user")


def test_link_task_needs_no_labels(tmp_path):
    root = make_tables(tmp_path)
    _write(root / "nodes" / "user", user_table().drop(["label"]), "parquet")
    prepared = prepare_dataset(dataset(root, task="link"), 0)
    assert prepared.graph.num_classes == 1 and prepared.report["labelled"] is False


def test_artifacts_round_trip_times_and_ids(tmp_path, monkeypatch, capsys):
    make_tables(tmp_path / "raw")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"dataset": {
        "source": "parquet", "path": "raw", "layout": "typed",
        "nodes": {"features": "f*", "timestamp": "t"}, "edges": {"timestamp": "t"}}}))
    assert main(["prepare"]) == 0
    # one summary line for every kind: types, edges, target, policies, featureless types
    assert capsys.readouterr().out.strip() == (
        "gnnpipe prepare: typed graph: 4 item, 6 user; 20 edges in 3 types, target user (2 "
        "duplicates, 1 self-loops removed); featureless: item (degree features) -> data/prepared")
    out = tmp_path / "data/prepared"
    graph = io.read_graph(out)
    expected = prepare_dataset(dataset(tmp_path / "raw"), 0).graph
    assert graph.node_time.keys() == expected.node_time.keys()
    assert all(torch.equal(graph.edge_time[e], expected.edge_time[e]) for e in expected.edge_time)
    assert io.read_typed_node_ids(out, "user").column("original_id").to_pylist() == USERS
    assert io.read_typed_node_ids(out, "item").column("original_id").to_pylist() == ITEMS
    for t in ("user", "item"):  # the id type from the schema alone (model.pt's meta)
        assert io.node_id_type(out, t) == io.read_typed_node_ids(out, t).schema.field(
            "original_id").type
    meta = json.loads((out / "graph.json").read_text())
    assert meta["node_time"] == ["user"] and "public_roles" not in meta
    assert meta["featureless"] == ["item"]  # train.embeddings.types: featureless reads it
    (out / "graph.json").write_text(json.dumps({**meta, "featureless": ["shop"]}))
    with pytest.raises(ValueError, match="'featureless' must list node types"):
        io.read_description(out)


def test_damaged_time_tensor_is_refused_on_read(tmp_path, monkeypatch):
    make_tables(tmp_path / "raw")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"dataset": {
        "source": "parquet", "path": "raw", "layout": "typed",
        "nodes": {"features": "f*", "timestamp": "t"}}}))
    assert main(["prepare"]) == 0
    path = tmp_path / "data/prepared/graph.pt"
    payload = torch.load(path, weights_only=True)
    payload["time.user"] = payload["time.user"][:2]
    torch.save(payload, path)
    with pytest.raises(ValueError, match=r"'time.user' has 2 entries for 6 user nodes"):
        io.read_graph(tmp_path / "data/prepared")


def test_builtin_typed_graph_writes_no_extras(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"dataset": {"layout": "typed", "synthetic": {
        "num_nodes": 60, "num_authors": 20, "num_venues": 3}}}))
    assert main(["prepare"]) == 0
    assert re.fullmatch(r"gnnpipe prepare: typed graph: 60 paper, 20 author, 3 venue; \d+ edges "
                        r"in 5 types, target paper \(\d+ duplicates, \d+ self-loops removed\) "
                        r"-> data/prepared", capsys.readouterr().out.strip())
    meta = json.loads((tmp_path / "data/prepared/graph.json").read_text())
    # every type has features: no featureless key (graph.json keeps its bytes)
    assert not {"node_time", "edge_time", "public_roles", "featureless"} & set(meta)
    assert not list((tmp_path / "data/prepared").glob("node_ids_*"))


def test_edge_weights_are_refused_for_typed_tables():
    with pytest.raises(ParamsError, match="dataset.edges.weight='w' is not supported with "
                                          "dataset.layout='typed'"):
        params_from_dict({"dataset": {"source": "parquet", "layout": "typed",
                                      "edges": {"weight": "w"}}})


# ------------------------------------------------------------------------------ bad input
def _fails(tmp_path: Path, capsys, **dataset_extra) -> str:
    """``gnnpipe prepare`` exits 1 with one line and writes nothing."""
    raw = {"source": "parquet", "path": "raw", "layout": "typed",
           "nodes": {"features": "f*", "timestamp": "t"}, "edges": {"timestamp": "t"}}
    raw.update(dataset_extra)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"dataset": raw}))
    before = {p for p in tmp_path.rglob("*") if p.is_file()}
    assert main(["prepare"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert {p for p in tmp_path.rglob("*") if p.is_file()} == before, "prepare wrote files"
    return err


@pytest.fixture
def raw(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return make_tables(tmp_path / "raw")


def test_unknown_id_names_file_row_column_and_id(raw, tmp_path, capsys):
    _write(raw / "edges" / "user__buys__item",
           pa.table({"src": ["u0", "u1", "u9"], "dst": [10, 20, 30], "t": [1, 2, 3]}), "parquet")
    err = _fails(tmp_path, capsys)
    assert re.search(r"raw/edges/user__buys__item.parquet: edge column 'src' has node id 'u9' "
                     r"\(row 2\) that is not in the id column 'id' of .*raw/nodes/user.parquet",
                     err), err


def test_unknown_int_id_of_the_destination_type(raw, tmp_path, capsys):
    _write(raw / "edges" / "user__buys__item",
           pa.table({"src": ["u0", "u1"], "dst": [10, 99], "t": [1, 2]}), "parquet")
    err = _fails(tmp_path, capsys)
    assert "edge column 'dst' has node id 99 (row 1)" in err and "nodes/item.parquet" in err


def test_edge_file_name_must_parse(raw, tmp_path, capsys):
    (raw / "edges" / "user__buys__item.parquet").rename(raw / "edges" / "user_buys_item.parquet")
    err = _fails(tmp_path, capsys)
    assert "user_buys_item.parquet: an edge table is named <src>__<relation>__<dst>" in err


def test_edge_file_naming_an_unknown_node_type(raw, tmp_path, capsys):
    (raw / "edges" / "user__buys__item.parquet").rename(raw / "edges" / "user__buys__thing.parquet")
    err = _fails(tmp_path, capsys)
    assert "user__buys__thing.parquet: names node type 'thing', which has no node table" in err
    assert "(node types: item, user)" in err


def test_bad_node_type_name(raw, tmp_path, capsys):
    (raw / "nodes" / "item.parquet").rename(raw / "nodes" / "Item.parquet")
    assert "Item.parquet: node type 'Item' must be lower-case" in _fails(tmp_path, capsys)


def test_features_of_different_widths_within_a_type(raw, tmp_path, capsys):
    _write(raw / "nodes" / "user", pa.table({
        "id": USERS, "x": [[1.0, 2.0]] * 3 + [[1.0]] + [[1.0, 2.0]] * 2,
        "label": [0, 1, 0, 1, 0, 1]}), "parquet")
    err = _fails(tmp_path, capsys, nodes={"features": "x"})
    assert "nodes/user.parquet: feature column 'x' has lists of different lengths (2 in row 0, " \
           "1 in row 3)" in err


def test_duplicate_ids_in_a_node_table(raw, tmp_path, capsys):
    _write(raw / "nodes" / "item", pa.table({"id": [30, 10, 30, 40]}), "parquet")
    err = _fails(tmp_path, capsys)
    assert "nodes/item.parquet: id column 'id' has repeated ids (first: 30, 1 extra rows)" in err


def test_missing_label_column_on_the_target(raw, tmp_path, capsys):
    _write(raw / "nodes" / "user", user_table().drop(["label"]), "parquet")
    err = _fails(tmp_path, capsys)
    assert "raw/nodes: no node table has the label column 'label' (dataset.nodes.label)" in err
    err = _fails(tmp_path, capsys, typed={"target": "user"})
    assert "nodes/user.parquet: missing label column 'label' (dataset.nodes.label) in the " \
           "table of the target node type 'user'" in err


def test_typed_tables_may_not_look_homogeneous(tmp_path, monkeypatch, capsys):
    """graph.json derives the layout from the types: node type 'node' with relation 'to'
    alone would read back as a homogeneous graph, so typed tables may not be exactly that."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "raw" / "nodes" / "node", user_table(), "parquet")
    src, dst = zip(*FOLLOWS)
    _write(tmp_path / "raw" / "edges" / "node__to__node",
           pa.table({"src": list(src), "dst": list(dst)}), "parquet")
    err = _fails(tmp_path, capsys)
    assert "node__to__node.parquet: node type 'node' with relation 'node__to__node' alone is " \
           "how a homogeneous graph is described" in err
    # one node type of another name stays typed: its own files, described as typed
    (tmp_path / "raw" / "nodes" / "node.parquet").rename(tmp_path / "raw" / "nodes" / "user.parquet")
    (tmp_path / "raw" / "edges" / "node__to__node.parquet").rename(
        tmp_path / "raw" / "edges" / "user__follows__user.parquet")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"dataset": {
        "source": "parquet", "path": "raw", "layout": "typed", "nodes": {"features": "f*"}}}))
    assert main(["prepare"]) == 0
    meta = json.loads((tmp_path / "data/prepared/graph.json").read_text())
    assert meta["node_types"] == [["user", 6, 2]] and meta["edge_types"] == ["user__follows__user"]
    assert (tmp_path / "data/prepared/nodes_user.parquet").exists()
    assert io.read_description(tmp_path / "data/prepared")["layout"] == "typed"


def test_two_labelled_tables_need_a_target(raw, tmp_path, capsys):
    _write(raw / "nodes" / "item", pa.table({"id": ITEMS, "label": [0, 1, 0, 1]}), "parquet")
    err = _fails(tmp_path, capsys)
    assert "node tables item, user all have the label column 'label'; set dataset.typed.target" \
        in err


def test_no_node_tables(raw, tmp_path, capsys):
    for path in (raw / "nodes").iterdir():
        path.unlink()
    assert "raw/nodes: no node tables; dataset.layout=typed needs one <type>.parquet" \
        in _fails(tmp_path, capsys)


def test_no_edge_tables(raw, tmp_path, capsys):
    for path in (raw / "edges").iterdir():
        path.unlink()
    assert "raw/edges: no edge tables" in _fails(tmp_path, capsys)


def test_unknown_link_edge_type(raw, tmp_path, capsys):
    err = _fails(tmp_path, capsys, typed={"link_edge_type": "user__likes__item"})
    assert "dataset.typed.link_edge_type='user__likes__item' is not an edge type" in err


def test_non_integer_float_timestamp(raw, tmp_path, capsys):
    _write(raw / "edges" / "user__buys__item",
           pa.table({"src": ["u0", "u1"], "dst": [10, 20], "t": [1.0, 2.5]}), "parquet")
    err = _fails(tmp_path, capsys)
    assert "user__buys__item.parquet: timestamp 2.5 (row 1) is not a whole number" in err


def test_reverse_name_clash(raw, tmp_path, capsys):
    _write(raw / "edges" / "item__rev_buys__user",
           pa.table({"src": [10], "dst": ["u0"]}), "parquet")
    err = _fails(tmp_path, capsys)
    assert "dataset.undirected=true adds its reverse item__rev_buys__user" in err


# ------------------------------------------------------------------------------ end to end
@pytest.mark.parametrize("task,follows", [("node", True), ("link", True), ("node", False)])
def test_prepare_split_train_on_typed_tables(tmp_path, monkeypatch, task, follows):
    """The stage commands on a small typed table folder (users follow users, buy items); without
    ``follows`` a user-item graph, whose target type has no relation of its own."""
    rng = np.random.default_rng(0)
    root = tmp_path / "raw"
    n_users, n_items = 60, 20
    users = [f"u{i}" for i in range(n_users)]
    label = rng.integers(0, 2, n_users)
    _write(root / "nodes" / "user", pa.table({
        "id": users, "f0": label + rng.normal(0, 0.5, n_users), "f1": rng.normal(size=n_users),
        "label": label}), "parquet")
    _write(root / "nodes" / "item", pa.table({"id": np.arange(100, 100 + n_items)}), "parquet")
    src = rng.integers(0, n_users, 240)
    _write(root / "edges" / "user__buys__item", pa.table({
        "src": [users[s] for s in src], "dst": 100 + rng.integers(0, n_items, 240)}), "parquet")
    a, b = rng.integers(0, n_users, (2, 150))
    if follows:
        _write(root / "edges" / "user__follows__user",
               pa.table({"src": [users[s] for s in a], "dst": [users[s] for s in b]}), "parquet")
    params = {"dataset": {"source": "parquet", "path": "raw", "layout": "typed", "task": task,
                          "nodes": {"features": "f*"}},
              "split": {"link": {"num_val_negatives": 5, "num_test_negatives": 5}},
              "train": {"model": "sage", "sampler": "full", "epochs": 3, "patience": 3,
                        "hidden": 8}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    for stage in ("prepare", "split", "analyze", "train", "baseline", "evaluate"):
        assert main([stage]) == 0, stage
    audit = json.loads((tmp_path / "metrics/split_audit.json").read_text())
    assert audit["passed"] and "hetero" not in audit
    if task == "link":
        assert audit["edge_type"] == "user__buys__item"
        assert audit["reverse_edge_type"] == "item__rev_buys__user"
    else:
        assert audit["target"] == "user"
        assert audit["cross_split_edges_relation"] == ("user__follows__user" if follows else None)
        evaluation = json.loads((tmp_path / "metrics/eval.json").read_text())
        assert ("smoothing" in evaluation) == follows
        assert ("smoothing_not_applicable" in evaluation) == (not follows)
    assert (tmp_path / "data/model/model.pt").exists()
    train = json.loads((tmp_path / "metrics/train.json").read_text())
    assert train["model"] == "sage"


def test_analyze_without_a_target_relation_says_homophily_is_not_applicable(tmp_path,
                                                                             monkeypatch):
    make_tables(tmp_path / "raw", follows=False)
    params = {"dataset": {"source": "parquet", "path": "raw", "layout": "typed", "task": "link",
                          "nodes": {"features": "f*"}},
              "split": {"link": {"val": 1, "test": 1, "num_val_negatives": 2,
                                 "num_test_negatives": 2}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    for stage in ("prepare", "split", "analyze"):
        assert main([stage]) == 0, stage
    report = json.loads((tmp_path / "metrics/graph.json").read_text())
    assert report["homophily"]["applicable"] is False
    assert "no edge type joins 'user' nodes to 'user' nodes" in report["homophily"]["reason"]
    assert report["analyzed_relation"] is None
    assert report["degree"]["max"] == 2  # u0 buys two distinct items
    assert report["components"]["over"] == "every node type"
    assert set(report["types"]["node_types"]) == {"user", "item"}


def test_cluster_split_needs_a_target_relation(tmp_path, monkeypatch, capsys):
    make_tables(tmp_path / "raw", follows=False)
    params = {"dataset": {"source": "parquet", "path": "raw", "layout": "typed",
                          "nodes": {"features": "f*"}},
              "split": {"node": {"strategy": "cluster", "train": 2, "val": 2, "test": 2}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    assert main(["prepare"]) == 0
    assert main(["split"]) != 0
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "split.node.strategy=cluster" in err and "no user -> user edge type" in err
    assert not (tmp_path / "data/split").exists()


@pytest.mark.parametrize("layout", ["typed", "homogeneous"])
def test_the_default_path_absent_names_what_belongs_there(tmp_path, monkeypatch, layout):
    monkeypatch.chdir(tmp_path)  # no data/raw here
    cfg = params_from_dict({"dataset": {"source": "parquet", "layout": layout}}).dataset
    expected = (r"dataset.layout=typed reads nodes/<type>.parquet and edges/<src>__<rel>__<dst>"
                r".parquet from a folder" if layout == "typed" else
                r"dataset.source=parquet reads the node and edge tables .* from a folder")
    with pytest.raises(ValueError, match=r"^dataset.path='data/raw' is not a folder; " + expected):
        block_prepare(cfg, tmp_path / "out")
