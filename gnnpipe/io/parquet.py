"""Parquet tables with a declared schema: written atomically, checked on read."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Union

import pyarrow as pa
import pyarrow.parquet as pq

from gnnpipe.io.atomic import atomic_path, existing
from gnnpipe.io.common import reading

SCHEMA_KEY = b"gnnpipe.schema"


def write_table(path: str | Path, table: pa.Table, schema: pa.Schema, name: str,
                compression: str = "zstd") -> None:
    """Cast ``table`` to ``schema`` (fails loudly on a mismatch) and write it atomically with
    ``compression`` (a Parquet codec name, or ``"none"``)."""
    table = table.cast(schema).replace_schema_metadata({SCHEMA_KEY: name.encode()})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression=compression)


ExpectedSchema = Union[pa.Schema, Callable[[pa.Schema], pa.Schema]]


def read_table(path: str | Path, schema: ExpectedSchema, name: str) -> pa.Table:
    """Read a table written by ``write_table`` and check its schema tag, columns and types.

    ``schema`` may be a function of the file's own schema, for tables whose types depend on
    the data (the feature width of a node table, say).
    """
    path = existing(path)
    with reading(path, "Parquet file"):
        table = pq.read_table(path)
    return table.select(_checked(path, table.schema, schema, name).names)


def read_batches(path: str | Path, schema: pa.Schema, name: str, rows: int = 1 << 16
                 ) -> Iterator[pa.RecordBatch]:
    """``read_table``'s columns, checked the same way, ``rows`` rows at a time: a reader that
    keeps one value per row holds no whole column of the file."""
    path = existing(path)
    with reading(path, "Parquet file"):
        handle = pq.ParquetFile(path)
    _checked(path, handle.schema_arrow, schema, name)
    with reading(path, "Parquet file"):
        yield from handle.iter_batches(batch_size=rows, columns=schema.names)


def _checked(path: Path, found_schema: pa.Schema, schema: ExpectedSchema, name: str
             ) -> pa.Schema:
    found = (found_schema.metadata or {}).get(SCHEMA_KEY, b"").decode()
    if found != name:
        raise ValueError(f"{path}: expected a {name!r} table, found {found or 'an untagged table'!r}")
    if callable(schema):
        schema = schema(found_schema)
    for want in schema:
        if want.name not in found_schema.names:
            raise ValueError(f"{path}: missing column {want.name!r} ({want.type})")
        got = found_schema.field(want.name).type
        if got != want.type:
            raise ValueError(f"{path}: column {want.name!r} must be {want.type}, found {got}")
    return schema
