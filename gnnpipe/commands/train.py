"""train: the configured GNN (or SIGN) on the phase message graphs.

train.sampler cluster cuts ClusterGCN batches from data/partition (built on the train-phase
graph); saint draws GraphSAINT random-walk subgraphs from the train-phase graph. With
train.dist.shard: partition each DDP rank reads only its own part shards (+halo) and the
feature rows of their nodes, trains on their ClusterGCN batches and scores its own nodes on
them.
dataset.task link trains an encoder with a dot-product decoder; typed graphs train
to_hetero(GraphSAGE), HGT or R-GCN, full-graph or on hgt / neighbor (node task) and
link_neighbor (link task) mini-batches of the train-phase typed graph, the latter two also on
several DDP ranks.
"""

import os
import sys

import torch

from gnnpipe import device as devices
from gnnpipe import distributed, io
from gnnpipe.commands.inputs import (
    read_lazy_model_graph,
    read_link_supervision,
    read_model_graph,
    read_model_typed,
    read_typed_link_supervision,
    whole_features,
)
from gnnpipe.commands.loaders import node_source, shard_setup, typed_node_source
from gnnpipe.commands.training import (
    checkpointing_for,
    peak_rss_mb,
    write_link_outputs,
    write_node_outputs,
    write_run_files,
)
from gnnpipe.commands.variant import HOMOGENEOUS, TYPED, pick, split_variant
from gnnpipe.config import load_params, samplers, to_dict
from gnnpipe.hetero.inputs import phase_inputs
from gnnpipe.hetero.models import build_hetero_model
from gnnpipe.io.hetero import read_hetero_roles
from gnnpipe.link_train import fit_link
from gnnpipe.loop import PERF_COLUMNS, LoopOptions
from gnnpipe.models import build_model
from gnnpipe.progress import progress
from gnnpipe.rng import torch_seed
from gnnpipe.sampling import builders
from gnnpipe.sharding import gather_objects
from gnnpipe.train import build_inputs, fit
from gnnpipe.typed_graph import edge_type_name

HELP = "train train.model with train.sampler; writes weights, predictions, curves"


def run(args):
    """Picks the variant and the device (train.device: cuda:LOCAL_RANK on each rank; refused in
    one line without CUDA, before any rank starts), re-launches under torchrun when
    train.dist.nproc * nnodes > 1, and runs the variant on every rank (which variants allow
    several ranks is checked in gnnpipe/config.py)."""
    params = load_params(args.params)
    cfg, dist = params.train, params.train.dist
    device = devices.resolve(cfg.device, distributed.context_from_env())
    kind, task = split_variant(args.split)
    train = pick(RUNS, kind, task, "train")
    with distributed.stage_ranks(args, params, "training", cfg.num_workers, device) as ctx:
        if ctx is None:  # this process launched the ranks under torchrun; they are done
            return f"{cfg.model} trained on {dist.world_size} processes -> {args.out}"
        return train(args, params, ctx, device)


def train_nodes(args, params, ctx, device):

    cfg = params.train
    sampler = samplers.SAMPLERS[cfg.sampler]
    # no whole graph on a rank with train.dist.shard: partition, only its shards and their rows
    # neighbor: each batch reads its rows of the memory-mapped features (larger than memory)
    graph = (None if cfg.dist.shard == "partition" else read_lazy_model_graph(args, amp=cfg.amp)
             if samplers.out_of_core(cfg) else read_model_graph(args, mmap=True))
    roles = io.read_split_roles(args.split)
    train_mask = torch.from_numpy(roles == "train")
    num_hops, batch_size, loader, evaluator, inputs = 0, None, None, None, None
    extra, rank_info = {}, {}
    fingerprinted = [args.prepared, args.split, args.features, args.propagate]
    if samplers.needs(cfg.sampler, "partition"):
        fingerprinted.append(args.partition)
    if graph is None:
        y, num_classes, in_dim, loader, evaluator, extra, rank_info = shard_setup(
            args, params, ctx, roles, train_mask)
    else:  # ranks on one machine share the memory-mapped pages of graph.pt
        y, num_classes, in_dim = graph.y, graph.num_classes, graph.x.shape[1]
        if samplers.needs(cfg.sampler, "propagate"):
            hops = io.read_propagated(args.propagate)
            num_hops, batch_size = len(hops["train"]) - 1, cfg.batch_size
            inputs = build_inputs(graph.x, hops=hops)
        elif cfg.model == "mlp" and not sampler.loader:
            inputs = build_inputs(graph.x)
        else:
            graphs = io.read_message_graphs(args.split, graph.num_nodes)
            inputs = whole_features(build_inputs(graph.x, message_graphs=graphs, cfg=cfg))
            source = node_source(args, cfg, ctx, graph, graphs, inputs, roles, train_mask)
            built = builders.build(HOMOGENEOUS, source, cfg, params.seed, ctx)
            if built is not None:
                loader, extra, rank_info = built.loader, built.metrics, built.rank
    checkpointing = checkpointing_for(args, cfg, to_dict(cfg), params.seed, fingerprinted, ctx)
    build = lambda: build_model(cfg.model, in_dim, num_classes, cfg, num_hops)
    if cfg.engine == "lightning":  # Params allows it for full / neighbor on one process only
        from gnnpipe.lightning import (
            fit_lightning,  # imports Lightning (slow): only when asked
        )

        result = fit_lightning(
            build, inputs, y, roles, cfg, torch_seed(params.seed, "train"),
            node_sampler=getattr(loader, "node_sampler", None),
            progress_bar=os.environ.get("GNNPIPE_PROGRESS", "1") != "0" and sys.stderr.isatty(),
            amp=cfg.amp, compile_model=cfg.compile, device=device)
    else:
        result = fit(build, inputs, y, roles, cfg, torch_seed(params.seed, "train"),
                     batch_size=batch_size, loader=loader, evaluator=evaluator,
                     options=LoopOptions(ctx=ctx, checkpointing=checkpointing, progress=progress,
                                         amp=cfg.amp, compile_model=cfg.compile, device=device,
                                         callbacks=distributed.injected_faults()))
    done = _finish(args, result, ctx, rank_info, lambda: write_node_outputs(
        args, result, {"model": cfg.model, "in_dim": in_dim, "num_classes": num_classes,
                       "num_hops": num_hops}),
        metrics={"model": cfg.model, "sampler": cfg.sampler, **result.summary, **extra},
        perf={"shard": cfg.dist.shard, "amp": cfg.amp, "compile": cfg.compile,
              "engine": cfg.engine})
    return f"{cfg.model} best val acc {result.summary['best_val_acc']:.4f} -> {args.out}" if done \
        else None


def train_links(args, params, ctx, device):
    """An encoder with a dot-product decoder; under DDP (link_neighbor) every rank trains."""
    cfg = params.train
    sampled = samplers.SAMPLERS[cfg.sampler].loader
    # ranks on one machine share the memory-mapped pages of graph.pt
    graph = read_model_graph(args, mmap=sampled)
    graphs = io.read_message_graphs(args.split, graph.num_nodes)
    sup = read_link_supervision(args, graph.num_nodes, graphs)
    in_dim, num_hops = graph.x.shape[1], 0
    if samplers.needs(cfg.sampler, "propagate"):  # hops over each phase's own message graph
        hops = io.read_propagated(args.propagate)
        num_hops = len(hops["train"]) - 1
        inputs = build_inputs(graph.x, hops=hops)
    elif cfg.model == "mlp":
        inputs = build_inputs(graph.x)
    else:
        inputs = build_inputs(graph.x, message_graphs=graphs, cfg=cfg)  # train.inference
    # subgraphs of the train phase's message graph only
    source = builders.Source(graph, graphs["train"], edge_index=inputs["train"].edge_index,
                             supervision=sup)
    built = builders.build(HOMOGENEOUS, source, cfg, params.seed, ctx)
    loader, extra = (None, {}) if built is None else (built.loader, built.metrics)
    checkpointing = checkpointing_for(args, cfg, {"task": "link", **to_dict(cfg)}, params.seed,
                                      [args.prepared, args.split, args.features,
                                       args.propagate], ctx)
    # out_channels = hidden: the encoder's last layer gives the embedding the decoder dots.
    result = fit_link(lambda: build_model(cfg.model, in_dim, cfg.hidden, cfg, num_hops), inputs,
                      sup.edges, sup.negatives, sup.sampler, cfg,
                      torch_seed(params.seed, "train"), loader=loader, options=LoopOptions(
                          ctx=ctx, checkpointing=checkpointing, progress=progress,
                          device=device, callbacks=distributed.injected_faults()))
    done = _finish(args, result, ctx, {}, lambda: write_link_outputs(
        args, result, {"model": cfg.model, "task": "link", "in_dim": in_dim,
                       "embedding_dim": cfg.hidden, "num_hops": num_hops}),
        metrics={"model": cfg.model, "sampler": cfg.sampler, **result.summary, **extra})
    return (f"{cfg.model} link encoder, best val MRR {result.summary['best_val_mrr']:.4f} -> "
            f"{args.out}") if done else None


def train_typed_nodes(args, params, ctx, device):
    """to_hetero(GraphSAGE) / HGT / R-GCN on the target type: full-graph, ``train.sampler:
    hgt`` budgets or ``neighbor`` fan-outs (gnnpipe/hetero/loader.py), the latter also on
    several DDP ranks (each its share of the train seeds); evaluation full-graph or layer-wise
    (gnnpipe/inference.py, ``train.inference``)."""

    cfg = params.train
    typed = read_model_typed(args)
    graph = typed.graph
    roles = read_hetero_roles(args.split, graph)
    checkpointing = checkpointing_for(args, cfg, to_dict(cfg), params.seed,
                                      [args.prepared, args.split, args.features], ctx)
    built = builders.build(TYPED, typed_node_source(cfg, ctx, typed, roles), cfg, params.seed,
                           ctx)
    loader, extra = (None, {}) if built is None else (built.loader, built.metrics)
    inputs = _typed_inputs(typed, cfg)
    result = fit(lambda: build_hetero_model(cfg.model, graph.metadata(), _dims(graph),
                                            graph.num_classes, graph.target, cfg),
                 inputs, graph.y, roles, cfg, torch_seed(params.seed, "train"),
                 loader=loader, options=LoopOptions(
                     ctx=ctx, progress=progress, checkpointing=checkpointing, amp=cfg.amp,
                     device=device, callbacks=distributed.injected_faults()))
    perf = {"hetero": True, **({"amp": True} if cfg.amp else {})}
    done = _finish(args, result, ctx, {}, lambda: write_node_outputs(
        args, result, {**_typed_model_meta(cfg, graph), "num_classes": graph.num_classes}),
        metrics={"model": cfg.model, "sampler": cfg.sampler, "hetero": True,
                 "node_type": graph.target, **result.summary, **extra},
        perf=perf)
    return (f"{cfg.model} on {graph.target}, best val acc {result.summary['best_val_acc']:.4f} "
            f"-> {args.out}") if done else None


def train_typed_links(args, params, ctx, device):
    """A typed encoder of every node type; the dot-product decoder on the held-out edge type.
    Full-graph steps, or ``train.sampler: link_neighbor`` batches of supervision edges of that
    type with fresh leak-free negatives on subgraphs of the train graph (gnnpipe/hetero/loader.py
    ``link_batches``), also on several DDP ranks; evaluation on each phase's whole graph, layer
    by layer for sage / rgcn on a big one (``train.inference``, gnnpipe/inference.py)."""

    cfg = params.train
    typed = read_model_typed(args)
    graph = typed.graph
    edge_type, sup = read_typed_link_supervision(args, typed)
    checkpointing = checkpointing_for(args, cfg, {"task": "link", **to_dict(cfg)}, params.seed,
                                      [args.prepared, args.split, args.features], ctx)
    # this rank's share of the supervision, train graph only
    source = builders.Source(graph, typed.graphs["train"], supervision=sup, edge_type=edge_type)
    built = builders.build(TYPED, source, cfg, params.seed, ctx)
    loader, extra = (None, {}) if built is None else (built.loader, built.metrics)
    result = fit_link(lambda: build_hetero_model(cfg.model, graph.metadata(), _dims(graph),
                                                 cfg.hidden, graph.target, cfg, out="all"),
                      _typed_inputs(typed, cfg), sup.edges, sup.negatives, sup.sampler, cfg,
                      torch_seed(params.seed, "train"), loader=loader,
                      options=LoopOptions(ctx=ctx, progress=progress, checkpointing=checkpointing,
                                          amp=cfg.amp, device=device,
                                          callbacks=distributed.injected_faults()))
    name = edge_type_name(edge_type)
    perf = {"hetero": True, **({"amp": True} if cfg.amp else {})}
    done = _finish(args, result, ctx, {}, lambda: write_link_outputs(
        args, result, {**_typed_model_meta(cfg, graph), "task": "link",
                       "embedding_dim": cfg.hidden}),
        metrics={"model": cfg.model, "sampler": cfg.sampler, "hetero": True, "edge_type": name,
                 **result.summary, **extra},
        perf=perf)
    return (f"{cfg.model} on {name}, best val MRR {result.summary['best_val_mrr']:.4f} -> "
            f"{args.out}") if done else None


def _typed_inputs(typed, cfg=None):
    """Phase inputs of the typed graph; ``cfg`` (TrainParams) picks each phase's evaluation
    forward (``train.inference``: layer-wise for a big graph, gnnpipe/inference.py)."""

    return phase_inputs(typed.graph, typed.graphs, cfg)


def _dims(graph) -> dict[str, int]:
    return {t: int(x.shape[1]) for t, x in graph.x.items()}


def _typed_model_meta(cfg, graph) -> dict:

    return {"model": cfg.model, "hetero": 1, "target": graph.target,
            "node_types": ",".join(graph.node_types),
            "edge_types": ",".join(edge_type_name(e) for e in graph.edge_types)}


def _finish(args, result, ctx, rank_info: dict, write_outputs, metrics: dict,
            perf: dict | None = None) -> bool:
    """Gathers every rank's memory high-water mark; rank 0 then writes the outputs, metrics,
    perf, histories and drops the checkpoint (the outputs now hold everything it had).
    False on the other ranks."""

    ranks = gather_objects({"rank": ctx.rank, **rank_info, "peak_rss_mb": peak_rss_mb()}, ctx)
    if not ctx.is_main:
        return False
    write_outputs()
    write_run_files(args, result, metrics, {**result.perf, **(perf or {}), "ranks": ranks})
    # a run resumed from the checkpoint of its last epoch trains no epoch here: header only
    io.write_csv(args.perf_history, result.perf_history, header=PERF_COLUMNS)
    io.remove_on_publish(args.checkpoint)  # once the outputs that supersede it are published
    return True


RUNS = {(HOMOGENEOUS, "node"): train_nodes, (HOMOGENEOUS, "link"): train_links,
        (TYPED, "node"): train_typed_nodes, (TYPED, "link"): train_typed_links}
