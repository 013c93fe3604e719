"""PyG 2.7's ``BidirectionalNeighborSampler`` with gnnpipe's CSR sampler doing the hops.

PyG's class samples, at every hop, one hop forward (in-edges) and one hop backward
(out-edges) from the current frontier, merges the two (``SamplerOutput.merge_with``) and takes
the nodes not seen before as the next frontier; the hops are then collated in order. This
subclass keeps PyG's ``_sample`` (so the batch layout is PyG's own: nodes deduplicated in order
of discovery, ``num_sampled_nodes`` with 4 entries per hop and ``num_sampled_edges`` with 2,
``disjoint`` trees keyed by their root) and swaps PyG's two ``NeighborSampler`` objects, which
need pyg-lib or torch-sparse, for two ``CsrNeighborSampler`` (``sample_direction`` forward and
backward) over one CSC, so both directions report edge ids in the same order and
``edge_permutation`` maps them to ``data.edge_index`` order.

``data`` may be PyG's remote backend ``(FeatureStore, GraphStore)`` (its CSC through
``gnnpipe.sampling.store.csc_of_stores``; edge ids the stored ones; no ``weight_attr``, as PyG).
As in PyG: homogeneous graphs only, no temporal sampling, no negative sampling in
``sample_from_edges``, no per-edge-type fan-outs. PyG's merge is Python per node and builds
(nodes x edges) match tables, so batches cost O(n * e) memory: meant for small subgraphs
(retrieval, explanation), not for training on large fan-outs. ``replace=True`` is refused: PyG's
merge drops repeated draws but still slices by the raw counts.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import BidirectionalNeighborSampler as PyGBidirectional
from torch_geometric.sampler.base import NumNeighbors, SubgraphType
from torch_geometric.sampler.utils import to_csc

from gnnpipe.data.graph import Csr
from gnnpipe.sampling.neighbor import CsrNeighborSampler
from gnnpipe.sampling.store import csc_of_stores, stores_are_typed
from gnnpipe.sampling.streams import sampler_seed
from gnnpipe.sampling.subgraph import subgraph_type_name


class BidirectionalNeighborSampler(PyGBidirectional):
    """``torch_geometric.sampler.BidirectionalNeighborSampler`` on gnnpipe's sampler.

    Args as PyG's (``data`` a ``Data``, homogeneous stores or a ``gnnpipe.data.graph.Csr``;
    ``subgraph_type`` PyG's ``SubgraphType`` or its name; ``weight_attr`` names a ``Data`` edge
    attribute), plus ``edge_weight`` (E,) for a ``Csr`` (CSR order) and ``seed``
    (int or ``torch.Generator``; ``None`` draws from torch's RNG) for reproducible streams.
    """

    def __init__(self, data: Data | Csr | tuple, num_neighbors,
                 subgraph_type: SubgraphType | str = "directional",
                 replace: bool = False, disjoint: bool = False,
                 temporal_strategy: str = "uniform", time_attr: Optional[str] = None,
                 weight_attr: Optional[str] = None, is_sorted: bool = False,
                 share_memory: bool = False, directed: bool = True, *,
                 edge_weight: Tensor | None = None, seed: int | torch.Generator | None = None):
        if isinstance(num_neighbors, dict) or (isinstance(num_neighbors, NumNeighbors)
                                               and isinstance(num_neighbors.values, dict)):
            raise RuntimeError("BidirectionalNeighborSampler does not yet support edge "
                               "delimited sampling.")  # PyG's message
        if isinstance(data, HeteroData) or (isinstance(data, (tuple, list))
                                            and stores_are_typed(data)):
            raise NotImplementedError("BidirectionalNeighborSampler does not yet support "
                                      "heterogeneous sampling.")
        if time_attr is not None:
            raise NotImplementedError("BidirectionalNeighborSampler does not yet support "
                                      "temporal sampling.")
        if replace:
            raise ValueError("BidirectionalNeighborSampler with replace=True is not supported: "
                             "PyG's merge miscounts repeated draws")
        subgraph_type = "induced" if not directed else subgraph_type_name(subgraph_type)
        if isinstance(num_neighbors, NumNeighbors):
            num_neighbors = num_neighbors.values
        self.perm: Optional[Tensor] = None
        if isinstance(data, Csr):
            csr = data
        elif isinstance(data, (tuple, list)):  # (FeatureStore, GraphStore)
            if weight_attr is not None:  # as PyG's NeighborSampler, same exception
                raise NotImplementedError("'weight_attr' argument not yet supported within "
                                          "'BidirectionalNeighborSampler' for '(FeatureStore, "
                                          "GraphStore)' inputs; pass edge_weight")
            colptr, row, self.perm = csc_of_stores(data)
            csr = Csr(colptr, row)
        else:  # one CSC for both directions: their edge ids then agree
            colptr, row, self.perm = to_csc(data, device="cpu", is_sorted=is_sorted)
            csr = Csr(colptr, row)
            if weight_attr is not None:
                if weight_attr not in data:
                    raise ValueError(f"weight_attr={weight_attr!r} is not an attribute of the "
                                     "graph")
                edge_weight = data[weight_attr]
                if self.perm is not None:
                    edge_weight = edge_weight[self.perm]
        stream = sampler_seed(seed)
        options = dict(subgraph_type=subgraph_type, disjoint=disjoint, backend="gnnpipe",
                       edge_weight=edge_weight)
        self.forward_sampler = CsrNeighborSampler(csr, num_neighbors, seed=stream,
                                                  sample_direction="forward", **options)
        self.backward_sampler = CsrNeighborSampler(csr, num_neighbors, seed=stream + 1,
                                                   sample_direction="backward", **options)
        self._num_neighbors = NumNeighbors(list(num_neighbors))  # PyG's setter prints a warning
        self.subgraph_type = subgraph_type
        self.num_nodes = csr.num_nodes
        self.node_time = None  # read by PyG's sample_from_edges
        self.keep_orig_edges = False

    @property
    def is_hetero(self) -> bool:
        return False

    @property
    def edge_permutation(self) -> Optional[Tensor]:
        return self.perm

    def set_epoch(self, epoch: int) -> None:
        """Restart both directions' streams at ``(seed, epoch)`` (see ``CsrNeighborSampler``)."""
        self.forward_sampler.set_epoch(epoch)
        self.backward_sampler.set_epoch(epoch)

    def _sample(self, seed: Tensor, seed_time=None, **kwargs):
        # PyG's loop hands its inner samplers ``[k]`` per hop; ours read ``num_neighbors``
        # as a list, so set it back afterwards for the next batch
        hops = list(self._num_neighbors.values)
        try:
            return super()._sample(seed.to(torch.long), seed_time, **kwargs)
        finally:
            self.forward_sampler.num_neighbors = list(hops)
            self.backward_sampler.num_neighbors = list(hops)
