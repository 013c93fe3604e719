"""PyG ``NodeLoader`` over gnnpipe's neighbor sampler, configured by ``train.neighbor``."""

from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader

from gnnpipe.config import NeighborParams
from gnnpipe.graph import Csr
from gnnpipe.sampling.neighbor import CsrNeighborSampler


def neighbor_loader(x, y: torch.Tensor, csr: Csr, seeds: torch.Tensor,
                    cfg: NeighborParams, seed: int, *, batch_size: int, num_workers: int = 0,
                    edge_index: torch.Tensor | None = None, shuffle: bool = True,
                    **temporal) -> NodeLoader:
    """Batches of ``batch_size`` seeds with their sampled neighbourhoods in ``csr``.

    ``x`` (N, F) and ``y`` (N,) are gathered per batch by PyG (``batch.x``, ``batch.y``); ``x``
    may instead be a ``gnnpipe.features.ModelFeatures`` (features larger than memory): then only
    the batch's rows ``x[batch.n_id]`` are read from its memory-mapped file, per batch. Only
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
