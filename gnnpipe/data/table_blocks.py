"""The user's node and edge tables (``dataset.source: parquet | csv``) read and checked by blocks.

A block is one Parquet row group (a CSV table is first converted, streaming, to scratch Parquet
parts of one row group each) with its first global row, so every check names the row of the
user's file that ``gnnpipe.sources.tables`` names. A check that fails in a block comes back as a
``Finding`` rather than an exception: the caller adds up the findings of all blocks (null and
NaN counts are per column, not per block) and raises the one the local reader would have met
first, with the local reader's message (``message`` formats it with ``gnnpipe.sources.base``'s
own validators).

The edges' ids are checked as they are joined to the nodes' (``gnnpipe.data.block_ids``).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import torch

from gnnpipe.config import DatasetParams
from gnnpipe.data.ids import blanks_as_nulls, canonical_ints
from gnnpipe.io.blocks import write_part, write_rows
from gnnpipe.io.common import FEATURE_DTYPES, reading
from gnnpipe.io.prepared_maps import raw_dtype
from gnnpipe.sources.base import (EDGE_BATCH_ROWS, RowError, check_finite, check_no_nulls,
                                  class_codes, combine, feature_columns, first_null, int_times,
                                  is_numeric, is_timestamp_type, label_values, reason, time_key)
from gnnpipe.sources.formats import CSV_BLOCK_BYTES, CsvTables, ParquetTables, check_columns

# numpy has no bfloat16: its bits are kept as uint16 (as features_<T>.npy holds them)
STORED_NUMPY = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}
SRC, DST = 0, 1


@dataclass(frozen=True)
class BlockSizes:
    """Targets of the block sizes (tests make them tiny to get many blocks)."""

    bucket_rows: int = 1 << 22  # node ids + edge ends per join bucket
    row_block_edges: int = 1 << 22  # stored edges per CSR row block
    csv_block_bytes: int = CSV_BLOCK_BYTES  # edge CSV blocks
    node_csv_bytes: int = 1 << 20  # node CSV blocks (pyarrow's default)


SIZES = BlockSizes()


@dataclass(frozen=True)
class Block:
    """Rows ``[start, start + rows)`` of a table: row group ``group`` of the Parquet ``file``;
    ``where`` names the user's table in messages; ``batch`` orders the local reader's edge
    batches (part, then batch within it; a typed relation's index first), whose checks run one
    batch at a time; ``base``: the scratch row of the table's row 0 (the relations of a typed
    graph follow one another in the id join)."""

    file: str
    group: int
    start: int
    rows: int
    where: str
    batch: tuple = ()
    base: int = 0


@dataclass(frozen=True)
class Finding:
    """A failed check. ``key`` orders checks as the local reader meets them; findings of one key
    add their ``count`` and keep the smallest ``first`` (a global row). ``kind`` and ``args``
    say how ``message`` words it."""

    key: tuple
    first: int
    kind: str  # nulls | finite | repeats | unknown | text
    args: tuple
    count: int = 0


def message(finding: Finding) -> str:
    """The local reader's one-line message for ``finding`` (all blocks added up)."""
    kind, args, first, count = finding.kind, finding.args, finding.first, finding.count
    try:
        if kind == "nulls":  # file, name, what
            check_no_nulls(pa.nulls(count), *args, offset=first)
        elif kind == "finite":  # file, [name], what
            check_finite(np.full(count, np.nan), *args, offset=first)
        elif kind == "repeats":  # file, name, value: count extra rows
            return (f"{args[0]}: id column {args[1]!r} has repeated ids (first: {args[2]!r}, "
                    f"{count} extra rows)")
        else:
            return args[0]
    except ValueError as err:
        return str(err)
    raise AssertionError(f"finding {finding} formats no error")


def raise_first(findings: list[Finding], unknown) -> None:
    """Raise the finding the local reader meets first, if any: the smallest key, the counts of
    that key added; an unknown id's line is ``unknown(finding)`` (a ValueError naming the id,
    read back from its block)."""
    if not findings:
        return
    key = min(f.key for f in findings)
    same = [f for f in findings if f.key == key]
    first = min(same, key=lambda f: f.first)
    finding = Finding(key, first.first, first.kind, first.args, sum(f.count for f in same))
    if finding.kind == "unknown":
        raise unknown(finding)
    raise ValueError(message(finding))


# ----------------------------------------------------------------------------------- blocks
def parquet_blocks(path: Path, columns: list[str], key_of: dict[str, str] | None = None
                   ) -> list[Block]:
    """The row groups of a Parquet file (or folder of parts, name order), checked for
    ``columns`` (``key_of``: column -> params key, for the message, given for an edge table;
    the parts of a node table must agree in column types, as the local reader concatenates
    them)."""
    blocks, start, first = [], 0, None
    for index, part in enumerate(ParquetTables.files(path)):
        part_start = start
        handle = ParquetTables.open_file(part)
        check_columns(handle.schema_arrow, columns, part, key_of)
        types = [handle.schema_arrow.field(name).type for name in columns]
        first = first or (part, types)
        if types != first[1] and key_of is None:  # the local reader's concat of the parts fails alike
            name, found, want = next((c, t, w) for c, t, w in zip(columns, types, first[1])
                                     if t != w)
            raise ValueError(f"{path}: parts disagree in column types (column {name!r} is "
                             f"{found} in {part.name}, {want} in {first[0].name})")
        for group in range(handle.num_row_groups):
            rows = handle.metadata.row_group(group).num_rows
            blocks.append(Block(str(part), group, start, rows, str(path),
                                (index, (start - part_start) // EDGE_BATCH_ROWS)))
            start += rows
    return blocks


def csv_blocks(path: Path, columns: list[str], types: dict[str, pa.DataType], folder: Path,
               block_bytes: int, key_of: dict[str, str] | None = None) -> list[Block]:
    """Convert the CSV ``path`` (``columns``; ``types`` fixed, the rest inferred from its first
    block) to scratch Parquet parts in ``folder``, one block of about ``block_bytes`` each,
    streaming (one block in memory). An inferred column a later block cannot convert is widened
    as the whole-file reader infers it (integers to decimals to text) and the file read again.
    ``key_of`` (column -> params key) for an edge table, checked for ``columns`` first."""
    schema = CsvTables().schema(path)
    if key_of is not None:
        check_columns(schema, columns, path, key_of)
    header = schema.names
    fixed, types = set(types), dict(types)
    while True:
        try:
            return _csv_parts(path, columns, types, folder, block_bytes)
        except (pa.ArrowInvalid, OSError) as err:
            late = re.match(r"In CSV column #(\d+): (?:Row #\d+: )?CSV conversion error to "
                            r"(int64|double)", str(err))
            name = header[int(late[1])] if late and int(late[1]) < len(header) else None
            if name is None or name in fixed:
                text = reason(err, 200)
                if key_of is not None:  # as the local edge reader words it: the column by name too
                    text = re.sub(r"column #(\d+)", lambda m: f"column #{m[1]} "
                                  f"({header[int(m[1])]!r})" if int(m[1]) < len(header) else m[0],
                                  text)
                    raise ValueError(f"{path}: {text}") from None
                raise ValueError(f"{path}: not a readable CSV file ({reason(err)})") from None
            types[name] = _WIDER[late[2]]


_WIDER = {"int64": pa.float64(), "double": pa.string()}  # a late cell that does not convert


def _csv_parts(path: Path, columns: list[str], types: dict[str, pa.DataType], folder: Path,
               block_bytes: int) -> list[Block]:
    blocks, start = [], 0
    reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=block_bytes),
                            convert_options=pacsv.ConvertOptions(include_columns=columns,
                                                                 column_types=types))
    for batch in reader:
        if not batch.num_rows:
            continue
        part = folder / f"{len(blocks):06d}.parquet"
        write_part(part, pa.Table.from_batches([batch]))
        blocks.append(Block(str(part), 0, start, batch.num_rows, str(path), (len(blocks),)))
        start += batch.num_rows
    return blocks


def read_block(block: Block, columns: list[str]) -> pa.Table:
    with reading(block.file, "Parquet file"):
        return pq.ParquetFile(block.file).read_row_group(block.group, columns=columns)


# ------------------------------------------------------------------------------ node blocks
@dataclass(frozen=True)
class NodeSpec:
    """What a node block holds: ``id``, ``label`` (none: ""), ``width`` features ``features``
    (one list column of that length when ``is_list``; none: a featureless type), ``text_ids``
    (CSV: ids read as text), ``unlabeled`` values, an optional ``timestamp`` column
    (``whole_times``: stored as int64, a float must be whole: the typed rule)."""

    id: str
    label: str
    features: tuple[str, ...]
    is_list: bool
    width: int
    text_ids: bool
    unlabeled: tuple = ()
    feature_dtype: str = "float32"
    timestamp: str = ""
    whole_times: bool = False


@dataclass
class NodeScan:
    """A node block's checks and what the whole table needs from it: whether its text ids are
    all canonical integers, its distinct labels (int64 or string) and labelled rows."""

    findings: list[Finding] = field(default_factory=list)
    canonical: bool = True
    classes: pa.Array | None = None
    labelled: int = 0
    label_type: pa.DataType | None = None


def node_columns(spec: NodeSpec) -> list[str]:
    return list(dict.fromkeys([spec.id] + ([spec.label] if spec.label else [])
                              + [*spec.features] + ([spec.timestamp] if spec.timestamp else [])))


def node_spec(schema: pa.Schema, cfg: DatasetParams, path: Path, *, typed: bool) -> NodeSpec:
    """What a node table of ``schema`` is read with (``width`` 0: its first block tells), else
    one line naming the missing column's key. A typed table's feature, label and timestamp
    columns are optional (a featureless, unlabelled or untimed type), its times stored whole."""
    spec = cfg.nodes
    named = {"id": spec.id, "label": spec.label, "timestamp": spec.timestamp}
    for key, name in named.items():
        if name and name not in schema.names and (key == "id" or not typed):
            raise ValueError(f"{path}: missing column {name!r} (dataset.nodes.{key}); "
                             f"columns: {', '.join(schema.names)}")
    has = {key: bool(name) and name in schema.names for key, name in named.items()}
    features, is_list = [], False
    if not typed or _has_features(schema, spec.features, set(named.values())):
        features, is_list = feature_columns(schema, spec.features, set(named.values()), path)
    return NodeSpec(id=spec.id, label=spec.label if has["label"] else "",
                    features=tuple(features), is_list=is_list, width=0,
                    text_ids=cfg.source == "csv", unlabeled=spec.unlabeled_values,
                    feature_dtype=cfg.storage.feature_dtype,  # float32 for typed (params rule)
                    timestamp=spec.timestamp if has["timestamp"] else "", whole_times=typed)


def _has_features(schema: pa.Schema, spec: str, exclude: set[str]) -> bool:
    """Whether any part of ``dataset.nodes.features`` names a column of this table."""
    if spec in schema.names:
        return True
    return any(fnmatch.fnmatchcase(c, part.strip()) and c not in exclude
               for part in spec.split(",") for c in schema.names)


def scan_nodes(block: Block, spec: NodeSpec, x_file: str, time_file: str = "") -> NodeScan:
    """Check a node block's ids, features, timestamps and labels (the local order) and write its
    features, rounded to the stored dtype, and its times (``time_key``) to rows ``[start, start
    + rows)`` of the ``.npy`` files ``x_file`` and ``time_file``."""
    scan = NodeScan()
    try:
        table = read_block(block, node_columns(spec))
    except ValueError as err:
        scan.findings.append(Finding((0,), block.start, "text", (str(err),)))
        return scan
    where, start = block.where, block.start
    ids = _ids(table.column(spec.id), spec)
    if ids.null_count:
        scan.findings.append(Finding((1, 0), start + first_null(ids), "nulls",
                                     (where, spec.id, "id"), ids.null_count))
        return scan
    if spec.text_ids:
        scan.canonical = bool(canonical_ints(ids)[1].all())
    elif not (pa.types.is_integer(ids.type) or pa.types.is_string(ids.type)
              or pa.types.is_large_string(ids.type)):
        scan.findings.append(Finding((1, 1), start, "text", (
            f"{where}: id column {spec.id!r} is {ids.type}; expected integer or string ids",)))
        return scan
    if not table.num_rows:  # an empty table: no feature or time file to write (build: "no nodes")
        return scan
    x = _features(table, spec, block, scan.findings) if spec.features else None
    if x is not None:
        stored = torch.from_numpy(x).to(FEATURE_DTYPES[spec.feature_dtype])
        if spec.feature_dtype == "bfloat16":
            stored = stored.view(torch.int16)
        write_rows(Path(x_file), start, stored.numpy().view(STORED_NUMPY[spec.feature_dtype]))
    if spec.timestamp:
        _times(combine(table.column(spec.timestamp)), spec.timestamp, block, scan.findings,
               time_file, spec.whole_times)
    if not spec.label:
        return scan
    try:  # ``label_codes``' per-row checks, rows global
        missing, values = label_values(table.column(spec.label), where, spec.label,
                                       spec.unlabeled, start)
    except RowError as err:
        scan.findings.append(Finding((4, err.step), err.row, "text", (str(err),)))
        return scan
    scan.classes = pc.unique(values)
    scan.labelled = int((~missing).sum())
    scan.label_type = values.type
    return scan


def _ids(column: pa.ChunkedArray, spec: NodeSpec) -> pa.Array:
    column = combine(column)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return blanks_as_nulls(column) if spec.text_ids else column


def node_id_column(block: Block, spec: NodeSpec, id_type: pa.DataType) -> pa.Array:
    """The block's ids as the table's id type (checked by ``scan_nodes``)."""
    ids = _ids(read_block(block, [spec.id]).column(spec.id), spec)
    return canonical_ints(ids)[0] if spec.text_ids and pa.types.is_integer(id_type) else ids


def _features(table: pa.Table, spec: NodeSpec, block: Block, findings: list[Finding]
              ) -> np.ndarray | None:
    """float32 (B, F) rows of the block, or None after a finding (``sources.base.features``'s
    checks, rows and counts global)."""
    where, start, names = block.where, block.start, list(spec.features)
    if spec.is_list:
        name = names[0]
        column = combine(table.column(name))
        if column.null_count:
            findings.append(Finding((3, 0, 0), start + first_null(column), "nulls",
                                    (where, name, "feature"), column.null_count))
            return None
        lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
        if lengths.size and (lengths != spec.width).any():
            bad = int(np.argmax(lengths != spec.width))
            findings.append(Finding((3, 0, 1), start + bad, "text", (
                f"{where}: feature column {name!r} has lists of different lengths ({spec.width} "
                f"in row 0, {lengths[bad]} in row {start + bad})",)))
            return None
        flat = column.flatten()
        if not is_numeric(flat.type):
            findings.append(Finding((3, 0, 2), start, "text", (
                f"{where}: feature column {name!r} holds {flat.type}; expected numbers",)))
            return None
        if flat.null_count:
            row = start + first_null(flat) // max(spec.width, 1)
            findings.append(Finding((3, 0, 3), row, "text", (
                f"{where}: feature column {name!r} has null entries (first: row {row})",)))
            return None
        x = flat.to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(column),
                                                                           spec.width)
    else:
        x = np.empty((table.num_rows, len(names)), dtype=np.float32)
        for j, name in enumerate(names):
            column = combine(table.column(name))
            if column.null_count:
                findings.append(Finding((3, j, 0), start + first_null(column), "nulls",
                                        (where, name, "feature"), column.null_count))
                return None
            x[:, j] = column.to_numpy(zero_copy_only=False)
    bad = ~np.isfinite(x)
    if bad.any():  # a list column's rows with a bad entry, else the first bad column's rows
        j = 0 if spec.is_list else int(np.argmax(bad.any(axis=0)))
        rows = bad.any(axis=1) if spec.is_list else bad[:, j]
        findings.append(Finding((3, 99, j), start + int(np.argmax(rows)), "finite",
                                (where, [names[j]], "feature"), int(rows.sum())))
        return None
    return x


def _numbers(column: pa.Array, name: str, what: str, type_error: str, as_numbers,
             block: Block, key: tuple, findings: list[Finding]) -> np.ndarray | None:
    """A column's checks in the reader's order (``key`` orders them, counts global): its type
    (``type_error``: the message, "" when it is right), nulls, NaN / inf among its numbers
    ``as_numbers(column)`` (R,); those numbers, or None after a finding."""
    if type_error:
        findings.append(Finding((*key, 0), block.start, "text", (type_error,)))
        return None
    if column.null_count:
        findings.append(Finding((*key, 1), block.start + first_null(column), "nulls",
                                (block.where, name, what), column.null_count))
        return None
    values = as_numbers(column)
    bad = ~np.isfinite(values)
    if bad.any():
        findings.append(Finding((*key, 2), block.start + int(np.argmax(bad)), "finite",
                                (block.where, [name], what), int(bad.sum())))
        return None
    return values


def _times(column: pa.Array, name: str, block: Block, findings: list[Finding], time_file: str,
           whole: bool, key: tuple = (3, 200)) -> bool:
    """A timestamp column checked (ints, floats, dates or timestamps; no nulls, no NaN: counts
    global, ``key`` orders them) and the block's ``time_key`` values written into ``time_file``
    (``whole``: as int64, ``int_times``); whether it passed."""
    type_error = "" if is_timestamp_type(column.type) else (
        f"{block.where}: timestamp column {name!r} is {column.type}; expected integers, floats, "
        f"dates or timestamps")
    values = _numbers(column, name, "timestamp", type_error, time_key, block, key, findings)
    if values is None:
        return False
    if whole:
        try:
            values = int_times(values, block.where, block.start)
        except RowError as err:  # key (99,): the typed graph checks it last
            findings.append(Finding((99,), err.row, "text", (str(err),)))
            return False
    write_rows(Path(time_file), block.start, values)
    return True


def time_dtype(column_type: pa.DataType) -> np.dtype:
    """The dtype ``time_key`` gives a timestamp column of this type: int64 or float64."""
    return time_key(pa.array([], column_type)).dtype


# ------------------------------------------------------------------------------------ labels
def label_codes_block(block: Block, spec: NodeSpec, classes: pa.Array, y_file: str) -> None:
    """Write the block's class codes (int64, -1 unlabelled; ``classes`` sorted) to rows
    ``[start, start + rows)`` of the ``.npy`` ``y_file``."""
    column = read_block(block, [spec.label]).column(spec.label)
    missing, values = label_values(column, block.where, spec.label, spec.unlabeled, block.start)
    write_rows(Path(y_file), block.start, class_codes(missing, values, classes))


# ------------------------------------------------------------------------- edge attributes
def edge_attrs(block: Block, weight: str, timestamp: str, weight_file: str, raw_file: str,
               order_file: str, whole: bool = False) -> list[Finding]:
    """An edge block's weight and timestamp columns checked (after the ids: keys ``(6, batch,
    2)`` and ``(6, batch, 3)``); rows ``[start, start + rows)`` of ``weight_file`` (float32),
    ``raw_file`` (the timestamps' bits) and ``order_file`` (their ``time_key``; ``whole``:
    int64, a typed graph's, ``int_times``) written, each only when named."""
    findings: list[Finding] = []
    table = read_block(block, [c for c in (weight, timestamp) if c])
    where, start = block.where, block.start
    if weight:
        column = combine(table.column(weight))
        type_error = "" if is_numeric(column.type) else (
            f"{where}: weight column {weight!r} is {column.type}; expected numbers")
        values = _numbers(column, weight, "weight", type_error, lambda c: c.to_numpy(
            zero_copy_only=False).astype(np.float32), block, (6, block.batch, 2), findings)
        if values is not None and weight_file:
            write_rows(Path(weight_file), start, values)
    if timestamp:
        column = combine(table.column(timestamp))
        if _times(column, timestamp, block, findings, order_file, whole, (6, block.batch, 3)) \
                and raw_file:
            bits = column.view(_INT_TYPES[column.type.bit_width]).to_numpy(zero_copy_only=False)
            write_rows(Path(raw_file), start, bits.astype(raw_dtype(column.type)))
    return findings


_INT_TYPES = {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}  # by bit width
