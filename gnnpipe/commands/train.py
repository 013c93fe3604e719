"""train: the configured GNN (or SIGN) on the phase message graphs."""

from pathlib import Path

from gnnpipe import io
from gnnpipe.config import load_params
from gnnpipe.progress import progress
from gnnpipe.rng import torch_seed
from gnnpipe.train import build_inputs, fit

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


def run(args):
    from gnnpipe.models import build_model  # imports PyG: only when training, not for --help

    params = load_params(args.params)
    cfg = params.train
    graph = io.read_graph(args.prepared)
    roles = io.read_split_roles(args.split)
    in_dim, num_hops, batch_size = graph.x.shape[1], 0, None
    if cfg.sampler == "sign":
        hops = io.read_propagated(args.propagate)
        num_hops, batch_size = len(hops["train"]) - 1, cfg.batch_size
        inputs = build_inputs(graph.x, hops=hops)
    elif cfg.model == "mlp":
        inputs = build_inputs(graph.x)
    else:
        inputs = build_inputs(graph.x, message_graphs=io.read_message_graphs(args.split,
                                                                             graph.num_nodes))
    result = fit(lambda: build_model(cfg.model, in_dim, graph.num_classes, cfg, num_hops),
                 inputs, graph.y, roles, cfg, torch_seed(params.seed, "train"),
                 batch_size=batch_size, progress=progress)
    with io.atomic_dir(args.out) as out:
        io.write_predictions(out, result.node_id, result.logits)
        io.save_model(out, result.state_dict, {"model": cfg.model, "in_dim": in_dim,
                                               "num_classes": graph.num_classes,
                                               "num_hops": num_hops})
    io.write_json(args.metrics, {"model": cfg.model, "sampler": cfg.sampler, **result.summary})
    io.write_json(args.perf, result.perf)
    io.write_csv(args.history, result.history)
    return f"{cfg.model} best val acc {result.summary['best_val_acc']:.4f} -> {args.out}"
