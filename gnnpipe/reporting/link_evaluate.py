"""The evaluate stage for ``dataset.task: link``: GNN and MLP encoders on the same fixed negatives,
and, with hard negatives, the structure heuristics beside them.

Every model's scores are for exactly the split's val/test positives and the fixed negatives the
split stage wrote (checked by shape), so their metrics are comparable and the same on every run.
ROC-AUC and average precision pool all negatives of a phase; Hits@K and MRR rank each positive
against its own K negatives (gnnpipe/reporting/metrics.py ``link_metrics``).

Near-ties (equal within float rounding, ``metrics.TIE_RTOL``) rank as ties in every metric.

``evaluate.link.negatives`` picks the negative sets (``NEGATIVE_SETS``): ``random`` is the
evaluation as it always was (the GNN against the MLP on the random negatives); ``hard`` and
``both`` add the split's hard negatives and the heuristics defined for the relation (CN / AA /
RA where a pair can share a neighbour, preferential attachment always;
gnnpipe/reporting/link_heuristics.py) scored on the train-phase message graph only, and judge
the GNN on the hard negatives against the baseline (MLP or heuristic) of best val MRR there,
and against the best heuristic on val as well when that baseline is the MLP.

Collapse (gnnpipe/reporting/collapse.py): when the GNN's test scores, or those of the learned
baseline it is compared with, are mostly equal within float rounding, the outcome is
``collapsed``: the verdict says so with the likely causes and claims no gain.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from gnnpipe.config import EvaluateParams
from gnnpipe.data.graph import Csr
from gnnpipe.reporting.collapse import COLLAPSE_SHARE, collapse, collapse_line
from gnnpipe.reporting.link_heuristics import (HEURISTICS, NO_EVEN_WALK, SHARED_NEIGHBOUR,
                                               heuristic_link_scores)
from gnnpipe.reporting.metrics import TIE_RTOL, link_metrics, link_ranks
from gnnpipe.reporting.verdict import (BASELINE_NAMES, Gap, described, judge, margin, paired_gap,
                                      why_inconclusive)

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


LEARNED = ("mlp", "gbdt")  # baselines with trained weights: they can collapse, heuristics cannot
_READS = {name: "counting shared neighbours" for name in SHARED_NEIGHBOUR} | {
    "preferential_attachment": "endpoint popularity (degree in the train graph)"}
# what to do when a heuristic beats the GNN
_ADVICE = {name: "prefer the heuristic, or a link model with pair features (SEAL / NCN-style)"
           for name in SHARED_NEIGHBOUR} | {
    "preferential_attachment": "prefer ranking by popularity, or give the encoder what it "
                               "carries (degree features, scaled: features.normalize)"}
COLLAPSED = "collapsed"  # eval.json ``outcome`` when a compared model's scores collapsed


def link_sentence(model: str, baseline: str, gap: Gap, outcome: str, min_gain: float,
                  low_homophily: bool | None = None, role: str = "the best baseline") -> str:
    """The link verdict of the GNN ``model`` against ``baseline`` (a key of
    ``BASELINE_NAMES``) on the paired test-MRR ``gap``: "X beats Y by +d" with d > 0,
    whoever X is; a heuristic that beats or ties the GNN is named with what it reads and its
    ``role`` (why it is the one compared with)."""
    name, figures = described(baseline), margin(gap, "MRR", "edges")
    why = why_inconclusive(gap, min_gain, "edges")
    if baseline in LEARNED:
        if outcome == "helps":
            return f"{model} beats the {name} by {figures}: the graph helps"
        if outcome == "hurts":
            cause = ("; homophily is low (metrics/graph.json): the neighbours' features mislead "
                     "the encoder" if low_homophily else "")
            return (f"the {name} beats {model} by {figures}: the graph hurts here; prefer the "
                    f"{BASELINE_NAMES[baseline]}; check the GNN's training (epochs, depth, "
                    f"train.lr){cause}")
        leader, other = (model, f"the {name}") if gap.gain >= 0 else (f"the {name}", model)
        return f"inconclusive: {leader} leads {other} by {figures}; {why}"
    reads = _READS[baseline]
    if outcome == "helps":
        return f"{model} beats the {name}, {role}, by {figures}: the encoder adds to {reads}"
    if outcome == "hurts":
        return (f"the {name}, {role}, beats {model} by {figures}: {reads} ranks the held-out "
                f"edges better than the encoder; {_ADVICE[baseline]}, and check the GNN's "
                "training (epochs, depth, train.lr)")
    leader = model if gap.gain >= 0 else "the heuristic"
    return (f"inconclusive: the {name}, {role}, ties with {model}: {leader} leads by "
            f"{figures}; {reads} ranks the held-out edges about as well as the encoder; {why}")


def collapse_sentence(model: str, who: str, baseline: str, stats: dict,
                      causes: list[str]) -> str:
    """The verdict when ``who`` (the GNN ``model`` or the learned ``baseline`` it is compared
    with) collapsed: what was measured, that no gain is claimed, and the likely ``causes``."""
    return (f"{who} collapsed: {collapse_line(stats, 'test')}, so its rankings are rounding "
            f"noise, not skill; no gain of {model} over the {described(baseline)} or the "
            "reverse is claimed (the metrics rank near-ties as ties). Likely causes: "
            + "; ".join(causes))


def generic_causes(key: str) -> list[str]:
    """The usual causes of a collapse, unmeasured: for the GNN (``gnn``) or a learned baseline."""
    lr = "train.lr" if key == "gnn" else "baseline.lr"
    return ["unscaled input features (degree features of featureless node types: "
            "features.normalize, dataset.typed.featureless)", f"too large a learning rate ({lr})"]


def compare_links(gnn: dict[str, dict], mlp: dict[str, dict], model: str,
                  cfg: EvaluateParams, gap: Gap, low_homophily: bool | None,
                  baseline: str = "mlp", *, collapsed: dict[str, dict] | None = None,
                  causes: Callable[[str], list[str]] | None = None) -> dict:
    """Scalar metrics of the GNN and the baseline (``mlp`` holds the scores of ``baseline``:
    the MLP, or a heuristic of ``HEURISTICS``) and the verdict, judged on the test-MRR ``gap``
    (from ``reciprocal_ranks`` of each model) with its interval.

    ``collapsed``: ``gnn`` / ``mlp`` -> ``collapse.collapse`` of their judged test scores
    (eval.json ``collapse``); when the GNN's or the compared learned baseline's collapsed,
    the outcome is ``collapsed`` (never ``helps``) and the verdict names the likely
    ``causes(key)`` (measured by the caller: gnnpipe/reporting/eval_inputs.py
    ``collapse_causes``; ``generic_causes`` without)."""
    metrics = [name for name in gnn["test"] if name != "count"]
    gain = {f"{phase}_{name}": round(gnn[phase][name] - mlp[phase][name], 6)
            for phase in EVAL_PHASES for name in metrics}
    result = judge(gap, cfg.min_gain)
    verdict = link_sentence(model, baseline, gap, result, cfg.min_gain, low_homophily)
    out = {"task": "link", "model": model, "gnn": scalars(gnn), "mlp": scalars(mlp),
           "gnn_minus_mlp": gain, "gap": gap.as_dict()}
    if collapsed is not None:
        out["collapse"] = {"tolerance": TIE_RTOL, "share_threshold": COLLAPSE_SHARE, **collapsed}
        broken = [key for key in ("gnn", baseline) if key in collapsed
                  and collapsed[key]["collapsed"]]
        if broken:
            key = broken[0]
            who = model if key == "gnn" else f"the {described(key)}"
            result = COLLAPSED
            found = causes(key) if causes is not None else []
            verdict = collapse_sentence(model, who, baseline, collapsed[key],
                                        found or generic_causes(key))
    return {**out, "graph_helps": result == "helps", "outcome": result, "verdict": verdict}


def heuristic_predictions(train_graph: Csr, edges: dict[str, torch.Tensor],
                          negatives: dict[str, torch.Tensor],
                          names: tuple[str, ...] = HEURISTICS) -> dict[str, Scores]:
    """The scores by each heuristic of ``names`` of the val/test positives ``edges`` phase ->
    int64 (2, P) and their ``negatives`` phase -> int64 (P, K), all in the node ids of
    ``train_graph`` (the train-phase message graph, ``graphops.heuristics.train_projection``): name
    -> phase -> (pos float64 (P,), neg float64 (P, K)), the form of a model's predictions."""
    out: dict[str, Scores] = {name: {} for name in names}
    for phase in EVAL_PHASES:
        src, dst = edges[phase].numpy()
        scored = heuristic_link_scores(train_graph, src, dst, negatives[phase].numpy(),
                                       names=names)
        for name, (pos, neg) in scored.items():
            out[name][phase] = (torch.from_numpy(pos), torch.from_numpy(neg))
    return out


def scored_pairs(edges: dict[str, torch.Tensor], negative_sets: list[dict[str, torch.Tensor]]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Every pair the heuristics would score: the val/test positives ``edges`` phase -> (2, P)
    and each of their negative sets (phase -> (P, K) targets): (src, dst) int64 (M,) each."""
    src, dst = [], []
    for phase in EVAL_PHASES:
        heads, tails = edges[phase].numpy()
        src.append(heads)
        dst.append(tails)
        for targets in negative_sets:
            t = targets[phase].numpy()
            src.append(np.repeat(heads, t.shape[1]))
            dst.append(t.reshape(-1))
    return np.concatenate(src), np.concatenate(dst)


def best_baseline(metrics: dict[str, dict[str, dict]]) -> str:
    """The baseline of highest val MRR among ``metrics`` (name -> phase -> ``link_metrics``;
    the first on a tie): chosen on val, so the test gap stays an honest estimate."""
    return max(metrics, key=lambda name: metrics[name]["val"]["mrr"])


def link_tables(metrics: dict[str, dict[str, dict]], judged: str, chosen: str) -> dict:
    """What eval.json adds beside the verdict when hard negatives are evaluated: which set
    was judged, the baseline chosen, and every model's scalars per set (``metrics``: set ->
    model -> phase -> ``link_metrics``; ``random_negatives`` only when that set was scored);
    ``not_applicable``: the heuristics not scored because they are 0 by construction on the
    relation (``link_heuristics.not_applicable``)."""
    def baselines(models: dict[str, dict]) -> dict:
        return {name: scalars(m) for name, m in models.items() if name != "gnn"}

    out = {"negatives": judged, "baseline_model": chosen, "baselines": baselines(metrics[judged])}
    if judged != "random" and "random" in metrics:
        out["random_negatives"] = {"gnn": scalars(metrics["random"]["gnn"]),
                                   "baselines": baselines(metrics["random"])}
    missing = _not_scored(metrics[judged])
    if missing:
        out["not_applicable"] = {"heuristics": missing, "reason": NO_EVEN_WALK}
    return out


def _not_scored(models: dict) -> list[str]:
    """The heuristics absent beside scored ones: those ``not_applicable`` left out."""
    scored = [name for name in HEURISTICS if name in models]
    return [name for name in HEURISTICS if name not in models] if scored else []


def evaluate_links(predictions: dict[str, dict[str, Scores]],
                   negatives: dict[str, dict[str, torch.Tensor]], cfg: EvaluateParams,
                   model: str, seed: int, low_homophily: bool | None,
                   where: dict[str, str], *,
                   causes: Callable[[str], list[str]] | None = None) -> tuple[dict, dict]:
    """eval.json's summary and the details (every metric) of a link run.

    ``predictions`` set ("random", "hard": the sets of ``NEGATIVE_SETS``, in that order) ->
    model ("gnn", "mlp", the heuristics where scored) -> scores; ``negatives`` set -> phase ->
    the split's (P, K) targets the scores must match (``where`` names each model's file in the
    error). The last set is judged: the GNN against the baseline of best val MRR there, on the
    paired test-MRR gap (``evaluate.bootstrap`` draws seeded by ``seed``); when that is not a
    heuristic but heuristics were scored, the best of them on val is compared too
    (``best_heuristic``) and named in the verdict when it beats or ties the GNN. ``collapse``
    holds how collapsed the GNN's and the MLP's judged test scores are; a collapsed one turns
    the outcome to ``collapsed`` (``compare_links``, ``causes``). Random alone gives the
    summary and details as they always were, plus ``collapse``."""
    sets = tuple(predictions)
    metrics = {name: {m: score_link_predictions(scores, negatives[name], cfg.hits_k,
                                                where.get(m, f"the {m} scores"))
                      for m, scores in predictions[name].items()} for name in sets}
    judged = sets[-1]
    chosen = best_baseline({m: v for m, v in metrics[judged].items() if m != "gnn"})
    gnn_rr = reciprocal_ranks(*predictions[judged]["gnn"]["test"])
    gap = paired_gap(gnn_rr, reciprocal_ranks(*predictions[judged][chosen]["test"]),
                     cfg.bootstrap, seed)
    collapsed = {m: collapse(*(t.numpy() for t in predictions[judged][m]["test"]))
                 for m in ("gnn", *LEARNED) if m in predictions[judged]}
    summary = compare_links(metrics[judged]["gnn"], metrics[judged][chosen], model, cfg, gap,
                            low_homophily, chosen, collapsed=collapsed, causes=causes)
    if sets == ("random",):
        return summary, {"gnn": metrics["random"]["gnn"], "mlp": metrics["random"]["mlp"]}
    summary.update(link_tables(metrics, judged, chosen))
    heuristics = {m: v for m, v in metrics[judged].items() if m in HEURISTICS}
    if heuristics and chosen not in HEURISTICS:
        summary["best_heuristic"] = _against_heuristic(
            summary, best_baseline(heuristics), gnn_rr, predictions[judged], cfg, seed,
            low_homophily)
    return summary, metrics


def _against_heuristic(summary: dict, name: str, gnn_rr: np.ndarray, scores: dict[str, Scores],
                       cfg: EvaluateParams, seed: int, low_homophily: bool | None) -> dict:
    """The GNN against the heuristic ``name`` (the best heuristic on val, the chosen baseline
    being learned) on the paired test MRR: eval.json's ``best_heuristic``; when the heuristic
    beats or ties the GNN the ``summary`` verdict says so (not after a collapse: no
    comparison is claimed then)."""
    gap = paired_gap(gnn_rr, reciprocal_ranks(*scores[name]["test"]), cfg.bootstrap, seed)
    result = judge(gap, cfg.min_gain)
    if result != "helps" and summary["outcome"] != COLLAPSED:
        summary["verdict"] += "; " + link_sentence(summary["model"], name, gap, result,
                                                   cfg.min_gain, low_homophily,
                                                   role="the best heuristic on val")
    return {"model": name, "gap": gap.as_dict(), "outcome": result}


def link_confusion_rows(pos: torch.Tensor, neg: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Actual and predicted class (1 = edge), int8 (2P,) each, of every positive and then its
    first fixed negative, classified at logit 0 (probability 1/2, the threshold the BCE loss
    trains for): a balanced confusion matrix for DVC's ``confusion`` plot
    (``io.write_confusion``)."""
    scores = torch.cat([pos, neg[:, 0]])
    actual = np.repeat(np.array([1, 0], dtype=np.int8), pos.numel())
    return actual, (scores > 0).numpy().astype(np.int8)
