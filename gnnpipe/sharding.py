"""A DDP rank that holds only its partition shards (``train.dist.shard: partition``).

The rank keeps the feature rows of its shards' nodes (owned + halo, ``NodeRows``), trains on
ClusterGCN batches of its own parts (``gnnpipe.sampling.cluster.ShardParts``) and evaluates each
of its shards on the shard's own nodes and halo (``ShardEvaluator``): exact full-graph outputs
for the owned nodes when ``halo_hops >= num_layers``, otherwise the edges beyond the halo are
missing (as in ClusterGCN's inference on clusters). Every split node is owned by exactly one
part, so the ranks' owned logits together cover every node once (``gather_rows``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch import nn

from gnnpipe.distributed import DistContext
from gnnpipe.partition import PartShard


@dataclass(frozen=True)
class NodeRows:
    """Features ``x`` (L, F) and labels ``y`` (L,) of a node set, looked up by global id.

    ``ids`` int64 (L,): the ascending global ids of the rows held; None when row ``i`` is node
    ``i`` for every node (e.g. the whole memory-mapped graph).
    """

    x: torch.Tensor
    y: torch.Tensor
    ids: torch.Tensor | None = None

    def positions(self, global_ids: torch.Tensor) -> torch.Tensor:
        """Row of each global id, int64 like ``global_ids`` (every id must be held)."""
        if self.ids is None:
            return global_ids
        pos = torch.searchsorted(self.ids, global_ids).clamp_(max=max(self.ids.numel() - 1, 0))
        assert bool((self.ids[pos] == global_ids).all()), "node rows missing for a batch node"
        return pos

    def gather(self, global_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = self.positions(global_ids)
        return self.x[pos], self.y[pos]


def shard_node_ids(shards: Sequence[PartShard]) -> torch.Tensor:
    """Ascending distinct global ids of every node of ``shards`` (owned and halo), int64 (L,)."""
    return torch.unique(torch.cat([shard.node_id for shard in shards]))


class ShardEvaluator:
    """Logits of the owned nodes of a rank's shards, one forward per shard over its own CSR."""

    def __init__(self, shards: Sequence[PartShard], rows: NodeRows):
        self.rows = rows
        self._inputs = [(shard.owned(), rows.positions(shard.node_id), shard.csr.edge_index())
                        for shard in shards]

    @torch.no_grad()
    def logits(self, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """``node_id`` (M,) owned global ids and their ``logits`` (M, C), model in eval mode."""
        ids, outs = [], []
        for owned, pos, edge_index in self._inputs:
            outs.append(model(self.rows.x[pos], edge_index)[:owned.numel()])
            ids.append(owned)
        return torch.cat(ids), torch.cat(outs).float()


def gather_objects(obj: Any, ctx: DistContext) -> list:
    """Every rank's ``obj`` (picklable), in rank order, on every rank."""
    if ctx.world_size == 1:
        return [obj]
    gathered: list = [None] * ctx.world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def gather_rows(node_id: torch.Tensor, values: torch.Tensor,
                ctx: DistContext) -> tuple[torch.Tensor, torch.Tensor]:
    """Every rank's ``node_id`` (M_r,) and ``values`` (M_r, C), concatenated in rank order."""
    if ctx.world_size == 1:
        return node_id, values
    gathered = gather_objects((node_id, values), ctx)
    return torch.cat([g[0] for g in gathered]), torch.cat([g[1] for g in gathered])
