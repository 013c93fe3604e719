"""baseline: the structure-free MLP on the same split, cached apart from the GNN."""

from pathlib import Path

from gnnpipe import io
from gnnpipe.config import load_params
from gnnpipe.io import hetero as hio
from gnnpipe.progress import progress
from gnnpipe.rng import torch_seed
from gnnpipe.train import LoopOptions, build_inputs, fit

HELP = "train the structure-free MLP baseline (baseline section) on the same split"


def add_arguments(parser):
    parser.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    parser.add_argument("--split", type=Path, default=Path("data/split"))
    parser.add_argument("--out", type=Path, default=Path("data/baseline"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/baseline.json"))
    parser.add_argument("--perf", type=Path, default=Path("metrics/perf/baseline.json"),
                        help="wall time and throughput (kept apart: they differ run to run)")
    parser.add_argument("--history", type=Path, default=Path("metrics/baseline_history.csv"))


def run(args):
    from gnnpipe.models import build_model  # imports PyG: only when training, not for --help

    params = load_params(args.params)
    if hio.is_hetero(args.prepared):  # typed nodes and edges: gnnpipe/hetero/stages.py
        from gnnpipe.hetero import stages
        return stages.baseline(args, params)
    if params.dataset.task == "link":  # MLP encoder + dot-product decoder: gnnpipe/link_train.py
        from gnnpipe.commands.link_train import run_baseline
        return run_baseline(args, params)
    graph = io.read_graph(args.prepared)
    roles = io.read_split_roles(args.split)
    cfg = params.baseline
    result = fit(lambda: build_model("mlp", graph.x.shape[1], graph.num_classes, cfg),
                 build_inputs(graph.x), graph.y, roles, cfg, torch_seed(params.seed, "baseline"),
                 options=LoopOptions(progress=progress))
    with io.atomic_dir(args.out) as out:
        io.write_predictions(out, result.node_id, result.logits)
    io.write_json(args.metrics, {"model": "mlp", **result.summary})
    io.write_json(args.perf, result.perf)
    io.write_csv(args.history, result.history)
    return f"mlp best val acc {result.summary['best_val_acc']:.4f} -> {args.out}"
