"""Mini-batches of a heterogeneous graph for ``gnnpipe.train.fit``: HGT per-type node budgets.

``train.sampler: hgt`` draws, for ``batch_size`` seed nodes of the target type, up to
``num_samples[l]`` nodes of **every** node type at hop ``l`` (``gnnpipe.sampling.hetero``'s
``HeteroBudgetSampler``, PyG's ``HGTLoader`` semantics without torch-sparse) from the train
phase's typed message graph only, through PyG's ``NodeLoader`` (``input_nodes = (target, train
ids)``). Each ``HeteroData`` batch reaches ``fit`` as a ``SeedBatch``: the typed features and
edges of the sampled subgraph and the labels of its target nodes, the ``batch_size`` seeds first,
so ``fit`` computes the loss on the seeds exactly as for homogeneous neighbour batches.
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
    """``NodeLoader`` batches as ``SeedBatch`` es; ``node_sampler`` lets ``fit`` set the epoch."""

    def __init__(self, loader: NodeLoader, target: str):
        self.loader, self.target = loader, target
        self.node_sampler = loader.node_sampler

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            store = batch[self.target]
            yield SeedBatch(batch.x_dict, batch.edge_index_dict, store.y, int(store.batch_size))


def hgt_batches(graph: HeteroGraph, train_graph: dict[EdgeType, Csr], train_nodes: np.ndarray,
                num_samples: tuple[int, ...], batch_size: int, seed: int,
                num_workers: int = 0) -> HgtBatches:
    """Shuffled batches of the target type's ``train_nodes`` (int (T,)) over ``train_graph``."""
    from gnnpipe.sampling.hetero import HeteroBudgetSampler

    data = HeteroData()
    for node_type, x in graph.x.items():
        data[node_type].x = x
    data[graph.target].y = graph.y
    for edge_type, csr in train_graph.items():  # CSR order: the sampler's edge ids as they are
        data[edge_type].edge_index = csr.edge_index()
    sampler = HeteroBudgetSampler({t: graph.num_nodes(t) for t in graph.node_types}, train_graph,
                                  list(num_samples), seed=seed)
    loader = NodeLoader(data, node_sampler=sampler,
                        input_nodes=(graph.target, torch.from_numpy(train_nodes)),
                        batch_size=batch_size, shuffle=True, num_workers=num_workers)
    return HgtBatches(loader, graph.target)
