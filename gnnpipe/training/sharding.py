"""A DDP rank that holds only its partition shards (``train.dist.shard: partition``).

The rank keeps the feature rows, labels and roles of its shards' nodes (owned + halo,
``NodeRows``; no array of every node), trains on
ClusterGCN batches of its own parts (``gnnpipe.sampling.cluster.ShardParts``) and evaluates each
of its shards on the shard's own nodes and halo (``ShardEvaluator``; one forward per shard, or
layer by layer over its target blocks under ``train.inference``): exact full-graph outputs
for the owned nodes when ``halo_hops >= num_layers``, otherwise the edges beyond the halo are
missing (as in ClusterGCN's inference on clusters). Every split node is owned by exactly one
part, so the ranks' owned logits together cover every node once (``shard_part_counts`` checks
the split nodes before training).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from gnnpipe.training.distributed import DistContext
from gnnpipe.io.part_shard import PartShard


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


def shard_part_counts(shards: Sequence[PartShard], roles: np.ndarray, num_parts: int,
                      ctx: DistContext) -> np.ndarray:
    """Train nodes per part (P,) int64, every part's (the ClusterGCN schedule of each rank
    needs all), from the owned nodes of every rank's ``shards`` (``roles``: int8 role codes
    (N,) of the split); a collective under DDP. Raises when the ranks' shards together do not
    own every train, val and test node once."""
    mine = {shard.part: np.bincount(roles[shard.owned().numpy()], minlength=4)[:3]
            for shard in shards}  # (3,) owned train, val, test nodes of the part
    counts = np.zeros((num_parts, 3), dtype=np.int64)
    for held in gather_objects(mine, ctx):
        for part, phases in held.items():
            counts[part] += phases
    if not np.array_equal(counts.sum(axis=0), np.bincount(roles, minlength=4)[:3]):
        raise ValueError("the partition shards do not cover every split node; re-run the "
                         "partition stage on this split")
    return counts[:, 0]


class ShardEvaluator:
    """Logits of the owned nodes of a rank's shards, one forward per shard over its own CSR,
    or layer by layer over target blocks of that CSR where ``cfg`` (TrainParams,
    ``train.inference``) asks for it: ``gnnpipe.training.inference.plan`` per shard, so ``auto``
    goes layer-wise for a shard past the node task's threshold. Both give the same logits (1e-5).
    ``roles`` int8 (L,): the role codes of ``rows`` (``gnnpipe.data.graph.ROLE_CODES``)."""

    def __init__(self, shards: Sequence[PartShard], rows: NodeRows, roles: torch.Tensor,
                 cfg=None):
        from gnnpipe.training.inference import csr_view, plan  # PyG: only where a rank evaluates shards
        from gnnpipe.io.csr_blocks import edge_index_of

        self.rows = rows
        self._inputs = []  # (owned (O,), rows positions (L,), edge_index (2, E) or engine)
        for shard in shards:
            engine = plan(*csr_view(shard.csr), rows.x.shape[1], cfg) if cfg is not None else None
            self._inputs.append((shard.owned(), rows.positions(shard.node_id),
                                 edge_index_of(shard.csr) if engine is None else engine))
        self.layerwise = any(not isinstance(e, torch.Tensor) for _, _, e in self._inputs)
        owned = torch.cat([pos[:o.numel()] for o, pos, _ in self._inputs])  # rows, logits order
        self._targets = rows.y[owned], roles[owned].numpy()

    def targets(self) -> tuple[torch.Tensor, np.ndarray]:
        """Labels int64 (M,) and role codes int8 (M,) of the nodes ``logits`` returns."""
        return self._targets

    @torch.no_grad()
    def logits(self, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """``node_id`` (M,) owned global ids and their ``logits`` (M, C), model in eval mode."""
        from gnnpipe.training.inference import layerwise_logits

        ids, outs = [], []
        for owned, pos, graph in self._inputs:
            x = self.rows.x[pos]  # (L, F): the shard's owned nodes first, then its halo
            # a shard is this rank's alone: its blocks run here, no collective (SINGLE)
            out = model(x, graph) if isinstance(graph, torch.Tensor) else layerwise_logits(
                model, x, graph)
            outs.append(out[:owned.numel()])
            ids.append(owned)
            del x, out
        return torch.cat(ids), torch.cat(outs).float()


def gather_objects(obj: Any, ctx: DistContext) -> list:
    """Every rank's ``obj`` (picklable), in rank order, on every rank."""
    if ctx.world_size == 1:
        return [obj]
    gathered: list = [None] * ctx.world_size
    dist.all_gather_object(gathered, obj)
    return gathered
