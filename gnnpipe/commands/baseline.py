"""baseline: the structure-free MLP on the same split, cached apart from the GNN, on the graph
read as typed (either layout). Node task: the MLP on the target type's own features. Link task:
an MLP encoder with the dot-product decoder (typed files: per-type MLP encoders,
``gnnpipe.training.models.TypedMLP``)."""

from gnnpipe import io
from gnnpipe.commands.inputs import read_model_typed, read_typed_link_supervision
from gnnpipe.commands.training import write_link_outputs, write_node_outputs, write_run_files
from gnnpipe.commands.variant import split_task
from gnnpipe.config import load_params
from gnnpipe.data.typed_graph import TYPED, edge_type_name
from gnnpipe.training.loop import LoopOptions
from gnnpipe.runtime.progress import progress
from gnnpipe.runtime.rng import torch_seed

# gnnpipe.training.models, train, link_train and hetero.* import PyG (about 1.4 s): imported in the
# run functions, so that `gnnpipe --help` does not pay for them


def run(args) -> str:
    params = load_params(args.params)
    return RUNS[split_task(args.split)](args, params)


def baseline_nodes(args, params) -> str:
    """The MLP on the target type's own features: nothing from the graph."""
    from gnnpipe.training.models import build_model
    from gnnpipe.training.train import build_inputs, fit

    cfg = params.baseline
    graph = read_model_typed(args).graph
    roles = io.read_typed_roles(args.split, graph)
    x = graph.x[graph.target]
    result = fit(lambda: build_model("mlp", x.shape[1], graph.num_classes, cfg),
                 build_inputs(x), graph.y, roles, cfg, _seed(params),
                 options=LoopOptions(progress=progress))
    write_node_outputs(args, result, None)
    typed = graph.layout == TYPED
    return _finish(args, result, {"node_type": graph.target} if typed else {},
                   f"mlp{f' on {graph.target} features,' if typed else ''} best val acc "
                   f"{result.summary['best_val_acc']:.4f}")


def baseline_links(args, params) -> str:
    """An MLP encoder of every node's features with the dot-product decoder; typed files: one
    per node type (their widths differ), rows in ``to_homogeneous`` order."""
    from gnnpipe.hetero.inputs import phase_inputs
    from gnnpipe.hetero.models import build_hetero_model
    from gnnpipe.training.link_train import fit_link
    from gnnpipe.training.models import build_model
    from gnnpipe.training.train import build_inputs

    cfg = params.baseline
    typed = read_model_typed(args)
    graph = typed.graph
    edge_type, sup = read_typed_link_supervision(args, typed)
    if graph.layout == TYPED:
        dims = {t: int(x.shape[1]) for t, x in graph.x.items()}
        build = lambda: build_hetero_model("mlp", graph.metadata(), dims, cfg.hidden,
                                           graph.target, cfg, out="all")
        inputs, tags, what = (phase_inputs(graph, typed.graphs),
                              {"edge_type": edge_type_name(edge_type)}, "per-type link encoders")
    else:  # one type: the homogeneous MLP (TypedMLP adds an input map, other weights)
        x = graph.x[graph.target]
        build = lambda: build_model("mlp", x.shape[1], cfg.hidden, cfg)
        inputs, tags, what = build_inputs(x), {}, "link encoder"
    result = fit_link(build, inputs, sup.edges, sup.negatives, sup.sampler, cfg, _seed(params),
                      options=LoopOptions(progress=progress))
    write_link_outputs(args, result, None)
    return _finish(args, result, tags,
                   f"mlp {what}, best val MRR {result.summary['best_val_mrr']:.4f}")


def _seed(params) -> int:
    return torch_seed(params.seed, "baseline")


def _finish(args, result, tags: dict, message: str) -> str:
    write_run_files(args, result, {"model": "mlp", **tags, **result.summary}, result.perf)
    return f"{message} -> {args.out}"


RUNS = {"node": baseline_nodes, "link": baseline_links}
