"""A graph as memory-mappable .npy files, read one block of rows at a time (partition.method lp).

A folder holds ``indptr.npy`` int64 (N + 1,) and ``indices.npy`` (E,) of the in-edge CSR,
``out_indptr.npy`` / ``out_indices.npy`` of its transpose (the out-edges), and one
``labels_<t>.npy`` int32 (N,) per iteration. A block task maps only its rows' slices of the edge
arrays plus one label array, so no process needs the whole graph; on a cluster the folder lies on
a path every worker sees. The transpose is built here by row blocks as well (O(N) memory plus one
block's edges).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np

from gnnpipe.data.graph import Csr
from gnnpipe.io.mapped_rows import gather_npy
from gnnpipe.io.temps import temp_prefix

EDGE_BLOCK = 1 << 22  # edges handled at once while writing the transpose


def _save(path: Path, array: np.ndarray) -> None:
    """np.save through a temp name: a reader never maps a half-written array."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:  # a handle: np.save would append ".npy" to the temp name
        np.save(handle, array)
    os.replace(tmp, path)


def _row_blocks(indptr: np.ndarray, edges: int) -> list[tuple[int, int]]:
    """Consecutive row ranges holding about ``edges`` edges each (at least one row)."""
    n = indptr.size - 1
    cuts = np.searchsorted(indptr, np.arange(edges, int(indptr[-1]), edges), side="right") - 1
    bounds = np.unique(np.concatenate([[0], np.clip(cuts, 1, n), [n]]))
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


def write_block_graph(folder: Path, csr: Csr, transpose: bool = True) -> None:
    """``csr`` and (unless ``transpose`` is False) its transpose as .npy files in ``folder``
    (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    _save(folder / "indptr.npy", csr.indptr.numpy())
    _save(folder / "indices.npy", csr.indices.numpy())
    if not transpose:
        return
    indptr = np.load(folder / "indptr.npy", mmap_mode="r")
    indices = np.load(folder / "indices.npy", mmap_mode="r")
    n, blocks = indptr.size - 1, _row_blocks(np.asarray(indptr), EDGE_BLOCK)
    out_degree = np.zeros(n, dtype=np.int64)
    for start, stop in blocks:
        out_degree += np.bincount(indices[indptr[start]:indptr[stop]], minlength=n)
    out_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(out_degree, out=out_indptr[1:])
    _save(folder / "out_indptr.npy", out_indptr)
    tmp = folder / f".out_indices.npy.{os.getpid()}.tmp"
    out_indices = np.lib.format.open_memmap(tmp, mode="w+", dtype=indices.dtype,
                                            shape=(int(out_indptr[-1]),))
    cursor = out_indptr[:-1].copy()  # next free slot of every source's out-list
    for start, stop in blocks:
        src = np.asarray(indices[indptr[start]:indptr[stop]])
        dst = np.repeat(np.arange(start, stop, dtype=src.dtype), np.diff(indptr[start:stop + 1]))
        order = np.argsort(src, kind="stable")  # targets stay ascending in every out-list
        src, dst = src[order], dst[order]
        first = np.ones(src.size, dtype=bool)
        first[1:] = src[1:] != src[:-1]
        run_start = np.flatnonzero(first)
        rank = np.arange(src.size) - np.repeat(run_start, np.diff(np.append(run_start, src.size)))
        out_indices[cursor[src] + rank] = dst
        cursor[src[run_start]] += np.diff(np.append(run_start, src.size))  # sources distinct
    out_indices.flush()
    del out_indices
    os.replace(tmp, folder / "out_indices.npy")


@contextlib.contextmanager
def block_graph(csr: Csr, where: Path | None = None, transpose: bool = True,
                name: str = "partition-lp") -> Iterator[Path]:
    """A temp folder holding ``csr`` as block files (``write_block_graph``), in ``where``
    (default: the run's scratch, the system temp), removed at exit; a killed run's folder is
    swept like any temp."""
    folder = Path(tempfile.mkdtemp(prefix=temp_prefix(Path(name)), suffix=".tmp",
                                   dir=where)).resolve()  # absolute: workers run elsewhere
    try:
        write_block_graph(folder, csr, transpose)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def num_block_nodes(folder: Path) -> int:
    return int(np.load(Path(folder) / "indptr.npy", mmap_mode="r").size - 1)


def read_block_rows(folder: Path, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start..stop`` of the graph read both ways: for every edge at a row (in-edges,
    then out-edges) the row's local index, int64 (D,), and the neighbour's id, (D,)."""
    folder = Path(folder)
    rows, neighbours = [], []
    for prefix in ("", "out_"):
        indptr = np.load(folder / f"{prefix}indptr.npy", mmap_mode="r")[start:stop + 1]
        indices = np.load(folder / f"{prefix}indices.npy", mmap_mode="r")
        neighbours.append(np.asarray(indices[indptr[0]:indptr[-1]]))
        rows.append(np.repeat(np.arange(stop - start, dtype=np.int64), np.diff(indptr)))
    return np.concatenate(rows), np.concatenate(neighbours)


def read_in_rows(folder: Path, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start..stop`` of the stored CSR: offsets int64 (B + 1,) (base ``indptr[start]``)
    and the sources of their in-edges (E_b,)."""
    indptr = np.array(np.load(Path(folder) / "indptr.npy", mmap_mode="r")[start:stop + 1])
    indices = np.load(Path(folder) / "indices.npy", mmap_mode="r")
    return indptr, np.array(indices[indptr[0]:indptr[-1]])


def save_node_array(folder: Path, name: str, values: np.ndarray) -> None:
    """A per-node array (N,) beside the graph, ``<name>.npy`` (read by
    ``gnnpipe.io.mapped_rows.gather_npy``)."""
    _save(Path(folder) / f"{name}.npy", values)


def write_labels(folder: Path, step: int, labels: np.ndarray) -> None:
    _save(Path(folder) / f"labels_{step}.npy", labels.astype(np.int32, copy=False))


def read_labels(folder: Path, step: int) -> np.ndarray:
    """The int32 (N,) labels of iteration ``step``, memory-mapped (read-only)."""
    return np.load(Path(folder) / f"labels_{step}.npy", mmap_mode="r")


def gather_labels(folder: Path, step: int, rows: np.ndarray | slice) -> np.ndarray:
    """``labels_<step>[rows]`` (a copy), without keeping the file's pages resident."""
    return gather_npy(Path(folder) / f"labels_{step}.npy", rows)


def remove_labels(folder: Path, step: int) -> None:
    (Path(folder) / f"labels_{step}.npy").unlink(missing_ok=True)
