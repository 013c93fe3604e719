"""The evaluate stage: score GNN and MLP baseline on the same split and say whether the graph helps."""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.config import EvaluateParams
from gnnpipe.metrics import classification_metrics

SCORED = ("train", "val", "test")


def score_predictions(node_id: torch.Tensor, logits: torch.Tensor, y: np.ndarray,
                      roles: np.ndarray, num_classes: int) -> dict[str, dict]:
    """Metrics per split, over the split's nodes only; every split node must have a prediction."""
    predicted = np.full(roles.size, -1, dtype=np.int64)
    predicted[node_id.numpy()] = logits.argmax(dim=1).numpy()
    out = {}
    for role in SCORED:
        nodes = np.flatnonzero(roles == role)
        missing = nodes[predicted[nodes] < 0]
        if missing.size:
            raise ValueError(f"predictions lack {missing.size} {role} nodes (first: {missing[0]}); "
                             "re-run the stage that wrote them")
        out[role] = classification_metrics(y[nodes], predicted[nodes], num_classes)
    return out


def compare(gnn: dict[str, dict], mlp: dict[str, dict], model: str, cfg: EvaluateParams) -> dict:
    """Scalar metrics for ``dvc metrics`` plus the plain-language verdict on the graph's value."""
    def scalars(scores: dict[str, dict]) -> dict:
        return {role: {"accuracy": scores[role]["accuracy"], "macro_f1": scores[role]["macro_f1"]}
                for role in ("val", "test")}

    gain = {f"{role}_{metric}": round(gnn[role][metric] - mlp[role][metric], 6)
            for role in ("val", "test") for metric in ("accuracy", "macro_f1")}
    helps = gain["test_accuracy"] >= cfg.min_gain
    verdict = (f"{model} beats the structure-free MLP by {gain['test_accuracy']:+.4f} test accuracy"
               if helps else
               f"the graph adds nothing measurable: {model} vs MLP is {gain['test_accuracy']:+.4f} "
               f"test accuracy (below evaluate.min_gain={cfg.min_gain}); prefer the MLP or "
               "check homophily")
    return {"model": model, "gnn": scalars(gnn), "mlp": scalars(mlp), "gnn_minus_mlp": gain,
            "graph_helps": helps, "verdict": verdict}
