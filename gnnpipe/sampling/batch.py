"""The one batch type every training loader yields (``LossBatch``), and the adapters that turn
each sampler's own output (PyG ``Data`` / ``HeteroData`` in its layout) into it.

A ``LossBatch`` says which output rows carry the loss, their targets and weights, so a training
step reads ``model(batch.x, batch.edge_index)[batch.rows]`` and asks nothing of the batch's
shape. Which adapter a loader uses is decided once, by its builder
(gnnpipe/sampling/builders.py), from the sampler's name and layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import torch


@dataclass(frozen=True)
class LossBatch:
    """One training batch: the sampled subgraph and where its loss is.

    ``x`` (n, F) or node type -> (n_t, F_t); ``edge_index`` (2, e) local ids or edge type ->
    (2, e_t). Node task: ``rows`` (a slice of the first ``batch_size`` rows, an index (M,) or a
    bool mask (n,)) picks the model's output rows that carry the loss, ``target`` (M,) their
    labels, ``weight`` (M,) their loss weights or None (plain mean). Link task: ``pairs``
    (2, P) output rows whose dot products are scored, ``target`` (P,) their 1 / 0 labels.
    ``edge_weight`` (e,) goes to models that take one; ``num_sampled_nodes`` /
    ``num_sampled_edges`` (per hop; typed: node / edge type -> per hop) let models trim layers
    to what the loss rows need; ``n_id`` (n,) (typed: node type -> (n_t,)) the rows' global node
    ids, which models with learnable node embeddings read (``train.embeddings``)."""

    x: object
    edge_index: object
    target: torch.Tensor
    rows: slice | torch.Tensor | None = None
    pairs: torch.Tensor | None = None
    weight: torch.Tensor | None = None
    edge_weight: torch.Tensor | None = None
    num_sampled_nodes: list | None = None
    num_sampled_edges: list | None = None
    n_id: object = None


class Batches:
    """A loader whose batches go through ``convert`` (one adapter below); ``len``, ``set_epoch``,
    ``node_sampler`` and ``skipped`` (empty batches, cluster) are the loader's own."""

    def __init__(self, loader: Iterable, convert: Callable[..., LossBatch]):
        self.loader, self.convert = loader, convert

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):
        if name in ("loader", "convert"):  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self):
        return map(self.convert, self.loader)


def _counts(data) -> dict:
    return {"num_sampled_nodes": getattr(data, "num_sampled_nodes", None),
            "num_sampled_edges": getattr(data, "num_sampled_edges", None), **_ids(data)}


def _ids(data) -> dict:
    """The batch's global node ids (PyG's ``n_id``), when its sampler gave them."""
    return {"n_id": getattr(data, "n_id", None)}


def _typed_ids(batch, node_types) -> dict:
    """Node type -> ``batch[t].n_id`` of a typed batch, or None when a type has none."""
    ids = {t: batch[t].n_id for t in node_types if "n_id" in batch[t]}
    return {"n_id": ids if len(ids) == len(node_types) else None}


def seeds_first(data) -> LossBatch:
    """A seeds-first subgraph (``neighbor``): loss on the first ``batch_size`` nodes."""
    seeds = slice(None, data.batch_size)
    return LossBatch(data.x, data.edge_index, data.y[seeds], seeds, **_counts(data))


def roots(data) -> LossBatch:
    """Per-seed subgraphs, roots first (``shadow`` layout roots_first): loss at ``root_n_id``."""
    return LossBatch(data.x, data.edge_index, data.y[data.root_n_id], data.root_n_id,
                     **_ids(data))


def pyg_roots(data) -> LossBatch:
    """PyG's ShaDow ``Batch`` (``shadow`` layout pyg): ``y`` holds the roots' labels only."""
    return LossBatch(data.x, data.edge_index, data.y, data.root_n_id, **_ids(data))


def train_nodes(data) -> LossBatch:
    """A subgraph with a ``train_mask`` (``cluster``): loss on its train nodes."""
    return LossBatch(data.x, data.edge_index, data.y[data.train_mask], data.train_mask,
                     **_ids(data))


def normalized_train_nodes(data) -> LossBatch:
    """A GraphSAINT subgraph: loss on its train nodes weighted by ``node_norm``, ``edge_norm``
    as the edge weight of models that take one."""
    mask = data.train_mask
    return LossBatch(data.x, data.edge_index, data.y[mask], mask, weight=data.node_norm[mask],
                     edge_weight=data.edge_norm, **_ids(data))


def pairs(data) -> LossBatch:
    """A link batch (``link_neighbor``): ``edge_label_index`` (2, 2B) local ids, B positives
    then their negatives, endpoints first; ``edge_label`` (2B,) 1 / 0."""
    return LossBatch(data.x, data.edge_index, data.edge_label, pairs=data.edge_label_index,
                     **_counts(data))


def typed_edges(batch, edge_types: tuple) -> dict:
    """``batch.edge_index_dict`` with every edge type of ``edge_types`` ((2, 0) when none was
    sampled): the typed models index every edge type, and under DDP every parameter then joins
    every step's graph."""
    empty = torch.empty(2, 0, dtype=torch.int64)
    edges = batch.edge_index_dict
    edges.update({e: empty for e in edge_types if e not in edges})
    return edges


def typed_counts(batch, edge_types: tuple) -> dict:
    """``num_sampled_nodes`` (node type -> per hop) and ``num_sampled_edges`` (edge type of
    ``edge_types`` -> per hop; zeros for a type ``typed_edges`` adds empty) of a typed batch,
    or None for both when the sampler gave none (hgt) or ``edge_types`` is empty."""
    nodes = {t: batch[t].num_sampled_nodes for t in batch.node_types
             if "num_sampled_nodes" in batch[t]}
    sampled = {e: batch[e].num_sampled_edges for e in batch.edge_types
               if "num_sampled_edges" in batch[e]}
    if not edge_types or not sampled or len(nodes) != len(batch.node_types):
        return {"num_sampled_nodes": None, "num_sampled_edges": None}
    hops = len(next(iter(sampled.values())))
    return {"num_sampled_nodes": nodes,
            "num_sampled_edges": {e: sampled.get(e, [0] * hops) for e in edge_types}}


def typed_seeds_first(target: str, edge_types: tuple = ()) -> Callable[..., LossBatch]:
    """Adapter of typed ``NodeLoader`` batches (``hgt``, typed ``neighbor``): the features of
    every type, loss on the first ``batch_size`` nodes of the ``target`` type, and the per-hop
    counts of each type (``typed_counts``) for models that trim."""
    def convert(batch) -> LossBatch:
        store = batch[target]
        seeds = slice(None, int(store.batch_size))
        return LossBatch(batch.x_dict, typed_edges(batch, edge_types), store.y[seeds], seeds,
                         **typed_counts(batch, edge_types), **_typed_ids(batch, batch.node_types))
    return convert


def typed_pairs(node_types: tuple, edge_types: tuple, edge_type: tuple
                ) -> Callable[..., LossBatch]:
    """Adapter of typed supervision batches (typed ``link_neighbor``): ``pairs`` are rows of
    the model's ``out="all"`` output (the types' local ids concatenated in node-type order)."""
    src, _, dst = edge_type

    def convert(batch) -> LossBatch:
        sizes = [batch[t].num_nodes for t in node_types]
        start = dict(zip(node_types, np.cumsum([0] + sizes[:-1]).tolist()))
        store = batch[edge_type]
        shifted = store.edge_label_index + torch.tensor([[start[src]], [start[dst]]])
        return LossBatch({t: batch[t].x for t in node_types}, typed_edges(batch, edge_types),
                         store.edge_label, pairs=shifted, **_typed_ids(batch, node_types))
    return convert
