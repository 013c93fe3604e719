"""evaluate: score GNN and MLP on val/test, report the gap; the headline (metrics/summary.json)
is the pipeline's one DVC metrics file.

The graph is read as typed (either layout). Node task: accuracy, macro-F1, ROC-AUC and average
precision of the target type, the verdict on the metric evaluate.metric resolves to
(gnnpipe/reporting/node_metric.py), and over-smoothing on the test phase's graph of its own
relation (a homogeneous graph: the test phase's message graph). Link task: ROC-AUC, AP, Hits@K, MRR of both encoders on the fixed
negatives (gnnpipe/reporting/eval_inputs.py reads them). Typed files add the node type,
relation or edge type scored. Node task with evaluate.seeds > 1: both models retrained under
more seeds (gnnpipe/commands/seeds.py), their spread in eval.json ``seeds`` and in the verdict."""

from gnnpipe import io
from gnnpipe.commands.seeds import retrained_seeds
from gnnpipe.commands.variant import split_task
from gnnpipe.config import load_params
from gnnpipe.data.graph import ROLE_CODES, TYPED, edge_type_name
from gnnpipe.graphops.reach import accuracy_by_distance, hops_to_train
from gnnpipe.reporting.eval_inputs import (baseline_candidates, baseline_model, collapse_causes,
                                           link_predictions, low_homophily)
from gnnpipe.reporting.evaluate import (compare, confusion_rows, correct_of, correct_on_test,
                                        judged_gap, majority_fraction, on_test,
                                        score_predictions, smoothing, top_class)
from gnnpipe.reporting.link_evaluate import NEGATIVE_SETS, evaluate_links, link_confusion_rows
from gnnpipe.reporting.node_metric import METRIC_NAMES, class_counts, resolve_metric
from gnnpipe.reporting.summary import headline
from gnnpipe.reporting.verdict import BASELINE_NAMES, Causes, seed_run, seeds_sentence
from gnnpipe.runtime.resources import large_blocks_mapped, release_memory
from gnnpipe.splitting.inputs import read_typed


def run(args) -> str:
    params = load_params(args.params)
    task = split_task(args.split)
    with large_blocks_mapped():  # per-phase sorts of millions of scores leave no heap behind
        summary, details, confusion = SCORES[task](args, params, read_typed(args, mmap=True))
    io.write_json(args.summary, headline(summary, task))
    io.write_json(args.metrics, summary)
    io.write_json(args.details, details)
    io.write_confusion(args.confusion, *confusion)
    warning = summary.get("reach", {}).get("warning")
    return summary["verdict"] + (f"; WARNING: {warning}" if warning else "")


def _score_nodes(args, params, typed):
    """eval.json summary, per-class details and the test confusion rows of both models, with
    over-smoothing figures on the test phase's graph of the target's own relation (none: a
    user-item graph has no edge between two target nodes to smooth over)."""
    graph, own, cfg = typed.graph, typed.graph.own_relation(), params.evaluate
    y, roles = graph.y.numpy(), io.read_typed_role_codes(args.split, graph)  # int8 (N,)
    release_memory()  # Arrow's pool keeps the role table's batches (54 MiB at 8M nodes)
    metric = resolve_metric(cfg.metric, class_counts(y, roles, graph.num_classes))  # as train
    # (node_id, logits) of each model, memory-mapped: read a phase's rows at a time
    gnn_pred, mlp_pred = (io.read_predictions(args.model, mmap=True),
                          io.read_predictions(args.baseline, mmap=True))
    gnn = score_predictions(*gnn_pred, y, roles, graph.num_classes)
    mlp = score_predictions(*mlp_pred, y, roles, graph.num_classes)
    y_test, gnn_test = on_test(*gnn_pred, y, roles)
    _, mlp_test = on_test(*mlp_pred, y, roles)
    gap, gnn_value, mlp_value = judged_gap(metric, y_test, gnn_test, mlp_test,
                                           graph.num_classes, cfg.bootstrap, params.seed)
    baseline = baseline_model(args.baseline_metrics)
    causes = Causes(metric, graph.num_classes, majority_fraction(y, graph.num_classes),
                    {"gnn": top_class(y_test, gnn_test, graph.num_classes),
                     "baseline": top_class(y_test, mlp_test, graph.num_classes)},
                    params.train.class_weight)
    summary = compare(gnn, mlp, params.train.model, cfg, gap, low_homophily(args.analysis),
                      baseline, metric=metric, causes=causes,
                      candidates=baseline_candidates(args.baseline_metrics))
    if cfg.seeds > 1:
        summary["seeds"] = retrained_seeds(args, params, graph, roles, baseline,
                                           seed_run(params.seed, gnn_value, mlp_value, gap,
                                                    summary["outcome"]), metric)
        summary["verdict"] += "; " + seeds_sentence(
            summary["seeds"], METRIC_NAMES[metric], params.train.model,
            f"the {BASELINE_NAMES[baseline]}")
    gnn_rows = confusion_rows(*gnn_pred, y, roles, "test")  # the GNN's test argmax, once
    if own is None:
        summary["smoothing_not_applicable"] = (f"the graph has no {graph.target} -> "
                                               f"{graph.target} edge type")
    else:  # the structure the final predictions were made on
        test_graph = typed.graphs["test"][own]
        summary["smoothing"] = {"gnn": smoothing(*gnn_pred, test_graph),
                                "mlp": smoothing(*mlp_pred, test_graph)}
        summary["reach"] = _reach(params, test_graph, roles, correct_of(*gnn_rows),
                                  correct_on_test(*mlp_pred, y, roles))
    if graph.layout == TYPED:  # typed files name the relation and the node type scored
        if own is not None:
            summary["smoothing"]["relation"] = edge_type_name(own)
        summary["node_type"] = graph.target
    return summary, {"gnn": gnn, "mlp": mlp}, gnn_rows


def _score_links(args, params, typed):
    """The same for link scores against the fixed negatives of each set of
    ``evaluate.link.negatives`` (gnnpipe/reporting/link_evaluate.py): random alone is judged
    GNN against MLP; with hard negatives the heuristics join and the verdict is on the hard
    set, against the best baseline on val."""
    models = {"gnn": args.model, "mlp": args.baseline}
    sets = NEGATIVE_SETS[params.evaluate.link.negatives]
    predictions, targets = link_predictions(args.split, models, typed, sets)
    causes = collapse_causes(typed.graph, params.features.normalize,
                             {"gnn": params.train.lr, "mlp": params.baseline.lr})
    summary, details = evaluate_links(predictions, targets, params.evaluate, params.train.model,
                                      params.seed, low_homophily(args.analysis),
                                      {name: str(path) for name, path in models.items()},
                                      causes=causes)
    if typed.graph.layout == TYPED:
        summary["edge_type"] = typed.meta["edge_type"]
    return summary, details, link_confusion_rows(*predictions[sets[0]]["gnn"]["test"])


def _reach(params, test_graph, roles, gnn_correct, mlp_correct) -> dict:
    """Test accuracy of both models by hops from the nearest train node in the test phase's
    graph (``accuracy_by_distance``); the GNN sees ``train.num_layers`` hops (SIGN:
    ``propagate.hops``), so farther nodes are out of its reach."""
    layers = params.propagate.hops if params.train.model == "sign" else params.train.num_layers
    distance = hops_to_train(test_graph, roles == ROLE_CODES["train"], layers)
    return accuracy_by_distance(distance[roles == ROLE_CODES["test"]], gnn_correct > 0,
                                mlp_correct > 0, layers, params.evaluate.reach)


SCORES = {"node": _score_nodes, "link": _score_links}
