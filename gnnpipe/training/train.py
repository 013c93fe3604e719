"""Node classification for the GNN (train stage) and the MLP baseline (baseline stage): the
``NodeTask`` hooks of the one loop (gnnpipe/training/loop.py) and ``fit``, which runs it.

Full-graph models run one forward over the phase's message graph per step; row models (mlp,
sign) see only node rows and need no graph; a ``loader`` gives sampled subgraphs instead, each a
``LossBatch`` that names the rows its loss covers (gnnpipe/sampling/batch.py). Early stopping keeps
the weights of the epoch with the best validation value of the run's metric (``Objective``:
``evaluate.metric`` resolved by ``node_objective``, the same rule in train and baseline), and
``train.class_weight: balanced`` weighs each class's cross-entropy. Randomness comes only from
the given seed (``fork_rng`` keeps the caller's global RNG untouched).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gnnpipe.training import device as devices
from gnnpipe.training import loop
from gnnpipe.config import FitParams
from gnnpipe.data.graph import ROLE_CODES
from gnnpipe.io.common import PHASES
from gnnpipe.reporting.node_metric import class_counts, node_metric, resolve_metric
from gnnpipe.io.tensors import gathered_rows, rows_table
from gnnpipe.training.distributed import SINGLE, DistContext, all_reduce_sum, shard
from gnnpipe.training.loop import LoopOptions, epoch_seed
# gnnpipe.training.inference and .models (PyG, about 2 s) are imported where they run: the
# baseline's MLP fit and gbdt (block_fit, gbdt) use this module without PyG
from gnnpipe.training.sharding import gather_objects

TRAIN, VAL, UNUSED = ROLE_CODES["train"], ROLE_CODES["val"], ROLE_CODES["unused"]


@dataclass(frozen=True)
class Objective:
    """What a node fit minimises and early-stops on, one for the GNN (train) and the
    structure-free baselines (baseline), so their comparison stays fair.

    ``metric``: a concrete name of ``gnnpipe.reporting.node_metric.NODE_METRICS``; early stopping
    keeps the epoch of its best val value (``accuracy``: exactly as before the metric existed).
    ``class_weight``: float32 (C,) cross-entropy weight of each class (``train.class_weight:
    balanced``), None = the plain mean."""

    metric: str = "accuracy"
    class_weight: torch.Tensor | None = None

    @property
    def monitor(self) -> str:
        """The history column early stopping maximises: ``val_acc`` or ``val_<metric>``."""
        return "val_acc" if self.metric == "accuracy" else f"val_{self.metric}"


def balanced_weights(train_counts: np.ndarray) -> torch.Tensor:
    """float32 (C,) sklearn's ``balanced`` weights of the train class counts (C,): n_train /
    (C_train x count_c), C_train the classes present in train, so the mean weight over the
    train nodes is exactly 1 (the loss keeps its scale, and saint's node_norm-weighted sum stays
    an unbiased estimate of the full weighted mean). A class absent from train gets 0: no train
    node carries it, so its weight never enters a loss."""
    counts = np.asarray(train_counts, dtype=np.float64)
    present = counts > 0
    weights = np.zeros(counts.size)
    weights[present] = counts.sum() / (present.sum() * counts[present])
    return torch.from_numpy(weights.astype(np.float32))


def node_objective(metric: str, class_weight: str, y: torch.Tensor, roles: np.ndarray,
                   num_classes: int, ctx: DistContext = SINGLE) -> Objective:
    """The ``Objective`` of a node fit from ``evaluate.metric`` (``metric``) and
    ``train.class_weight`` (``class_weight``): the metric resolved
    (``gnnpipe.reporting.node_metric.resolve_metric``) on the labelled train, val and test nodes,
    the weights from the labelled train nodes. ``y`` int64 (N,) and ``roles`` int8 (N,) role
    codes of the (target) type's nodes; ``ctx``: each rank holds a disjoint share of them
    (``train.dist.shard: partition``) and the counts are summed over ranks (a collective),
    SINGLE when every rank holds every node."""
    counts = all_reduce_sum(torch.from_numpy(np.stack([
        class_counts(y, roles, num_classes),
        class_counts(y, roles, num_classes, (TRAIN,))])).double(), ctx).long().numpy()
    labelled, train = counts
    resolved = resolve_metric(metric, labelled)
    return Objective(resolved, balanced_weights(train) if class_weight == "balanced" else None)


def objective_for(params, y: torch.Tensor, roles: np.ndarray, num_classes: int,
                  ctx: DistContext = SINGLE) -> Objective:
    """``node_objective`` of ``params`` (``evaluate.metric``, ``train.class_weight``): what the
    train and baseline stages both call."""
    return node_objective(params.evaluate.metric, params.train.class_weight, y, roles,
                          num_classes, ctx)


def best_scores(state: dict, metric: str) -> dict:
    """Summary entries of a node fit's loop ``state``: ``best_val_acc`` (val accuracy at the
    best epoch), ``metric`` and ``best_val`` (its best val value, what early stopping kept)."""
    best = round(state["best_val"], 6)
    if metric == "accuracy":
        return {"best_val_acc": best, "metric": metric, "best_val": best}
    row = next(r for r in state["history"] if r["epoch"] == state["best_epoch"])
    return {"best_val_acc": row["val_acc"], "metric": metric, "best_val": best}


def phase_index(roles: np.ndarray) -> dict[str, torch.Tensor]:
    """Ascending node ids int64 (N_phase,) of each phase of ``roles``, int8 role codes (N,)
    (``gnnpipe.data.graph.ROLE_CODES``)."""
    assert roles.dtype == np.int8, f"roles must be int8 role codes, not {roles.dtype}"
    return {phase: torch.from_numpy(np.flatnonzero(roles == ROLE_CODES[phase]))
            for phase in PHASES}


@dataclass(frozen=True)
class PhaseInput:
    """What a model sees in one phase: ``x`` (N, D) and the phase's ``edge_index`` (2, E) or None."""

    x: torch.Tensor
    edge_index: torch.Tensor | None = None
    # gnnpipe.training.inference.LayerwiseInference: evaluation goes layer by layer over target
    # blocks (bounded memory; a collective under DDP) instead of one whole-graph forward
    layerwise: Callable | None = None
    # x as it was on the CPU, kept when ``x`` moved to an accelerator: the layer-wise engine
    # reads it (one object every epoch, as its memo expects), None = ``x`` is on the CPU
    host_x: object = None


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
    every rank of ``ctx`` must call: the ranks share the blocks; the engine computes on the CPU,
    from a CPU copy of the model and features when they are on an accelerator)."""
    if inputs.layerwise is not None:
        return layerwise_output(model, inputs, ctx, rows)
    return _forward(model, inputs, rows)


def layerwise_output(model: nn.Module, inputs: PhaseInput, ctx: DistContext,
                     rows: torch.Tensor | None = None) -> torch.Tensor:
    """``inputs.layerwise`` (rows ``rows``, or all) on the CPU: the model's CPU twin and the
    phase's CPU features (``host_x``, the same objects each call: the engine's memo keys on
    them), the output moved to where the model is, as a forward's would be."""
    user = _unwrap(model)
    x = devices.to_cpu(inputs.x) if inputs.host_x is None else inputs.host_x
    out = inputs.layerwise(devices.on_cpu(user), x, ctx)
    return devices.to_device(out if rows is None else out[rows], devices.model_device(user),
                             pin=False)


def _unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside ``torch.compile`` and ``DistributedDataParallel`` wrappers."""
    while isinstance(getattr(model, "_orig_mod", None), nn.Module) or isinstance(
            model, DistributedDataParallel):
        model = model.module if isinstance(model, DistributedDataParallel) else model._orig_mod
    return model


def _step(model: nn.Module, inputs: PhaseInput | None, batch, y: torch.Tensor):
    """Logits (M, C), labels (M,) and loss weights (M,) or None (plain mean) of one step.

    ``batch`` is a tensor of train rows (the task's own batches: row models, or a full-graph
    forward over ``inputs``) or a loader's ``LossBatch``, which names its loss rows, their
    labels and weights (gnnpipe/sampling/batch.py)."""
    if isinstance(batch, torch.Tensor):
        return _forward(model, inputs, batch), y[batch], None
    return batch_output(model, batch)[batch.rows], batch.target, batch.weight


def batch_output(model: nn.Module, batch) -> torch.Tensor:
    """``model`` over a ``gnnpipe.sampling.batch.LossBatch``'s subgraph: every output row (n, C).
    Per-hop counts trim each layer to what the loss rows need (gnnpipe.training.models);
    ``edge_weight`` goes to models that take one (PyG's ``supports_edge_weight``: gcn) and is left
    out otherwise."""
    from gnnpipe.training.models import trim_kwargs

    user = _unwrap(model)
    kwargs = trim_kwargs(user, batch)
    if batch.edge_weight is not None and getattr(user, "supports_edge_weight", False):
        kwargs["edge_weight"] = batch.edge_weight
    return model(batch.x, batch.edge_index, **kwargs)


def _loss(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
          class_weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy, or the ``weight``-ed sum (saint's node_norm: an unbiased estimate of
    the mean over all train nodes). ``class_weight`` (C,) (``train.class_weight: balanced``):
    the mean is PyTorch's weighted one, sum_i w[y_i] l_i / sum_i w[y_i]; the ``weight``-ed sum
    multiplies each node's term by w[y_i] (the mean of w[y] over the train nodes is 1,
    ``balanced_weights``, so it estimates the same full weighted mean)."""
    if weight is None:
        return F.cross_entropy(logits, target, weight=class_weight)
    per_node = F.cross_entropy(logits.float(), target, reduction="none")
    if class_weight is not None:
        per_node = per_node * class_weight[target]
    return (per_node * weight).sum()


SCORED_ROWS = 1 << 16  # logit rows turned into correct counts at a time


def _phase_outputs(model: nn.Module, inputs: dict[str, PhaseInput],
                   rows: dict[str, torch.Tensor], ctx: DistContext) -> dict[str, torch.Tensor]:
    """``_evaluate`` of each phase's ``rows`` (phase -> logits (len(rows), C)). Phases whose
    graph-model inputs are the same tensors (a transductive split: one message graph) share one
    whole-graph forward, the forward each would run alone; row models run per phase."""
    out: dict[str, torch.Tensor] = {}
    groups: dict[tuple[int, int, int], list[str]] = {}
    for phase, mine in rows.items():
        given = inputs[phase]
        if given.edge_index is None:
            out[phase] = _evaluate(model, given, mine, ctx)
        else:
            groups.setdefault((id(given.x), id(given.edge_index), id(given.layerwise)),
                              []).append(phase)
    for phases in groups.values():
        given = inputs[phases[0]]
        if given.layerwise is not None:  # a collective: every rank joins, rows or not
            full = layerwise_output(model, given, ctx)
        elif any(rows[p].numel() for p in phases):
            full = model(given.x, given.edge_index)  # (N, C): the rows are sliced below
        else:
            full = None
        for phase in phases:
            out[phase] = torch.empty(0) if full is None else _rows_of(full, rows[phase],
                                                                    given.layerwise is not None)
    return {phase: out[phase] for phase in rows}


def _rows_of(full: torch.Tensor, rows: torch.Tensor, mapped: bool) -> torch.Tensor:
    """``full[rows]``; of a layer-wise table (on the CPU) into a mapped scratch table
    (``io.gathered_rows``): an epoch's train and val logits are no anonymous memory (8M nodes,
    25% of them split: 48 MB a score), the same values."""
    return gathered_rows(full, rows) if mapped and full.device.type == "cpu" else full[rows]


@torch.no_grad()
def _accuracies(model: nn.Module, inputs: dict[str, PhaseInput], idx: dict[str, torch.Tensor],
                y: torch.Tensor, ctx: DistContext, phases: tuple[str, ...],
                metric: str = "accuracy") -> list[float]:
    """Accuracy over ``idx[phase]`` of each of ``phases``; under DDP each rank scores its
    stride of rows and counts are summed. A ``metric`` other than accuracy appends its value
    over the val nodes (``_val_metric``: every rank's val logits gathered; ``phases`` must hold
    ``val``)."""
    model.eval()
    mine = {phase: idx[phase][ctx.rank::ctx.world_size] for phase in phases}
    logits = _phase_outputs(model, inputs, mine, ctx)
    counts = []
    for phase in phases:
        # y stays on the CPU: predictions come back (layer-wise ones are there already); by
        # row blocks, so no (T,) int64 temporaries of millions of rows
        correct = sum(int((logits[phase][a:a + SCORED_ROWS].argmax(dim=1).cpu()
                           == y[mine[phase][a:a + SCORED_ROWS]]).sum())
                      for a in range(0, mine[phase].numel(), SCORED_ROWS))
        counts += [float(correct), float(mine[phase].numel())]
    totals = all_reduce_sum(torch.tensor(counts), ctx)
    out = [float(totals[2 * i] / totals[2 * i + 1]) for i in range(len(phases))]
    if metric != "accuracy":
        out.append(_val_metric(metric, mine["val"], logits["val"], y[mine["val"]], ctx))
    return out


def _val_metric(metric: str, node_id: torch.Tensor, logits: torch.Tensor, y: torch.Tensor,
                ctx: DistContext) -> float:
    """``metric`` (``gnnpipe.reporting.node_metric.node_metric``) over every rank's val nodes,
    the same value on every rank: ``node_id`` (V_r,), ``logits`` (V_r, C) and labels ``y``
    (V_r,) are this rank's share. A ranking metric or macro-F1 is no sum of per-rank counts, so
    under DDP the shares are gathered to every rank (a val set is small next to the graph: V x C
    floats) and ordered by node id, so the value does not depend on the world size."""
    logits = logits.detach().float().cpu()
    if ctx.world_size > 1:
        shares = [s for s in gather_objects((node_id.cpu(), logits, y.cpu()), ctx)
                  if s[0].numel()]
        node_id, logits, y = (torch.cat([s[i] for s in shares]) for i in range(3))
        order = torch.argsort(node_id)
        logits, y = logits[order], y[order]
    return node_metric(metric, y.numpy(), logits, int(logits.shape[1]))


class Evaluator(Protocol):
    """Scores the nodes one rank holds (``gnnpipe.training.sharding.ShardEvaluator``), for
    ``fit``; it holds their labels and roles, so the rank needs no array of every node."""

    def logits(self, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """``node_id`` (M,) and ``logits`` (M, C) of this rank's nodes, every phase at once."""

    def targets(self) -> tuple[torch.Tensor, np.ndarray]:
        """Labels int64 (M,) and role codes int8 (M,) (``ROLE_CODES``) of the nodes ``logits``
        returns, in its order."""


@torch.no_grad()
def _evaluator_accuracy(model: nn.Module, evaluator: Evaluator, ctx: DistContext,
                        metric: str = "accuracy") -> list[float]:
    """Train and val accuracy over the nodes of every rank's evaluator, counts summed; a
    ``metric`` other than accuracy appends its val value (``_val_metric``)."""
    model.eval()
    node_id, logits = evaluator.logits(devices.on_cpu(model))  # shards hold CPU tensors
    y, role = evaluator.targets()
    hit = (logits.argmax(dim=1) == y).numpy()
    counts = [float(hit[role == code].sum()) for code in (TRAIN, VAL)]
    counts += [float((role == code).sum()) for code in (TRAIN, VAL)]
    totals = all_reduce_sum(torch.tensor(counts), ctx)
    out = [float(totals[0] / totals[2]), float(totals[1] / totals[3])]
    if metric != "accuracy":
        val = torch.from_numpy(role == VAL)
        out.append(_val_metric(metric, node_id[val], logits[val], y[val], ctx))
    return out


def resolve_aggregation(model: nn.Module, loss: Callable[[nn.Module], torch.Tensor]
                        ) -> dict[str, float] | None:
    """``train.aggregation: timed``: on the first step, time ``loss(model)`` (forward and
    backward, the user's module: no DDP collective) with scatter and csr and keep the faster
    (``gnnpipe.training.models.choose_aggregation``); the seconds of each, or None when nothing was
    left to choose."""
    user = _unwrap(model)
    if getattr(user, "aggregation", None) != "timed":
        return None
    from gnnpipe.training.models import choose_aggregation  # a graph model: PyG is loaded

    return choose_aggregation(user, lambda: loss(user))


class NodeTask:
    """Node classification hooks for ``loop.run`` (see ``fit``): cross-entropy on the train
    nodes (class-weighted by ``objective.class_weight``), early stopping on the val value of
    ``objective.metric`` (``monitor``: ``val_acc`` for accuracy, else ``val_<metric>``)."""

    best_key, monitor, counters = "best_val", "val_acc", ("skipped",)
    examples_per_seed, saves_scaler = 1, True

    def __init__(self, inputs: dict[str, PhaseInput] | None, y: torch.Tensor | None,
                 roles: np.ndarray | None, batch_size: int | None = None,
                 loader: Iterable | None = None, ctx: DistContext = SINGLE,
                 evaluator: Evaluator | None = None, objective: Objective = Objective()):
        self.inputs, self.y, self.ctx = inputs, y, ctx
        self.batch_size, self.loader, self.evaluator = batch_size, loader, evaluator
        self.objective, self.monitor = objective, objective.monitor
        self.class_weight = objective.class_weight  # (C,) on the device after place
        # an evaluator holds its nodes' labels and roles (y, roles None): no phase ids here
        self.idx = phase_index(roles) if roles is not None else {}
        self.aggregation_seconds: dict[str, float] = {}  # train.aggregation: timed's timings
        self.step_y = y  # labels the steps of row batches index (on the device after place)

    def place(self, device: torch.device) -> None:
        """Whole-graph inputs and the labels steps read go to ``device``; ``y`` and ``idx``
        stay on the CPU for scoring and for the node ids of the outputs."""
        if self.inputs is not None:
            memo: dict = {}  # phases share x and often edge_index: each tensor moves once
            self.inputs = {p: _placed(i, device, memo) for p, i in self.inputs.items()}
        self.step_y = None if self.y is None else devices.to_device(self.y, device, pin=False)
        if self.class_weight is not None:
            self.class_weight = devices.to_device(self.class_weight, device, pin=False)

    def batches(self, epoch: int, seed: int) -> Iterable:
        if self.loader is not None:
            _set_loader_epoch(self.loader, epoch)
            return self.loader
        order = (torch.Generator().manual_seed(epoch_seed(seed, epoch)) if self.batch_size
                 else None)
        rows = shard(self.idx["train"], self.ctx, order)  # the same permutation on every rank
        return [rows] if self.batch_size is None else rows.split(self.batch_size)

    def step(self, model: nn.Module, batch) -> tuple[torch.Tensor, int]:
        inputs = None if self.inputs is None else self.inputs["train"]
        y, weight = self.step_y, self.class_weight
        self.aggregation_seconds = resolve_aggregation(
            model, lambda m: node_step(m, batch, inputs, y, weight)[0]) or self.aggregation_seconds
        return node_step(model, batch, inputs, y, weight)

    def counts(self) -> list[float]:
        return [float(getattr(self.loader, "skipped", 0))]  # empty batches (cluster), this rank

    def score(self, model: nn.Module) -> dict[str, float]:
        metric = self.objective.metric
        if self.evaluator is not None:
            values = _evaluator_accuracy(model, self.evaluator, self.ctx, metric)
        else:
            values = _accuracies(model, self.inputs, self.idx, self.y, self.ctx,
                                 ("train", "val"), metric)
        names = ["train_acc", "val_acc"] + ([] if metric == "accuracy" else [self.monitor])
        return dict(zip(names, values))


def _placed(inputs: PhaseInput, device: torch.device, memo: dict) -> PhaseInput:
    """``inputs`` on ``device``; a layer-wise phase keeps its CPU ``x`` as ``host_x``."""
    moved = devices.to_device(inputs, device, memo, pin=False)
    if moved is inputs or inputs.layerwise is None:
        return moved
    return dataclasses.replace(moved, host_x=inputs.x)


def node_step(model: nn.Module, batch, inputs: PhaseInput | None = None,
              y: torch.Tensor | None = None,
              class_weight: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """Loss of one node batch (``_step``, ``_loss``) and its labelled nodes; ``inputs`` and
    ``y`` only for a tensor of train rows (the Lightning module passes subgraphs alone);
    ``class_weight`` (C,) or None: ``Objective.class_weight``."""
    logits, target, weight = _step(model, inputs, batch, y)
    return _loss(logits, target, weight, class_weight), target.numel()


def _set_loader_epoch(loader: Iterable | None, epoch: int) -> None:
    sampler = getattr(loader, "node_sampler", None)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)


def fit(build_model: Callable[[], nn.Module], inputs: dict[str, PhaseInput] | None,
        y: torch.Tensor | None, roles: np.ndarray | None, cfg: FitParams, seed: int, *,
        batch_size: int | None = None, loader: Iterable | None = None,
        evaluator: Evaluator | None = None,
        options: LoopOptions = LoopOptions(), objective: Objective = Objective()) -> TrainResult:
    """Build a model with ``build_model()``, train it on the train nodes of ``roles`` and
    early-stop on the val nodes (``loop.run`` with a ``NodeTask``).

    ``batch_size`` None trains on all train rows per step; otherwise row mini-batches (row
    models only). ``loader`` (gnnpipe/sampling/builders.py) replaces both: each epoch iterates
    it for ``LossBatch`` es, the loss on the rows each names. Evaluation stays a full-graph forward
    on each phase's message graph (layer by layer over blocks, split across ranks, for inputs built
    with a
    ``layerwise`` engine: gnnpipe/training/inference.py). ``seed`` drives initialisation, and with
    the epoch number dropout, shuffling and sampling. Under DDP (``options.ctx``) every rank trains
    on an equal share of the seeds (the caller shards a ``loader``'s seeds), gradients are
    averaged and metrics summed across ranks; only rank 0's result carries logits. Returns
    logits for every train/val/test node, computed with the best weights on that node's phase
    inputs.

    ``y`` int64 (N,) labels and ``roles`` int8 (N,) split role codes (``ROLE_CODES``: 1 byte a
    node) of every node. ``evaluator`` (with a ``loader``; ``inputs``, ``y`` and ``roles`` are
    then None) replaces the full-graph evaluation: each rank scores the nodes it holds with the
    labels and roles it holds, and rank 0 gathers the logits and orders them by phase and id
    (``train.dist.shard: partition``: no rank holds an array of every node). A loader with a
    ``skipped`` attribute reports the empty batches it skipped in the epoch (cluster); their
    total is ``summary["empty_batches_skipped"]``.
    ``objective`` (``node_objective``): the val metric early stopping maximises (``summary``
    gets ``metric`` and its ``best_val`` beside ``best_val_acc``, the history a ``val_<metric>``
    column unless accuracy) and the class weights of the loss.
    ``options.amp`` runs the training forward under ``torch.autocast`` (bfloat16 on CPU; float16
    with a ``GradScaler`` on CUDA); evaluation stays float32. ``options.device`` trains and
    evaluates there (``gnnpipe.training.device``; layer-wise and shard evaluation stay on the CPU);
    the logits and weights returned are CPU tensors. ``options.compile_model`` trains
    through ``torch.compile(..., dynamic=True)`` and turns a compiler failure into a one-line
    ValueError. ``perf_history`` gets one row of wall-clock throughput per epoch.
    """
    ctx = options.ctx
    if batch_size is not None and inputs["train"].edge_index is not None:
        raise ValueError("row mini-batches need a row model (mlp or sign), not a graph model")
    if evaluator is not None and loader is None:
        raise ValueError("an evaluator needs a loader: the rank holds no whole graph to train on")
    if evaluator is not None and (y is not None or roles is not None):
        raise ValueError("an evaluator holds its nodes' labels and roles: pass y and roles None")
    task = NodeTask(inputs, y, roles, batch_size, loader, ctx, evaluator, objective)
    idx = task.idx
    outcome = loop.run(task, build_model, cfg, seed, options)
    model, state = outcome.model, outcome.state
    if evaluator is not None:  # every rank scores its nodes; rank 0 orders them
        with torch.no_grad():
            node_id, logits = _evaluator_outputs(model, evaluator, ctx)
        num_train = int(all_reduce_sum(torch.tensor([float(
            (evaluator.targets()[1] == TRAIN).sum())]), ctx)[0])
    else:
        node_id, num_train = torch.cat([idx[p] for p in PHASES]), idx["train"].numel()
        logits = torch.empty(0)  # only rank 0 writes artifacts
        if ctx.is_main or any(inputs[p].layerwise is not None for p in PHASES):
            with torch.no_grad():  # layer-wise: all ranks compute, only rank 0 keeps the logits
                logits = _split_logits(model, task.inputs, idx, ctx)
    history = outcome.history
    summary = {
        "best_epoch": state["best_epoch"],
        **best_scores(state, objective.metric),
        "epochs_run": len(history),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    if hasattr(loader, "skipped"):
        summary["empty_batches_skipped"] = int(state["skipped"])
    seconds = outcome.seconds
    perf = {"seconds": round(seconds, 3), "world_size": ctx.world_size,
            "threads": torch.get_num_threads(), "device": outcome.device,
            "train_seeds_per_s": round(outcome.epochs_here * num_train / max(seconds, 1e-9), 1)}
    if task.aggregation_seconds:  # train.aggregation: timed, on the first batch
        perf["aggregation"] = {"chosen": model.aggregation, "step_seconds": task.aggregation_seconds}
    if inputs is not None and any(inputs[p].layerwise is not None for p in PHASES):
        perf["eval_inference"] = "layerwise"  # train.inference (auto chose it for a big graph)
    return TrainResult(node_id=node_id, logits=logits, state_dict=state["best_state"],
                       history=history, summary=summary, perf=perf,
                       perf_history=outcome.perf_history)


def _split_logits(model: nn.Module, inputs: dict[str, PhaseInput], idx: dict[str, torch.Tensor],
                  ctx: DistContext) -> torch.Tensor:
    """Logits float32 (M, C) of ``idx``'s train, val then test nodes, each on its phase's graph,
    on rank 0 (empty on the others, which join the layer-wise collectives). Where every phase
    evaluates layer by layer on the CPU, the rows are copied from the engine's table into one
    mapped scratch table (``io.rows_table``): rank 0 holds no anonymous copy of the
    split's logits (2M nodes, 10 classes: 40 MiB as two copies), the same values."""
    on_cpu = devices.model_device(_unwrap(model)).type == "cpu"  # the same on every rank
    if not (on_cpu and all(inputs[p].layerwise is not None for p in PHASES)):
        outputs = _phase_outputs(model, inputs, {p: idx[p] for p in PHASES}, ctx)
        return (torch.cat([outputs[p].cpu() for p in PHASES]).float() if ctx.is_main
                else torch.empty(0))
    logits, start = None, 0
    for phase in PHASES:  # phases sharing an engine share its memoised table
        full = layerwise_output(model, inputs[phase], ctx)  # (N, C): a collective
        if not ctx.is_main:
            continue
        assert full.dtype == torch.float32, "layer-wise tables are float32"
        if logits is None:
            total = sum(idx[p].numel() for p in PHASES)
            logits = rows_table(full, (total, *full.shape[1:]))
        stop = start + idx[phase].numel()
        torch.index_select(full, 0, idx[phase], out=logits[start:stop])
        start = stop
    return logits if logits is not None else torch.empty(0)


def _evaluator_outputs(model: nn.Module, evaluator: Evaluator,
                       ctx: DistContext) -> tuple[torch.Tensor, torch.Tensor]:
    """Every rank's evaluator logits, on rank 0 in ``fit``'s order: train, val then test nodes,
    ids ascending within each (``node_id`` (M,), ``logits`` (M, C)); empty on the others."""
    held, logits = evaluator.logits(devices.on_cpu(model))
    gathered = gather_objects((held, torch.from_numpy(evaluator.targets()[1]), logits), ctx)
    if not ctx.is_main:
        return torch.empty(0, dtype=torch.int64), torch.empty(0)
    held, role, logits = (torch.cat([g[i] for g in gathered]) for i in range(3))
    order = np.lexsort((held.numpy(), role.numpy()))  # by role code, then by id
    order = torch.from_numpy(order[role.numpy()[order] < UNUSED])  # the split's nodes
    return held[order], logits[order]


def build_inputs(x: torch.Tensor, message_graphs: dict | None = None,
                 hops: dict[str, list[torch.Tensor]] | None = None,
                 cfg=None, phases: tuple[str, ...] = PHASES, world_size: int = 1
                 ) -> dict[str, PhaseInput]:
    """Per-phase model inputs of ``phases``, sharing tensors between phases that share a graph.

    ``message_graphs`` (phase -> Csr) for graph models; ``hops`` (phase -> [X_0..X_K]) for sign;
    neither for the MLP. Exactly the phase's own message graph is used: no phase sees more.
    ``cfg`` (TrainParams) picks the evaluation forward per graph (``train.inference``, see
    ``gnnpipe.training.inference.plan``, on ``world_size`` DDP ranks); None: full-graph forwards.
    """
    if hops is not None:
        cache: dict[int, torch.Tensor] = {}
        out = {}
        for phase in phases:
            key = id(hops[phase][0])
            if key not in cache:
                cache[key] = torch.cat([h.float() for h in hops[phase]], dim=1)  # (N, (K+1)F)
            out[phase] = PhaseInput(cache[key])
        return out
    if message_graphs is None:
        return {phase: PhaseInput(x) for phase in phases}
    from gnnpipe.io.csr_blocks import edge_index_of
    from gnnpipe.training.inference import csr_view, plan

    edges: dict[int, torch.Tensor] = {}
    engines: dict[int, Callable | None] = {}
    for phase in phases:
        csr = message_graphs[phase]
        if id(csr) not in edges:
            edges[id(csr)] = edge_index_of(csr)  # a mapped scratch table in a stage
            engines[id(csr)] = (plan(*csr_view(csr), x.shape[1], cfg, world_size)
                                if cfg is not None else None)
    return {phase: PhaseInput(x, edges[id(message_graphs[phase])],
                              engines[id(message_graphs[phase])]) for phase in phases}
