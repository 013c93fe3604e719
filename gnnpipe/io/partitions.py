"""Partition files: node_to_part.parquet, one shard (part + halo) per part in part_<k>/,
meta.json."""

from __future__ import annotations

import contextlib
import io as _io
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import torch

from gnnpipe.data.graph import Csr
from gnnpipe.io.atomic import atomic_dir, read_json, write_json
from gnnpipe.io.common import PARTS_SCHEMA, check_csr
from gnnpipe.io.parquet import read_table, write_table
from gnnpipe.io.tensors import error_reason
from gnnpipe.io.part_shard import PartShard


# partition/ node_to_part.parquet, meta.json, part_<k>/ (one PartShard each): the int64 arrays
# below as .npy files and the shard's meta.json. Files, not one torch archive, so a shard is
# written as its rows come and no process holds it whole (lp's shard tasks at 160M edges).
SHARD_SCHEMA = "gnnpipe.part_shard/2"
SHARD_ARRAYS = ("node_id", "ring_ptr", "degree", "indptr", "indices")
_INT64 = np.dtype("<i8")


def shard_folder(partition: Path, part: int) -> Path:
    return Path(partition) / f"part_{part}"


def _npy_header(length: int) -> bytes:
    """The header ``np.save`` writes for an int64 (length,) array (format 1.0)."""
    buffer = _io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {
        "descr": np.lib.format.dtype_to_descr(_INT64), "fortran_order": False,
        "shape": (length,)})
    return buffer.getvalue()


class _Int64Appender:
    """An int64 ``.npy`` (n,) written a piece at a time, n known at the end: the header's room
    is kept first (its size does not depend on n) and filled in by ``close``; the bytes are
    ``np.save``'s of the whole array."""

    def __init__(self, path: Path):
        self.path, self.length = path, 0
        self._room = len(_npy_header(0))
        self._file = open(path, "wb")
        self._file.write(b"\0" * self._room)

    def add(self, values: np.ndarray) -> None:
        self._file.write(np.ascontiguousarray(values, dtype=_INT64).tobytes())
        self.length += values.size

    def close(self) -> None:
        if self._file.closed:
            return
        header = _npy_header(self.length)
        assert len(header) == self._room, "an int64 .npy header changed size with its length"
        self._file.seek(0)
        self._file.write(header)
        self._file.close()


class ShardWriter:
    """Shard ``part``'s files, written as its rows come (rows in local order), into ``folder``
    (``shard_writer`` gives it its temp folder and publishes it).

    ``ring_ptr`` int64 (halo_hops + 2,): where each ring of the shard's nodes starts.
    ``add(node_id, degree, counts, kept)`` per run of consecutive rows: their global ids, their
    whole-graph in-degree and kept in-edge count int64 (m,) each, and the kept edges' local
    sources (sum of counts,), row after row. Nothing is held: every array goes to disk as it
    comes. ``summary``, once finished: ``shard_summary``'s sizes.
    """

    def __init__(self, folder: Path, part: int, num_parts: int, num_nodes: int,
                 ring_ptr: np.ndarray):
        self.folder, self.part, self.num_parts, self.num_nodes = folder, part, num_parts, num_nodes
        self.ring_ptr = ring_ptr
        self.summary: dict = {}
        self._files = {name: _Int64Appender(folder / f"{name}.npy")
                       for name in ("node_id", "degree", "indptr", "indices")}
        self._files["indptr"].add(np.zeros(1, dtype=np.int64))
        self._rows = self._edges = 0

    def add(self, node_id: np.ndarray, degree: np.ndarray, counts: np.ndarray,
            kept: np.ndarray) -> None:
        self._files["node_id"].add(node_id)
        self._files["degree"].add(degree)
        self._files["indptr"].add(self._edges + np.cumsum(counts, dtype=np.int64))
        self._files["indices"].add(kept)
        self._rows += counts.size
        self._edges += kept.size

    def close(self) -> None:
        """The streamed files closed (their headers written); also after an error."""
        for file in self._files.values():
            file.close()

    def finish(self) -> None:
        self.close()
        size = int(self.ring_ptr[-1])
        if not self._rows == self._files["node_id"].length == size:
            raise ValueError(f"{self.folder}: {self._rows} shard rows written for {size} nodes")
        np.save(self.folder / "ring_ptr.npy", self.ring_ptr, allow_pickle=False)
        write_json(self.folder / "meta.json", {"schema": SHARD_SCHEMA, "part": self.part,
                                               "num_parts": self.num_parts,
                                               "num_nodes": self.num_nodes})
        owned = int(self.ring_ptr[1])
        self.summary = {"owned": owned, "halo": size - owned, "edges": self._edges}


@contextlib.contextmanager
def shard_writer(out: Path, part: int, num_parts: int, num_nodes: int,
                 ring_ptr: np.ndarray) -> Iterator[ShardWriter]:
    """A ``ShardWriter`` for ``out/part_<part>/`` of rings starting at ``ring_ptr`` (int64),
    published whole on a clean exit (``atomic_dir``: after an error no part of the shard is
    left)."""
    with atomic_dir(shard_folder(out, part)) as folder:
        writer = ShardWriter(folder, part, num_parts, num_nodes,
                             np.asarray(ring_ptr, dtype=np.int64))
        try:
            yield writer
        except BaseException:
            writer.close()
            raise
        writer.finish()


def write_partition(out: Path, parts: np.ndarray) -> None:
    table = pa.table({"node_id": np.arange(parts.size, dtype=np.int64), "part": parts})
    write_table(out / "node_to_part.parquet", table, PARTS_SCHEMA, "gnnpipe.node_to_part/1")


def read_partition(partition: Path) -> np.ndarray:
    table = read_table(Path(partition) / "node_to_part.parquet", PARTS_SCHEMA,
                       "gnnpipe.node_to_part/1")
    return table.column("part").to_numpy()


def read_partition_meta(partition: Path) -> dict:
    """``meta.json``: num_parts, halo_hops, num_nodes (checked) and how the parts were made."""
    path = Path(partition) / "meta.json"
    meta = read_json(path)
    for key in ("num_parts", "halo_hops", "num_nodes"):
        if not isinstance(meta.get(key), int) or meta[key] < 0:
            raise ValueError(f"{path}: {key!r} must be a non-negative int, found {meta.get(key)!r}")
    return meta


def read_partition_shard(partition: Path, part: int) -> PartShard:
    """Shard ``part`` alone (``part_<part>/``; no other shard is opened), validated."""

    meta = read_partition_meta(partition)
    num_parts, num_nodes = meta["num_parts"], meta["num_nodes"]
    if not 0 <= part < num_parts:
        raise ValueError(f"{partition}: no part {part}; the partition has parts 0..{num_parts - 1}")
    folder = shard_folder(partition, part)
    if not (folder / "meta.json").is_file():
        raise ValueError(f"{folder}: shard not found (no meta.json); run the partition stage")
    found = read_json(folder / "meta.json")
    if not isinstance(found, dict) or found.get("schema") != SHARD_SCHEMA:
        got = found.get("schema") if isinstance(found, dict) else type(found).__name__
        raise ValueError(f"{folder}: expected a {SHARD_SCHEMA!r} shard, found {got!r}")
    if (found.get("part"), found.get("num_parts"), found.get("num_nodes")) != (part, num_parts,
                                                                               num_nodes):
        raise ValueError(f"{folder}: shard meta {found} disagrees with meta.json "
                         f"(part {part} of {num_parts}, {num_nodes} nodes)")
    node_id, ring_ptr, degree, indptr, indices = (_read_int64(folder / f"{name}.npy")
                                                  for name in SHARD_ARRAYS)
    size = node_id.numel()
    if (ring_ptr.numel() != meta["halo_hops"] + 2 or ring_ptr[0] != 0 or ring_ptr[-1] != size
            or bool((ring_ptr[1:] < ring_ptr[:-1]).any())):
        raise ValueError(f"{folder}: ring_ptr must rise from 0 to {size} in "
                         f"{meta['halo_hops'] + 2} entries")
    if size and (node_id.min() < 0 or node_id.max() >= num_nodes
                 or torch.unique(node_id).numel() != size):
        raise ValueError(f"{folder}: node_id must hold distinct ids in [0, {num_nodes})")
    if degree.numel() != size:
        raise ValueError(f"{folder}: degree has {degree.numel()} entries for {size} nodes")
    csr = check_csr(Csr(indptr, indices), size, folder)
    return PartShard(part=part, num_parts=num_parts, num_nodes=num_nodes, node_id=node_id,
                     ring_ptr=ring_ptr, csr=csr, degree=degree)


def _read_int64(path: Path) -> torch.Tensor:
    """An int64 (n,) ``.npy`` of a shard, read whole; one line naming the file otherwise."""
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable .npy array ({error_reason(err)})") from None
    if array.dtype != _INT64 or array.ndim != 1:
        raise ValueError(f"{path}: expected int64 (n,), found {array.dtype} {array.shape}")
    return torch.from_numpy(array)
