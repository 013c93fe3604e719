"""Table files of the user's sources: a Parquet file (or a folder of parts) or a CSV file,
each read whole (``read``) or streamed in Arrow record batches (``batches``) of about
``EDGE_BATCH_ROWS`` rows, with one-line errors naming the file and the column."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from gnnpipe.data.ids import from_text
from gnnpipe.io.common import reading
from gnnpipe.sources.base import EDGE_BATCH_ROWS, combine, reason, require_file

CSV_BLOCK_BYTES = 64 << 20  # bytes per CSV chunk (pyarrow parses a block at a time)


class ParquetTables:
    """A Parquet file, or a folder of ``*.parquet`` parts read in name order."""

    @staticmethod
    def files(path: Path) -> list[Path]:
        if path.is_dir():
            parts = sorted(path.glob("*.parquet"))
            if not parts:
                raise ValueError(f"{path}: folder holds no *.parquet files")
            return parts
        if not path.exists():
            raise ValueError(f"{path}: file not found")
        return [path]

    @staticmethod
    def _open(path: Path) -> pq.ParquetFile:
        try:
            return pq.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as err:
            raise ValueError(f"{path}: not a Parquet file ({reason(err)})") from None

    def schema(self, path: Path) -> pa.Schema:
        return self._open(self.files(path)[0]).schema_arrow

    def read(self, path: Path, columns: list[str], ids: tuple[str, ...] = ()) -> pa.Table:
        tables = []  # ids: Parquet columns are typed already
        for part in self.files(path):
            handle = self._open(part)
            _check_columns(handle.schema_arrow, columns, part)
            with reading(part, "Parquet file"):  # pages are read here, after the footer
                tables.append(handle.read(columns=columns))
        try:
            return pa.concat_tables(tables)
        except pa.ArrowInvalid as err:
            raise ValueError(f"{path}: parts disagree in column types ({err})") from None

    def batches(self, path: Path, columns: list[str], id_types: dict[str, pa.DataType],
                key_of: dict[str, str]) -> tuple[Iterator[pa.RecordBatch], int | None]:
        parts = [(part, self._open(part)) for part in self.files(path)]
        for part, handle in parts:
            _check_columns(handle.schema_arrow, columns, part, key_of)
        total = sum(handle.metadata.num_rows for _, handle in parts)

        def gen() -> Iterator[pa.RecordBatch]:
            for part, handle in parts:
                with reading(part, "Parquet file"):  # a corrupted page fails here, lazily
                    yield from handle.iter_batches(batch_size=EDGE_BATCH_ROWS, columns=columns)
        return gen(), total


class CsvTables:
    """A CSV file with a header row (``.gz`` / ``.bz2`` are decompressed on the fly)."""

    @staticmethod
    def _exists(path: Path) -> None:
        require_file(path, "a CSV table with a header row")

    def schema(self, path: Path) -> pa.Schema:
        self._exists(path)
        try:  # only the first block is parsed to learn the header
            options = pacsv.ReadOptions(block_size=1 << 20)
            return pacsv.open_csv(path, read_options=options).schema
        except (pa.ArrowInvalid, OSError, UnicodeDecodeError) as err:
            raise ValueError(f"{path}: not a readable CSV file ({reason(err)})") from None

    def read(self, path: Path, columns: list[str], ids: tuple[str, ...] = ()) -> pa.Table:
        """``columns`` of the file; the ``ids`` columns are read as text and become int64 only
        when every id is a canonical integer (``gnnpipe.data.ids``: ``00042`` stays text)."""
        self._exists(path)
        try:
            options = pacsv.ConvertOptions(include_columns=columns,
                                           column_types={name: pa.string() for name in ids})
            table = pacsv.read_csv(path, convert_options=options)
        except (pa.ArrowInvalid, OSError) as err:
            raise ValueError(f"{path}: not a readable CSV file ({reason(err)})") from None
        for name in ids:
            table = table.set_column(table.schema.get_field_index(name), name,
                                     from_text(combine(table.column(name))))
        return table

    def batches(self, path: Path, columns: list[str], id_types: dict[str, pa.DataType],
                key_of: dict[str, str]) -> tuple[Iterator[pa.RecordBatch], int | None]:
        schema = self.schema(path)
        _check_columns(schema, columns, path, key_of)
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

        def gen() -> Iterator[pa.RecordBatch]:
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
        return gen(), None


def _check_columns(schema: pa.Schema, columns: list[str], path: Path,
                   key_of: dict[str, str] | None = None) -> None:
    for name in columns:
        if name not in schema.names:
            key = f" (dataset.edges.{key_of[name]})" if key_of and name in key_of else ""
            raise ValueError(f"{path}: missing column {name!r}{key}; columns: "
                             f"{', '.join(schema.names)}")
