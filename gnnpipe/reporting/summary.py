"""The headline of a run: the few figures a user compares across experiments.

``metrics/summary.json`` is the pipeline's one DVC metrics file, so `dvc metrics show` is one
short line and `dvc exp show` (through ``gnnpipe.experiments``) fits a terminal; every other
figure stays in the stages' own files under metrics/.
"""

from __future__ import annotations

from gnnpipe.config.schema import EvaluateParams
from gnnpipe.reporting.evaluate import outcome

# the test metric each task's verdict is judged on (evaluate's compare / compare_links)
JUDGED_ON = {"node": "accuracy", "link": "mrr"}


def headline(summary: dict, task: str, cfg: EvaluateParams) -> dict:
    """``summary`` (evaluate's eval.json dict of one task) -> ``{"task", "metric", "gnn",
    "baseline", "gain", "verdict"}``: the test scores of the GNN and the MLP baseline on the
    metric the verdict is judged on, their difference, and ``helps`` / ``hurts`` / ``nothing``."""
    metric = JUDGED_ON[task]
    gain = summary["gnn_minus_mlp"][f"test_{metric}"]
    return {"task": task, "metric": f"test_{metric}",
            "gnn": summary["gnn"]["test"][metric], "baseline": summary["mlp"]["test"][metric],
            "gain": gain, "verdict": outcome(gain, cfg)}
