"""baseline.models: auto: the MLP, and gbdt beside it while the train rows x feature columns stay
within baseline.auto_gbdt_cells; the baseline stage keeps the best on val in the run's metric,
records every candidate's value and says which were fitted."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
import torch
import yaml

from gnnpipe.cli import main
from gnnpipe.config import params_from_dict
from gnnpipe.data.graph import ROLE_CODES
from gnnpipe.training.baseline_fit import BlockGraph, node_models

TRAIN, VAL, UNUSED = ROLE_CODES["train"], ROLE_CODES["val"], ROLE_CODES["unused"]


def _params(models="auto", cells=20_000_000):
    return params_from_dict({"baseline": {"models": models, "auto_gbdt_cells": cells}})


def test_auto_fits_gbdt_up_to_the_budget_and_not_above():
    """7 labelled train rows (an unlabelled train node and other roles do not count) x 5
    columns = 35 cells."""
    x = torch.zeros(12, 5)
    y = torch.tensor([0, 1, 0, 1, 0, 1, 0, -1, 1, 0, 1, 0])
    roles = np.array([TRAIN] * 8 + [VAL, VAL, UNUSED, UNUSED], dtype=np.int8)  # node 7: y -1
    graph = BlockGraph(y, 2, "node", "homogeneous")
    assert node_models(_params(cells=35), x, graph, roles) == ("mlp", "gbdt")
    assert node_models(_params(cells=34), x, graph, roles) == ("mlp",)
    assert node_models(_params(cells=0), x, graph, roles) == ("mlp",)
    # a list is taken as given, whatever the budget
    assert node_models(_params(["gbdt"], cells=0), x, graph, roles) == ("gbdt",)
    assert node_models(_params(["mlp", "gbdt"], cells=0), x, graph, roles) == ("mlp", "gbdt")


# a binary graph with about 20% positives: evaluate.metric auto is ROC-AUC
TINY = {"dataset": {"synthetic": {"num_nodes": 600, "num_features": 8, "num_classes": 2,
                                  "class_imbalance": 2.0, "feature_signal": 0.7}},
        "baseline": {"epochs": 15, "patience": 5, "hidden": 8,
                     "gbdt": {"num_leaves": 8, "max_rounds": 40, "early_stopping_rounds": 5}}}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """prepare and split of the tiny graph, once for every baseline run below."""
    root = tmp_path_factory.mktemp("auto")
    (root / "params.yaml").write_text(yaml.safe_dump(TINY))
    with contextlib.chdir(root):
        for stage in ("prepare", "split"):
            assert main([stage]) == 0, stage
    return root


def _baseline(root, capsys, **baseline) -> tuple[dict, str]:
    params = {**TINY, "baseline": {**TINY["baseline"], **baseline}}
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    capsys.readouterr()
    with contextlib.chdir(root):
        assert main(["baseline"]) == 0
    return json.loads((root / "metrics/baseline.json").read_text()), capsys.readouterr().out


def test_the_stage_keeps_the_best_candidate_on_val_roc_auc(prepared, capsys):
    metrics, line = _baseline(prepared, capsys, models="auto", auto_gbdt_cells=10**9)
    candidates = metrics["candidates"]
    assert set(candidates) == {"mlp", "gbdt"} and metrics["metric"] == "roc_auc"
    best = max(candidates.values())
    assert metrics["model"] == next(name for name in ("mlp", "gbdt") if candidates[name] == best)
    assert metrics["best_val"] == best and "best_val_acc" in metrics
    assert "fitted mlp, gbdt; baseline.models auto" in line
    assert f"best val ROC-AUC {best:.4f}" in line
    history = (prepared / "metrics/baseline_history.csv").read_text().splitlines()[0]
    assert "val_roc_auc" in history.split(",")


def test_above_the_budget_the_stage_fits_the_mlp_alone(prepared, capsys):
    metrics, line = _baseline(prepared, capsys, models="auto", auto_gbdt_cells=100)
    assert metrics["model"] == "mlp" and "candidates" not in metrics
    assert metrics["metric"] == "roc_auc"
    assert "(fitted mlp; baseline.models auto)" in line


def test_a_list_is_fitted_as_given(prepared, capsys):
    metrics, line = _baseline(prepared, capsys, models=["gbdt"], auto_gbdt_cells=0)
    assert metrics["model"] == "gbdt" and "candidates" not in metrics
    assert "(fitted gbdt)" in line
