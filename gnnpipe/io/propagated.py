"""Propagated-feature files: <graph>_hop_<k>.pt written row block by row block, meta.json."""

from __future__ import annotations

import contextlib
import os
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gnnpipe.io.atomic import atomic_path, read_json
from gnnpipe.io.common import PHASES
from gnnpipe.io.mapped_rows import gather, pread_into
from gnnpipe.io.tensors import load_tensors, save_tensors


# propagate/ <graph>_hop_<k>.pt ({"x": (N, F) float32 or bfloat16}), meta.json
def write_hop(out: Path, graph_name: str, hop: int, x: torch.Tensor) -> None:
    save_tensors(out / f"{graph_name}_hop_{hop}.pt", "gnnpipe.hop/1", {"x": x},
                 meta={"hop": hop, "graph": graph_name})


def _storage_offset(path: Path, nbytes: int) -> int:
    """Byte offset of the single tensor storage in a torch zip file (stored uncompressed)."""
    with zipfile.ZipFile(path) as archive:
        records = [i for i in archive.infolist() if "/data/" in i.filename
                   and not i.filename.endswith(".pkl")]
    assert len(records) == 1 and records[0].compress_type == zipfile.ZIP_STORED, records
    assert records[0].file_size == nbytes, (records[0].file_size, nbytes)
    with open(path, "rb") as handle:  # local header: 30 fixed bytes, then name and extra field
        handle.seek(records[0].header_offset)
        header = handle.read(30)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return records[0].header_offset + 30 + name_len + extra_len


class HopWriter:
    """One hop file written row block by row block, so the hop is never whole in memory.

    The torch file is laid out first with its storage bytes left empty
    (``torch.serialization.skip_data``); each block then lands at its offset with ``os.pwrite``
    (page cache, not this process's memory). ``finish`` renames the temp file into place and
    returns the hop memory-mapped; ``read_into`` reads it back into a buffer for the next hop.
    The result loads with ``torch.load(weights_only=True)``, with or without ``mmap=True``, like
    any file from ``write_hop``.
    """

    def __init__(self, out: Path, graph_name: str, hop: int, shape: tuple[int, int],
                 dtype: torch.dtype):
        self.path = Path(out) / f"{graph_name}_hop_{hop}.pt"
        self.shape, self.dtype = shape, dtype
        self._stack = contextlib.ExitStack()
        self._tmp = self._stack.enter_context(atomic_path(self.path))
        skeleton = {"schema": "gnnpipe.hop/1", "meta": {"hop": hop, "graph": graph_name}}
        empty = torch.empty(shape, dtype=dtype)  # never touched: no memory is committed
        # through a file object: given a path, torch names the archive after the (random) temp file
        with open(self._tmp, "wb") as handle, torch.serialization.skip_data():
            torch.save({**skeleton, "x": empty}, handle)
        self._row_bytes = shape[1] * empty.element_size()
        self._offset = _storage_offset(self._tmp, shape[0] * self._row_bytes)
        self._fd = os.open(self._tmp, os.O_WRONLY)

    def write(self, start: int, block: torch.Tensor) -> None:
        """Rows ``start : start + len(block)`` of the hop (cast to the file's dtype)."""
        block = block.to(self.dtype).contiguous()
        _pwrite(self._fd, block, self._offset + start * self._row_bytes)

    def rows(self) -> RowFile:
        """The hop's rows in the temp file, for writers in other processes (``RowFile.write``):
        a worker of a Dask cluster fills its row block, ``finish`` publishes the file."""
        return RowFile(str(self._tmp.resolve()), self._offset, self.shape, _DTYPE_NAMES[self.dtype])

    def finished_rows(self) -> RowFile:
        """The rows of the published hop file (after ``finish``), for readers in other processes."""
        return RowFile(str(self.path.resolve()), self._offset, self.shape, _DTYPE_NAMES[self.dtype])

    def finish(self) -> torch.Tensor:
        """Close, rename into place and return the hop, memory-mapped (N, F)."""
        os.close(self._fd)
        self._fd = None
        self._stack.close()  # atomic_path: fsync, then rename onto self.path
        return load_tensors(self.path, "gnnpipe.hop/1", {"x": (None, 2)}, mmap=True)["x"]

    def read_into(self, out: torch.Tensor, chunk_bytes: int = 32 << 20) -> None:
        """Fill ``out`` (float32 (N, F), contiguous) with the finished hop.

        Read with plain reads, not a mapping: the page cache the bytes pass through is not
        counted in this process's memory, so holding ``out`` costs one hop, not two.
        """
        rows = max(1, chunk_bytes // self._row_bytes)
        direct = self.dtype == torch.float32
        staging = None if direct else torch.empty((rows, self.shape[1]), dtype=self.dtype)
        with open(self.path, "rb", buffering=0) as handle:
            for start in range(0, self.shape[0], rows):
                stop = min(start + rows, self.shape[0])
                target = out[start:stop] if direct else staging[:stop - start]
                pread_into(handle.fileno(), target.view(torch.uint8).numpy(),
                           self._offset + start * self._row_bytes)
                if not direct:
                    out[start:stop].copy_(target)

    def discard(self) -> None:
        """Drop the half-written file (the target path is left as it was)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._stack.__exit__(RuntimeError, RuntimeError("discarded"), None)


def _pwrite(fd: int, block: torch.Tensor, offset: int) -> None:
    """``block`` (contiguous) written at byte ``offset`` of the open file ``fd``."""
    data = memoryview(block.view(torch.uint8).numpy()).cast("B")
    while data:  # pwrite may write less than asked
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}
_STORED = {"float32": (np.float32, torch.float32), "bfloat16": (np.uint16, torch.bfloat16)}


@dataclass(frozen=True)
class RowFile:
    """A row-major (N, F) matrix stored raw at byte ``offset`` of ``path`` (absolute; a hop
    file's storage, an ``.npy`` array's data): picklable, so block tasks on other processes read
    and write its rows through their own maps and descriptors. ``dtype``: float32 or bfloat16."""

    path: str
    offset: int
    shape: tuple[int, int]
    dtype: str

    def read(self, rows: np.ndarray | slice) -> torch.Tensor:
        """Rows ``rows`` (ids int64 (R,), or a slice) widened to float32 (R, F), gathered
        without keeping the file's pages resident (``gnnpipe.io.mapped_rows``)."""
        stored, dtype = _STORED[self.dtype]
        rows = gather(self.path, self.offset, stored, self.shape, rows)
        return torch.from_numpy(rows).view(dtype).to(torch.float32)

    def write(self, start: int, block: torch.Tensor) -> None:
        """Rows ``start : start + len(block)`` (cast to the file's dtype), by ``pwrite``."""
        _, dtype = _STORED[self.dtype]
        row_bytes = self.shape[1] * torch.empty(0, dtype=dtype).element_size()
        fd = os.open(self.path, os.O_WRONLY)
        try:
            _pwrite(fd, block.to(dtype).contiguous(), self.offset + start * row_bytes)
        finally:
            os.close(fd)


def hop_rows(out: Path, graph_name: str, hop: int, shape: tuple[int, int],
             dtype: torch.dtype) -> RowFile:
    """The rows of the finished hop file ``<graph>_hop_<k>.pt`` (either writer's)."""
    path = Path(out) / f"{graph_name}_hop_{hop}.pt"
    nbytes = shape[0] * shape[1] * torch.empty(0, dtype=dtype).element_size()
    return RowFile(str(path.resolve()), _storage_offset(path, nbytes), shape, _DTYPE_NAMES[dtype])


def npy_rows(path: Path) -> RowFile:
    """The rows of a float32 (N, F) ``.npy`` file."""
    array = np.load(path, mmap_mode="r", allow_pickle=False)
    assert array.dtype == np.float32 and array.ndim == 2 and array.flags.c_contiguous
    return RowFile(str(Path(path).resolve()), int(array.offset), tuple(array.shape), "float32")


def read_propagated(propagate: Path) -> dict[str, list[torch.Tensor]]:
    """Phase -> ``[X_0, ..., X_K]`` (each float32 or bfloat16 (N, F), memory-mapped).

    Phases that share a message graph share the same tensor objects.
    """
    meta_path = Path(propagate) / "meta.json"
    meta = read_json(meta_path)
    if not isinstance(meta.get("phase_graph"), dict) or set(meta["phase_graph"]) != set(PHASES):
        raise ValueError(f"{meta_path}: 'phase_graph' must map each of {', '.join(PHASES)}")
    hops = int(meta["hops"])
    loaded: dict[str, list[torch.Tensor]] = {}
    for graph_name in sorted(set(meta["phase_graph"].values())):
        loaded[graph_name] = [
            load_tensors(Path(propagate) / f"{graph_name}_hop_{hop}.pt", "gnnpipe.hop/1",
                         {"x": (None, 2)}, mmap=True)["x"]
            for hop in range(hops + 1)]
    return {phase: loaded[meta["phase_graph"][phase]] for phase in PHASES}
