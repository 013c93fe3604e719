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
import pyarrow as pa
import pytest
import yaml

from gnnpipe import io
from gnnpipe.commands import STAGES
from gnnpipe.config import params_from_dict
from gnnpipe.profiles import _merge, set_args

REPO = Path(__file__).resolve().parents[1]
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


def test_explore(csv_run):
    folder, ids, y, labelled, cells = csv_run
    for f in ("prepare", "split_audit", "eval", "predict"):
        print(f, (folder / f"metrics/{f}.json").read_text()[:3000])
    t = io.read_node_predictions(folder / "data/predict")
    print(t.schema, t.slice(0, 5).to_pylist())
    print(folder)
