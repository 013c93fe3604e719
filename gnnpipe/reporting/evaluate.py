"""The evaluate stage: score GNN and MLP baseline on the same split and say whether the graph helps.

Only the split's own (seed) nodes are scored, each from the logits its phase produced; a node
missing from the predictions is an error, not a silent skip. So is an unlabelled split node
(``y == UNLABELLED``): the split puts none in train/val/test, and no metric may count one.
Every node metric is reported (``node_metric.node_metrics``); the verdict is judged on the one
``evaluate.metric`` resolves to (``node_metric.resolve_metric``), and its advice reads what
this module measures: the class balance and each model's most predicted class on test.
"""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.config import EvaluateParams
from gnnpipe.data.graph import ROLE_CODES, UNLABELLED, Csr
from gnnpipe.graphops.smoothing import check_node_ids, row_map, smoothing_report
from gnnpipe.io.common import PHASES
from gnnpipe.io.tensors import gathered_rows
from gnnpipe.reporting.node_metric import (METRIC_NAMES, NODE_METRICS, class_counts, node_metric,
                                           node_metrics, resampled_metric)
from gnnpipe.reporting.verdict import (BASELINE_NAMES, Causes, Gap, TopClass, causes_of, judge,
                                       paired_gap, paired_metric_gap, sentence)

_ROWS = 1 << 16  # prediction rows turned into labels at a time


def predicted_labels(node_id: torch.Tensor, logits: torch.Tensor, num_nodes: int) -> np.ndarray:
    """Argmax class of every node: int (N,) of the smallest width the classes of ``logits``
    (M, C) fit (int16 up to 32,767 classes), -1 where ``node_id`` (M,) has no row of it."""
    check_node_ids(node_id, num_nodes)
    predicted = np.full(num_nodes, -1, dtype=np.min_scalar_type(-logits.shape[1]))
    for a in range(0, node_id.numel(), _ROWS):  # argmax by row blocks: no (M,) int64 of it
        ids = node_id[a:a + _ROWS].numpy()
        predicted[ids] = logits[a:a + _ROWS].argmax(dim=1).numpy()
    return predicted


def _phase_rows(node_id: torch.Tensor, roles: np.ndarray, y: np.ndarray, role: str
                ) -> tuple[np.ndarray, np.ndarray]:
    """The ``role`` nodes in id order and the prediction row of each, int64 (T,) both; every
    one must have a prediction and a label."""
    rows = row_map(node_id, roles.size)
    nodes = np.flatnonzero(roles == ROLE_CODES[role])
    missing = nodes[rows[nodes] < 0]
    if missing.size:
        raise ValueError(f"predictions lack {missing.size} {role} nodes (first: {missing[0]}); "
                         "re-run the stage that wrote them")
    _check_labelled(nodes, y, role)
    return nodes, rows[nodes]


def score_predictions(node_id: torch.Tensor, logits: torch.Tensor, y: np.ndarray,
                      roles: np.ndarray, num_classes: int) -> dict[str, dict]:
    """Every node metric per phase (``node_metrics``: accuracy, macro-F1, per-class F1,
    confusion, ROC-AUC, average precision), over the phase's nodes only (``roles`` int8 (N,)
    role codes, ``ROLE_CODES``); every split node must have a prediction."""
    out = {}
    for role in PHASES:
        nodes, rows = _phase_rows(node_id, roles, y, role)
        out[role] = node_metrics(y[nodes], gathered_rows(logits, torch.from_numpy(rows)),
                                 num_classes)
    return out


def on_test(node_id: torch.Tensor, logits: torch.Tensor, y: np.ndarray, roles: np.ndarray
            ) -> tuple[np.ndarray, torch.Tensor]:
    """The test nodes' labels int64 (T,) and logits (T, C), in node id order (``roles`` int8
    (N,) role codes): what the verdict is judged on."""
    nodes, rows = _phase_rows(node_id, roles, y, "test")
    return y[nodes].astype(np.int64), gathered_rows(logits, torch.from_numpy(rows))


def _check_labelled(nodes: np.ndarray, y: np.ndarray, role: str) -> None:
    unlabelled = nodes[y[nodes] == UNLABELLED]
    if unlabelled.size:
        raise ValueError(f"{unlabelled.size} {role} nodes of the split are unlabelled (first: "
                         f"node {unlabelled[0]}); re-run the split stage on this graph")


def confusion_rows(node_id: torch.Tensor, logits: torch.Tensor, y: np.ndarray, roles: np.ndarray,
                   role: str = "test") -> tuple[np.ndarray, np.ndarray]:
    """The rows of DVC's ``confusion`` plot, one per ``role`` node (``roles`` int8 (N,) role
    codes) in id order, as two columns: actual and predicted class codes, int (T,) each
    (``io.write_confusion`` writes them; ``correct_of`` compares them)."""
    predicted = predicted_labels(node_id, logits, roles.size)
    nodes = np.flatnonzero(roles == ROLE_CODES[role])
    _check_labelled(nodes, y, role)
    return y[nodes], predicted[nodes]


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
    role codes). A caller holding ``confusion_rows`` of the test nodes passes them to
    ``correct_of`` instead: one argmax of the logits, not two."""
    return correct_of(*confusion_rows(node_id, logits, y, roles, "test"))


def correct_of(actual: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """1.0 where ``predicted`` equals ``actual`` (``confusion_rows``' columns, (T,) each), else
    0.0: float64 (T,)."""
    return (predicted == actual).astype(np.float64)


def majority_fraction(y: np.ndarray, num_classes: int) -> float | None:
    """The largest class's share of the labelled nodes of ``y`` int (N,) (``UNLABELLED``
    ignored; None without one)."""
    counts = class_counts(y, None, num_classes)
    return float(counts.max() / counts.sum()) if counts.sum() else None


def top_class(y: np.ndarray, logits: torch.Tensor, num_classes: int) -> TopClass:
    """The class a model predicts most on the test nodes (``y`` int (T,), ``logits`` (T, C)),
    with the share it is predicted for and the share truly of it."""
    predicted = torch.as_tensor(logits).argmax(dim=1).numpy()
    counts = np.bincount(predicted, minlength=num_classes)
    label = int(counts.argmax())
    return TopClass(label, float(counts[label] / y.size), float((y == label).mean()))


def judged_gap(metric: str, y: np.ndarray, gnn: torch.Tensor, baseline: torch.Tensor,
               num_classes: int, samples: int, seed: int) -> tuple[Gap, float, float]:
    """The paired gap of the GNN's and the baseline's test ``metric`` (``y`` int (T,), each
    model's test logits (T, C) from ``on_test``) and each one's value. Accuracy is a mean of
    per-node scores (right or not): ``paired_gap`` on them, as it always was; another metric is
    recomputed on each resample (``paired_metric_gap``)."""
    if metric == "accuracy":
        right = [(torch.as_tensor(m).argmax(dim=1).numpy() == y).astype(np.float64)
                 for m in (gnn, baseline)]
        return (paired_gap(*right, samples, seed), float(right[0].mean()),
                float(right[1].mean()))
    values = [node_metric(metric, y, m, num_classes) for m in (gnn, baseline)]
    gap = paired_metric_gap(resampled_metric(metric, y, gnn, num_classes),
                            resampled_metric(metric, y, baseline, num_classes), y.size,
                            values[0] - values[1], samples, seed)
    return gap, values[0], values[1]


def _scalars(scores: dict[str, dict]) -> dict:
    """Per val/test phase, every scalar node metric the scores hold (None where undefined)."""
    return {role: {m: scores[role][m] for m in NODE_METRICS if m in scores[role]}
            for role in ("val", "test")}


def compare(gnn: dict[str, dict], mlp: dict[str, dict], model: str, cfg: EvaluateParams,
            gap: Gap, low_homophily: bool | None, baseline: str = "mlp", *,
            metric: str = "accuracy", causes: Causes | None = None,
            candidates: dict | None = None) -> dict:
    """Scalar metrics of both models, the test-``metric`` ``gap`` with its interval (from
    ``judged_gap``) and the verdict: ``outcome`` helps / hurts / inconclusive and the sentence,
    its advice by what was measured (``low_homophily``: analyze's flag, None: not measured;
    ``causes``: the class balance and the models' top classes; their keys in ``causes``).
    ``mlp`` holds the scores of ``baseline``, the structure-free model the baseline stage chose
    on val among ``candidates`` (metrics/baseline.json: name -> best val value; eval.json keeps
    the key ``mlp`` and names the model in ``baseline_model``)."""
    gnn_s, mlp_s = _scalars(gnn), _scalars(mlp)
    gain = {f"{role}_{m}": None if gnn_s[role][m] is None or mlp_s[role].get(m) is None
            else round(gnn_s[role][m] - mlp_s[role][m], 6)
            for role in ("val", "test") for m in gnn_s[role]}
    result = judge(gap, cfg.min_gain)
    out = {"model": model, "baseline_model": baseline, "metric": metric, "gnn": gnn_s,
           "mlp": mlp_s, "gnn_minus_mlp": gain, "gap": gap.as_dict(),
           "graph_helps": result == "helps", "outcome": result,
           "causes": causes_of(result, gap, cfg.min_gain, low_homophily, causes),
           "verdict": sentence(model, BASELINE_NAMES[baseline], METRIC_NAMES[metric], gap,
                               result, cfg.min_gain, low_homophily, "nodes", causes=causes,
                               candidates=tuple(candidates or ()))}
    if candidates:
        out["baseline_candidates"] = dict(candidates)
    if causes is not None:
        out["majority_fraction"] = (None if causes.majority_fraction is None
                                    else round(causes.majority_fraction, 6))
        out["top_class"] = {"gnn" if who == "gnn" else "mlp": top.as_dict()
                            for who, top in causes.top_class.items()}
    return out
