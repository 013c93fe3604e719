"""Issue 18 acceptance: partially labelled graphs from users' own tables, end to end through
``gnnpipe.cli.main``. Missing label cells (blank, whitespace, NA, nan) make unlabelled nodes
that are in no split, carry messages, and are predicted with the user's ids and label names;
``dataset.nodes.unlabeled_values`` drops an integer "unknown" code; a 5%-labelled synthetic
profile still lets the GNN beat the MLP."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from gnnpipe import io
from gnnpipe.pipeline import STAGES
from gnnpipe.config import params_from_dict
from gnnpipe.runtime.profiles import _merge, set_args

REPO = Path(__file__).resolve().parents[2]
CLASSES = ["fraud", "ok", "unknown-ish"]  # sorted: classes.parquet keeps name order
BLANKS = ["", "   ", "NA", "nan"]  # every kind of missing cell, mixed
TRAIN = {"epochs": 40, "patience": 20, "hidden": 32}


def _run(folder: Path, stages, params: dict) -> None:
    """Each stage as ``gnnpipe <stage>`` in ``folder`` with ``params`` as its params.yaml."""
    from gnnpipe.cli import main

    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        for stage in stages:
            assert main([stage]) == 0, stage
    finally:
        os.chdir(cwd)


def _sbm(n: int, num_classes: int, rng: np.random.Generator, degree: int = 6,
         homophily: float = 0.85) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Classes ``y`` (n,) and ``degree * n`` directed edges ``src, dst`` (E,), a share
    ``homophily`` of them inside a class (the graph is what lets a GNN beat an MLP)."""
    y = rng.integers(0, num_classes, n)
    src = np.repeat(np.arange(n), degree)
    members = [np.flatnonzero(y == c) for c in range(num_classes)]
    same = rng.random(src.size) < homophily
    dst = rng.integers(0, n, src.size)  # the other edges go anywhere
    for c in range(num_classes):  # same-class edges: a random member of the source's class
        pick = same & (y[src] == c)
        dst[pick] = members[c][rng.integers(0, members[c].size, int(pick.sum()))]
    return y, src, dst


def _features(y: np.ndarray, num_features: int, rng: np.random.Generator,
              signal: float = 0.6) -> np.ndarray:
    """(n, F) noise plus a class-mean shift on the first columns: weak alone, clear with the
    neighbours averaged in."""
    x = rng.standard_normal((y.size, num_features))
    x[np.arange(y.size), y % num_features] += signal
    return x.round(4)


def _label_cells(y: np.ndarray, labelled: np.ndarray, names: list[str],
                 rng: np.random.Generator) -> list[str]:
    """The CSV label cell of each node: its class name, or one of BLANKS when unlabelled."""
    blanks = np.asarray(BLANKS)[rng.integers(0, len(BLANKS), y.size)]
    return np.where(labelled, np.asarray(names)[y], blanks).tolist()


def _write_csv(path: Path, columns: dict[str, list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = zip(*columns.values())
    path.write_text(",".join(columns) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))


# ------------------------------------------------------------------- one node table, one edge table
N = 900


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory):
    """A CSV graph with string ids and class names, two thirds of its label cells blank, run
    through every stage."""
    folder = tmp_path_factory.mktemp("partial")
    rng = np.random.default_rng(18)
    y, src, dst = _sbm(N, len(CLASSES), rng)
    x = _features(y, 8, rng)
    ids = np.array([f"acct-{k:05d}" for k in rng.permutation(10 * N)[:N]])  # not in row order
    labelled = np.zeros(N, dtype=bool)
    labelled[rng.permutation(N)[:N // 3]] = True
    cells = _label_cells(y, labelled, CLASSES, rng)
    _write_csv(folder / "raw/nodes.csv", {"id": ids.tolist(),
                                          **{f"f{j}": x[:, j].tolist() for j in range(8)},
                                          "label": cells})
    _write_csv(folder / "raw/edges.csv", {"src": ids[src].tolist(), "dst": ids[dst].tolist()})
    params = {"dataset": {"source": "csv", "path": "raw", "nodes": {"features": "f*"}},
              "train": TRAIN, "baseline": TRAIN, "partition": {"num_parts": 4}}
    _run(folder, STAGES, params)
    return folder, ids, y, labelled, cells


def _predictions(folder: Path) -> list[dict]:
    return io.read_node_predictions(folder / "data/predict").to_pylist()


def test_prepare_counts_the_blank_cells_as_unlabelled_and_keeps_the_label_names(csv_run):
    folder, ids, y, labelled, cells = csv_run
    prepared = json.loads((folder / "metrics/prepare.json").read_text())
    assert prepared["label_coverage"] == {
        "labelled": int(labelled.sum()), "unlabelled": int(N - labelled.sum()),
        "labelled_fraction": round(labelled.mean(), 6)}
    assert prepared["class_names"] == CLASSES and prepared["nodes"] == N


def test_splits_train_on_the_labelled_third_only(csv_run):
    folder, ids, y, labelled, cells = csv_run
    audit = json.loads((folder / "metrics/split_audit.json").read_text())
    assert audit["passed"] and sum(audit["sizes"].values()) == labelled.sum()
    is_labelled = dict(zip(ids.tolist(), labelled.tolist()))
    roles = {row["original_id"]: row["role"] for row in _predictions(folder)}
    assert all((roles[i] != "unused") == is_labelled[i] for i in ids.tolist())
    per_role = audit["label_coverage"]["per_role"]
    assert per_role["unused"] == {"labelled": 0, "unlabelled": int(N - labelled.sum())}


def test_every_node_is_predicted_with_the_users_id_and_label_names(csv_run):
    folder, ids, y, labelled, cells = csv_run
    rows = _predictions(folder)
    assert sorted(r["original_id"] for r in rows) == sorted(ids.tolist())  # every id, as text
    truth = {i: (CLASSES[c] if known else None)
             for i, c, known in zip(ids.tolist(), y.tolist(), labelled.tolist())}
    for row in rows:
        assert row["label"] == truth[row["original_id"]]
        assert row["predicted"] == row["top_labels"][0] and sorted(row["top_labels"]) == CLASSES
        probs = row["top_probs"]
        assert probs == sorted(probs, reverse=True) and abs(sum(probs) - 1) < 1e-4
    unlabelled = [r for r in rows if r["label"] is None]
    assert len(unlabelled) == N - labelled.sum()
    # the unlabelled majority is predicted well too: the point of semi-supervised training
    hits = [r["predicted"] == CLASSES[y[list(ids).index(r["original_id"])]] for r in unlabelled]
    assert np.mean(hits) > 0.75


def test_evaluate_scores_the_labelled_test_nodes_the_predictions_hold(csv_run):
    folder, ids, y, labelled, cells = csv_run
    scores = json.loads((folder / "metrics/eval.json").read_text())
    test = [r for r in _predictions(folder) if r["role"] == "test"]
    assert all(r["label"] is not None for r in test)
    accuracy = np.mean([r["predicted"] == r["label"] for r in test])
    assert scores["gnn"]["test"]["accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert scores["graph_helps"] and scores["gnn"]["test"]["accuracy"] > 0.8


def test_report_shows_the_label_coverage(csv_run):
    folder, ids, y, labelled, cells = csv_run
    html = (folder / "reports/report.html").read_text()
    assert "abel coverage" in html
    assert f"{int(N - labelled.sum())}" in html and f"{labelled.mean():.1%}" in html


# ---------------------------------------------------------------- integer codes with an "unknown"
def test_an_unknown_code_listed_in_unlabeled_values_is_no_class(tmp_path):
    """Sparse integer labels 100 / 200 / 300 with -1 for "unknown": three classes, the -1 rows
    unlabelled, predictions in the user's values."""
    rng = np.random.default_rng(5)
    n = 400
    y, src, dst = _sbm(n, 3, rng)
    values = np.array([100, 200, 300])
    known = rng.random(n) < 0.5
    label = np.where(known, values[y], -1)
    x = _features(y, 6, rng)
    _write_csv(tmp_path / "raw/nodes.csv", {"id": list(range(n)), "label": label.tolist(),
                                            **{f"f{j}": x[:, j].tolist() for j in range(6)}})
    _write_csv(tmp_path / "raw/edges.csv", {"src": src.tolist(), "dst": dst.tolist()})
    params = {"dataset": {"source": "csv", "path": "raw",
                          "nodes": {"features": "f*", "unlabeled_values": [-1]}},
              "train": {**TRAIN, "epochs": 10}}
    _run(tmp_path, ["prepare", "split", "train", "predict"], params)
    prepared = json.loads((tmp_path / "metrics/prepare.json").read_text())
    assert prepared["classes"] == 3
    assert prepared["label_coverage"]["unlabelled"] == int((~known).sum())
    rows = sorted(_predictions(tmp_path), key=lambda r: int(r["original_id"]))
    assert [r["label"] for r in rows] == [int(v) if k else None for v, k in zip(label, known)]
    assert {r["predicted"] for r in rows} <= {100, 200, 300}


# ------------------------------------------------------------------ the 5%-labelled profile
def test_the_five_percent_profile_still_lets_the_gnn_beat_the_mlp(tmp_path):
    """profiles/partially_labelled.yaml merged onto params.yaml; only the graph is smaller here
    (8000 nodes: 400 labelled, 80 test nodes) so the test runs in seconds. The full-size run:
    README."""
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    profile = yaml.safe_load((REPO / "profiles/partially_labelled.yaml").read_text())
    params = _merge(_merge(base, profile), {"dataset": {"synthetic": {"num_nodes": 8000}},
                                            "train": {"epochs": 60}, "baseline": {"epochs": 60}})
    assert set_args(REPO / "profiles/partially_labelled.yaml", REPO / "params.yaml") == [
        "-S", "dataset.synthetic.label_rate=0.05"]
    assert params_from_dict(params).dataset.synthetic.label_rate == 0.05
    _run(tmp_path, ["prepare", "split", "baseline", "train", "evaluate"], params)
    audit = json.loads((tmp_path / "metrics/split_audit.json").read_text())
    assert sum(audit["sizes"].values()) == audit["label_coverage"]["labelled"] == 400
    scores = json.loads((tmp_path / "metrics/eval.json").read_text())
    assert scores["graph_helps"]
    assert scores["gnn"]["test"]["accuracy"] > scores["mlp"]["test"]["accuracy"] + 0.1
