"""Training loop shared by the GNN (train stage) and the MLP baseline (baseline stage).

Full-graph models run one forward over the phase's message graph per step; row models (mlp,
sign) see only node rows and need no graph. Early stopping keeps the weights of the epoch with
the best validation accuracy. Randomness comes only from the given seed (``fork_rng`` keeps the
caller's global RNG untouched).
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gnnpipe.config import BaselineParams
from gnnpipe.distributed import SINGLE, DistContext, all_reduce_sum, shard

PHASES = ("train", "val", "test")
FAULT_RANK_ENV = "GNNPIPE_FAULT_RAISE_ON_RANK"  # tests: this rank raises mid-epoch


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


def _step(model: nn.Module, inputs: PhaseInput, batch, y: torch.Tensor):
    """Logits and labels of one training step: ``batch`` is train rows or a sampled subgraph."""
    if isinstance(batch, torch.Tensor):
        return _forward(model, inputs, batch), y[batch]
    seeds = batch.batch_size  # sampled subgraph: the first batch_size nodes are the seeds
    return model(batch.x, batch.edge_index)[:seeds], batch.y[:seeds]


@torch.no_grad()
def _accuracy(model: nn.Module, inputs: PhaseInput, rows: torch.Tensor, y: torch.Tensor,
              ctx: DistContext) -> float:
    """Accuracy over ``rows``; under DDP each rank scores its stride of rows and counts are summed."""
    model.eval()
    mine = rows[ctx.rank::ctx.world_size]
    correct = (_forward(model, inputs, mine).argmax(dim=1) == y[mine]).sum() if mine.numel() else 0
    totals = all_reduce_sum(torch.tensor([float(correct), float(mine.numel())]), ctx)
    return float(totals[0] / totals[1])


@dataclass(frozen=True)
class Checkpointing:
    """How ``fit`` saves its state every ``every`` epochs (0: never) and what it resumes from."""

    every: int
    save: Callable[[dict], None]  # called on rank 0 with a weights_only-loadable payload
    resume_from: dict | None = None  # a payload an earlier, killed run saved


def _epoch_seed(seed: int, epoch: int) -> int:
    """Each epoch reseeds torch from (seed, epoch): a resumed run draws exactly the same."""
    return int(np.random.default_rng([seed, epoch]).integers(0, 2**62))


def _set_loader_epoch(loader: Iterable | None, epoch: int) -> None:
    sampler = getattr(loader, "node_sampler", None)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)


def fit(build_model: Callable[[], nn.Module], inputs: dict[str, PhaseInput], y: torch.Tensor,
        roles: np.ndarray, cfg: BaselineParams, seed: int, *, batch_size: int | None = None,
        loader: Iterable | None = None,
        progress: Callable[[Iterable], Iterable] = lambda it, **_: it,
        ctx: DistContext = SINGLE, checkpointing: Checkpointing | None = None) -> TrainResult:
    """Build a model with ``build_model()``, train it on the train nodes of ``roles`` and
    early-stop on the val nodes.

    ``batch_size`` None trains on all train rows per step; otherwise row mini-batches (row
    models only). ``loader`` (e.g. ``gnnpipe.sampling.neighbor_loader``) replaces both: each
    epoch iterates it for sampled subgraph batches, seeds first, the loss on the
    ``batch.batch_size`` seeds only. Evaluation stays a full-graph forward on each phase's
    message graph. ``seed`` drives initialisation, and with the epoch number dropout, shuffling
    and sampling. Under DDP (``ctx``) every rank trains on an equal share of the seeds (the
    caller shards a ``loader``'s seeds), gradients are averaged and metrics summed across ranks;
    only rank 0's result carries logits. Returns logits for every train/val/test node, computed
    with the best weights on that node's phase inputs.
    """
    idx = {phase: torch.from_numpy(np.flatnonzero(roles == phase)) for phase in PHASES}
    if batch_size is not None and inputs["train"].edge_index is not None:
        raise ValueError("row mini-batches need a row model (mlp or sign), not a graph model")
    started = time.perf_counter()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = build_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        state = {"epoch": 0, "best_val": -1.0, "best_epoch": 0, "stale": 0, "history": [],
                 "best_state": copy.deepcopy(model.state_dict())}
        resume = checkpointing.resume_from if checkpointing else None
        if resume is not None:
            model.load_state_dict(resume["model"])
            optimizer.load_state_dict(resume["optimizer"])
            state = {key: resume[key] for key in state}
        trained = DistributedDataParallel(model) if ctx.world_size > 1 else model
        first = state["epoch"] + 1 if state["stale"] < cfg.patience else cfg.epochs + 1
        bar = progress(range(first, cfg.epochs + 1), desc="epochs", unit="ep")
        for epoch in bar:
            epoch_seed = _epoch_seed(seed, epoch)
            torch.manual_seed(epoch_seed)
            trained.train()
            if loader is not None:
                _set_loader_epoch(loader, epoch)
                batches = loader
            else:
                order = torch.Generator().manual_seed(epoch_seed) if batch_size else None
                rows = shard(idx["train"], ctx, order)  # the same permutation on every rank
                batches = [rows] if batch_size is None else rows.split(batch_size)
            loss_sum, seen = 0.0, 0
            for batch in batches:
                optimizer.zero_grad()
                logits, target = _step(trained, inputs["train"], batch, y)
                loss = F.cross_entropy(logits, target)
                loss.backward()
                optimizer.step()
                loss_sum += float(loss.detach()) * target.numel()
                seen += target.numel()
            if ctx.world_size > 1 and os.environ.get(FAULT_RANK_ENV) == str(ctx.rank):
                raise RuntimeError(f"injected failure on rank {ctx.rank} ({FAULT_RANK_ENV})")
            totals = all_reduce_sum(torch.tensor([loss_sum, float(seen)]), ctx)
            train_loss = float(totals[0] / totals[1])
            train_acc = _accuracy(model, inputs["train"], idx["train"], y, ctx)
            val_acc = _accuracy(model, inputs["val"], idx["val"], y, ctx)
            state["history"].append({"epoch": epoch, "train_loss": round(train_loss, 6),
                                     "train_acc": round(train_acc, 6), "val_acc": round(val_acc, 6)})
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{train_loss:.4f}", val=f"{val_acc:.4f}")
            if val_acc > state["best_val"]:
                state.update(best_val=val_acc, best_epoch=epoch, stale=0,
                             best_state=copy.deepcopy(model.state_dict()))
            else:
                state["stale"] += 1
            state["epoch"] = epoch
            done = state["stale"] >= cfg.patience or epoch == cfg.epochs
            if checkpointing and checkpointing.every and ctx.is_main and (
                    epoch % checkpointing.every == 0 or done):
                checkpointing.save({"model": model.state_dict(),
                                    "optimizer": optimizer.state_dict(), **state})
            if done:
                break
    seconds = time.perf_counter() - started
    model.load_state_dict(state["best_state"])
    model.eval()
    node_id = torch.cat([idx[p] for p in PHASES])
    if ctx.is_main:
        with torch.no_grad():
            logits = torch.cat([_forward(model, inputs[p], idx[p]) for p in PHASES]).float()
    else:  # only rank 0 writes artifacts
        logits = torch.empty(0)
    history = state["history"]
    summary = {
        "best_epoch": state["best_epoch"],
        "best_val_acc": round(state["best_val"], 6),
        "epochs_run": len(history),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    epochs_here = len(history) - (resume["epoch"] if resume is not None else 0)
    perf = {"seconds": round(seconds, 3), "world_size": ctx.world_size,
            "train_seeds_per_s": round(epochs_here * idx["train"].numel() / max(seconds, 1e-9), 1)}
    return TrainResult(node_id=node_id, logits=logits, state_dict=state["best_state"],
                       history=history, summary=summary, perf=perf)


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
