"""``PartShard``: one part of a partitioned graph with its halo, the unit a ClusterGCN batch or
a DDP rank reads (written by gnnpipe/graphops/partition.py, stored by gnnpipe/io/partitions.py:
a stored type, so it lives in io, which imports no algorithm package)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gnnpipe.data.graph import Csr


@dataclass(frozen=True)
class PartShard:
    """One part with its halo, in local ids ``0..L-1``.

    ``node_id`` int64 (L,): global id of each local node, ring by ring: the part's own nodes
    first (ascending), then the nodes 1 hop away, ... (each ring ascending).
    ``ring_ptr`` int64 (halo_hops + 2,): ring ``r`` is ``node_id[ring_ptr[r]:ring_ptr[r + 1]]``.
    ``csr``: the subgraph induced on the local nodes (rows = targets, local ids); the rows of
    nodes closer than ``halo_hops`` are complete, so an L-layer GNN with L <= halo_hops gives
    the owned nodes exactly their full-graph output. ``degree`` int64 (L,): in-degree in the
    whole graph, for normalisations that must match the full graph (GCN, SIGN).
    """

    part: int
    num_parts: int
    num_nodes: int  # of the whole graph
    node_id: torch.Tensor
    ring_ptr: torch.Tensor
    csr: Csr
    degree: torch.Tensor

    @property
    def num_owned(self) -> int:
        return int(self.ring_ptr[1])

    @property
    def halo_hops(self) -> int:
        return self.ring_ptr.numel() - 2

    def owned(self) -> torch.Tensor:
        """Global ids of the part's own nodes, int64 (num_owned,), ascending."""
        return self.node_id[:self.num_owned]
