"""SIGN / SGC-style precomputation: ``X_k = A_hat X_{k-1}`` for k = 1..K, one row block at a time.

``norm``: ``sym`` D^-1/2 (A [+ I]) D^-1/2, ``rw`` D^-1 (A [+ I]), ``ppr`` the APPNP power
iteration ``X_k = (1 - alpha) A_sym X_{k-1} + alpha X_0`` (so X_K is personalized-PageRank
diffusion truncated after K steps). Arithmetic is float32; hops are stored in ``cfg.dtype`` and
each hop is computed from the previous hop *as stored* (bfloat16 hops chain from the rounded
values), so only one hop has to be held at a time. The product is ATen's CSR kernel or, with
``cfg.kernel`` jit (or auto on large graphs), ``gnnpipe.graphops.propagate_kernel``'s prefetching
numba kernel, which gives the same bits faster.

Memory: the normalised graph, X_0, the previous hop (one float32 buffer, reused) and one row
block of the current hop. Where the current hop goes is the caller's ``sink``
(``gnnpipe.io.hop_writers`` streams it to disk and reads it back without mapping it); the
default keeps every yielded hop in memory.
"""

from __future__ import annotations

import importlib
import mmap
import warnings
from typing import Callable, Iterator, Protocol

import torch

from gnnpipe.config import PropagateParams
from gnnpipe.data.graph import Csr

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
INT32_MAX = 2**31 - 1
# ATen CPU builds whose CSR kernel fuses multiply-add as the jit kernel does (same bits); under
# another (e.g. ATEN_CPU_CAPABILITY=default) jit differs in the last bits, so auto keeps aten
FMA_CAPABILITIES = ("AVX2", "AVX512")
# kernel auto: jit from this many gathered operand bytes per hop (non-zeros x F x 4): there a
# hop saves seconds, which pays numba's import and cached-code load (~3-5 s) per process
AUTO_JIT_GATHERED_BYTES = 8 * 2**30


class HopWriter(Protocol):
    """Where one hop goes: ``write`` gets rows ``start:start+len(block)`` as float32."""

    def write(self, start: int, block: torch.Tensor) -> None: ...

    def finish(self) -> torch.Tensor: ...  # the complete hop (N, F), readable for the next hop

    def discard(self) -> None: ...  # called instead of finish when the hop fails


Sink = Callable[[int, tuple[int, int], torch.dtype], HopWriter]  # (hop, shape, dtype) -> writer


class _MemoryWriter:
    def __init__(self, shape: tuple[int, int], dtype: torch.dtype):
        self.out = torch.empty(shape, dtype=dtype)

    def write(self, start: int, block: torch.Tensor) -> None:
        self.out[start:start + block.shape[0]] = block

    def finish(self) -> torch.Tensor:
        return self.out

    def discard(self) -> None:
        self.out = None


def memory_sink(hop: int, shape: tuple[int, int], dtype: torch.dtype) -> HopWriter:
    return _MemoryWriter(shape, dtype)


def _sparse_csr(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor,
                size: tuple[int, int]) -> torch.Tensor:
    with warnings.catch_warnings():  # torch flags sparse CSR as beta on every construction
        warnings.simplefilter("ignore", UserWarning)
        # Invariants hold by construction (validated CSR in, offsets rebuilt here).
        return torch.sparse_csr_tensor(crow, col, values, size=size, check_invariants=False)


def node_scale(degrees: torch.Tensor, cfg: PropagateParams) -> torch.Tensor:
    """The per-node factor of ``A_hat``, float32 (N,), from the in-degrees (N,) of ``A``: with
    ``d`` the row degrees of ``A [+ I]``, ``d^-1/2`` (sym, ppr) or ``d^-1`` (rw), 0 where d = 0."""
    deg = (degrees + (1 if cfg.self_loops else 0)).to(torch.float32)
    if cfg.norm in ("sym", "ppr"):
        return torch.where(deg > 0, deg.rsqrt(), torch.zeros_like(deg))
    return torch.where(deg > 0, 1.0 / deg, torch.zeros_like(deg))


def adjacency_rows(indptr: torch.Tensor, indices: torch.Tensor, start: int,
                   cfg: PropagateParams) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The pattern of rows ``start : start + B`` of ``A_hat`` from the same rows of ``A``:
    ``indptr`` int64 (B + 1,) from 0 and ``indices`` of ``A``'s rows in; CSR offsets int64
    (B + 1,), column ids and the row id of every non-zero, int64 (nnz,), out (with
    ``cfg.self_loops`` a self-loop first in every row). The whole matrix
    (``normalized_adjacency``) and a Dask block task both build rows here."""
    b = indptr.numel() - 1
    counts = indptr[1:] - indptr[:-1]
    ids = torch.arange(start, start + b)
    if cfg.self_loops:  # insert (v, v) first in every row
        counts = counts + 1
        new_indptr = torch.zeros(b + 1, dtype=torch.int64)
        new_indptr[1:] = torch.cumsum(counts, 0)
        new_indices = torch.empty(int(new_indptr[-1]), dtype=torch.int64)
        loop_pos = new_indptr[:-1]  # first slot of each row
        is_loop = torch.zeros(new_indices.numel(), dtype=torch.bool)
        is_loop[loop_pos] = True
        new_indices[loop_pos] = ids
        new_indices[~is_loop] = indices
        indptr, indices = new_indptr, new_indices
    return indptr, indices, torch.repeat_interleave(ids, counts)


def adjacency_values(row_scale: torch.Tensor, column_scale: torch.Tensor,
                     cfg: PropagateParams) -> torch.Tensor:
    """The non-zeros of ``A_hat``, float32 (nnz,), from ``node_scale`` of each one's row and
    column (nnz,): their product (sym, ppr) or the row's (rw)."""
    return row_scale * column_scale if cfg.norm in ("sym", "ppr") else row_scale


def normalized_adjacency(csr: Csr, cfg: PropagateParams) -> torch.Tensor:
    """``A_hat`` as a torch sparse CSR (N, N) float32, int32 indices when they fit.

    ``sym`` and ``ppr``: D^-1/2 (A [+ I]) D^-1/2; ``rw``: D^-1 (A [+ I]) (row-normalised mean
    aggregation). Degrees are row (in-)degrees. Isolated nodes without self-loops get an
    all-zero row.

    int32 halves the memory and index traffic of the matrix; torch's MKL path (plain
    ``torch.sparse.mm``) would otherwise also copy int64 indices to int32 on every call, as
    its MKL uses the 32-bit (LP64) interface.
    """
    n = csr.num_nodes
    indptr, indices, rows = adjacency_rows(csr.indptr, csr.indices, 0, cfg)
    scale = node_scale(csr.degrees(), cfg)
    values = adjacency_values(scale[rows], scale[indices], cfg)
    if indices.numel() <= INT32_MAX and n <= INT32_MAX:
        indptr, indices = indptr.to(torch.int32), indices.to(torch.int32)
    return _sparse_csr(indptr, indices, values, (n, n))


def _row_block(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, start: int,
               stop: int, num_cols: int) -> torch.Tensor:
    """Rows ``start:stop`` of a sparse CSR matrix, as a sparse CSR (stop - start, num_cols).

    Column indices and values are views, not copies."""
    lo, hi = int(crow[start]), int(crow[stop])
    return _sparse_csr(crow[start:stop + 1] - lo, col[lo:hi], values[lo:hi],
                       (stop - start, num_cols))


def hop_traffic_bytes(num_nodes: int, num_edges: int, num_features: int, *, in_itemsize: int = 4,
                      out_itemsize: int = 4, index_itemsize: int | None = None,
                      ppr: bool = False) -> int:
    """Least bytes one hop must move: A_hat (offsets, indices, values) and X_{k-1} read once,
    X_k written once (plus X_0 read once for ppr). Effective GB/s = this / seconds.

    ``num_edges`` counts the non-zeros of A_hat (self-loops included); indices are int32 when
    they fit, as ``normalized_adjacency`` stores them, unless ``index_itemsize`` says otherwise.
    """
    if index_itemsize is None:
        index_itemsize = 4 if max(num_nodes, num_edges) <= INT32_MAX else 8
    graph = (num_nodes + 1) * index_itemsize + num_edges * (index_itemsize + 4)
    rows = num_nodes * num_features
    return graph + rows * (in_itemsize + out_itemsize + (4 if ppr else 0))


def hop_gathered_bytes(num_nodes: int, num_edges: int, num_features: int, *,
                       in_itemsize: int = 4, out_itemsize: int = 4,
                       index_itemsize: int | None = None, ppr: bool = False) -> int:
    """Bytes a CSR kernel touches in one hop: ``hop_traffic_bytes`` with X_{k-1} read as one
    F-wide row per stored non-zero (``num_edges`` rows) instead of once per node.

    Each row read lands at a random address of X_{k-1}; on graphs without locality nearly all
    of them come from DRAM, so this, not ``hop_traffic_bytes``, is what the memory moves.
    (Below ``hop_traffic_bytes`` only when there are fewer non-zeros than nodes.)
    """
    least = hop_traffic_bytes(num_nodes, num_edges, num_features, in_itemsize=in_itemsize,
                              out_itemsize=out_itemsize, index_itemsize=index_itemsize, ppr=ppr)
    return least + (num_edges - num_nodes) * num_features * in_itemsize


def choose_kernel(cfg: PropagateParams, num_edges: int, num_features: int) -> str:
    """``"aten"`` or ``"jit"`` for ``cfg.kernel`` and a matrix of ``num_edges`` non-zeros.

    ``auto`` picks jit when numba imports, a hop gathers at least ``AUTO_JIT_GATHERED_BYTES``
    (numba is not even imported below that) and ATen's kernel runs a ``FMA_CAPABILITIES``
    build, where both give the same bits, so auto changes speed only. ``jit`` without numba is
    a user error.
    """
    if cfg.kernel == "aten" or cfg.kernel == "auto" and (
            num_edges * num_features * 4 < AUTO_JIT_GATHERED_BYTES
            or torch.backends.cpu.get_cpu_capability() not in FMA_CAPABILITIES):
        return "aten"
    missing = jit_missing()
    if missing and cfg.kernel == "jit":
        raise ValueError(f"propagate.kernel=jit needs numba, which does not import ({missing}); "
                         f"pip install numba, or set propagate.kernel: aten")
    return "aten" if missing else "jit"


def jit_missing() -> str:
    """Why the jit kernel cannot load (numba's import error), or "" when it can."""
    try:
        importlib.import_module("gnnpipe.graphops.propagate_kernel")  # imports numba
    except ImportError as error:
        return str(error)
    return ""


def propagate(csr: Csr, x: torch.Tensor, cfg: PropagateParams, *, sink: Sink = memory_sink,
              progress: Callable[[Iterator], Iterator] = iter) -> Iterator[torch.Tensor]:
    """Yield ``X_1 .. X_K``, each (N, F) in ``cfg.dtype``, one hop at a time.

    Each hop is computed in row blocks of ``cfg.block_rows`` (float32 product of a block of
    ``A_hat`` rows with the whole previous hop, by the kernel ``choose_kernel`` picks) and
    handed block by block to ``sink(hop, shape, dtype)``'s writer, whose ``finish()`` result is
    yielded and read for the next hop. ``x`` itself is never modified.
    """
    if x.shape[0] != csr.num_nodes:
        raise ValueError(f"features have {x.shape[0]} rows for a graph of {csr.num_nodes} nodes")
    return propagate_adjacency(normalized_adjacency(csr, cfg), x, cfg, sink=sink,
                               progress=progress)


def hugepage_empty(shape: tuple[int, int]) -> torch.Tensor:
    """An uninitialised float32 tensor on anonymous memory advised for transparent huge pages.

    The product reads one random F-wide row of X_{k-1} per stored edge; with 4 KiB pages a
    512 MiB operand misses the TLB on nearly every row. 2 MiB pages made a 1M-node hop 1.4x
    faster here (``madvise`` mode THP, the Linux default). Plain ``torch.empty`` where the
    platform has no MADV_HUGEPAGE or the tensor is under one huge page.
    """
    nbytes = shape[0] * shape[1] * 4
    if nbytes < 2**21 or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.empty(shape, dtype=torch.float32)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        region.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # THP disabled ("never"): ordinary pages, still correct
        pass
    with warnings.catch_warnings():  # frombuffer warns the buffer is writable: intended
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(region, dtype=torch.float32).view(shape)


def propagate_adjacency(adj: torch.Tensor, x: torch.Tensor, cfg: PropagateParams, *,
                        sink: Sink = memory_sink,
                        progress: Callable[[Iterator], Iterator] = iter) -> Iterator[torch.Tensor]:
    """``propagate`` with ``A_hat`` (sparse CSR (N, N) float32) already built.

    The operand X_{k-1} lives in one reused float32 buffer on huge pages (``hugepage_empty``),
    refilled from each finished hop (``writer.read_into(buffer)`` when the writer has it, e.g.
    read back from disk without mapping the file; else a copy of ``finish()``'s result).
    """
    n = adj.shape[0]
    dtype = DTYPES[cfg.dtype]
    crow, col, values = adj.crow_indices(), adj.col_indices(), adj.values()
    product = ROW_KERNELS[choose_kernel(cfg, values.numel(), x.shape[1])]
    x0 = x if x.dtype == torch.float32 else x.to(torch.float32)
    shape = (n, x.shape[1])
    previous = hugepage_empty(shape)  # (N, F) float32: X_{k-1} for the current hop
    if cfg.hops:
        previous.copy_(x0)
    for hop in progress(range(1, cfg.hops + 1)):
        writer = sink(hop, shape, dtype)
        try:
            for start in range(0, n, cfg.block_rows):
                stop = min(start + cfg.block_rows, n)
                # (B, F) = A_hat[start:stop] (B, N) @ X_{k-1} (N, F)
                block = product(crow, col, values, previous, start, stop)
                if cfg.norm == "ppr":  # (1 - alpha) A_hat X_{k-1} + alpha X_0
                    block.mul_(1.0 - cfg.alpha).add_(x0[start:stop], alpha=cfg.alpha)
                writer.write(start, block)
            current = writer.finish()
        except BaseException:
            writer.discard()
            raise
        yield current
        if hop < cfg.hops:  # X_k becomes the operand (bfloat16 widened as it is stored)
            read_into = getattr(writer, "read_into", None)
            if read_into is not None:
                read_into(previous)
            else:
                previous.copy_(current)
        del current, writer


def _aten_rows(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, x: torch.Tensor,
               start: int, stop: int) -> torch.Tensor:
    """Rows ``start:stop`` of ``A @ x``, (B, F) float32. reduce="sum" picks ATen's own
    vectorized, row-parallel CSR kernel; the plain call goes to MKL's sparse BLAS, 1.15x (1M
    nodes) to 2.3x (20k nodes) slower here (AMD EPYC, docs/performance.md)."""
    block = _row_block(crow, col, values, start, stop, x.shape[0])
    return torch.sparse.mm(block, x, reduce="sum")


def _jit_rows(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, x: torch.Tensor,
              start: int, stop: int) -> torch.Tensor:
    """``_aten_rows``, bit for bit, by the prefetching numba kernel (gnnpipe.graphops.propagate_kernel)."""
    from gnnpipe.graphops.propagate_kernel import spmm_rows

    return spmm_rows(crow, col, values, x, start, stop)


# rows start:stop of A @ x by kernel name (the local engine and the Dask block tasks share them)
ROW_KERNELS = {"aten": _aten_rows, "jit": _jit_rows}
