"""evaluate: score GNN and MLP on val/test, report the gap, write metrics for ``dvc metrics``.

Node task: accuracy / macro-F1 and over-smoothing on the test phase's graph (a typed graph: of
its target type, over its own relation). Link task: ROC-AUC, AP, Hits@K, MRR of both encoders
on the fixed negatives."""

from gnnpipe import io
from gnnpipe.commands.inputs import read_typed
from gnnpipe.commands.variant import pick, split_variant
from gnnpipe.config import load_params
from gnnpipe.reporting.summary import headline
from gnnpipe.reporting.evaluate import compare, confusion_rows, score_predictions, smoothing
from gnnpipe.io.hetero import read_hetero_link_split, read_hetero_roles
from gnnpipe.reporting.link_evaluate import (compare_links, link_confusion_rows,
                                             score_link_predictions)
from gnnpipe.data.typed_graph import HOMOGENEOUS, TYPED, edge_type_name



def run(args):
    params = load_params(args.params)
    kind, task = split_variant(args.split)
    return pick(RUNS, kind, task, "evaluate")(args, params)


def evaluate_nodes(args, params) -> str:
    graph = io.read_graph(args.prepared, mmap=True)
    roles = io.read_split_roles(args.split)
    if roles.size != graph.num_nodes:
        raise ValueError(f"{args.split}: {roles.size} split roles for {graph.num_nodes} nodes; "
                         "re-run the split stage")
    # the test phase's message graph: the structure the final predictions were made on
    test_graph = io.read_message_graphs(args.split, graph.num_nodes)["test"]
    summary, head, details, confusion = _score_nodes(args, params, graph.y.numpy(), roles,
                                               graph.num_classes, test_graph)
    return _write(args, summary, head, details, confusion)


def evaluate_typed_nodes(args, params) -> str:
    typed = read_typed(args)
    graph, own = typed.graph, typed.graph.own_relation()
    roles = read_hetero_roles(args.split, graph)
    summary, head, details, confusion = _score_nodes(args, params, graph.y.numpy(), roles,
                                               graph.num_classes,
                                               None if own is None else typed.graphs["test"][own])
    if own is None:  # a user-item graph: no edges between two target nodes to smooth over
        summary["smoothing_not_applicable"] = (f"the graph has no {graph.target} -> "
                                               f"{graph.target} edge type")
    else:
        summary["smoothing"]["relation"] = edge_type_name(own)
    summary["node_type"] = graph.target
    return _write(args, summary, head, details, confusion)


def evaluate_links(args, params) -> str:
    num_nodes = io.read_graph(args.prepared, mmap=True).num_nodes
    negatives = io.read_link_negatives(args.split, io.read_link_edges(args.split, num_nodes),
                                       num_nodes)
    return _write(args, *_score_links(args, params, negatives))


def evaluate_typed_links(args, params) -> str:
    typed = read_typed(args)
    _, _, negatives = read_hetero_link_split(args.split, typed.graph)
    summary, head, details, confusion = _score_links(args, params, negatives)
    summary["edge_type"] = typed.meta["edge_type"]
    return _write(args, summary, head, details, confusion)


def _score_nodes(args, params, y, roles, num_classes: int, test_graph):
    """eval.json summary, its headline (summary.json), per-class details and the test confusion
    rows of both models (over-smoothing figures on ``test_graph``, left out when it is None)."""
    gnn_pred, mlp_pred = io.read_predictions(args.model), io.read_predictions(args.baseline)
    gnn = score_predictions(*gnn_pred, y, roles, num_classes)
    mlp = score_predictions(*mlp_pred, y, roles, num_classes)
    summary = compare(gnn, mlp, params.train.model, params.evaluate)
    if test_graph is not None:
        summary["smoothing"] = {"gnn": smoothing(*gnn_pred, test_graph),
                                "mlp": smoothing(*mlp_pred, test_graph)}
    return (summary, headline(summary, "node", params.evaluate), {"gnn": gnn, "mlp": mlp},
            confusion_rows(*gnn_pred, y, roles, "test"))


def _score_links(args, params, negatives: dict):
    """The same for link scores against the fixed negatives (gnnpipe/reporting/link_evaluate.py)."""
    ks = params.evaluate.hits_k
    gnn_scores = io.read_link_predictions(args.model)
    gnn = score_link_predictions(gnn_scores, negatives, ks, str(args.model))
    mlp = score_link_predictions(io.read_link_predictions(args.baseline), negatives, ks,
                                 str(args.baseline))
    summary = compare_links(gnn, mlp, params.train.model, params.evaluate)
    return (summary, headline(summary, "link", params.evaluate), {"gnn": gnn, "mlp": mlp},
            link_confusion_rows(*gnn_scores["test"]))


def _write(args, summary: dict, head: dict, details: dict, confusion: list) -> str:
    io.write_json(args.summary, head)
    io.write_json(args.metrics, summary)
    io.write_json(args.details, details)
    io.write_csv(args.confusion, confusion)
    return summary["verdict"]


RUNS = {(HOMOGENEOUS, "node"): evaluate_nodes, (HOMOGENEOUS, "link"): evaluate_links,
        (TYPED, "node"): evaluate_typed_nodes, (TYPED, "link"): evaluate_typed_links}
