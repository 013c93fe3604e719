"""Rows of an array stored raw in a file, gathered through a map whose pages are dropped as it goes.

A block task of the Dask engine reads scattered rows of a previous hop or of a per-node array.
Pages a process has mapped and touched count in its resident set until unmapped, and a fault
maps neighbouring pages too (the kernel's fault-around), so one gather of scattered rows leaves
most of the file resident: a worker's peak memory would grow with the graph. Here the rows are
copied ``RELEASE_ROWS`` at a time (a slice: ``RELEASE_BYTES``) and the map's pages dropped after
each batch (``madvise(MADV_DONTNEED)``; they stay in the OS page cache), so the resident set
holds the copied rows and one batch's pages (measured: 85 MiB over a worker's base for a 65k-row
block of a 1M-node hop, 383 MiB without the drops).
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

RELEASE_ROWS = 256  # scattered rows copied between two drops of the map's pages
RELEASE_BYTES = 16 << 20  # a slice's bytes copied between two drops


def gather(path: str | Path, offset: int, dtype, shape: tuple[int, ...],
           rows: np.ndarray | slice) -> np.ndarray:
    """``array[rows]`` (a copy) of the C-ordered ``shape`` array of ``dtype`` stored at byte
    ``offset`` of ``path``; ``rows`` int (R,) or a slice of the first axis."""
    n = shape[0]
    ids = np.arange(*rows.indices(n)) if isinstance(rows, slice) else np.asarray(rows)
    out = np.empty((ids.size, *shape[1:]), dtype=dtype)
    step = RELEASE_ROWS
    if isinstance(rows, slice):  # neighbouring pages: no fault-around waste
        step = max(step, RELEASE_BYTES // max(1, out[:1].nbytes))
    if ids.size == 0:
        return out
    if ids.min() < 0 or ids.max() >= n:
        raise IndexError(f"{path}: rows outside [0, {n})")
    with open(path, "rb") as handle:  # the map outlives the descriptor
        region = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    # unmapped when the last view goes (no close: an error's traceback may still hold a view)
    array = np.frombuffer(region, dtype=dtype, count=int(np.prod(shape)),
                          offset=offset).reshape(shape)
    for lo in range(0, ids.size, step):
        np.take(array, ids[lo:lo + step], axis=0, out=out[lo:lo + step])
        if hasattr(mmap, "MADV_DONTNEED"):
            region.madvise(mmap.MADV_DONTNEED)
    return out


def gather_npy(path: str | Path, rows: np.ndarray | slice) -> np.ndarray:
    """``np.load(path)[rows]`` (a copy) of an ``.npy`` file, by ``gather``."""
    header = np.load(path, mmap_mode="r", allow_pickle=False)
    assert header.flags.c_contiguous
    return gather(path, int(header.offset), header.dtype, header.shape, rows)
