"""Edge hold-out for link prediction, with per-phase message graphs that cannot leak, for every
graph (``gnnpipe.data.graph.Graph``; a homogeneous graph is its one-type case).

One edge type ``E`` (``graph.link_edge_type``: ``author writes paper``; the one edge type of a
homogeneous graph) is held out together with its reverse ``R`` (``paper rev_writes author``).
The unit of the split is the **node pair**: ``(a, p)``, present in ``E`` as ``a -> p`` and/or in
``R`` as ``p -> a``; for a relation that is its own reverse (``cites``; a homogeneous graph) the
**unordered** pair, so all stored copies of an edge, its reverse edge and (in a directed graph)
a reciprocal edge go to the same split together, and no held-out edge can reach a message graph
through its other direction. Self-loops are never positives (a node's link to itself is not a
question) and stay in every message graph: they reveal nothing about any pair of two distinct
nodes. Other edge types are kept whole in every phase.

Pairs are shuffled and cut into ``val``, ``test`` and training pairs; with
``disjoint_train_ratio`` a share of the training pairs becomes supervision-only (as PyG's
``RandomLinkSplit``). Roles written by the split stage:

  message            training pairs that pass messages in the train phase
  train_supervision  training pairs the loss is computed on (= message when the ratio is 0)
  val, test          held-out positives, each with fixed negatives (gnnpipe/splitting/negatives.py)

Message graph of each phase (the same choice as PyG's ``RandomLinkSplit``):

  train  message pairs only (supervision-only pairs are never in the graph the model encodes)
  val    every training pair (message + supervision): what is known once training is over
  test   training + val pairs: at test time the val edges are known, the test edges are not

So no phase's graph holds an edge of the split it is evaluated on or of a later one; the audit
(gnnpipe/splitting/audit.py ``audit_link_split``) recomputes this from the written artifacts. A
symmetric relation (its own reverse with a symmetric CSR, detected from the data: an undirected
graph) stores each positive pair once, in a random orientation; a directed one every directed edge
of the pair. Fixed val/test negatives keep the head (an ``E[0]`` node) and draw a target of type
``E[2]`` that is in no pair of any split, either direction. Hard negatives
(``hard_link_negatives``, with ``split.link.num_hard_negatives``) keep the head too and take the
targets of type ``E[2]`` it is closest to by resource allocation in the train phase's graph
(gnnpipe/splitting/hard_negatives.py), under the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gnnpipe.config import LinkSplitParams
from gnnpipe.data.graph import Csr, EdgeType, Graph, edge_type_name
from gnnpipe.data.edges import csr_from_edges, edge_pairs, sorted_unique
from gnnpipe.graphops.heuristics import train_view
from gnnpipe.splitting import hash_assign
from gnnpipe.splitting.hard_negatives import hard_negatives
from gnnpipe.splitting.hash_assign import key_order
from gnnpipe.splitting.negatives import NegativeSampler
from gnnpipe.splitting.split import MessageGraphs

PHASES = ("train", "val", "test")
EDGE_ROLES = ("message", "train_supervision", "val", "test")
HELD_OUT = ("val", "test")

# Codes of a pair's role while splitting: which message graphs may hold it.
_MESSAGE, _SUPERVISION_ONLY, _VAL, _TEST = 0, 1, 2, 3
_VISIBLE_CODES = {"train": (_MESSAGE,), "val": (_MESSAGE, _SUPERVISION_ONLY),
                  "test": (_MESSAGE, _SUPERVISION_ONLY, _VAL)}


@dataclass(frozen=True)
class LinkSplit:
    edge_type: EdgeType
    reverse: EdgeType | None
    edges: dict[str, torch.Tensor]  # role -> int64 (2, E_role) (src of E[0], dst of E[2])
    negatives: dict[str, torch.Tensor]  # "val"/"test" -> int64 (P, K) ids of E[2]
    message_graphs: MessageGraphs
    undirected: bool  # a symmetric relation: one positive per unordered pair


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


def pair_counts(num_pairs: int, cfg: LinkSplitParams, what: str) -> tuple[int, int, int]:
    """Pairs held out for val and test, and supervision-only pairs, from the sizes in ``cfg``;
    ``what`` ("... {n} ...") names the pairs in the error for empty roles."""
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
    return n_val, n_test, n_disjoint


# Pair codes in the order pairs are taken: [val | test | supervision-only | message].
TAKEN_CODES = np.array([_VAL, _TEST, _SUPERVISION_ONLY, _MESSAGE], dtype=np.int8)


def assign_pair_roles(pairs: np.ndarray, cfg: LinkSplitParams, rng: np.random.Generator,
                      what: str, hash_seed: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray, int]:
    """Role code int8 (P,) per pair id (``_VAL`` / ``_TEST`` / ``_SUPERVISION_ONLY`` /
    ``_MESSAGE``), an orientation bool (P,) and the supervision-only count: pairs taken in
    shuffled order (``rng``), or by their keys of ``hash_seed`` (split.assign: hash)."""
    num_pairs = pairs.size
    n_val, n_test, n_disjoint = pair_counts(num_pairs, cfg, what)
    code = np.empty(num_pairs, dtype=np.int8)
    order = (rng.permutation(num_pairs) if hash_seed is None
             else key_order(hash_assign.pair_keys(hash_seed, pairs)))
    bounds = np.cumsum([n_val, n_test, n_disjoint])
    code[order] = TAKEN_CODES[np.searchsorted(bounds, np.arange(num_pairs), side="right")]
    flip = (rng.random(num_pairs) < 0.5 if hash_seed is None  # orientation, if undirected
            else hash_assign.flipped(hash_seed, pairs))
    return code, flip, n_disjoint


def pair_keys(edge_type: EdgeType, reverse: EdgeType | None, src: np.ndarray, dst: np.ndarray,
              num_dst: int, *, flipped: bool = False) -> np.ndarray:
    """Key of the pair behind each edge: ``E`` edges ``a -> p`` and ``R`` edges ``p -> a``
    (``flipped``) give ``a * N_p + p``; a relation that is its own reverse
    (``reverse == edge_type``) keys the unordered pair ``min * N + max``."""
    if flipped:
        src, dst = dst, src
    if reverse == edge_type:
        return np.minimum(src, dst) * num_dst + np.maximum(src, dst)
    return src * num_dst + dst


def negative_weights(graph: Graph, edge_type: EdgeType, strategy: str,
                     train_csr: Csr) -> np.ndarray:
    """Target weights over the homogeneous ids (``graph.offsets()``): only nodes of the edge
    type's target type can be drawn; uniformly, or by their in-degree in ``train_csr`` (the
    train phase's CSR of ``edge_type``) for ``negative_strategy: degree``. float64 (total,)."""
    weights = np.zeros(graph.num_nodes)
    start = graph.offsets()[edge_type[2]]
    n = graph.num_nodes_dict[edge_type[2]]
    weights[start:start + n] = 1.0 if strategy == "uniform" else train_csr.degrees().numpy()
    return weights


def typed_negative_sampler(graph: Graph, edge_type: EdgeType, src: np.ndarray,
                           dst: np.ndarray, weights: np.ndarray | None) -> NegativeSampler:
    """A sampler over homogeneous ids forbidding the type-local pairs ``src`` -> ``dst``."""
    offsets = graph.offsets()
    return NegativeSampler(src + offsets[edge_type[0]], dst + offsets[edge_type[2]],
                           graph.num_nodes, weights)


def split_links(graph: Graph, cfg: LinkSplitParams, rng: np.random.Generator,
                hash_seed: int | None = None) -> LinkSplit:
    """Hold out val/test pairs of ``graph.link_edge_type`` and its reverse together, build the
    per-phase, per-edge-type message graphs and the fixed negatives: shuffled by ``rng``, or
    (``hash_seed``, split.assign: hash) pairs, row order and negatives from hashes of ids.

    Repeated edges and self-loops are allowed. Raises ``ValueError`` when the sizes leave a role
    empty or no negative can be drawn.
    """
    e = graph.link_edge_type
    r = graph.reverse.get(e)
    n_dst = graph.num_nodes_dict[e[2]]
    src, dst = edge_pairs(graph.csr[e])
    loop = (src == dst) if e[0] == e[2] else np.zeros(src.size, dtype=bool)
    keys = pair_keys(e, r, src, dst, n_dst)
    rev_src = rev_dst = rev_keys = rev_loop = None
    if r is not None and r != e:
        rev_src, rev_dst = edge_pairs(graph.csr[r])
        rev_keys = pair_keys(e, r, rev_src, rev_dst, n_dst, flipped=True)
        rev_loop = (rev_src == rev_dst) if e[0] == e[2] else np.zeros(rev_src.size, dtype=bool)
    pairs = np.unique(np.concatenate([keys[~loop]] + ([] if rev_keys is None
                                                     else [rev_keys[~rev_loop]])))
    num_pairs = pairs.size
    if num_pairs == 0:
        raise ValueError("dataset.task=link needs edges between distinct nodes; "
                         + ("the graph" if graph.is_homogeneous else
                            f"edge type {edge_type_name(e)}") + " has none")
    code, flip, n_disjoint = assign_pair_roles(
        pairs, cfg, rng, "the graph's {n} edges (undirected pairs)" if graph.is_homogeneous
        else "the {n} " + edge_type_name(e) + " pairs", hash_seed)

    def phase_csr(edge_src, edge_dst, edge_keys, edge_loop, edge_type, phase) -> Csr:
        pos = np.searchsorted(pairs, edge_keys)
        edge_code = np.where(edge_loop, -1, code[np.minimum(pos, num_pairs - 1)])
        keep = edge_loop | np.isin(edge_code, _VISIBLE_CODES[phase])
        return csr_from_edges(edge_src[keep], edge_dst[keep], graph.num_nodes_dict[edge_type[2]],
                              graph.num_nodes_dict[edge_type[0]])

    message_graphs: MessageGraphs = {}
    for phase in PHASES:
        if phase == "val" and not n_disjoint:  # the same edges as train: stored once
            message_graphs[phase] = message_graphs["train"]
            continue
        graphs = dict(graph.csr)  # the other edge types: whole, the same objects
        graphs[e] = phase_csr(src, dst, keys, loop, e, phase)
        if rev_keys is not None:
            graphs[r] = phase_csr(rev_src, rev_dst, rev_keys, rev_loop, r, phase)
        message_graphs[phase] = graphs

    undirected = r == e and is_symmetric(graph.csr[e])
    if undirected:  # unordered pairs of one node type: a random orientation
        low, high = pairs // n_dst, pairs % n_dst
        pos_src, pos_dst = np.where(flip, high, low), np.where(flip, low, high)
        pos_code = code
    elif r == e:  # every distinct directed edge of a pair, labelled with the pair's role
        directed = np.unique(src[~loop] * n_dst + dst[~loop])
        pos_src, pos_dst = directed // n_dst, directed % n_dst
        pos_code = code[np.searchsorted(pairs, np.minimum(pos_src, pos_dst) * n_dst
                                        + np.maximum(pos_src, pos_dst))]
    else:
        pos_src, pos_dst = pairs // n_dst, pairs % n_dst
        pos_code = code
    role_codes = {"message": (_MESSAGE,), "val": (_VAL,), "test": (_TEST,),
                  "train_supervision": (_SUPERVISION_ONLY,) if n_disjoint else (_MESSAGE,)}
    edges = {}
    for role in EDGE_ROLES:  # shuffled within a role: row order carries no trace of ids
        rows = np.flatnonzero(np.isin(pos_code, role_codes[role]))
        rows = rows[rng.permutation(rows.size) if hash_seed is None else key_order(
            hash_assign.row_keys(hash_seed, pos_src[rows] * n_dst + pos_dst[rows]))]
        edges[role] = torch.from_numpy(np.stack([pos_src[rows], pos_dst[rows]]).astype(np.int64))

    # uniform over every node needs no weights (draws integers, not floats: kept so)
    weights = (None if cfg.negative_strategy == "uniform" and graph.num_nodes == n_dst
               else negative_weights(graph, e, cfg.negative_strategy, message_graphs["train"][e]))
    sampler = typed_negative_sampler(graph, e, pairs // n_dst, pairs % n_dst, weights)
    head_offset, target_offset = graph.offsets()[e[0]], graph.offsets()[e[2]]
    counts = {"val": cfg.num_val_negatives, "test": cfg.num_test_negatives}
    negatives = {}
    for phase in HELD_OUT:
        heads = edges[phase][0].numpy() + head_offset
        drawn = (sampler.sample(heads, counts[phase], rng) if hash_seed is None else
                 sampler.sample_hashed(heads, edges[phase][0].numpy() * n_dst
                                       + edges[phase][1].numpy(), counts[phase], hash_seed))
        negatives[phase] = torch.from_numpy(drawn - target_offset)
    return LinkSplit(edge_type=e, reverse=r, edges=edges, negatives=negatives,
                     message_graphs=message_graphs, undirected=undirected)


def hard_link_negatives(graph: Graph, link: LinkSplit, per_head: int, rng: np.random.Generator
                        ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """HeaRT-style hard negatives of the val and test positives of ``link``: phase -> int64
    (P, per_head) ids of ``E[2]`` (type-local), row i for the head ``link.edges[phase][0, i]``;
    and phase -> the fraction of those slots the 2-hop ranking filled (the rest: uniform).

    Ranked by resource allocation on the train phase's message graph, every edge type over
    ``graph.offsets()`` ids (``train_view``), candidates of type ``E[2]`` only; never the head,
    a message edge or a positive pair of any role, either direction. ``rng``: the split's
    hard-negative stream (the random negatives keep theirs)."""
    e = link.edge_type
    offsets = graph.offsets()
    s_off, d_off = offsets[e[0]], offsets[e[2]]
    n = graph.num_nodes
    positives = torch.cat([link.edges[role] for role in EDGE_ROLES], dim=1).numpy()
    forbidden = sorted_unique((positives[0] + s_off) * n + positives[1] + d_off)
    targets = None if graph.is_homogeneous else (d_off, d_off + graph.num_nodes_dict[e[2]])
    view = train_view(graph, link.message_graphs["train"])
    drawn = {phase: hard_negatives(view, link.edges[phase][0].numpy() + s_off, per_head,
                                   forbidden, rng, targets) for phase in HELD_OUT}
    return ({phase: torch.from_numpy(d.ids - d_off) for phase, d in drawn.items()},
            {phase: d.ranked / max(d.ids.size, 1) for phase, d in drawn.items()})


def link_meta(report: dict, cfg: LinkSplitParams, typed: bool) -> dict:
    """What meta.json says of a link split (after its task), from its audit ``report``."""
    return {"edge_type": report["edge_type"], "reverse_edge_type": report["reverse_edge_type"],
            **({} if typed else {"undirected": report["undirected"]}),
            "disjoint_train_ratio": cfg.disjoint_train_ratio,
            "negative_strategy": cfg.negative_strategy}
