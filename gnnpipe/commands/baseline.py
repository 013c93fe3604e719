"""baseline: the structure-free models of baseline.models (MLP, gradient-boosted trees; auto:
the MLP, and gbdt beside it under baseline.auto_gbdt_cells) on the same split, the best on val
(in the run's metric, evaluate.metric resolved) written; cached apart from the GNN, on the
graph read as typed (either layout). Node task: each model on the target type's own features,
early-stopped on that metric with train.class_weight's loss weights, as the GNN is. Link task:
an MLP encoder with the dot-product decoder (typed files: per-type MLP encoders,
``gnnpipe.training.models.TypedMLP``).

Either task reads feature rows by blocks of ``baseline.block_rows`` (gnnpipe/training/
baseline_fit.py: ``read_nodes`` and ``FIT_NODES``, ``read_links`` and ``fit_link_blocks``),
never the whole matrix; the bytes written do not depend on the block size nor on the
engine."""

from gnnpipe.splitting.inputs import read_typed_link_supervision
from gnnpipe.training.baseline_fit import (FIT_NODES, baseline_seed, node_models, read_links,
                                           read_nodes)
from gnnpipe.training.run_files import (best_line, write_link_outputs, write_node_outputs,
                                        write_run_files)
from gnnpipe.commands.variant import split_task
from gnnpipe.config import load_params
from gnnpipe.data.graph import TYPED, edge_type_name
from gnnpipe.training.loop import LoopOptions
from gnnpipe.runtime.progress import progress

# gnnpipe.training.models, block_link_fit and hetero.* import PyG (about 1.4 s): imported in
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
    graph, x, roles = read_nodes(args)
    models = node_models(params, x, graph, roles)
    results = {name: FIT_NODES[name](x, graph, roles, params) for name in models}
    chosen = max(results, key=lambda name: results[name].summary["best_val"])
    write_node_outputs(args, results[chosen], None)
    typed = graph.layout == TYPED
    tags = {"node_type": graph.target} if typed else {}
    if len(results) > 1:
        tags["candidates"] = {name: r.summary["best_val"] for name, r in results.items()}
    fitted = (f" (fitted {', '.join(results)}"
              f"{'; baseline.models auto' if params.baseline.models == 'auto' else ''})")
    return _finish(args, results[chosen], chosen, tags,
                   f"{chosen}{f' on {graph.target} features,' if typed else ''} "
                   f"{best_line(results[chosen].summary)}{fitted}")


def baseline_links(args, params) -> str:
    """An MLP encoder of every node's features with the dot-product decoder; typed files: one
    per node type (their widths differ), rows in ``to_homogeneous`` order; the full-batch
    objective from feature rows read by blocks."""
    from gnnpipe.hetero.models import build_hetero_model
    from gnnpipe.training.block_link_fit import fit_link_blocks
    from gnnpipe.training.models import build_model

    cfg = params.baseline
    typed, segments = read_links(args)
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
    result = fit_link_blocks(build, segments, sup.edges, sup.negatives, sup.sampler, cfg,
                             baseline_seed(params), block_rows=cfg.block_rows,
                             hard_negatives=sup.hard, options=LoopOptions(progress=progress))
    write_link_outputs(args, result, None)
    return _finish(args, result, "mlp", tags,
                   f"mlp {what}, best val MRR {result.summary['best_val_mrr']:.4f}")


def _finish(args, result, model: str, tags: dict, message: str) -> str:
    write_run_files(args, result, {"model": model, **tags, **result.summary}, result.perf)
    return f"{message} -> {args.out}"


RUNS = {"node": baseline_nodes, "link": baseline_links}
