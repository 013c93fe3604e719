"""What the train stage reads for its loader (gnnpipe/sampling/builders.py builds it): the
``Source`` of a node task (the train phase's message graph, seeds, and what the sampler's
options read: partition parts, temporal columns, edge weights) and the per-rank shard setup of
``train.dist.shard: partition``. Each loader draws from the train phase's message graph only."""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe import io
from gnnpipe.training import distributed
from gnnpipe.commands.inputs import model_features
from gnnpipe.config import samplers
from gnnpipe.hetero.loader import typed_temporal
from gnnpipe.graphops.partition import rank_parts
from gnnpipe.sampling import batch as adapt
from gnnpipe.sampling.builders import Source
from gnnpipe.sampling.cluster import ClusterLoader, ShardParts
from gnnpipe.sampling.store import read_node_rows
from gnnpipe.sampling.temporal import align_edge_times, temporal_options
from gnnpipe.training.sharding import NodeRows, ShardEvaluator, shard_node_ids
from gnnpipe.sources.base import time_key


def read_partition(args, num_nodes: int, roles: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
    """Partition meta, part of every node (N,) and train nodes per part (P,), checked."""
    meta = io.read_partition_meta(args.partition)
    parts = io.read_partition(args.partition)
    if meta.get("graph", "train") != "train" or meta["num_nodes"] != num_nodes or (
            parts.size != num_nodes):
        raise ValueError(f"{args.partition}: the partition is not of this split's train-phase "
                         f"graph ({num_nodes} nodes); re-run the partition stage")
    train_per_part = np.bincount(parts[roles == "train"], minlength=meta["num_parts"])
    return meta, parts, train_per_part


def shard_setup(args, params, ctx, roles, train_mask):
    """``train.dist.shard: partition``: this rank's shards, their node rows, loader and
    evaluator."""

    cfg = params.train
    if len(set(io.read_split_meta(args.split)["message_graph"].values())) != 1:
        raise ValueError("train.dist.shard='partition' scores val and test nodes on the "
                         "train-phase partition, which is their message graph only with "
                         "split.node.mode=transductive; use train.dist.shard: none for "
                         "inductive splits")
    meta, _, train_per_part = read_partition(args, roles.size, roles)
    mine = rank_parts(meta["num_parts"], ctx.rank, ctx.world_size)
    shards = [io.read_partition_shard(args.partition, part) for part in mine]
    ids = shard_node_ids(shards)
    read = read_node_rows(args.prepared, ids)  # through the FeatureStore of data/prepared
    rows = NodeRows(model_features(args, read.x), read.y[ids], ids)  # row-wise: rows of the whole
    loader = adapt.Batches(ClusterLoader(ShardParts(shards), rows, train_mask, train_per_part,
                                   cfg.cluster.parts_per_batch, ctx.rank, ctx.world_size),
                     adapt.train_nodes)
    exact = meta["halo_hops"] >= cfg.num_layers
    if not exact and ctx.is_main:
        print(f"gnnpipe train: note: partition.halo_hops={meta['halo_hops']} < "
              f"train.num_layers={cfg.num_layers}: shard evaluation misses edges beyond the halo")
    evaluator = ShardEvaluator(shards, rows, cfg)  # train.inference: per shard
    rank_info = {"parts": mine, "nodes_held": int(ids.numel()),
                 **({"eval_inference": "layerwise"} if evaluator.layerwise else {})}
    return (read.y, read.num_classes, rows.x.shape[1], loader, evaluator,
            {"shard_eval_exact": exact}, rank_info)


def node_source(args, cfg, ctx, inputs, roles: np.ndarray) -> Source:
    """What the node loader of ``cfg.sampler`` (TrainParams) draws from (``inputs``:
    gnnpipe.training.model_inputs.ModelInputs): the train phase's message graph, the train seeds of
    the (target) type (all, and this rank's share), and what the sampler's options read (temporal
    columns, edge weights, the partition: homogeneous graphs)."""
    graph, train_graph = inputs.graph, inputs.message_graphs["train"]
    train_nodes = torch.from_numpy(np.flatnonzero(roles == "train"))
    mine = distributed.shard(train_nodes, ctx)
    if inputs.target is not None:  # typed: seed times of train.temporal for this rank's share
        temporal = typed_temporal(cfg.temporal.by, cfg.temporal.strategy, graph, train_graph,
                                  mine.numpy())
        return Source(graph, train_graph, train_nodes, mine, temporal=temporal)
    view = graph.target_view()  # a homogeneous graph: its one relation
    weight = _edge_weight(args, cfg, view, train_graph)
    partition = (read_partition(args, view.num_nodes, roles)
                 if samplers.needs(cfg.sampler, "partition") else None)
    return Source(graph, train_graph, train_nodes, mine, inputs.phases["train"].edge_index,
                  _temporal(args, cfg, view, train_graph, mine), weight, partition,
                  torch.from_numpy(roles == "train"))


def link_source(inputs, supervision, edge_type) -> Source:
    """What the link loader draws from: subgraphs of the train phase's message graph around
    ``supervision`` (gnnpipe.commands.inputs.LinkSupervision) edges of ``edge_type`` (typed)."""
    edge_index = None if inputs.target is not None else inputs.phases["train"].edge_index
    return Source(inputs.graph, inputs.message_graphs["train"], edge_index=edge_index,
                  supervision=supervision, edge_type=edge_type)


def _temporal(args, cfg, graph, train_csr, seeds) -> dict:
    """``train.temporal.by``: seed times from the node timestamps, edge times (``edge``) from
    ``edge_attrs.parquet`` (written by prepare for a ``dataset.edges.timestamp`` column)."""

    edge_time = None
    if cfg.temporal.by == "edge" and (args.prepared / "edge_attrs.parquet").exists():

        table = io.read_edge_attrs(args.prepared)
        if "timestamp" in table.column_names:
            edge_time = time_key(table.column("timestamp").combine_chunks())
    return temporal_options(cfg.temporal.by, cfg.temporal.strategy, seeds, train_csr,
                            graph.timestamps, graph.csr, edge_time)


def _edge_weight(args, cfg, graph, train_csr) -> np.ndarray | None:
    """``train.neighbor.weighted``: ``edge_weight`` (E_train,) for the sampler, the
    ``dataset.edges.weight`` column of ``edge_attrs.parquet`` (prepared-graph edge order)
    re-aligned to the train message graph; None when not weighted."""
    if not cfg.neighbor.weighted:
        return None

    path = args.prepared / "edge_attrs.parquet"
    table = io.read_edge_attrs(args.prepared) if path.exists() else None
    if table is None or "weight" not in table.column_names:
        raise ValueError(f"train.neighbor.weighted=true: {args.prepared} holds no edge weights; "
                         "set dataset.edges.weight to the edge table's weight column and re-run "
                         "the prepare stage")
    weight = table.column("weight").to_numpy(zero_copy_only=False).astype(np.float64)
    if (weight < 0).any():
        raise ValueError(f"{path}: column 'weight' holds negative values; neighbor sampling "
                         "draws in proportion to the weights, which must be >= 0")
    return align_edge_times(graph.csr, weight, train_csr)
