"""propagate on ``cluster.engine: dask``: every hop a block SpMM, one task per row block.

The client writes the message graph's in-edge CSR and the per-node factor of ``A_hat``
(``node_scale``) as ``.npy`` files in a scratch folder beside the output, and lays out each hop
file (``HopWriter``, data left empty). A task takes rows ``start:stop``: it maps its slice of the
CSR, builds those rows of ``A_hat`` (``adjacency_rows``, ``adjacency_values``: the local engine's
code), reads only the rows of the previous hop its non-zeros name (in chunks of at most
``GATHER_BYTES``, through ``gnnpipe.io.mapped_rows``, which keeps few file pages resident), sums
each row with the local engine's kernel (``ROW_KERNELS``: the same products in the same stored order, so the
same bits) and writes its rows into the hop file with ``pwrite``. No process holds the graph or a
whole hop; the client holds O(N) (degrees, then the factor) while it writes the scratch files.

The result is byte-identical to ``propagate`` for any number of workers or blocks: every output
row is one row kernel call on the same operands, whatever block it falls in.
"""

from __future__ import annotations

import functools
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch

from gnnpipe.config import PropagateParams
from gnnpipe.data.graph import Csr
from gnnpipe.graphops.propagate import (DTYPES, INT32_MAX, ROW_KERNELS, adjacency_rows,
                                        adjacency_values, node_scale)
from gnnpipe.io.blocks import create_memmap, save_array, write_rows
from gnnpipe.io.mapped_rows import gather_npy
from gnnpipe.io.propagated import HopWriter, RowFile, hop_rows, npy_rows

GATHER_BYTES = 64 << 20  # previous-hop rows gathered at once inside a task (bounds its memory)


@dataclass(frozen=True)
class HopTask:
    """What every block task of one hop reads and writes (small and picklable)."""

    graph: str  # folder: indptr.npy int64 (N + 1,), indices.npy (E,), scale.npy float32 (N,)
    previous: RowFile  # X_{k-1} as stored (X_0 float32 for hop 1)
    x0: RowFile  # X_0 float32 (the ppr teleport term)
    out: RowFile  # X_k, in the hop file being written
    cfg: PropagateParams
    kernel: str  # aten | jit, resolved once by the client


def hop_block(block: tuple[int, int], task: HopTask) -> float:
    """Rows ``block = (start, stop)`` of ``X_k = A_hat X_{k-1}`` (ppr: ``(1 - alpha) A_hat
    X_{k-1} + alpha X_0``) written into ``task.out``; returns this process's peak RSS in MiB."""
    start, stop = block
    folder, cfg = Path(task.graph), task.cfg
    width = task.out.shape[1]
    # row chunks whose non-zeros (self-loops included) gather at most GATHER_BYTES of X_{k-1}
    indptr = gather_npy(folder / "indptr.npy", slice(start, stop + 1)).astype(np.int64)
    nnz = indptr - indptr[0] + np.arange(stop - start + 1) * (1 if cfg.self_loops else 0)
    per_chunk = max(1, GATHER_BYTES // (4 * max(width, 1)))
    cuts = np.searchsorted(nnz, np.arange(per_chunk, int(nnz[-1]), per_chunk), side="right") - 1
    bounds = np.unique(np.concatenate([[0], np.clip(cuts, 1, stop - start), [stop - start]]))
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        _rows(folder, task, start + lo, indptr[lo:hi + 1])
    return peak_rss_mb()


def _rows(folder: Path, task: HopTask, start: int, offsets: np.ndarray) -> None:
    """One chunk of ``hop_block``: rows ``start : start + B`` with CSR ``offsets`` (B + 1,)."""
    cfg = task.cfg
    stop = start + offsets.size - 1
    indptr = torch.from_numpy(offsets)
    lo, hi = int(indptr[0]), int(indptr[-1])
    cols = torch.from_numpy(gather_npy(folder / "indices.npy", slice(lo, hi)).astype(np.int64))
    crow, col, rows = adjacency_rows(indptr - lo, cols, start, cfg)
    # the U distinct columns (sorted) and every non-zero's position among them
    needed, local = (torch.from_numpy(a) for a in np.unique(col.numpy(), return_inverse=True))
    row_scale = torch.from_numpy(gather_npy(folder / "scale.npy", slice(start, stop)))
    column_scale = torch.from_numpy(gather_npy(folder / "scale.npy", needed.numpy()))
    values = adjacency_values(row_scale[rows - start], column_scale[local], cfg)
    operand = task.previous.read(needed.numpy())  # (U, F) float32: the rows of X_{k-1} named
    if local.numel() <= INT32_MAX:  # as normalized_adjacency stores them
        crow, local = crow.to(torch.int32), local.to(torch.int32)
    # (B, F) = A_hat[start:stop] (B, U) @ X_{k-1}[needed] (U, F)
    block = ROW_KERNELS[task.kernel](crow, local, values, operand, 0, stop - start)
    if cfg.norm == "ppr":  # (1 - alpha) A_hat X_{k-1} + alpha X_0, as the local engine
        block.mul_(1.0 - cfg.alpha).add_(task.x0.read(slice(start, stop)), alpha=cfg.alpha)
    task.out.write(start, block)


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


def write_block_inputs(folder: Path, csr: Csr, cfg: PropagateParams) -> None:
    """The scratch files every block task of ``csr`` reads (module doc)."""
    save_array(folder / "indptr.npy", csr.indptr.numpy())
    save_array(folder / "indices.npy", csr.indices.numpy())
    save_array(folder / "scale.npy", node_scale(csr.degrees(), cfg).numpy())


def propagate_blocks(client, csr: Csr, x0: RowFile, out: Path, graph_name: str,
                     scratch: Path, cfg: PropagateParams, kernel: str, *,
                     progress: Callable[[Iterator], Iterator] = iter,
                     peaks: list[float] | None = None) -> Iterator[torch.Tensor]:
    """Yield ``X_1 .. X_K`` as ``propagate`` does (each already in
    ``out/<graph_name>_hop_<k>.pt``, memory-mapped), computed by block tasks on ``client``.

    ``x0``: X_0 float32 (N, F) as a ``RowFile`` every worker can read; ``scratch``: a folder
    every worker sees, for the block inputs. Tasks cover ``cfg.block_rows`` rows each; a failed
    task discards the hop file being written. Each task's worker peak RSS (MiB) is appended to
    ``peaks`` when given.
    """
    n, width = x0.shape
    if n != csr.num_nodes:
        raise ValueError(f"features have {n} rows for a graph of {csr.num_nodes} nodes")
    folder = Path(scratch).resolve() / graph_name  # absolute: workers run in other folders
    write_block_inputs(folder, csr, cfg)
    dtype = DTYPES[cfg.dtype]
    blocks = [(lo, min(n, lo + cfg.block_rows)) for lo in range(0, n, cfg.block_rows)]
    previous = x0
    for hop in progress(range(1, cfg.hops + 1)):
        writer = HopWriter(out, graph_name, hop, (n, width), dtype)
        try:
            task = HopTask(str(folder), previous, x0, writer.rows(), cfg, kernel)
            # the task bound by partial: client.map would treat a large keyword as data to ship
            futures = client.map(functools.partial(hop_block, task=task), blocks, pure=False)
            rss = client.gather(futures)  # waits; raises the first failed task's error
            current = writer.finish()
        except BaseException:
            writer.discard()
            raise
        if peaks is not None:
            peaks.extend(rss)
        yield current
        previous = hop_rows(out, graph_name, hop, (n, width), dtype)


def x0_rows(scratch: Path, x: torch.Tensor, block_rows: int) -> RowFile:
    """X_0 float32 (N, F) written to ``scratch/x0.npy`` row block by row block, as a
    ``RowFile`` (for bfloat16 hops, whose hop-0 file holds the rounded X_0)."""
    path = Path(scratch) / "x0.npy"
    path.parent.mkdir(parents=True, exist_ok=True)
    create_memmap(path, tuple(x.shape), np.float32)
    for lo in range(0, x.shape[0], block_rows):
        write_rows(path, lo, x[lo:lo + block_rows].to(torch.float32).numpy())
    return npy_rows(path)
