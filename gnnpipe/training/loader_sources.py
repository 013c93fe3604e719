"""What the train stage's loader reads (gnnpipe/sampling/builders.py builds it): the ``Source``
of a node task (the train phase's message graph, seeds, and what the sampler's options read:
partition parts, temporal columns, edge weights) or of a link task (the supervision edges).
Each loader draws from the train phase's message graph only."""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe import io
from gnnpipe.training import distributed
from gnnpipe.config import samplers
from gnnpipe.data.graph import EDGE, TYPED
from gnnpipe.hetero.loader import typed_temporal
from gnnpipe.sampling.builders import Source
from gnnpipe.sampling.temporal import align_edge_times, temporal_options
from gnnpipe.sources.base import time_key
from gnnpipe.training.train import TRAIN


def read_partition_meta(args, num_nodes: int) -> dict:
    """The partition's meta.json, checked to be of this split's train-phase graph."""
    meta = io.read_partition_meta(args.partition)
    if meta.get("graph", "train") != "train" or meta["num_nodes"] != num_nodes:
        raise ValueError(f"{args.partition}: the partition is not of this split's train-phase "
                         f"graph ({num_nodes} nodes); re-run the partition stage")
    return meta


def read_partition(args, roles: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
    """Partition meta, part of every node (N,) and train nodes per part (P,), checked, for a
    rank that holds the whole train-phase graph (``roles``: int8 role codes (N,),
    ``gnnpipe.data.graph.ROLE_CODES``)."""
    meta = read_partition_meta(args, roles.size)
    parts = io.read_partition(args.partition)
    if parts.size != roles.size:
        raise ValueError(f"{args.partition}: the partition is not of this split's train-phase "
                         f"graph ({roles.size} nodes); re-run the partition stage")
    train_per_part = np.bincount(parts[roles == TRAIN], minlength=meta["num_parts"])
    return meta, parts, train_per_part


def node_source(args, cfg, ctx, inputs, roles: np.ndarray) -> Source:
    """What the node loader of ``cfg.sampler`` (TrainParams) draws from (``inputs``:
    gnnpipe.training.model_inputs.ModelInputs; ``roles``: int8 role codes (N,),
    ``gnnpipe.data.graph.ROLE_CODES``): the train phase's message graph, the train seeds of
    the (target) type (all, and this rank's share), and what the sampler's options read
    (temporal columns, edge weights, the partition, the train mask of a subgraph sampler:
    homogeneous graphs)."""
    graph, train_graph = inputs.graph, inputs.message_graphs["train"]
    train_nodes = torch.from_numpy(np.flatnonzero(roles == TRAIN))
    mine = distributed.shard(train_nodes, ctx)
    if graph.layout == TYPED:  # seed times of train.temporal for this rank's share
        temporal = typed_temporal(cfg.temporal.by, cfg.temporal.strategy, graph, train_graph,
                                  mine.numpy())
        return Source(graph, train_graph, train_nodes, mine, temporal=temporal)
    view = graph.target_view()  # a homogeneous graph: its one relation
    weight = _edge_weight(args, cfg, view, train_graph)
    partition = read_partition(args, roles) if samplers.needs(cfg.sampler, "partition") else None
    # only subgraph samplers (cluster, saint: no seeds) mask their loss nodes; (N,) bool
    subgraphs = samplers.SAMPLERS[cfg.sampler].around == ""
    return Source(graph, train_graph, train_nodes, mine, inputs.phases["train"].edge_index,
                  _temporal(args, cfg, view, train_graph, mine), weight, partition,
                  torch.from_numpy(roles == TRAIN) if subgraphs else None)


def link_source(inputs, supervision, edge_type) -> Source:
    """What the link loader draws from: subgraphs of the train phase's message graph around
    ``supervision`` (gnnpipe.splitting.inputs.LinkSupervision) edges of ``edge_type`` (typed)."""
    edge_index = None if inputs.graph.layout == TYPED else inputs.phases["train"].edge_index
    return Source(inputs.graph, inputs.message_graphs["train"], edge_index=edge_index,
                  supervision=supervision, edge_type=edge_type)


def _temporal(args, cfg, graph, train_csr, seeds) -> dict:
    """``train.temporal.by``: seed times from the node timestamps, edge times (``edge``) from
    ``edge_attrs_node__to__node.parquet`` (written by prepare for a ``dataset.edges.timestamp``
    column)."""

    edge_time = None
    if cfg.temporal.by == "edge" and (args.prepared / io.edge_attrs_file(EDGE)).exists():

        table = io.read_edge_attrs(args.prepared, EDGE)
        if "timestamp" in table.column_names:
            edge_time = time_key(table.column("timestamp").combine_chunks())
    return temporal_options(cfg.temporal.by, cfg.temporal.strategy, seeds, train_csr,
                            graph.timestamps, graph.csr, edge_time)


def _edge_weight(args, cfg, graph, train_csr) -> np.ndarray | None:
    """``train.neighbor.weighted``: ``edge_weight`` (E_train,) for the sampler, the
    ``dataset.edges.weight`` column of ``edge_attrs_node__to__node.parquet`` (prepared-graph
    edge order) re-aligned to the train message graph; None when not weighted."""
    if not cfg.neighbor.weighted:
        return None

    path = args.prepared / io.edge_attrs_file(EDGE)
    table = io.read_edge_attrs(args.prepared, EDGE) if path.exists() else None
    if table is None or "weight" not in table.column_names:
        raise ValueError(f"train.neighbor.weighted=true: {args.prepared} holds no edge weights; "
                         "set dataset.edges.weight to the edge table's weight column and re-run "
                         "the prepare stage")
    weight = table.column("weight").to_numpy(zero_copy_only=False).astype(np.float64)
    if (weight < 0).any():
        raise ValueError(f"{path}: column 'weight' holds negative values; neighbor sampling "
                         "draws in proportion to the weights, which must be >= 0")
    return align_edge_times(graph.csr, weight, train_csr)
