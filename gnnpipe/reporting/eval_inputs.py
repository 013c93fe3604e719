"""What the evaluate stage reads beside the graph and its split: each model's link scores
(with its hard-negative scores where a set asks for them), the split's hard negatives, the
structure-free model the baseline stage chose, and analyze's low-homophily flag."""

from __future__ import annotations

from pathlib import Path

import torch

from gnnpipe import io
from gnnpipe.graphops.heuristics import train_view
from gnnpipe.reporting.link_evaluate import EVAL_PHASES, heuristic_predictions


def baseline_model(baseline_metrics: Path) -> str:
    """The structure-free model the baseline stage wrote (metrics/baseline.json ``model``; mlp
    where that file is absent: stages run by hand)."""
    if not baseline_metrics.exists():
        return "mlp"
    return io.read_json(baseline_metrics)["model"]


def low_homophily(analysis: Path) -> bool | None:
    """analyze's low-homophily flag (metrics/graph.json); None where homophily is not
    applicable (a target type with no relation of its own) or analyze has not run (stages
    run by hand; dvc.yaml always runs it first)."""
    if not analysis.exists():
        return None
    report = io.read_json(analysis)
    if not report.get("homophily", {}).get("applicable", True):
        return None
    return bool(report["low_homophily"])


def link_predictions(split: Path, models: dict[str, Path], typed, sets: tuple[str, ...]
                     ) -> tuple[dict, dict]:
    """Scores per negative set of ``sets`` (``NEGATIVE_SETS``): set -> model -> phase -> (pos
    (P,), neg (P, K)) of the ``models`` (name -> its folder) and, with ``hard``, the structure
    heuristics on the train-phase graph; and set -> phase -> negative targets (P, K). ``typed``:
    the graph with its split (``gnnpipe.splitting.inputs.TypedSplit``)."""
    graph = typed.graph
    edge_type, edges, negatives = io.read_typed_link_split(split, graph)
    random = {name: io.read_link_predictions(path) for name, path in models.items()}
    predictions = {"random": dict(random)} if "random" in sets else {}
    targets = {"random": negatives}
    if "hard" in sets:
        targets["hard"] = _hard_negatives(split, edges, graph.num_nodes_dict[edge_type[2]])
        predictions["hard"] = {name: _with_hard(random[name], path)
                               for name, path in models.items()}
        offsets = graph.offsets()  # the heuristics read homogeneous ids (train_view)
        s_off, d_off = offsets[edge_type[0]], offsets[edge_type[2]]
        held = {p: torch.stack([edges[p][0] + s_off, edges[p][1] + d_off]) for p in EVAL_PHASES}
        view = train_view(graph, typed.graphs["train"])
        for name in sets:
            predictions[name].update(heuristic_predictions(
                view, held, {p: t + d_off for p, t in targets[name].items()}))
    return predictions, targets


def _hard_negatives(split: Path, edges, num_dst):
    """The split's hard negatives; a split without them is a params mismatch."""
    hard = io.read_hard_negatives(split, edges, num_dst)
    if hard is None:
        raise ValueError(f"{split}: the split wrote no hard negatives, which "
                         "evaluate.link.negatives hard / both needs; set "
                         "split.link.num_hard_negatives >= 1 and re-run the split stage")
    return hard


def _with_hard(random, model_dir: Path):
    """A model's scores with its hard-negative scores in place of the random ones."""
    hard = io.read_hard_link_scores(model_dir)
    if hard is None:
        raise ValueError(f"{model_dir}: no hard_scores.pt (the model scored no hard negatives); "
                         "re-run the stage that wrote it after the split")
    return {phase: (random[phase][0], hard[phase]) for phase in EVAL_PHASES}
