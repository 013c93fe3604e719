"""The link task's MLP baseline, its one fit: the full-batch objective of
``gnnpipe.training.link_train.fit_link`` (BCE over every supervision positive and one fresh
negative each, one Adam step per epoch, early stopping on val MRR) computed from feature rows
read a block at a time, so the process never holds an (N, F) matrix.

The encoder is per row (the MLP; typed files: ``TypedMLP``'s input map of the row's type, then
the shared MLP), so an epoch's gradient takes three passes:

1. forward every row in chunks of ``BASELINE_CHUNK_ROWS`` node ids, in the full batch's order
   (type after type in the encoder's order, ids ascending), without autograd; keep the output
   rows ``z`` (U, H) of the U endpoints of this epoch's pairs and the RNG state before each
   chunk that holds one;
2. the decoder and the loss by terms of ``BASELINE_CHUNK_ROWS`` supervision pairs (each
   term's BCE sum / the full batch's 2P, on its pairs' rows of ``z`` gathered as leaves), their
   gradients added into the full-batch dL/dz (U, H);
3. forward again each chunk holding an endpoint (its RNG state restored: the same dropout
   mask) and back-propagate its rows of dL/dz into the weights' gradient.

Dropout masks: torch's CPU dropout draws element by element from the generator, so masks drawn
chunk after chunk over every row are the full batch's (one dropout layer: ``num_layers`` 2;
deeper MLPs draw each chunk's layers in turn, the same distribution). The chunks and terms are
fixed, so the bits do not depend on ``block_rows`` (what is read at once) nor on the engine;
against ``fit_link`` in memory (the tests' oracle) the same function and gradient up to float
summation order. Val / test scoring embeds only the rows the candidate lists name, by chunks,
in eval mode. Held: the supervision, fixed negatives, the endpoints' embeddings (U, H) and the
blocks being read.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gnnpipe.config import FitParams
from gnnpipe.config.rules import BASELINE_CHUNK_ROWS
from gnnpipe.splitting.negatives import NegativeSampler
from gnnpipe.training import loop
from gnnpipe.training.block_fit import SummedGrad, read_rows
from gnnpipe.training.link_train import (LinkTask, LinkTrainResult, link_result, pair_scores,
                                        val_scores)
from gnnpipe.training.loop import LoopOptions
from gnnpipe.training.models import TypedMLP

# (node type or None, its first homogeneous id, its features (N_t, F_t): rows by x[lo:hi] and
# x[ids], a ModelFeatures or a tensor)
Segment = tuple


def encode_rows(model: nn.Module, node_type: str | None, x: torch.Tensor) -> torch.Tensor:
    """The encoder's output rows (k, H) for feature rows ``x`` (k, F_t) of one node type."""
    if isinstance(model, TypedMLP):
        inputs = model.inputs
        return model.body(torch.relu(inputs.maps[inputs.types.index(node_type)](x)))
    return model(x)


class BlockLinkTask(LinkTask):
    """``LinkTask`` (its per-epoch fresh negatives, ``batches``) with the step and the scores
    computed over row blocks of ``segments``."""

    def __init__(self, segments: list[Segment], edges: dict[str, torch.Tensor],
                 negatives: dict[str, torch.Tensor], sampler: NegativeSampler, block_rows: int):
        if block_rows % BASELINE_CHUNK_ROWS:
            raise ValueError(f"baseline.block_rows={block_rows} must be a multiple of "
                             f"{BASELINE_CHUNK_ROWS}")
        super().__init__({}, edges, negatives, sampler)
        self.segments, self.block_rows = segments, block_rows
        self.num_rows = sum(int(features.shape[0]) for _, _, features in segments)
        # the val pairs are fixed: their rows and local ids are found once
        self.val_rows = self.pair_rows(edges["val"], [negatives["val"]])

    def place(self, device: torch.device) -> None:
        if device.type != "cpu":
            raise ValueError("the baseline trains on the CPU")

    def step(self, model: nn.Module, batch: torch.Tensor) -> tuple[torch.Tensor, int]:
        heads, targets = self.supervision
        pairs = heads.numel()
        needed, (h, t, fresh) = distinct_rows(self.num_rows, heads, targets, batch)
        z, states = self.train_rows(model, needed)  # 1. (U, H), no autograd
        grad, total = torch.zeros_like(z), torch.zeros(())
        for lo in range(0, pairs, BASELINE_CHUNK_ROWS):  # 2. dL/dz by terms of pairs
            at = slice(lo, lo + BASELINE_CHUNK_ROWS)
            ids = (h[at], t[at], fresh[at])
            z_h, z_t, z_f = (z.index_select(0, i).requires_grad_() for i in ids)  # (B, H)
            logits = torch.cat([(z_h * z_t).sum(-1), (z_h * z_f).sum(-1)])  # pair_scores'
            labels = torch.cat([torch.ones(z_h.shape[0]), torch.zeros(z_h.shape[0])])
            loss = F.binary_cross_entropy_with_logits(logits, labels, reduction="sum") / (2 * pairs)
            for i, part in zip(ids, torch.autograd.grad(loss, (z_h, z_t, z_f))):
                grad.index_add_(0, i, part)  # O(B x H) a term, not O(U x H)
            total += loss.detach()
        params = [p for p in model.parameters() if p.requires_grad]
        grads = self.backward_rows(model, needed, grad, states, params)  # 3.
        return SummedGrad.apply(total, grads, *params), 2 * pairs

    @torch.no_grad()
    def train_rows(self, model: nn.Module, needed: np.ndarray
                   ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Train-mode outputs (U, H) of the rows ``needed`` from a forward of every row in the
        full batch's order, and the RNG state before each chunk holding a needed row."""
        out, states = None, []
        for node_type, x, at, where in self.chunks(needed, "every"):
            state = torch.get_rng_state() if at.numel() else None
            z = encode_rows(model, node_type, x)
            if state is not None:
                if out is None:
                    out = torch.empty(needed.size, z.shape[1])
                out[where] = z.index_select(0, at)
                states.append(state)
        return out, states

    def backward_rows(self, model: nn.Module, needed: np.ndarray, grad: torch.Tensor,
                      states: list[torch.Tensor], params: list[torch.Tensor]
                      ) -> list[torch.Tensor]:
        """The weights' gradient of the loss whose gradient by the rows ``needed`` is ``grad``
        (U, H): each chunk holding a needed row forwarded again under its saved RNG state."""
        end = torch.get_rng_state()
        grads = [torch.zeros_like(p) for p in params]
        touched = self.chunks(needed, "touched")
        for (node_type, x, at, where), state in zip(touched, states):
            torch.set_rng_state(state)
            rows = encode_rows(model, node_type, x).index_select(0, at)
            parts = torch.autograd.grad(rows, params, grad[where], allow_unused=True)
            for total, part in zip(grads, parts):
                if part is not None:
                    total += part
        torch.set_rng_state(end)  # as after the one forward of the full batch
        return grads

    @torch.no_grad()
    def embed(self, model: nn.Module, needed: np.ndarray) -> torch.Tensor:
        """Eval-mode outputs (U, H) of the rows ``needed`` (ascending homogeneous ids)."""
        model.eval()
        out = None
        for node_type, x, _, where in self.chunks(needed, "needed"):
            z = encode_rows(model, node_type, x)
            if out is None:
                out = torch.empty(needed.size, z.shape[1])
            out[where] = z
        return out

    def pair_rows(self, positives: torch.Tensor, negative_sets: list[torch.Tensor]):
        """``distinct_rows`` of ``positives`` (2, P) heads, their targets and each (P, K_i) set
        of their negative targets."""
        return distinct_rows(self.num_rows, positives[0], positives[1], *negative_sets)

    @torch.no_grad()
    def score_sets(self, model: nn.Module, rows) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``link_train.score_sets`` of the pairs ``rows`` (``pair_rows``) names, from the
        embeddings of those rows alone: positives (P,), each negative set (P, K_i)."""
        needed, (heads, targets, *sets) = rows
        z = self.embed(model, needed)
        return (pair_scores(z, heads, targets).float(),
                [pair_scores(z, heads, targets_k).float() for targets_k in sets])

    def score(self, model: nn.Module) -> dict[str, float]:
        pos, (neg,) = self.score_sets(model, self.val_rows)
        return val_scores(pos.numpy(), neg.numpy())

    def chunks(self, needed: np.ndarray, rows: str):
        """Per chunk of ``BASELINE_CHUNK_ROWS`` ids of a segment, in the encoder's order:
        (node type, feature rows (k, F_t), the positions in them of the needed rows (int64),
        the slice of ``needed`` those are). ``rows``: ``every`` chunk with all its rows,
        the chunks ``touched`` by a needed row with all their rows, or only the ``needed`` rows
        of those. Reads a block of ``block_rows`` ids at a time."""
        for node_type, offset, features in self.segments:
            n = int(features.shape[0])
            base, stop = np.searchsorted(needed, [offset, offset + n]).tolist()
            ids = needed[base:stop] - offset  # this segment's needed rows, local ids
            for lo in range(0, n, self.block_rows):
                hi = min(n, lo + self.block_rows)
                a, b = np.searchsorted(ids, [lo, hi]).tolist()
                if b == a and rows != "every":
                    continue
                x = read_rows(features, lo, hi, ids[a:b]) if rows == "needed" else features[lo:hi]
                for begin in range(lo, hi, BASELINE_CHUNK_ROWS):
                    end = min(hi, begin + BASELINE_CHUNK_ROWS)
                    c, d = np.searchsorted(ids, [begin, end]).tolist()
                    if d == c and rows != "every":
                        continue
                    if rows == "needed":
                        chunk, at = x[c - a:d - a], torch.arange(d - c)
                    else:
                        chunk, at = x[begin - lo:end - lo], torch.from_numpy(ids[c:d] - begin)
                    yield node_type, chunk, at, slice(base + c, base + d)


def distinct_rows(num_rows: int, *ids: torch.Tensor
                  ) -> tuple[np.ndarray, list[torch.Tensor]]:
    """The ascending distinct ids (U,) that ``ids`` (int64 tensors, any shape, in
    [0, num_rows)) hold, and each of ``ids`` as positions in them (int64, same shapes).
    Transient: a flag and a position per row (9 B)."""
    seen = np.zeros(num_rows, dtype=bool)
    for i in ids:
        seen[i.numpy().ravel()] = True
    needed = np.flatnonzero(seen)
    where = np.empty(num_rows, dtype=np.int64)
    where[needed] = np.arange(needed.size)
    return needed, [torch.from_numpy(where[i.numpy()]) for i in ids]


def fit_link_blocks(build_encoder: Callable[[], nn.Module], segments: list[Segment],
                    edges: dict[str, torch.Tensor], negatives: dict[str, torch.Tensor],
                    sampler: NegativeSampler, cfg: FitParams, seed: int, *, block_rows: int,
                    hard_negatives: dict[str, torch.Tensor] | None = None,
                    options: LoopOptions = LoopOptions()) -> LinkTrainResult:
    """``fit_link`` of a row encoder (the MLP, ``TypedMLP``) with the full-graph step, reading
    the features by blocks of ``block_rows`` ids (a multiple of ``BASELINE_CHUNK_ROWS``).

    ``segments``: per node type in the encoder's forward order (node type, its first
    homogeneous id, its features (N_t, F_t) rows by ``x[lo:hi]`` / ``x[ids]``: a
    ``gnnpipe.data.features.ModelFeatures`` or a tensor); ``edges``, ``negatives``,
    ``hard_negatives`` and ``sampler`` as ``fit_link`` (homogeneous ids). One process on the
    CPU. Returns what ``fit_link`` returns: val / test scores from the best weights, history,
    summary (deterministic) and perf.
    """
    if edges["train_supervision"].shape[1] == 0:
        raise ValueError("no train supervision edges to learn from; re-run the split stage")
    task = BlockLinkTask(segments, edges, negatives, sampler, block_rows)
    outcome = loop.run(task, build_encoder, cfg, seed, options)
    seconds = outcome.seconds
    perf = {"seconds": round(seconds, 3), "world_size": 1, "device": outcome.device,
            "train_edges_per_s": round(outcome.epochs_here * task.heads.size
                                       / max(seconds, 1e-9), 1),
            "block_rows": block_rows}
    return link_result(outcome, lambda phase, sets: task.score_sets(
        outcome.model, task.pair_rows(edges[phase], sets)), negatives, hard_negatives, perf)
