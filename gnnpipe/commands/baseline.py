"""baseline: the structure-free models of baseline.models (MLP, gradient-boosted trees; auto:
the MLP, and gbdt beside it under baseline.auto_gbdt_cells) on the same split, the best on val
(in the run's metric, evaluate.metric resolved) written; cached apart from the GNN, on the
graph read as typed (either layout). Node task: each model on the target type's own features,
early-stopped on that metric with train.class_weight's loss weights, as the GNN is. Link task:
an MLP encoder with the dot-product decoder (typed files: per-type MLP encoders,
``gnnpipe.training.models.TypedMLP``).

``baseline.source`` is resolved once, here: node task, ``NODE_SOURCES`` of
gnnpipe/training/baseline_fit.py says how the features are read (memory | blocks) and fitted;
link task, ``fit_link`` on the whole matrix or ``fit_link_blocks`` on ``read_link_blocks``."""

from gnnpipe.splitting.inputs import read_model_typed, read_typed_link_supervision
from gnnpipe.training.baseline_fit import (NODE_SOURCES, baseline_seed, baseline_source,
                                           node_models, read_link_blocks)
from gnnpipe.training.run_files import (best_line, write_link_outputs, write_node_outputs,
                                        write_run_files)
from gnnpipe.commands.variant import split_task
from gnnpipe.config import load_params
from gnnpipe.data.graph import TYPED, edge_type_name
from gnnpipe.training.loop import LoopOptions
from gnnpipe.runtime.progress import progress

# gnnpipe.training.models, train, link_train and hetero.* import PyG (about 1.4 s): imported in
# baseline_links, so that `gnnpipe baseline --help` does not pay for them


def run(args) -> str:
    params = load_params(args.params)
    return RUNS[split_task(args.split)](args, params)


def baseline_nodes(args, params) -> str:
    """Each model of ``baseline.models`` (``auto``: ``node_models``) on the target type's own
    features (nothing from the graph); the one with the best val value of the run's metric
    (``summary["best_val"]``, the first on a tie) is the baseline written, so evaluate compares
    the GNN with the strongest structure-free model, chosen on val in the metric it is judged
    on. metrics/baseline.json names the metric and, with several models, each one's best val
    value (``candidates``)."""
    source = baseline_source(args, params, "node")
    read, fits = NODE_SOURCES[source]
    graph, x, roles = read(args)
    models = node_models(params, x, graph, roles)
    results = {name: fits[name](x, graph, roles, params) for name in models}
    chosen = max(results, key=lambda name: results[name].summary["best_val"])
    write_node_outputs(args, results[chosen], None)
    typed = graph.layout == TYPED
    tags = {"node_type": graph.target} if typed else {}
    if source == "blocks":
        tags["source"] = source
    if len(results) > 1:
        tags["candidates"] = {name: r.summary["best_val"] for name, r in results.items()}
    fitted = (f" (fitted {', '.join(results)}"
              f"{'; baseline.models auto' if params.baseline.models == 'auto' else ''})")
    return _finish(args, results[chosen], chosen, tags,
                   f"{chosen}{f' on {graph.target} features,' if typed else ''} "
                   f"{best_line(results[chosen].summary)}{fitted}")


def baseline_links(args, params) -> str:
    """An MLP encoder of every node's features with the dot-product decoder; typed files: one
    per node type (their widths differ), rows in ``to_homogeneous`` order. ``baseline.source:
    blocks`` fits the same objective from feature rows read by blocks."""
    from gnnpipe.hetero.inputs import phase_inputs
    from gnnpipe.hetero.models import build_hetero_model
    from gnnpipe.training.block_link_fit import fit_link_blocks
    from gnnpipe.training.link_train import fit_link
    from gnnpipe.training.models import build_model
    from gnnpipe.training.train import build_inputs

    cfg = params.baseline
    source = baseline_source(args, params, "link")
    typed, segments = (read_link_blocks(args) if source == "blocks"
                       else (read_model_typed(args), None))
    graph = typed.graph
    edge_type, sup = read_typed_link_supervision(args, typed)
    dims = {t: int(x.shape[1]) for t, x in graph.x.items()}
    if graph.layout == TYPED:
        build = lambda: build_hetero_model("mlp", graph.metadata(), dims, cfg.hidden,
                                           graph.target, cfg, out="all")
        tags, what = {"edge_type": edge_type_name(edge_type)}, "per-type link encoders"
    else:  # one type: the homogeneous MLP (TypedMLP adds an input map, other weights)
        build = lambda: build_model("mlp", dims[graph.target], cfg.hidden, cfg)
        tags, what = {}, "link encoder"
    options = LoopOptions(progress=progress)
    if source == "blocks":
        tags["source"] = source
        result = fit_link_blocks(build, segments, sup.edges, sup.negatives, sup.sampler, cfg,
                                 baseline_seed(params), block_rows=cfg.block_rows,
                                 hard_negatives=sup.hard, options=options)
    else:
        inputs = (phase_inputs(graph, typed.graphs) if graph.layout == TYPED
                  else build_inputs(graph.x[graph.target]))
        result = fit_link(build, inputs, sup.edges, sup.negatives, sup.sampler, cfg,
                          baseline_seed(params), hard_negatives=sup.hard, options=options)
    write_link_outputs(args, result, None)
    return _finish(args, result, "mlp", tags,
                   f"mlp {what}, best val MRR {result.summary['best_val_mrr']:.4f}")


def _finish(args, result, model: str, tags: dict, message: str) -> str:
    write_run_files(args, result, {"model": model, **tags, **result.summary}, result.perf)
    return f"{message} -> {args.out}"


RUNS = {"node": baseline_nodes, "link": baseline_links}
