"""train: the configured GNN (or SIGN) on the phase message graphs."""

import subprocess
from pathlib import Path

import numpy as np
import torch

from gnnpipe import distributed, io
from gnnpipe.config import load_params, to_dict
from gnnpipe.progress import progress
from gnnpipe.rng import torch_seed
from gnnpipe.train import Checkpointing, build_inputs, fit

HELP = "train train.model with train.sampler; writes weights, predictions, curves"


def add_arguments(parser):
    parser.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    parser.add_argument("--split", type=Path, default=Path("data/split"))
    parser.add_argument("--propagate", type=Path, default=Path("data/propagate"))
    parser.add_argument("--out", type=Path, default=Path("data/model"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/train.json"))
    parser.add_argument("--perf", type=Path, default=Path("metrics/perf/train.json"),
                        help="wall time and throughput (kept apart: they differ run to run)")
    parser.add_argument("--history", type=Path, default=Path("metrics/train_history.csv"))
    parser.add_argument("--checkpoint", type=Path, default=Path("data/checkpoint/train.pt"),
                        help="resumable training state (train.checkpoint_every, train.resume)")


def run(args):
    params = load_params(args.params)
    cfg = params.train
    if params.dataset.task == "link":  # encoder + dot-product decoder: gnnpipe/link_train.py
        if cfg.nproc * cfg.nnodes > 1:
            raise ValueError("train.nproc/train.nnodes > 1 supports dataset.task=node only so far")
        from gnnpipe.commands.link_train import run_train
        return run_train(args, params)
    ctx = distributed.context_from_env()
    if cfg.nproc * cfg.nnodes > 1 and ctx.world_size == 1:  # relaunch this stage under torchrun
        argv = distributed.torchrun_argv(cfg.nproc, cfg.nnodes, cfg.node_rank, cfg.rdzv_endpoint,
                                         args.argv)
        code = subprocess.run(argv, check=False).returncode
        if code != 0:
            raise ValueError(f"distributed training failed (torchrun exit code {code}); the "
                             "failing rank's error is printed above")
        return f"{cfg.model} trained on {cfg.nproc * cfg.nnodes} processes -> {args.out}"
    distributed.init_process_group(ctx, cfg.dist_timeout_s)
    try:
        return _train(args, params, ctx)
    finally:
        distributed.shutdown()


def _train(args, params, ctx):
    from gnnpipe.models import build_model  # imports PyG: only when training, not for --help

    cfg = params.train
    graph = io.read_graph(args.prepared, mmap=True)  # ranks on one machine share the pages
    roles = io.read_split_roles(args.split)
    in_dim, num_hops, batch_size, loader = graph.x.shape[1], 0, None, None
    if cfg.sampler == "sign":
        hops = io.read_propagated(args.propagate)
        num_hops, batch_size = len(hops["train"]) - 1, cfg.batch_size
        inputs = build_inputs(graph.x, hops=hops)
    elif cfg.model == "mlp" and cfg.sampler != "neighbor":
        inputs = build_inputs(graph.x)
    else:
        graphs = io.read_message_graphs(args.split, graph.num_nodes)
        inputs = build_inputs(graph.x, message_graphs=graphs)
        if cfg.sampler == "neighbor":  # batches sampled from the train phase's graph only
            from gnnpipe.sampling import neighbor_loader

            seeds = distributed.shard(torch.from_numpy(np.flatnonzero(roles == "train")), ctx)
            loader = neighbor_loader(graph.x, graph.y, graphs["train"], seeds, cfg,
                                     torch_seed(params.seed, "sample"),
                                     edge_index=inputs["train"].edge_index)
    fingerprint = io.input_fingerprint(to_dict(cfg), params.seed,
                                       [args.prepared, args.split, args.propagate])
    resume_from = io.read_checkpoint(args.checkpoint, fingerprint) if cfg.resume else None
    checkpointing = Checkpointing(
        every=cfg.checkpoint_every, resume_from=resume_from,
        save=lambda payload: io.write_checkpoint(args.checkpoint, payload, fingerprint))
    if resume_from is not None and ctx.is_main:
        print(f"gnnpipe train: resuming from {args.checkpoint} (epoch {resume_from['epoch']})")
    result = fit(lambda: build_model(cfg.model, in_dim, graph.num_classes, cfg, num_hops),
                 inputs, graph.y, roles, cfg, torch_seed(params.seed, "train"),
                 batch_size=batch_size, loader=loader, progress=progress, ctx=ctx,
                 checkpointing=checkpointing)
    if not ctx.is_main:
        return None
    with io.atomic_dir(args.out) as out:
        io.write_predictions(out, result.node_id, result.logits)
        io.save_model(out, result.state_dict, {"model": cfg.model, "in_dim": in_dim,
                                               "num_classes": graph.num_classes,
                                               "num_hops": num_hops})
    io.write_json(args.metrics, {"model": cfg.model, "sampler": cfg.sampler, **result.summary})
    io.write_json(args.perf, result.perf)
    io.write_csv(args.history, result.history)
    args.checkpoint.unlink(missing_ok=True)  # the outputs now hold everything it had
    return f"{cfg.model} best val acc {result.summary['best_val_acc']:.4f} -> {args.out}"
