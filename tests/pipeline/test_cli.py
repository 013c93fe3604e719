"""The CLI: help that explains, one-line errors, and every stage runnable without DVC."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gnnpipe.cli import build_parser, main
from gnnpipe.pipeline import STAGES

SMALL = {
    "dataset": {"synthetic": {"num_nodes": 1200, "num_features": 16, "num_classes": 3}},
    "train": {"epochs": 40, "patience": 20, "hidden": 32},
    "baseline": {"epochs": 40, "patience": 20, "hidden": 32},
    "partition": {"num_parts": 4},
}


def write_params(folder: Path, overrides: dict) -> Path:
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(overrides))
    return path


def test_top_level_help_lists_every_stage():
    out = subprocess.run([sys.executable, "-m", "gnnpipe", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for stage in STAGES:
        assert f"    {stage}" in out
    assert "params.yaml" in out


@pytest.mark.parametrize("stage", list(STAGES))
def test_stage_help_shows_params_and_paths(stage, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([stage, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--params" in out and "(default:" in out
    # every path option says what it is and its default (argparse drops a default without help)
    flat = " ".join(out.split())
    for artifact in (a for a in STAGES[stage].paths if a.option is not None):
        assert f"(default: {artifact.path})" in flat, (stage, artifact.option)


def test_path_options_default_to_the_stage_table():
    """gnnpipe/pipeline.py is the one place a stage's paths are written: the CLI and dvc.yaml
    read them from there."""
    for stage, table in STAGES.items():
        args = vars(build_parser((stage,)).parse_args([stage]))
        for artifact in (a for a in table.paths if a.option is not None):
            assert args[artifact.option[2:].replace("-", "_")] == Path(artifact.path), stage


def test_bad_params_give_one_line_error_and_no_output(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_params(tmp_path, {"train": {"model": "gatt"}})
    assert main(["prepare"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "train.model='gatt'" in err and "sage" in err
    assert not (tmp_path / "data").exists()


def test_missing_upstream_artifact_names_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_params(tmp_path, SMALL)
    assert main(["split"]) == 1
    assert "data/prepared/graph.json: file not found" in capsys.readouterr().err


def test_all_stages_run_in_order_without_dvc(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_params(tmp_path, SMALL)
    for stage in STAGES:
        assert main([stage]) == 0, stage
    evaluation = json.loads((tmp_path / "metrics/eval.json").read_text())
    assert evaluation["gnn"]["test"]["accuracy"] > evaluation["mlp"]["test"]["accuracy"]
    assert evaluation["graph_helps"] is True
    # the verdict's interval over every test node, the reach bins partition them too
    tests = json.loads((tmp_path / "metrics/split_audit.json").read_text())["sizes"]["test"]
    low, high = evaluation["gap"]["interval"]
    assert evaluation["gap"]["test_items"] == tests and 0 < low <= evaluation["gap"]["gain"] <= high
    bins = evaluation["reach"]["bins"]
    assert sum(b["count"] for b in bins) == tests and [b["bin"] for b in bins][-1] == ">2"
    assert json.loads((tmp_path / "metrics/summary.json").read_text())["verdict"] == "helps"
    curvature = json.loads((tmp_path / "metrics/graph.json").read_text())["curvature"]
    assert curvature["measure"] == "balanced_forman" and curvature["sample"]["edges"] > 0
    assert len(curvature["most_negative"]) == 10
    audit = json.loads((tmp_path / "metrics/split_audit.json").read_text())
    assert audit["passed"] is True
    history = (tmp_path / "metrics/train_history.csv").read_text().splitlines()
    assert history[0] == "epoch,train_loss,train_acc,val_acc" and len(history) > 2
    leftovers = [p.name for p in (tmp_path / "data").iterdir() if p.name.startswith(".")]
    assert leftovers == []  # atomic writes cleaned up their temp folders


def test_split_stage_fails_on_an_injected_leak(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_params(tmp_path, {**SMALL, "split": {"node": {"mode": "inductive"}}})
    assert main(["prepare"]) == 0
    import gnnpipe.splitting.split

    def leaky(code, labelled, keys=None, cuts=None):  # inductive phases see every node
        return {phase: labelled | ~labelled for phase in ("train", "val")}

    monkeypatch.setattr(gnnpipe.splitting.split, "phase_sees", leaky)
    assert main(["split"]) == 1
    assert "split audit failed" in capsys.readouterr().err
    report = json.loads((tmp_path / "metrics/split_audit.json").read_text())
    assert report["passed"] is False
    assert not (tmp_path / "data/split").exists()  # nothing for the next stage to read


def test_the_baseline_is_the_best_structure_free_model_on_val(tmp_path, monkeypatch):
    """baseline.models [mlp, gbdt]: both fitted, the better on val written and named by
    evaluate's verdict."""
    monkeypatch.chdir(tmp_path)
    write_params(tmp_path, {**SMALL, "baseline": {**SMALL["baseline"], "models": ["mlp", "gbdt"],
                                                  "gbdt": {"max_rounds": 30}}})
    for stage in ("prepare", "split", "analyze", "baseline", "train", "evaluate"):
        assert main([stage]) == 0, stage
    base = json.loads((tmp_path / "metrics/baseline.json").read_text())
    scores = base["candidates"]
    assert set(scores) == {"mlp", "gbdt"} and base["model"] == max(scores, key=scores.get)
    assert base["best_val_acc"] == scores[base["model"]]
    evaluation = json.loads((tmp_path / "metrics/eval.json").read_text())
    assert evaluation["baseline_model"] == base["model"]
    named = {"mlp": "MLP", "gbdt": "gradient-boosted trees (gbdt)"}[base["model"]]
    assert named in evaluation["verdict"]
