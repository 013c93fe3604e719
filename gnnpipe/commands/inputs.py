"""Reads that several stage commands share: the typed graph with its split, and the link
supervision (positives, fixed negatives, the training negative sampler) of either kind."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnpipe import io
from gnnpipe.graph import Csr
from gnnpipe.io import hetero as hio


@dataclass(frozen=True)
class TypedSplit:
    """A typed graph, its split's meta.json and phase -> edge type -> message-graph CSR."""

    graph: object  # gnnpipe.typed_graph.HeteroGraph
    meta: dict
    graphs: dict


@dataclass(frozen=True)
class LinkSupervision:
    """Positives per role (2, E_role) and fixed negatives per phase (E_phase, K) in the
    model's node ids, and the sampler of training negatives."""

    edges: dict
    negatives: dict
    sampler: object


def read_typed(args) -> TypedSplit:
    graph = hio.read_hetero_graph(args.prepared)
    meta = hio.read_hetero_split_meta(args.split)
    return TypedSplit(graph, meta, hio.read_hetero_message_graphs(args.split, graph)[1])


def read_link_supervision(args, num_nodes: int, graphs: dict[str, Csr]) -> LinkSupervision:
    """Homogeneous link split: negatives avoid only what training may see
    (gnnpipe/negatives.py), drawn with the strategy of the fixed ones, so training and
    evaluation ask one question."""
    from gnnpipe.negatives import degree_weights, training_sampler

    edges = io.read_link_edges(args.split, num_nodes)
    negatives = io.read_link_negatives(args.split, edges, num_nodes)
    visible = torch.cat([edges["message"], edges["train_supervision"]], dim=1).numpy()
    weights = None
    if io.read_split_meta(args.split).get("negative_strategy") == "degree":
        weights = degree_weights(graphs["train"].degrees().numpy())
    return LinkSupervision(edges, negatives,
                           training_sampler(visible[0], visible[1], num_nodes, weights))


def read_typed_link_supervision(args, typed: TypedSplit) -> tuple[tuple, LinkSupervision]:
    """The held-out edge type and its supervision shifted to ``to_homogeneous`` ids (the
    typed models' output rows), with typed training negatives."""
    from gnnpipe.hetero.split import negative_weights, typed_negative_sampler

    graph = typed.graph
    edge_type, edges, negatives = hio.read_hetero_link_split(args.split, graph)
    offsets = graph.offsets()
    s_off, d_off = offsets[edge_type[0]], offsets[edge_type[2]]
    shifted = {role: torch.stack([pair[0] + s_off, pair[1] + d_off])
               for role, pair in edges.items()}
    shifted_negatives = {phase: targets + d_off for phase, targets in negatives.items()}
    visible = torch.cat([edges["message"], edges["train_supervision"]], dim=1).numpy()
    strategy = typed.meta.get("negative_strategy", "uniform")
    weights = negative_weights(graph, edge_type, strategy, typed.graphs["train"][edge_type])
    sampler = typed_negative_sampler(graph, edge_type, visible[0], visible[1], weights)
    return edge_type, LinkSupervision(shifted, shifted_negatives, sampler)
