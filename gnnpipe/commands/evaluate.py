"""evaluate: score GNN and MLP on val/test, report the gap; the headline (metrics/summary.json)
is the pipeline's one DVC metrics file.

The graph is read as typed (either layout). Node task: accuracy / macro-F1 of the target type
and over-smoothing on the test phase's graph of its own relation (a homogeneous graph: the test
phase's message graph). Link task: ROC-AUC, AP, Hits@K, MRR of both encoders on the fixed
negatives. Typed files add the node type, relation or edge type scored."""

from gnnpipe import io
from gnnpipe.commands.inputs import read_typed
from gnnpipe.commands.variant import split_task
from gnnpipe.config import load_params
from gnnpipe.reporting.evaluate import (compare, confusion_rows, correct_on_test,
                                        score_predictions, smoothing)
from gnnpipe.graphops.reach import accuracy_by_distance, hops_to_train
from gnnpipe.reporting.verdict import paired_gap
from gnnpipe.reporting.summary import headline
from gnnpipe.reporting.link_evaluate import (compare_links, link_confusion_rows,
                                             reciprocal_ranks, score_link_predictions)
from gnnpipe.data.graph import TYPED, edge_type_name


def run(args) -> str:
    params = load_params(args.params)
    task = split_task(args.split)
    summary, details, confusion = SCORES[task](args, params, read_typed(args, mmap=True))
    io.write_json(args.summary, headline(summary, task))
    io.write_json(args.metrics, summary)
    io.write_json(args.details, details)
    io.write_csv(args.confusion, confusion)
    warning = summary.get("reach", {}).get("warning")
    return summary["verdict"] + (f"; WARNING: {warning}" if warning else "")


def _score_nodes(args, params, typed):
    """eval.json summary, per-class details and the test confusion rows of both models, with
    over-smoothing figures on the test phase's graph of the target's own relation (none: a
    user-item graph has no edge between two target nodes to smooth over)."""
    graph, own = typed.graph, typed.graph.own_relation()
    y, roles = graph.y.numpy(), io.read_typed_roles(args.split, graph)
    gnn_pred, mlp_pred = io.read_predictions(args.model), io.read_predictions(args.baseline)
    gnn = score_predictions(*gnn_pred, y, roles, graph.num_classes)
    mlp = score_predictions(*mlp_pred, y, roles, graph.num_classes)
    gnn_correct = correct_on_test(*gnn_pred, y, roles)
    mlp_correct = correct_on_test(*mlp_pred, y, roles)
    gap = paired_gap(gnn_correct, mlp_correct, params.evaluate.bootstrap, params.seed)
    summary = compare(gnn, mlp, params.train.model, params.evaluate, gap, _low_homophily(args),
                      _baseline_model(args))
    if own is None:
        summary["smoothing_not_applicable"] = (f"the graph has no {graph.target} -> "
                                               f"{graph.target} edge type")
    else:  # the structure the final predictions were made on
        test_graph = typed.graphs["test"][own]
        summary["smoothing"] = {"gnn": smoothing(*gnn_pred, test_graph),
                                "mlp": smoothing(*mlp_pred, test_graph)}
        summary["reach"] = _reach(params, test_graph, roles, gnn_correct, mlp_correct)
    if graph.layout == TYPED:  # typed files name the relation and the node type scored
        if own is not None:
            summary["smoothing"]["relation"] = edge_type_name(own)
        summary["node_type"] = graph.target
    return summary, {"gnn": gnn, "mlp": mlp}, confusion_rows(*gnn_pred, y, roles, "test")


def _score_links(args, params, typed):
    """The same for link scores against the fixed negatives
    (gnnpipe/reporting/link_evaluate.py)."""
    _, _, negatives = io.read_typed_link_split(args.split, typed.graph)
    ks = params.evaluate.hits_k
    gnn_scores, mlp_scores = (io.read_link_predictions(args.model),
                              io.read_link_predictions(args.baseline))
    gnn = score_link_predictions(gnn_scores, negatives, ks, str(args.model))
    mlp = score_link_predictions(mlp_scores, negatives, ks, str(args.baseline))
    gap = paired_gap(reciprocal_ranks(*gnn_scores["test"]),
                     reciprocal_ranks(*mlp_scores["test"]), params.evaluate.bootstrap,
                     params.seed)
    summary = compare_links(gnn, mlp, params.train.model, params.evaluate, gap,
                            _low_homophily(args))
    if typed.graph.layout == TYPED:
        summary["edge_type"] = typed.meta["edge_type"]
    return summary, {"gnn": gnn, "mlp": mlp}, link_confusion_rows(*gnn_scores["test"])


def _reach(params, test_graph, roles, gnn_correct, mlp_correct) -> dict:
    """Test accuracy of both models by hops from the nearest train node in the test phase's
    graph (``accuracy_by_distance``); the GNN sees ``train.num_layers`` hops (SIGN:
    ``propagate.hops``), so farther nodes are out of its reach."""
    layers = params.propagate.hops if params.train.model == "sign" else params.train.num_layers
    distance = hops_to_train(test_graph, roles == "train", layers)
    return accuracy_by_distance(distance[roles == "test"], gnn_correct > 0, mlp_correct > 0,
                                layers, params.evaluate.reach)


def _baseline_model(args) -> str:
    """The structure-free model the baseline stage wrote (metrics/baseline.json ``model``; mlp
    where that file is absent: stages run by hand)."""
    if not args.baseline_metrics.exists():
        return "mlp"
    return io.read_json(args.baseline_metrics)["model"]


def _low_homophily(args) -> bool | None:
    """analyze's low-homophily flag (metrics/graph.json); None where homophily is not
    applicable (a target type with no relation of its own) or analyze has not run (stages
    run by hand; dvc.yaml always runs it first)."""
    if not args.analysis.exists():
        return None
    report = io.read_json(args.analysis)
    if not report.get("homophily", {}).get("applicable", True):
        return None
    return bool(report["low_homophily"])


SCORES = {"node": _score_nodes, "link": _score_links}
