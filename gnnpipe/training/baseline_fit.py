"""The structure-free models of ``baseline.models`` and where their features come from.

One fit, read by blocks: feature rows come from the prepared file a block of
``baseline.block_rows`` node ids at a time and never as the whole matrix. Node task
(``read_nodes``, ``FIT_NODES``): the target type's labels, its rows as ``ModelFeatures`` and the
split roles, no CSR; the MLP's full-batch objective by chunks (gnnpipe/training/block_fit.py),
gbdt holding only its train and val rows. Link task (``read_links``): the encoder's full-batch
objective by chunks (gnnpipe/training/block_link_fit.py; typed files: every type's rows). The
gradient is a sum over fixed chunks of ``BASELINE_CHUNK_ROWS`` ids in node order, so the bytes
written do not depend on ``baseline.block_rows`` nor on ``cluster.engine`` (never read here).
evaluate.seeds fits through ``FIT_NODES`` too, on the matrix it holds: the same arithmetic.

Every node fit early-stops on the val value of the run's metric and weighs its loss by
``train.class_weight`` (``gnnpipe.training.train.objective_for``: the GNN's rule, so the
comparison stays fair). ``node_models`` resolves ``baseline.models: auto``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnpipe import io
from gnnpipe.commands.variant import prepared_layout
from gnnpipe.data.features import ModelFeatures, read_transform
from gnnpipe.data.graph import ROLE_CODES, TYPED
from gnnpipe.io.rows import FeatureSource, open_node_source
from gnnpipe.runtime.progress import progress
from gnnpipe.runtime.rng import torch_seed
from gnnpipe.splitting.inputs import TypedSplit, read_typed
from gnnpipe.training.loop import LoopOptions

# gnnpipe.training.models and train import PyG (about 1.4 s), gbdt LightGBM: imported in the
# fits, so that `gnnpipe baseline --help` does not pay for them


def read_nodes(args):
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


def read_links(args) -> tuple[TypedSplit, list[tuple]]:
    """The split as the link task reads it, every tensor a map (the features' pages are never
    touched), and per node type in the graph's order ``(type, its first homogeneous id, its x
    as ModelFeatures)``: the ``segments`` of gnnpipe/training/block_link_fit.py (typed files:
    type name; a homogeneous graph: None)."""
    graph = io.read_graph(args.prepared, mmap=True, stored_x=True)
    typed = read_typed(args, mmap=True, graph=graph)
    per_type = graph.layout == TYPED
    offsets = graph.offsets()
    segments = [(t if per_type else None, offsets[t],
                 ModelFeatures(FeatureSource(x, mapped=True),
                               read_transform(args.features, t if per_type else None,
                                              int(x.shape[1]))))
                for t, x in graph.x.items()]
    return typed, segments


@dataclass(frozen=True)
class BlockGraph:
    """What the node fits read of the graph (``read_nodes``: no CSR): the target type's labels
    int64 (N,) (-1: unlabelled), the class count, the target's name and the layout."""
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
    """The MLP on ``x`` (N, F): a ``ModelFeatures`` (the stage) or a tensor (evaluate.seeds),
    the same bytes from either (gnnpipe/training/block_fit.py)."""
    from gnnpipe.training.block_fit import fit_blocks
    from gnnpipe.training.mlp import FeatureMLP  # build_model("mlp", ...) without PyG

    cfg = params.baseline
    build = lambda: FeatureMLP(x.shape[1], cfg.hidden, graph.num_classes, cfg.num_layers,
                               cfg.dropout)
    return fit_blocks(build, x, graph.y, roles, cfg, baseline_seed(params),
                      block_rows=cfg.block_rows, options=LoopOptions(progress=progress),
                      objective=_objective(graph, roles, params))


def _fit_gbdt(x, graph, roles, params):
    from gnnpipe.training.gbdt import fit_gbdt  # LightGBM (and scikit-learn): only when listed

    return fit_gbdt(x, graph.y, roles, graph.num_classes, params.baseline.gbdt,
                    baseline_seed(params), torch.get_num_threads(),
                    objective=_objective(graph, roles, params))


# the structure-free node models (baseline.models), each fitted on the target's features ``x``
# (a ModelFeatures read by blocks, or a tensor): ``fit(x, graph, roles, params)``; gbdt holds
# its train and val rows and predicts by blocks of rows (gnnpipe/training/gbdt.py)
FIT_NODES = {"mlp": _fit_mlp, "gbdt": _fit_gbdt}


def baseline_seed(params) -> int:
    """The baseline's torch seed: the stream ``baseline`` of ``params.seed``."""
    return torch_seed(params.seed, "baseline")
