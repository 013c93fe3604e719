"""The headline of a run: the few figures a user compares across experiments.

``metrics/summary.json`` is the pipeline's one DVC metrics file, so `dvc metrics show` is one
short line and `dvc exp show` (through ``gnnpipe.experiments``) fits a terminal; every other
figure stays in the stages' own files under metrics/.
"""

from __future__ import annotations

# the test metric each task's verdict is judged on where eval.json names none: a link run's
# MRR, and accuracy for a node eval.json written before evaluate.metric (a node run names the
# metric evaluate.metric resolved to: ``judged_on``)
JUDGED_ON = {"node": "accuracy", "link": "mrr"}

# short names of the GNN's over-smoothing figures (eval.json smoothing.gnn) in the headline
SMOOTHING = {"cosine": "cosine_similarity", "dirichlet": "dirichlet_energy",
             "rayleigh": "rayleigh_quotient"}


def judged_on(summary: dict, task: str | None = None) -> str:
    """The metric ``summary`` (an eval.json dict) is judged on: its ``metric`` (node task:
    accuracy, macro_f1, roc_auc or average_precision), else ``JUDGED_ON`` of its task
    (``task``, or the file's own ``task``; node when it names none)."""
    return summary.get("metric") or JUDGED_ON[task or summary.get("task", "node")]


def headline(summary: dict, task: str) -> dict:
    """``summary`` (evaluate's eval.json dict of one task) -> ``{"metric", "gnn", "baseline",
    "gain", "verdict"}``: the test scores of the GNN and the baseline on the metric the
    verdict is judged on (``metric``: ``test_<name>``, e.g. ``test_roc_auc``), their
    difference, and the outcome (``helps`` / ``hurts`` / ``inconclusive``: the gap's interval
    and ``evaluate.min_gain`` decide it); plus the GNN's over-smoothing figures where evaluate
    measured them (``cosine``, ``dirichlet``, ``rayleigh``: a depth sweep reads them from
    `dvc exp show --json`)."""
    metric = judged_on(summary, task)
    gain = summary["gnn_minus_mlp"][f"test_{metric}"]
    smoothing = summary.get("smoothing", {}).get("gnn", {})
    return {"metric": f"test_{metric}", "gnn": summary["gnn"]["test"][metric],
            "baseline": summary["mlp"]["test"][metric], "gain": gain,
            "verdict": summary["outcome"],
            **{short: smoothing[name] for short, name in SMOOTHING.items() if name in smoothing}}
