"""The training loader of every ``train.sampler``, keyed by (sampler, graph layout): each one
builds its sampler from its params section (gnnpipe/config/samplers.py) over the train phase's
message graph only, and yields ``LossBatch`` es (gnnpipe/sampling/batch.py).

``build`` is what the train stage calls; the ``*_batches`` functions are the same loaders for
callers that hold the pieces (tests, benches). Whatever the stage reads for a sampler (partition
parts, temporal and weight columns) arrives in a ``Source``; nothing here touches files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch_geometric.loader import NodeLoader

from gnnpipe.config.samplers import HOMOGENEOUS, SAMPLERS, TYPED
from gnnpipe.training.distributed import SINGLE, DistContext
from gnnpipe.data.graph import Csr, Graph
from gnnpipe.hetero.loader import hetero_data
from gnnpipe.graphops.partition import rank_parts
from gnnpipe.runtime.rng import torch_seed
from gnnpipe.sampling import batch as adapt
from gnnpipe.sampling.batch import Batches
from gnnpipe.sampling.cluster import ClusterLoader, GraphParts
from gnnpipe.sampling.hetero import HeteroBudgetSampler
from gnnpipe.sampling.link import link_neighbor_loader, typed_link_loader
from gnnpipe.sampling.loader import neighbor_loader
from gnnpipe.sampling.neighbor import HeteroNeighborSampler
from gnnpipe.sampling.saint import SaintLoader, estimate_norm, make_sampler
from gnnpipe.sampling.shadow import shadow_loader
from gnnpipe.training.sharding import NodeRows


@dataclass(frozen=True)
class Source:
    """What a loader draws from. ``graph``: the ``Graph`` with the features models read (a
    homogeneous one's builders read its ``target_view``: x (N, F), y (N,)); ``train_graph``: the
    train phase's message graph (``Csr``, or edge type -> ``Csr``); ``seeds``: every train node
    (T,) of the (target) type, ``rank_seeds`` this DDP rank's share of them; ``edge_index``:
    ``train_graph.edge_index()`` when the caller holds it.
    Node options: ``temporal`` (sampler keyword arguments and the loader's ``input_time``),
    ``edge_weight`` (E_train,), ``partition`` (meta, part of every node (N,), train nodes per
    part (P,)), ``train_mask`` (N,). Link task: ``supervision`` (a
    ``gnnpipe.splitting.inputs.LinkSupervision``) and, typed, its ``edge_type``."""

    graph: Graph
    train_graph: object
    seeds: torch.Tensor | None = None
    rank_seeds: torch.Tensor | None = None
    edge_index: torch.Tensor | None = None
    temporal: dict = field(default_factory=dict)
    edge_weight: np.ndarray | None = None
    partition: tuple | None = None
    train_mask: torch.Tensor | None = None
    supervision: object = None
    edge_type: tuple | None = None


@dataclass(frozen=True)
class Built:
    """A loader with what goes into metrics/train.json (``metrics``) and this rank's perf entry
    (``rank``)."""

    loader: Batches
    metrics: dict = field(default_factory=dict)
    rank: dict = field(default_factory=dict)


def build(src: Source, cfg, seed: int, ctx: DistContext = SINGLE) -> Built | None:
    """The loader of ``cfg.sampler`` (``cfg``: TrainParams) on ``src.graph`` (its layout picks
    the builder), sampling from the stream of ``seed`` (the stage seed); None for the samplers
    without one (full, sign: the task steps over the whole graph or row batches)."""
    if not SAMPLERS[cfg.sampler].loader:
        return None
    return BUILDERS[cfg.sampler, src.graph.layout](src, cfg, seed, ctx)


# ------------------------------------------------------------------------- homogeneous graphs
def neighbor_batches(x, y: torch.Tensor, csr: Csr, seeds: torch.Tensor, cfg, seed: int,
                     **kwargs) -> Batches:
    """``gnnpipe.sampling.neighbor_loader`` (``cfg``: train.neighbor) as ``LossBatch`` es: loss
    on each batch's seeds."""
    return Batches(neighbor_loader(x, y, csr, seeds, cfg, seed, **kwargs), adapt.seeds_first)


def shadow_batches(x, y: torch.Tensor, csr: Csr, seeds: torch.Tensor, cfg, seed: int,
                   **kwargs) -> Batches:
    """``gnnpipe.sampling.shadow.shadow_loader`` (``cfg``: train.shadow) as ``LossBatch`` es:
    loss at each subgraph's root, in either layout."""
    convert = adapt.pyg_roots if cfg.layout == "pyg" else adapt.roots
    return Batches(shadow_loader(x, y, csr, seeds, cfg, seed, **kwargs), convert)


def link_neighbor_batches(x, csr: Csr, supervision: torch.Tensor, negatives, cfg, seed: int,
                          **kwargs) -> Batches:
    """``gnnpipe.sampling.link.link_neighbor_loader`` (``cfg``: train.neighbor) as
    ``LossBatch`` es: loss on each batch's supervision pairs and their negatives."""
    return Batches(link_neighbor_loader(x, csr, supervision, negatives, cfg, seed, **kwargs),
                   adapt.pairs)


def _neighbor(src: Source, cfg, seed: int, ctx: DistContext) -> Built:
    graph = src.graph.target_view()
    kwargs = dict(batch_size=cfg.batch_size, num_workers=cfg.num_workers,
                  edge_index=src.edge_index, **src.temporal,
                  **({} if src.edge_weight is None else {"edge_weight": src.edge_weight}))
    return Built(neighbor_batches(graph.x, graph.y, src.train_graph, src.rank_seeds,
                                  cfg.neighbor, torch_seed(seed, "sample"), **kwargs))


def _shadow(src: Source, cfg, seed: int, ctx: DistContext) -> Built:
    graph = src.graph.target_view()
    return Built(shadow_batches(graph.x, graph.y, src.train_graph, src.rank_seeds, cfg.shadow,
                                torch_seed(seed, "sample"), replace=cfg.neighbor.replace,
                                batch_size=cfg.batch_size, num_workers=cfg.num_workers,
                                edge_index=src.edge_index, **src.temporal))


def _cluster(src: Source, cfg, seed: int, ctx: DistContext) -> Built:
    meta, parts, train_per_part = src.partition
    graph = src.graph.target_view()
    rows = NodeRows(graph.x, graph.y)  # the memory-mapped graph: row i is node i
    parts_source = GraphParts(src.train_graph, parts, meta["num_parts"],
                              cfg.cluster.keep_inter_cluster_edges)
    loader = ClusterLoader(parts_source, rows, src.train_mask, train_per_part,
                           cfg.cluster.parts_per_batch, ctx.rank, ctx.world_size)
    return Built(Batches(loader, adapt.train_nodes),
                 rank={"parts": rank_parts(meta["num_parts"], ctx.rank, ctx.world_size)})


def _saint(src: Source, cfg, seed: int, ctx: DistContext) -> Built:
    saint = cfg.saint
    sampler = make_sampler(saint.sampler, src.train_graph, src.seeds, cfg.batch_size,
                           saint.walk_length)
    norm = estimate_norm(sampler, saint.sample_coverage, torch_seed(seed, "saint"))
    steps = saint.num_steps or math.ceil(src.seeds.numel() / cfg.batch_size)
    graph = src.graph.target_view()
    loader = SaintLoader(sampler, norm, NodeRows(graph.x, graph.y), src.train_mask,
                         steps, ctx.rank, ctx.world_size)
    return Built(Batches(loader, adapt.normalized_train_nodes),
                 metrics={"saint_presamples": norm.num_samples, "saint_steps": steps})


def _link_neighbor(src: Source, cfg, seed: int, ctx: DistContext) -> Built:
    sup = src.supervision
    loader = link_neighbor_batches(src.graph.target_view().x, src.train_graph,
                                   sup.edges["train_supervision"],
                                   sup.sampler, cfg.neighbor, torch_seed(seed, "sample"),
                                   batch_size=cfg.batch_size, num_workers=cfg.num_workers,
                                   ctx=ctx, edge_index=src.edge_index)
    return Built(loader, metrics={"batches_per_epoch": len(loader)})  # per rank


# ------------------------------------------------------------------------------- typed graphs
def hgt_batches(graph, train_graph: dict, train_nodes: np.ndarray, num_samples: tuple[int, ...],
                batch_size: int, seed: int, num_workers: int = 0) -> Batches:
    """HGT per-type node budgets (``HeteroBudgetSampler``, PyG's ``HGTLoader`` semantics):
    shuffled batches of the target type's ``train_nodes`` (int (T,)) over ``train_graph``, loss
    on the seeds."""
    sampler = HeteroBudgetSampler(graph.num_nodes_dict, train_graph,
                                  list(num_samples), seed=seed)
    loader = NodeLoader(hetero_data(graph, train_graph), node_sampler=sampler,
                        input_nodes=(graph.target, torch.from_numpy(train_nodes)),
                        batch_size=batch_size, shuffle=True, num_workers=num_workers)
    return Batches(loader, adapt.typed_seeds_first(graph.target))


def typed_neighbor_batches(graph, train_graph: dict, seeds: np.ndarray, cfg, batch_size: int,
                           seed: int, num_workers: int = 0, temporal: dict | None = None
                           ) -> Batches:
    """Shuffled batches of the target type's ``seeds`` (int (S,), this rank's share) with
    their typed fan-outs over ``train_graph`` only (``HeteroNeighborSampler``, PyG's
    ``NeighborLoader``-on-``HeteroData`` semantics); ``cfg`` is ``train.neighbor`` (the same
    fan-outs for every edge type), ``temporal`` what ``gnnpipe.hetero.loader.typed_temporal``
    returned. Loss on the seeds; every edge type is in each batch."""
    temporal = dict(temporal or {})
    input_time = temporal.pop("input_time", None)
    sampler = HeteroNeighborSampler(graph.num_nodes_dict,
                                    train_graph, list(cfg.num_neighbors), replace=cfg.replace,
                                    subgraph_type=cfg.subgraph_type, disjoint=cfg.disjoint,
                                    seed=seed, **temporal)
    loader = NodeLoader(hetero_data(graph, train_graph), node_sampler=sampler,
                        input_nodes=(graph.target, torch.from_numpy(np.asarray(seeds))),
                        input_time=input_time, batch_size=batch_size, shuffle=True,
                        num_workers=num_workers,
                        # fresh workers every epoch: their streams derive from the epoch-seeded
                        # torch RNG, so a resumed run samples as an uninterrupted one would
                        persistent_workers=False)
    return Batches(loader, adapt.typed_seeds_first(graph.target, tuple(train_graph)))


def typed_link_batches(graph, train_graph: dict, edge_type: tuple, supervision: torch.Tensor,
                       negatives, cfg, batch_size: int, seed: int, *, ctx: DistContext = SINGLE,
                       num_workers: int = 0) -> Batches:
    """Batches of this rank's ``batch_size`` train supervision edges of ``edge_type``
    (``supervision`` int64 (2, P) in ``to_homogeneous`` ids, as the typed link split reads
    them), one fresh leak-free negative each from ``negatives`` (homogeneous ids), their
    neighbourhoods sampled with ``cfg`` (``train.neighbor``) in ``train_graph`` only."""
    offsets = graph.offsets()
    shift = (offsets[edge_type[0]], offsets[edge_type[2]])
    local = supervision - torch.tensor([[shift[0]], [shift[1]]])  # type-local ids
    loader = typed_link_loader(graph.x, train_graph, edge_type, local, negatives, cfg, seed,
                               batch_size=batch_size, offsets=shift, num_workers=num_workers,
                               ctx=ctx)
    return Batches(loader, adapt.typed_pairs(tuple(graph.node_types), tuple(train_graph),
                                             loader.edge_type))


def _typed_hgt(src: Source, cfg, seed: int, ctx: DistContext) -> Built:
    loader = hgt_batches(src.graph, src.train_graph, src.seeds.numpy(), cfg.hgt.num_samples,
                         cfg.batch_size, torch_seed(seed, "sample"), cfg.num_workers)
    return Built(loader, metrics={"batches_per_epoch": len(loader),
                                  "num_samples": list(cfg.hgt.num_samples)})


def _typed_neighbor(src: Source, cfg, seed: int, ctx: DistContext) -> Built:
    loader = typed_neighbor_batches(src.graph, src.train_graph, src.rank_seeds.numpy(),
                                    cfg.neighbor, cfg.batch_size, torch_seed(seed, "sample"),
                                    cfg.num_workers, src.temporal)
    return Built(loader, metrics={"batches_per_epoch": len(loader)})  # per rank


def _typed_link_neighbor(src: Source, cfg, seed: int, ctx: DistContext) -> Built:
    sup = src.supervision
    loader = typed_link_batches(src.graph, src.train_graph, src.edge_type,
                                sup.edges["train_supervision"], sup.sampler, cfg.neighbor,
                                cfg.batch_size, torch_seed(seed, "sample"), ctx=ctx,
                                num_workers=cfg.num_workers)
    return Built(loader, metrics={"batches_per_epoch": len(loader)})  # per rank


BUILDERS: dict[tuple[str, str], Callable[..., Built]] = {
    ("neighbor", HOMOGENEOUS): _neighbor, ("shadow", HOMOGENEOUS): _shadow,
    ("cluster", HOMOGENEOUS): _cluster, ("saint", HOMOGENEOUS): _saint,
    ("link_neighbor", HOMOGENEOUS): _link_neighbor, ("hgt", TYPED): _typed_hgt,
    ("neighbor", TYPED): _typed_neighbor, ("link_neighbor", TYPED): _typed_link_neighbor,
}
