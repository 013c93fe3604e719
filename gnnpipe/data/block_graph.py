"""The graph of user tables built by blocks: ids joined to dense ids per hash bucket, the edge
policies per block of target rows, and the CSR assembled row block by row block into ``.npy``
memory maps (``gnnpipe.data.dask_prepare`` runs these on Dask workers).

Every function reads and writes its own scratch files and returns small summaries, so no process
holds more than a bucket of ids or a row block of edges:

* ``join_bucket``: the (id, row) pairs of the nodes and the (id, row, end) triples of the edges
  that hash to one bucket; repeated node ids and unknown edge ids are found here (all copies of an
  id meet in its bucket); each edge end's dense id goes out per edge block;
* ``route_edges``: an edge block's rows with both dense ends; self-loops dropped (policy); each
  stored direction sent to the row block of its target;
* ``build_rows``: a row block's incoming edges sorted by (target, source) and deduplicated,
  the local rule of ``gnnpipe.data.graph.normalize_edges`` (an undirected pair is stored in both
  directions, so deduplicating directed edges per target deduplicates the unordered pairs);
* ``place_rows``: the sorted block into ``indptr`` / ``indices`` at its global offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gnnpipe.data.graph import sorted_unique
from gnnpipe.data.table_blocks import DST, SRC, Finding
from gnnpipe.io.blocks import load_arrays, open_memmap, read_parts, save_array, write_part


@dataclass(frozen=True)
class Policy:
    """``dataset.undirected`` / ``dedup`` / ``self_loops == "remove"``."""

    undirected: bool
    dedup: bool
    remove_loops: bool


def join_bucket(bucket: int, folder: str, id_type: pa.DataType, edge_starts: np.ndarray,
                edge_batches: list[tuple], where: tuple[str, str]) -> list[Finding]:
    """Join bucket ``bucket`` of ``folder``; write (row, end, dense) per edge block to
    ``folder/mapped/e<block>/b<bucket>.parquet``. ``edge_starts`` / ``edge_batches``: each edge
    block's first row and local batch; ``where``: the node table and its id column."""
    folder = Path(folder)
    nodes = read_parts(folder / "nodes" / f"b{bucket:06d}",
                       pa.schema([("id", id_type), ("row", pa.int64())]))
    edges = read_parts(folder / "edges" / f"b{bucket:06d}",
                       pa.schema([("id", id_type), ("row", pa.int64()), ("end", pa.int8())]))
    node_file, id_name = where
    node_id, node_row = nodes.column("id").combine_chunks(), nodes.column("row").to_numpy()
    findings = []
    distinct = pc.count_distinct(node_id).as_py() if len(node_id) else 0
    if distinct != len(node_id):  # the repeated id seen first in the file, and the extra rows
        counts = pc.value_counts(node_id)
        repeated = counts.filter(pc.greater(counts.field("counts"), 1)).field("values")
        first_rows = node_row[pc.index_in(repeated, value_set=node_id).to_numpy()]
        pick = int(np.argmin(first_rows))
        findings.append(Finding((2,), int(first_rows[pick]), "repeats",
                                (node_file, id_name, repeated[pick].as_py()),
                                len(node_id) - distinct))
        return findings
    edge_id, edge_row = edges.column("id").combine_chunks(), edges.column("row").to_numpy()
    end = edges.column("end").to_numpy()
    index = pc.index_in(edge_id, value_set=node_id)
    unknown = index.is_null().to_numpy(zero_copy_only=False)
    for side in (SRC, DST):
        missing = unknown & (end == side)
        if missing.any():
            row = int(edge_row[missing].min())
            batch = edge_batches[int(np.searchsorted(edge_starts, row, side="right")) - 1]
            findings.append(Finding((6, batch, side, 2, 1), row, "unknown", (side,)))
    if findings:
        return findings
    dense = node_row[index.to_numpy(zero_copy_only=False).astype(np.int64)]
    block = np.searchsorted(edge_starts, edge_row, side="right") - 1
    order = np.argsort(block, kind="stable")
    block, edge_row, end, dense = block[order], edge_row[order], end[order], dense[order]
    bounds = np.flatnonzero(np.diff(block)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, block.size]):
        if hi > lo:
            write_part(folder / "mapped" / f"e{int(block[lo]):06d}" / f"b{bucket:06d}.parquet",
                       pa.table({"row": edge_row[lo:hi], "end": end[lo:hi],
                                 "dense": dense[lo:hi]}))
    return findings


@dataclass(frozen=True)
class Routed:
    input_edges: int
    loops_removed: int


def route_edges(index: int, start: int, rows: int, folder: str, policy: Policy,
                row_block: int) -> Routed:
    """Edge block ``index`` (rows ``[start, start + rows)``): dense ends from ``mapped/``, the
    self-loop policy, then each stored direction as a (target, source) pair into
    ``rows/r<row block>/e<index>.npy`` (row blocks of ``row_block`` targets)."""
    folder = Path(folder)
    mapped = read_parts(folder / "mapped" / f"e{index:06d}", pa.schema(
        [("row", pa.int64()), ("end", pa.int8()), ("dense", pa.int64())]))
    ends = np.empty((2, rows), dtype=np.int64)
    ends[mapped.column("end").to_numpy(), mapped.column("row").to_numpy() - start] = \
        mapped.column("dense").to_numpy()
    src, dst = ends
    loops = 0
    if policy.remove_loops:
        keep = src != dst
        loops = int(rows - keep.sum())
        src, dst = src[keep], dst[keep]
    if policy.undirected:  # both directions; a kept self-loop once
        proper = src != dst
        src, dst = np.concatenate([src, dst[proper]]), np.concatenate([dst, src[proper]])
    target_block = dst // row_block
    order = np.argsort(target_block, kind="stable")
    pairs = np.stack([dst[order], src[order]], axis=1)
    target_block = target_block[order]
    bounds = np.flatnonzero(np.diff(target_block)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, target_block.size]):
        if hi > lo:
            save_array(folder / "rows" / f"r{int(target_block[lo]):06d}" / f"e{index:06d}.npy",
                       pairs[lo:hi])
    return Routed(rows, loops)


@dataclass(frozen=True)
class RowBlock:
    """A row block's stored edges, its distinct directed edges and self-loops among them (the
    duplicate count of the report) and degree summaries."""

    edges: int
    distinct: int
    distinct_loops: int
    isolated: int
    max_degree: int


def build_rows(block: int, lo: int, hi: int, num_nodes: int, folder: str, dedup: bool
               ) -> RowBlock:
    """Targets ``[lo, hi)``: their incoming edges sorted by (target, source), deduplicated with
    ``dedup``; the sources and the running degree sums go to ``rows/r<block>/``."""
    folder = Path(folder) / "rows" / f"r{block:06d}"
    pairs = load_arrays(folder, np.int64, width=2)
    keys = np.sort((pairs[:, 0] - lo) * num_nodes + pairs[:, 1])
    del pairs
    unique = sorted_unique(keys)
    if dedup:
        keys = unique
    target, source = np.divmod(keys, num_nodes)
    degrees = np.bincount(target, minlength=hi - lo)
    save_array(folder / "sources.npy", source)
    save_array(folder / "ends.npy", np.cumsum(degrees))
    unique_target, unique_source = np.divmod(unique, num_nodes)
    return RowBlock(edges=int(keys.size), distinct=int(unique.size),
                    distinct_loops=int((unique_target + lo == unique_source).sum()),
                    isolated=int((degrees == 0).sum()),
                    max_degree=int(degrees.max()) if degrees.size else 0)


def place_rows(block: int, lo: int, hi: int, offset: int, folder: str, indptr_file: str,
               indices_file: str) -> None:
    """Row block ``block``'s sources into ``indices[offset:]`` and its ends into
    ``indptr[lo + 1:hi + 1]`` (both ``.npy`` memory maps)."""
    folder = Path(folder) / "rows" / f"r{block:06d}"
    sources = np.load(folder / "sources.npy")
    ends = np.load(folder / "ends.npy")
    if sources.size:
        open_memmap(Path(indices_file), writable=True)[offset:offset + sources.size] = sources
    open_memmap(Path(indptr_file), writable=True)[lo + 1:hi + 1] = ends + offset
