"""Typed splits of a heterogeneous graph, with one message graph per phase and edge type.

**Node task** (``input_nodes = (target, mask)`` in PyG's words): only the target type (``paper``)
carries labels, so only its nodes get roles; the roles are drawn by the homogeneous
``gnnpipe.split.split_nodes`` on the target type's own relation (random, stratified, cluster;
public with an official split and time with node times of the target, which
``HeteroGraph.target_graph`` carries from typed tables and OGB-MAG folders). ``transductive``: every phase passes messages
over the whole graph. ``inductive``: the train phase's graph drops, in **every** edge type, each
edge with an endpoint of the target type that is not a train node (val: not train or val), so
no val/test paper reaches training through an author or a venue either. Unlabelled target
nodes (``y == UNLABELLED``) are "unused", never split, and are seen by every phase (as in
``gnnpipe.split``): they keep their edges in the train and val graphs.

**Link task**: one edge type ``E`` (``graph.link_edge_type``, default ``author writes paper``) is
held out together with its reverse ``R`` (``paper rev_writes author``): the unit of the split is
the pair ``(a, p)``, present in ``E`` as ``a -> p`` and/or in ``R`` as ``p -> a``, so a held-out
pair vanishes from both edge types of a phase's graph (a symmetric relation such as ``cites``,
its own reverse, pairs unordered as in ``gnnpipe.link_split``). Roles and phase graphs follow
``gnnpipe.link_split``: train = message pairs, val = all training pairs, test = training + val
pairs; other edge types are kept whole in every phase. Fixed val/test negatives keep the head
(an ``E[0]`` node) and draw a target of type ``E[2]`` that is in no pair of any split.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from gnnpipe.config import LinkSplitParams, NodeSplitParams
from gnnpipe.graph import UNLABELLED, Csr
from gnnpipe.typed_graph import EdgeType, HeteroGraph, edge_pairs, typed_csr
from gnnpipe.link_split import (  # the same roles and visibility as homogeneous link splits
    _MESSAGE, _SUPERVISION_ONLY, _TEST, _VAL, _VISIBLE_CODES, EDGE_ROLES, HELD_OUT, PHASES,
    assign_pair_roles)
from gnnpipe.negatives import NegativeSampler
from gnnpipe.split import split_nodes


MessageGraphs = dict[str, dict[EdgeType, Csr]]  # phase -> edge type -> CSR


def restrict_to(graph: HeteroGraph, csrs: dict[EdgeType, Csr], visible: np.ndarray
                ) -> dict[EdgeType, Csr]:
    """Every edge type without the edges that touch a target node outside ``visible`` (bool
    (N_target,)); an edge type not touching the target type is kept as the same object."""
    out = {}
    for edge_type, csr in csrs.items():
        s, _, d = edge_type
        if graph.target not in (s, d):
            out[edge_type] = csr
            continue
        src, dst = edge_pairs(csr)
        keep = np.ones(src.size, dtype=bool)
        if s == graph.target:
            keep &= visible[src]
        if d == graph.target:
            keep &= visible[dst]
        out[edge_type] = typed_csr(src[keep], dst[keep], graph.num_nodes(s), graph.num_nodes(d))
    return out


@dataclass(frozen=True)
class HeteroNodeSplit:
    roles: np.ndarray  # str (N_target,): train | val | test | unused
    message_graphs: MessageGraphs  # phases may share one dict
    mode: str
    # strategy public: official train/val/test nodes that are unlabelled, per role (now unused)
    unlabelled_dropped: dict[str, int] = field(default_factory=dict)


def split_hetero_nodes(graph: HeteroGraph, cfg: NodeSplitParams,
                       rng: np.random.Generator) -> HeteroNodeSplit:
    """Roles of the target type's nodes and the per-phase, per-edge-type message graphs."""
    if cfg.strategy == "cluster" and graph.own_relation() is None:
        raise ValueError(f"split.node.strategy=cluster keeps clusters of the {graph.target!r} "
                         f"type's own relation together, and this graph has no {graph.target} "
                         f"-> {graph.target} edge type; use random, stratified, time or public")
    node_split = split_nodes(graph.target_graph(), cfg, rng)
    roles, dropped = node_split.roles, node_split.unlabelled_dropped
    if cfg.mode == "transductive":
        return HeteroNodeSplit(roles, {phase: graph.csr for phase in PHASES}, cfg.mode, dropped)
    train = (roles == "train") | (graph.y.numpy() == UNLABELLED)  # unlabelled: seen by all
    graphs = {"train": restrict_to(graph, graph.csr, train),
              "val": restrict_to(graph, graph.csr, train | (roles == "val")),
              "test": graph.csr}
    return HeteroNodeSplit(roles, graphs, cfg.mode, dropped)


# ------------------------------------------------------------------------------------ links
def pair_keys(edge_type: EdgeType, reverse: EdgeType | None, src: np.ndarray, dst: np.ndarray,
              num_dst: int, *, flipped: bool = False) -> np.ndarray:
    """Key of the pair behind each edge: ``E`` edges ``a -> p`` and ``R`` edges ``p -> a``
    (``flipped``) give ``a * N_p + p``; a symmetric relation (``reverse == edge_type``) keys the
    unordered pair ``min * N + max``."""
    if flipped:
        src, dst = dst, src
    if reverse == edge_type:
        return np.minimum(src, dst) * num_dst + np.maximum(src, dst)
    return src * num_dst + dst


@dataclass(frozen=True)
class HeteroLinkSplit:
    edge_type: EdgeType
    reverse: EdgeType | None
    edges: dict[str, torch.Tensor]  # role -> int64 (2, E_role) (src of E[0], dst of E[2])
    negatives: dict[str, torch.Tensor]  # "val"/"test" -> int64 (P, K) ids of E[2]
    message_graphs: MessageGraphs


def negative_weights(graph: HeteroGraph, edge_type: EdgeType, strategy: str,
                     train_csr: Csr) -> np.ndarray:
    """Target weights over the homogeneous ids (``graph.offsets()``): only nodes of the edge
    type's target type can be drawn; uniformly, or by their in-degree in ``train_csr`` (the
    train phase's CSR of ``edge_type``) for ``negative_strategy: degree``. float64 (total,)."""
    weights = np.zeros(graph.total_nodes)
    start = graph.offsets()[edge_type[2]]
    n = graph.num_nodes(edge_type[2])
    weights[start:start + n] = 1.0 if strategy == "uniform" else train_csr.degrees().numpy()
    return weights


def typed_negative_sampler(graph: HeteroGraph, edge_type: EdgeType, src: np.ndarray,
                           dst: np.ndarray, weights: np.ndarray) -> NegativeSampler:
    """A sampler over homogeneous ids forbidding the type-local pairs ``src`` -> ``dst``."""
    offsets = graph.offsets()
    return NegativeSampler(src + offsets[edge_type[0]], dst + offsets[edge_type[2]],
                           graph.total_nodes, weights)


def split_hetero_links(graph: HeteroGraph, cfg: LinkSplitParams,
                       rng: np.random.Generator) -> HeteroLinkSplit:
    """Hold out val/test pairs of ``graph.link_edge_type`` and its reverse together."""
    e = graph.link_edge_type
    r = graph.reverse.get(e)
    n_src, n_dst = graph.num_nodes(e[0]), graph.num_nodes(e[2])
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
        raise ValueError(f"dataset.task=link: edge type {'__'.join(e)} has no edges")
    # orientation flip: for a symmetric relation's positives
    code, flip, n_disjoint = assign_pair_roles(num_pairs, cfg, rng,
                                               "the {n} " + "__".join(e) + " pairs")

    def phase_csr(edge_src, edge_dst, edge_keys, edge_loop, edge_type, phase) -> Csr:
        pos = np.searchsorted(pairs, edge_keys)
        edge_code = np.where(edge_loop, -1, code[np.minimum(pos, num_pairs - 1)])
        keep = edge_loop | np.isin(edge_code, _VISIBLE_CODES[phase])
        return typed_csr(edge_src[keep], edge_dst[keep], graph.num_nodes(edge_type[0]),
                         graph.num_nodes(edge_type[2]))

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

    if r == e:  # unordered pairs of one node type: a random orientation
        low, high = pairs // n_dst, pairs % n_dst
        pos_src, pos_dst = np.where(flip, high, low), np.where(flip, low, high)
    else:
        pos_src, pos_dst = pairs // n_dst, pairs % n_dst
    role_codes = {"message": (_MESSAGE,), "val": (_VAL,), "test": (_TEST,),
                  "train_supervision": (_SUPERVISION_ONLY,) if n_disjoint else (_MESSAGE,)}
    edges = {}
    for role in EDGE_ROLES:  # shuffled within a role: row order carries no trace of ids
        rows = np.flatnonzero(np.isin(code, role_codes[role]))
        rows = rows[rng.permutation(rows.size)]
        edges[role] = torch.from_numpy(np.stack([pos_src[rows], pos_dst[rows]]).astype(np.int64))

    weights = negative_weights(graph, e, cfg.negative_strategy, message_graphs["train"][e])
    sampler = typed_negative_sampler(graph, e, pairs // n_dst, pairs % n_dst, weights)
    head_offset, target_offset = graph.offsets()[e[0]], graph.offsets()[e[2]]
    counts = {"val": cfg.num_val_negatives, "test": cfg.num_test_negatives}
    negatives = {}
    for phase in HELD_OUT:
        drawn = sampler.sample(edges[phase][0].numpy() + head_offset, counts[phase], rng)
        negatives[phase] = torch.from_numpy(drawn - target_offset)
    return HeteroLinkSplit(edge_type=e, reverse=r, edges=edges, negatives=negatives,
                           message_graphs=message_graphs)
