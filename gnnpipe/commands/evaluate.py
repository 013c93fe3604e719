"""evaluate: score GNN and MLP on val/test, report the gap, write metrics for ``dvc metrics``."""

from pathlib import Path

from gnnpipe import io
from gnnpipe.config import load_params
from gnnpipe.io import hetero as hio
from gnnpipe.evaluate import compare, confusion_rows, score_predictions, smoothing

HELP = "score the GNN and the MLP baseline on val/test; writes metrics/eval.json"


def add_arguments(parser):
    parser.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    parser.add_argument("--split", type=Path, default=Path("data/split"))
    parser.add_argument("--model", type=Path, default=Path("data/model"))
    parser.add_argument("--baseline", type=Path, default=Path("data/baseline"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/eval.json"))
    parser.add_argument("--details", type=Path, default=Path("reports/eval_details.json"),
                        help="per-class F1 and confusion matrices")
    parser.add_argument("--confusion", type=Path, default=Path("reports/confusion_test.csv"),
                        help="(actual, predicted) of the GNN on every test node, for `dvc plots`")


def run(args):
    params = load_params(args.params)
    if hio.is_hetero(args.prepared):  # typed nodes and edges: gnnpipe/hetero/stages.py
        from gnnpipe.hetero import stages
        return stages.evaluate(args, params)
    if params.dataset.task == "link":
        return _run_link(args, params)
    graph = io.read_graph(args.prepared, mmap=True)
    roles = io.read_split_roles(args.split)
    if roles.size != graph.num_nodes:
        raise ValueError(f"{args.split}: {roles.size} split roles for {graph.num_nodes} nodes; "
                         "re-run the split stage")
    y = graph.y.numpy()
    gnn_pred, mlp_pred = io.read_predictions(args.model), io.read_predictions(args.baseline)
    gnn = score_predictions(*gnn_pred, y, roles, graph.num_classes)
    mlp = score_predictions(*mlp_pred, y, roles, graph.num_classes)
    summary = compare(gnn, mlp, params.train.model, params.evaluate)
    # The test phase's message graph: the structure the final predictions were made on.
    test_graph = io.read_message_graphs(args.split, graph.num_nodes)["test"]
    summary["smoothing"] = {"gnn": smoothing(*gnn_pred, test_graph),
                            "mlp": smoothing(*mlp_pred, test_graph)}
    io.write_json(args.metrics, summary)
    io.write_json(args.details, {"gnn": gnn, "mlp": mlp})
    io.write_csv(args.confusion, confusion_rows(*gnn_pred, y, roles, "test"))
    return summary["verdict"]


def _run_link(args, params):
    """dataset.task link: ROC-AUC, AP, Hits@K, MRR of both encoders on the fixed negatives."""
    from gnnpipe.link_evaluate import compare_links, confusion_rows, score_link_predictions

    num_nodes = io.read_graph(args.prepared, mmap=True).num_nodes
    negatives = io.read_link_negatives(args.split, io.read_link_edges(args.split, num_nodes),
                                       num_nodes)
    ks = params.evaluate.hits_k
    gnn_scores = io.read_link_predictions(args.model)
    gnn = score_link_predictions(gnn_scores, negatives, ks, str(args.model))
    mlp = score_link_predictions(io.read_link_predictions(args.baseline), negatives, ks,
                                 str(args.baseline))
    summary = compare_links(gnn, mlp, params.train.model, params.evaluate)
    io.write_json(args.metrics, summary)
    io.write_json(args.details, {"gnn": gnn, "mlp": mlp})
    if getattr(args, "confusion", None) is not None:  # a declared output of the stage
        io.write_csv(args.confusion, confusion_rows(*gnn_scores["test"]))
    return summary["verdict"]
