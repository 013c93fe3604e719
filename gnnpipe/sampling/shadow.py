"""ShaDow k-hop subgraphs (Zeng et al. 2021, "Decoupling the Depth and Scope of GNNs").

``train.sampler: shadow``: every seed gets its own small subgraph, the subgraph *induced* on
a sampled ``depth``-hop in-neighbourhood of the seed (``num_neighbors`` in-edges drawn per node
and hop, -1 = all, as PyG's ``ShaDowKHopSampler(depth, num_neighbors)``), and a GNN of any
depth runs on the batch of those disjoint subgraphs; the loss and the outputs are read at the
roots. PyG's own sampler needs torch-sparse (``ego_k_hop_sample_adj``); this one is
``CsrNeighborSampler`` with ``disjoint=True`` and ``subgraph_type="induced"``, which builds
exactly that: one tree per seed, then every edge of the graph among the nodes of the same tree.

A batch (PyG ``NodeLoader`` over the sampler; ``B`` seeds):

  batch.n_id        (M,) global ids; the B roots first, in seed order
  batch.batch       (M,) which root's subgraph holds each node (0..B-1)
  batch.root_n_id   (B,) local id of each root: ``arange(B)``, as the roots come first
  batch.edge_index  (2, E) local ids; no edge joins two subgraphs
  batch.x, batch.y  (M, F), (M,) gathered for every node (PyG's ShaDow keeps y of roots only:
                    here it is ``batch.y[batch.root_n_id]``)

Two layouts (``train.shadow.layout``). ``roots_first`` (the default) differs from PyG's in one
way: PyG groups each subgraph's nodes contiguously (with a ``ptr``) and places the root anywhere
inside; here the roots come first, so the usual "first ``batch_size`` nodes are the seeds"
reading and ``root_n_id`` agree, and ``batch.batch`` is unsorted (PyG's pooling ops scatter by
it and do not need it sorted). ``pyg`` (``pyg_layout``) gives exactly PyG's
``ShaDowKHopSampler`` batch: a ``Batch`` with ``num_graphs``, ``ptr``, sorted ``batch``, each
subgraph's nodes ascending by global id, ``root_n_id`` pointing into it, edges sorted by
(source, target) and ``y`` for the roots only (B,); ``n_id`` / ``e_id`` are reordered along.

Exactness: with ``num_neighbors = -1``, a root's output equals the full-graph output when
``depth >= num_layers`` for mean/sum/attention layers (sage, gat) and when
``depth >= num_layers + 1`` for gcn, whose normalisation also reads the in-degree of the
outermost sources.
"""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.loader import NodeLoader

from gnnpipe.config import ShadowParams
from gnnpipe.data.graph import Csr
from gnnpipe.sampling.neighbor import CsrNeighborSampler


class ShadowKHopSampler(CsrNeighborSampler):
    """Per-seed induced ``depth``-hop subgraphs, behind PyG's ``BaseSampler`` interface.

    Args:
        graph: ``Csr`` (row ``v`` = sources of the edges into ``v``) or PyG ``Data``.
        depth: hops of each subgraph (>= 1).
        num_neighbors: in-edges drawn per node and hop (-1 = all).
        replace, seed, edge_time, node_time, temporal_strategy: as ``CsrNeighborSampler``
            (temporal: induced edges later than the root's time are dropped too).
    """

    def __init__(self, graph: Csr | Data, depth: int, num_neighbors: int, *,
                 replace: bool = False, seed: int | torch.Generator | None = None, **temporal):
        if int(depth) < 1:
            raise ValueError(f"shadow depth={depth} must be >= 1")
        super().__init__(graph, [int(num_neighbors)] * int(depth), replace=replace,
                         subgraph_type="induced", disjoint=True, seed=seed, backend="gnnpipe",
                         **temporal)
        self.depth = int(depth)


def add_root_n_id(batch: Data) -> Data:
    """``batch.root_n_id``: the roots' local ids, ``arange(batch_size)`` (roots come first)."""
    batch.root_n_id = torch.arange(batch.batch_size)
    return batch


EDGE_KEYS = ("e_id", "edge_attr", "edge_weight", "edge_norm")  # edge-level even when M == E
ROOT_KEYS = ("input_id", "seed_time")  # one per root, kept in root order whatever B equals
DROPPED = ("edge_index", "batch", "batch_size", "num_nodes", "num_sampled_nodes",
           "num_sampled_edges")  # rebuilt, or per-hop counts of the roots-first order


def pyg_layout(batch: Data) -> Batch:
    """A roots-first ShaDow batch (B roots, M nodes, E edges) in PyG's ``ShaDowKHopSampler``
    layout: nodes grouped by subgraph (``ptr`` (B + 1,), sorted ``batch`` (M,)), ascending by
    global id inside each, ``root_n_id`` (B,) their new positions, edges sorted by (source,
    target), ``y`` (B,) of the roots; other node-level (M, ...) and edge-level (E, ...)
    attributes reordered along, per-root ones (B, ...) such as ``input_id`` kept."""
    b, m = batch.batch_size, batch.num_nodes
    tree, n_id = batch.batch.numpy(), batch.n_id.numpy()
    order = np.argsort(tree * (int(n_id.max(initial=0)) + 1) + n_id, kind="stable")  # (M,):
    # by subgraph, then global id (one int64 key: 2-3x faster than lexsort)
    inv = np.empty(m, dtype=np.int64)
    inv[order] = np.arange(m)
    src, dst = inv[batch.edge_index.numpy()]
    e_order = torch.from_numpy(np.argsort(src * m + dst, kind="stable"))
    order_t = torch.from_numpy(order)
    ptr = torch.zeros(b + 1, dtype=torch.long)
    ptr[1:] = torch.cumsum(torch.bincount(batch.batch, minlength=b), 0)
    out = Batch(batch=batch.batch[order_t], ptr=ptr)
    out.root_n_id = torch.from_numpy(inv[:b])  # roots-first: root i was local node i
    out.edge_index = torch.from_numpy(np.stack([src, dst]))[:, e_order]
    num_edges = e_order.numel()
    for key, value in batch.items():
        if key in DROPPED:
            continue
        if key in ROOT_KEYS:
            out[key] = value
        elif key == "y" and value.size(0) == m:
            out.y = value[:b]
        elif isinstance(value, torch.Tensor) and value.dim() and value.size(0) == num_edges and (
                key in EDGE_KEYS or value.size(0) != m):
            out[key] = value.index_select(0, e_order)
        elif isinstance(value, torch.Tensor) and value.dim() and value.size(0) == m:
            out[key] = value.index_select(0, order_t)  # 3x faster than value[order_t] on x
        else:
            out[key] = value
    out.num_nodes = m
    return out


def shadow_loader(x: torch.Tensor, y: torch.Tensor, csr: Csr, seeds: torch.Tensor,
                  cfg: ShadowParams, seed: int, *, batch_size: int, replace: bool = False,
                  num_workers: int = 0, edge_index: torch.Tensor | None = None,
                  shuffle: bool = True, **temporal) -> NodeLoader:
    """Batches of ``batch_size`` roots with their ShaDow subgraphs in ``csr``.

    ``cfg.depth`` hops, ``cfg.num_neighbors`` per node and hop, drawn with ``replace``
    (``train.neighbor.replace``), batches in ``cfg.layout``; the rest as
    ``gnnpipe.sampling.neighbor_loader`` (only edges of ``csr`` are sampled).
    ``temporal`` (``edge_time`` / ``node_time`` / ``temporal_strategy`` and the loader's
    ``input_time``) makes it temporal.
    """
    input_time = temporal.pop("input_time", None)
    sampler = ShadowKHopSampler(csr, cfg.depth, cfg.num_neighbors, replace=replace, seed=seed,
                                **temporal)
    data = Data(x=x, y=y, edge_index=csr.edge_index() if edge_index is None else edge_index,
                num_nodes=csr.num_nodes)
    return NodeLoader(data, node_sampler=sampler, input_nodes=seeds, input_time=input_time,
                      batch_size=batch_size, shuffle=shuffle, num_workers=num_workers,
                      persistent_workers=num_workers > 0,
                      transform=pyg_layout if cfg.layout == "pyg" else add_root_n_id)
