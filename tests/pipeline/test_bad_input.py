"""Bad input gets one line naming the file, column or key, a non-zero exit, and no outputs.

Source-level cases (user tables with bad ids, NaN features, missing labels, ...) run through
``gnnpipe prepare`` in tests/data/test_sources.py; here the same contract is checked for params and
for every stage reading a damaged upstream artifact.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml

from gnnpipe.cli import main
from gnnpipe.preflight import main as preflight
from test_ogb_mag import make_mag
from test_preflight import params_with_path

SMALL = {"dataset": {"synthetic": {"num_nodes": 600, "num_features": 8, "num_classes": 3}},
         "train": {"epochs": 5}, "baseline": {"epochs": 5}, "partition": {"num_parts": 2}}


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


def _fails(stage: str, folder: Path, capsys) -> str:
    """Run ``stage``; assert exit 1, a single stderr line, and that no file was written."""
    before = _files(folder)
    assert main([stage]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert _files(folder) == before, "a failing stage wrote files"
    return err


@pytest.fixture
def prepared(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(SMALL))
    assert main(["prepare"]) == 0 and main(["split"]) == 0
    return tmp_path


@pytest.mark.parametrize("params, message", [
    ({"train": {"lrr": 0.1}}, r"unknown key train.lrr; allowed keys in train: .*lr"),
    ({"dataset": {"synthetic": {"homophily": 2}}}, r"dataset.synthetic.homophily=2.0 is out of range; expected <= 1.0"),
    ({"train": {"sampler": "magic"}}, r"train.sampler='magic' is not valid; expected one of"),
    ({"seed": "zero"}, r"seed='zero' is not valid; expected int"),
    ({"split": {"node": {"train": 0.9, "val": 0.1, "test": 0.1, "strategy": "random"}}},
     r"exceeds the graph"),
])
def test_bad_params(tmp_path, monkeypatch, capsys, params, message):
    monkeypatch.chdir(tmp_path)
    merged = {**SMALL, **params}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(merged))
    stage = "split" if "split" in params else "prepare"
    if stage == "split":
        assert main(["prepare"]) == 0
        capsys.readouterr()
    assert re.search(message, _fails(stage, tmp_path, capsys))


def test_params_file_that_is_not_yaml(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("train: [unclosed\n")
    assert "params.yaml is not valid YAML" in _fails("prepare", tmp_path, capsys)


def test_params_path_that_is_a_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    assert main(["prepare", "--params", "conf"]) == 1
    assert capsys.readouterr().err.strip() == ("gnnpipe prepare: error: params: conf is a "
                                               "directory; expected a file (--params)")


def test_truncated_torch_artifact(prepared, capsys):
    graph = prepared / "data/prepared/graph.pt"
    graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])
    err = _fails("split", prepared, capsys)
    assert "data/prepared/graph.pt: not a readable gnnpipe torch artifact" in err


def test_torch_artifact_holding_an_arbitrary_object_is_never_unpickled(prepared, capsys):
    marker = prepared / "unpickled"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    torch.save(Evil(), prepared / "data/prepared/graph.pt")
    err = _fails("split", prepared, capsys)
    assert "data/prepared/graph.pt" in err and not marker.exists()


def test_artifact_of_another_kind(prepared, capsys):
    split_graph = prepared / "data/split/message_train.pt"
    (prepared / "data/prepared/graph.pt").write_bytes(split_graph.read_bytes())
    err = _fails("split", prepared, capsys)
    assert "expected a 'gnnpipe.graph/2' artifact, found 'gnnpipe.message_graph/1'" in err


def test_damaged_partition_shard(prepared, capsys):
    # a shard rank reads its part_<k>/ arrays: a damaged one is named, file by file
    params = {**SMALL, "train": {"epochs": 2, "sampler": "cluster",
                                 "dist": {"shard": "partition"}}}
    (prepared / "params.yaml").write_text(yaml.safe_dump(params))
    assert main(["partition"]) == 0
    capsys.readouterr()
    (prepared / "data/partition/part_0/indices.npy").write_bytes(b"junk")
    err = _fails("train", prepared, capsys)
    assert "data/partition/part_0/indices.npy: not a readable .npy array" in err


def test_edge_index_out_of_range_in_a_message_graph(prepared, capsys):
    path = prepared / "data/split/message_train.pt"
    payload = torch.load(path, weights_only=True)
    payload["node__to__node.indices"][0] = 10**6
    with open(path, "wb") as handle:
        torch.save(payload, handle)
    err = _fails("partition", prepared, capsys)
    assert ("data/split/message_train.pt (node__to__node): indices hold node ids outside "
            "[0, 600)") in err


def test_corrupt_parquet(prepared, capsys):
    (prepared / "data/split/nodes_node.parquet").write_bytes(b"PAR1 not really")
    err = _fails("baseline", prepared, capsys)
    assert "data/split/nodes_node.parquet: not a readable Parquet file" in err


def test_parquet_with_unknown_split_role(prepared, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = prepared / "data/split/nodes_node.parquet"
    table = pq.read_table(path)
    roles = table.column("split").to_pylist()
    roles[0] = "holdout"
    table = table.set_column(1, "split", pa.array(roles))
    pq.write_table(table, path)
    err = _fails("baseline", prepared, capsys)
    assert "column 'split' has unknown roles ['holdout']" in err


def test_labels_out_of_range(prepared, capsys):
    path = prepared / "data/prepared/graph.pt"
    payload = torch.load(path, weights_only=True)
    payload["y"][3] = 7
    with open(path, "wb") as handle:
        torch.save(payload, handle)
    assert "labels outside [0, 3)" in _fails("split", prepared, capsys)


def test_missing_upstream_artifact(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(SMALL))
    # the variant is read from the split first (gnnpipe/commands/variant.py)
    err = _fails("train", tmp_path, capsys)
    assert "data/split/meta.json: file not found; run the stage that produces it first" in err
    err = _fails("split", tmp_path, capsys)  # the kind: from the prepared graph's description
    assert "data/prepared/graph.json: file not found; run the stage that produces it first" in err


@pytest.mark.parametrize("node_split, message", [
    ({"train": 0.6, "val": 0.0001, "test": 0.2}, "split.node.val resolves to 0 nodes"),
    ({"train": 400, "per_class": True}, r"split.node.train=400 per class, but class \d has only"),
])
def test_split_that_cannot_be_made(prepared, capsys, node_split, message):
    (prepared / "params.yaml").write_text(yaml.safe_dump({**SMALL, "split": {"node": node_split}}))
    assert re.search(message, _fails("split", prepared, capsys))


def _prepare_fails_with(tmp_path, monkeypatch, capsys, dataset: dict) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"dataset": dataset}))
    return _fails("prepare", tmp_path, capsys)


def test_empty_graph(tmp_path, monkeypatch, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = tmp_path / "raw"
    raw.mkdir()
    pq.write_table(pa.table({"id": pa.array([], pa.int64()), "label": pa.array([], pa.int64()),
                             "f0": pa.array([], pa.float32())}), raw / "nodes.parquet")
    pq.write_table(pa.table({"src": pa.array([], pa.int64()), "dst": pa.array([], pa.int64())}),
                   raw / "edges.parquet")
    err = _prepare_fails_with(tmp_path, monkeypatch, capsys, {
        "source": "parquet", "path": str(raw), "nodes": {"features": "f*"}})
    assert "no nodes" in err


def test_features_and_labels_of_different_lengths(tmp_path, monkeypatch, capsys):
    from torch_geometric.data import Data

    data = Data(x=torch.randn(10, 4), y=torch.zeros(9, dtype=torch.long),
                edge_index=torch.tensor([[0, 1], [1, 2]]))
    torch.save(data, tmp_path / "graph.pt")
    err = _prepare_fails_with(tmp_path, monkeypatch, capsys, {
        "source": "pyg", "path": str(tmp_path / "graph.pt")})
    assert "graph.pt" in err and "9" in err and "10" in err


def test_wrong_dtype_in_a_user_table(tmp_path, monkeypatch, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = tmp_path / "raw"
    raw.mkdir()
    pq.write_table(pa.table({"id": [0, 1, 2], "label": [0, 1, 0], "f0": ["a", "b", "c"]}),
                   raw / "nodes.parquet")
    pq.write_table(pa.table({"src": [0, 1], "dst": [1, 2]}), raw / "edges.parquet")
    err = _prepare_fails_with(tmp_path, monkeypatch, capsys, {
        "source": "parquet", "path": str(raw), "nodes": {"features": "f*"}})
    assert "nodes.parquet: feature column 'f0' is string" in err


# ------------------------------------------------------------------ silent acceptances, named
def _csv_tables(folder: Path, edges: str = "src,dst\n0,1\n1,2\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nodes.csv").write_text("id,label,f0\n0,a,0.5\n1,b,1.5\n2,a,2.5\n")
    (folder / "edges.csv").write_text(edges)
    return folder


def test_a_header_only_edge_file_is_a_warning_line_kept_in_prepare_json(tmp_path, monkeypatch,
                                                                       capsys):
    """A graph without edges is legal (the MLP case) but almost always a mistake: prepare runs,
    prints one warning line naming the file, and prepare.json keeps it."""
    _csv_tables(tmp_path / "raw", edges="src,dst\n")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"dataset": {
        "source": "csv", "path": "raw", "nodes": {"features": "f0"}}}))
    assert main(["prepare"]) == 0
    err = capsys.readouterr().err.strip()
    assert err == ("gnnpipe prepare: warning: raw/edges.csv: no edge rows (a header only?); the "
                   "graph has no edges here, so a GNN sees only node features")
    report = yaml.safe_load((tmp_path / "metrics/prepare.json").read_text())
    assert report["edges"] == 0 and report["warnings"] == [err.split("warning: ", 1)[1]]
    _csv_tables(tmp_path / "raw")  # with edges: no warning, no key
    assert main(["prepare"]) == 0
    assert capsys.readouterr().err == ""
    assert "warnings" not in yaml.safe_load((tmp_path / "metrics/prepare.json").read_text())


def test_a_header_only_relation_of_typed_tables_is_a_warning_line(tmp_path, monkeypatch, capsys):
    raw = tmp_path / "raw"
    (raw / "nodes").mkdir(parents=True)
    (raw / "edges").mkdir()
    (raw / "nodes/user.csv").write_text("id,label,f0\n" + "".join(
        f"u{i},{'ab'[i % 2]},{i}\n" for i in range(12)))
    (raw / "nodes/item.csv").write_text("id\n10\n20\n")
    (raw / "edges/user__buys__item.csv").write_text("src,dst\n")
    (raw / "edges/user__follows__user.csv").write_text("src,dst\nu0,u1\nu1,u2\n")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"dataset": {
        "source": "csv", "layout": "typed", "path": "raw", "nodes": {"features": "f0"}}}))
    assert main(["prepare"]) == 0
    err = capsys.readouterr().err.strip()
    assert err == ("gnnpipe prepare: warning: raw/edges/user__buys__item.csv: no edge rows (a "
                   "header only?); the graph has no edges here, so a GNN sees only node features")
    assert yaml.safe_load((tmp_path / "metrics/prepare.json").read_text())["warnings"] == [
        err.split("warning: ", 1)[1]]


@pytest.mark.parametrize("dataset, folder, message", [
    ({"source": "csv", "path": "raw", "nodes": {"features": "f0"}}, "raw/nodes.csv",
     r"^gnnpipe prepare: error: raw/nodes\.csv is a directory; expected a file "
     r"\(dataset\.nodes\.file; dataset\.source=csv reads the node and edge tables from "
     r"dataset\.path='raw'\)$"),
    ({"source": "csv", "path": "raw", "nodes": {"features": "f0"}}, "raw/edges.csv",
     r"^gnnpipe prepare: error: raw/edges\.csv is a directory; expected a file "
     r"\(dataset\.edges\.file; "),
    ({"source": "pyg", "path": "raw/graph.pt"}, "raw/graph.pt",
     r"^gnnpipe prepare: error: dataset\.path='raw/graph\.pt' is a directory; expected a file "
     r"\(dataset\.source=pyg reads one file"),
    ({"source": "csv", "layout": "typed", "path": "raw"}, "raw/nodes/user.csv",
     r"^gnnpipe prepare: error: raw/nodes/user\.csv is a directory; expected a file \(a table "
     r"of nodes/ with dataset\.source=csv\)$"),
], ids=["nodes.csv", "edges.csv", "pyg", "typed"])
def test_a_directory_where_a_file_belongs_is_named_as_such(tmp_path, monkeypatch, capsys,
                                                           dataset, folder, message):
    _csv_tables(tmp_path / "raw")
    target = tmp_path / folder
    if target.exists():
        target.unlink()
    target.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"dataset": dataset}))
    before = _files(tmp_path)
    assert main(["prepare"]) == 1
    err = capsys.readouterr().err.strip()
    assert re.search(message, err), err
    assert _files(tmp_path) == before


def test_csv_source_in_the_default_folder_names_the_missing_table(tmp_path, monkeypatch, capsys):
    """dataset.path: data/raw is the default and the place for the user's files: a missing
    nodes.csv is named, not reported as an unset dataset.path."""
    (tmp_path / "data/raw").mkdir(parents=True)
    err = _prepare_fails_with(tmp_path, monkeypatch, capsys, {"source": "csv", "path": "data/raw"})
    assert err == ("gnnpipe prepare: error: data/raw/nodes.csv: file not found (dataset.nodes"
                   ".file; dataset.source=csv reads the node and edge tables from "
                   "dataset.path='data/raw')")


def test_a_typed_ogb_folder_read_as_homogeneous_says_to_set_the_layout(tmp_path, monkeypatch,
                                                                        capsys):
    mag = make_mag(tmp_path / "ogbn_mag")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"dataset": {
        "source": "ogb", "path": str(mag)}}))
    assert main(["prepare"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith(
        "a typed OGB dataset (raw/node-feat/<type>/, like ogbn-mag); set dataset.layout: typed")


def test_a_missing_dataset_path_is_one_line_naming_the_key(tmp_path, capsys):
    params = params_with_path(tmp_path, "nowhere")
    assert preflight(["--params", str(params)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err == (f"gnnpipe preflight: error: {params}: dataset.path 'nowhere' does not "
                   "exist; set dataset.path to your input folder or file (a DVC dependency of "
                   "the prepare stage)")
