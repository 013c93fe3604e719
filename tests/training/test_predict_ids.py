"""The user ids predict writes beside each node, read a batch at a time (``StreamedIds``,
``RangeIds``): the same columns as the whole id column, holding about one batch."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from gnnpipe.io.parquet import write_table
from gnnpipe.io.predictions import StreamedIds
from prepared_oracle import write_node_ids
from gnnpipe.training.predict import (RangeIds, default_ids, embedding_blocks,
                                      node_prediction_blocks)

N = 103


@pytest.fixture(params=["int", "string"])
def ids(tmp_path, request):
    """A prepared folder's node ids of type ``node`` (ids ``7i + 3``, or as text) and the
    whole column."""
    values = np.arange(N, dtype=np.int64) * 7 + 3
    column = pa.array(values) if request.param == "int" else pa.array([f"u{v}" for v in values])
    write_node_ids(tmp_path, "node", column)
    return tmp_path, column


@pytest.mark.parametrize("block", [1, 10, 64, 500])
def test_streamed_slices_are_the_whole_columns_slices_twice_over(ids, block):
    folder, column = ids
    streamed = StreamedIds(folder, "node", N, batch_rows=16)
    assert len(streamed) == N and streamed.type == column.type
    for _ in range(2):  # a second pass (embeddings after predictions) starts over
        for a in range(0, N, block):
            got = streamed.slice(a, min(block, N - a))
            assert got.equals(column.slice(a, min(block, N - a)))
            assert streamed.held <= 16 + block  # one batch and the block asked, not the column


def test_range_ids_are_the_default_ids_by_block():
    ranged, whole = RangeIds(N), default_ids(N)
    assert len(ranged) == N and ranged.type == whole.type
    for a in range(0, N, 10):
        assert ranged.slice(a, 10).equals(whole.slice(a, 10))


def test_written_blocks_equal_those_of_the_whole_column(ids):
    folder, column = ids
    logits = torch.randn(N, 4, generator=torch.Generator().manual_seed(0))
    y = torch.arange(N) % 4
    roles = (np.arange(N) % 4).astype(np.int8)
    classes = pa.array(["a", "b", "c", "d"])

    def tables(original_ids):
        preds = [pa.table(b) for b in node_prediction_blocks(logits, y, roles, original_ids,
                                                              classes, 2, 16)]
        embs = [pa.table(b) for b in embedding_blocks(logits, original_ids, "float32", 16)]
        return pa.concat_tables(preds), pa.concat_tables(embs)

    streamed = StreamedIds(folder, "node", N, batch_rows=10)
    for want, got in zip(tables(column), tables(streamed)):
        assert got.equals(want)


def test_a_stale_id_file_is_refused_in_one_line(ids):
    folder, column = ids
    with pytest.raises(ValueError, match=f"{N} ids for {N + 1} nodes; re-run the prepare"):
        StreamedIds(folder, "node", N + 1)
    table = pa.table({"node_id": pa.array(np.r_[np.arange(20), np.arange(21, N + 1)]),
                      "original_id": column})
    write_table(folder / "node_ids_node.parquet", table, table.schema, "gnnpipe.node_ids/1")
    streamed = StreamedIds(folder, "node", N, batch_rows=16)
    with pytest.raises(ValueError, match=r"node_id must be 0\.\.102 in order"):
        for a in range(0, N, 16):
            streamed.slice(a, min(16, N - a))
