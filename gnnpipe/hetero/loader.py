"""Mini-batches of a heterogeneous graph for ``gnnpipe.train.fit``: HGT per-type node budgets
(``train.sampler: hgt``) and typed neighbour fan-outs (``train.sampler: neighbor``).

``train.sampler: hgt`` draws, for ``batch_size`` seed nodes of the target type, up to
``num_samples[l]`` nodes of **every** node type at hop ``l`` (``gnnpipe.sampling.hetero``'s
``HeteroBudgetSampler``, PyG's ``HGTLoader`` semantics without torch-sparse) from the train
phase's typed message graph only, through PyG's ``NodeLoader`` (``input_nodes = (target, train
ids)``). Each ``HeteroData`` batch reaches ``fit`` as a ``SeedBatch``: the typed features and
edges of the sampled subgraph and the labels of its target nodes, the ``batch_size`` seeds first,
so ``fit`` computes the loss on the seeds exactly as for homogeneous neighbour batches.

``train.sampler: neighbor`` draws ``train.neighbor.num_neighbors[l]`` in-edges of every edge
type per frontier node at hop ``l`` (``gnnpipe.sampling.hetero_neighbor``'s
``HeteroNeighborSampler``, PyG's ``NeighborLoader``-on-``HeteroData`` semantics), optionally
temporal (``train.temporal.by``: node times per type, or edge times re-aligned to the train
graph). Under DDP each rank passes only its ``distributed.shard`` of the seeds (equal shares,
so equal step counts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import HeteroData
from torch_geometric.loader import NodeLoader

from gnnpipe.graph import Csr
from gnnpipe.typed_graph import EdgeType, HeteroGraph


@dataclass(frozen=True)
class SeedBatch:
    """``x`` node type -> (n_t, F_t); ``edge_index`` edge type -> (2, e) local ids; ``y`` (n_target,)
    labels of the sampled target nodes, the first ``batch_size`` of them the seeds."""

    x: dict[str, torch.Tensor]
    edge_index: dict[EdgeType, torch.Tensor]
    y: torch.Tensor
    batch_size: int

    def __contains__(self, key: str) -> bool:  # fit asks for "train_mask" (cluster batches)
        return key in ("x", "edge_index", "y", "batch_size")


class HgtBatches:
    """``NodeLoader`` batches as ``SeedBatch`` es; ``node_sampler`` lets ``fit`` set the epoch.

    Every edge type of ``edge_types`` is in each batch's ``edge_index`` ((2, 0) when none was
    sampled): the typed models index every edge type, and under DDP every parameter then joins
    every step's graph."""

    def __init__(self, loader: NodeLoader, target: str, edge_types: tuple[EdgeType, ...] = ()):
        self.loader, self.target, self.edge_types = loader, target, tuple(edge_types)
        self.node_sampler = loader.node_sampler

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        empty = torch.empty(2, 0, dtype=torch.int64)
        for batch in self.loader:
            store = batch[self.target]
            edges = batch.edge_index_dict
            edges.update({e: empty for e in self.edge_types if e not in edges})
            yield SeedBatch(batch.x_dict, edges, store.y, int(store.batch_size))


def _hetero_data(graph: HeteroGraph, train_graph: dict[EdgeType, Csr]) -> HeteroData:
    """Features of every type, target labels, and the train graph's edges in CSR order (the
    samplers' edge ids as they are)."""
    data = HeteroData()
    for node_type, x in graph.x.items():
        data[node_type].x = x
    data[graph.target].y = graph.y
    for edge_type, csr in train_graph.items():
        data[edge_type].edge_index = csr.edge_index()
    return data


def hgt_batches(graph: HeteroGraph, train_graph: dict[EdgeType, Csr], train_nodes: np.ndarray,
                num_samples: tuple[int, ...], batch_size: int, seed: int,
                num_workers: int = 0) -> HgtBatches:
    """Shuffled batches of the target type's ``train_nodes`` (int (T,)) over ``train_graph``."""
    from gnnpipe.sampling.hetero import HeteroBudgetSampler

    data = _hetero_data(graph, train_graph)
    sampler = HeteroBudgetSampler({t: graph.num_nodes(t) for t in graph.node_types}, train_graph,
                                  list(num_samples), seed=seed)
    loader = NodeLoader(data, node_sampler=sampler,
                        input_nodes=(graph.target, torch.from_numpy(train_nodes)),
                        batch_size=batch_size, shuffle=True, num_workers=num_workers)
    return HgtBatches(loader, graph.target)


def align_typed_edge_times(full: Csr, edge_time: np.ndarray, sub: Csr, num_src: int
                           ) -> np.ndarray:
    """Times (E_sub,) of the edges of ``sub`` (a phase's CSR of one edge type) from
    ``edge_time`` (E_full,) of the prepared CSR ``full``; rows = destination nodes, columns in
    ``[0, num_src)``. Matched by (destination, source), the k-th copy of a repeated edge taking
    the k-th copy's time; an edge of ``sub`` missing from ``full`` is a ValueError."""
    edge_time = np.asarray(edge_time)
    if edge_time.shape != (full.num_edges,):
        raise ValueError(f"{edge_time.size} edge times for {full.num_edges} edges of the "
                         "prepared graph; re-run the prepare stage")
    full_key = full.targets().numpy() * num_src + full.indices.numpy()  # (E,) grouped by row
    sub_key = sub.targets().numpy() * num_src + sub.indices.numpy()
    order = np.argsort(full_key, kind="stable")  # columns need not be sorted within a row
    sorted_key = full_key[order]
    sub_order = np.argsort(sub_key, kind="stable")
    sub_sorted = sub_key[sub_order]
    copy = np.arange(sub_sorted.size) - np.searchsorted(sub_sorted, sub_sorted, side="left")
    pos = np.searchsorted(sorted_key, sub_sorted, side="left") + copy
    ok = pos < sorted_key.size
    ok[ok] = sorted_key[pos[ok]] == sub_sorted[ok]
    if not ok.all():
        raise ValueError("the train message graph holds typed edges the prepared graph lacks; "
                         "re-run the split stage")
    out = np.empty(sub_key.size, dtype=edge_time.dtype)
    out[sub_order] = edge_time[order[pos]]
    return out


def typed_temporal(by: str, strategy: str, graph: HeteroGraph,
                   train_graph: dict[EdgeType, Csr], seeds: np.ndarray) -> dict:
    """Keyword arguments of ``HeteroNeighborSampler`` and the loader's ``input_time`` for
    ``train.temporal.by`` none | node | edge: seed times are the target type's node times
    (``graph.node_time``, absent before the typed tables carry times), edge times
    (``graph.edge_time``, prepared CSR order) are re-aligned to ``train_graph``."""
    if by == "none":
        return {}
    node_time = getattr(graph, "node_time", None) or {}
    if graph.target not in node_time:
        raise ValueError(f"train.temporal.by={by!r} takes each seed's time from the "
                         f"{graph.target!r} node times, and the prepared typed graph has none: "
                         "give that node table a time column")
    times = {t: np.asarray(v) for t, v in node_time.items()}
    out = {"temporal_strategy": strategy,
           "input_time": torch.from_numpy(np.ascontiguousarray(times[graph.target][seeds]))}
    if by == "node":
        out["node_time"] = times
        return out
    edge_time = getattr(graph, "edge_time", None) or {}
    if not edge_time:
        raise ValueError("train.temporal.by='edge' needs edge times, and the prepared typed "
                         "graph has none: give the edge tables a time column")
    out["edge_time"] = {e: align_typed_edge_times(graph.csr[e], np.asarray(t), train_graph[e],
                                                  graph.num_nodes(e[0]))
                        for e, t in edge_time.items() if e in train_graph}
    return out


def neighbor_batches(graph: HeteroGraph, train_graph: dict[EdgeType, Csr], seeds: np.ndarray,
                     cfg, batch_size: int, seed: int, num_workers: int = 0,
                     temporal: dict | None = None) -> HgtBatches:
    """Shuffled batches of the target type's ``seeds`` (int (S,), this rank's share) with
    their typed fan-outs over ``train_graph`` only; ``cfg`` is ``train.neighbor``
    (num_neighbors per layer, the same for every edge type; replace; subgraph_type; disjoint),
    ``temporal`` what ``typed_temporal`` returned."""
    from gnnpipe.sampling.hetero_neighbor import HeteroNeighborSampler

    temporal = dict(temporal or {})
    input_time = temporal.pop("input_time", None)
    data = _hetero_data(graph, train_graph)
    sampler = HeteroNeighborSampler({t: graph.num_nodes(t) for t in graph.node_types},
                                    train_graph, list(cfg.num_neighbors), replace=cfg.replace,
                                    subgraph_type=cfg.subgraph_type, disjoint=cfg.disjoint,
                                    seed=seed, **temporal)
    loader = NodeLoader(data, node_sampler=sampler,
                        input_nodes=(graph.target, torch.from_numpy(np.asarray(seeds))),
                        input_time=input_time, batch_size=batch_size, shuffle=True,
                        num_workers=num_workers,
                        # fresh workers every epoch: their streams derive from the epoch-seeded
                        # torch RNG, so a resumed run samples as an uninterrupted one would
                        persistent_workers=False)
    return HgtBatches(loader, graph.target, tuple(train_graph))


@dataclass(frozen=True)
class LinkBatch:
    """One typed link batch as ``gnnpipe.link_train`` reads it: ``x`` node type -> (n_t, F_t),
    ``edge_index`` edge type -> (2, m_e) local ids, ``edge_label_index`` (2, 2B) rows of the
    model's ``out="all"`` output (the types' local ids concatenated in node-type order): B
    positives then their B negatives, ``edge_label`` (2B,) 1 / 0."""

    x: dict[str, torch.Tensor]
    edge_index: dict[EdgeType, torch.Tensor]
    edge_label_index: torch.Tensor
    edge_label: torch.Tensor


class TypedLinkBatches:
    """``TypedSupervisionLoader`` batches as ``LinkBatch`` es (every edge type present, (2, 0)
    when none was sampled); ``set_epoch`` goes to the loader (``LinkTask.batches``)."""

    def __init__(self, loader, node_types: tuple[str, ...], edge_types: tuple[EdgeType, ...]):
        self.loader, self.node_types, self.edge_types = loader, tuple(node_types), edge_types

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def __iter__(self):
        empty = torch.empty(2, 0, dtype=torch.int64)
        src, _, dst = self.loader.edge_type
        for batch in self.loader:
            sizes = [batch[t].num_nodes for t in self.node_types]
            start = dict(zip(self.node_types, np.cumsum([0] + sizes[:-1]).tolist()))
            store = batch[self.loader.edge_type]
            pairs = store.edge_label_index + torch.tensor([[start[src]], [start[dst]]])
            edges = batch.edge_index_dict
            edges.update({e: empty for e in self.edge_types if e not in edges})
            yield LinkBatch({t: batch[t].x for t in self.node_types}, edges, pairs,
                            store.edge_label)


def link_batches(graph: HeteroGraph, train_graph: dict[EdgeType, Csr], edge_type: EdgeType,
                 supervision: torch.Tensor, negatives, cfg, batch_size: int, seed: int, *,
                 ctx=None, num_workers: int = 0) -> TypedLinkBatches:
    """Batches of this rank's ``batch_size`` train supervision edges of ``edge_type``
    (``supervision`` int64 (2, P) in ``to_homogeneous`` ids, as the typed link split reads
    them), one fresh leak-free negative each from ``negatives`` (homogeneous ids), their
    neighbourhoods sampled with ``cfg`` (``train.neighbor``) in ``train_graph`` only."""
    from gnnpipe.distributed import SINGLE
    from gnnpipe.sampling.hetero_link import typed_link_loader

    offsets = graph.offsets()
    shift = (offsets[edge_type[0]], offsets[edge_type[2]])
    local = supervision - torch.tensor([[shift[0]], [shift[1]]])  # type-local ids
    loader = typed_link_loader(graph.x, train_graph, edge_type, local, negatives, cfg, seed,
                               batch_size=batch_size, offsets=shift, num_workers=num_workers,
                               ctx=ctx or SINGLE)
    return TypedLinkBatches(loader, graph.node_types, tuple(train_graph))
