"""Link prediction training: a node encoder, a dot-product decoder, BCE on supervision edges.

The encoder is any node model of gnnpipe/training/models.py built with ``out_channels = hidden``:
its output rows are node embeddings ``z`` (N, H) and a pair (u, v) scores ``z_u . z_v`` (a logit).
Each step scores supervision positives and one fresh negative per positive (drawn by
``negatives.training_sampler_of_blocks`` against the edges training may see, never against
held-out ones) and takes one Adam step on binary cross-entropy:

* ``train.sampler: full`` (and ``sign``): one step per epoch, encoding the **train** phase's
  message graph once, over every supervision edge.
* ``train.sampler: link_neighbor``: mini-batches of ``batch_size`` supervision edges with their
  negatives, each encoded on a subgraph sampled around the pairs' endpoints from the train
  phase's message graph (``gnnpipe.sampling.link``), split across DDP ranks.

Validation encodes the **val** phase's graph and ranks each val positive against its fixed
negatives; early stopping keeps the weights of the best val MRR, and every epoch records the
share of val (positive, negative) pairs scored equal within float rounding (``val_tied_share``,
gnnpipe/reporting/collapse.py): a collapsed encoder shows there, and the summary's ``collapse``
(val and test, with one warning line on stderr) says so for the chosen weights. Final scores:
val pairs on the val graph, test pairs on the test graph, so each phase sees only its own graph
(whole graph, for every sampler): one forward, or layer by layer over target blocks when the phase input carries a
``layerwise`` engine (``train.inference``, gnnpipe/training/inference.py; the same embeddings to
1e-5 in bounded memory, split across DDP ranks); under DDP each rank reads and scores only its
share of the val / test positives with their negatives, and the per-positive ranks (each epoch)
and scores (at the end, on rank 0) are gathered in order. Randomness (initialisation, and per
``(seed, epoch)`` dropout, negatives and sampling) comes only from ``seed``, so a run resumed from a
checkpoint repeats an uninterrupted one; ``fork_rng`` keeps the caller's global torch RNG untouched.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gnnpipe.training import device as devices
from gnnpipe.training import loop
from gnnpipe.config import FitParams
from gnnpipe.training.distributed import SINGLE, DistContext, gather_rows, share_rows
from gnnpipe.reporting.collapse import collapse, collapse_warning
from gnnpipe.reporting.metrics import ranks_and_ties
from gnnpipe.splitting.negatives import NegativeSampler
from gnnpipe.training.loop import LoopOptions
from gnnpipe.training.train import (PhaseInput, _placed, batch_output, layerwise_output,
                           resolve_aggregation)

EVAL_PHASES = ("val", "test")
_CHUNK = 1 << 18  # gathered embedding entries per scoring block (~1 MB: stays in cache)


@dataclass
class LinkTrainResult:
    scores: dict[str, tuple[torch.Tensor, torch.Tensor]]  # phase -> (pos (P,), neg (P, K)) float32
    state_dict: dict
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)  # deterministic for a fixed seed
    perf: dict = field(default_factory=dict)  # wall-clock figures, differ run to run
    perf_history: list[dict] = field(default_factory=list)  # per epoch: seeds/s, batches/s
    hard_scores: dict[str, torch.Tensor] = field(default_factory=dict)  # phase -> (P, K_hard)


def encode(model: nn.Module, inputs: PhaseInput) -> torch.Tensor:
    """Node embeddings (N, H) of one phase: graph models run on that phase's message graph."""
    if inputs.edge_index is None:
        return model(inputs.x)
    return model(inputs.x, inputs.edge_index)


def pair_scores(z: torch.Tensor, heads: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Dot-product logits: ``heads`` (P,) with ``targets`` (P,) -> (P,) or (P, K) -> (P, K)."""
    if targets.dim() == 1:
        # index_select: its backward (index_add) sums repeated heads in order; z[heads]'s
        # (index_put accumulate) adds them atomically across threads, in no fixed order
        return (z.index_select(0, heads) * z.index_select(0, targets)).sum(-1)
    k, dim = targets.shape[1], z.shape[1]
    rows = max(1, _CHUNK // max(k * dim, 1))
    blocks = []
    for h, t in zip(heads.split(rows), targets.split(rows)):
        z_t = z.index_select(0, t.reshape(-1)).view(t.shape[0], k, dim)  # (p, K, H)
        blocks.append(torch.bmm(z_t, z.index_select(0, h).unsqueeze(2)).squeeze(2))  # (p, K)
    return torch.cat(blocks) if blocks else torch.empty(0, k)


@torch.no_grad()
def embed(model: nn.Module, inputs: PhaseInput, ctx: DistContext = SINGLE) -> torch.Tensor:
    """Eval-mode node embeddings (N, H) of one phase: ``encode``, or layer by layer when
    ``inputs.layerwise`` is set (then every rank of ``ctx`` must call: the ranks share the
    blocks and all end with every row)."""
    if inputs.layerwise is not None:
        return layerwise_output(model, inputs, ctx)
    model.eval()
    return encode(model, inputs)


@torch.no_grad()
def score_sets(model: nn.Module, inputs: PhaseInput, positives: torch.Tensor,
               negative_sets: list[torch.Tensor], ctx: DistContext = SINGLE
               ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Scores of ``positives`` (2, P) (P,) and of each set of their fixed negatives (P, K_i)
    from one encoding of the phase graph (``embed``: a collective under DDP when the phase
    evaluates layer by layer)."""
    model.eval()
    z = embed(model, inputs, ctx)
    pos = pair_scores(z, positives[0], positives[1]).float().cpu()
    return pos, [pair_scores(z, positives[0], neg.to(positives.device)).float().cpu()
                 for neg in negative_sets]


def score_phase(model: nn.Module, inputs: PhaseInput, positives: torch.Tensor,
                negatives: torch.Tensor, ctx: DistContext = SINGLE
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores of ``positives`` (2, P) and their fixed ``negatives`` (P, K) on the phase graph."""
    pos, (neg,) = score_sets(model, inputs, positives, [negatives], ctx)
    return pos, neg


def _pair_step(model: nn.Module, inputs: PhaseInput, supervision: torch.Tensor,
               fresh: torch.Tensor | None, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and 1/0 labels of one step: every supervision positive and its fresh negative on
    the full train graph (``batch`` None), or one loader ``LossBatch`` on its subgraph."""
    if batch is None:
        z = encode(model, inputs)  # (N, H)
        logits = torch.cat([pair_scores(z, supervision[0], supervision[1]),
                            pair_scores(z, supervision[0], fresh)])
        p = supervision.shape[1]
        return logits, torch.cat([torch.ones(p), torch.zeros(p)]).to(logits.device)
    z = batch_output(model, batch)  # (M, H): the sampled nodes, pair endpoints first
    pairs = batch.pairs  # (2, 2B) local ids: B positives, then their negatives
    return pair_scores(z, pairs[0], pairs[1]), batch.target


def val_scores(pos: np.ndarray, neg: np.ndarray, ctx: DistContext = SINGLE,
               total: int = 0) -> dict[str, float]:
    """An epoch's val figures from the val positives (P,) and their fixed negatives (P, K):
    the MRR early stopping maximises, and the share of (positive, negative) pairs tied within
    float rounding (``metrics.ranks_and_ties``, one comparison for both; 1 for a collapsed
    encoder). Under DDP ``pos`` / ``neg`` are this rank's rows ``share_rows(total, ctx)`` of
    the ``total`` positives: every rank's per-positive ranks and ties are gathered in order
    first (one collective), so each rank computes one process's figures from the same
    numbers."""
    ranks, ties = ranks_and_ties(pos, neg)  # per positive: no sort of all scores
    pairs = neg.size
    if ctx.world_size > 1:  # 16 B per positive: the rows of the shares, in order
        # ties (int64 counts <= K) are exact in float64: one (P, 2) gather carries both
        both = np.stack([ranks, ties.astype(np.float64)], axis=1)
        both = gather_rows(torch.from_numpy(both), total, ctx, to_all=True).numpy()
        ranks, ties = both[:, 0], both[:, 1].astype(np.int64)
        pairs = total * neg.shape[1]
    return {"val_mrr": float((1.0 / ranks).mean()),  # metrics.mrr's arithmetic
            "val_tied_share": float(ties.sum()) / max(pairs, 1)}


def _check_shares(sets: dict[str, dict[str, torch.Tensor]], rows: dict[str, slice],
                  edges: dict[str, torch.Tensor], ctx: DistContext) -> None:
    """Each set's (``""``: the fixed negatives, ``" hard"``: the hard ones) phase -> (P_rank, K)
    targets must be the negatives of this rank's ``rows[phase]`` of ``edges[phase]`` (2, P)."""
    for name, negatives in sets.items():
        for phase, targets in negatives.items():
            share, total = rows[phase].stop - rows[phase].start, edges[phase].shape[1]
            if targets.shape[0] != share:
                raise ValueError(f"{phase}{name}: {targets.shape[0]} rows of negatives for rank "
                                 f"{ctx.rank}'s {share} of {total} positives; read them with "
                                 "gnnpipe.training.model_inputs.read_supervision")


class LinkTask:
    """Link prediction hooks for ``loop.run`` (see ``fit_link``): BCE on supervision positives
    and fresh negatives, early stopping on val MRR (``val_scores``). Each rank of ``ctx`` scores
    its ``rows`` (``share_rows``) of the val / test positives: ``negatives`` (and
    ``hard_negatives``, scored once the weights are chosen) hold only theirs. ``edges`` may be
    mapped scratch tables (``io.read_typed_link_split`` of ``io.TRAINING_LINK_ROLES``): the
    task keeps views of them (``supervision``, ``heads``, ``positives``), never a CPU copy."""

    best_key, monitor, counters = "best_val_mrr", "val_mrr", ()
    examples_per_seed, saves_scaler = 2, False  # a positive and its negative per seed

    def __init__(self, inputs: dict[str, PhaseInput], edges: dict[str, torch.Tensor],
                 negatives: dict[str, torch.Tensor], sampler: NegativeSampler,
                 loader: Iterable | None = None, ctx: DistContext = SINGLE,
                 hard_negatives: dict[str, torch.Tensor] | None = None):
        self.inputs, self.edges, self.negatives, self.sampler = inputs, edges, negatives, sampler
        self.loader, self.ctx = loader, ctx
        self.rows = {p: share_rows(edges[p].shape[1], ctx) for p in negatives}
        _check_shares({"": negatives, " hard": hard_negatives or {}}, self.rows, edges, ctx)
        self.supervision = edges["train_supervision"]
        self.heads = self.supervision[0].numpy()
        self.aggregation_seconds: dict[str, float] = {}  # train.aggregation: timed's timings

    def place(self, device: torch.device) -> None:
        """Phase inputs, supervision and the fixed val / test pairs go to ``device`` (``heads``
        stays a CPU array for the negative sampler)."""
        memo: dict = {}  # phases share x and often edge_index: each tensor moves once
        self.inputs = {p: _placed(i, device, memo) for p, i in self.inputs.items()}
        self.edges = devices.to_device(self.edges, device, memo, pin=False)
        self.negatives = devices.to_device(self.negatives, device, memo, pin=False)
        self.supervision = self.edges["train_supervision"]

    def batches(self, epoch: int, seed: int) -> Iterable:
        """The loader's batches, or one full-graph step: its (P,) fresh negative targets."""
        if self.loader is not None:
            self.loader.set_epoch(epoch)
            return self.loader
        rng = np.random.default_rng([seed, epoch])
        return [torch.from_numpy(self.sampler.sample(self.heads, 1, rng)[:, 0])]

    def step(self, model: nn.Module, batch) -> tuple[torch.Tensor, int]:
        full = isinstance(batch, torch.Tensor)  # fresh negatives of the full-graph step

        def loss(m: nn.Module) -> torch.Tensor:
            logits, labels = _pair_step(m, self.inputs["train"], self.supervision,
                                        batch if full else None, None if full else batch)
            return F.binary_cross_entropy_with_logits(logits, labels)

        self.aggregation_seconds = resolve_aggregation(model, loss) or self.aggregation_seconds
        logits, labels = _pair_step(model, self.inputs["train"], self.supervision,
                                    batch if full else None, None if full else batch)
        return F.binary_cross_entropy_with_logits(logits, labels), labels.numel()

    def counts(self) -> list[float]:
        return []

    def positives(self, phase: str) -> torch.Tensor:
        """This rank's share of ``phase``'s positives (2, P_rank): the rows of its negatives."""
        return self.edges[phase][:, self.rows[phase]]

    def score(self, model: nn.Module) -> dict[str, float]:
        pos, neg = score_phase(model, self.inputs["val"], self.positives("val"),
                               self.negatives["val"], self.ctx)
        # every rank gets every share's ranks: their early-stopping decisions are identical
        # by construction, not by floating-point luck
        return val_scores(pos.numpy(), neg.numpy(), self.ctx, self.edges["val"].shape[1])


def fit_link(build_encoder: Callable[[], nn.Module], inputs: dict[str, PhaseInput],
             edges: dict[str, torch.Tensor], negatives: dict[str, torch.Tensor],
             sampler: NegativeSampler, cfg: FitParams, seed: int, *,
             loader: Iterable | None = None, hard_negatives: dict[str, torch.Tensor] | None = None,
             options: LoopOptions = LoopOptions()) -> LinkTrainResult:
    """Train an encoder on ``edges["train_supervision"]`` and score the val/test pairs
    (``loop.run`` with a ``LinkTask``).

    ``inputs`` phase -> PhaseInput (``gnnpipe.training.train.build_inputs``); ``edges`` role ->
    int64 (2, E) positives; ``negatives`` "val"/"test" -> int64 (P, K) fixed targets of the heads
    ``edges[phase][0]``; ``hard_negatives`` the split's hard ones alike (None: none), scored
    once the weights are chosen (early stopping sees only ``negatives``); ``sampler`` draws
    the per-epoch training negatives of the full-graph
    step. ``loader`` (``gnnpipe.sampling.builders.link_neighbor_batches``, which draws its own
    negatives with the same rule) replaces that step by mini-batches of supervision edges on sampled
    subgraphs of the train graph; ``inputs["train"]`` is then not encoded. Under DDP
    (``options.ctx``, with a loader only) gradients are averaged, losses summed across ranks
    and every rank takes the same early-stopping decision; ``negatives`` and ``hard_negatives``
    are then the rows of the rank's share of the positives only (``distributed.share_rows``, as
    ``model_inputs.read_supervision`` reads them): each rank scores its share, and rank 0's
    result holds every rank's scores in order (the others' none). ``options.checkpointing`` saves
    every N epochs and resumes from a saved state: every epoch reseeds from ``(seed, epoch)``,
    so a resumed run ends with the same weights and scores as an uninterrupted one.
    """
    ctx = options.ctx
    if edges["train_supervision"].shape[1] == 0:
        raise ValueError("no train supervision edges to learn from; re-run the split stage")
    assert ctx.world_size == 1 or loader is not None, "config._check_link_processes"
    task = LinkTask(inputs, edges, negatives, sampler, loader, ctx, hard_negatives)
    outcome = loop.run(task, build_encoder, cfg, seed, options)
    model, seconds = outcome.model, outcome.seconds
    perf = {"seconds": round(seconds, 3), "world_size": ctx.world_size, "device": outcome.device,
            "train_edges_per_s": round(
        outcome.epochs_here * task.heads.size / max(seconds, 1e-9), 1)}
    if task.aggregation_seconds:  # train.aggregation: timed, on the first batch
        perf["aggregation"] = {"chosen": model.aggregation, "step_seconds": task.aggregation_seconds}
    if any(inputs[p].layerwise is not None for p in EVAL_PHASES):
        perf["eval_inference"] = "layerwise"  # train.inference (auto chose it for a big graph)

    def score(phase: str, sets: list[torch.Tensor]) -> tuple:
        # this rank's share; rank 0 gathers every share, in order (None on the others)
        pos, negs = score_sets(model, task.inputs[phase], task.positives(phase), sets, ctx)
        total = task.edges[phase].shape[1]
        return gather_rows(pos, total, ctx), [gather_rows(n, total, ctx) for n in negs]

    return link_result(outcome, score, task.negatives, hard_negatives, perf, warn=ctx.is_main)


def link_result(outcome: loop.LoopOutcome,
                score: Callable[[str, list[torch.Tensor]], tuple[torch.Tensor, list]],
                negatives: dict[str, torch.Tensor], hard_negatives: dict[str, torch.Tensor] | None,
                perf: dict, warn: bool = True) -> LinkTrainResult:
    """What a link fit returns from its loop's ``outcome`` (best weights loaded): each eval
    phase's scores by ``score(phase, negative sets)`` (positives (P,), each set (P, K_i): one
    encoding per phase scores the fixed and the hard negatives), the summary (with the
    ``collapse`` figures of the val and test scores against their fixed negatives) and
    ``perf``. ``warn``: this process prints the one-line warning of collapsed scores (rank 0).
    ``score`` giving None (a DDP rank but 0, which holds every rank's scores): no scores, no
    ``collapse``."""
    model, state, history = outcome.model, outcome.state, outcome.history
    scores, hard_scores = {}, {}
    for phase in EVAL_PHASES:
        sets = [negatives[phase]] + ([] if hard_negatives is None else [hard_negatives[phase]])
        pos, negs = score(phase, sets)
        if pos is None:
            continue
        scores[phase] = (pos, negs[0])
        if hard_negatives is not None:
            hard_scores[phase] = negs[1]
    summary = {
        "task": "link",
        "best_epoch": state["best_epoch"],
        "best_val_mrr": round(state["best_val_mrr"], 6),
        "epochs_run": len(history),
        "parameters": sum(p.numel() for p in model.parameters()),
        "collapse": {phase: collapse(*(t.numpy() for t in scores[phase]))
                     for phase in scores},
    }
    warning = collapse_warning(summary["collapse"], f"the {type(model).__name__} encoder")
    if warning and warn:
        print(f"gnnpipe: warning: {warning}", file=sys.stderr)
    return LinkTrainResult(scores=scores, state_dict=state["best_state"], history=history,
                           summary=summary, perf=perf, perf_history=outcome.perf_history,
                           hard_scores=hard_scores)
