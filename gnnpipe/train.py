"""Training loop shared by the GNN (train stage) and the MLP baseline (baseline stage).

Full-graph models run one forward over the phase's message graph per step; row models (mlp,
sign) see only node rows and need no graph. Early stopping keeps the weights of the epoch with
the best validation accuracy. Randomness comes only from the given seed (``fork_rng`` keeps the
caller's global RNG untouched).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gnnpipe.config import BaselineParams

PHASES = ("train", "val", "test")


@dataclass(frozen=True)
class PhaseInput:
    """What a model sees in one phase: ``x`` (N, D) and the phase's ``edge_index`` (2, E) or None."""

    x: torch.Tensor
    edge_index: torch.Tensor | None = None


@dataclass
class TrainResult:
    node_id: torch.Tensor  # int64 (M,): train, val then test nodes
    logits: torch.Tensor  # float32 (M, C), each node scored on its own phase's graph
    state_dict: dict
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)  # deterministic for a fixed seed
    perf: dict = field(default_factory=dict)  # wall-clock figures, differ run to run


def _forward(model: nn.Module, inputs: PhaseInput, rows: torch.Tensor) -> torch.Tensor:
    """Logits (len(rows), C) for ``rows``: graph models run on the whole phase graph."""
    if inputs.edge_index is None:
        return model(inputs.x[rows])
    return model(inputs.x, inputs.edge_index)[rows]


@torch.no_grad()
def _accuracy(model: nn.Module, inputs: PhaseInput, rows: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    pred = _forward(model, inputs, rows).argmax(dim=1)
    return float((pred == y[rows]).double().mean())


def fit(build_model: Callable[[], nn.Module], inputs: dict[str, PhaseInput], y: torch.Tensor, roles: np.ndarray,
        cfg: BaselineParams, seed: int, *, batch_size: int | None = None,
        progress: Callable[[Iterable], Iterable] = lambda it, **_: it) -> TrainResult:
    """Build a model with ``build_model()`` and train it on the train nodes of ``roles``, early-stopping on the val nodes.

    ``batch_size`` None trains on all train rows per step; otherwise row mini-batches (row
    models only). ``seed`` drives initialisation, dropout and shuffling. Returns logits for every
    train/val/test node, computed with the best weights on that node's phase inputs.
    """
    idx = {phase: torch.from_numpy(np.flatnonzero(roles == phase)) for phase in PHASES}
    if batch_size is not None and inputs["train"].edge_index is not None:
        raise ValueError("row mini-batches need a row model (mlp or sign), not a graph model")
    history: list[dict] = []
    best = (-1.0, 0)
    started = time.perf_counter()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = build_model()
        best_state = copy.deepcopy(model.state_dict())
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        bar = progress(range(1, cfg.epochs + 1), desc="epochs", unit="ep")
        stale = 0
        for epoch in bar:
            model.train()
            train_rows = idx["train"]
            if batch_size is None:
                batches = [train_rows]
            else:
                batches = train_rows[torch.randperm(train_rows.numel())].split(batch_size)
            total_loss = 0.0
            for rows in batches:
                optimizer.zero_grad()
                loss = F.cross_entropy(_forward(model, inputs["train"], rows), y[rows])
                loss.backward()
                optimizer.step()
                total_loss += float(loss.detach()) * rows.numel()
            train_acc = _accuracy(model, inputs["train"], train_rows, y)
            val_acc = _accuracy(model, inputs["val"], idx["val"], y)
            history.append({"epoch": epoch, "train_loss": round(total_loss / train_rows.numel(), 6),
                            "train_acc": round(train_acc, 6), "val_acc": round(val_acc, 6)})
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{total_loss / train_rows.numel():.4f}", val=f"{val_acc:.4f}")
            if val_acc > best[0]:
                best, stale = (val_acc, epoch), 0
                best_state = copy.deepcopy(model.state_dict())
            else:
                stale += 1
                if stale >= cfg.patience:
                    break
    seconds = time.perf_counter() - started
    model.load_state_dict(best_state)
    model.eval()
    with torch.no_grad():
        logits = torch.cat([_forward(model, inputs[p], idx[p]) for p in PHASES]).float()
    node_id = torch.cat([idx[p] for p in PHASES])
    epochs_run = len(history)
    summary = {
        "best_epoch": best[1],
        "best_val_acc": round(best[0], 6),
        "epochs_run": epochs_run,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    perf = {"seconds": round(seconds, 3),
            "train_seeds_per_s": round(epochs_run * idx["train"].numel() / max(seconds, 1e-9), 1)}
    return TrainResult(node_id=node_id, logits=logits, state_dict=best_state, history=history,
                       summary=summary, perf=perf)


def build_inputs(x: torch.Tensor, message_graphs: dict | None = None,
                 hops: dict[str, list[torch.Tensor]] | None = None) -> dict[str, PhaseInput]:
    """Per-phase model inputs, sharing tensors between phases that share a graph.

    ``message_graphs`` (phase -> Csr) for graph models; ``hops`` (phase -> [X_0..X_K]) for sign;
    neither for the MLP. Exactly the phase's own message graph is used: no phase sees more.
    """
    if hops is not None:
        cache: dict[int, torch.Tensor] = {}
        out = {}
        for phase in PHASES:
            key = id(hops[phase][0])
            if key not in cache:
                cache[key] = torch.cat([h.float() for h in hops[phase]], dim=1)  # (N, (K+1)F)
            out[phase] = PhaseInput(cache[key])
        return out
    if message_graphs is None:
        return {phase: PhaseInput(x) for phase in PHASES}
    edges: dict[int, torch.Tensor] = {}
    for phase in PHASES:
        csr = message_graphs[phase]
        if id(csr) not in edges:
            edges[id(csr)] = csr.edge_index()
    return {phase: PhaseInput(x, edges[id(message_graphs[phase])]) for phase in PHASES}
