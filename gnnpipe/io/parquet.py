"""Parquet tables with a declared schema: written atomically, checked on read."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Union

import pyarrow as pa
import pyarrow.parquet as pq

from gnnpipe.io.atomic import atomic_path
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
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: file not found; run the stage that produces it first")
    with reading(path, "Parquet file"):
        table = pq.read_table(path)
    found = (table.schema.metadata or {}).get(SCHEMA_KEY, b"").decode()
    if found != name:
        raise ValueError(f"{path}: expected a {name!r} table, found {found or 'an untagged table'!r}")
    if callable(schema):
        schema = schema(table.schema)
    for want in schema:
        if want.name not in table.column_names:
            raise ValueError(f"{path}: missing column {want.name!r} ({want.type})")
        got = table.schema.field(want.name).type
        if got != want.type:
            raise ValueError(f"{path}: column {want.name!r} must be {want.type}, found {got}")
    return table.select(schema.names)
