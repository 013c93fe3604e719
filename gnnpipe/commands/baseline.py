"""baseline: the structure-free models of baseline.models (MLP, gradient-boosted trees) on the
same split, the best on val written; cached apart from the GNN, on the graph read as typed
(either layout). Node task: each model on the target type's own features. Link task:
an MLP encoder with the dot-product decoder (typed files: per-type MLP encoders,
``gnnpipe.training.models.TypedMLP``).

Node task, ``baseline.source`` (chosen once, here): ``memory`` reads the whole feature matrix;
``blocks`` (homogeneous graphs) reads feature rows from the prepared file by row blocks
(gnnpipe/training/block_fit.py: the MLP's full-batch objective by blocks; gbdt holds only its
train and val rows and predicts by blocks) and never the CSR; ``auto`` picks blocks on
``cluster.engine: dask`` or when the float32 features reach ``AUTO_BLOCKS_BYTES``."""

from dataclasses import dataclass

import torch

from gnnpipe import io
from gnnpipe.splitting.inputs import read_model_typed, read_typed_link_supervision
from gnnpipe.training.run_files import write_link_outputs, write_node_outputs, write_run_files
from gnnpipe.commands.variant import prepared_layout, split_task
from gnnpipe.config import load_params
from gnnpipe.data.features import ModelFeatures, read_transform
from gnnpipe.data.graph import HOMOGENEOUS, NODE, TYPED, edge_type_name
from gnnpipe.io.rows import open_node_source, read_feature_source
from gnnpipe.training.loop import LoopOptions
from gnnpipe.runtime.progress import progress
from gnnpipe.runtime.rng import torch_seed

# gnnpipe.training.models, train, link_train and hetero.* import PyG (about 1.4 s), gbdt LightGBM:
# imported in the run functions, so that `gnnpipe baseline --help` does not pay for them

# baseline.source: auto reads by blocks from this many bytes of float32 target features (as
# prepare's dataset.storage.features: auto moves x out of graph.pt)
AUTO_BLOCKS_BYTES = 1 << 30


def run(args) -> str:
    params = load_params(args.params)
    return RUNS[split_task(args.split)](args, params)


def baseline_nodes(args, params) -> str:
    """Each model of ``baseline.models`` on the target type's own features (nothing from the
    graph); the one with the best val accuracy (the first on a tie) is the baseline written,
    so evaluate compares the GNN with the strongest structure-free model, chosen on val."""
    cfg = params.baseline
    source = node_source(args, params)
    read, fits = NODE_SOURCES[source]
    graph, x, roles = read(args)
    results = {name: fits[name](x, graph, roles, params) for name in cfg.models}
    chosen = max(results, key=lambda name: results[name].summary["best_val_acc"])
    write_node_outputs(args, results[chosen], None)
    typed = graph.layout == TYPED
    tags = {"node_type": graph.target} if typed else {}
    if source == "blocks":
        tags["source"] = source
    if len(results) > 1:
        tags["candidates"] = {name: r.summary["best_val_acc"] for name, r in results.items()}
    return _finish(args, results[chosen], chosen, tags,
                   f"{chosen}{f' on {graph.target} features,' if typed else ''} best val acc "
                   f"{results[chosen].summary['best_val_acc']:.4f}"
                   + (f" (of {', '.join(results)})" if len(results) > 1 else ""))


def node_source(args, params) -> str:
    """``baseline.source`` resolved: memory | blocks (auto: blocks for a homogeneous graph on
    ``cluster.engine: dask`` or with float32 features of at least ``AUTO_BLOCKS_BYTES``, unless
    ``evaluate.seeds`` > 1 retrains the baseline in memory anyway)."""
    chosen = params.baseline.source
    if chosen != "auto":
        return chosen
    if prepared_layout(args.prepared) != HOMOGENEOUS or params.evaluate.seeds > 1:
        return "memory"
    if params.cluster.engine == "dask":
        return "blocks"
    num_nodes, width = read_feature_source(args.prepared).shape  # a map: nothing is read
    return "blocks" if num_nodes * width * 4 >= AUTO_BLOCKS_BYTES else "memory"


def _read_memory(args):
    """The graph with every node type's model features, the target's x (N, F), its roles."""
    graph = read_model_typed(args).graph
    return graph, graph.x[graph.target], io.read_typed_roles(args.split, graph)


def _read_blocks(args):
    """A homogeneous graph's labels and classes (no CSR read), its x as ``ModelFeatures``
    (rows read by ``pread`` and normalized per request) and the split roles (N,)."""
    stored, y, num_classes = open_node_source(args.prepared)
    roles = io.read_split_roles(args.split)
    if roles.size != y.numel():
        raise ValueError(f"{args.split}: {roles.size} split roles for {y.numel()} nodes; re-run "
                         "the split stage")
    x = ModelFeatures(stored, read_transform(args.features, None, int(stored.shape[1])))
    return BlockGraph(y, num_classes), x, roles


@dataclass(frozen=True)
class BlockGraph:
    """What the node fits read of the graph on the blocks path: labels int64 (N,) (-1:
    unlabelled) and the class count; a homogeneous graph's one type."""
    y: torch.Tensor
    num_classes: int
    target: str = NODE
    layout: str = HOMOGENEOUS


def _fit_mlp(x, graph, roles, params):
    from gnnpipe.training.models import build_model
    from gnnpipe.training.train import build_inputs, fit

    cfg = params.baseline
    return fit(lambda: build_model("mlp", x.shape[1], graph.num_classes, cfg),
               build_inputs(x), graph.y, roles, cfg, _seed(params),
               options=LoopOptions(progress=progress))


def _fit_mlp_blocks(x, graph, roles, params):
    from gnnpipe.training.block_fit import fit_blocks
    from gnnpipe.training.models import build_model

    cfg = params.baseline
    return fit_blocks(lambda: build_model("mlp", x.shape[1], graph.num_classes, cfg), x,
                      graph.y, roles, cfg, _seed(params), block_rows=cfg.block_rows,
                      options=LoopOptions(progress=progress))


def _fit_gbdt(x, graph, roles, params):
    from gnnpipe.training.gbdt import fit_gbdt  # LightGBM (and scikit-learn): only when listed

    return fit_gbdt(x, graph.y, roles, graph.num_classes, params.baseline.gbdt, _seed(params),
                    torch.get_num_threads())


# the structure-free node models (baseline.models), each fitted on the target's features
FIT_NODES = {"mlp": _fit_mlp, "gbdt": _fit_gbdt}
# baseline.source: blocks: x is a ModelFeatures (gbdt reads its train and val rows, predicts by
# blocks of rows: gnnpipe/training/gbdt.py)
BLOCK_FIT_NODES = {"mlp": _fit_mlp_blocks, "gbdt": _fit_gbdt}
# baseline.source (resolved) -> how the node task reads its inputs, and the fits it runs
NODE_SOURCES = {"memory": (_read_memory, FIT_NODES), "blocks": (_read_blocks, BLOCK_FIT_NODES)}


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
                      hard_negatives=sup.hard, options=LoopOptions(progress=progress))
    write_link_outputs(args, result, None)
    return _finish(args, result, "mlp", tags,
                   f"mlp {what}, best val MRR {result.summary['best_val_mrr']:.4f}")


def _seed(params) -> int:
    return torch_seed(params.seed, "baseline")


def _finish(args, result, model: str, tags: dict, message: str) -> str:
    write_run_files(args, result, {"model": model, **tags, **result.summary}, result.perf)
    return f"{message} -> {args.out}"


RUNS = {"node": baseline_nodes, "link": baseline_links}
