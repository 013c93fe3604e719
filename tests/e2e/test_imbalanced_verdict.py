"""Issue 49 acceptance: an imbalanced binary graph is judged on ROC-AUC, end to end through
``gnnpipe.cli.main``. About 20% positives, features that barely carry the label and a graph that
does: accuracy sits near the base rate for the structure-free baseline, so a verdict on accuracy
could not rank the models, while ROC-AUC shows what the graph adds."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import run_stages

STAGES = ("prepare", "split", "analyze", "train", "baseline", "evaluate")


def _params(**evaluate) -> dict:
    return {
        "seed": 0, "threads": 1,
        "dataset": {"synthetic": {"num_nodes": 3000, "num_classes": 2, "num_features": 8,
                                  "avg_degree": 12.0, "homophily": 0.9,
                                  "feature_signal": 0.25, "class_imbalance": 2.0}},
        "train": {"epochs": 60, "patience": 30, "hidden": 32},
        "baseline": {"epochs": 60, "patience": 30, "hidden": 32, "models": ["mlp"]},
        "evaluate": {"bootstrap": 200, **evaluate},
    }


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> dict:
    """eval.json, summary.json and baseline.json of the default metric (auto)."""
    folder = tmp_path_factory.mktemp("imbalanced")
    (folder / "data" / "raw").mkdir(parents=True)
    (folder / "params.yaml").write_text(yaml.safe_dump(_params()))
    run_stages(folder, STAGES)
    return {name: json.loads((folder / "metrics" / f"{name}.json").read_text())
            for name in ("eval", "summary", "baseline", "train", "graph")}


def test_two_classes_are_judged_on_roc_auc_and_the_verdict_names_it(judged):
    ev, summary = judged["eval"], judged["summary"]
    positives = 1.0 - judged["graph"]["labels"]["majority_fraction"]
    assert 0.12 < positives < 0.3  # the graph is the imbalanced one the test means
    assert ev["metric"] == "roc_auc" and summary["metric"] == "test_roc_auc"
    assert judged["train"]["metric"] == judged["baseline"]["metric"] == "roc_auc"
    assert summary["gnn"] == ev["gnn"]["test"]["roc_auc"]
    assert ev["outcome"] == "helps" and "ROC-AUC" in ev["verdict"]
    assert ev["verdict"].startswith("sage beats") and "by +" in ev["verdict"]
    # accuracy could not have said it: the baseline sits at the base rate
    assert abs(ev["mlp"]["test"]["accuracy"] - judged["graph"]["labels"]["majority_fraction"]) < 0.05
    assert ev["gnn"]["test"]["roc_auc"] - ev["mlp"]["test"]["roc_auc"] > 0.1
