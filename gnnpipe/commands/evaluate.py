"""evaluate: score GNN and MLP on val/test, report the gap; the headline (metrics/summary.json)
is the pipeline's one DVC metrics file.

The graph is read as typed (either layout). Node task: accuracy / macro-F1 of the target type
and over-smoothing on the test phase's graph of its own relation (a homogeneous graph: the test
phase's message graph). Link task: ROC-AUC, AP, Hits@K, MRR of both encoders on the fixed
negatives. Typed files add the node type, relation or edge type scored. Node task with
evaluate.seeds > 1: both models retrained under more seeds (gnnpipe/commands/seeds.py), their
spread in eval.json ``seeds`` and in the verdict."""

import torch

from gnnpipe import io
from gnnpipe.splitting.inputs import read_model_typed, read_typed
from gnnpipe.commands.variant import split_task
from gnnpipe.config import load_params
from gnnpipe.reporting.evaluate import (compare, confusion_rows, correct_on_test,
                                        score_predictions, smoothing)
from gnnpipe.graphops.reach import accuracy_by_distance, hops_to_train
from gnnpipe.reporting.verdict import judge, over_seeds, paired_gap, seed_run, seeds_sentence
from gnnpipe.commands.seeds import derived_seeds, retrain_nodes
from gnnpipe.reporting.summary import headline
from gnnpipe.reporting.link_evaluate import (EVAL_PHASES, NEGATIVE_SETS, evaluate_links,
                                             heuristic_predictions, link_confusion_rows)
from gnnpipe.graphops.heuristics import train_view
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
    baseline = _baseline_model(args)
    summary = compare(gnn, mlp, params.train.model, params.evaluate, gap, _low_homophily(args),
                      baseline)
    if params.evaluate.seeds > 1:
        summary["seeds"] = _over_seeds(args, params, graph, roles, baseline,
                                       seed_run(params.seed, gnn_correct, mlp_correct, gap,
                                                summary["outcome"]))
        summary["verdict"] += "; " + seeds_sentence(summary["seeds"], "accuracy")
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


def _over_seeds(args, params, graph, roles, baseline: str, first: dict) -> dict:
    """eval.json's ``seeds`` (gnnpipe/reporting/verdict.py ``over_seeds``): ``first`` is the
    pipeline seed's run, the other ``evaluate.seeds - 1`` are retrained here
    (gnnpipe/commands/seeds.py), each gap bootstrapped as the first one."""
    cfg, runs, y = params.evaluate, [first], graph.y.numpy()
    features = read_model_typed(args, graph=graph).graph  # the baseline's inputs, every seed
    for seed in derived_seeds(params.seed, cfg.seeds)[1:]:
        gnn_pred, base_pred = retrain_nodes(args, params, seed, baseline, features, roles)
        gnn_correct = correct_on_test(*gnn_pred, y, roles)
        base_correct = correct_on_test(*base_pred, y, roles)
        gap = paired_gap(gnn_correct, base_correct, cfg.bootstrap, params.seed)
        runs.append(seed_run(seed, gnn_correct, base_correct, gap, judge(gap, cfg.min_gain)))
    return over_seeds(runs)


def _score_links(args, params, typed):
    """The same for link scores against the fixed negatives of each set of
    ``evaluate.link.negatives`` (gnnpipe/reporting/link_evaluate.py): random alone is judged
    GNN against MLP; with hard negatives the heuristics join and the verdict is on the hard
    set, against the best baseline on val."""
    graph = typed.graph
    edge_type, edges, negatives = io.read_typed_link_split(args.split, graph)
    cfg, sets = params.evaluate, NEGATIVE_SETS[params.evaluate.link.negatives]
    random = {"gnn": io.read_link_predictions(args.model),
              "mlp": io.read_link_predictions(args.baseline)}
    predictions = {"random": dict(random)} if "random" in sets else {}
    targets = {"random": negatives}
    if "hard" in sets:
        targets["hard"] = _hard_negatives(args, edges, graph.num_nodes_dict[edge_type[2]])
        predictions["hard"] = {name: _with_hard(random[name], path) for name, path in
                               (("gnn", args.model), ("mlp", args.baseline))}
        offsets = graph.offsets()  # the heuristics read homogeneous ids (train_view)
        s_off, d_off = offsets[edge_type[0]], offsets[edge_type[2]]
        held = {p: torch.stack([edges[p][0] + s_off, edges[p][1] + d_off]) for p in EVAL_PHASES}
        view = train_view(graph, typed.graphs["train"])
        for name in sets:
            predictions[name].update(heuristic_predictions(
                view, held, {p: t + d_off for p, t in targets[name].items()}))
    summary, details = evaluate_links(predictions, targets, cfg, params.train.model,
                                      params.seed, _low_homophily(args),
                                      {"gnn": str(args.model), "mlp": str(args.baseline)})
    if graph.layout == TYPED:
        summary["edge_type"] = typed.meta["edge_type"]
    return summary, details, link_confusion_rows(*predictions[sets[0]]["gnn"]["test"])


def _hard_negatives(args, edges, num_dst):
    """The split's hard negatives; a split without them is a params mismatch."""
    hard = io.read_hard_negatives(args.split, edges, num_dst)
    if hard is None:
        raise ValueError(f"{args.split}: the split wrote no hard negatives, which "
                         "evaluate.link.negatives hard / both needs; set "
                         "split.link.num_hard_negatives >= 1 and re-run the split stage")
    return hard


def _with_hard(random, model_dir):
    """A model's scores with its hard-negative scores in place of the random ones."""
    hard = io.read_hard_link_scores(model_dir)
    if hard is None:
        raise ValueError(f"{model_dir}: no hard_scores.pt (the model scored no hard negatives); "
                         "re-run the stage that wrote it after the split")
    return {phase: (random[phase][0], hard[phase]) for phase in EVAL_PHASES}


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
