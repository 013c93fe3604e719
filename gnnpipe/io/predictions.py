"""The predict stage's tables (data/predict): per-node predictions, embeddings, pair scores.

Written block by block (one Parquet row group per block, so a writer never holds a second
full copy of the logits or embeddings as Arrow) into the stage's ``atomic_dir``; tagged with
their schema name like ``gnnpipe.io.parquet.write_table``; checked on read (no stage reads them
back: the readers are for users and tests).

``predictions.parquet`` (``gnnpipe.node_predictions/1``): ``node_id`` int64, ``original_id``
(the user's id: int64 or string), ``role`` string (train / val / test / unused), ``label``
(the user's label value, null when unlabelled), ``predicted`` (same type), ``top_labels``
list<label type> and ``top_probs`` list<float32> (most probable first).
``embeddings[_<type>].parquet`` (``gnnpipe.embeddings/1``): ``node_id``, ``original_id``,
``embedding`` fixed_size_list<float32 | float16>[H].
``pair_scores.parquet`` (``gnnpipe.pair_scores/1``): ``src``, ``dst`` (user ids), ``score``
float32 (the decoder's logit), ``prob`` float32 (its sigmoid).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gnnpipe.io.atomic import atomic_path
from gnnpipe.io.common import reading
from gnnpipe.io.parquet import SCHEMA_KEY, read_batches, read_table
from gnnpipe.io.prepared import node_ids_file

PREDICTIONS, EMBEDDINGS, PAIR_SCORES = ("gnnpipe.node_predictions/1", "gnnpipe.embeddings/1",
                                        "gnnpipe.pair_scores/1")
ID_TYPES = (pa.int64(), pa.string())
EMBEDDING_TYPES = {"float32": pa.float32(), "float16": pa.float16()}
DEFAULT_TOP_K = 3  # class probabilities a new graph's predictions keep per node (--top-k)


def predictions_schema(id_type: pa.DataType, label_type: pa.DataType) -> pa.Schema:
    return pa.schema([("node_id", pa.int64()), ("original_id", id_type), ("role", pa.string()),
                      ("label", label_type), ("predicted", label_type),
                      ("top_labels", pa.list_(label_type)), ("top_probs", pa.list_(pa.float32()))])


def embeddings_schema(id_type: pa.DataType, value_type: pa.DataType, dim: int) -> pa.Schema:
    return pa.schema([("node_id", pa.int64()), ("original_id", id_type),
                      ("embedding", pa.list_(value_type, dim))])


def pair_scores_schema(src_type: pa.DataType, dst_type: pa.DataType) -> pa.Schema:
    return pa.schema([("src", src_type), ("dst", dst_type), ("score", pa.float32()),
                      ("prob", pa.float32())])


def write_blocks(path: Path, schema: pa.Schema, name: str,
                 blocks: Iterable[dict[str, pa.Array]]) -> int:
    """Write ``blocks`` (column name -> Arrow array, the rows of one block) to ``path``, one
    row group per block; returns the rows written. ``path`` lies in an ``atomic_dir``: a
    failure leaves a partial file there, which the folder's rename never publishes."""
    tagged = schema.with_metadata({SCHEMA_KEY: name.encode()})
    rows = 0
    with pq.ParquetWriter(path, tagged, compression="zstd") as writer:
        for block in blocks:
            table = pa.Table.from_arrays([block[f.name] for f in schema], schema=tagged)
            writer.write_table(table, row_group_size=max(table.num_rows, 1))
            rows += table.num_rows
    return rows


def _check_node_ids(path: Path, table: pa.Table) -> None:
    ids = table.column("node_id").to_numpy()
    if not np.array_equal(ids, np.arange(ids.size)):
        raise ValueError(f"{path}: node_id must be 0..N-1 in order")


def _id_type(path: Path, schema: pa.Schema, column: str) -> pa.DataType:
    found = schema.field(column).type if column in schema.names else pa.int64()
    if found not in ID_TYPES:
        raise ValueError(f"{path}: column {column!r} must be int64 or string, found {found}")
    return found


def read_node_predictions(predict_dir: Path) -> pa.Table:
    """``predictions.parquet`` with its schema, node order and top-k lists checked."""
    path = Path(predict_dir) / "predictions.parquet"

    def expected(schema: pa.Schema) -> pa.Schema:
        return predictions_schema(_id_type(path, schema, "original_id"),
                                  _id_type(path, schema, "label"))

    table = read_table(path, expected, PREDICTIONS)
    _check_node_ids(path, table)
    labels, probs = table.column("top_labels"), table.column("top_probs")
    if table.num_rows and not pc.all(pc.equal(pc.list_value_length(labels),
                                              pc.list_value_length(probs))).as_py():
        raise ValueError(f"{path}: top_labels and top_probs differ in length on some row")
    return table


def read_embeddings(predict_dir: Path, node_type: str | None = None) -> pa.Table:
    """``embeddings.parquet`` (``embeddings_<type>.parquet`` of a typed graph), checked."""
    path = Path(predict_dir) / (f"embeddings_{node_type}.parquet" if node_type
                                else "embeddings.parquet")

    def expected(schema: pa.Schema) -> pa.Schema:
        emb = schema.field("embedding").type if "embedding" in schema.names else None
        if not isinstance(emb, pa.FixedSizeListType) or \
                emb.value_type not in EMBEDDING_TYPES.values():
            raise ValueError(f"{path}: column 'embedding' must be fixed_size_list<float32 or "
                             f"float16>, found {emb}")
        return embeddings_schema(_id_type(path, schema, "original_id"), emb.value_type,
                                 emb.list_size)

    table = read_table(path, expected, EMBEDDINGS)
    _check_node_ids(path, table)
    return table


def read_pair_scores(predict_dir: Path) -> pa.Table:
    path = Path(predict_dir) / "pair_scores.parquet"
    return read_table(path, lambda s: pair_scores_schema(_id_type(path, s, "src"),
                                                         _id_type(path, s, "dst")), PAIR_SCORES)


class StreamedIds:
    """The ``original_id`` column of a prepared node type's ``node_ids_<T>.parquet``, read
    ``batch_rows`` rows at a time: what the predict stage's writers slice
    (``slice(offset, length)`` in ascending offsets, as ``pa.Array.slice``; a lower offset
    starts a new pass), so no whole column of user ids is held, only the rows from the last
    offset asked to the end of the last batch read. ``type``: the id type; ``len()``: the node
    count. A file whose ``node_id`` is not 0..N-1 in order is refused in one line."""

    def __init__(self, prepared: Path, node_type: str, num_nodes: int,
                 batch_rows: int = 1 << 16):
        self.path = Path(prepared) / node_ids_file(node_type)
        with reading(self.path, "Parquet file"):
            handle = pq.ParquetFile(self.path)
        self.type = _id_type(self.path, handle.schema_arrow, "original_id")
        self._schema = pa.schema([("node_id", pa.int64()), ("original_id", self.type)])
        self._rows, self._batch_rows = handle.metadata.num_rows, batch_rows
        if self._rows != num_nodes:
            raise ValueError(f"{self.path}: {self._rows} ids for {num_nodes} nodes; re-run the "
                             "prepare stage")
        self._restart()

    def __len__(self) -> int:
        return self._rows

    @property
    def held(self) -> int:
        """Ids held now."""
        return len(self._held)

    def _restart(self) -> None:
        self._batches = read_batches(self.path, self._schema, "gnnpipe.node_ids/1",
                                     self._batch_rows)
        self._held, self._start = pa.array([], self.type), 0  # ids [start, start + len(held))

    def slice(self, offset: int, length: int) -> pa.Array:
        """``original_id`` of nodes ``[offset, offset + length)``."""
        if offset < self._start:
            self._restart()
        while self._start + len(self._held) < offset + length:
            batch = next(self._batches, None)
            begin = self._start + len(self._held)
            if batch is None:
                raise ValueError(f"{self.path}: ends at node {begin - 1}; re-run the prepare "
                                 "stage")
            if not np.array_equal(batch.column("node_id").to_numpy(),
                                  np.arange(begin, begin + batch.num_rows)):
                raise ValueError(f"{self.path}: node_id must be 0..{self._rows - 1} in order")
            # rows before the offset are never asked again
            skip = min(max(0, offset - self._start), len(self._held))
            self._held = pa.concat_arrays([self._held.slice(skip), batch.column("original_id")])
            self._start += skip
        return self._held.slice(offset - self._start, length)


def write_confusion(path: Path, actual: np.ndarray, predicted: np.ndarray,
                    rows: int = 1 << 16) -> None:
    """DVC's ``confusion`` plot file: ``actual,predicted`` and one line per item of ``actual`` /
    ``predicted`` int (T,) (the bytes ``write_csv`` writes for those rows), written atomically
    ``rows`` lines at a time: no Python object per item of the whole file."""
    with atomic_path(path) as tmp, open(tmp, "w") as handle:
        handle.write("actual,predicted\n")
        for a in range(0, len(actual), rows):
            pairs = zip(actual[a:a + rows].tolist(), predicted[a:a + rows].tolist())
            handle.write("".join(f"{x},{y}\n" for x, y in pairs))


__all__ = ["PREDICTIONS", "EMBEDDINGS", "PAIR_SCORES", "EMBEDDING_TYPES", "DEFAULT_TOP_K",
           "predictions_schema", "embeddings_schema", "pair_scores_schema", "write_blocks",
           "read_node_predictions", "read_embeddings", "read_pair_scores",
           "write_confusion", "StreamedIds"]

