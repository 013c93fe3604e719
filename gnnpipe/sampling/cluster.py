"""ClusterGCN batches (Chiang et al. 2019) from the partition of the train-phase graph.

A batch joins ``parts_per_batch`` parts: its nodes are theirs (part after part, each part's
nodes ascending by global id) and its edges are every train-phase edge among them, so the edges
*between* the batch's parts are restored ("stochastic multiple partitions"); only edges to parts
outside the batch are dropped. The loss covers the batch's train nodes (``batch.train_mask``);
a batch whose parts hold no train node is skipped and counted (``ClusterLoader.skipped``).

``keep_inter_cluster_edges`` (PyG's ``ClusterData`` option, made trainable): the batch also
keeps the in-edges from nodes outside its parts; those sources are appended after the parts'
nodes (ascending) with ``train_mask`` False, so the loss still covers the parts' train nodes only.
(PyG's own class, whose such batches index outside nodes by global id, is
``gnnpipe.sampling.pyg_loaders.ClusterData``.)

Two sources give the same batches: ``GraphParts`` cuts them from the whole train-phase graph
(every rank holds it, memory-mapped), ``ShardParts`` from the rank's own partition shards
(``train.dist.shard: partition``), whose owned rows are complete when ``halo_hops >= 1``.

Each epoch shuffles the parts with torch's global RNG (``fit`` reseeds it per epoch), or
keeps them in part order (``shuffle=False``, as PyG's ``ClusterLoader``). Under DDP
rank ``r`` trains on the parts ``rank_parts`` deals it; the shuffle is one permutation of all
parts (the same on every rank), so every rank can tell how many non-empty batches the others
have, and ranks short of the most repeat their own first batches: every rank takes the same
number of steps (unequal step counts hang DDP).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import torch
from torch_geometric.data import Data

from gnnpipe.data.graph import Csr
from gnnpipe.graphops.partition import rank_parts
from gnnpipe.io.part_shard import PartShard
from gnnpipe.sampling.subgraph import induced_edges, sort_edges, with_inter_edges
from gnnpipe.training.sharding import NodeRows


class GraphParts:
    """Batches cut from the whole train-phase graph ``csr`` with node parts ``parts`` (N,)."""

    def __init__(self, csr: Csr, parts: np.ndarray, num_parts: int,
                 keep_inter_cluster_edges: bool = False):
        if parts.shape != (csr.num_nodes,):
            raise ValueError(f"the partition assigns {parts.size} nodes but the train-phase "
                             f"graph has {csr.num_nodes}; re-run the partition stage")
        self.indptr = np.ascontiguousarray(csr.indptr.numpy(), dtype=np.int64)
        self.indices = np.ascontiguousarray(csr.indices.numpy(), dtype=np.int64)
        order = np.argsort(parts, kind="stable")  # by part, ids ascending within each part
        bounds = np.cumsum(np.bincount(parts, minlength=num_parts))[:-1]
        self.members = np.split(order.astype(np.int64), bounds)  # part -> its node ids
        self._local = np.full(csr.num_nodes, -1, dtype=np.int64)
        self.keep_inter_cluster_edges = keep_inter_cluster_edges

    def batch(self, parts: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """``n_id`` (M,) global ids, ``edge_index`` (2, E) local, sorted by (target, source),
        ``e_id`` (E,) CSR positions and how many of the nodes (first) are the parts'."""
        n_id = np.concatenate([self.members[p] for p in parts])
        if self.keep_inter_cluster_edges:
            return *with_inter_edges(self.indptr, self.indices, n_id, self._local), n_id.size
        edge_index, e_id = induced_edges(self.indptr, self.indices, n_id, self._local)
        return n_id, edge_index, e_id, n_id.size


class ShardParts:
    """The same batches from partition shards: a rank needs only the shards of its own parts."""

    def __init__(self, shards: Sequence[PartShard]):
        self.shards = {shard.part: shard for shard in shards}
        for shard in shards:
            if shard.halo_hops < 1:
                raise ValueError(
                    "train.dist.shard='partition' needs partition.halo_hops >= 1: a shard holds its "
                    "edges from other parts only through its halo")

    def batch(self, parts: Sequence[int]) -> tuple[np.ndarray, np.ndarray, None, int]:
        """As ``GraphParts.batch``, without ``e_id`` (a shard has no whole-graph positions)."""
        owned = [self.shards[p].owned().numpy() for p in parts]
        n_id = np.concatenate(owned)
        order = np.argsort(n_id)
        sorted_ids = n_id[order]
        srcs, dsts, offset = [], [], 0
        for part, own in zip(parts, owned):
            shard = self.shards[part]
            indptr = shard.csr.indptr.numpy()[:own.size + 1]  # owned rows come first: complete
            cols = shard.csr.indices.numpy()[:indptr[-1]]
            src = shard.node_id.numpy()[cols]  # (E_p,) global sources
            at = np.minimum(np.searchsorted(sorted_ids, src), sorted_ids.size - 1)
            found = sorted_ids[at] == src  # the source lies in one of the batch's parts
            srcs.append(order[at[found]])
            dsts.append(np.repeat(np.arange(own.size), np.diff(indptr))[found] + offset)
            offset += own.size
        src, dst = np.concatenate(srcs), np.concatenate(dsts)
        keep = sort_edges(src, dst, n_id.size)
        return n_id, np.stack([src[keep], dst[keep]]), None, n_id.size


def cluster_schedule(train_per_part: np.ndarray, parts_per_batch: int, rank: int,
                     world_size: int, order: np.ndarray) -> tuple[list[list[int]], int]:
    """This rank's batches for one epoch (lists of parts) and how many empty ones it skipped.

    ``train_per_part`` (P,): train nodes in each part; ``order`` (P,): the epoch's permutation
    of all parts, the same on every rank. Rank ``r`` takes its ``rank_parts`` in that order,
    ``parts_per_batch`` at a time, and drops batches without train nodes; then every rank pads
    its list to the longest rank's count by cycling its own batches.
    """
    num_parts = train_per_part.size
    lists = []
    for r in range(world_size):
        mine = order[np.isin(order, rank_parts(num_parts, r, world_size))]
        batches = [mine[i:i + parts_per_batch].tolist() for i in range(0, mine.size,
                                                                       parts_per_batch)]
        lists.append(batches)
    kept = [[b for b in batches if train_per_part[b].sum() > 0] for batches in lists]
    steps = max(len(k) for k in kept)
    mine = kept[rank]
    if not mine:
        raise ValueError(f"rank {rank}'s partition parts {rank_parts(num_parts, rank, world_size)} "
                         "hold no train node; use fewer processes or more partition.num_parts")
    padded = [mine[i % len(mine)] for i in range(steps)]
    return padded, len(lists[rank]) - len(mine)


class ClusterLoader:
    """ClusterGCN batches for one rank as PyG ``Data``; each iteration is one epoch.

    Batches carry ``x`` (B, F), ``y`` (B,), ``edge_index`` (2, E) local, ``n_id`` (B,) global
    ids, ``train_mask`` (B,) bool (the loss nodes), ``parts`` (the parts joined) and, from
    ``GraphParts``, ``e_id`` (E,) (CSR positions: columns of ``csr.edge_index()``, the train
    phase's ``edge_index``) and each of ``edge_attrs`` (name -> (E_all, ...)) gathered at it.
    ``train_mask`` is a bool per row of ``rows`` (L,) (a shard rank's rows; the whole graph's
    (N,) where row ``i`` is node ``i``); ``train_per_part`` (P,) counts train nodes per part (all
    parts, also other ranks'), so the schedule agrees across ranks.
    """

    def __init__(self, source: GraphParts | ShardParts, rows: NodeRows,
                 train_mask: torch.Tensor, train_per_part: np.ndarray,
                 parts_per_batch: int, rank: int = 0, world_size: int = 1, *,
                 shuffle: bool = True, edge_attrs: dict[str, torch.Tensor] | None = None):
        self.source, self.rows = source, rows
        self.shuffle, self.edge_attrs = shuffle, edge_attrs or {}
        self.train_mask = train_mask
        self.train_per_part = np.asarray(train_per_part, dtype=np.int64)
        self.parts_per_batch, self.rank, self.world_size = parts_per_batch, rank, world_size
        self.parts = rank_parts(self.train_per_part.size, rank, world_size)
        cluster_schedule(self.train_per_part, parts_per_batch, rank, world_size,
                         np.arange(self.train_per_part.size))  # fails now if a rank has no seeds
        self.skipped = 0  # empty batches skipped in the last epoch

    def __iter__(self) -> Iterator[Data]:
        num_parts = self.train_per_part.size
        order = torch.randperm(num_parts).numpy() if self.shuffle else np.arange(num_parts)
        batches, self.skipped = cluster_schedule(self.train_per_part, self.parts_per_batch,
                                                 self.rank, self.world_size, order)
        for parts in batches:
            n_id, edge_index, e_id, core = self.source.batch(parts)
            ids = torch.from_numpy(n_id)
            pos = self.rows.positions(ids)
            x, y, train_mask = self.rows.x[pos], self.rows.y[pos], self.train_mask[pos]
            train_mask[core:] = False  # outside sources (keep_inter_cluster_edges): no loss
            batch = Data(x=x, y=y, edge_index=torch.from_numpy(edge_index), n_id=ids,
                         train_mask=train_mask, parts=torch.tensor(parts), num_nodes=n_id.size)
            if e_id is not None:
                batch.e_id = torch.from_numpy(e_id)
                for key, value in self.edge_attrs.items():
                    batch[key] = value[batch.e_id]
            yield batch
