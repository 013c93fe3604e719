"""The partition stage from the split's stored graph, by blocks, for every method.

1. ``io.csr_blocks.build_block_graph``: tasks copy row blocks of the train phase's message
   graph (the split's CSR files, memory-mapped; a typed split's relations merged into PyG's
   ``to_homogeneous`` ids) into block files, and write its transpose by blocks.
2. The parts: ``lp_parts`` (gnnpipe/graphops/partition_lp.py) on them, no process reading the
   graph; metis, random and bfs (``partition.assign_parts``) on their CSR mapped whole in the
   stage process (METIS coarsens the whole symmetric graph by nature).
3. Per row block the cut edges (``cut_block``), per part its shard (``shard_task``: the part's
   rows and its halo read from the block files), written by the task itself as it reads them.

With lp the stage process holds per-node arrays only (the labels and parts, int32 (N,)); a task
holds a block of rows and their edges, or one shard's ring bitmaps (bool (N,) while the rings
are found, then a quarter byte a node) and one read of its rows.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np

from gnnpipe.config import PartitionParams
from gnnpipe.data.graph import Csr
from gnnpipe.graphops.partition import assign_parts, check_num_parts, parts_report, write_shard
from gnnpipe.graphops.partition_lp import lp_parts
from gnnpipe.io.blocks import open_tensor, temp_folder
from gnnpipe.io.csr_blocks import (StoredGraph, build_block_graph, gather_in_rows, read_in_rows,
                                   row_ranges, save_node_array)
from gnnpipe.io.mapped_rows import gather_npy
from gnnpipe.runtime.engine import run_blocks

SCAN_ROWS = 1 << 20  # rows of the parts file scanned at once for a part's nodes


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


def shard_task(part: int, folder: str, out: str, num_parts: int, num_nodes: int,
               halo_hops: int) -> dict:
    """``partition.write_shard`` of ``part``, its rows read from the block files of
    ``folder``."""
    return write_shard(lambda ids: gather_in_rows(Path(folder), ids),
                       owned_mask(Path(folder), part, num_nodes), Path(out), part, num_parts,
                       num_nodes, halo_hops)


def partition_stage(graph: StoredGraph, cfg: PartitionParams, rng: np.random.Generator,
                    out: Path, client=None, scratch: Path | None = None
                    ) -> tuple[np.ndarray, dict, list[dict], float]:
    """The partition stage's work on ``graph``: parts int32 (N,), ``parts_report``'s figures,
    every shard written into ``out`` (its sizes, part order) and when the parts were done
    (``time.perf_counter``). Tasks run on ``client`` (None: in this process), the block files
    in a temp folder under ``scratch`` (None: the run's scratch)."""
    n, k = graph.num_nodes, cfg.num_parts
    check_num_parts(n, cfg)
    with temp_folder(scratch, "partition") as folder:
        # only lp's sweeps read rows both ways: the cut and the shards read in-edges
        build_block_graph(folder, graph, functools.partial(run_blocks, client), cfg.block_rows,
                          transpose=cfg.method == "lp")
        if cfg.method != "lp":  # the in-edge CSR mapped whole, in this process
            csr = Csr(*(open_tensor(folder / f"{name}.npy") for name in ("indptr", "indices")))
            parts = assign_parts(csr, cfg, rng)
        else:
            seed = int(rng.integers(0, 2**31 - 1))
            parts = np.zeros(n, dtype=np.int32) if k == 1 else lp_parts(folder, cfg, seed, client)
        assigned = time.perf_counter()
        save_node_array(folder, "parts", parts)
        cut = sum(run_blocks(client, cut_block, [(b,) for b in row_ranges(n, cfg.block_rows)],
                             folder=str(folder)))
        summaries = run_blocks(client, shard_task, [(part,) for part in range(k)],
                               folder=str(folder), out=str(out), num_parts=k, num_nodes=n,
                               halo_hops=cfg.halo_hops)
    return parts, parts_report(cut, graph.num_edges, parts, k), summaries, assigned
