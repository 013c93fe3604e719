"""Rows of an array stored raw in a file (an ``.npy`` array, a hop file's storage), gathered
without keeping the file resident: the one way block tasks read stored arrays.

Pages a process has mapped and touched count in its resident set until unmapped, so a gather
through a plain map would leave most of a file resident and a worker's peak memory would grow
with the graph. Two ways, chosen per window of ``WINDOW_BYTES`` of the file:

* **read**: where the rows asked for cover the window densely, their span (first to last row
  asked for) is read with ``pread`` into a buffer and the rows taken from it: one sequential
  read, nothing mapped. A slice is read straight into the result.
* **mapped**: where they are sparse (a row fetched through a map costs about as much as
  reading ``MAPPED_ROW_BYTES`` more of the file, ``ORDERED_ROW_BYTES`` for ascending ids),
  they are copied through a map ``RELEASE_ROWS`` at a time and the map's pages dropped after
  each batch (``madvise(MADV_DONTNEED)``; they stay in the OS page cache).

Either way the resident set holds the result plus one window or one batch's pages (and, for ids
in no order over several windows, their order: 8 bytes an id).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Iterator

import numpy as np

WINDOW_BYTES = 16 << 20  # of the file read at once
MAPPED_ROW_BYTES = 2048  # file bytes read in the time one row costs through the map (any order)
ORDERED_ROW_BYTES = 512  # the same for ascending ids (neighbours share the pages mapped)
RELEASE_ROWS = 256  # rows copied through the map between two drops of its pages
MASKED_WINDOWS = 8  # up to this many windows, a pass over the ids per window beats sorting them


def npy_layout(path: str | Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """Shape, dtype and data offset of the C-ordered ``.npy`` file ``path`` (its header only)."""
    with open(path, "rb") as handle:
        version = np.lib.format.read_magic(handle)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read_header(handle)
        assert not fortran or len(shape) < 2, path
        return shape, dtype, handle.tell()


def gather_npy(path: str | Path, rows: np.ndarray | slice) -> np.ndarray:
    """``np.load(path)[rows]`` (a copy) of an ``.npy`` file, by ``gather``."""
    shape, dtype, offset = npy_layout(path)
    return gather(path, offset, dtype, shape, rows)


def gather(path: str | Path, offset: int, dtype, shape: tuple[int, ...],
           rows: np.ndarray | slice) -> np.ndarray:
    """``array[rows]`` (a copy) of the C-ordered ``shape`` array of ``dtype`` stored at byte
    ``offset`` of ``path``; ``rows`` int (R,) in any order, repeats allowed, or a slice of the
    first axis. Raises IndexError naming ``path`` for a row outside ``[0, shape[0])``."""
    n = shape[0]
    if isinstance(rows, slice):
        start, stop, step = rows.indices(n)
        if step == 1:
            out = np.empty((max(0, stop - start), *shape[1:]), dtype=dtype)
            with open(path, "rb", buffering=0) as handle:
                pread_into(handle.fileno(), out, offset + start * out[:1].nbytes)
            return out
        rows = np.arange(start, stop, step)
    ids = np.asarray(rows, dtype=np.int64)
    out = np.empty((ids.size, *shape[1:]), dtype=dtype)
    if ids.size == 0:
        return out
    first, last = int(ids.min()), int(ids.max()) + 1
    if first < 0 or last > n:
        raise IndexError(f"{path}: rows outside [0, {n})")
    row_bytes = max(1, out[:1].nbytes)
    ordered = bool((ids[1:] >= ids[:-1]).all())
    # a row through the map costs what reading this many bytes costs (ascending ids share pages)
    row_cost = row_bytes + (ORDERED_ROW_BYTES if ordered else MAPPED_ROW_BYTES)
    window = max(1, WINDOW_BYTES // row_bytes)  # rows
    with open(path, "rb", buffering=0) as handle:
        if last - first <= window:  # one window: no grouping
            pieces = [(slice(0, ids.size), ids, first, last)]
        else:
            pieces = _windows(ids, ordered, window, first, last)
        sparse, buffer = [], None
        for where, wanted, lo, hi in pieces:
            if wanted.size * row_cost < (hi - lo) * row_bytes:
                sparse.append((where, wanted))
                continue
            if buffer is None:
                buffer = np.empty((min(window, last - first), *shape[1:]), dtype=dtype)
            span = buffer[:hi - lo]
            pread_into(handle.fileno(), span, offset + lo * row_bytes)
            # mode="clip": the ids are checked; "raise" would copy ``out`` through a buffer
            if isinstance(where, slice):
                np.take(span, wanted - lo, axis=0, out=out[where], mode="clip")
            else:
                out[where] = np.take(span, wanted - lo, axis=0, mode="clip")
    if sparse:
        _mapped(path, offset, dtype, shape, sparse, out)
    return out


def _windows(ids: np.ndarray, ordered: bool, window: int, first: int, last: int) -> Iterator:
    """``ids`` (rows ``first..last``) grouped by windows of ``window`` rows of the file, one
    window at a time: where its ids lie in ``ids`` (a slice, or int64 positions in their
    order), the ids, and the span of rows they cover; empty windows left out."""
    starts = range(first // window * window, last, window)
    if ordered:
        bounds = np.searchsorted(ids, starts[1:]).tolist()
        positions = (slice(lo, hi) for lo, hi in zip([0, *bounds], [*bounds, ids.size]))
    elif len(starts) <= MASKED_WINDOWS:
        positions = (np.flatnonzero((ids >= lo) & (ids < lo + window)) for lo in starts)
    else:  # a stable sort by window; 16-bit keys: numpy's radix sort, linear in the ids
        which = ids // window
        top = int(which.max())
        order = np.argsort(which.astype(np.uint16) if top < 1 << 16 else which, kind="stable")
        bounds = np.searchsorted(which[order], np.arange(1, top + 1)).tolist()
        del which
        positions = (order[lo:hi] for lo, hi in zip([0, *bounds], [*bounds, ids.size]))
    for where in positions:
        wanted = ids[where]
        if wanted.size:
            yield where, wanted, int(wanted.min()), int(wanted.max()) + 1


def pread_into(fd: int, array: np.ndarray, position: int) -> None:
    """Fill the contiguous ``array`` with the file's bytes from ``position`` (pread, repeated
    while it returns less)."""
    view = memoryview(array.reshape(-1).view(np.uint8))
    while view.nbytes:
        got = os.preadv(fd, [view], position)
        if got == 0:
            raise EOFError(f"file ends before byte {position + view.nbytes}")
        view, position = view[got:], position + got


def _mapped(path: str | Path, offset: int, dtype, shape: tuple[int, ...], pieces: list,
            out: np.ndarray) -> None:
    """``out[where] = array[wanted]`` for every ``(where, wanted)`` of ``pieces``, through a
    map of ``path``, ``RELEASE_ROWS`` rows between two drops of its pages."""
    with open(path, "rb") as handle:  # the map outlives the descriptor
        region = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    # unmapped when the last view goes (no close: an error's traceback may still hold a view)
    array = np.frombuffer(region, dtype=dtype, count=int(np.prod(shape)),
                          offset=offset).reshape(shape)
    for where, wanted in pieces:
        into = out[where] if isinstance(where, slice) else None  # a view: taken into in place
        for lo in range(0, wanted.size, RELEASE_ROWS):
            batch = slice(lo, lo + RELEASE_ROWS)
            if into is not None:
                np.take(array, wanted[batch], axis=0, out=into[batch], mode="clip")
            else:
                out[where[batch]] = array[wanted[batch]]
            if hasattr(mmap, "MADV_DONTNEED"):
                region.madvise(mmap.MADV_DONTNEED)
