"""The depth sweep: the experiments a selection names, read from `dvc exp show --json` output,
and the one-line refusals of a selection that mixes experiments; `gnnpipe report --sweep`."""

from __future__ import annotations

import json

import pytest

from gnnpipe.cli import main
from gnnpipe.reporting.sweep import render_sweep, sweep_rows


def _exp_entry(rev, name, depth, acc, cos, timestamp="2025-01-01T00:00:00",
               metric="test_accuracy", **train):
    """One rev entry in the shape `dvc exp show --json` (DVC 3) writes."""
    return {"rev": rev, "name": name, "error": None,
            "data": {"rev": rev, "timestamp": timestamp,
                     "params": {"params.yaml": {"data": {"train": {
                         "num_layers": depth, "model": "gcn",
                         "neighbor": {"num_neighbors": [10] * depth}, **train}}}},
                     "metrics": {"metrics/summary.json": {"data": {
                         "metric": metric, "gnn": acc, "baseline": 0.5,
                         "cosine": cos, "dirichlet": 1.0, "rayleigh": 0.3}}}}}


def _exp_show(*extra) -> list:
    """A workspace, a commit and its experiments: the depth sweep depth-1..3 and others."""
    experiments = [{"name": f"depth-{d}", "executor": None,
                    "revs": [_exp_entry(f"sha{d}", f"depth-{d}", d, 0.9 - d / 20, d / 10)]}
                   for d in (3, 1, 2)]
    # unrelated experiments of the same repository, newer than the sweep
    experiments.append({"name": "try-sage", "revs": [_exp_entry(
        "shas", "try-sage", 2, 0.77, 0.25, "2025-02-01T00:00:00", model="sage")]})
    experiments += [{"name": e["name"], "revs": [e]} for e in extra]
    workspace = _exp_entry("workspace", None, 2, 0.11, 0.9)
    commit = _exp_entry("abc123", "main", 2, 0.22, 0.9) | {"experiments": experiments}
    failed = {"rev": "bad", "name": "broken", "data": {"params": {}, "metrics": {}}}
    return [workspace, commit, failed]


def test_sweep_rows_are_the_selected_experiments_only():
    rows = sweep_rows(_exp_show(), ["depth-*"])
    assert [r["num_layers"] for r in rows] == [1, 2, 3]
    assert [r["name"] for r in rows] == ["depth-1", "depth-2", "depth-3"]  # not try-sage, main
    assert rows[1]["gnn_test_accuracy"] == 0.8 and rows[1]["cosine_similarity"] == 0.2
    assert sweep_rows(_exp_show(), ["depth-1", "depth-3"]) == [rows[0], rows[2]]
    png = render_sweep(rows)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000


def test_a_sweep_judged_on_another_metric_plots_that_metric():
    """A binary task's headline is test ROC-AUC: the sweep's columns and plot are of it, and
    experiments judged on different metrics are not one sweep."""
    exps = [{"name": f"auc-{d}", "revs": [_exp_entry(f"a{d}", f"auc-{d}", d, 0.8 + d / 100,
                                                     d / 10, metric="test_roc_auc")]}
            for d in (1, 2)]
    show = _exp_show(*[e["revs"][0] for e in exps])
    rows = sweep_rows(show, ["auc-*"])
    assert [r["gnn_test_roc_auc"] for r in rows] == pytest.approx([0.81, 0.82])
    assert [r["mlp_test_roc_auc"] for r in rows] == [0.5, 0.5]
    assert not any("accuracy" in key for key in rows[0])
    png = render_sweep(rows)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png != render_sweep(
        sweep_rows(_exp_show(), ["depth-1", "depth-2"]))
    with pytest.raises(ValueError, match=r"^experiments 'auc-1' and 'depth-3' are judged on "
                                         r"different metrics \(test_roc_auc vs test_accuracy\)"):
        sweep_rows(show, ["auc-1", "depth-3"])


@pytest.mark.parametrize("patterns, extra, message", [
    (["depth-*", "nope-*"], (), r"^--experiments 'nope-\*' matches no experiment of the sweep "
                                r"file; it holds: workspace, main, depth-3, depth-1, depth-2, "
                                r"try-sage, broken$"),
    (["depth-*", "try-sage"], (), r"^experiments 'depth-2' and 'try-sage' both have "
                                  r"train.num_layers=2; select one of them$"),
    (["depth-*"], [_exp_entry("sha4", "depth-4", 4, 0.5, 0.5, lr=0.1)],
     r"^experiments 'depth-3' and 'depth-4' differ in train.lr \(None vs 0.1\), not only in "
     r"train.num_layers: select the experiments of one sweep$"),
    (["depth-*", "broken"], (), r"^experiment 'broken' has no num_layers .*did it fail, or is "
                                r"it a link-task run\?"),
], ids=["unmatched", "same depth", "other params", "no metrics"])
def test_sweep_selection_is_refused_in_one_line_when_it_mixes_experiments(patterns, extra,
                                                                          message):
    with pytest.raises(ValueError, match=message):
        sweep_rows(_exp_show(*extra), patterns)


def test_report_cli_sweep_names_the_missing_file_and_refuses_a_bad_selection(tmp_path, capsys):
    assert main(["report", "--sweep", str(tmp_path / "exps.json"), "--experiments", "d*"]) == 1
    assert "exps.json: file not found" in capsys.readouterr().err
    exps = tmp_path / "exps.json"
    exps.write_text(json.dumps(_exp_show()))
    sweep = ["report", "--sweep", str(exps), "--sweep-out", str(tmp_path / "sweep")]
    assert main(sweep) == 1
    assert capsys.readouterr().err.strip() == (
        f"gnnpipe report: error: --sweep {exps} needs --experiments NAME [NAME ...]: the sweep's "
        "experiment names or globs, e.g. --experiments 'depth-*'")
    assert main(sweep + ["--experiments", "x*"]) == 1
    assert "--experiments 'x*' matches no experiment" in capsys.readouterr().err
    assert not (tmp_path / "sweep").exists()
    assert main(["report", "--experiments", "d*"]) == 1
    assert "--experiments selects the experiments of --sweep" in capsys.readouterr().err
    assert main(sweep + ["--experiments", "depth-*"]) == 0
    csv = (tmp_path / "sweep/depth_sweep.csv").read_text().splitlines()
    assert [line.split(",")[:2] for line in csv[1:]] == [["1", "depth-1"], ["2", "depth-2"],
                                                         ["3", "depth-3"]]
