"""The evaluate stage for ``dataset.task: link``: GNN and MLP encoders on the same fixed negatives.

Both models' scores are for exactly the split's val/test positives and the fixed negatives the
split stage wrote (checked by shape), so their metrics are comparable and the same on every run.
ROC-AUC and average precision pool all negatives of a phase; Hits@K and MRR rank each positive
against its own K negatives (gnnpipe/reporting/metrics.py ``link_metrics``).
"""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.config import EvaluateParams
from gnnpipe.reporting.metrics import link_metrics, link_ranks
from gnnpipe.reporting.verdict import Gap, judge, sentence

EVAL_PHASES = ("val", "test")


def score_link_predictions(scores: dict[str, tuple[torch.Tensor, torch.Tensor]],
                           negatives: dict[str, torch.Tensor], ks: tuple[int, ...],
                           where: str) -> dict[str, dict]:
    """Link metrics per phase; ``scores`` phase -> (pos (P,), neg (P, K)) must match the split's
    ``negatives`` phase -> (P, K) targets, else the predictions are stale (``where`` names them)."""
    out = {}
    for phase in EVAL_PHASES:
        pos, neg = scores[phase]
        if tuple(neg.shape) != tuple(negatives[phase].shape):
            raise ValueError(f"{where}: {phase} scores have shape {tuple(neg.shape)} but the split "
                             f"has {tuple(negatives[phase].shape)} (positives, negatives); "
                             "re-run the stage that wrote them")
        out[phase] = link_metrics(pos.numpy(), neg.numpy(), ks)
    return out


def reciprocal_ranks(pos: torch.Tensor, neg: torch.Tensor) -> np.ndarray:
    """``1 / rank`` of each positive (P,) against its own negatives (P, K): float (P,), the
    per-item scores whose mean is the MRR (the verdict's paired bootstrap)."""
    return 1.0 / link_ranks(pos.numpy(), neg.numpy())


def compare_links(gnn: dict[str, dict], mlp: dict[str, dict], model: str,
                  cfg: EvaluateParams, gap: Gap, low_homophily: bool | None) -> dict:
    """Scalar metrics of both encoders and the verdict, judged on the test-MRR ``gap`` (from
    ``reciprocal_ranks`` of each model) with its interval."""
    metrics = [name for name in gnn["test"] if name != "count"]
    gain = {f"{phase}_{name}": round(gnn[phase][name] - mlp[phase][name], 6)
            for phase in EVAL_PHASES for name in metrics}
    result = judge(gap, cfg.min_gain)
    verdict = sentence(model, "MLP", "MRR", gap, result, cfg.min_gain, low_homophily, "edges")

    def scalars(scores: dict[str, dict]) -> dict:
        return {phase: {name: scores[phase][name] for name in metrics} for phase in EVAL_PHASES}

    return {"task": "link", "model": model, "gnn": scalars(gnn), "mlp": scalars(mlp),
            "gnn_minus_mlp": gain, "gap": gap.as_dict(), "graph_helps": result == "helps",
            "outcome": result, "verdict": verdict}


def link_confusion_rows(pos: torch.Tensor, neg: torch.Tensor) -> list[dict]:
    """``{"actual", "predicted"}`` (1 = edge) for every positive and its first fixed negative,
    classified at logit 0 (probability 1/2, the threshold the BCE loss trains for): a balanced
    confusion matrix for DVC's ``confusion`` plot."""
    scores = torch.cat([pos, neg[:, 0]])
    actual = torch.cat([torch.ones_like(pos), torch.zeros_like(pos)]).long()
    predicted = (scores > 0).long()
    return [{"actual": int(a), "predicted": int(p)}
            for a, p in zip(actual.tolist(), predicted.tolist())]
