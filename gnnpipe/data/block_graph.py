"""The CSR of user tables built by blocks, after the id join (``gnnpipe.data.block_ids``): the
edge policies per block of target rows and the CSR assembled row block by row block into ``.npy``
memory maps (``gnnpipe.data.prepare_tables`` runs these in the stage process or on Dask
workers), one relation at a time.

Every function reads and writes its own scratch files and returns small summaries, so no process
holds more than an edge block or a row block of edges:

* ``route_edges``: an edge block's rows with both dense ends; self-loops dropped (policy); each
  stored direction sent to the row block of its target, in one routed file per edge block
  (``gnnpipe.io.blocks.save_routed``), for the relation and, flipped, for its reverse;
* ``build_rows``: a row block's incoming edges sorted by (target, source) and deduplicated,
  the local rule of the whole-graph ``normalize_edges`` (tests/graph_oracle.py; an undirected
  pair is stored in both directions, so deduplicating directed edges per target deduplicates the
  unordered pairs); with edge attributes, each stored edge's input row, chosen and ordered as
  ``normalize_edges`` does;
* ``place_rows``: the sorted block into ``indptr`` / ``indices`` at its global offset, and the
  attributes of its input rows into their CSR-order files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnpipe.io.blocks import load_routed, open_memmap, save_array, save_routed, write_rows


@dataclass(frozen=True)
class Route:
    """Where a relation's edges go: the folder of the stored relation (``reverse``: of the
    flipped one, targets its sources), its ``row_block`` targets per row block and ``blocks``."""

    folder: str
    row_block: int
    blocks: int
    reverse: bool = False


def route_edges(index: int, start: int, rows: int, first_row: int, mapped: str,
                undirected: bool, remove_loops: bool, routes: tuple[Route, ...], total_rows: int,
                with_rows: bool) -> int:
    """Edge block ``index`` (scratch rows ``[start, start + rows)``, rows ``[first_row,
    first_row + rows)`` of its table of ``total_rows``): dense ends from ``mapped``, self-loops
    dropped (``remove_loops``), then each stored direction (both when ``undirected``) as
    (target, source) pairs routed to the row blocks of every route; ``with_rows``: a third
    column ``flipped * total_rows + row``. The self-loops removed."""
    mapped_rows = load_routed(Path(mapped), index, np.int64, 3)
    ends = np.empty((2, rows), dtype=np.int64)
    ends[mapped_rows[:, 1], mapped_rows[:, 0] - start] = mapped_rows[:, 2]
    del mapped_rows
    src, dst = ends
    seq = np.arange(first_row, first_row + rows, dtype=np.int64)
    loops = 0
    if remove_loops:
        keep = src != dst
        loops = int(rows - keep.sum())
        src, dst, seq = src[keep], dst[keep], seq[keep]
    if undirected:  # both directions; a kept self-loop once
        proper = src != dst
        src, dst = np.concatenate([src, dst[proper]]), np.concatenate([dst, src[proper]])
        seq = np.concatenate([seq, seq[proper] + total_rows])
    for route in routes:
        target, source = (src, dst) if route.reverse else (dst, src)
        columns = [target, source] + ([seq] if with_rows else [])
        save_routed(Path(route.folder) / "routed", f"e{index:06d}", np.stack(columns, axis=1),
                    target // route.row_block, route.blocks)
    return loops


@dataclass(frozen=True)
class RowBlock:
    """A row block's stored edges, its distinct directed edges and self-loops among them (the
    duplicate count of the report)."""

    edges: int
    distinct: int
    distinct_loops: int


def build_rows(block: int, lo: int, hi: int, num_src: int, folder: str, dedup: bool,
               total_rows: int = 0, order_file: str = "", with_rows: bool = False) -> RowBlock:
    """Targets ``[lo, hi)``: their incoming edges sorted by (target, source), deduplicated with
    ``dedup``; the sources and the running degree sums go to ``<folder>/rows/r<block>/``. With
    ``with_rows`` (the routes carried rows): the input row of each stored edge too
    (``rows.npy``): dedup keeps the smallest (order, row) (``order_file``: a sortable value per
    input row), copies of one edge follow (order, row) (the local ``normalize_edges`` rule)."""
    width = 3 if with_rows else 2
    num_src = max(num_src, 1)
    pairs = load_routed(Path(folder) / "routed", block, np.int64, width)
    out = Path(folder) / "rows" / f"r{block:06d}"
    keys = (pairs[:, 0] - lo) * num_src + pairs[:, 1]
    # a flipped row carries its row + total_rows
    rows = pairs[:, 2] % max(total_rows, 1) if with_rows else None
    del pairs
    if rows is None:
        keys = np.sort(keys)
    else:
        order = np.asarray(open_memmap(Path(order_file))[rows]) if order_file else \
            np.zeros(rows.size, np.int8)
        by = np.lexsort((rows, order, keys))
        keys, rows = keys[by], rows[by]
    first = np.ones(keys.size, dtype=bool)  # the first of each run of equal keys
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    unique = keys[first]
    if dedup:
        keys, rows = unique, None if rows is None else rows[first]
    target, source = np.divmod(keys, num_src)
    degrees = np.bincount(target, minlength=hi - lo)
    save_array(out / "sources.npy", source)
    save_array(out / "ends.npy", np.cumsum(degrees))
    if rows is not None:
        save_array(out / "rows.npy", rows)
    unique_target, unique_source = np.divmod(unique, num_src)
    return RowBlock(edges=int(keys.size), distinct=int(unique.size),
                    distinct_loops=int((unique_target + lo == unique_source).sum()))


def place_rows(block: int, lo: int, hi: int, offset: int, folder: str, indptr_file: str,
               indices_file: str, gathers: tuple[tuple[str, str], ...] = ()) -> None:
    """Row block ``block``'s sources into ``indices[offset:]`` and its ends into
    ``indptr[lo + 1:hi + 1]`` (both ``.npy`` memory maps); for each ``(values, out)`` of
    ``gathers``, the values of its stored edges' input rows into ``out[offset:]``."""
    folder = Path(folder) / "rows" / f"r{block:06d}"
    sources = np.load(folder / "sources.npy")
    ends = np.load(folder / "ends.npy")
    if sources.size:
        write_rows(Path(indices_file), offset, sources)
        if gathers:
            rows = np.load(folder / "rows.npy")
            for values, out in gathers:
                write_rows(Path(out), offset, np.asarray(open_memmap(Path(values))[rows]))
    write_rows(Path(indptr_file), lo + 1, ends + offset)


def duplicates_removed(rows: int, loops: int, built: list[RowBlock], undirected: bool) -> int:
    """A deduplicated relation's input ``rows`` less its removed self-loops and the distinct
    pairs its row blocks kept (unordered when ``undirected``: both directions were stored)."""
    distinct = sum(b.distinct for b in built)
    distinct_loops = sum(b.distinct_loops for b in built)
    pairs = (distinct - distinct_loops) // 2 + distinct_loops if undirected else distinct
    return rows - loops - pairs
