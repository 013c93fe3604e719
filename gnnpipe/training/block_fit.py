"""The MLP baseline, the one node fit (the baseline stage's, evaluate.seeds'): the full-batch
objective of ``gnnpipe.training.train.fit`` (mean cross-entropy over every train node, one Adam
step per epoch, early stopping on the val value of the run's metric, class weights of
``train.class_weight``) computed from feature rows read a block at a time, so the process never
holds the (N, F) matrix.

Each epoch's gradient is a sum over chunks of ``BASELINE_CHUNK_ROWS`` node ids in node order:
the gradient of (the chunk's summed train cross-entropy / the train count), added in float32
(class-weighted: the chunk's sum of w[y_i] l_i / the train nodes' sum of w[y_i], PyTorch's
weighted mean). The chunks are fixed: blocks of ``block_rows`` node ids (whole chunks) are only
what is read at once (one ``pread`` of the block's range, or the needed rows alone where they
are sparse), and rows come from a file or a tensor alike, so the bytes do not depend on
``block_rows``, on how rows are read or on the engine (tested). Against ``train.fit`` in memory
(the tests' oracle): the same function and gradient up to float rounding (the sum over train
rows is split at chunk boundaries), bit-identical on a graph of at most one chunk. Dropout
masks are drawn chunk after chunk in node order: torch's CPU dropout draws element by element
from the generator, so they are the full batch's mask (tested). Scoring (per-epoch accuracies,
the final logits) runs by chunks too. Held per node: the caller's labels and roles, each
phase's node ids (int64) and the returned logits (M, C).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gnnpipe.config import FitParams
from gnnpipe.config.rules import BASELINE_CHUNK_ROWS
from gnnpipe.training import loop
from gnnpipe.training.loop import LoopOptions
from gnnpipe.io.common import PHASES
from gnnpipe.reporting.node_metric import node_metric
from gnnpipe.training.train import Objective, TrainResult, best_scores, phase_index

# a block whose needed rows are fewer than 1 / SPARSE of its range reads them one by one
# (a pread each) instead of the whole range
SPARSE = 8


class SummedGrad(torch.autograd.Function):
    """A scalar ``value`` whose gradient with respect to ``params`` is ``grads`` (computed by
    chunks in the forward), so the loop's ``loss.backward()`` sets exactly those gradients."""

    @staticmethod
    def forward(ctx, value, grads, *params):
        ctx.grads = grads
        return value.clone()

    @staticmethod
    def backward(ctx, out):
        return (None, None, *(out * g for g in ctx.grads))


class BlockNodeTask:
    """Node classification hooks for ``loop.run`` over row blocks of ``features``: one step per
    epoch over every train node, accuracies (and the val value of ``objective.metric``) by
    chunks."""

    best_key, monitor, counters = "best_val", "val_acc", ()
    examples_per_seed, saves_scaler = 1, True

    def __init__(self, features, y: torch.Tensor, roles: np.ndarray, block_rows: int,
                 objective: Objective = Objective()):
        if block_rows % BASELINE_CHUNK_ROWS:
            raise ValueError(f"baseline.block_rows={block_rows} must be a multiple of "
                             f"{BASELINE_CHUNK_ROWS}")
        self.features, self.y, self.block_rows = features, y, block_rows
        self.num_nodes = int(features.shape[0])
        self.idx = {phase: ids.numpy() for phase, ids in phase_index(roles).items()}  # ascending
        if self.idx["train"].size == 0:
            raise ValueError("the mlp baseline needs train nodes; the split has none")
        self.objective, self.monitor = objective, objective.monitor
        self.class_weight = objective.class_weight
        # the weighted mean's denominator: sum of w[y_i] over the train nodes (float32, as
        # F.cross_entropy sums it); None: the train count
        self.weight_sum = None if self.class_weight is None else (
            self.class_weight[self.y[torch.from_numpy(self.idx["train"])]].sum())

    def place(self, device: torch.device) -> None:
        if device.type != "cpu":
            raise ValueError("the baseline trains on the CPU")

    def batches(self, epoch: int, seed: int):
        return [None]  # one full-batch step; ``step`` reads the blocks

    def step(self, model: nn.Module, batch) -> tuple[torch.Tensor, int]:
        params = [p for p in model.parameters() if p.requires_grad]
        grads = [torch.zeros_like(p) for p in params]
        total = torch.zeros(())
        count = self.idx["train"].size
        denominator = count if self.weight_sum is None else self.weight_sum
        for chunk in self.chunks(("train",)):
            rows, at = chunk["train"]
            target = self.y[torch.from_numpy(self.idx["train"][at])]
            loss = F.cross_entropy(model(rows), target, weight=self.class_weight,
                                   reduction="sum") / denominator
            for grad, part in zip(grads, torch.autograd.grad(loss, params)):
                grad += part
            total += loss.detach()
        return SummedGrad.apply(total, grads, *params), count

    def counts(self) -> list[float]:
        return []

    @torch.no_grad()
    def score(self, model: nn.Module) -> dict[str, float]:
        model.eval()
        hits = {"train": 0, "val": 0}
        metric = self.objective.metric
        val_logits = []  # (k, C) per chunk in node order: the val nodes' order, when needed
        for chunk in self.chunks(("train", "val")):
            for phase, (rows, at) in chunk.items():
                target = self.y[torch.from_numpy(self.idx[phase][at])]
                scores = model(rows)
                hits[phase] += int((scores.argmax(dim=1) == target).sum())
                if phase == "val" and metric != "accuracy":
                    val_logits.append(scores.float())
        # float32 counts and division, as the in-memory fit's reduced counts
        totals = torch.tensor([hits["train"], self.idx["train"].size, hits["val"],
                               self.idx["val"].size], dtype=torch.float32)
        out = {"train_acc": float(totals[0] / totals[1]), "val_acc": float(totals[2] / totals[3])}
        if metric != "accuracy":
            logits = torch.cat(val_logits)
            out[self.monitor] = node_metric(metric, self.y[torch.from_numpy(self.idx["val"])]
                                            .numpy(), logits, int(logits.shape[1]))
        return out

    @torch.no_grad()
    def logits(self, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """``node_id`` int64 (M,) (train, val then test nodes) and their logits float32 (M, C)."""
        model.eval()
        sizes = [self.idx[p].size for p in PHASES]
        start = dict(zip(PHASES, np.cumsum([0] + sizes[:-1]).tolist()))
        out = None
        for chunk in self.chunks(PHASES):
            for phase, (rows, at) in chunk.items():
                scores = model(rows).float()
                if out is None:
                    out = torch.empty(sum(sizes), scores.shape[1])
                out[start[phase] + at.start:start[phase] + at.stop] = scores
        node_id = torch.from_numpy(np.concatenate([self.idx[p] for p in PHASES]))
        return node_id, torch.empty(0, 0) if out is None else out

    def chunks(self, phases: tuple[str, ...]):
        """Per chunk of ``BASELINE_CHUNK_ROWS`` node ids holding a node of ``phases``, in node
        order: phase -> (its rows' features float32 (k, F), the slice of ``idx[phase]`` they
        are)."""
        for lo in range(0, self.num_nodes, self.block_rows):
            hi = min(self.num_nodes, lo + self.block_rows)
            spans = {p: slice(*np.searchsorted(self.idx[p], [lo, hi]).tolist()) for p in phases}
            needed = np.sort(np.concatenate([self.idx[p][s] for p, s in spans.items()]))
            if needed.size == 0:
                continue
            x = read_rows(self.features, lo, hi, needed)  # (needed, F): row i is node needed[i]
            for begin in range(lo, hi, BASELINE_CHUNK_ROWS):
                chunk = {}
                for phase in phases:
                    ids = self.idx[phase]
                    a, b = np.searchsorted(ids, [begin, begin + BASELINE_CHUNK_ROWS]).tolist()
                    if b > a:
                        at = torch.from_numpy(np.searchsorted(needed, ids[a:b]))
                        chunk[phase] = (x.index_select(0, at), slice(a, b))
                if chunk:
                    yield chunk



def read_rows(features, lo: int, hi: int, needed: np.ndarray) -> torch.Tensor:
    """Rows ``needed`` (ascending, in [lo, hi)) of ``features`` (k, F): the range read at once,
    or the rows alone where they are fewer than 1 / SPARSE of it (the same values either way)."""
    if needed.size * SPARSE < hi - lo:
        return features[torch.from_numpy(needed)]
    return features[lo:hi].index_select(0, torch.from_numpy(needed - lo))


def fit_blocks(build_model: Callable[[], nn.Module], features, y: torch.Tensor,
               roles: np.ndarray, cfg: FitParams, seed: int, *, block_rows: int,
               options: LoopOptions = LoopOptions(),
               objective: Objective = Objective()) -> TrainResult:
    """``train.fit`` of a row model (the MLP) with the full-batch objective summed over fixed
    chunks, reading ``features`` by blocks of ``block_rows`` node ids (a multiple of
    ``BASELINE_CHUNK_ROWS``; the result does not depend on it).

    ``features`` (N, F): rows by ``features[lo:hi]`` and ``features[ids]`` (float32 (k, F)):
    a ``gnnpipe.data.features.ModelFeatures`` (pread from the prepared file) or a tensor;
    ``y`` int64 (N,), ``roles`` int8 (N,) split role codes (``gnnpipe.data.graph.ROLE_CODES``).
    One process on the CPU (``options.ctx`` single). ``objective``: the val metric early stopping
    maximises and the class weights, as ``fit`` takes them. Returns what ``fit`` returns: logits
    for every train, val and test node from the best weights, history, summary (deterministic)
    and perf.
    """
    task = BlockNodeTask(features, y, roles, block_rows, objective)
    outcome = loop.run(task, build_model, cfg, seed, options)
    model, state = outcome.model, outcome.state
    node_id, logits = task.logits(model)
    summary = {
        "best_epoch": state["best_epoch"],
        **best_scores(state, objective.metric),
        "epochs_run": len(outcome.history),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    seconds = outcome.seconds
    perf = {"seconds": round(seconds, 3), "world_size": 1, "threads": torch.get_num_threads(),
            "device": outcome.device, "block_rows": block_rows,
            "train_seeds_per_s": round(outcome.epochs_here * task.idx["train"].size
                                       / max(seconds, 1e-9), 1)}
    return TrainResult(node_id=node_id, logits=logits, state_dict=state["best_state"],
                       history=outcome.history, summary=summary, perf=perf,
                       perf_history=outcome.perf_history)
