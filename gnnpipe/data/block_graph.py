"""The CSR of user tables built by blocks, after the id join (``gnnpipe.data.block_ids``): the
edge policies per block of target rows and the CSR assembled row block by row block into ``.npy``
memory maps (``gnnpipe.data.dask_prepare`` runs these on Dask workers).

Every function reads and writes its own scratch files and returns small summaries, so no process
holds more than an edge block or a row block of edges:

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

from gnnpipe.data.edges import sorted_unique
from gnnpipe.io.blocks import load_arrays, read_parts, save_array, write_rows


@dataclass(frozen=True)
class Policy:
    """``dataset.undirected`` / ``dedup`` / ``self_loops == "remove"``."""

    undirected: bool
    dedup: bool
    remove_loops: bool


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
        write_rows(Path(indices_file), offset, sources)
    write_rows(Path(indptr_file), lo + 1, ends + offset)
