"""The structure-free models of ``baseline.models`` and where their features come from.

``baseline.source`` (resolved once by ``baseline_source``): ``memory`` reads the whole feature
matrix; ``blocks`` reads feature rows from the prepared file by row blocks and never the
whole matrix: node task (gnnpipe/training/block_fit.py: the MLP's full-batch objective by
blocks; gbdt holds only its train and val rows and predicts by blocks; typed files: the
target type's rows) without the CSR, link task (gnnpipe/training/block_link_fit.py: the
encoder's full-batch objective by blocks; typed files: every type's rows); ``auto`` picks
blocks on ``cluster.engine: dask`` or when the float32 features the task reads reach
``AUTO_BLOCKS_BYTES``. ``NODE_SOURCES[source]`` is ``(read, fits)``: ``read(args)`` gives the
graph (or its labels), the target's features and the split roles; ``fits[name](x, graph,
roles, params)`` one model's fit result. The baseline stage and evaluate.seeds both fit through
these tables; the link task reads through ``read_link_blocks``.

Every node fit early-stops on the val value of the run's metric and weighs its loss by
``train.class_weight`` (``gnnpipe.training.train.objective_for``: the GNN's rule, so the
comparison stays fair). ``node_models`` resolves ``baseline.models: auto``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnpipe import io
from gnnpipe.commands.variant import feature_shapes, prepared_layout
from gnnpipe.data.features import ModelFeatures, read_transform
from gnnpipe.data.graph import ROLE_CODES, TYPED
from gnnpipe.io.rows import FeatureSource, open_node_source
from gnnpipe.runtime.progress import progress
from gnnpipe.runtime.rng import torch_seed
from gnnpipe.splitting.inputs import TypedSplit, read_model_typed, read_typed
from gnnpipe.training.loop import LoopOptions

# gnnpipe.training.models and train import PyG (about 1.4 s), gbdt LightGBM: imported in the
# fits, so that `gnnpipe baseline --help` does not pay for them

# baseline.source: auto reads by blocks from this many bytes of float32 target features (as
# prepare's dataset.storage.features: auto moves x out of graph.pt)
AUTO_BLOCKS_BYTES = 1 << 30


def baseline_source(args, params, task: str) -> str:
    """``baseline.source`` resolved for ``task`` (node | link): memory | blocks (auto: blocks on
    ``cluster.engine: dask`` or with float32 features of at least ``AUTO_BLOCKS_BYTES``: the
    target type's for the node task, every type's for the link task; memory where
    ``evaluate.seeds`` > 1 retrains the baseline in memory anyway)."""
    chosen = params.baseline.source
    if chosen != "auto":
        return chosen
    if params.evaluate.seeds > 1:
        return "memory"
    if params.cluster.engine == "dask":
        return "blocks"
    shapes = feature_shapes(args.prepared)  # graph.json: nothing else is read
    read = shapes.values() if task == "link" else [shapes[io.read_split_meta(args.split)["target"]]]
    return "blocks" if sum(n * width * 4 for n, width in read) >= AUTO_BLOCKS_BYTES else "memory"


def read_memory(args):
    """The graph with every node type's model features, the target's x (N, F), its roles (int8
    codes (N,), ``gnnpipe.data.graph.ROLE_CODES``)."""
    graph = read_model_typed(args).graph
    return graph, graph.x[graph.target], io.read_typed_role_codes(args.split, graph)


def read_blocks(args):
    """The target type's labels and classes (no CSR read), its x as ``ModelFeatures`` (rows
    read by ``pread`` and normalized per request) and the split roles (int8 codes (N,),
    ``gnnpipe.data.graph.ROLE_CODES``)."""
    stored, y, num_classes = open_node_source(args.prepared)
    roles = io.read_typed_role_codes(args.split)
    if roles.size != y.numel():
        raise ValueError(f"{args.split}: {roles.size} split roles for {y.numel()} nodes; re-run "
                         "the split stage")
    target, layout = io.read_split_meta(args.split)["target"], prepared_layout(args.prepared)
    x = ModelFeatures(stored, read_transform(args.features, target if layout == TYPED else None,
                                             int(stored.shape[1])))
    return BlockGraph(y, num_classes, target, layout), x, roles


def read_link_blocks(args) -> tuple[TypedSplit, list[tuple]]:
    """The split as the link task reads it, every tensor a map (the features' pages are never
    touched), and per node type in the graph's order ``(type, its first homogeneous id, its x
    as ModelFeatures)``: the ``segments`` of gnnpipe/training/block_link_fit.py (typed files:
    type name; a homogeneous graph: None)."""
    graph = io.read_graph(args.prepared, mmap=True, stored_x=True)
    typed = read_typed(args, mmap=True, graph=graph)
    per_type = graph.layout == TYPED
    offsets = graph.offsets()
    segments = [(t if per_type else None, offsets[t],
                 ModelFeatures(FeatureSource(x, mapped=True, release_bytes=0),
                               read_transform(args.features, t if per_type else None,
                                              int(x.shape[1]))))
                for t, x in graph.x.items()]
    return typed, segments


@dataclass(frozen=True)
class BlockGraph:
    """What the node fits read of the graph on the blocks path: the target type's labels int64
    (N,) (-1: unlabelled), the class count, the target's name and the layout."""
    y: torch.Tensor
    num_classes: int
    target: str
    layout: str


def node_models(params, x, graph, roles) -> tuple[str, ...]:
    """``baseline.models`` of the node task, ``auto`` resolved: mlp, and gbdt beside it when the
    labelled train rows times the feature columns of ``x`` (N, F) are at most
    ``baseline.auto_gbdt_cells`` (LightGBM's time grows with both; ``graph.y`` int64 (N,) labels,
    ``roles`` int8 (N,) role codes). A list is taken as given."""
    models = params.baseline.models
    if models != "auto":
        return tuple(models)
    train_rows = int(((roles == ROLE_CODES["train"]) & (graph.y.numpy() >= 0)).sum())
    cells = train_rows * int(x.shape[1])
    return ("mlp", "gbdt") if cells <= params.baseline.auto_gbdt_cells else ("mlp",)


def _objective(graph, roles, params):
    """The fit's objective (the val metric early stopping maximises, the class weights): the
    train stage's rule (``objective_for``)."""
    from gnnpipe.training.train import objective_for

    return objective_for(params, graph.y, roles, graph.num_classes)


def _fit_mlp(x, graph, roles, params):
    from gnnpipe.training.models import build_model
    from gnnpipe.training.train import build_inputs, fit

    cfg = params.baseline
    return fit(lambda: build_model("mlp", x.shape[1], graph.num_classes, cfg),
               build_inputs(x), graph.y, roles, cfg, baseline_seed(params),
               options=LoopOptions(progress=progress), objective=_objective(graph, roles, params))


def _fit_mlp_blocks(x, graph, roles, params):
    from gnnpipe.training.block_fit import fit_blocks
    from gnnpipe.training.models import build_model

    cfg = params.baseline
    return fit_blocks(lambda: build_model("mlp", x.shape[1], graph.num_classes, cfg), x,
                      graph.y, roles, cfg, baseline_seed(params), block_rows=cfg.block_rows,
                      options=LoopOptions(progress=progress),
                      objective=_objective(graph, roles, params))


def _fit_gbdt(x, graph, roles, params):
    from gnnpipe.training.gbdt import fit_gbdt  # LightGBM (and scikit-learn): only when listed

    return fit_gbdt(x, graph.y, roles, graph.num_classes, params.baseline.gbdt,
                    baseline_seed(params), torch.get_num_threads(),
                    objective=_objective(graph, roles, params))


# the structure-free node models (baseline.models), each fitted on the target's features
FIT_NODES = {"mlp": _fit_mlp, "gbdt": _fit_gbdt}
# baseline.source: blocks: x is a ModelFeatures (gbdt reads its train and val rows, predicts by
# blocks of rows: gnnpipe/training/gbdt.py)
BLOCK_FIT_NODES = {"mlp": _fit_mlp_blocks, "gbdt": _fit_gbdt}
# baseline.source (resolved) -> how the node task reads its inputs, and the fits it runs
NODE_SOURCES = {"memory": (read_memory, FIT_NODES), "blocks": (read_blocks, BLOCK_FIT_NODES)}


def baseline_seed(params) -> int:
    """The baseline's torch seed: the stream ``baseline`` of ``params.seed``."""
    return torch_seed(params.seed, "baseline")
