"""Files of the block-wise (``cluster.engine: dask``) prepare: a scratch folder beside the output,
scratch part files, ``.npy`` memory maps, and a Parquet writer that takes rows in slices but writes
the same bytes as ``write_table`` of the whole table.

The scratch folder lies beside the stage's output (the workers of a real cluster see that path;
features_<T>.npy moves from it into the output by a rename), named as a temp of this process
(``gnnpipe.io.temps``), so a killed run's folder is swept by the next stage run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gnnpipe import LazyModule
from gnnpipe.io.atomic import atomic_path
from gnnpipe.io.mapped_rows import gather_npy
from gnnpipe.io.parquet import SCHEMA_KEY
from gnnpipe.io.routed_tables import bucket_order
from gnnpipe.io.temps import temp_prefix

torch = LazyModule("torch", globals())  # imported on first use: the report starts without it

# pyarrow's default (and largest unasked) row group: the row groups write_table makes
ROW_GROUP_ROWS = 1024 * 1024


@contextlib.contextmanager
def temp_folder(where: Path | None, name: str) -> Iterator[Path]:
    """A fresh folder ``.<name>.p<pid>-<host>.<8 chars>.tmp`` in ``where`` (None: the run's
    temp folder), absolute (workers run elsewhere), removed at exit (also after an error)."""
    folder = Path(tempfile.mkdtemp(prefix=temp_prefix(Path(name)), suffix=".tmp",
                                   dir=where)).resolve()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def scratch_beside(path: Path):
    """A ``temp_folder`` ``.<name>-blocks...`` beside ``path`` (its folder created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return temp_folder(path.parent, f"{path.name}-blocks")


def write_part(path: Path, table: pa.Table) -> None:
    """One scratch part (uncompressed Parquet, e.g. a CSV block converted for its readers)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="none")


def save_array(path: Path, array: np.ndarray) -> None:
    """``array`` as the ``.npy`` file ``path`` (its folder created), saved under a temp name and
    renamed: a reader in another process never maps a half-written array."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:  # a handle: np.save would append ".npy" to the temp name
        np.save(handle, array, allow_pickle=False)
    os.replace(tmp, path)


def save_routed(folder: Path, name: str, rows: np.ndarray, bucket: np.ndarray,
                buckets: int) -> None:
    """A producer's ``rows`` (n, ...) for ``buckets`` consumers, grouped by ``bucket`` (n,) in
    one file ``<folder>/rows/<name>.npy`` with the bucket offsets int64 (buckets + 1,) in
    ``<folder>/offsets/<name>.npy``: two files per producer, however many buckets."""
    order, offsets = bucket_order(bucket, buckets)
    save_array(Path(folder) / "rows" / f"{name}.npy", rows[order])
    save_array(Path(folder) / "offsets" / f"{name}.npy", offsets)


def load_routed(folder: Path, bucket: int, dtype, width: int) -> np.ndarray:
    """Bucket ``bucket`` of every producer's rows in ``folder`` (``save_routed``; producers in
    name order), (m, width); none: empty. Read with plain file reads of just those rows, no
    memory map, so no page of another bucket is touched or counted in this process's resident
    set."""
    parts = []
    rows_dir = Path(folder) / "rows"
    for path in sorted(rows_dir.glob("*.npy")) if rows_dir.is_dir() else []:
        offsets = np.load(Path(folder) / "offsets" / path.name)
        lo, hi = int(offsets[bucket]), int(offsets[bucket + 1])
        if hi > lo:
            parts.append(gather_npy(path, slice(lo, hi)))
    return np.concatenate(parts) if parts else np.zeros((0, width), dtype=dtype)


def create_memmap(path: Path, shape: tuple[int, ...], dtype) -> None:
    """An ``.npy`` file of ``shape`` (zero-filled pages, written later by ``open_memmap``)."""
    np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape).flush()


def open_memmap(path: Path) -> np.ndarray:
    """The ``.npy`` file mapped read-only."""
    return np.load(path, mmap_mode="r", allow_pickle=False)


def open_tensor(path: Path) -> torch.Tensor:
    """The ``.npy`` file as a tensor over its copy-on-write map (nothing read until used)."""
    return torch.from_numpy(np.load(path, mmap_mode="c", allow_pickle=False))


def write_rows(path: Path, start: int, rows: np.ndarray) -> None:
    """``rows`` into rows ``[start, start + len(rows))`` of the ``.npy`` file, flushed (a reader
    in another process, or on another machine of a shared filesystem, sees them at once)."""
    array = np.load(path, mmap_mode="r+", allow_pickle=False)
    array[start:start + len(rows)] = rows
    array.flush()
    del array


@contextlib.contextmanager
def table_stream(path: Path, schema: pa.Schema, name: str, compression: str = "zstd"
                 ) -> Iterator[Callable[[pa.Table], None]]:
    """Yield ``add(rows)``: rows of ``schema`` in order, in slices of any size. They are written
    atomically to ``path`` in row groups of ``ROW_GROUP_ROWS``, tagged ``name``: the bytes
    ``gnnpipe.io.parquet.write_table`` writes for the whole table, holding one row group."""
    schema = schema.with_metadata({SCHEMA_KEY: name.encode()})
    pending: list[pa.Table] = []
    held = 0
    written = False
    with atomic_path(path) as tmp, pq.ParquetWriter(tmp, schema,
                                                    compression=compression) as writer:
        def emit(final: bool) -> None:
            nonlocal pending, held, written
            table = pa.concat_tables(pending).combine_chunks() if pending else None
            while table is not None and (table.num_rows >= ROW_GROUP_ROWS
                                         or (final and table.num_rows)):
                group = table.slice(0, ROW_GROUP_ROWS).combine_chunks()
                writer.write_table(group, row_group_size=ROW_GROUP_ROWS)
                written = True
                table = table.slice(group.num_rows)
            pending = [table] if table is not None and table.num_rows else []
            held = sum(t.num_rows for t in pending)

        def add(rows: pa.Table) -> None:
            nonlocal held
            pending.append(rows.cast(schema))
            held += rows.num_rows
            if held >= ROW_GROUP_ROWS:
                emit(False)

        yield add
        emit(True)
        if not written:  # an empty table still has its one empty row group
            writer.write_table(schema.empty_table())
