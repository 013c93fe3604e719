"""The headline file (metrics/summary.json) and the 120-column experiments view."""

import os
import re
import subprocess
import sys
from pathlib import Path

from gnnpipe import experiments
from gnnpipe.config.schema import EvaluateParams
from gnnpipe.reporting.evaluate import compare
from gnnpipe.reporting.link_evaluate import compare_links
from gnnpipe.reporting.summary import headline
from gnnpipe.reporting.verdict import Gap

REPO = Path(__file__).resolve().parents[2]


def _node_scores(acc: float) -> dict:
    return {role: {"accuracy": acc, "macro_f1": acc - 0.01} for role in ("val", "test")}


def _gap(gain: float, low: float, high: float) -> Gap:
    return Gap(n=1000, gain=gain, low=low, high=high, samples=100)


def test_node_headline_is_the_test_accuracy_gap_and_the_three_way_verdict():
    cfg = EvaluateParams(min_gain=0.01)
    summary = compare(_node_scores(0.8), _node_scores(0.75), "sage", cfg,
                      _gap(0.05, 0.03, 0.07), False)
    summary["smoothing"] = {"gnn": {"cosine_similarity": 0.1, "dirichlet_energy": 2.0,
                                    "rayleigh_quotient": 0.4},
                            "mlp": {"cosine_similarity": 9.0, "dirichlet_energy": 9.0,
                                    "rayleigh_quotient": 9.0}}
    assert headline(summary, "node") == {
        "metric": "test_accuracy", "gnn": 0.8, "baseline": 0.75, "gain": 0.05,
        "verdict": "helps", "cosine": 0.1, "dirichlet": 2.0, "rayleigh": 0.4}
    worse = compare(_node_scores(0.7), _node_scores(0.75), "sage", cfg,
                    _gap(-0.05, -0.07, -0.03), False)
    assert headline(worse, "node")["verdict"] == "hurts"
    same = compare(_node_scores(0.76), _node_scores(0.75), "sage", cfg, _gap(0.01, -0.01, 0.03),
                   False)
    assert headline(same, "node")["verdict"] == "inconclusive"


def test_node_headline_names_and_reports_the_metric_the_verdict_is_judged_on():
    cfg = EvaluateParams(min_gain=0.01)
    scores = lambda auc: {r: {"accuracy": 0.8, "macro_f1": 0.44, "roc_auc": auc,  # noqa: E731
                              "average_precision": auc / 2} for r in ("val", "test")}
    summary = compare(scores(0.85), scores(0.75), "sage", cfg, _gap(0.1, 0.07, 0.13), False,
                      metric="roc_auc")
    assert summary["metric"] == "roc_auc" and "test ROC-AUC" in summary["verdict"]
    assert headline(summary, "node") == {"metric": "test_roc_auc", "gnn": 0.85,
                                         "baseline": 0.75, "gain": 0.1, "verdict": "helps"}
    # an eval.json written before evaluate.metric: accuracy, as it was
    del summary["metric"]
    assert headline(summary, "node")["metric"] == "test_accuracy"


def test_link_headline_is_judged_on_test_mrr_like_the_verdict():
    cfg = EvaluateParams(min_gain=0.01)
    scores = lambda mrr, auc: {p: {"mrr": mrr, "auc": auc} for p in ("val", "test")}  # noqa: E731
    summary = compare_links(scores(0.3, 0.9), scores(0.5, 0.8), "sage", cfg,
                            _gap(-0.2, -0.25, -0.15), None)
    line = headline(summary, "link")
    assert line == {"metric": "test_mrr", "gnn": 0.3, "baseline": 0.5, "gain": -0.2,
                    "verdict": "hurts"}
    assert summary["graph_helps"] is False  # the same judgement as eval.json's


def test_keep_pattern_keeps_exactly_the_headline_and_model_columns():
    keep = re.compile(experiments.keep_pattern())
    for column in ("Experiment", "metric", "gnn", "baseline", "gain", "verdict", "train.model",
                   "train.lr", "metrics/summary.json:gnn", "metrics/summary.json:metric"):
        assert keep.match(column), column
    for column in ("Created", "train.model_x", "train.lr_decay", "metrics", "cosine",
                   "train.sampler", "metrics/eval.json:verdict", "gnnpipe/cli.py",
                   "evaluate.min_gain", "evaluate.metric"):
        assert not keep.match(column), column


def test_experiments_view_of_this_repository_fits_120_columns():
    """`dvc exp show` on the committed metrics and params.yaml, as `make exp` runs it: every
    line fits 120 columns with room for an experiment's name, and no cell is cut to '…'; the
    metric the scores are of is a column, and its longest name would fit too."""
    env = {**os.environ, "COLUMNS": "120",
           "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    out = subprocess.run([sys.executable, "-m", "gnnpipe.experiments", "--no-pager"], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = next(line for line in lines if "Experiment" in line).split()
    assert header == ["Experiment", "baseline", "gain", "gnn", "metric", "verdict",
                      "train.model", "train.lr"]
    assert "…" not in out.stdout
    # a named experiment row (" ├── 1a2b3c4 [name-of-exp]") is about 14 characters wider, and
    # test_average_precision 9 wider than test_accuracy
    longest = len("test_average_precision") - len("test_accuracy")
    assert max(len(line) for line in lines) <= 120 - 14 - longest


def test_metrics_show_is_one_line_within_120_columns():
    """The headline is the one DVC metrics file: `dvc metrics show` (the last lines of
    `make repro`) is its header and one row."""
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    out = subprocess.run(["dvc", "metrics", "show"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[1].split()[0] == "metrics/summary.json"
    assert max(len(line) for line in lines) <= 120
