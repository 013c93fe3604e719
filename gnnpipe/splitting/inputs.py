"""The split as the stages after it read it: the features every model reads (normalized by
data/features), the graph with its split (either layout, gnnpipe/io/typed.py), and the link
supervision (positives, fixed negatives, the training negative sampler)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from gnnpipe import io
from gnnpipe.data.features import ModelFeatures, read_transform
from gnnpipe.data.graph import HOMOGENEOUS, TYPED, Graph
from gnnpipe.io.rows import FeatureSource
from gnnpipe.io.splits import LINK_EVAL_PHASES as EVAL_PHASES
from gnnpipe.splitting.link_split import negative_weights
from gnnpipe.splitting.negatives import training_sampler_of_blocks


@dataclass(frozen=True)
class TypedSplit:
    """A graph (either layout), its split's meta.json and phase -> edge type -> message-graph
    CSR."""
    graph: Graph
    meta: dict
    graphs: dict


@dataclass(frozen=True)
class LinkSupervision:
    """Positives per role but the message edges (2, E_role: in a stage, mapped scratch
    tables, ``io.read_typed_link_split`` of ``io.TRAINING_LINK_ROLES``) and fixed negatives per phase (E_phase, K) in the
    model's node ids, the sampler of training negatives and the split's hard negatives per
    phase (E_phase, K_hard), None where it drew none. Read with ``rows`` (a DDP rank's share),
    both negatives hold only the rows of those positives (the positives stay whole)."""

    edges: dict
    negatives: dict
    sampler: object
    hard: dict | None = None


def model_features(args, x: torch.Tensor, node_type: str | None = None) -> torch.Tensor:
    """THE way node features reach a model (GNN, MLP baseline, SIGN hops, predict): ``x`` (all
    nodes, or rows of some) through the transform the split stage fitted into ``args.features``
    (``features.normalize``, gnnpipe/data/features.py). ``none`` returns ``x`` itself (a
    memory-mapped tensor stays zero-copy); row / standardize return a normalized float32 copy."""

    return read_transform(args.features, node_type, int(x.shape[1])).apply(x)


def lazy_model_features(args, stored: torch.Tensor, *, amp: bool = False):
    """``model_features`` of the stored (memory-mapped) ``stored`` (N, F) as a
    ``gnnpipe.data.features.ModelFeatures``: rows read, cast and normalized per request. ``amp``
    with bfloat16 storage: rows in bfloat16 (half of float32's bytes; autocast's CPU dtype)."""

    dtype = torch.bfloat16 if amp and stored.dtype == torch.bfloat16 else torch.float32
    transform = read_transform(args.features, None, int(stored.shape[1]))
    return ModelFeatures(FeatureSource(stored, mapped=True), transform, dtype)


def whole_features(inputs: dict) -> dict:
    """Phase inputs (``gnnpipe.training.train.build_inputs``) whose evaluation runs a whole-graph
    forward get the whole float32 matrix of a ``ModelFeatures`` (built once, shared by the phases);
    layer-wise phases keep reading rows per block."""

    whole = {}
    for phase, given in inputs.items():
        if isinstance(given.x, ModelFeatures) and given.layerwise is None:
            if id(given.x) not in whole:
                whole[id(given.x)] = given.x.materialize(torch.float32)
            inputs = {**inputs, phase: replace(given, x=whole[id(given.x)])}
    return inputs


def read_model_typed(args, *, mmap: bool = False, graph: Graph | None = None) -> TypedSplit:
    """``read_typed`` with every node type's ``x`` as the models read it (per type; a
    homogeneous layout's one type through its one transform)."""
    typed = read_typed(args, mmap=mmap, graph=graph)
    graph = typed.graph
    per_type = graph.layout == TYPED  # data/features keeps a transform per type of typed files
    x = {t: model_features(args, xt, t if per_type else None) for t, xt in graph.x.items()}
    return replace(typed, graph=replace(graph, x=x))


def read_typed(args, *, mmap: bool = False, graph: Graph | None = None) -> TypedSplit:
    """The graph as prepared (raw features: analyze, evaluate; ``graph``: already read), its
    split's meta and message graphs; models read ``read_model_typed``. ``mmap``: tensors are
    views of the memory-mapped files."""
    graph = io.read_graph(args.prepared, mmap=mmap) if graph is None else graph
    meta = io.read_split_meta(args.split)
    return TypedSplit(graph, meta, io.read_typed_message_graphs(args.split, graph, mmap=mmap)[1])


def read_typed_link_supervision(args, typed: TypedSplit,
                                rows: Callable[[int], slice] | None = None
                                ) -> tuple[tuple, LinkSupervision]:
    """The held-out edge type and its supervision shifted to ``to_homogeneous`` ids (the
    typed models' output rows), with training negatives that avoid only what training may see
    (gnnpipe/splitting/negatives.py), drawn with the strategy of the fixed ones, so training
    and evaluation ask one question. A homogeneous layout is the one-type case: ids are the
    graph's own (offset 0), uniform negatives are drawn unweighted. ``rows(P)``: the val / test
    positives (of P) whose fixed and hard negatives this process reads (None: all)."""

    graph = typed.graph
    # train supervision, val and test positives: mapped scratch tables (no message edges)
    edge_type, edges, negatives = io.read_typed_link_split(args.split, graph, rows,
                                                           io.TRAINING_LINK_ROLES)
    n_src, n_dst = graph.num_nodes_dict[edge_type[0]], graph.num_nodes_dict[edge_type[2]]
    hard = io.read_link_negatives(args.split, edges, n_dst, None if rows is None else
                                  {p: rows(edges[p].shape[1]) for p in EVAL_PHASES}, hard=True)
    offsets = graph.offsets()
    s_off, d_off = offsets[edge_type[0]], offsets[edge_type[2]]
    if s_off or d_off:  # in place, once the negatives are checked against the type-local heads
        for pair in edges.values():  # this process's own tables
            pair[0] += s_off
            pair[1] += d_off
    strategy = typed.meta.get("negative_strategy", "uniform")
    weights = (None if strategy == "uniform" and graph.layout == HOMOGENEOUS else
               negative_weights(graph, edge_type, strategy, typed.graphs["train"][edge_type]))
    # the edges training may see, streamed by batches into mapped keys (to_homogeneous ids)
    visible = io.visible_link_blocks(args.split, n_src, n_dst, (s_off, d_off))
    if d_off:  # the negatives' targets to to_homogeneous ids (offset 0: the tensors, no copy)
        negatives = {phase: ids + d_off for phase, ids in negatives.items()}
        hard = None if hard is None else {phase: ids + d_off for phase, ids in hard.items()}
    return edge_type, LinkSupervision(
        edges, negatives, training_sampler_of_blocks(visible, graph.num_nodes, weights), hard)
