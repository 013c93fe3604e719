"""train: the configured GNN (or SIGN) on the phase message graphs.

train.sampler cluster cuts ClusterGCN batches from data/partition (built on the train-phase
graph); saint draws GraphSAINT random-walk subgraphs from the train-phase graph. With
train.dist.shard: partition each DDP rank reads only its own part shards (+halo) and the feature rows
of their nodes, trains on their ClusterGCN batches and scores its own nodes on them.
"""

import math
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from gnnpipe import distributed, io
from gnnpipe.config import load_params, to_dict
from gnnpipe.io import hetero as hio
from gnnpipe.progress import progress
from gnnpipe.rng import torch_seed
from gnnpipe.sharding import NodeRows, gather_objects
from gnnpipe.train import Checkpointing, build_inputs, fit

SUBGRAPH_SAMPLERS = ("neighbor", "cluster", "saint", "shadow")  # batches from the train graph

HELP = "train train.model with train.sampler; writes weights, predictions, curves"


def add_arguments(parser):
    parser.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    parser.add_argument("--split", type=Path, default=Path("data/split"))
    parser.add_argument("--propagate", type=Path, default=Path("data/propagate"))
    parser.add_argument("--partition", type=Path, default=Path("data/partition"),
                        help="parts and shards (train.sampler cluster, train.dist.shard partition)")
    parser.add_argument("--out", type=Path, default=Path("data/model"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/train.json"))
    parser.add_argument("--perf", type=Path, default=Path("metrics/perf/train.json"),
                        help="wall time and throughput (kept apart: they differ run to run)")
    parser.add_argument("--history", type=Path, default=Path("metrics/train_history.csv"))
    parser.add_argument("--perf-history", type=Path,
                        default=Path("metrics/perf/train_history.csv"),
                        help="per-epoch seeds/s and batches/s (wall clock, differs run to run)")
    parser.add_argument("--checkpoint", type=Path, default=Path("data/checkpoint/train.pt"),
                        help="resumable training state (train.checkpoint.every, train.checkpoint.resume)")


def checkpointing_for(args, cfg, section: dict, seed: int, inputs: list[Path],
                      ctx) -> Checkpointing:
    """Checkpoints at ``args.checkpoint`` keyed by ``section`` + ``seed`` + the input files, so a
    checkpoint of other params or inputs is never resumed; announces a resume on rank 0."""
    fingerprint = io.input_fingerprint(section, seed, inputs)
    resume_from = io.read_checkpoint(args.checkpoint, fingerprint) if cfg.checkpoint.resume else None
    if resume_from is not None and ctx.is_main:
        print(f"gnnpipe train: resuming from {args.checkpoint} (epoch {resume_from['epoch']})")
    return Checkpointing(
        every=cfg.checkpoint.every, resume_from=resume_from,
        save=lambda payload: io.write_checkpoint(args.checkpoint, payload, fingerprint))


def run(args):
    params = load_params(args.params)
    if hio.is_hetero(args.prepared):  # typed nodes and edges: gnnpipe/hetero/stages.py
        from gnnpipe.hetero import stages
        return stages.train(args, params)
    cfg = params.train
    link = params.dataset.task == "link"  # encoder + dot-product decoder: gnnpipe/link_train.py
    ctx = distributed.context_from_env()
    dist = cfg.dist
    if dist.world_size > 1 and ctx.world_size == 1:  # relaunch this stage under torchrun
        argv = distributed.torchrun_argv(dist.nproc, dist.nnodes, dist.node_rank,
                                         dist.rdzv_endpoint, args.argv)
        code = subprocess.run(argv, check=False).returncode
        if code != 0:
            raise ValueError(f"distributed training failed (torchrun exit code {code}); the "
                             "failing rank's error is printed above")
        return f"{cfg.model} trained on {dist.world_size} processes -> {args.out}"
    distributed.init_process_group(ctx, dist.timeout_s)
    try:
        if link:
            from gnnpipe.commands.link_train import run_train
            return run_train(args, params, ctx)
        return _train(args, params, ctx)
    finally:
        distributed.shutdown()


def _partition(args, num_nodes: int, roles: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
    """Partition meta, part of every node (N,) and train nodes per part (P,), checked."""
    meta = io.read_partition_meta(args.partition)
    parts = io.read_partition(args.partition)
    if meta.get("graph", "train") != "train" or meta["num_nodes"] != num_nodes or (
            parts.size != num_nodes):
        raise ValueError(f"{args.partition}: the partition is not of this split's train-phase "
                         f"graph ({num_nodes} nodes); re-run the partition stage")
    train_per_part = np.bincount(parts[roles == "train"], minlength=meta["num_parts"])
    return meta, parts, train_per_part


def _shard_setup(args, params, ctx, roles, train_mask):
    """``train.dist.shard: partition``: this rank's shards, their node rows, loader and evaluator."""
    from gnnpipe.io.rows import read_node_rows
    from gnnpipe.partition import rank_parts
    from gnnpipe.sampling.cluster import ClusterLoader, ShardParts
    from gnnpipe.sharding import ShardEvaluator, shard_node_ids

    cfg = params.train
    if len(set(io.read_split_meta(args.split)["message_graph"].values())) != 1:
        raise ValueError("train.dist.shard='partition' scores val and test nodes on the train-phase "
                         "partition, which is their message graph only with "
                         "split.node.mode=transductive; use train.dist.shard: none for inductive splits")
    meta, _, train_per_part = _partition(args, roles.size, roles)
    mine = rank_parts(meta["num_parts"], ctx.rank, ctx.world_size)
    shards = [io.read_partition_shard(args.partition, part) for part in mine]
    ids = shard_node_ids(shards)
    read = read_node_rows(args.prepared, ids)
    rows = NodeRows(read.x, read.y[ids], ids)
    loader = ClusterLoader(ShardParts(shards), rows, train_mask, train_per_part,
                           cfg.cluster.parts_per_batch, ctx.rank, ctx.world_size)
    exact = meta["halo_hops"] >= cfg.num_layers
    if not exact and ctx.is_main:
        print(f"gnnpipe train: note: partition.halo_hops={meta['halo_hops']} < "
              f"train.num_layers={cfg.num_layers}: shard evaluation misses edges beyond the halo")
    rank_info = {"parts": mine, "nodes_held": int(ids.numel())}
    return (read.y, read.num_classes, rows.x.shape[1], loader, ShardEvaluator(shards, rows),
            {"shard_eval_exact": exact}, rank_info)


def _subgraph_loader(args, params, ctx, graph, graphs, inputs, roles, train_mask):
    """The loader of a sampled-subgraph sampler, drawing from the train phase's graph only,
    with what goes into metrics/train.json and into this rank's perf entry."""
    cfg = params.train
    train_nodes = torch.from_numpy(np.flatnonzero(roles == "train"))
    if cfg.sampler in ("neighbor", "shadow"):
        from gnnpipe.sampling import neighbor_loader
        from gnnpipe.sampling.shadow import shadow_loader

        seeds = distributed.shard(train_nodes, ctx)
        sample_seed = torch_seed(params.seed, "sample")
        common = dict(batch_size=cfg.batch_size, num_workers=cfg.num_workers,
                      edge_index=inputs["train"].edge_index,
                      **_temporal(args, cfg, graph, graphs["train"], seeds))
        if cfg.sampler == "neighbor":
            loader = neighbor_loader(graph.x, graph.y, graphs["train"], seeds, cfg.neighbor,
                                     sample_seed, **common)
        else:
            loader = shadow_loader(graph.x, graph.y, graphs["train"], seeds, cfg.shadow,
                                   sample_seed, replace=cfg.neighbor.replace, **common)
        return loader, {}, {}
    rows = NodeRows(graph.x, graph.y)  # the memory-mapped graph: row i is node i
    if cfg.sampler == "cluster":
        from gnnpipe.partition import rank_parts
        from gnnpipe.sampling.cluster import ClusterLoader, GraphParts

        meta, parts, train_per_part = _partition(args, graph.num_nodes, roles)
        loader = ClusterLoader(GraphParts(graphs["train"], parts, meta["num_parts"]), rows,
                               train_mask, train_per_part, cfg.cluster.parts_per_batch, ctx.rank,
                               ctx.world_size)
        return loader, {}, {"parts": rank_parts(meta["num_parts"], ctx.rank, ctx.world_size)}
    from gnnpipe.sampling.saint import SaintLoader, SaintSampler, estimate_norm

    saint = cfg.saint
    sampler = SaintSampler(graphs["train"], train_nodes, cfg.batch_size, saint.walk_length)
    norm = estimate_norm(sampler, saint.sample_coverage, torch_seed(params.seed, "saint"))
    steps = saint.num_steps or math.ceil(train_nodes.numel() / cfg.batch_size)
    loader = SaintLoader(sampler, norm, rows, train_mask, steps, ctx.rank, ctx.world_size)
    return loader, {"saint_presamples": norm.num_samples, "saint_steps": steps}, {}


def _temporal(args, cfg, graph, train_csr, seeds) -> dict:
    """``train.temporal``: seed times from the node timestamps, edge times (``edge``) from
    ``edge_attrs.parquet`` (written by prepare for a ``dataset.edges.timestamp`` column)."""
    from gnnpipe.sampling.temporal import temporal_options

    edge_time = None
    if cfg.temporal.by == "edge" and (args.prepared / "edge_attrs.parquet").exists():
        from gnnpipe.sources.base import time_key

        table = io.read_edge_attrs(args.prepared)
        if "timestamp" in table.column_names:
            edge_time = time_key(table.column("timestamp").combine_chunks())
    return temporal_options(cfg.temporal.by, cfg.temporal.strategy, seeds, train_csr,
                            graph.timestamps, graph.csr, edge_time)


def _train(args, params, ctx):
    from gnnpipe.models import build_model  # imports PyG: only when training, not for --help

    cfg = params.train
    # no whole graph on a rank with train.dist.shard: partition, only its shards and their rows
    graph = None if cfg.dist.shard == "partition" else io.read_graph(args.prepared, mmap=True)
    roles = io.read_split_roles(args.split)
    train_mask = torch.from_numpy(roles == "train")
    num_hops, batch_size, loader, evaluator, inputs = 0, None, None, None, None
    extra, rank_info = {}, {}
    fingerprinted = [args.prepared, args.split, args.propagate]
    if cfg.sampler == "cluster":
        fingerprinted.append(args.partition)
    if graph is None:
        y, num_classes, in_dim, loader, evaluator, extra, rank_info = _shard_setup(
            args, params, ctx, roles, train_mask)
    else:  # ranks on one machine share the memory-mapped pages of graph.pt
        y, num_classes, in_dim = graph.y, graph.num_classes, graph.x.shape[1]
        if cfg.sampler == "sign":
            hops = io.read_propagated(args.propagate)
            num_hops, batch_size = len(hops["train"]) - 1, cfg.batch_size
            inputs = build_inputs(graph.x, hops=hops)
        elif cfg.model == "mlp" and cfg.sampler not in SUBGRAPH_SAMPLERS:
            inputs = build_inputs(graph.x)
        else:
            graphs = io.read_message_graphs(args.split, graph.num_nodes)
            inputs = build_inputs(graph.x, message_graphs=graphs, cfg=cfg)  # train.inference
            if cfg.sampler in SUBGRAPH_SAMPLERS:
                loader, extra, rank_info = _subgraph_loader(args, params, ctx, graph, graphs,
                                                            inputs, roles, train_mask)
    checkpointing = checkpointing_for(args, cfg, to_dict(cfg), params.seed, fingerprinted, ctx)
    if cfg.engine == "lightning":  # Params allows it for full / neighbor on one process only
        from gnnpipe.lightning import fit_lightning  # imports Lightning (slow): only when asked

        result = fit_lightning(
            lambda: build_model(cfg.model, in_dim, num_classes, cfg, num_hops),
            inputs, y, roles, cfg, torch_seed(params.seed, "train"),
            node_sampler=getattr(loader, "node_sampler", None),
            progress_bar=os.environ.get("GNNPIPE_PROGRESS", "1") != "0" and sys.stderr.isatty(),
            amp=cfg.amp, compile_model=cfg.compile)
    else:
        result = fit(lambda: build_model(cfg.model, in_dim, num_classes, cfg, num_hops),
                     inputs, y, roles, cfg, torch_seed(params.seed, "train"),
                     batch_size=batch_size, loader=loader, progress=progress, ctx=ctx,
                     checkpointing=checkpointing, evaluator=evaluator, amp=cfg.amp,
                     compile_model=cfg.compile)
    # ru_maxrss is KiB on Linux: each rank's high-water mark, its inputs included
    rank_info = {"rank": ctx.rank, **rank_info,
                 "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    ranks = gather_objects(rank_info, ctx)
    if not ctx.is_main:
        return None
    with io.atomic_dir(args.out) as out:
        io.write_predictions(out, result.node_id, result.logits)
        io.save_model(out, result.state_dict, {"model": cfg.model, "in_dim": in_dim,
                                               "num_classes": num_classes,
                                               "num_hops": num_hops})
    io.write_json(args.metrics, {"model": cfg.model, "sampler": cfg.sampler, **result.summary,
                                 **extra})
    io.write_json(args.perf, {**result.perf, "shard": cfg.dist.shard, "amp": cfg.amp,
                              "compile": cfg.compile, "engine": cfg.engine, "ranks": ranks})
    io.write_csv(args.history, result.history)
    io.write_csv(args.perf_history, result.perf_history)
    args.checkpoint.unlink(missing_ok=True)  # the outputs now hold everything it had
    return f"{cfg.model} best val acc {result.summary['best_val_acc']:.4f} -> {args.out}"
