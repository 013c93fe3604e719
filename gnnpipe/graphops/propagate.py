"""SIGN / SGC-style precomputation: ``X_k = A_hat X_{k-1}`` for k = 1..K, by row-block tasks.

``norm``: ``sym`` D^-1/2 (A [+ I]) D^-1/2, ``rw`` D^-1 (A [+ I]), ``ppr`` the APPNP power
iteration ``X_k = (1 - alpha) A_sym X_{k-1} + alpha X_0`` (so X_K is personalized-PageRank
diffusion truncated after K steps). Arithmetic is float32; hops are stored in ``cfg.dtype`` and
each hop is computed from the previous hop *as stored* (bfloat16 hops chain from the rounded
values), so only one hop has to be held at a time.

One algorithm on both engines (``gnnpipe.runtime.engine.run_blocks``: in this process without a
client, on Dask workers with one). Per ``cfg.block_rows`` rows, ``adjacency_block`` writes those
rows of ``A_hat`` (column ids, values) once; then every hop, ``hop_block`` multiplies them with
the rows of X_{k-1} they name and writes the block's rows of X_k into the hop's writer. The
product is ATen's CSR kernel or, with ``cfg.kernel`` jit (or auto on large graphs),
``gnnpipe.graphops.propagate_kernel``'s prefetching numba kernel: the same bits. Each output row
is one kernel row sum over the same operands in the same stored order, whatever block or chunk
it falls in, so the hops are byte-identical for any block size, engine and number of workers.

Where the arrays live is all that differs. In this process (``client`` None): the CSR and
``A_hat`` as arrays in memory, X_{k-1} in one reused float32 buffer on huge pages, X_0 read in
place (no scratch copy). On Dask: ``.npy`` files in ``scratch`` that every worker sees, and
X_{k-1} read from the previous hop file, only the rows a chunk's non-zeros name (at most
``GATHER_BYTES`` at once, ``gnnpipe.io.mapped_rows``), so no process holds the graph or a hop.
"""

from __future__ import annotations

import dataclasses
import importlib
import mmap
import resource
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol

import numpy as np
import torch

from gnnpipe.config import PropagateParams
from gnnpipe.data.graph import Csr
from gnnpipe.io.blocks import create_memmap, save_array, write_rows
from gnnpipe.io.csr_blocks import row_ranges, rows_by_edges
from gnnpipe.io.mapped_rows import gather_npy
from gnnpipe.io.propagated import RowFile, npy_rows
from gnnpipe.runtime.engine import run_blocks

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
INT32_MAX = 2**31 - 1
# ATen CPU builds whose CSR kernel fuses multiply-add as the jit kernel does (same bits); under
# another (e.g. ATEN_CPU_CAPABILITY=default) jit differs in the last bits, so auto keeps aten
FMA_CAPABILITIES = ("AVX2", "AVX512")
# kernel auto: jit from this many gathered operand bytes per hop (non-zeros x F x 4): there a
# hop saves seconds, which pays numba's import and cached-code load (~3-5 s) per process
AUTO_JIT_GATHERED_BYTES = 8 * 2**30
GATHER_BYTES = 64 << 20  # previous-hop rows a task reads from a file at once (bounds its memory)


class HopWriter(Protocol):
    """Where one hop goes: ``write`` gets rows ``start:start+len(block)`` as float32."""

    def write(self, start: int, block: torch.Tensor) -> None: ...

    def finish(self) -> torch.Tensor: ...  # the complete hop (N, F), readable for the next hop

    def discard(self) -> None: ...  # called instead of finish when the hop fails


Sink = Callable[[int, tuple[int, int], torch.dtype], HopWriter]  # (hop, shape, dtype) -> writer


class MemoryWriter:
    """The default ``Sink``: every hop in a tensor of this process."""

    def __init__(self, hop: int, shape: tuple[int, int], dtype: torch.dtype):
        self.out = torch.empty(shape, dtype=dtype)

    def write(self, start: int, block: torch.Tensor) -> None:
        self.out[start:start + block.shape[0]] = block

    def finish(self) -> torch.Tensor:
        return self.out

    def discard(self) -> None:
        self.out = None


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


def adjacency_rows(indptr: np.ndarray, indices: np.ndarray, start: int,
                   cfg: PropagateParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pattern of rows ``start : start + B`` of ``A_hat`` from the same rows of ``A``:
    ``indptr`` int64 (B + 1,) from 0 and ``indices`` (nnz,) of ``A``'s rows in; CSR offsets
    int64 (B + 1,), column ids int64 (nnz',) and each row's non-zero count (B,) out (with
    ``cfg.self_loops`` a self-loop first in every row)."""
    ids = np.arange(start, start + indptr.size - 1)
    if cfg.self_loops:  # insert (v, v) first in every row
        indices = np.insert(indices, indptr[:-1], ids)
        indptr = indptr + np.arange(indptr.size)
    return indptr, indices.astype(np.int64, copy=False), np.diff(indptr)


def adjacency_values(row_scale: np.ndarray, counts: np.ndarray, column_scale: np.ndarray,
                     cfg: PropagateParams) -> np.ndarray:
    """The non-zeros of ``A_hat``, float32 (nnz,), from ``node_scale`` of the B rows (B,), the
    rows' non-zero counts (B,) and ``node_scale`` of each non-zero's column (nnz,): the row's
    factor times the column's (sym, ppr) or the row's (rw)."""
    per_nonzero = np.repeat(row_scale, counts)
    return per_nonzero * column_scale if cfg.norm in ("sym", "ppr") else per_nonzero


def hop_traffic_bytes(num_nodes: int, num_edges: int, num_features: int, *, in_itemsize: int = 4,
                      out_itemsize: int = 4, index_itemsize: int | None = None,
                      ppr: bool = False) -> int:
    """Least bytes one hop must move: A_hat (offsets, indices, values) and X_{k-1} read once,
    X_k written once (plus X_0 read once for ppr). Effective GB/s = this / seconds.

    ``num_edges`` counts the non-zeros of A_hat (self-loops included); indices are int32 when
    they fit, as ``adjacency_block`` stores them, unless ``index_itemsize`` says otherwise.
    """
    if index_itemsize is None:
        index_itemsize = 4 if max(num_nodes, num_edges) <= INT32_MAX else 8
    graph = (num_nodes + 1) * index_itemsize + num_edges * (index_itemsize + 4)
    rows = num_nodes * num_features
    return graph + rows * (in_itemsize + out_itemsize + (4 if ppr else 0))


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


def _aten_rows(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, x: torch.Tensor,
               start: int, stop: int) -> torch.Tensor:
    """Rows ``start:stop`` of ``A @ x``, (B, F) float32. reduce="sum" picks ATen's own
    vectorized, row-parallel CSR kernel; the plain call goes to MKL's sparse BLAS, 1.15x (1M
    nodes) to 2.3x (20k nodes) slower here (AMD EPYC, docs/performance.md). The block's column
    ids and values are views, not copies."""
    lo, hi = int(crow[start]), int(crow[stop])
    block = _sparse_csr(crow[start:stop + 1] - lo, col[lo:hi], values[lo:hi],
                        (stop - start, x.shape[0]))
    return torch.sparse.mm(block, x, reduce="sum")


def _jit_rows(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, x: torch.Tensor,
              start: int, stop: int) -> torch.Tensor:
    """``_aten_rows``, bit for bit, by the prefetching numba kernel (gnnpipe.graphops.propagate_kernel)."""
    from gnnpipe.graphops.propagate_kernel import spmm_rows

    return spmm_rows(crow, col, values, x, start, stop)


# rows start:stop of A @ x by kernel name (``hop_block`` on either engine)
ROW_KERNELS = {"aten": _aten_rows, "jit": _jit_rows}


def peak_rss_mb() -> float:
    """This process image's resident high-water mark, MiB: ``VmHWM`` where /proc has it. (A
    spawned worker's ``ru_maxrss`` also holds the RSS of the process it was forked from, the
    stage process, before ``exec``.)"""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


Array = np.ndarray | str  # in this process's memory, or an .npy file every worker sees


def _take(array: Array, rows: slice | np.ndarray) -> np.ndarray:
    """``array[rows]``: a view or gather in memory; from a file by ``gather_npy`` (no pages
    kept resident)."""
    return array[rows] if isinstance(array, np.ndarray) else gather_npy(array, rows)


def _put(array: Array, start: int, values: np.ndarray) -> None:
    """``array[start : start + len(values)] = values`` (cast to the array's dtype)."""
    if isinstance(array, np.ndarray):
        array[start:start + values.size] = values
    elif values.size:
        write_rows(Path(array), start, values)


@dataclass(frozen=True)
class Adjacency:
    """``A`` as given (``indptr`` int64 (N + 1,), ``indices`` (E,)), ``scale`` float32 (N,)
    (``node_scale``) and the non-zeros of ``A_hat`` that ``adjacency_block`` fills: ``col``
    (nnz,) int32 (int64 past 2^31 - 1 nodes) and ``values`` float32 (nnz,). Row ``r`` of
    ``A_hat`` starts at ``indptr[r] + r`` with self-loops, ``indptr[r]`` without."""

    indptr: Array
    indices: Array
    scale: Array
    col: Array
    values: Array


def adjacency_block(start: int, stop: int, *, adjacency: Adjacency,
                    cfg: PropagateParams) -> float:
    """Rows ``start:stop`` of ``A_hat`` into ``adjacency.col`` and ``adjacency.values``;
    returns this process's peak RSS, MiB."""
    a = adjacency
    indptr = _take(a.indptr, slice(start, stop + 1)).astype(np.int64)
    lo, hi = int(indptr[0]), int(indptr[-1])
    _, col, counts = adjacency_rows(indptr - lo, _take(a.indices, slice(lo, hi)), start, cfg)
    values = adjacency_values(_take(a.scale, slice(start, stop)), counts,
                              _take(a.scale, col), cfg)
    first = lo + (start if cfg.self_loops else 0)  # A_hat's offset of row start
    _put(a.col, first, col)
    _put(a.values, first, values)
    return peak_rss_mb()


@dataclass(frozen=True)
class HopTask:
    """What every block task of one hop reads and writes: tensors in this process, files
    (``RowFile``) on workers."""

    adjacency: Adjacency
    previous: torch.Tensor | RowFile  # X_{k-1} (N, F): float32 in memory, or as stored
    x0: torch.Tensor | RowFile  # X_0 float32 (N, F): the ppr teleport term
    out: object  # X_k: ``write(start, block)`` (a hop writer, or its RowFile)
    cfg: PropagateParams
    kernel: str  # aten | jit, resolved once


def hop_block(start: int, stop: int, *, task: HopTask) -> float:
    """Rows ``start:stop`` of ``X_k = A_hat X_{k-1}`` (ppr: ``(1 - alpha) A_hat X_{k-1} +
    alpha X_0``) written into ``task.out``; returns this process's peak RSS, MiB."""
    a, cfg = task.adjacency, task.cfg
    offsets = _take(a.indptr, slice(start, stop + 1)).astype(np.int64)  # A_hat's, absolute
    if cfg.self_loops:
        offsets += np.arange(start, stop + 1)
    for lo, hi in _chunks(offsets - offsets[0], task.previous):
        first, last = int(offsets[lo]), int(offsets[hi])
        col = torch.from_numpy(_take(a.col, slice(first, last)))
        values = torch.from_numpy(_take(a.values, slice(first, last)))
        operand, col = _operand(task.previous, col)
        if last - first > INT32_MAX:  # offsets past int32: the kernel wants one index dtype
            col = col.to(torch.int64)
        crow = torch.from_numpy(offsets[lo:hi + 1] - first).to(col.dtype)
        # (B, F) = A_hat[rows] (B, U) @ X_{k-1}[U rows] (U, F)
        block = ROW_KERNELS[task.kernel](crow, col, values, operand, 0, hi - lo)
        if cfg.norm == "ppr":  # (1 - alpha) A_hat X_{k-1} + alpha X_0
            x0 = task.x0  # rows start + lo : start + hi, float32
            x0 = (x0[start + lo:start + hi] if isinstance(x0, torch.Tensor)
                  else x0.read(slice(start + lo, start + hi)))
            block.mul_(1.0 - cfg.alpha).add_(x0, alpha=cfg.alpha)
        task.out.write(start + lo, block)
    return peak_rss_mb()


def _chunks(nnz: np.ndarray, previous: torch.Tensor | RowFile) -> list[tuple[int, int]]:
    """Row ranges of a block (``nnz``: its A_hat offsets from 0, (B + 1,)) whose non-zeros read
    at most ``GATHER_BYTES`` of a stored X_{k-1} (a row above it alone: ``rows_by_edges``); one
    range when X_{k-1} is in memory."""
    if isinstance(previous, torch.Tensor):
        return [(0, nnz.size - 1)]
    return rows_by_edges(nnz, max(1, GATHER_BYTES // (4 * max(previous.shape[1], 1))))


def _operand(previous: torch.Tensor | RowFile,
             col: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """X_{k-1} for column ids ``col``: in memory, itself and ``col``; stored, the U distinct
    rows named (sorted, float32 (U, F)) and each non-zero's position among them."""
    if isinstance(previous, torch.Tensor):
        return previous, col
    needed, local = np.unique(col.numpy(), return_inverse=True)
    return previous.read(needed), torch.from_numpy(local.astype(col.numpy().dtype))


def propagate(csr: Csr, x: torch.Tensor, cfg: PropagateParams, *, client=None,
              sink: Sink = MemoryWriter, scratch: Path | None = None,
              stored_x0: RowFile | None = None,
              progress: Callable[[Iterator], Iterator] = iter,
              peaks: list[float] | None = None) -> Iterator[torch.Tensor]:
    """``X_1 .. X_K``, each (N, F) in ``cfg.dtype``, one hop at a time (``A_hat`` is built
    before this returns, the hops as they are iterated): each is
    ``sink(hop, shape, dtype)``'s writer's ``finish()``, filled by block tasks of
    ``cfg.block_rows`` rows on ``client`` (None: in this process). ``x`` (N, F) is not modified.

    With a client, ``sink`` must give ``gnnpipe.io.HopWriter`` s (files the workers write) and
    ``scratch`` a folder every worker sees, for the graph's arrays and, unless ``stored_x0``
    gives X_0 float32 as stored (hop 0 of float32 hops), X_0. Each task's peak RSS (MiB) is
    appended to ``peaks`` when given. A failed task discards the hop being written.
    """
    n, width = x.shape
    if n != csr.num_nodes:
        raise ValueError(f"features have {n} rows for a graph of {csr.num_nodes} nodes")
    nnz = csr.num_edges + (n if cfg.self_loops else 0)
    kernel = choose_kernel(cfg, nnz, width)
    blocks = row_ranges(n, cfg.block_rows)
    x0 = x if x.dtype == torch.float32 else x.to(torch.float32)  # (N, F)
    if client is None:  # arrays in memory: the graph's own, A_hat, the operand X_{k-1}
        adjacency = Adjacency(csr.indptr.numpy(), csr.indices.numpy(),
                              node_scale(csr.degrees(), cfg).numpy(),
                              np.empty(nnz, _index_dtype(n)), np.empty(nnz, np.float32))
        previous = hugepage_empty((n, width))  # (N, F) float32, refilled every hop
        if cfg.hops:
            previous.copy_(x0)
        x0_rows = x0
    else:
        folder = Path(scratch).resolve()  # absolute: workers run in other folders
        adjacency = _adjacency_files(folder, csr, cfg, nnz)
        x0_rows = stored_x0 if stored_x0 is not None else _x0_file(folder, x0, cfg.block_rows)
        previous = x0_rows
    ran = run_blocks(client, adjacency_block, blocks, adjacency=adjacency, cfg=cfg)
    return _hops(client, sink, blocks, HopTask(adjacency, previous, x0_rows, None, cfg, kernel),
                 progress, ran, peaks)


def _hops(client, sink: Sink, blocks: list[tuple[int, int]], task: HopTask,
          progress: Callable[[Iterator], Iterator], ran: list[float],
          peaks: list[float] | None) -> Iterator[torch.Tensor]:
    """``propagate``'s hops, once ``A_hat`` is written (``task`` without its ``out``)."""
    cfg, previous = task.cfg, task.previous
    shape, dtype = tuple(previous.shape), DTYPES[cfg.dtype]
    for hop in progress(range(1, cfg.hops + 1)):
        writer = sink(hop, shape, dtype)
        try:
            out = writer if client is None else writer.rows()
            ran += run_blocks(client, hop_block, blocks,
                              task=dataclasses.replace(task, previous=previous, out=out))
            current = writer.finish()
        except BaseException:
            writer.discard()
            raise
        yield current
        if hop < cfg.hops:  # X_k becomes the operand (bfloat16 widened as it is stored)
            if client is not None:
                previous = writer.finished_rows()
            elif hasattr(writer, "read_into"):  # read back without mapping the file
                writer.read_into(previous)
            else:
                previous.copy_(current)
        del current, writer
    if peaks is not None:
        peaks.extend(ran)


def _index_dtype(num_nodes: int) -> type:
    """Column ids of ``A_hat``: int32 (half the memory and index traffic) where they fit."""
    return np.int32 if num_nodes <= INT32_MAX else np.int64


def _adjacency_files(folder: Path, csr: Csr, cfg: PropagateParams, nnz: int) -> Adjacency:
    """The ``Adjacency`` as ``.npy`` files in ``folder`` (A and its factor written here, A_hat's
    laid out for the tasks)."""
    names = ("indptr", "indices", "scale", "col", "values")
    paths = [str(folder / f"{name}.npy") for name in names]
    save_array(folder / "indptr.npy", csr.indptr.numpy())
    save_array(folder / "indices.npy", csr.indices.numpy())
    save_array(folder / "scale.npy", node_scale(csr.degrees(), cfg).numpy())
    create_memmap(folder / "col.npy", (nnz,), _index_dtype(csr.num_nodes))
    create_memmap(folder / "values.npy", (nnz,), np.float32)
    return Adjacency(*paths)


def _x0_file(folder: Path, x0: torch.Tensor, block_rows: int) -> RowFile:
    """X_0 float32 (N, F) written to ``folder/x0.npy`` row block by row block, for workers
    (bfloat16 hops store X_0 rounded)."""
    path = folder / "x0.npy"
    create_memmap(path, tuple(x0.shape), np.float32)
    for lo in range(0, x0.shape[0], block_rows):
        write_rows(path, lo, x0[lo:lo + block_rows].numpy())
    return npy_rows(path)
