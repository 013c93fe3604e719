"""Table files of the user's sources: a Parquet file (or a folder of parts) or a CSV file, read
whole (``read``), with one-line errors naming the file and the column."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from gnnpipe.io.common import reading
from gnnpipe.sources.base import reason, require_file

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
    def open_file(path: Path) -> pq.ParquetFile:
        try:
            return pq.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as err:
            raise ValueError(f"{path}: not a Parquet file ({reason(err)})") from None

    def schema(self, path: Path) -> pa.Schema:
        return self.open_file(self.files(path)[0]).schema_arrow

    def read(self, path: Path, columns: list[str]) -> pa.Table:
        tables = []
        for part in self.files(path):
            handle = self.open_file(part)
            check_columns(handle.schema_arrow, columns, part)
            with reading(part, "Parquet file"):  # pages are read here, after the footer
                tables.append(handle.read(columns=columns))
        try:
            return pa.concat_tables(tables)
        except pa.ArrowInvalid as err:
            raise ValueError(f"{path}: parts disagree in column types ({err})") from None


class CsvTables:
    """A CSV file with a header row (``.gz`` / ``.bz2`` are decompressed on the fly)."""

    def schema(self, path: Path) -> pa.Schema:
        require_file(path, "a CSV table with a header row")
        try:  # only the first block is parsed to learn the header
            options = pacsv.ReadOptions(block_size=1 << 20)
            return pacsv.open_csv(path, read_options=options).schema
        except (pa.ArrowInvalid, OSError, UnicodeDecodeError) as err:
            raise ValueError(f"{path}: not a readable CSV file ({reason(err)})") from None

    def read(self, path: Path, columns: list[str], text: tuple[str, ...] = ()) -> pa.Table:
        """``columns`` of the file; the ``text`` columns read as strings, not inferred."""
        require_file(path, "a CSV table with a header row")
        try:
            options = pacsv.ConvertOptions(include_columns=columns,
                                           column_types={name: pa.string() for name in text})
            return pacsv.read_csv(path, convert_options=options)
        except (pa.ArrowInvalid, OSError) as err:
            raise ValueError(f"{path}: not a readable CSV file ({reason(err)})") from None


def check_columns(schema: pa.Schema, columns: list[str], path: Path,
                  key_of: dict[str, str] | None = None) -> None:
    """Every one of ``columns`` is in ``schema``, else one line naming the missing one and its
    ``dataset.edges`` key (``key_of``: column -> key, for an edge table)."""
    for name in columns:
        if name not in schema.names:
            key = f" (dataset.edges.{key_of[name]})" if key_of and name in key_of else ""
            raise ValueError(f"{path}: missing column {name!r}{key}; columns: "
                             f"{', '.join(schema.names)}")
