"""analyze's curvature sample by blocks: the figures ``gnnpipe.graphops.reach.edge_curvature``
gives of ``symmetric_simple(csr)``, equal to them, with no process holding that simple graph.

The graph lies in block files (gnnpipe/io/csr_blocks.py: the in-edge CSR and its transpose).
Row ``r`` of the simple graph is ``r``'s in- and out-neighbours without ``r``, sorted and
deduplicated, so everything the sample needs comes from row reads:

1. ``simple_degrees``: each row's simple degree, per row block (tasks); the client sums them
   into the simple graph's offsets, int64 (N + 1,), the one per-node array it holds.
2. ``sample_positions`` draws the positions from the same rng with the same call; each maps to
   its row by the offsets and to its column by reading the drawn rows (``simple_rows``), and
   ``sample_pairs`` makes the same pairs of them.
3. ``sample_chunks`` cuts the sample by the same work per edge (the ends' rows and the
   offsets); per chunk a task (``chunk_curvature``) reads the rows of its ends and of their
   neighbours, the only rows ``balanced_forman`` expands, into a CSR over every node whose
   other rows are empty: the same operands in the same order, so the same bits.

Memory: the client holds the offsets (8 B / node) and the rows of the sample's ends; a task one
row block's edges, or one chunk's 2-hop rows (about ``chunk_pairs`` of them) and O(N) offsets.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gnnpipe.config.schema import CurvatureParams
from gnnpipe.data.graph import Csr
from gnnpipe.graphops.reach import (CHUNK_PAIRS, balanced_forman, curvature_report,
                                    sample_chunks, sample_pairs, sample_positions)
from gnnpipe.io.csr_blocks import gather_block_rows, read_block_rows, row_ranges
from gnnpipe.runtime.engine import run_blocks

BLOCK_ROWS = 1 << 16  # rows per simple-degree task


def simple_degrees(start: int, stop: int, folder: str, num_nodes: int) -> np.ndarray:
    """Simple-graph degree of rows ``start..stop`` of the graph in ``folder``: int64
    (stop - start,)."""
    row, neighbour = read_block_rows(Path(folder), start, stop)
    keep = neighbour != row + start
    keys = np.unique(row[keep] * num_nodes + neighbour[keep])
    return np.bincount(keys // num_nodes, minlength=stop - start).astype(np.int64)


def simple_rows(folder: Path, ids: np.ndarray, num_nodes: int) -> Csr:
    """The simple graph's rows ``ids`` (int64, sorted, distinct) as a CSR over every node:
    those rows exact (columns sorted), every other row empty."""
    owner, neighbour = gather_block_rows(Path(folder), ids)
    keep = neighbour != ids[owner]
    owner, columns = np.divmod(np.unique(owner[keep] * num_nodes + neighbour[keep]), num_nodes)
    degree = np.zeros(num_nodes, dtype=np.int64)
    degree[ids] = np.bincount(owner, minlength=ids.size)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    return Csr(torch.from_numpy(indptr), torch.from_numpy(columns))


def chunk_curvature(edges: np.ndarray, folder: str, num_nodes: int) -> np.ndarray:
    """``balanced_forman`` of the chunk ``edges`` int64 (2, S) (rows u, v) over the simple
    graph, from the rows of its ends and their neighbours: float64 (S,)."""
    u, v = edges
    ends = np.union1d(u, v)
    near = np.union1d(ends, simple_rows(Path(folder), ends, num_nodes).indices.numpy())
    return balanced_forman(simple_rows(Path(folder), near, num_nodes), u, v)


def edge_curvature_blocks(client, folder: Path, num_nodes: int, cfg: CurvatureParams,
                          rng: np.random.Generator, block_rows: int = BLOCK_ROWS,
                          chunk_pairs: int = CHUNK_PAIRS) -> dict:
    """``edge_curvature(symmetric_simple(csr), cfg, rng, chunk_pairs)`` of the graph ``csr`` in
    the block files of ``folder`` (module doc); tasks on ``client`` (None: in this process)."""
    if cfg.sample_edges < 1:
        raise ValueError(f"sample_edges={cfg.sample_edges} must be >= 1")
    degree = np.concatenate([np.zeros(0, dtype=np.int64), *run_blocks(
        client, simple_degrees, row_ranges(num_nodes, block_rows), folder=str(folder),
        num_nodes=num_nodes)])
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    pos, exact = sample_positions(int(indptr[-1]), cfg.sample_edges, rng)
    rows = np.searchsorted(indptr, pos, side="right") - 1  # target of each drawn position
    drawn = simple_rows(folder, np.unique(rows), num_nodes)
    cols = drawn.indices.numpy()[drawn.indptr.numpy()[rows] + pos - indptr[rows]]
    del drawn
    u, v = sample_pairs(rows, cols, num_nodes, cfg.sample_edges, exact)
    ends = simple_rows(folder, np.union1d(u, v), num_nodes)
    chunks = sample_chunks(ends, degree, u, v, chunk_pairs)
    del ends
    ric = run_blocks(client, chunk_curvature, [(np.stack([u[c], v[c]]),) for c in chunks],
                     folder=str(folder), num_nodes=num_nodes)
    ric = np.concatenate([np.zeros(0), *ric])
    return curvature_report(u, v, ric, exact, int(indptr[-1]) // 2, cfg)
