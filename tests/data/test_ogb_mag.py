"""dataset.source: ogb with dataset.layout: typed: an ogbn-mag-style raw folder read offline
(gnnpipe/sources/ogb_mag.py), its public split honoured by the typed split."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from gnnpipe.cli import main
from gnnpipe.config import params_from_dict
from gnnpipe.data.graph import ROLES
from gnnpipe.data.edges import edge_pairs
from graph_oracle import prepare_dataset
from gnnpipe.runtime.rng import make_rng
from split_oracle import split_nodes

COUNTS = {"author": 5, "field_of_study": 3, "institution": 2, "paper": 8}
RELATIONS = {
    ("author", "affiliated_with", "institution"): [(0, 0), (1, 1), (2, 0), (3, 1), (4, 0)],
    ("author", "writes", "paper"): [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (0, 5), (1, 6),
                                    (2, 7)],
    ("paper", "cites", "paper"): [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (6, 7), (7, 0)],
    ("paper", "has_topic", "field_of_study"): [(p, p % 3) for p in range(8)],
}
SPLIT = {"train": [0, 1, 2, 3], "valid": [4, 5], "test": [6, 7]}


def _gz(path: Path, rows: list) -> None:
    """Headerless CSV, gzip-compressed, as the ogb package writes its raw files."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(",".join(str(v) for v in row) + "\n" for row in rows)
    path.write_bytes(gzip.compress(text.encode()))


def make_mag(root: Path) -> Path:
    raw = root / "raw"
    raw.mkdir(parents=True)
    (raw / "num-node-dict.csv.gz").write_bytes(gzip.compress(
        (",".join(COUNTS) + "\n" + ",".join(str(n) for n in COUNTS.values()) + "\n").encode()))
    for (s, r, d), edges in RELATIONS.items():
        _gz(raw / "relations" / f"{s}___{r}___{d}" / "edge.csv.gz", edges)
        _gz(raw / "relations" / f"{s}___{r}___{d}" / "num-edge-list.csv.gz", [[len(edges)]])
    # paper features: column 0 is the paper id, so a wrong row order shows
    _gz(raw / "node-feat" / "paper" / "node-feat.csv.gz",
        [[float(p), 0.5, -1.0] for p in range(8)])
    _gz(raw / "node-feat" / "paper" / "node_year.csv.gz", [[2010 + p] for p in range(8)])
    _gz(raw / "node-label" / "paper" / "node-label.csv.gz", [[p % 3] for p in range(8)])
    for name, ids in SPLIT.items():
        _gz(root / "split" / "time" / "paper" / f"{name}.csv.gz", [[i] for i in ids])
    return root


def dataset(path: Path, **extra):
    return params_from_dict({"dataset": {"source": "ogb", "path": str(path), "layout": "typed",
                                         **extra}}).dataset


@pytest.fixture
def mag(tmp_path) -> Path:
    return make_mag(tmp_path / "ogbn_mag")


def test_reads_every_type_and_relation_of_three_underscore_folders(mag):
    graph = prepare_dataset(dataset(mag), 0).graph
    assert graph.node_types == ("author", "field_of_study", "institution", "paper")
    assert graph.num_nodes_dict == COUNTS
    assert graph.target == "paper" and graph.num_classes == 3
    assert graph.x["paper"][:, 0].tolist() == list(range(8))
    writes = ("author", "writes", "paper")
    assert set(zip(*map(np.ndarray.tolist, edge_pairs(graph.csr[writes])))) == \
        set(RELATIONS[writes])
    assert graph.reverse[writes] == ("paper", "rev_writes", "author")
    assert graph.reverse[("paper", "cites", "paper")] == ("paper", "cites", "paper")
    assert graph.csr[("paper", "cites", "paper")].num_edges == 2 * 7  # both directions
    assert graph.link_edge_type == writes  # first relation touching paper


def test_featureless_types_and_node_years(mag):
    graph = prepare_dataset(dataset(mag), 0).graph
    # author: nothing points into it but rev_affiliated_with and rev_writes (undirected)
    assert graph.x["author"].shape == (5, 2)
    assert graph.x["field_of_study"].shape == (3, 1)  # rev of has_topic points into paper
    assert graph.node_time["paper"].tolist() == [2010 + p for p in range(8)]
    assert set(graph.node_time) == {"paper"}


def test_public_split_is_carried_and_honoured(mag, tmp_path):
    graph = prepare_dataset(dataset(mag), 0).graph
    roles = np.asarray(ROLES)[graph.public_roles.numpy()]
    assert roles.tolist() == ["train"] * 4 + ["val"] * 2 + ["test"] * 2
    cfg = params_from_dict({"split": {"node": {"strategy": "public"}}}).split.node
    split = split_nodes(graph, cfg, make_rng(0, "split"))
    assert split.roles.tolist() == roles.tolist()


def test_public_split_through_prepare_and_split(mag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({
        "dataset": {"source": "ogb", "path": str(mag.parent), "name": "ogbn-mag",
                    "layout": "typed"},
        "split": {"node": {"strategy": "public"}}}))
    assert main(["prepare"]) == 0 and main(["split"]) == 0
    report = json.loads((tmp_path / "metrics/prepare.json").read_text())
    assert report["public_split"] == {"train": 4, "val": 2, "test": 2, "unused": 0}
    audit = json.loads((tmp_path / "metrics/split_audit.json").read_text())
    assert audit["passed"] and audit["sizes"]["val"] == 2


def _fails(tmp_path: Path, mag: Path, capsys) -> str:
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"dataset": {
        "source": "ogb", "path": str(mag), "layout": "typed"}}))
    before = {p for p in tmp_path.rglob("*") if p.is_file()}
    assert main(["prepare"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert {p for p in tmp_path.rglob("*") if p.is_file()} == before
    return err


def test_edge_id_outside_its_type(mag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _gz(mag / "raw/relations/author___writes___paper/edge.csv.gz", [(0, 0), (1, 8)])
    err = _fails(tmp_path, mag, capsys)
    assert "author___writes___paper/edge.csv.gz: edge column 'f1' (dst) has node id 8 (row 1) " \
           "outside [0, 8)" in err


def test_relation_folder_name_must_parse(mag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (mag / "raw/relations/paper___cites___paper").rename(mag / "raw/relations/paper__cites__paper")
    err = _fails(tmp_path, mag, capsys)
    assert "paper__cites__paper: a relation folder is named <src>___<relation>___<dst>" in err


def test_relation_naming_an_unknown_node_type(mag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _gz(mag / "raw/relations/paper___in___venue/edge.csv.gz", [(0, 0)])
    assert "names node type 'venue', which" in _fails(tmp_path, mag, capsys)


def test_feature_rows_must_match_the_count(mag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _gz(mag / "raw/node-feat/paper/node-feat.csv.gz", [[1.0, 2.0]] * 7)
    err = _fails(tmp_path, mag, capsys)
    assert "node-feat.csv.gz: 7 rows but" in err and "says 8 paper nodes" in err


def test_multi_task_labels_are_refused_as_homogeneous_ogb_refuses_them(mag, tmp_path,
                                                                         monkeypatch, capsys):
    """One label reader (``sources.ogb.labels``) serves both layouts: the same one line."""
    monkeypatch.chdir(tmp_path)
    _gz(mag / "raw/node-label/paper/node-label.csv.gz", [[p % 3, 1, 0] for p in range(8)])
    err = _fails(tmp_path, mag, capsys)
    assert ("node-label.csv.gz: 3 label columns (a multi-task dataset such as ogbn-proteins); "
            "node classification needs one") in err


def test_missing_counts_file(mag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (mag / "raw/num-node-dict.csv.gz").unlink()
    assert "num-node-dict.csv.gz: file not found" in _fails(tmp_path, mag, capsys)


def test_sparse_class_ids_are_remapped_and_kept_in_classes_parquet(mag, tmp_path, monkeypatch):
    """Class ids 10/20/70 make three dense codes; classes.parquet gives the ids back."""
    monkeypatch.chdir(tmp_path)
    _gz(mag / "raw" / "node-label" / "paper" / "node-label.csv.gz",
        [[(10, 20, 70)[p % 3]] for p in range(8)])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"dataset": {
        "source": "ogb", "path": str(mag), "layout": "typed"}}))
    assert main(["prepare"]) == 0
    from gnnpipe import io
    assert io.read_classes(tmp_path / "data/prepared").to_pylist() == [10, 20, 70]
    assert json.loads((tmp_path / "metrics/prepare.json").read_text())["classes"] == 3
