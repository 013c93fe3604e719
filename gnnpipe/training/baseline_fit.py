"""The structure-free node models of ``baseline.models`` and where their features come from.

``baseline.source`` (resolved once by ``baseline_source``): ``memory`` reads the whole feature
matrix; ``blocks`` (homogeneous graphs) reads feature rows from the prepared file by row blocks
(gnnpipe/training/block_fit.py: the MLP's full-batch objective by blocks; gbdt holds only its
train and val rows and predicts by blocks) and never the CSR; ``auto`` picks blocks on
``cluster.engine: dask`` or when the float32 features reach ``AUTO_BLOCKS_BYTES``.
``NODE_SOURCES[source]`` is ``(read, fits)``: ``read(args)`` gives the graph (or its labels),
the target's features and the split roles; ``fits[name](x, graph, roles, params)`` one model's
fit result. The baseline stage and evaluate.seeds both fit through these tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnpipe import io
from gnnpipe.commands.variant import prepared_layout
from gnnpipe.data.features import ModelFeatures, read_transform
from gnnpipe.data.graph import HOMOGENEOUS, NODE
from gnnpipe.io.rows import open_node_source, read_feature_source
from gnnpipe.runtime.progress import progress
from gnnpipe.runtime.rng import torch_seed
from gnnpipe.splitting.inputs import read_model_typed
from gnnpipe.training.loop import LoopOptions

# gnnpipe.training.models and train import PyG (about 1.4 s), gbdt LightGBM: imported in the
# fits, so that `gnnpipe baseline --help` does not pay for them

# baseline.source: auto reads by blocks from this many bytes of float32 target features (as
# prepare's dataset.storage.features: auto moves x out of graph.pt)
AUTO_BLOCKS_BYTES = 1 << 30


def baseline_source(args, params) -> str:
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


def read_memory(args):
    """The graph with every node type's model features, the target's x (N, F), its roles (int8
    codes (N,), ``gnnpipe.data.graph.ROLE_CODES``)."""
    graph = read_model_typed(args).graph
    return graph, graph.x[graph.target], io.read_typed_role_codes(args.split, graph)


def read_blocks(args):
    """A homogeneous graph's labels and classes (no CSR read), its x as ``ModelFeatures``
    (rows read by ``pread`` and normalized per request) and the split roles (int8
    codes (N,), ``gnnpipe.data.graph.ROLE_CODES``)."""
    stored, y, num_classes = open_node_source(args.prepared)
    roles = io.read_typed_role_codes(args.split)
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
               build_inputs(x), graph.y, roles, cfg, baseline_seed(params),
               options=LoopOptions(progress=progress))


def _fit_mlp_blocks(x, graph, roles, params):
    from gnnpipe.training.block_fit import fit_blocks
    from gnnpipe.training.models import build_model

    cfg = params.baseline
    return fit_blocks(lambda: build_model("mlp", x.shape[1], graph.num_classes, cfg), x,
                      graph.y, roles, cfg, baseline_seed(params), block_rows=cfg.block_rows,
                      options=LoopOptions(progress=progress))


def _fit_gbdt(x, graph, roles, params):
    from gnnpipe.training.gbdt import fit_gbdt  # LightGBM (and scikit-learn): only when listed

    return fit_gbdt(x, graph.y, roles, graph.num_classes, params.baseline.gbdt,
                    baseline_seed(params),
                    torch.get_num_threads())


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
