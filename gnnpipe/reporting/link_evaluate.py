"""The evaluate stage for ``dataset.task: link``: GNN and MLP encoders on the same fixed negatives,
and, with hard negatives, the structure heuristics beside them.

Every model's scores are for exactly the split's val/test positives and the fixed negatives the
split stage wrote (checked by shape), so their metrics are comparable and the same on every run.
ROC-AUC and average precision pool all negatives of a phase; Hits@K and MRR rank each positive
against its own K negatives (gnnpipe/reporting/metrics.py ``link_metrics``).

``evaluate.link.negatives`` picks the negative sets (``NEGATIVE_SETS``): ``random`` is the
evaluation as it always was (the GNN against the MLP on the random negatives); ``hard`` and
``both`` add the split's hard negatives and the heuristics CN / AA / RA
(gnnpipe/reporting/link_heuristics.py) scored on the train-phase message graph only, and judge
the GNN on the hard negatives against the baseline (MLP or heuristic) of best val MRR there.
"""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.config import EvaluateParams
from gnnpipe.data.graph import Csr
from gnnpipe.reporting.link_heuristics import HEURISTICS, heuristic_link_scores
from gnnpipe.reporting.metrics import link_metrics, link_ranks
from gnnpipe.reporting.verdict import Gap, heuristic_sentence, judge, paired_gap, sentence

EVAL_PHASES = ("val", "test")
# the negative sets each evaluate.link.negatives scores; the last one is judged
NEGATIVE_SETS = {"random": ("random",), "hard": ("hard",), "both": ("random", "hard")}
Scores = dict[str, tuple[torch.Tensor, torch.Tensor]]  # phase -> (pos (P,), neg (P, K))


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


def scalars(scores: dict[str, dict]) -> dict:
    """Per phase, every metric of ``link_metrics`` but the count."""
    return {phase: {name: value for name, value in scores[phase].items() if name != "count"}
            for phase in EVAL_PHASES}


def compare_links(gnn: dict[str, dict], mlp: dict[str, dict], model: str,
                  cfg: EvaluateParams, gap: Gap, low_homophily: bool | None,
                  baseline: str = "mlp") -> dict:
    """Scalar metrics of the GNN and the baseline (``mlp`` holds the scores of ``baseline``:
    the MLP, or a heuristic of ``HEURISTICS``) and the verdict, judged on the test-MRR ``gap``
    (from ``reciprocal_ranks`` of each model) with its interval."""
    metrics = [name for name in gnn["test"] if name != "count"]
    gain = {f"{phase}_{name}": round(gnn[phase][name] - mlp[phase][name], 6)
            for phase in EVAL_PHASES for name in metrics}
    result = judge(gap, cfg.min_gain)
    verdict = (heuristic_sentence(model, baseline, gap, result, cfg.min_gain)
               if baseline in HEURISTICS else
               sentence(model, "MLP", "MRR", gap, result, cfg.min_gain, low_homophily, "edges"))
    return {"task": "link", "model": model, "gnn": scalars(gnn), "mlp": scalars(mlp),
            "gnn_minus_mlp": gain, "gap": gap.as_dict(), "graph_helps": result == "helps",
            "outcome": result, "verdict": verdict}


def heuristic_predictions(train_graph: Csr, edges: dict[str, torch.Tensor],
                          negatives: dict[str, torch.Tensor]) -> dict[str, Scores]:
    """Each heuristic's scores of the val/test positives ``edges`` phase -> int64 (2, P) and
    their ``negatives`` phase -> int64 (P, K), all in the node ids of ``train_graph`` (the
    train-phase message graph, ``graphops.heuristics.train_view``): name -> phase -> (pos
    float64 (P,), neg float64 (P, K)), the form of a model's predictions."""
    out: dict[str, Scores] = {name: {} for name in HEURISTICS}
    for phase in EVAL_PHASES:
        src, dst = edges[phase].numpy()
        scored = heuristic_link_scores(train_graph, src, dst, negatives[phase].numpy())
        for name, (pos, neg) in scored.items():
            out[name][phase] = (torch.from_numpy(pos), torch.from_numpy(neg))
    return out


def best_baseline(metrics: dict[str, dict[str, dict]]) -> str:
    """The baseline of highest val MRR among ``metrics`` (name -> phase -> ``link_metrics``;
    the first on a tie): chosen on val, so the test gap stays an honest estimate."""
    return max(metrics, key=lambda name: metrics[name]["val"]["mrr"])


def link_tables(metrics: dict[str, dict[str, dict]], judged: str, chosen: str) -> dict:
    """What eval.json adds beside the verdict when hard negatives are evaluated: which set
    was judged, the baseline chosen, and every model's scalars per set (``metrics``: set ->
    model -> phase -> ``link_metrics``; ``random_negatives`` only when that set was scored)."""
    def baselines(models: dict[str, dict]) -> dict:
        return {name: scalars(m) for name, m in models.items() if name != "gnn"}

    out = {"negatives": judged, "baseline_model": chosen, "baselines": baselines(metrics[judged])}
    if judged != "random" and "random" in metrics:
        out["random_negatives"] = {"gnn": scalars(metrics["random"]["gnn"]),
                                   "baselines": baselines(metrics["random"])}
    return out


def evaluate_links(predictions: dict[str, dict[str, Scores]],
                   negatives: dict[str, dict[str, torch.Tensor]], cfg: EvaluateParams,
                   model: str, seed: int, low_homophily: bool | None,
                   where: dict[str, str]) -> tuple[dict, dict]:
    """eval.json's summary and the details (every metric) of a link run.

    ``predictions`` set ("random", "hard": the sets of ``NEGATIVE_SETS``, in that order) ->
    model ("gnn", "mlp", the heuristics where scored) -> scores; ``negatives`` set -> phase ->
    the split's (P, K) targets the scores must match (``where`` names each model's file in the
    error). The last set is judged: the GNN against the baseline of best val MRR there, on the
    paired test-MRR gap (``evaluate.bootstrap`` draws seeded by ``seed``). Random alone gives
    the summary and details as they always were."""
    sets = tuple(predictions)
    metrics = {name: {m: score_link_predictions(scores, negatives[name], cfg.hits_k,
                                                where.get(m, f"the {m} scores"))
                      for m, scores in predictions[name].items()} for name in sets}
    judged = sets[-1]
    chosen = best_baseline({m: v for m, v in metrics[judged].items() if m != "gnn"})
    gap = paired_gap(reciprocal_ranks(*predictions[judged]["gnn"]["test"]),
                     reciprocal_ranks(*predictions[judged][chosen]["test"]), cfg.bootstrap, seed)
    summary = compare_links(metrics[judged]["gnn"], metrics[judged][chosen], model, cfg, gap,
                            low_homophily, chosen)
    if sets == ("random",):
        return summary, {"gnn": metrics["random"]["gnn"], "mlp": metrics["random"]["mlp"]}
    summary.update(link_tables(metrics, judged, chosen))
    return summary, metrics


def link_confusion_rows(pos: torch.Tensor, neg: torch.Tensor) -> list[dict]:
    """``{"actual", "predicted"}`` (1 = edge) for every positive and its first fixed negative,
    classified at logit 0 (probability 1/2, the threshold the BCE loss trains for): a balanced
    confusion matrix for DVC's ``confusion`` plot."""
    scores = torch.cat([pos, neg[:, 0]])
    actual = torch.cat([torch.ones_like(pos), torch.zeros_like(pos)]).long()
    predicted = (scores > 0).long()
    return [{"actual": int(a), "predicted": int(p)}
            for a, p in zip(actual.tolist(), predicted.tolist())]
