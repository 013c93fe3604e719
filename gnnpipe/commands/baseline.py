"""baseline: the structure-free MLP on the same split, cached apart from the GNN. Link task: an
MLP encoder with the dot-product decoder; typed graphs: the target type's own features (node
task) or per-type MLP encoders (link task)."""


from gnnpipe import io
from gnnpipe.commands.inputs import (read_link_supervision, read_model_graph, read_model_typed,
                                     read_typed_link_supervision)
from gnnpipe.commands.training import write_link_outputs, write_node_outputs, write_run_files
from gnnpipe.commands.variant import pick, split_variant
from gnnpipe.data.typed_graph import HOMOGENEOUS, TYPED
from gnnpipe.config import load_params
from gnnpipe.io.hetero import read_hetero_roles
from gnnpipe.training.loop import LoopOptions
from gnnpipe.runtime.progress import progress
from gnnpipe.runtime.rng import torch_seed

# gnnpipe.training.models, train, link_train and hetero.* import PyG (about 1.4 s): imported in the
# run functions, so that `gnnpipe --help` does not pay for them


def run(args):
    params = load_params(args.params)
    kind, task = split_variant(args.split)
    return pick(RUNS, kind, task, "baseline")(args, params)


def baseline_nodes(args, params) -> str:
    from gnnpipe.training.models import build_model
    from gnnpipe.training.train import build_inputs, fit

    graph = read_model_graph(args)
    roles = io.read_split_roles(args.split)
    cfg = params.baseline
    result = fit(lambda: build_model("mlp", graph.x.shape[1], graph.num_classes, cfg),
                 build_inputs(graph.x), graph.y, roles, cfg, _seed(params),
                 options=LoopOptions(progress=progress))
    write_node_outputs(args, result, None)
    return _finish(args, result, {}, f"mlp best val acc {result.summary['best_val_acc']:.4f}")


def baseline_links(args, params) -> str:
    from gnnpipe.training.link_train import fit_link
    from gnnpipe.training.models import build_model
    from gnnpipe.training.train import build_inputs

    cfg = params.baseline
    graph = read_model_graph(args)
    graphs = io.read_message_graphs(args.split, graph.num_nodes)
    sup = read_link_supervision(args, graph.num_nodes, graphs)
    result = fit_link(lambda: build_model("mlp", graph.x.shape[1], cfg.hidden, cfg),
                      build_inputs(graph.x), sup.edges, sup.negatives, sup.sampler, cfg,
                      _seed(params), options=LoopOptions(progress=progress))
    write_link_outputs(args, result, None)
    return _finish(args, result, {},
                   f"mlp link encoder, best val MRR {result.summary['best_val_mrr']:.4f}")


def baseline_typed_nodes(args, params) -> str:
    """The MLP on the target type's own features: nothing from the graph."""
    from gnnpipe.training.models import build_model
    from gnnpipe.training.train import build_inputs, fit

    cfg = params.baseline
    graph = read_model_typed(args).graph
    roles = read_hetero_roles(args.split, graph)
    x = graph.x[graph.target]
    result = fit(lambda: build_model("mlp", x.shape[1], graph.num_classes, cfg),
                 build_inputs(x), graph.y, roles, cfg, _seed(params),
                 options=LoopOptions(progress=progress))
    write_node_outputs(args, result, None)
    return _finish(args, result, {"node_type": graph.target},
                   f"mlp on {graph.target} features, best val acc "
                   f"{result.summary['best_val_acc']:.4f}")


def baseline_typed_links(args, params) -> str:
    """Per-type MLP encoders (gnnpipe.training.models.TypedMLP) with the dot-product decoder."""
    from gnnpipe.hetero.inputs import phase_inputs
    from gnnpipe.hetero.models import build_hetero_model
    from gnnpipe.training.link_train import fit_link

    cfg = params.baseline
    typed = read_model_typed(args)
    graph = typed.graph
    _, sup = read_typed_link_supervision(args, typed)
    dims = {t: int(x.shape[1]) for t, x in graph.x.items()}
    result = fit_link(lambda: build_hetero_model("mlp", graph.metadata(), dims, cfg.hidden,
                                                 graph.target, cfg, out="all"),
                      phase_inputs(graph, typed.graphs), sup.edges, sup.negatives, sup.sampler,
                      cfg, _seed(params), options=LoopOptions(progress=progress))
    write_link_outputs(args, result, None)
    return _finish(args, result, {"hetero": True},
                   f"mlp per-type link encoders, best val MRR "
                   f"{result.summary['best_val_mrr']:.4f}")


def _seed(params) -> int:
    return torch_seed(params.seed, "baseline")


def _finish(args, result, tags: dict, message: str) -> str:
    write_run_files(args, result, {"model": "mlp", **tags, **result.summary}, result.perf)
    return f"{message} -> {args.out}"


RUNS = {(HOMOGENEOUS, "node"): baseline_nodes, (HOMOGENEOUS, "link"): baseline_links,
        (TYPED, "node"): baseline_typed_nodes, (TYPED, "link"): baseline_typed_links}
