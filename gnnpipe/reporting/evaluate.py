"""The evaluate stage: score GNN and MLP baseline on the same split and say whether the graph helps.

Only the split's own (seed) nodes are scored, each from the logits its phase produced; a node
missing from the predictions is an error, not a silent skip. So is an unlabelled split node
(``y == UNLABELLED``): the split puts none in train/val/test, and no metric may count one.
"""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.reporting.verdict import BASELINE_NAMES, Gap, judge, sentence
from gnnpipe.graphops.smoothing import smoothing_report
from gnnpipe.config import EvaluateParams
from gnnpipe.data.graph import ROLE_CODES, UNLABELLED, Csr
from gnnpipe.io.common import PHASES
from gnnpipe.reporting.metrics import classification_metrics


def predicted_labels(node_id: torch.Tensor, logits: torch.Tensor, num_nodes: int) -> np.ndarray:
    """Argmax class of every node: int64 (N,), -1 where ``node_id`` (M,) has no row of ``logits`` (M, C)."""
    if node_id.numel() and (int(node_id.min()) < 0 or int(node_id.max()) >= num_nodes):
        raise ValueError(f"predictions hold node ids outside [0, {num_nodes}); they were written "
                         "for another graph: re-run train/baseline")
    predicted = np.full(num_nodes, -1, dtype=np.int64)
    predicted[node_id.numpy()] = logits.argmax(dim=1).numpy()
    return predicted


def score_predictions(node_id: torch.Tensor, logits: torch.Tensor, y: np.ndarray,
                      roles: np.ndarray, num_classes: int) -> dict[str, dict]:
    """Metrics per phase, over the phase's nodes only (``roles`` int8 (N,) role codes,
    ``ROLE_CODES``); every split node must have a prediction."""
    predicted = predicted_labels(node_id, logits, roles.size)
    out = {}
    for role in PHASES:
        nodes = np.flatnonzero(roles == ROLE_CODES[role])
        missing = nodes[predicted[nodes] < 0]
        if missing.size:
            raise ValueError(f"predictions lack {missing.size} {role} nodes (first: {missing[0]}); "
                             "re-run the stage that wrote them")
        _check_labelled(nodes, y, role)
        out[role] = classification_metrics(y[nodes], predicted[nodes], num_classes)
    return out


def _check_labelled(nodes: np.ndarray, y: np.ndarray, role: str) -> None:
    unlabelled = nodes[y[nodes] == UNLABELLED]
    if unlabelled.size:
        raise ValueError(f"{unlabelled.size} {role} nodes of the split are unlabelled (first: "
                         f"node {unlabelled[0]}); re-run the split stage on this graph")


def confusion_rows(node_id: torch.Tensor, logits: torch.Tensor, y: np.ndarray, roles: np.ndarray,
                   role: str = "test") -> list[dict]:
    """One ``{"actual", "predicted"}`` row per ``role`` node (``roles`` int8 (N,) role codes), for
    DVC's ``confusion`` plot template."""
    predicted = predicted_labels(node_id, logits, roles.size)
    nodes = np.flatnonzero(roles == ROLE_CODES[role])
    _check_labelled(nodes, y, role)
    return [{"actual": int(a), "predicted": int(p)}
            for a, p in zip(y[nodes].tolist(), predicted[nodes].tolist())]


def smoothing(node_id: torch.Tensor, logits: torch.Tensor, message_graph: Csr) -> dict:
    """Over-smoothing figures of the final-layer outputs (the logits) on ``message_graph``.

    The logits are the last hidden representation the model computes, so they are what the
    train stage already writes; a deep GNN that over-smooths gives them high mean cosine
    similarity and low Dirichlet energy / Rayleigh quotient (see ``gnnpipe.graphops.smoothing``).
    """
    return smoothing_report(node_id, logits, message_graph)


def correct_on_test(node_id: torch.Tensor, logits: torch.Tensor, y: np.ndarray,
                    roles: np.ndarray) -> np.ndarray:
    """1.0 where the prediction of a test node is right, else 0.0: float (T,) over the test
    nodes in id order (the per-item scores of the verdict's paired bootstrap; ``roles`` int8 (N,)
    role codes)."""
    predicted = predicted_labels(node_id, logits, roles.size)
    nodes = np.flatnonzero(roles == ROLE_CODES["test"])
    return (predicted[nodes] == y[nodes]).astype(np.float64)


def compare(gnn: dict[str, dict], mlp: dict[str, dict], model: str, cfg: EvaluateParams,
            gap: Gap, low_homophily: bool | None, baseline: str = "mlp") -> dict:
    """Scalar metrics of both models, the test-accuracy ``gap`` with its interval (from
    ``correct_on_test`` of each model) and the verdict: ``outcome`` helps / hurts / inconclusive
    and the sentence, its advice by ``low_homophily`` (analyze's flag; None: not measured).
    ``mlp`` holds the scores of ``baseline``, the structure-free model the baseline stage chose
    (``eval.json`` keeps its key ``mlp`` and names the model in ``baseline_model``)."""
    def scalars(scores: dict[str, dict]) -> dict:
        return {role: {"accuracy": scores[role]["accuracy"], "macro_f1": scores[role]["macro_f1"]}
                for role in ("val", "test")}

    gain = {f"{role}_{metric}": round(gnn[role][metric] - mlp[role][metric], 6)
            for role in ("val", "test") for metric in ("accuracy", "macro_f1")}
    result = judge(gap, cfg.min_gain)
    return {"model": model, "baseline_model": baseline, "gnn": scalars(gnn), "mlp": scalars(mlp),
            "gnn_minus_mlp": gain, "gap": gap.as_dict(), "graph_helps": result == "helps",
            "outcome": result,
            "verdict": sentence(model, BASELINE_NAMES[baseline], "accuracy", gap, result,
                                cfg.min_gain, low_homophily, "nodes")}
