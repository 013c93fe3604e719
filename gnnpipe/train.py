"""Training loop shared by the GNN (train stage) and the MLP baseline (baseline stage).

Full-graph models run one forward over the phase's message graph per step; row models (mlp,
sign) see only node rows and need no graph; a ``loader`` gives sampled subgraphs instead (see
``_step`` for the three kinds of batch and what each one's loss covers). Early stopping keeps
the weights of the epoch with the best validation accuracy. Randomness comes only from the
given seed (``fork_rng`` keeps the caller's global RNG untouched).
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gnnpipe.config import BaselineParams
from gnnpipe.distributed import SINGLE, DistContext, all_reduce_sum, shard
from gnnpipe.sharding import gather_rows

PHASES = ("train", "val", "test")
FAULT_RANK_ENV = "GNNPIPE_FAULT_RAISE_ON_RANK"  # tests: this rank raises mid-epoch
COMPILE_BACKEND = "inductor"  # torch.compile backend (tests swap in one that fails)


@dataclass(frozen=True)
class PhaseInput:
    """What a model sees in one phase: ``x`` (N, D) and the phase's ``edge_index`` (2, E) or None."""

    x: torch.Tensor
    edge_index: torch.Tensor | None = None
    # gnnpipe.inference.LayerwiseInference: evaluation goes layer by layer over target blocks
    # (bounded memory; a collective under DDP) instead of one whole-graph forward
    layerwise: Callable | None = None


@dataclass
class TrainResult:
    node_id: torch.Tensor  # int64 (M,): train, val then test nodes
    logits: torch.Tensor  # float32 (M, C), each node scored on its own phase's graph
    state_dict: dict
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)  # deterministic for a fixed seed
    perf: dict = field(default_factory=dict)  # wall-clock figures, differ run to run
    perf_history: list[dict] = field(default_factory=list)  # per epoch: seeds/s, batches/s


def _forward(model: nn.Module, inputs: PhaseInput, rows: torch.Tensor) -> torch.Tensor:
    """Logits (len(rows), C) for ``rows``: graph models run on the whole phase graph."""
    if inputs.edge_index is None:
        return model(inputs.x[rows])
    return model(inputs.x, inputs.edge_index)[rows]


def _evaluate(model: nn.Module, inputs: PhaseInput, rows: torch.Tensor,
              ctx: DistContext) -> torch.Tensor:
    """``_forward`` without gradients, or layer by layer when ``inputs.layerwise`` is set (then
    every rank of ``ctx`` must call: the ranks share the blocks)."""
    if inputs.layerwise is not None:
        return inputs.layerwise(_unwrap(model), inputs.x, ctx)[rows]
    return _forward(model, inputs, rows)


def _unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside ``torch.compile`` and ``DistributedDataParallel`` wrappers."""
    while isinstance(getattr(model, "_orig_mod", None), nn.Module) or isinstance(
            model, DistributedDataParallel):
        model = model.module if isinstance(model, DistributedDataParallel) else model._orig_mod
    return model


def _step(model: nn.Module, inputs: PhaseInput | None, batch, y: torch.Tensor):
    """Logits (M, C), labels (M,) and loss weights (M,) or None (plain mean) of one step.

    ``batch`` is one of: a tensor of train rows (row models, or a full-graph forward);
    a seeds-first sampled subgraph (``neighbor``: loss on the ``batch.batch_size`` seeds); a
    batch of per-seed subgraphs with ``root_n_id`` (``shadow``: loss at the roots); a
    subgraph with a ``train_mask`` (``cluster``, ``saint``: loss on its train nodes), weighted
    by ``node_norm`` when it has one (``saint``), whose ``edge_norm`` goes in as ``edge_weight``
    to models that take one (PyG's ``supports_edge_weight``: gcn) and is left out otherwise.
    """
    if isinstance(batch, torch.Tensor):
        return _forward(model, inputs, batch), y[batch], None
    if "root_n_id" in batch:  # ShaDow: each seed's output is read at its subgraph's root
        roots = batch.root_n_id
        return model(batch.x, batch.edge_index)[roots], batch.y[roots], None
    if "train_mask" not in batch:
        seeds = batch.batch_size  # sampled subgraph: the first batch_size nodes are the seeds
        return model(batch.x, batch.edge_index)[:seeds], batch.y[:seeds], None
    kwargs = {}
    if "edge_norm" in batch and getattr(_unwrap(model), "supports_edge_weight", False):
        kwargs["edge_weight"] = batch.edge_norm
    mask = batch.train_mask
    logits = model(batch.x, batch.edge_index, **kwargs)[mask]
    return logits, batch.y[mask], batch.node_norm[mask] if "node_norm" in batch else None


def _loss(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Mean cross-entropy, or the ``weight``-ed sum (saint's node_norm: an unbiased estimate of
    the mean over all train nodes)."""
    if weight is None:
        return F.cross_entropy(logits, target)
    return (F.cross_entropy(logits.float(), target, reduction="none") * weight).sum()


@torch.no_grad()
def _accuracy(model: nn.Module, inputs: PhaseInput, rows: torch.Tensor, y: torch.Tensor,
              ctx: DistContext) -> float:
    """Accuracy over ``rows``; under DDP each rank scores its stride of rows and counts are summed."""
    model.eval()
    mine = rows[ctx.rank::ctx.world_size]
    collective = inputs.layerwise is not None  # every rank joins, even with no rows of its own
    correct = (_evaluate(model, inputs, mine, ctx).argmax(dim=1) == y[mine]).sum() if (
        mine.numel() or collective) else 0
    totals = all_reduce_sum(torch.tensor([float(correct), float(mine.numel())]), ctx)
    return float(totals[0] / totals[1])


class Evaluator(Protocol):
    """Scores the nodes one rank holds (``gnnpipe.sharding.ShardEvaluator``), for ``fit``."""

    def logits(self, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """``node_id`` (M,) and ``logits`` (M, C) of this rank's nodes, every phase at once."""


@torch.no_grad()
def _evaluator_accuracy(model: nn.Module, evaluator: Evaluator, roles: np.ndarray,
                        y: torch.Tensor, ctx: DistContext) -> tuple[float, float]:
    """Train and val accuracy over the nodes of every rank's evaluator, counts summed."""
    model.eval()
    node_id, logits = evaluator.logits(model)
    role = roles[node_id.numpy()]
    hit = (logits.argmax(dim=1) == y[node_id]).numpy()
    counts = [float(hit[role == phase].sum()) for phase in ("train", "val")]
    counts += [float((role == phase).sum()) for phase in ("train", "val")]
    totals = all_reduce_sum(torch.tensor(counts), ctx)
    return float(totals[0] / totals[2]), float(totals[1] / totals[3])


def _compile_failed(err: Exception) -> ValueError:
    """One line naming the root cause (dynamo wraps the backend's own error)."""
    inner: BaseException = err
    while getattr(inner, "inner_exception", None) is not None or inner.__cause__ is not None:
        inner = getattr(inner, "inner_exception", None) or inner.__cause__
    text = str(inner).strip()
    reason = text.splitlines()[0][:300] if text else "no message"
    return ValueError(f"train.compile=true: torch.compile failed on this machine "
                      f"({type(inner).__name__}: {reason}); set train.compile: false")


def _compile_errors() -> tuple[type, ...]:
    """What a failing torch.compile raises (dynamo wraps backend failures; inductor's own)."""
    import torch._dynamo  # noqa: F401 - only looked up once something has failed

    errors: list[type] = [torch._dynamo.exc.TorchDynamoException]
    inductor_error = getattr(getattr(torch, "_inductor", None), "exc", None)
    if inductor_error is not None and hasattr(inductor_error, "InductorError"):
        errors.append(inductor_error.InductorError)
    return tuple(errors)


@dataclass(frozen=True)
class Checkpointing:
    """How ``fit`` saves its state every ``every`` epochs (0: never) and what it resumes from."""

    every: int
    save: Callable[[dict], None]  # called on rank 0 with a weights_only-loadable payload
    resume_from: dict | None = None  # a payload an earlier, killed run saved


def epoch_seed(seed: int, epoch: int) -> int:
    """Each epoch reseeds torch from (seed, epoch): a resumed run draws exactly the same."""
    return int(np.random.default_rng([seed, epoch]).integers(0, 2**62))


def _set_loader_epoch(loader: Iterable | None, epoch: int) -> None:
    sampler = getattr(loader, "node_sampler", None)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)


def close_epoch(state: dict, best_key: str, score: float, epoch: int, model: nn.Module,
                optimizer: torch.optim.Optimizer, cfg: BaselineParams,
                checkpointing: Checkpointing | None, ctx: DistContext,
                extra: dict | None = None) -> bool:
    """Early-stopping bookkeeping of one finished epoch, shared by ``fit`` and ``fit_link``.

    Keeps the best weights by ``score`` (``state[best_key]``), counts stale epochs, checkpoints
    (rank 0, every ``checkpointing.every`` epochs and at the end; ``extra`` entries are saved
    after model and optimizer) and returns True when training stops.
    """
    if score > state[best_key]:
        state.update({best_key: score, "best_epoch": epoch, "stale": 0,
                      "best_state": copy.deepcopy(model.state_dict())})
    else:
        state["stale"] += 1
    state["epoch"] = epoch
    done = state["stale"] >= cfg.patience or epoch == cfg.epochs
    if checkpointing and checkpointing.every and ctx.is_main and (
            epoch % checkpointing.every == 0 or done):
        checkpointing.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            **(extra or {}), **state})
    return done


def fit(build_model: Callable[[], nn.Module], inputs: dict[str, PhaseInput] | None,
        y: torch.Tensor, roles: np.ndarray, cfg: BaselineParams, seed: int, *,
        batch_size: int | None = None, loader: Iterable | None = None,
        progress: Callable[[Iterable], Iterable] = lambda it, **_: it,
        ctx: DistContext = SINGLE, checkpointing: Checkpointing | None = None,
        evaluator: Evaluator | None = None, amp: bool = False,
        compile_model: bool = False) -> TrainResult:
    """Build a model with ``build_model()``, train it on the train nodes of ``roles`` and
    early-stop on the val nodes.

    ``batch_size`` None trains on all train rows per step; otherwise row mini-batches (row
    models only). ``loader`` (e.g. ``gnnpipe.sampling.neighbor_loader``) replaces both: each
    epoch iterates it for sampled subgraph batches, seeds first, the loss on the
    ``batch.batch_size`` seeds only. Evaluation stays a full-graph forward on each phase's
    message graph (layer by layer over blocks, split across ranks, for inputs built with a
    ``layerwise`` engine: gnnpipe/inference.py). ``seed`` drives initialisation, and with the
    epoch number dropout, shuffling and sampling. Under DDP (``ctx``) every rank trains on an
    equal share of the seeds (the caller shards a ``loader``'s seeds), gradients are averaged
    and metrics summed across ranks; only rank 0's result carries logits. Returns logits for
    every train/val/test node, computed with the best weights on that node's phase inputs.

    ``evaluator`` (with a ``loader``; ``inputs`` may then be None) replaces the full-graph
    evaluation: each rank scores the nodes it holds and rank 0 gathers the logits
    (``train.dist.shard: partition``). A loader with a ``skipped`` attribute reports the empty
    batches it skipped in the epoch (cluster); their total is ``summary["empty_batches_skipped"]``.
    ``amp`` runs the training forward under ``torch.autocast`` (bfloat16 on CPU; float16 with a
    ``GradScaler`` on CUDA); evaluation stays float32. ``compile_model`` trains through
    ``torch.compile(..., dynamic=True)`` and turns a compiler failure into a one-line
    ValueError. ``perf_history`` gets one row of wall-clock throughput per epoch.
    """
    idx = {phase: torch.from_numpy(np.flatnonzero(roles == phase)) for phase in PHASES}
    if batch_size is not None and inputs["train"].edge_index is not None:
        raise ValueError("row mini-batches need a row model (mlp or sign), not a graph model")
    if evaluator is not None and loader is None:
        raise ValueError("an evaluator needs a loader: the rank holds no whole graph to train on")
    started = time.perf_counter()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = build_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        device = next(model.parameters()).device.type
        scaler = torch.amp.GradScaler(device) if amp and device == "cuda" else None
        state = {"epoch": 0, "best_val": -1.0, "best_epoch": 0, "stale": 0, "history": [],
                 "best_state": copy.deepcopy(model.state_dict()), "skipped": 0}
        resume = checkpointing.resume_from if checkpointing else None
        if resume is not None:
            model.load_state_dict(resume["model"])
            optimizer.load_state_dict(resume["optimizer"])
            if scaler is not None and resume.get("scaler"):
                scaler.load_state_dict(resume["scaler"])
            state = {key: resume.get(key, value) for key, value in state.items()}
        trained = DistributedDataParallel(model) if ctx.world_size > 1 else model
        if compile_model:
            trained = torch.compile(trained, dynamic=True, backend=COMPILE_BACKEND)
        amp_dtype = torch.bfloat16 if device == "cpu" else torch.float16
        autocast = torch.autocast(device, dtype=amp_dtype, enabled=amp)
        perf_history = []
        first = state["epoch"] + 1 if state["stale"] < cfg.patience else cfg.epochs + 1
        bar = progress(range(first, cfg.epochs + 1), desc="epochs", unit="ep")
        for epoch in bar:
            epoch_started = time.perf_counter()
            this_epoch_seed = epoch_seed(seed, epoch)
            torch.manual_seed(this_epoch_seed)
            trained.train()
            if loader is not None:
                _set_loader_epoch(loader, epoch)
                batches = loader
            else:
                order = torch.Generator().manual_seed(this_epoch_seed) if batch_size else None
                rows = shard(idx["train"], ctx, order)  # the same permutation on every rank
                batches = [rows] if batch_size is None else rows.split(batch_size)
            loss_sum, seen, steps = 0.0, 0, 0
            for batch in batches:
                optimizer.zero_grad()
                try:
                    with autocast:
                        logits, target, weight = _step(
                            trained, None if inputs is None else inputs["train"], batch, y)
                        loss = _loss(logits, target, weight)
                except _compile_errors() as err:
                    if not compile_model:
                        raise
                    raise _compile_failed(err) from None
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    loss.backward()
                    optimizer.step()
                loss_sum += float(loss.detach()) * target.numel()
                seen += target.numel()
                steps += 1
            if ctx.world_size > 1 and os.environ.get(FAULT_RANK_ENV) == str(ctx.rank):
                raise RuntimeError(f"injected failure on rank {ctx.rank} ({FAULT_RANK_ENV})")
            skipped = float(getattr(loader, "skipped", 0))  # empty batches (cluster), this rank
            totals = all_reduce_sum(torch.tensor([loss_sum, float(seen), skipped]), ctx)
            train_loss = float(totals[0] / totals[1])
            state["skipped"] += int(totals[2])
            train_seconds = time.perf_counter() - epoch_started
            if evaluator is not None:
                train_acc, val_acc = _evaluator_accuracy(model, evaluator, roles, y, ctx)
            else:
                train_acc = _accuracy(model, inputs["train"], idx["train"], y, ctx)
                val_acc = _accuracy(model, inputs["val"], idx["val"], y, ctx)
            perf_history.append({
                "epoch": epoch, "train_seconds": round(train_seconds, 4),
                "eval_seconds": round(time.perf_counter() - epoch_started - train_seconds, 4),
                "batches": steps, "seeds": int(totals[1]),  # batches per rank, seeds all ranks
                "seeds_per_s": round(float(totals[1]) / max(train_seconds, 1e-9), 1),
                "batches_per_s": round(steps / max(train_seconds, 1e-9), 3)})
            state["history"].append({"epoch": epoch, "train_loss": round(train_loss, 6),
                                     "train_acc": round(train_acc, 6), "val_acc": round(val_acc, 6)})
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{train_loss:.4f}", val=f"{val_acc:.4f}")
            done = close_epoch(state, "best_val", val_acc, epoch, model, optimizer, cfg,
                               checkpointing, ctx,
                               extra={"scaler": scaler.state_dict() if scaler else {}})
            if done:
                break
    seconds = time.perf_counter() - started
    model.load_state_dict(state["best_state"])
    model.eval()
    node_id = torch.cat([idx[p] for p in PHASES])
    if evaluator is not None:  # every rank scores its nodes; rank 0 puts them in node_id order
        with torch.no_grad():
            held, held_logits = gather_rows(*evaluator.logits(model), ctx)
        logits = torch.empty(0)
        if ctx.is_main:
            full = torch.full((y.numel(), held_logits.shape[1]), float("nan"))
            full[held] = held_logits
            logits = full[node_id]
            if bool(torch.isnan(logits).any()):
                raise ValueError("the partition shards do not cover every split node; re-run "
                                 "the partition stage on this split")
    elif ctx.is_main or any(inputs[p].layerwise is not None for p in PHASES):
        with torch.no_grad():  # layer-wise: all ranks compute, only rank 0 keeps the logits
            logits = torch.cat([_evaluate(model, inputs[p], idx[p], ctx) for p in PHASES]).float()
        logits = logits if ctx.is_main else torch.empty(0)
    else:  # only rank 0 writes artifacts
        logits = torch.empty(0)
    history = state["history"]
    summary = {
        "best_epoch": state["best_epoch"],
        "best_val_acc": round(state["best_val"], 6),
        "epochs_run": len(history),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    if hasattr(loader, "skipped"):
        summary["empty_batches_skipped"] = int(state["skipped"])
    epochs_here = len(history) - (resume["epoch"] if resume is not None else 0)
    perf = {"seconds": round(seconds, 3), "world_size": ctx.world_size,
            "train_seeds_per_s": round(epochs_here * idx["train"].numel() / max(seconds, 1e-9), 1)}
    if inputs is not None and any(inputs[p].layerwise is not None for p in PHASES):
        perf["eval_inference"] = "layerwise"  # train.inference (auto chose it for a big graph)
    return TrainResult(node_id=node_id, logits=logits, state_dict=state["best_state"],
                       history=history, summary=summary, perf=perf, perf_history=perf_history)


def build_inputs(x: torch.Tensor, message_graphs: dict | None = None,
                 hops: dict[str, list[torch.Tensor]] | None = None,
                 cfg=None) -> dict[str, PhaseInput]:
    """Per-phase model inputs, sharing tensors between phases that share a graph.

    ``message_graphs`` (phase -> Csr) for graph models; ``hops`` (phase -> [X_0..X_K]) for sign;
    neither for the MLP. Exactly the phase's own message graph is used: no phase sees more.
    ``cfg`` (TrainParams) picks the evaluation forward per graph (``train.inference``, see
    ``gnnpipe.inference.plan``); None: full-graph forwards.
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
    from gnnpipe.inference import plan  # imports PyG: only for graph models

    edges: dict[int, torch.Tensor] = {}
    engines: dict[int, Callable | None] = {}
    for phase in PHASES:
        csr = message_graphs[phase]
        if id(csr) not in edges:
            edges[id(csr)] = csr.edge_index()
            engines[id(csr)] = plan(csr, x.shape[1], cfg) if cfg is not None else None
    return {phase: PhaseInput(x, edges[id(message_graphs[phase])],
                              engines[id(message_graphs[phase])]) for phase in PHASES}
