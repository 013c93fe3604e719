"""``partition.method: lp`` from the split's stored graph, by blocks: no process reads the graph.

1. ``build_block_graph``: tasks copy row blocks of the train phase's message graph (the split's
   CSR files, memory-mapped; a typed split's relations merged into PyG's ``to_homogeneous``
   ids) into the block files of gnnpipe/io/csr_blocks.py, and route every edge to the row block
   of its source, whose task writes that block of the transpose. The files are byte for byte
   those ``write_block_graph`` makes of the whole graph.
2. ``lp_parts`` (gnnpipe/graphops/partition_lp.py) on them.
3. Per row block the cut edges (``cut_block``), per part its shard (``write_shard``: the part's
   rows and its halo read from the block files), written by the task itself as it reads them.

The stage process holds per-node arrays only (the labels and parts, int32 (N,)); a task holds a
block of rows and their edges, or one shard's ring bitmaps (bool (N,) while the rings are found,
then a quarter byte a node) and one read of its rows.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from gnnpipe.config import PartitionParams
from gnnpipe.graphops.partition import check_num_parts, parts_report, shard_rings, shard_rows
from gnnpipe.graphops.partition_lp import lp_parts
from gnnpipe.io.csr_blocks import (StoredGraph, block_folder, gather_in_rows, new_block_arrays,
                                   place_in_rows, place_out_rows, read_in_rows, remove_routed,
                                   row_ranges, save_node_array, stored_block_offsets)
from gnnpipe.io.mapped_rows import gather_npy
from gnnpipe.io.partitions import shard_writer
from gnnpipe.runtime.engine import run_blocks

SCAN_ROWS = 1 << 20  # rows of the parts file scanned at once for a part's nodes


def build_block_graph(folder: Path, graph: StoredGraph, client, block_rows: int) -> None:
    """``graph`` (and its transpose) as the block files of ``folder`` (module doc, step 1), by
    tasks of ``block_rows`` rows on ``client`` (``runtime.engine.run_blocks``; None: here)."""
    bounds = row_ranges(graph.num_nodes, block_rows)
    new_block_arrays(folder, graph)
    base = stored_block_offsets(graph, bounds)
    sent = run_blocks(client, place_in_rows, [
        ((i, lo, hi, int(base[i])),) for i, (lo, hi) in enumerate(bounds)], graph=graph,
        folder=str(folder), out_blocks=bounds)
    per_block = np.sum(sent, axis=0) if sent else np.zeros(0, dtype=np.int64)
    out_base = np.concatenate([[0], np.cumsum(per_block)])
    run_blocks(client, place_out_rows, [
        ((i, lo, hi, int(out_base[i])),) for i, (lo, hi) in enumerate(bounds)],
        folder=str(folder))
    remove_routed(folder)


def cut_block(block: tuple[int, int], folder: str) -> int:
    """Stored edges into rows ``block = (start, stop)`` whose ends lie in different parts
    (``parts.npy`` of ``folder``)."""
    start, stop = block
    indptr, sources = read_in_rows(Path(folder), start, stop)
    parts = Path(folder) / "parts.npy"
    targets = np.repeat(gather_npy(parts, slice(start, stop)), np.diff(indptr))
    return int((gather_npy(parts, sources) != targets).sum())


def owned_mask(folder: Path, part: int, num_nodes: int) -> np.ndarray:
    """Which nodes ``parts.npy`` puts in ``part``: bool (N,), scanned a slice at a time."""
    owned = np.zeros(num_nodes, dtype=bool)
    for lo, hi in row_ranges(num_nodes, SCAN_ROWS):
        owned[lo:hi] = gather_npy(Path(folder) / "parts.npy", slice(lo, hi)) == part
    return owned


def write_shard(part: int, folder: str, out: str, num_parts: int, num_nodes: int,
                halo_hops: int) -> dict:
    """Shard ``part`` from the block files into ``out`` (``part_<part>/``), written as its
    rows are read: the task holds the rings' bitmaps (``graphops.rings``, a fraction of a byte a
    graph node) and one read, never a per-shard-node array or the shard's edges; its sizes
    (``shard_summary``)."""
    rows = lambda ids: gather_in_rows(Path(folder), ids)  # noqa: E731
    rings = shard_rings(rows, owned_mask(Path(folder), part, num_nodes), halo_hops)
    with shard_writer(Path(out), part, num_parts, num_nodes, rings.ptr) as writer:
        for chunk in shard_rows(rows, rings):
            writer.add(*chunk)
    return writer.summary


def lp_stage(graph: StoredGraph, cfg: PartitionParams, seed: int, out: Path, client=None,
             scratch: Path | None = None) -> tuple[np.ndarray, dict, list[dict], float]:
    """The partition stage's lp work on ``graph``: parts int32 (N,), ``parts_report``'s figures,
    every shard written into ``out`` (its ``shard_summary``, part order) and when the parts were
    done (``time.perf_counter``). Tasks run on
    ``client`` (None: in this process), the block files in a temp folder under ``scratch``
    (None: the run's scratch)."""
    n, k = graph.num_nodes, cfg.num_parts
    check_num_parts(n, cfg)
    with block_folder(scratch) as folder:
        build_block_graph(folder, graph, client, cfg.block_rows)
        parts = (np.zeros(n, dtype=np.int32) if k == 1 else lp_parts(folder, cfg, seed, client))
        assigned = time.perf_counter()
        save_node_array(folder, "parts", parts)
        cut = sum(run_blocks(client, cut_block, [(b,) for b in row_ranges(n, cfg.block_rows)],
                             folder=str(folder)))
        summaries = run_blocks(client, write_shard, [(part,) for part in range(k)],
                               folder=str(folder), out=str(out), num_parts=k, num_nodes=n,
                               halo_hops=cfg.halo_hops)
    return parts, parts_report(cut, graph.num_edges, parts, k), summaries, assigned
