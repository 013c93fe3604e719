"""train: the configured GNN (or SIGN) on the phase message graphs.

train.sampler cluster cuts ClusterGCN batches from data/partition (built on the train-phase
graph); saint draws GraphSAINT random-walk subgraphs from the train-phase graph. With
train.dist.shard: partition each DDP rank reads only its own part shards (+halo) and the
feature rows of their nodes, trains on their ClusterGCN batches and scores its own nodes on
them (gnnpipe/training/node_fit.py).
dataset.task link trains an encoder with a dot-product decoder; typed graphs train
to_hetero(GraphSAGE), HGT or R-GCN, full-graph or on hgt / neighbor (node task) and
link_neighbor (link task) mini-batches of the train-phase typed graph, the latter two also on
several DDP ranks.
"""

from gnnpipe.commands.variant import split_task
from gnnpipe.config import load_params, to_dict
from gnnpipe.data.graph import edge_type_name
from gnnpipe.runtime.progress import progress
from gnnpipe.runtime.rng import torch_seed
from gnnpipe.training import device as devices
from gnnpipe.training import distributed, embeddings
from gnnpipe.training.loop import LoopOptions
from gnnpipe.training.run_files import (best_line, checkpointing_for, finish_run,
                                        write_link_outputs, write_node_outputs)

# the modules that build PyG objects (about 2 s with its torch._dynamo chain) are imported by
# the task that runs them: `gnnpipe train --help` and the launching process start without PyG


def run(args):
    """Picks the variant and the device (train.device: cuda:LOCAL_RANK on each rank; refused in
    one line without CUDA, before any rank starts), re-launches under torchrun when
    train.dist.nproc * nnodes > 1, and runs the task on every rank (which variants allow
    several ranks is checked in gnnpipe/config)."""
    params = load_params(args.params)
    cfg, dist = params.train, params.train.dist
    device = devices.resolve(cfg.device, distributed.context_from_env())
    task = split_task(args.split)
    with distributed.stage_ranks(args, params, "training", cfg.num_workers, device) as ctx:
        if ctx is None:  # this process launched the ranks under torchrun; they are done
            return f"{cfg.model} trained on {dist.world_size} processes -> {args.out}"
        return RUNS[task](args, params, ctx, device)


def _options(cfg, ctx, checkpointing, device, compile_model: bool = False) -> LoopOptions:
    return LoopOptions(ctx=ctx, checkpointing=checkpointing, progress=progress, amp=cfg.amp,
                       compile_model=compile_model, device=device,
                       callbacks=distributed.injected_faults())


def train_nodes(args, params, ctx, device):
    """Node classification: the whole graph's inputs, or (train.dist.shard: partition) the
    rank's shards."""
    from gnnpipe.training.node_fit import fit_nodes, read_node_fit

    cfg = params.train
    fitted = read_node_fit(args, params, ctx)
    # the metric is in the key: a checkpoint's best score is of the metric it early-stopped on
    checkpointing = checkpointing_for(args, cfg, {**to_dict(cfg),
                                                  "metric": fitted.objective.metric},
                                      params.seed, fitted.inputs(args, cfg), ctx)
    result = fit_nodes(fitted, cfg, torch_seed(params.seed, "train"), device,
                       _options(cfg, ctx, checkpointing, device, cfg.compile))
    done = finish_run(args, result, ctx, fitted.rank_info,
                      lambda: write_node_outputs(args, result, fitted.meta),
                      metrics={"model": cfg.model, "sampler": cfg.sampler, **result.summary,
                               **fitted.metrics,
                               **embeddings.summary(result.state_dict, fitted.meta)},
                      perf={"shard": cfg.dist.shard, "amp": cfg.amp, "compile": cfg.compile,
                            "engine": cfg.engine})
    return f"{cfg.model} {best_line(result.summary)} -> {args.out}" if done else None


def train_links(args, params, ctx, device):
    """An encoder of every node (type) with a dot-product decoder on the held-out edges (of the
    held-out type); under DDP (link_neighbor) every rank trains."""
    from gnnpipe.sampling import builders
    from gnnpipe.training.link_train import fit_link
    from gnnpipe.training.loader_sources import link_source
    from gnnpipe.training.model_inputs import read_model_inputs, read_supervision

    cfg = params.train
    inputs = read_model_inputs(args, cfg, "link", world_size=ctx.world_size)
    edge_type, sup = read_supervision(args, inputs, ctx)
    built = builders.build(link_source(inputs, sup, edge_type), cfg, params.seed, ctx)
    loader, extra = (None, {}) if built is None else (built.loader, built.metrics)
    checkpointing = checkpointing_for(args, cfg, {"task": "link", **to_dict(cfg)}, params.seed,
                                      [getattr(args, name) for name in inputs.reads], ctx)
    # out_channels = hidden: the encoder's last layer gives the embedding the decoder dots.
    result = fit_link(lambda: inputs.model(cfg.hidden, "all"), inputs.phases, sup.edges,
                      sup.negatives, sup.sampler, cfg, torch_seed(params.seed, "train"),
                      loader=loader, hard_negatives=sup.hard,
                      options=_options(cfg, ctx, checkpointing, device))
    held_out = {} if edge_type is None else {"edge_type": edge_type_name(edge_type)}
    meta = inputs.meta({"task": "link", "embedding_dim": cfg.hidden})
    done = finish_run(args, result, ctx, {}, lambda: write_link_outputs(args, result, meta),
                      metrics={"model": cfg.model, "sampler": cfg.sampler, **held_out,
                               **result.summary, **extra,
                               **embeddings.summary(result.state_dict, meta)},
                      perf={"amp": cfg.amp})
    return (f"{cfg.model} link encoder, best val MRR {result.summary['best_val_mrr']:.4f} -> "
            f"{args.out}") if done else None


RUNS = {"node": train_nodes, "link": train_links}
