"""Glue of the train and baseline stages for ``dataset.task: link`` (gnnpipe/link_train.py).

Not a stage of its own: ``commands/train.py`` and ``commands/baseline.py`` call ``run_train`` /
``run_baseline`` when the task is link, with their own parsed arguments.
"""

from __future__ import annotations

import torch

from gnnpipe import io
from gnnpipe.config import to_dict
from gnnpipe.distributed import SINGLE, DistContext
from gnnpipe.negatives import degree_weights, training_sampler
from gnnpipe.progress import progress
from gnnpipe.rng import torch_seed
from gnnpipe.train import build_inputs


def _read_split(args, num_nodes: int):
    edges = io.read_link_edges(args.split, num_nodes)
    negatives = io.read_link_negatives(args.split, edges, num_nodes)
    graphs = io.read_message_graphs(args.split, num_nodes)
    # Training negatives avoid only what training may see (see gnnpipe/negatives.py) and use the
    # strategy the fixed negatives were drawn with, so training and evaluation ask one question.
    visible = torch.cat([edges["message"], edges["train_supervision"]], dim=1).numpy()
    weights = None
    if io.read_split_meta(args.split).get("negative_strategy") == "degree":
        weights = degree_weights(graphs["train"].degrees().numpy())
    sampler = training_sampler(visible[0], visible[1], num_nodes, weights)
    return edges, negatives, graphs, sampler


def _write(args, result, model_meta: dict | None) -> None:
    with io.atomic_dir(args.out) as out:
        io.write_link_predictions(out, result.scores)
        if model_meta is not None:
            io.save_model(out, result.state_dict, model_meta)
    io.write_json(args.perf, result.perf)
    io.write_csv(args.history, result.history)


def run_train(args, params, ctx: DistContext = SINGLE) -> str | None:
    """The train stage for ``dataset.task: link``; under DDP (link_neighbor only) every rank
    calls it and only rank 0 writes."""
    from gnnpipe.link_train import fit_link
    from gnnpipe.models import build_model  # imports PyG: only when training

    cfg = params.train  # Params checked the sampler (config.LINK_SAMPLERS)
    # ranks on one machine share the memory-mapped pages of graph.pt
    graph = io.read_graph(args.prepared, mmap=cfg.sampler == "link_neighbor")
    edges, negatives, graphs, sampler = _read_split(args, graph.num_nodes)
    in_dim, num_hops, loader = graph.x.shape[1], 0, None
    if cfg.sampler == "sign":  # hops were propagated over each phase's own message graph
        hops = io.read_propagated(args.propagate)
        num_hops = len(hops["train"]) - 1
        inputs = build_inputs(graph.x, hops=hops)
    elif cfg.model == "mlp":
        inputs = build_inputs(graph.x)
    else:
        inputs = build_inputs(graph.x, message_graphs=graphs)
    if cfg.sampler == "link_neighbor":  # subgraphs of the train phase's message graph only
        from gnnpipe.sampling.link import link_neighbor_loader

        loader = link_neighbor_loader(graph.x, graphs["train"], edges["train_supervision"],
                                      sampler, cfg.neighbor, torch_seed(params.seed, "sample"),
                                      batch_size=cfg.batch_size, num_workers=cfg.num_workers,
                                      ctx=ctx, edge_index=inputs["train"].edge_index)
    from gnnpipe.commands.train import checkpointing_for
    checkpointing = checkpointing_for(args, cfg, {"task": "link", **to_dict(cfg)}, params.seed,
                                      [args.prepared, args.split, args.propagate], ctx)
    # out_channels = hidden: the encoder's last layer gives the embedding the decoder dots.
    result = fit_link(lambda: build_model(cfg.model, in_dim, cfg.hidden, cfg, num_hops), inputs,
                      edges, negatives, sampler, cfg, torch_seed(params.seed, "train"),
                      loader=loader, progress=progress, ctx=ctx, checkpointing=checkpointing)
    if not ctx.is_main:
        return None
    _write(args, result, {"model": cfg.model, "task": "link", "in_dim": in_dim,
                          "embedding_dim": cfg.hidden, "num_hops": num_hops})
    io.write_csv(args.perf_history, result.perf_history)
    extra = {} if loader is None else {"batches_per_epoch": len(loader)}  # per rank
    io.write_json(args.metrics, {"model": cfg.model, "sampler": cfg.sampler, **result.summary,
                                 **extra})
    args.checkpoint.unlink(missing_ok=True)  # the outputs now hold everything it had
    return f"{cfg.model} link encoder, best val MRR {result.summary['best_val_mrr']:.4f} -> {args.out}"


def run_baseline(args, params) -> str:
    from gnnpipe.link_train import fit_link
    from gnnpipe.models import build_model

    cfg = params.baseline
    graph = io.read_graph(args.prepared)
    edges, negatives, _, sampler = _read_split(args, graph.num_nodes)
    result = fit_link(lambda: build_model("mlp", graph.x.shape[1], cfg.hidden, cfg),
                      build_inputs(graph.x), edges, negatives, sampler, cfg,
                      torch_seed(params.seed, "baseline"), progress=progress)
    _write(args, result, None)
    io.write_json(args.metrics, {"model": "mlp", **result.summary})
    return f"mlp link encoder, best val MRR {result.summary['best_val_mrr']:.4f} -> {args.out}"
