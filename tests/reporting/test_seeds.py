"""evaluate.seeds: the GNN and the chosen baseline retrained under derived seeds; each run equals
the train / baseline stage run separately with that seed, and the spreads are those runs'."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
import yaml

from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.commands.seeds import derived_seeds
from gnnpipe.reporting.evaluate import correct_on_test
from gnnpipe.reporting.verdict import Gap, over_seeds, seed_run, seeds_sentence, spread

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = {"dataset": {"synthetic": {"num_nodes": 300, "num_features": 8, "num_classes": 3,
                                  "avg_degree": 6.0}},
        "train": {"epochs": 6, "patience": 6, "hidden": 8},
        "baseline": {"epochs": 6, "patience": 6, "hidden": 8, "models": ["mlp", "gbdt"],
                     "gbdt": {"max_rounds": 5}}}


def test_derived_seeds_start_with_the_pipeline_seed_and_keep_their_prefix():
    assert derived_seeds(7, 1) == [7]
    five = derived_seeds(7, 5)
    assert five[0] == 7 and len(set(five)) == 5
    assert derived_seeds(7, 3) == five[:3]
    assert derived_seeds(8, 3)[1:] != five[1:3]


def test_over_seeds_counts_outcomes_and_spreads_with_sample_std():
    gap = lambda gain: Gap(n=4, gain=gain, low=gain - 0.1, high=gain + 0.1, samples=100)
    runs = [seed_run(s, np.array([1.0, 1, 1, 0]), np.array(b), gap(g), o)
            for s, b, g, o in ((0, [1.0, 0, 0, 0], 0.5, "helps"), (1, [1.0, 1, 0, 0], 0.25, "helps"),
                               (2, [1.0, 1, 1, 0], 0.0, "inconclusive"))]
    seeds = over_seeds(runs)
    assert seeds["count"] == 3 and seeds["outcomes"] == {"helps": 2, "hurts": 0,
                                                          "inconclusive": 1}
    assert seeds["gnn"] == {"mean": 0.75, "std": 0.0, "min": 0.75, "max": 0.75}
    assert seeds["gain"]["std"] == pytest.approx(np.std([0.5, 0.25, 0.0], ddof=1), abs=1e-6)
    assert seeds["baseline"]["min"] == 0.25 and seeds["baseline"]["max"] == 0.75
    assert seeds_sentence(seeds, "accuracy", "sage", "the MLP") == (
        "over 3 training seeds: helps in 2 of 3, inconclusive in 1 of 3; test accuracy of sage "
        "minus the MLP: mean +0.2500 (std 0.2500, +0.0000 to +0.5000)")
    # a run's scores may be the judged metric's values themselves (ROC-AUC is no mean)
    assert seed_run(5, 0.91, 0.8, gap(0.11), "helps")["gnn"] == 0.91
    assert spread([0.3]) == {"mean": 0.3, "std": 0.0, "min": 0.3, "max": 0.3}


def _test_accuracy(folder, model_dir) -> np.ndarray:
    graph = io.read_graph(folder / "data" / "prepared")
    roles = io.read_typed_role_codes(folder / "data" / "split")
    return correct_on_test(*io.read_predictions(model_dir), graph.y.numpy(), roles)


def test_three_seeds_equal_separately_trained_runs(tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({**TINY, "evaluate": {"seeds": 3}}))
    with contextlib.chdir(tmp_path):
        for stage in ("prepare", "split", "baseline", "train", "evaluate"):
            assert main([stage]) == 0, stage
    ev = json.loads((tmp_path / "metrics" / "eval.json").read_text())
    seeds = ev["seeds"]
    chosen = json.loads((tmp_path / "metrics" / "baseline.json").read_text())["model"]
    runs = seeds["runs"]
    assert [r["seed"] for r in runs] == derived_seeds(0, 3)
    # the first run is the pipeline's own models: the headline's figures
    assert runs[0]["gnn"] == ev["gnn"]["test"]["accuracy"]
    assert runs[0]["baseline"] == ev["mlp"]["test"]["accuracy"]
    assert runs[0]["gain"] == ev["gap"]["gain"] and runs[0]["outcome"] == ev["outcome"]

    # each other run: train and baseline run by hand with that seed, on the same split
    for run in runs[1:]:
        folder = tmp_path / f"seed{run['seed']}"
        params = folder / "params.yaml"
        folder.mkdir()
        params.write_text(yaml.safe_dump({**TINY, "seed": run["seed"],
                                          "baseline": {**TINY["baseline"], "models": [chosen]}}))
        with contextlib.chdir(tmp_path):
            assert main(["train", "--params", str(params), "--out", str(folder / "model"),
                         *_elsewhere(folder, "train")]) == 0
            assert main(["baseline", "--params", str(params), "--out", str(folder / "base"),
                         *_elsewhere(folder, "baseline")]) == 0
        gnn = _test_accuracy(tmp_path, folder / "model")
        base = _test_accuracy(tmp_path, folder / "base")
        assert run["gnn"] == pytest.approx(gnn.mean(), abs=1e-6)
        assert run["baseline"] == pytest.approx(base.mean(), abs=1e-6)
        assert run["gain"] == pytest.approx(gnn.mean() - base.mean(), abs=1e-6)

    for key in ("gnn", "baseline", "gain"):
        values = [r[key] for r in runs]
        assert seeds[key]["mean"] == pytest.approx(np.mean(values), abs=1e-6)
        assert seeds[key]["std"] == pytest.approx(np.std(values, ddof=1), abs=1e-6)
        assert (seeds[key]["min"], seeds[key]["max"]) == (min(values), max(values))
    assert sum(seeds["outcomes"].values()) == 3
    assert "over 3 training seeds: " in ev["verdict"]


def _elsewhere(folder, stage: str) -> list[str]:
    """The metrics, perf and history options of ``stage`` pointed into ``folder``, so a run by
    hand leaves the pipeline's files alone."""
    options = {"train": ("--metrics", "--perf", "--history", "--perf-history", "--checkpoint"),
               "baseline": ("--metrics", "--perf", "--history")}[stage]
    return [arg for option in options
            for arg in (option, str(folder / f"{option.strip('-')}.out"))]


def test_seeds_of_a_binary_task_are_judged_on_roc_auc(tmp_path):
    """Two classes: evaluate.metric auto is ROC-AUC, and so is every seed's run and the
    seeds sentence."""
    binary = {**TINY, "dataset": {"synthetic": {**TINY["dataset"]["synthetic"], "num_classes": 2}},
              "baseline": {**TINY["baseline"], "models": ["mlp"]}, "evaluate": {"seeds": 2}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(binary))
    with contextlib.chdir(tmp_path):
        for stage in ("prepare", "split", "baseline", "train", "evaluate"):
            assert main([stage]) == 0, stage
    ev = json.loads((tmp_path / "metrics" / "eval.json").read_text())
    first, second = ev["seeds"]["runs"]
    assert ev["metric"] == "roc_auc"
    assert first["gnn"] == ev["gnn"]["test"]["roc_auc"]
    assert first["baseline"] == ev["mlp"]["test"]["roc_auc"]
    assert first["gain"] == ev["gap"]["gain"]
    assert 0.0 <= second["gnn"] <= 1.0 and second["gain"] == pytest.approx(
        second["gnn"] - second["baseline"], abs=2e-6)
    assert "test ROC-AUC of sage minus the MLP: mean " in ev["verdict"]
