"""What the evaluate stage reads beside the graph and its split: each model's link scores
(with its hard-negative scores where a set asks for them), the split's hard negatives, the
structure heuristics defined for the relation, the structure-free model the baseline stage
chose, analyze's low-homophily flag, and what a collapsed link model's likely causes are."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from gnnpipe import io
from gnnpipe.data.graph import EdgeType, Graph
from gnnpipe.graphops.heuristics import train_projection
from gnnpipe.reporting.link_evaluate import EVAL_PHASES, heuristic_predictions, scored_pairs
from gnnpipe.reporting.link_heuristics import HEURISTICS, not_applicable


def baseline_model(baseline_metrics: Path) -> str:
    """The structure-free model the baseline stage wrote (metrics/baseline.json ``model``; mlp
    where that file is absent: stages run by hand)."""
    if not baseline_metrics.exists():
        return "mlp"
    return io.read_json(baseline_metrics)["model"]


def baseline_candidates(baseline_metrics: Path) -> dict | None:
    """The structure-free models the baseline stage chose from, name -> best val value of the
    judged metric (metrics/baseline.json ``candidates``; None when it fitted one model or the
    file is absent)."""
    if not baseline_metrics.exists():
        return None
    return io.read_json(baseline_metrics).get("candidates") or None


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
        scored = heuristic_sets(graph, typed.graphs["train"], edge_type, edges,
                                {name: targets[name] for name in sets})
        for name in sets:
            predictions[name].update(scored[name])
    return predictions, targets


def heuristic_sets(graph: Graph, train_graphs: dict, edge_type: EdgeType,
                   edges: dict[str, torch.Tensor], targets: dict[str, dict[str, torch.Tensor]]
                   ) -> dict[str, dict]:
    """The heuristics defined for the relation ``edge_type`` (``link_heuristics.not_applicable``
    over every pair of every set leaves out those 0 by construction), scored on the train
    phase's message graphs ``train_graphs`` (edge type -> CSR) as one homogeneous view: set
    -> heuristic -> phase -> (pos (P,), neg (P, K)). ``edges`` phase -> type-local (2, P)
    positives, ``targets`` set -> phase -> type-local (P, K) negative targets; a typed graph's
    ids are shifted by ``Graph.offsets()`` onto the view's (a homogeneous graph: offset 0)."""
    offsets = graph.offsets()
    s_off, d_off = offsets[edge_type[0]], offsets[edge_type[2]]
    held = {p: torch.stack([edges[p][0] + s_off, edges[p][1] + d_off]) for p in EVAL_PHASES}
    shifted = {name: {p: t + d_off for p, t in phases.items()}
               for name, phases in targets.items()}
    view = train_projection(graph.sizes(), train_graphs)
    skipped = not_applicable(view, *scored_pairs(held, list(shifted.values())))
    names = tuple(name for name in HEURISTICS if name not in skipped)
    return {name: heuristic_predictions(view, held, negatives, names)
            for name, negatives in shifted.items()}


def collapse_causes(graph: Graph, features_normalize: str, lr: dict[str, float],
                    rows: int = 100_000) -> Callable[[str], list[str]]:
    """What may have collapsed a link model, measured: ``key`` ("gnn", "mlp") -> causes in
    words. Node types without feature columns whose features are the ``degree`` default
    (log1p of the in-degree per incoming edge type, found by comparing the first ``rows``
    rows with it) and left unscaled (``features_normalize`` none), with their range beside
    the other types'; and the model's learning rate (``lr``: key -> its lr). Called only when
    a model collapsed (evaluate passes it as ``evaluate_links(causes=...)``)."""
    def causes(key: str) -> list[str]:
        found = []
        if features_normalize == "none":
            found += [_degree_cause(t, *figures, _others(graph, t, rows))
                      for t, figures in _degree_features(graph, rows).items()]
        if key in lr:
            setting = "train.lr" if key == "gnn" else "baseline.lr"
            found.append(f"{setting}={lr[key]:g}: too large a step can turn every embedding "
                         f"one way; try -S {setting}={lr[key] / 10:g}")
        return found
    return causes


def _degree_features(graph: Graph, rows: int) -> dict[str, tuple[float, float]]:
    """Node type -> (max, mean) of its features, for the types whose features equal the
    ``dataset.typed.featureless: degree`` default on their first ``rows`` rows."""
    found = {}
    for t in graph.node_types:
        incoming = [e for e in graph.edge_types if e[2] == t]
        x = np.asarray(graph.x[t][:rows], dtype=np.float32)
        if not incoming or x.shape[1] != len(incoming) or x.shape[0] == 0:
            continue
        degrees = np.stack([graph.csr[e].degrees().numpy()[:rows] for e in incoming], axis=1)
        default = np.log1p(degrees).astype(np.float32)
        # row by row as sets: the prepare paths may order the incoming edge types differently
        if np.allclose(np.sort(x, axis=1), np.sort(default, axis=1), rtol=1e-6, atol=1e-6):
            found[t] = (float(x.max()), float(x.mean()))
    return found


def _others(graph: Graph, node_type: str, rows: int) -> float | None:
    """The largest mean |x| of another node type's first ``rows`` rows; None without one."""
    means = [float(np.abs(np.asarray(graph.x[t][:rows], dtype=np.float32)).mean())
             for t in graph.node_types if t != node_type and graph.x[t].shape[0]]
    return max(means) if means else None


def _degree_cause(node_type: str, high: float, mean: float, others: float | None) -> str:
    beside = "" if others is None else f" beside a mean |x| of {others:.3g} in the other types"
    return (f"{node_type} has no feature columns and reads unscaled degree features "
            f"(log1p in-degree up to {high:.3g}, mean {mean:.3g}{beside}; features.normalize: "
            "none): try -S features.normalize=standardize or "
            "-S dataset.typed.featureless=constant")


def _hard_negatives(split: Path, edges, num_dst):
    """The split's hard negatives; a split without them is a params mismatch."""
    hard = io.read_link_negatives(split, edges, num_dst, hard=True)
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
