"""evaluate: score GNN and MLP on val/test, report the gap, write metrics for ``dvc metrics``."""

from pathlib import Path

from gnnpipe import io
from gnnpipe.config import load_params
from gnnpipe.evaluate import compare, score_predictions

HELP = "score the GNN and the MLP baseline on val/test; writes metrics/eval.json"


def add_arguments(parser):
    parser.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    parser.add_argument("--split", type=Path, default=Path("data/split"))
    parser.add_argument("--model", type=Path, default=Path("data/model"))
    parser.add_argument("--baseline", type=Path, default=Path("data/baseline"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/eval.json"))
    parser.add_argument("--details", type=Path, default=Path("reports/eval_details.json"),
                        help="per-class F1 and confusion matrices")


def run(args):
    params = load_params(args.params)
    graph = io.read_graph(args.prepared, mmap=True)
    roles = io.read_split_roles(args.split)
    y = graph.y.numpy()
    gnn = score_predictions(*io.read_predictions(args.model), y, roles, graph.num_classes)
    mlp = score_predictions(*io.read_predictions(args.baseline), y, roles, graph.num_classes)
    summary = compare(gnn, mlp, params.train.model, params.evaluate)
    io.write_json(args.metrics, summary)
    io.write_json(args.details, {"gnn": gnn, "mlp": mlp})
    return summary["verdict"]
