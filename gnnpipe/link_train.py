"""Link prediction training: a node encoder, a dot-product decoder, BCE on supervision edges.

The encoder is any node model of gnnpipe/models.py built with ``out_channels = hidden``: its
output rows are node embeddings ``z`` (N, H) and a pair (u, v) scores ``z_u . z_v`` (a logit).
Every epoch encodes the **train** phase's message graph once (full graph), scores the train
supervision positives and one fresh negative per positive (drawn by ``negatives.training_sampler``
against the edges training may see, never against held-out ones) and takes one Adam step on
binary cross-entropy. Validation encodes the **val** phase's graph and ranks each val positive
against its fixed negatives; early stopping keeps the weights of the best val MRR. Final scores:
val pairs on the val graph, test pairs on the test graph, so each phase sees only its own graph.
Randomness (initialisation, dropout, negatives) comes only from ``seed``; ``fork_rng`` keeps the
caller's global torch RNG untouched.
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
from gnnpipe.metrics import mrr
from gnnpipe.negatives import NegativeSampler
from gnnpipe.train import PhaseInput

EVAL_PHASES = ("val", "test")
_CHUNK = 1 << 18  # gathered embedding entries per scoring block (~1 MB: stays in cache)


@dataclass
class LinkTrainResult:
    scores: dict[str, tuple[torch.Tensor, torch.Tensor]]  # phase -> (pos (P,), neg (P, K)) float32
    state_dict: dict
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)  # deterministic for a fixed seed
    perf: dict = field(default_factory=dict)  # wall-clock figures, differ run to run


def encode(model: nn.Module, inputs: PhaseInput) -> torch.Tensor:
    """Node embeddings (N, H) of one phase: graph models run on that phase's message graph."""
    if inputs.edge_index is None:
        return model(inputs.x)
    return model(inputs.x, inputs.edge_index)


def pair_scores(z: torch.Tensor, heads: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Dot-product logits: ``heads`` (P,) with ``targets`` (P,) -> (P,) or (P, K) -> (P, K)."""
    if targets.dim() == 1:
        return (z[heads] * z[targets]).sum(-1)
    k, dim = targets.shape[1], z.shape[1]
    rows = max(1, _CHUNK // max(k * dim, 1))
    blocks = []
    for h, t in zip(heads.split(rows), targets.split(rows)):
        z_t = z.index_select(0, t.reshape(-1)).view(t.shape[0], k, dim)  # (p, K, H)
        blocks.append(torch.bmm(z_t, z.index_select(0, h).unsqueeze(2)).squeeze(2))  # (p, K)
    return torch.cat(blocks) if blocks else torch.empty(0, k)


@torch.no_grad()
def score_phase(model: nn.Module, inputs: PhaseInput, positives: torch.Tensor,
                negatives: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores of ``positives`` (2, P) and their fixed ``negatives`` (P, K) on the phase graph."""
    model.eval()
    z = encode(model, inputs)
    pos = pair_scores(z, positives[0], positives[1])
    neg = pair_scores(z, positives[0], negatives)
    return pos.float(), neg.float()


def fit_link(build_encoder: Callable[[], nn.Module], inputs: dict[str, PhaseInput],
             edges: dict[str, torch.Tensor], negatives: dict[str, torch.Tensor],
             sampler: NegativeSampler, cfg: BaselineParams, seed: int, *,
             progress: Callable[[Iterable], Iterable] = lambda it, **_: it) -> LinkTrainResult:
    """Train an encoder on ``edges["train_supervision"]`` and score the val/test pairs.

    ``inputs`` phase -> PhaseInput (``gnnpipe.train.build_inputs``); ``edges`` role -> int64
    (2, E) positives; ``negatives`` "val"/"test" -> int64 (P, K) fixed targets of the heads
    ``edges[phase][0]``; ``sampler`` draws the per-epoch training negatives.
    """
    supervision = edges["train_supervision"]
    if supervision.shape[1] == 0:
        raise ValueError("no train supervision edges to learn from; re-run the split stage")
    heads = supervision[0].numpy()
    labels = torch.cat([torch.ones(heads.size), torch.zeros(heads.size)])
    rng = np.random.default_rng(seed)
    history: list[dict] = []
    best = (-1.0, 0)
    started = time.perf_counter()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = build_encoder()
        best_state = copy.deepcopy(model.state_dict())
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        bar = progress(range(1, cfg.epochs + 1), desc="epochs", unit="ep")
        stale = 0
        for epoch in bar:
            model.train()
            fresh = torch.from_numpy(sampler.sample(heads, 1, rng)[:, 0])  # (P,) new each epoch
            optimizer.zero_grad()
            z = encode(model, inputs["train"])
            logits = torch.cat([pair_scores(z, supervision[0], supervision[1]),
                                pair_scores(z, supervision[0], fresh)])
            loss = F.binary_cross_entropy_with_logits(logits, labels)
            loss.backward()
            optimizer.step()
            pos, neg = score_phase(model, inputs["val"], edges["val"], negatives["val"])
            val_mrr = mrr(pos.numpy(), neg.numpy())  # per positive: no sort of all scores
            history.append({"epoch": epoch, "train_loss": round(float(loss.detach()), 6),
                            "val_mrr": round(val_mrr, 6)})
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{float(loss.detach()):.4f}", mrr=f"{val_mrr:.4f}")
            if val_mrr > best[0]:
                best, stale = (val_mrr, epoch), 0
                best_state = copy.deepcopy(model.state_dict())
            else:
                stale += 1
                if stale >= cfg.patience:
                    break
    seconds = time.perf_counter() - started
    model.load_state_dict(best_state)
    scores = {phase: score_phase(model, inputs[phase], edges[phase], negatives[phase])
              for phase in EVAL_PHASES}
    epochs_run = len(history)
    summary = {
        "task": "link",
        "best_epoch": best[1],
        "best_val_mrr": round(best[0], 6),
        "epochs_run": epochs_run,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    perf = {"seconds": round(seconds, 3),
            "train_edges_per_s": round(epochs_run * heads.size / max(seconds, 1e-9), 1)}
    return LinkTrainResult(scores=scores, state_dict=best_state, history=history,
                           summary=summary, perf=perf)
