"""Edge hold-out for link prediction, with per-phase message graphs that cannot leak.

The unit of the split is the **unordered node pair**: all stored copies of an edge, its reverse
edge and (in a directed graph) a reciprocal edge go to the same split together, so no held-out
edge can reach a message graph through its other direction. Self-loops are never positives (a
node's link to itself is not a question) and stay in every message graph: they reveal nothing
about any pair of two distinct nodes.

Pairs are shuffled and cut into ``val``, ``test`` and training pairs; with
``disjoint_train_ratio`` a share of the training pairs becomes supervision-only (as PyG's
``RandomLinkSplit``). Roles written by the split stage:

  message            training pairs that pass messages in the train phase
  train_supervision  training pairs the loss is computed on (= message when the ratio is 0)
  val, test          held-out positives, each with fixed negatives (gnnpipe/negatives.py)

Message graph of each phase (the same choice as PyG's ``RandomLinkSplit``):

  train  message pairs only (supervision-only pairs are never in the graph the model encodes)
  val    every training pair (message + supervision): what is known once training is over
  test   training + val pairs: at test time the val edges are known, the test edges are not

So no phase's graph holds an edge of the split it is evaluated on or of a later one; the audit
(gnnpipe/audit.py ``audit_link_split``) recomputes this from the written artifacts. Undirected
graphs (a symmetric CSR, detected from the data) store each positive pair once, in a random
orientation; directed graphs store every directed edge of the pair as a positive.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gnnpipe.config import LinkSplitParams
from gnnpipe.graph import Csr, csr_from_edges
from gnnpipe.negatives import NegativeSampler, degree_weights

PHASES = ("train", "val", "test")
EDGE_ROLES = ("message", "train_supervision", "val", "test")
HELD_OUT = ("val", "test")

# Codes of a pair's role while splitting: which message graphs may hold it.
_MESSAGE, _SUPERVISION_ONLY, _VAL, _TEST = 0, 1, 2, 3
_VISIBLE_CODES = {"train": (_MESSAGE,), "val": (_MESSAGE, _SUPERVISION_ONLY),
                  "test": (_MESSAGE, _SUPERVISION_ONLY, _VAL)}


@dataclass(frozen=True)
class LinkSplit:
    edges: dict[str, torch.Tensor]  # role -> int64 (2, E_role) positive (src, dst), EDGE_ROLES
    negatives: dict[str, torch.Tensor]  # "val"/"test" -> int64 (P, K) targets; heads = edges[p][0]
    message_graphs: dict[str, Csr]  # phase -> message graph (PHASES)
    undirected: bool


def is_symmetric(csr: Csr) -> bool:
    """True if every stored edge's reverse is stored too (an undirected graph)."""
    keys = torch.unique(csr.edge_keys())
    n = csr.num_nodes
    reverse = torch.sort((keys % n) * n + keys // n).values
    return bool(torch.equal(keys, reverse))


def _resolve(value: int | float, total: int, key: str) -> int:
    count = int(round(value * total)) if isinstance(value, float) else int(value)
    if isinstance(value, float) and not 0.0 < value < 1.0:
        raise ValueError(f"split.link.{key}={value} must be a fraction in (0, 1) or a count >= 1")
    if count == 0:
        raise ValueError(f"split.link.{key}={value} resolves to 0 of the graph's {total} edges; "
                         f"give a larger split.link.{key} (fraction or count)")
    return count


def assign_pair_roles(num_pairs: int, cfg: LinkSplitParams, rng: np.random.Generator,
                      what: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Role code int8 (P,) per pair (``_VAL`` / ``_TEST`` / ``_SUPERVISION_ONLY`` /
    ``_MESSAGE``), a random orientation bool (P,) and the supervision-only count, from the
    sizes in ``cfg``; ``what`` ("... {n} ...") names the pairs in the error for empty roles."""
    n_val = _resolve(cfg.val, num_pairs, "val")
    n_test = _resolve(cfg.test, num_pairs, "test")
    n_train = num_pairs - n_val - n_test
    if n_train < 1:
        raise ValueError(f"split.link.val + split.link.test = {n_val + n_test} edges leaves none "
                         f"of {what.format(n=num_pairs)} for training")
    n_disjoint = int(round(cfg.disjoint_train_ratio * n_train))
    if cfg.disjoint_train_ratio > 0 and not 0 < n_disjoint < n_train:
        raise ValueError(f"split.link.disjoint_train_ratio={cfg.disjoint_train_ratio} of "
                         f"{n_train} training edges leaves no supervision or no message edge")
    # Shuffled pairs laid out as [val | test | supervision-only | message].
    code = np.empty(num_pairs, dtype=np.int8)
    order = rng.permutation(num_pairs)
    bounds = np.cumsum([n_val, n_test, n_disjoint])
    code[order] = np.select([np.arange(num_pairs) < b for b in bounds],
                            [_VAL, _TEST, _SUPERVISION_ONLY], _MESSAGE)
    flip = rng.random(num_pairs) < 0.5  # orientation of an undirected positive
    return code, flip, n_disjoint


def split_links(csr: Csr, cfg: LinkSplitParams, rng: np.random.Generator) -> LinkSplit:
    """Hold out val/test pairs, build the per-phase message graphs and the fixed negatives.

    ``csr`` is the prepared graph (rows = targets); repeated edges and self-loops are allowed.
    Raises ``ValueError`` when the sizes leave a role empty or no negative can be drawn.
    """
    n = csr.num_nodes
    src, dst = csr.indices.numpy(), csr.targets().numpy()
    loop = src == dst
    pair_key = np.minimum(src, dst) * n + np.maximum(src, dst)  # (E,) unordered pair
    pairs, pair_of_edge = np.unique(pair_key[~loop], return_inverse=True)
    num_pairs = pairs.size
    if num_pairs == 0:
        raise ValueError("dataset.task=link needs edges between distinct nodes; the graph has none")
    code, flip, n_disjoint = assign_pair_roles(num_pairs, cfg, rng,
                                               "the graph's {n} edges (undirected pairs)")

    edge_code = np.full(src.size, -1, dtype=np.int8)  # -1: self-loop, visible to every phase
    edge_code[~loop] = code[pair_of_edge]
    message_graphs = {}
    for phase in PHASES:
        if phase == "val" and not n_disjoint:  # same edges as train: share it (stored once)
            message_graphs[phase] = message_graphs["train"]
            continue
        keep = loop | np.isin(edge_code, _VISIBLE_CODES[phase])
        message_graphs[phase] = csr_from_edges(src[keep], dst[keep], n)

    undirected = is_symmetric(csr)
    if undirected:
        low, high = pairs // n, pairs % n
        pos_src, pos_dst = np.where(flip, high, low), np.where(flip, low, high)
        pos_code = code
    else:  # every distinct directed edge of a pair, labelled with the pair's role
        keys, first = np.unique(src[~loop] * n + dst[~loop], return_index=True)
        pos_src, pos_dst = keys // n, keys % n
        pos_code = code[pair_of_edge[first]]
    role_codes = {"message": (_MESSAGE,), "val": (_VAL,), "test": (_TEST,),
                  "train_supervision": (_SUPERVISION_ONLY,) if n_disjoint else (_MESSAGE,)}
    edges = {}
    for role in EDGE_ROLES:
        # Shuffled within a role, so row order carries no trace of node ids.
        rows = np.flatnonzero(np.isin(pos_code, role_codes[role]))
        rows = rows[rng.permutation(rows.size)]
        edges[role] = torch.from_numpy(np.stack([pos_src[rows], pos_dst[rows]]).astype(np.int64))

    weights = None
    if cfg.negative_strategy == "degree":
        weights = degree_weights(message_graphs["train"].degrees().numpy())
    sampler = NegativeSampler(src[~loop], dst[~loop], n, weights)  # every true edge, any split
    counts = {"val": cfg.num_val_negatives, "test": cfg.num_test_negatives}
    negatives = {phase: torch.from_numpy(sampler.sample(edges[phase][0].numpy(), counts[phase], rng))
                 for phase in HELD_OUT}
    return LinkSplit(edges=edges, negatives=negatives, message_graphs=message_graphs,
                     undirected=undirected)
