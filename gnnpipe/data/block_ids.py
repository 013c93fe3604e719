"""User ids to dense ids by a hash-bucketed join (the block-wise prepare,
``gnnpipe.data.prepare_tables``).

Node ``i`` is row ``i`` of the node table, so a node's dense id is its global row. Every node
block scatters its (id, row) pairs and every edge block its (id, row, end) triples to hash
buckets (``id_buckets``: the same bucket for an id in every process, whatever its integer width
or array), in one routed scratch file per block (``gnnpipe.io.routed_tables``); ``join_bucket``
then meets all copies of an id in one bucket, so it finds repeated node ids and unknown edge ids
there, and sends each edge end's dense id to its edge block (one routed file per bucket). Edge
rows are scratch rows: a typed graph's relations follow one another (``Block.base``). No process
holds more than one block or one bucket.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gnnpipe.data.ids import blanks_as_nulls, to_id_type
from gnnpipe.data.table_blocks import (DST, SRC, Block, Finding, NodeSpec, node_id_column,
                                       read_block)
from gnnpipe.io.blocks import save_routed
from gnnpipe.io.routed_tables import load_routed_table, save_routed_table
from gnnpipe.sources.base import combine, first_null


_MIX = np.uint64(0x9E3779B97F4A7C15)
_FNV = np.uint64(1099511628211)


def id_buckets(ids: pa.Array, buckets: int) -> np.ndarray:
    """A bucket in ``[0, buckets)`` per id (int64 (R,)): equal ids (as the id type) share one,
    in every process."""
    if pa.types.is_integer(ids.type):
        hashed = ids.to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64) * _MIX
    else:
        hashed = _string_hash(ids.cast(pa.string())) * _MIX
    return ((hashed >> np.uint64(33)) % np.uint64(buckets)).astype(np.int64)


def _string_hash(ids: pa.Array) -> np.ndarray:
    """A polynomial hash of each string's UTF-8 bytes, uint64 (R,), vectorised over the buffer."""
    offsets = np.frombuffer(ids.buffers()[1], dtype=np.int32)[ids.offset:ids.offset + len(ids) + 1]
    data = ids.buffers()[2]
    lo, hi = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(data, dtype=np.uint8)[lo:hi] if data is not None and hi > lo \
        else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1] - lo, np.diff(offsets)
    hashed = lengths.astype(np.uint64)
    if data.size:
        powers = np.cumprod(np.full(int(lengths.max()), _FNV, dtype=np.uint64))
        position = np.arange(data.size) - np.repeat(starts, lengths)
        terms = data.astype(np.uint64) * powers[position]
        filled = lengths > 0
        hashed[filled] += np.add.reduceat(terms, starts[filled])
    return hashed


def scatter_nodes(block: Block, spec: NodeSpec, id_type: pa.DataType, buckets: int,
                  folder: str) -> None:
    """The block's (id, row) pairs routed to their buckets as producer ``n<block start>`` of
    ``folder``."""
    ids = node_id_column(block, spec, id_type)
    rows = np.arange(block.start, block.start + block.rows, dtype=np.int64)
    save_routed_table(Path(folder), f"n{block.start:015d}", pa.table({"id": ids, "row": rows}),
                      id_buckets(ids, buckets), buckets)


def scatter_edges(block: Block, names: tuple[str, str], id_types: tuple[pa.DataType, pa.DataType],
                  buckets: tuple[int, int], folders: tuple[str, str]) -> list[Finding]:
    """The block's (id, row, end) triples of each end routed to their buckets as producer
    ``e<first row>_<end>`` of ``folders[end]`` (rows: scratch rows, ``block.base`` on); its
    type, null, blank and foreign-id findings (rows of the user's table)."""
    try:
        table = read_block(block, list(dict.fromkeys(names)))
    except ValueError as err:
        return [Finding((6, block.batch, -1), block.start, "text", (str(err),))]
    findings: list[Finding] = []
    parts = []
    batch = block.batch  # the local reader's checks are per batch
    rows = pa.array(np.arange(block.base + block.start, block.base + block.start + block.rows))
    for end, name in enumerate(names):
        given = combine(table.column(name))
        try:
            column, foreign = to_id_type(given, id_types[end])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            findings.append(Finding((6, batch, end, 0), block.start, "text", (
                f"{block.where}: edge column {name!r} is {given.type} but the node ids are "
                f"{id_types[end]}",)))
            continue
        if column.null_count:
            findings.append(Finding((6, batch, end, 1), block.start + first_null(column),
                                    "nulls", (block.where, name, "edge"), column.null_count))
            continue
        blank = blanks_as_nulls(given)
        if blank.null_count:  # a blank cell names no node: the local reader calls it missing
            findings.append(Finding((6, batch, end, 2, 0), block.start + first_null(blank),
                                    "nulls", (block.where, name, "edge"), blank.null_count))
        end_rows = rows
        if foreign is not None:
            findings.append(Finding((6, batch, end, 2, 1), block.start + int(np.argmax(foreign)),
                                    "unknown", (end,)))
            keep = pa.array(~foreign)
            column, end_rows = column.filter(keep), rows.filter(keep)
        parts.append(pa.table({"id": column, "row": end_rows,
                               "end": pa.array(np.full(len(column), end, np.int8))}))
    if not findings:
        for end, part in enumerate(parts):
            save_routed_table(Path(folders[end]), f"e{block.base + block.start:015d}_{end}", part,
                              id_buckets(part.column("id").combine_chunks(), buckets[end]),
                              buckets[end])
    return findings


def join_bucket(bucket: int, name: str, folder: str, id_type: pa.DataType,
                where: tuple[str, str], edge_starts: np.ndarray, edge_batches: list[tuple],
                mapped: str) -> list[Finding]:
    """Join bucket ``bucket`` of ``folder`` (``nodes/`` and ``edges/``); write (row, end, dense)
    int64 (m, 3) per edge block as producer ``name`` of the routed folder ``mapped``
    (``gnnpipe.io.blocks.save_routed``). ``edge_starts`` / ``edge_batches``: each edge block's
    first scratch row and local batch; ``where``: the node table and its id column. An unknown
    id's finding names its scratch row."""
    folder = Path(folder)
    nodes = load_routed_table(folder / "nodes", bucket,
                              pa.schema([("id", id_type), ("row", pa.int64())]))
    edges = load_routed_table(folder / "edges", bucket,
                              pa.schema([("id", id_type), ("row", pa.int64()), ("end", pa.int8())]))
    node_file, id_name = where
    node_id, node_row = nodes.column("id").combine_chunks(), nodes.column("row").to_numpy()
    findings = []
    distinct = pc.count_distinct(node_id).as_py() if len(node_id) else 0
    if distinct != len(node_id):  # the repeated id seen first in the file, and the extra rows
        counts = pc.value_counts(node_id)
        repeated = counts.filter(pc.greater(counts.field("counts"), 1)).field("values")
        first_rows = node_row[pc.index_in(repeated, value_set=node_id).to_numpy()]
        pick = int(np.argmin(first_rows))
        findings.append(Finding((2,), int(first_rows[pick]), "repeats",
                                (node_file, id_name, repeated[pick].as_py()),
                                len(node_id) - distinct))
        return findings
    edge_id, edge_row = edges.column("id").combine_chunks(), edges.column("row").to_numpy()
    end = edges.column("end").to_numpy().astype(np.int64)
    index = pc.index_in(edge_id, value_set=node_id)
    unknown = index.is_null().to_numpy(zero_copy_only=False)
    for side in (SRC, DST):
        missing = unknown & (end == side)
        if missing.any():
            row = int(edge_row[missing].min())
            batch = edge_batches[int(np.searchsorted(edge_starts, row, side="right")) - 1]
            findings.append(Finding((6, batch, side, 2, 1), row, "unknown", (side,)))
    if findings or not len(edge_starts):
        return findings
    dense = node_row[index.to_numpy(zero_copy_only=False).astype(np.int64)]
    block = np.searchsorted(edge_starts, edge_row, side="right") - 1
    save_routed(Path(mapped), name, np.stack([edge_row, end, dense], axis=1), block,
                len(edge_starts))
    return findings
