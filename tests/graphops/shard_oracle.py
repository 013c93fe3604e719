"""A shard held in memory (``PartShard``), the oracle the streamed shards of
gnnpipe/graphops/partition.py (``write_shard``) are checked against, its sizes, and its files
(``write_partition_shard``: the bytes ``gnnpipe.io.partitions.ShardWriter`` streams)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from gnnpipe.data.graph import Csr
from gnnpipe.io.part_shard import PartShard
from gnnpipe.io.partitions import shard_writer
from gnnpipe.graphops.heuristics import rows_of
from gnnpipe.graphops.partition import RowReader, parts_report, shard_rings, shard_rows


def csr_rows(csr: Csr) -> RowReader:
    """``rows(ids)`` of an in-memory CSR: in-degree int64 (m,) of each id and the sources of
    their in-edges, row after row (sum of degrees,)."""
    return functools.partial(rows_of, csr.indptr.numpy(), csr.indices.numpy())


def partition_report(csr: Csr, parts: np.ndarray, num_parts: int) -> dict:
    """``parts_report`` of an in-memory ``csr``: the cut counted over its edges at once."""
    parts_t = torch.from_numpy(parts.astype(np.int64))
    cut = int((parts_t[csr.indices] != parts_t[csr.targets()]).sum())
    return parts_report(cut, csr.num_edges, parts, num_parts)


def shard_of(rows: RowReader, owned: np.ndarray, part: int, num_parts: int, num_nodes: int,
             halo_hops: int) -> PartShard:
    """The shard of ``part`` in memory from its ``owned`` nodes (bool (N,), used as scratch):
    their ``halo_hops``-hop in-neighbours and the induced edges, every row read through ``rows``
    (``csr_rows``, or a reader of memory-mapped block files) ``SHARD_ROWS`` at a time
    (``shard_rings``, ``shard_rows``; ``write_shard`` streams them to disk instead)."""
    rings = shard_rings(rows, owned, halo_hops)
    none = np.zeros(0, dtype=np.int64)  # an empty part has no rows
    node_id, degree, counts, kept = ([none] for _ in range(4))
    for row_ids, row_degree, row_counts, row_kept in shard_rows(rows, rings):
        node_id.append(row_ids)
        degree.append(row_degree)
        counts.append(row_counts)
        kept.append(row_kept)
    node_id = np.concatenate(node_id)
    local_indptr = np.zeros(node_id.size + 1, dtype=np.int64)
    np.cumsum(np.concatenate(counts), out=local_indptr[1:])
    return PartShard(part=part, num_parts=num_parts, num_nodes=num_nodes,
                     node_id=torch.from_numpy(node_id),
                     ring_ptr=torch.from_numpy(rings.ptr.copy()),
                     csr=Csr(torch.from_numpy(local_indptr),
                             torch.from_numpy(np.concatenate(kept))),
                     degree=torch.from_numpy(np.concatenate(degree).astype(np.int64)))


def build_shard(csr: Csr, parts: np.ndarray, part: int, num_parts: int,
                halo_hops: int) -> PartShard:
    """The shard of ``part``: its nodes, their ``halo_hops``-hop in-neighbours, induced edges."""
    return shard_of(csr_rows(csr), parts == part, part, num_parts, csr.num_nodes, halo_hops)


def build_shards(csr: Csr, parts: np.ndarray, num_parts: int,
                 halo_hops: int) -> Iterator[PartShard]:
    """Shards of parts ``0..num_parts-1``, one at a time (so only one is in memory)."""
    for part in range(num_parts):
        yield build_shard(csr, parts, part, num_parts, halo_hops)


def shard_summary(shard: PartShard) -> dict:
    """Sizes of one shard, for ``metrics/partition.json``."""
    return {"owned": shard.num_owned, "halo": int(shard.node_id.numel()) - shard.num_owned,
            "edges": shard.csr.num_edges}


def write_partition_shard(out: Path, shard: PartShard) -> None:
    """``shard`` (in memory) into ``out/part_<k>/``: the bytes ``ShardWriter`` streams."""
    indptr = shard.csr.indptr.numpy()
    with shard_writer(out, shard.part, shard.num_parts, shard.num_nodes,
                      shard.ring_ptr.numpy()) as writer:
        writer.add(shard.node_id.numpy(), shard.degree.numpy(), np.diff(indptr),
                   shard.csr.indices.numpy())
