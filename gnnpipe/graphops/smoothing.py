"""Over-smoothing measures of node embeddings ``h`` (M, D) on a message graph: mean pairwise
cosine similarity, Dirichlet energy and its degree-normalised Rayleigh quotient (see the
functions); evaluate reports them for the GNN and the MLP.

Memory: everything runs by blocks of rows (``block_floats`` float64 values of gathered rows at
a time) over the CSR as given (memory-mapped from the split stays mapped): per node only a row
map (4 bytes, int32) and, per embedded node, its in- and out-degree in the graph between
embedded nodes (4 + 4 bytes); no (N, D) float64 frame, no restricted copy of the graph. Sums go
block by block in float64, so a figure can differ from a whole-array sum in its last bits
(rounded to 6 places, ``smoothing_report``'s figures do not move with the block size).
"""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.data.graph import Csr
from gnnpipe.io.csr_blocks import rows_by_edges
from gnnpipe.runtime.progress import progress

# float64 values of gathered embedding rows per block (8 MiB each; a block holds about three
# such arrays): a constant, however many nodes and edges the graph has, that a graph of a
# few hundred thousand nodes already fills
BLOCK_FLOATS = 1 << 20


def mean_cosine_similarity(h: torch.Tensor, block_floats: int = BLOCK_FLOATS) -> float:
    """Mean cosine similarity over all pairs ``i != j`` of rows of ``h`` (M, D), exactly, in O(MD).

    With unit rows ``u_i``: ``sum_{i != j} u_i . u_j = |sum_i u_i|^2 - M``. All-zero rows count as
    unit vectors of similarity 0. Near 1 = every node has the same embedding direction
    (over-smoothed); a trained classifier of C balanced classes sits far lower. Read by blocks of
    ``block_floats`` values (``h`` may be memory-mapped).
    """
    h = _array(h)
    n, width = h.shape[0], h.shape[1]
    if n < 2:
        raise ValueError(f"cosine similarity needs at least 2 embeddings, got {n}")
    total, nonzero = np.zeros(width), 0
    step = max(1, block_floats // max(width, 1))
    for a in range(0, n, step):
        block = h[a:a + step].astype(np.float64, copy=False)  # (B, D)
        norms = np.sqrt(np.square(block).sum(axis=1))  # (B,)
        total += (block / np.maximum(norms, 1e-300)[:, None]).sum(axis=0)
        nonzero += int((norms > 0).sum())
    return (float(np.square(total).sum()) - nonzero) / (n * (n - 1))


def smoothing_report(node_id: torch.Tensor, h: torch.Tensor, csr: Csr,
                     block_floats: int = BLOCK_FLOATS) -> dict:
    """Over-smoothing figures of embeddings ``h`` (M, D) for nodes ``node_id`` (M,) on ``csr``,
    over the stored edges of ``csr`` between two given nodes (each undirected edge twice):

    * ``cosine_similarity``: ``mean_cosine_similarity(h)``;
    * ``dirichlet_energy`` = ``1/M * sum_{j -> i} |h_i - h_j|^2`` (Rusch, Bronstein & Mishra
      2023): tends to 0 as a deep GNN over-smooths, but it also scales with ``|h|``;
    * ``rayleigh_quotient`` = ``tr(h^T L h) / tr(h^T h)`` with ``L = I - D^-1/2 A D^-1/2`` over the
      non-isolated nodes: scale-free, in [0, 2], and 0 also in GCN's limit ``h_i ~ sqrt(d_i)``.
    """
    n = csr.num_nodes
    edge_h, edge_scaled, mass = _edge_sums(h, row_map(node_id, n), csr, block_floats)
    energy = edge_h / max(n, 1)
    energy *= n / node_id.numel()  # the mean over the given nodes only
    rayleigh = 0.5 * edge_scaled / mass if mass > 0 else 0.0
    return {"cosine_similarity": round(mean_cosine_similarity(h, block_floats), 6),
            "dirichlet_energy": round(energy, 6),
            "rayleigh_quotient": round(rayleigh, 6)}


def _array(h) -> np.ndarray:
    """``h`` as a numpy array without a copy (a mapped tensor stays mapped)."""
    return h.detach().numpy() if isinstance(h, torch.Tensor) else np.asarray(h)


def check_node_ids(node_id, num_nodes: int) -> None:
    """Refuse in one line rows ``node_id`` (M,) naming a node outside ``[0, num_nodes)``:
    predictions written for another graph."""
    ids = node_id.numpy() if isinstance(node_id, torch.Tensor) else np.asarray(node_id)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise ValueError(f"predictions hold node ids outside [0, {num_nodes}); they were written "
                         "for another graph: re-run train/baseline")


def row_map(node_id, num_nodes: int) -> np.ndarray:
    """Row of ``node_id`` (M,) (a tensor or an array) that holds each node: int32 (N,) (int64
    past 2^31 rows), -1 where none does; ids outside ``[0, num_nodes)`` are refused
    (``check_node_ids``)."""
    check_node_ids(node_id, num_nodes)
    ids = node_id.numpy() if isinstance(node_id, torch.Tensor) else np.asarray(node_id)
    dtype = np.int32 if ids.size < 2**31 else np.int64
    row = np.full(num_nodes, -1, dtype=dtype)
    row[ids] = np.arange(ids.size, dtype=dtype)
    return row


def _kept_edges(row: np.ndarray, indptr: np.ndarray, indices: np.ndarray, lo: int, hi: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The in-edges of rows ``[lo, hi)`` between two given nodes, in CSR order: the source's row
    of ``h`` and the destination's local index in the block, both (E_k,)."""
    a, b = int(indptr[lo]), int(indptr[hi])
    src = row[indices[a:b]]  # (E_b,) a view of the mapped indices, gathered
    dst = np.repeat(np.arange(hi - lo, dtype=np.int64), np.diff(indptr[lo:hi + 1]))
    kept = (src >= 0) & (row[lo:hi][dst] >= 0)
    return src[kept], dst[kept]


def _edge_sums(h, row: np.ndarray, csr: Csr, block_floats: int) -> tuple[float, float, float]:
    """``sum_{j -> i} |g_i - g_j|^2`` over the stored edges between two nodes that have a row of
    ``h`` (M, D) (``row`` int (N,), -1: none), for ``g = h`` and for ``g_i = h_i / sqrt(d_i)``
    (``d``: in-degree over those edges, at least 1), and the mass ``sum |h_i|^2`` over the
    nodes with ``d_i > 0``. Two passes over row blocks: the degrees, then the sums, by
    ``sum_{j -> i} |g_i - g_j|^2 = sum_i din_i |g_i|^2 + sum_j dout_j |g_j|^2
    - 2 sum_i g_i . (A g)_i`` (one segment sum of the sources' rows per block, in float64)."""
    indptr, indices = csr.indptr.numpy(), csr.indices.numpy()
    h = _array(h)
    m, width = h.shape[0], max(int(h.shape[1]), 1)
    edges = max(1, block_floats // width)
    din = np.zeros(m, dtype=np.int32)  # (M,) kept edges into each given node
    dout = np.zeros(m, dtype=np.int32)  # (M,) kept edges out of it
    blocks = rows_by_edges(indptr, edges, edges)
    bar = progress(None, total=2 * len(blocks), unit=" blocks", desc="over-smoothing")
    for lo, hi in blocks:
        src, dst = _kept_edges(row, indptr, indices, lo, hi)
        given = row[lo:hi] >= 0
        din[row[lo:hi][given]] = np.bincount(dst, minlength=hi - lo)[given]
        np.add.at(dout, src, 1)
        bar.update()
    cross_h = cross_scaled = 0.0
    for lo, hi in blocks:
        src, dst = _kept_edges(row, indptr, indices, lo, hi)
        if src.size:
            starts = np.flatnonzero(np.r_[True, dst[1:] != dst[:-1]])  # first edge of each row
            targets = row[lo:hi][dst[starts]]  # (R,) rows of h of the block's kept destinations
            sources = h[src].astype(np.float64, copy=False)  # (E_k, D)
            sqrt_src = np.sqrt(np.maximum(din[src], 1).astype(np.float64))[:, None]
            sqrt_dst = np.sqrt(np.maximum(din[targets], 1).astype(np.float64))[:, None]
            g = h[targets].astype(np.float64, copy=False)  # (R, D)
            cross_h += float((g * np.add.reduceat(sources, starts, axis=0)).sum())
            sources /= sqrt_src
            cross_scaled += float(((g / sqrt_dst) * np.add.reduceat(sources, starts,
                                                                     axis=0)).sum())
        bar.update()
    bar.close()
    norms_h = norms_scaled = mass = 0.0
    step = max(1, block_floats // width)
    for a in range(0, m, step):
        g = h[a:a + step].astype(np.float64, copy=False)  # (B, D)
        squares = np.square(g).sum(axis=1)  # (B,) |h_i|^2
        degree = din[a:a + step].astype(np.float64)
        both = degree + dout[a:a + step]
        norms_h += float(both @ squares)
        norms_scaled += float(both @ (squares / np.maximum(degree, 1.0)))
        mass += float(squares[degree > 0].sum())
    return (max(norms_h - 2.0 * cross_h, 0.0), max(norms_scaled - 2.0 * cross_scaled, 0.0),
            mass)
