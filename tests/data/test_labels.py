"""Labels as read from the inputs: missing cells make unlabelled nodes (-1), values are
remapped to dense codes kept in classes.parquet, and bad label columns fail in one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml

from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.sources.base import label_codes


def _codes(values, unlabeled=(), max_classes=None, type=None):
    return label_codes(pa.array(values, type=type), "nodes.csv", "label", unlabeled, max_classes)


def test_every_missing_marker_makes_a_node_unlabelled():
    codes, classes = _codes(["b", "", "  ", "nan", "NA", "n/a", "None", "NULL", None, "a", "b"])
    assert codes.tolist() == [1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1]
    assert classes.to_pylist() == ["a", "b"]
    codes, _ = _codes([1.0, float("nan"), None, 2.0])
    assert codes.tolist() == [0, -1, -1, 1]
    codes, classes = _codes([-1, 3, 7, -1, 3], unlabeled=(-1,))
    assert codes.tolist() == [-1, 0, 1, -1, 0] and classes.to_pylist() == [3, 7]
    codes, _ = _codes(["x", "unknown", "y"], unlabeled=("unknown",))
    assert codes.tolist() == [0, -1, 1]


def test_integer_labels_are_remapped_not_trusted():
    codes, classes = _codes([300, 100, 200, 100])
    assert codes.tolist() == [2, 0, 1, 0] and classes.to_pylist() == [100, 200, 300]
    values = np.zeros(200_000, dtype=np.int64)
    values[::2] = 10_000_000
    values[1] = 999_999_999_999
    started = time.perf_counter()
    codes, classes = _codes(values)  # no bincount over raw values: fast, small
    assert time.perf_counter() - started < 2.0
    assert classes.to_pylist() == [0, 10_000_000, 999_999_999_999] and codes.max() == 2


@pytest.mark.parametrize("values, unlabeled, message", [
    ([None, "", "NA"], (), "has no labelled rows \\(all 3 are missing"),
    (["a", "NA", "N/A", "a"], (), "holds a single class 'a' among its 2 labelled rows \\(2 more "
                                  "look unlabelled"),
    ([0, -1, 1], (), "negative class -1 \\(row 1\\); if it means 'unlabelled', list it in "
                     "dataset.nodes.unlabeled_values"),
    ([0, 1, 2], ("x",), "dataset.nodes.unlabeled_values holds 'x', but label column 'label'"),
    ([0.5, 1.0], (), "non-integer class 0.5 \\(row 0\\)"),
])
def test_bad_label_columns_fail_in_one_line(values, unlabeled, message):
    with pytest.raises(ValueError, match=message) as err:
        _codes(values, unlabeled)
    assert "\n" not in str(err.value)


def test_more_classes_than_max_classes_is_refused():
    with pytest.raises(ValueError, match="has 50 distinct classes, more than "
                                         "dataset.max_classes=20"):
        _codes(list(range(50)), max_classes=20)


def _table_repo(tmp_path: Path, labels: list, extra: dict | None = None) -> Path:
    rng = np.random.default_rng(0)
    n = len(labels)
    raw = tmp_path / "raw"
    raw.mkdir()
    x = rng.standard_normal((n, 4)).round(3)
    lines = ["id,f0,f1,f2,f3,label"] + [
        f"n{i},{','.join(map(str, x[i]))},{'' if labels[i] is None else labels[i]}"
        for i in range(n)]
    (raw / "nodes.csv").write_text("\n".join(lines) + "\n")
    src = rng.integers(0, n, 4 * n)
    dst = rng.integers(0, n, 4 * n)
    (raw / "edges.csv").write_text("src,dst\n" + "".join(f"n{s},n{d}\n" for s, d in zip(src, dst)))
    params = {"dataset": {"source": "csv", "path": str(raw),
                          "nodes": {"features": "f*", **(extra or {})}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    return tmp_path


def test_a_csv_with_two_thirds_blank_labels_prepares_the_labelled_third(tmp_path, monkeypatch):
    labels = [("cat", "dog", "eel")[(i // 3) % 3] if i % 3 == 0 else None for i in range(300)]
    monkeypatch.chdir(_table_repo(tmp_path, labels))
    assert main(["prepare"]) == 0
    report = json.loads(Path("metrics/prepare.json").read_text())
    assert report["labelled_nodes"] == 100 and report["label_coverage"] == {
        "labelled": 100, "unlabelled": 200, "labelled_fraction": round(100 / 300, 6)}
    assert report["classes"] == 3 and report["class_names"] == ["cat", "dog", "eel"]
    assert io.read_classes(Path("data/prepared")).to_pylist() == ["cat", "dog", "eel"]
    y = io.read_graph(Path("data/prepared")).target_view().y
    assert int((y == -1).sum()) == 200 and set(y[y >= 0].tolist()) == {0, 1, 2}


def test_integer_csv_labels_keep_their_values_in_classes_parquet(tmp_path, monkeypatch):
    labels = [(-1, 100, 300)[i % 3] for i in range(90)]
    monkeypatch.chdir(_table_repo(tmp_path, labels, {"unlabeled_values": [-1]}))
    assert main(["prepare"]) == 0
    assert io.read_classes(Path("data/prepared")).to_pylist() == [100, 300]
    assert json.loads(Path("metrics/prepare.json").read_text())["labelled_nodes"] == 60


def test_synthetic_label_rate_keeps_that_share_of_each_class(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("params.yaml").write_text(yaml.safe_dump({"dataset": {"synthetic": {
        "num_nodes": 2000, "num_features": 8, "num_classes": 4, "label_rate": 0.05}}}))
    assert main(["prepare"]) == 0
    y = io.read_graph(Path("data/prepared")).target_view().y
    full = tmp_path / "full"
    full.mkdir()
    monkeypatch.chdir(full)
    Path("params.yaml").write_text(yaml.safe_dump({"dataset": {"synthetic": {
        "num_nodes": 2000, "num_features": 8, "num_classes": 4}}}))
    assert main(["prepare"]) == 0
    y_full = io.read_graph(Path("data/prepared")).target_view().y
    kept = y >= 0
    assert (y[kept] == y_full[kept]).all()  # the same graph, labels only hidden
    for c in range(4):  # round(5% of each class), at least one
        assert int((y == c).sum()) == max(1, round(0.05 * int((y_full == c).sum())))
    assert json.loads(Path("metrics/prepare.json").read_text())["label_coverage"]["labelled_fraction"] == 1.0
