"""The node task's fit in the train stage: what it reads (the model inputs of the whole
graph, or under ``train.dist.shard: partition`` this rank's part shards and their rows), the
loader of ``train.sampler``, and the engine that fits (gnnpipe's loop, or Lightning)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from gnnpipe import io
from gnnpipe.config import samplers
from gnnpipe.data.graph import HOMOGENEOUS
from gnnpipe.graphops.partition import rank_parts
from gnnpipe.sampling import batch as adapt
from gnnpipe.sampling import builders
from gnnpipe.sampling.cluster import ClusterLoader, ShardParts
from gnnpipe.sampling.store import read_node_rows
from gnnpipe.splitting.inputs import model_features
from gnnpipe.training.loader_sources import TRAIN, node_source, read_partition_meta
from gnnpipe.training.loop import LoopOptions
from gnnpipe.training.model_inputs import read_model_inputs
from gnnpipe.training.models import build_model
from gnnpipe.training.sharding import NodeRows, ShardEvaluator, shard_node_ids, shard_part_counts
from gnnpipe.training.train import Objective, TrainResult, fit, objective_for


@dataclass(frozen=True)
class NodeFit:
    """What a node fit takes: ``build`` makes a fresh model, ``phases`` the per-phase inputs
    (None: shards), ``y`` int64 (N,) labels and ``roles`` int8 (N,) role codes of the (target)
    type (None both with shards: the evaluator holds its nodes'), the loader and evaluator of
    this rank (None: full batch / the loop's own), ``batch_size`` (sign's rows per
    batch), ``reads``: the input folders a checkpoint is keyed by, ``meta``: model.pt's meta,
    ``metrics`` / ``rank_info``: what train.json and the perf file add, ``objective``: the
    val metric early stopping maximises and the loss's class weights (``objective_for``)."""

    build: Callable[[], torch.nn.Module]
    phases: dict | None
    y: torch.Tensor | None
    roles: np.ndarray | None
    reads: tuple[str, ...]
    meta: dict
    loader: object = None
    evaluator: object = None
    batch_size: int | None = None
    metrics: dict = field(default_factory=dict)
    rank_info: dict = field(default_factory=dict)
    objective: Objective = Objective()

    def inputs(self, args, cfg) -> list[Path]:
        """The input folders of the fit (the partition's too for a sampler that reads it)."""
        return [getattr(args, name) for name in self.reads] + (
            [args.partition] if samplers.needs(cfg.sampler, "partition") else [])


def read_node_fit(args, params, ctx) -> NodeFit:
    """The node fit of this rank: the whole graph's model inputs and the loader of
    ``train.sampler``, or (``train.dist.shard: partition``) its own shards."""
    cfg = params.train
    if cfg.dist.shard == "partition":  # no whole graph on a rank: its shards and their rows
        return _shard_fit(args, params, ctx)
    inputs = read_model_inputs(args, cfg, "node", amp=cfg.amp, world_size=ctx.world_size)
    graph = inputs.graph
    roles = io.read_typed_role_codes(args.split, graph)  # int8 (N,)
    fitted = NodeFit(lambda: inputs.model(graph.num_classes), inputs.phases, graph.y, roles,
                     inputs.reads, inputs.meta({"num_classes": graph.num_classes}),
                     # sign: batches of precomputed rows
                     batch_size=cfg.batch_size if samplers.needs(cfg.sampler, "propagate")
                     else None,
                     metrics={} if graph.layout == HOMOGENEOUS else {"node_type": graph.target},
                     objective=objective_for(params, graph.y, roles, graph.num_classes))
    if not samplers.SAMPLERS[cfg.sampler].loader:
        return fitted
    built = builders.build(node_source(args, cfg, ctx, inputs, roles), cfg, params.seed, ctx)
    return replace(fitted, loader=built.loader, metrics={**fitted.metrics, **built.metrics},
                   rank_info=built.rank)


def fit_nodes(fitted: NodeFit, cfg, seed: int, device, options: LoopOptions) -> TrainResult:
    """The fit on ``cfg.engine``: gnnpipe's loop, or Lightning (full / neighbor, one process)."""
    if cfg.engine == "lightning":
        # imports Lightning (slow, optional): only when asked
        from gnnpipe.training.lightning import fit_lightning

        return fit_lightning(
            fitted.build, fitted.phases, fitted.y, fitted.roles, cfg, seed,
            node_sampler=getattr(fitted.loader, "node_sampler", None),
            progress_bar=os.environ.get("GNNPIPE_PROGRESS", "1") != "0" and sys.stderr.isatty(),
            amp=cfg.amp, compile_model=cfg.compile, device=device, objective=fitted.objective)
    return fit(fitted.build, fitted.phases, fitted.y, fitted.roles, cfg, seed,
               batch_size=fitted.batch_size, loader=fitted.loader, evaluator=fitted.evaluator,
               options=options, objective=fitted.objective)


def _shard_fit(args, params, ctx) -> NodeFit:
    """``train.dist.shard: partition``: this rank's shards, their node rows, loader and
    evaluator (a homogeneous graph's)."""
    cfg = params.train
    if len(set(io.read_split_meta(args.split)["message_graph"].values())) != 1:
        raise ValueError("train.dist.shard='partition' scores val and test nodes on the "
                         "train-phase partition, which is their message graph only with "
                         "split.node.mode=transductive; use train.dist.shard: none for "
                         "inductive splits")
    # every node's role code (1 byte a node) only while the rank takes its own rows' and counts
    roles = io.read_typed_role_codes(args.split)
    meta = read_partition_meta(args, roles.size)
    mine = rank_parts(meta["num_parts"], ctx.rank, ctx.world_size)
    shards = [io.read_partition_shard(args.partition, part) for part in mine]
    train_per_part = shard_part_counts(shards, roles, meta["num_parts"], ctx)
    ids = shard_node_ids(shards)
    held = torch.from_numpy(roles[ids.numpy()])  # int8 (L,): the role of each row
    del roles
    read = read_node_rows(args.prepared, ids)  # through the FeatureStore of data/prepared
    rows = NodeRows(model_features(args, read.x), read.y, ids)  # row-wise: rows of the whole
    loader = adapt.Batches(ClusterLoader(ShardParts(shards), rows, held == TRAIN, train_per_part,
                                         cfg.cluster.parts_per_batch, ctx.rank, ctx.world_size),
                           adapt.train_nodes)
    exact = meta["halo_hops"] >= cfg.num_layers
    if not exact and ctx.is_main:
        print(f"gnnpipe train: note: partition.halo_hops={meta['halo_hops']} < "
              f"train.num_layers={cfg.num_layers}: shard evaluation misses edges beyond the halo")
    evaluator = ShardEvaluator(shards, rows, held, cfg)  # train.inference: per shard
    rank_info = {"parts": mine, "nodes_held": int(ids.numel()),
                 **({"eval_inference": "layerwise"} if evaluator.layerwise else {})}
    in_dim, num_classes = int(rows.x.shape[1]), read.num_classes
    # the ranks' owned nodes are disjoint and cover the split: their class counts are summed
    objective = objective_for(params, *evaluator.targets(), num_classes, ctx)
    return NodeFit(lambda: build_model(cfg.model, in_dim, num_classes, cfg, 0), None, None,
                   None, ("prepared", "split", "features", "propagate"),
                   {"model": cfg.model, "in_dim": in_dim, "num_classes": num_classes,
                    "num_hops": 0}, loader, evaluator, metrics={"shard_eval_exact": exact},
                   rank_info=rank_info, objective=objective)


