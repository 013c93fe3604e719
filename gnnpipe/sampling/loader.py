"""PyG's ``NodeLoader`` / ``LinkLoader`` over gnnpipe's neighbor sampler: ``neighbor_loader``
configured by ``train.neighbor``, and ``NeighborLoader`` / ``LinkNeighborLoader`` on a
``HeteroData`` (``hetero_neighbor_loader``, ``hetero_link_neighbor_loader``)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import LinkLoader, NodeLoader
from torch_geometric.sampler import NegativeSampling

from gnnpipe.config import NeighborParams
from gnnpipe.data.graph import Csr
from gnnpipe.sampling.neighbor import CsrNeighborSampler, HeteroNeighborSampler


def neighbor_loader(x, y: torch.Tensor, csr: Csr, seeds: torch.Tensor,
                    cfg: NeighborParams, seed: int, *, batch_size: int, num_workers: int = 0,
                    edge_index: torch.Tensor | None = None, shuffle: bool = True,
                    **temporal) -> NodeLoader:
    """Batches of ``batch_size`` seeds with their sampled neighbourhoods in ``csr``.

    ``x`` (N, F) and ``y`` (N,) are gathered per batch by PyG (``batch.x``, ``batch.y``); ``x``
    may instead be a ``gnnpipe.data.features.ModelFeatures`` (features larger than memory): then
    only the batch's rows ``x[batch.n_id]`` are read from its memory-mapped file, per batch. Only
    edges of ``csr`` are ever sampled, so passing a phase's message graph keeps the batch inside
    what that phase may see. ``edge_index`` may pass ``csr.edge_index()`` when the caller already
    holds it (it is only read for its device). ``seed`` fixes the sampler's stream; the order of
    seeds follows torch's global RNG (seed it, e.g. inside ``fit``); ``num_workers`` DataLoader
    worker processes sample the batches. ``temporal``
    (``edge_time`` or ``node_time``, ``temporal_strategy``, and ``input_time`` (len(seeds),)
    for the loader) makes the sampling temporal (``gnnpipe.sampling.temporal``).
    """
    input_time = temporal.pop("input_time", None)
    sampler = CsrNeighborSampler(csr, cfg.num_neighbors, replace=cfg.replace,
                                 subgraph_type=cfg.subgraph_type, disjoint=cfg.disjoint, seed=seed,
                                 **temporal)
    lazy = not isinstance(x, torch.Tensor)  # a ModelFeatures: rows read per batch
    data = Data(**({} if lazy else {"x": x}), y=y,
                edge_index=csr.edge_index() if edge_index is None else edge_index,
                num_nodes=csr.num_nodes)
    return NodeLoader(data, node_sampler=sampler, input_nodes=seeds, input_time=input_time,
                      transform=_GatherRows(x) if lazy else None,
                      batch_size=batch_size, shuffle=shuffle, num_workers=num_workers,
                      # fresh workers every epoch: their streams derive from the epoch-seeded
                      # torch RNG, so a resumed run samples as an uninterrupted one would
                      persistent_workers=False)


class _GatherRows:
    """``batch.x`` = the batch's rows of a ``ModelFeatures``, read when the batch is made (in
    the worker process with ``num_workers``): (num_nodes, F) in its dtype."""

    def __init__(self, features):
        self.features = features

    def __call__(self, batch: Data) -> Data:
        batch.x = self.features[batch.n_id]
        return batch


# ---------------------------------------------------------------------------- typed loaders
def hetero_neighbor_loader(data: HeteroData, num_neighbors, input_nodes, *, batch_size: int = 1,
                           shuffle: bool = False, seed: int | None = None, replace: bool = False,
                           subgraph_type: str = "directional", disjoint: bool = False,
                           time_attr: str | None = None, temporal_strategy: str = "uniform",
                           weight_attr: str | None = None, sample_direction: str = "forward",
                           **kwargs) -> NodeLoader:
    """PyG's ``NeighborLoader(data, num_neighbors, input_nodes=..., ...)`` on this sampler.

    ``input_nodes`` is ``(node_type, ids or bool mask or None)`` or a node type; ``kwargs`` go
    to ``NodeLoader`` (``input_time``, ``num_workers``, ``transform``, ...). Each batch is a
    ``HeteroData`` with ``batch[t].n_id``, ``batch[t].num_sampled_nodes``,
    ``batch[e].num_sampled_edges``, ``batch[e].e_id`` and ``batch[seed_type].batch_size`` seeds
    first in ``batch[seed_type].n_id``.
    """
    sampler = HeteroNeighborSampler.from_hetero_data(
        data, num_neighbors, replace=replace, subgraph_type=subgraph_type, disjoint=disjoint,
        seed=seed, time_attr=time_attr, temporal_strategy=temporal_strategy,
        weight_attr=weight_attr, sample_direction=sample_direction)
    return NodeLoader(data, node_sampler=sampler, input_nodes=input_nodes, batch_size=batch_size,
                      shuffle=shuffle, **kwargs)


def hetero_link_neighbor_loader(data: HeteroData, num_neighbors, edge_label_index, *,
                                edge_label: Optional[Tensor] = None, neg_sampling=None,
                                neg_sampling_ratio: Optional[float] = None,
                                batch_size: int = 1, shuffle: bool = False,
                                seed: int | None = None, replace: bool = False,
                                subgraph_type: str = "directional", disjoint: bool = False,
                                time_attr: str | None = None, temporal_strategy: str = "uniform",
                                weight_attr: str | None = None, sample_direction: str = "forward",
                                **kwargs) -> LinkLoader:
    """PyG's ``LinkNeighborLoader(data, num_neighbors, edge_label_index=(edge_type, eli), ...)``
    on this sampler.

    ``edge_label_index`` is ``(edge_type, (2, P) or None)``; ``neg_sampling`` None | 'binary' |
    'triplet' | a ``NegativeSampling`` (PyG's: uniform, false negatives not filtered). Batches
    hold, on the edge type, ``edge_label_index`` (2, P + neg) and ``edge_label`` (binary,
    negatives labelled 0) or, in the endpoint node types, ``src_index`` / ``dst_pos_index``
    (B,) and ``dst_neg_index`` (B,) or (B, amount) (triplet), as PyG documents.
    ``kwargs`` go to ``LinkLoader`` (``edge_label_time``, ``num_workers``, ...).
    """
    sampler = HeteroNeighborSampler.from_hetero_data(
        data, num_neighbors, replace=replace, subgraph_type=subgraph_type, disjoint=disjoint,
        seed=seed, time_attr=time_attr, temporal_strategy=temporal_strategy,
        weight_attr=weight_attr, sample_direction=sample_direction)
    if isinstance(neg_sampling, str):
        neg_sampling = NegativeSampling(neg_sampling)
    return LinkLoader(data, link_sampler=sampler, edge_label_index=edge_label_index,
                      edge_label=edge_label, neg_sampling=neg_sampling,
                      neg_sampling_ratio=neg_sampling_ratio, batch_size=batch_size,
                      shuffle=shuffle, **kwargs)
