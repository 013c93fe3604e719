"""The whole-table readers of the tests' oracle (graph_oracle.py): the user's node table read
whole with its ids as the ids rule says (``from_text``), an edge table streamed in Arrow record
batches of about ``EDGE_BATCH_ROWS`` rows, with the library's one-line errors naming the file and
the column. (The library reads both by blocks, gnnpipe/data/table_blocks.py.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.csv as pacsv

from gnnpipe.data.ids import blanks_as_nulls, canonical_ints
from gnnpipe.io.common import reading
from gnnpipe.sources.base import EDGE_BATCH_ROWS, combine, reason
from gnnpipe.sources.formats import CSV_BLOCK_BYTES, ParquetTables, check_columns


def from_text(column: pa.Array) -> pa.Array:
    """Ids read as text: int64 when every cell is a canonical integer, else the strings (blank
    cells as nulls)."""
    column = blanks_as_nulls(column)
    if column.null_count or not pa.types.is_string(column.type):
        return column
    ints, ok = canonical_ints(column)
    return ints if ok.all() else column


def read_table(tables, path: Path, columns: list[str], ids: tuple[str, ...] = ()) -> pa.Table:
    """``columns`` of a table; a CSV table's ``ids`` columns are read as text and become int64
    only when every id is a canonical integer (``from_text``: ``00042`` stays text)."""
    if isinstance(tables, ParquetTables):  # Parquet columns are typed already
        return tables.read(path, columns)
    table = tables.read(path, columns, text=ids)
    for name in ids:
        table = table.set_column(table.schema.get_field_index(name), name,
                                 from_text(combine(table.column(name))))
    return table


def batches(tables, path: Path, columns: list[str], key_of: dict[str, str]
            ) -> tuple[Iterator[pa.RecordBatch], int | None]:
    """The table's record batches (lazily) and its rows (None: a CSV table, not counted)."""
    if isinstance(tables, ParquetTables):
        parts = [(part, ParquetTables.open_file(part)) for part in tables.files(path)]
        for part, handle in parts:
            check_columns(handle.schema_arrow, columns, part, key_of)

        def parquet() -> Iterator[pa.RecordBatch]:
            for part, handle in parts:
                with reading(part, "Parquet file"):  # a corrupted page fails here, lazily
                    yield from handle.iter_batches(batch_size=EDGE_BATCH_ROWS, columns=columns)
        return parquet(), sum(handle.metadata.num_rows for _, handle in parts)
    schema = tables.schema(path)
    check_columns(schema, columns, path, key_of)
    header = schema.names
    # Fixed types, not inferred from the first block: ids as text (the id join matches them
    # to the node ids by gnnpipe.data.ids' rule, so "007" is never node 7), weights as floats.
    types = {name: pa.string() if key in ("src", "dst") else pa.float64()
             for name, key in key_of.items() if key != "timestamp"}
    options = pacsv.ConvertOptions(include_columns=columns, column_types=types)

    def fail(err: Exception) -> ValueError:  # pyarrow counts columns; name the column too
        text = re.sub(r"column #(\d+)", lambda m: f"column #{m[1]} "
                      f"({header[int(m[1])]!r})" if int(m[1]) < len(header) else m[0],
                      reason(err, 200))
        return ValueError(f"{path}: {text}")

    def csv() -> Iterator[pa.RecordBatch]:
        try:  # open_csv already parses the first block
            reader = pacsv.open_csv(path, convert_options=options,
                                    read_options=pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES))
            while True:
                try:
                    yield reader.read_next_batch()
                except StopIteration:
                    return
        except (pa.ArrowInvalid, OSError) as err:
            raise fail(err) from None
    return csv(), None
