"""SIGN / SGC-style precomputation: ``X_k = A_hat^k X`` for k = 0..K, one row block at a time."""

from __future__ import annotations

import warnings
from typing import Callable, Iterator

import torch

from gnnpipe.config import PropagateParams
from gnnpipe.graph import Csr


def _sparse_csr(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor,
                size: tuple[int, int]) -> torch.Tensor:
    with warnings.catch_warnings():  # torch flags sparse CSR as beta on every construction
        warnings.simplefilter("ignore", UserWarning)
        # Invariants hold by construction (validated CSR in, offsets rebuilt here).
        return torch.sparse_csr_tensor(crow, col, values, size=size, check_invariants=False)


def normalized_adjacency(csr: Csr, cfg: PropagateParams) -> torch.Tensor:
    """``A_hat`` as a torch sparse CSR (N, N) float32.

    ``sym``: D^-1/2 (A [+ I]) D^-1/2; ``rw``: D^-1 (A [+ I]) (row-normalised mean aggregation).
    Isolated nodes without self-loops get an all-zero row.
    """
    n = csr.num_nodes
    indptr, indices = csr.indptr, csr.indices
    if cfg.self_loops:  # insert (v, v) into every row; rows stay sorted enough for spmm
        counts = csr.degrees() + 1
        rows = torch.repeat_interleave(torch.arange(n), counts)
        new_indptr = torch.zeros(n + 1, dtype=torch.int64)
        new_indptr[1:] = torch.cumsum(counts, 0)
        new_indices = torch.empty(int(new_indptr[-1]), dtype=torch.int64)
        loop_pos = new_indptr[:-1]  # first slot of each row
        is_loop = torch.zeros(new_indices.numel(), dtype=torch.bool)
        is_loop[loop_pos] = True
        new_indices[loop_pos] = torch.arange(n)
        new_indices[~is_loop] = indices
        indptr, indices = new_indptr, new_indices
    else:
        rows = csr.targets()
    deg = (indptr[1:] - indptr[:-1]).to(torch.float32)
    if cfg.norm == "sym":
        inv_sqrt = torch.where(deg > 0, deg.rsqrt(), torch.zeros_like(deg))
        values = inv_sqrt[rows] * inv_sqrt[indices]
    else:
        inv = torch.where(deg > 0, 1.0 / deg, torch.zeros_like(deg))
        values = inv[rows]
    return _sparse_csr(indptr, indices, values, (n, n))


def _row_block(adj: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Rows ``start:stop`` of a sparse CSR matrix, as a sparse CSR (stop - start, N)."""
    crow = adj.crow_indices()
    lo, hi = int(crow[start]), int(crow[stop])
    return _sparse_csr(crow[start:stop + 1] - lo, adj.col_indices()[lo:hi], adj.values()[lo:hi],
                       (stop - start, adj.shape[1]))


def propagate(csr: Csr, x: torch.Tensor, cfg: PropagateParams,
              progress: Callable[[Iterator], Iterator] = iter) -> Iterator[torch.Tensor]:
    """Yield ``X_1 .. X_K`` (each float32 (N, F)) one hop at a time.

    Only the previous hop and the one being built are held in memory; each hop is computed in
    blocks of ``cfg.block_rows`` rows so the sparse product's workspace stays small.
    """
    if x.shape[0] != csr.num_nodes:
        raise ValueError(f"features have {x.shape[0]} rows for a graph of {csr.num_nodes} nodes")
    adj = normalized_adjacency(csr, cfg)
    previous = x.to(torch.float32)
    n = csr.num_nodes
    for _ in progress(range(cfg.hops)):
        current = torch.empty_like(previous)
        for start in range(0, n, cfg.block_rows):
            stop = min(start + cfg.block_rows, n)
            current[start:stop] = torch.sparse.mm(_row_block(adj, start, stop), previous)
        yield current
        previous = current
