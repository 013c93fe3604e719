"""The files of the block-wise prepare (gnnpipe/io/blocks.py, io/routed_tables.py) and its id
hashing: a streamed Parquet table has write_table's bytes, the scratch folder is a sweepable temp,
routed tables reach their buckets, equal ids meet in one bucket whatever array they come in."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pytest

from gnnpipe.data.block_ids import id_buckets
from gnnpipe.io.blocks import ROW_GROUP_ROWS, scratch_beside, table_stream
from gnnpipe.io.common import EDGES_SCHEMA
from gnnpipe.io.parquet import write_table
from gnnpipe.io.temps import TEMP_NAME


@pytest.mark.parametrize("rows", [0, 5, ROW_GROUP_ROWS + 1000])
def test_a_streamed_table_has_the_bytes_of_the_whole_table(tmp_path, rows):
    rng = np.random.default_rng(0)
    table = pa.table({"src": rng.integers(0, 100, rows), "dst": np.sort(rng.integers(0, 9, rows))})
    write_table(tmp_path / "whole.parquet", table, EDGES_SCHEMA, "gnnpipe.edges/1")
    with table_stream(tmp_path / "streamed.parquet", EDGES_SCHEMA, "gnnpipe.edges/1") as add:
        for lo in range(0, rows, 300_007):  # slices that straddle the row groups
            add(table.slice(lo, 300_007))
    digest = [hashlib.sha256((tmp_path / f"{name}.parquet").read_bytes()).hexdigest()
              for name in ("whole", "streamed")]
    assert digest[0] == digest[1]


def test_the_scratch_folder_is_a_temp_of_this_process_removed_after_an_error(tmp_path):
    with pytest.raises(RuntimeError):
        with scratch_beside(tmp_path / "prepared") as folder:
            assert TEMP_NAME.match(folder.name) and folder.parent == tmp_path
            (folder / "part.npy").write_bytes(b"x")
            raise RuntimeError("boom")
    assert not folder.exists()


def test_equal_ids_share_a_bucket_in_any_array():
    words = pa.array(["", "a", "node-17", "ü-\u00e9", "node-17", "b" * 40])
    buckets = id_buckets(words, 7)
    assert buckets[2] == buckets[4] and buckets.min() >= 0 and buckets.max() < 7
    sliced = pa.concat_arrays([pa.array(["zz", "q"]), words]).slice(2)  # an offset buffer
    assert np.array_equal(id_buckets(sliced, 7), buckets)
    assert np.array_equal(id_buckets(pa.array([3, -5, 2**40], pa.int64()), 5)[:2],
                          id_buckets(pa.array([3, -5], pa.int32()), 5))
    spread = np.bincount(id_buckets(pa.array([f"user-{i}" for i in range(7000)]), 7))
    assert spread.min() > 800  # about 1000 each


def test_block_calls_bind_their_common_arguments_out_of_dasks_graph():
    """Dask reads tuples and lists among map's kwargs as tasks (and moves large ones into a
    task of their own): ``run_blocks`` binds them to the function instead, map sees only the calls."""
    from gnnpipe.runtime.engine import run_blocks

    class Client:
        def map(self, fn, *iterables, **kwargs):
            self.kwargs = kwargs
            return [fn(*args) for args in zip(*iterables)]

        def gather(self, futures):
            return futures

    client = Client()
    got = run_blocks(client, lambda a, b, names, batches: (a, b, names, batches[a]),
                     [(0, "x"), (1, "y")], names=("src", "dst"), batches=[(0, 0), (0, 1)])
    assert got == [(0, "x", ("src", "dst"), (0, 0)), (1, "y", ("src", "dst"), (0, 1))]
    assert client.kwargs == {"pure": False}


def test_routed_tables_give_each_bucket_its_rows_from_every_producer_in_order(tmp_path):
    """One Arrow file per producer, one record batch per bucket (empty ones too)."""
    from gnnpipe.io.routed_tables import load_routed_table, save_routed_table

    schema = pa.schema([("id", pa.string()), ("row", pa.int64())])
    save_routed_table(tmp_path, "b", pa.table({"id": ["x", "y", "z"], "row": [10, 11, 12]},
                                              schema=schema), np.array([2, 0, 2]), 4)
    save_routed_table(tmp_path, "a", pa.table({"id": ["p", "q"], "row": [0, 1]}, schema=schema),
                      np.array([2, 3]), 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.arrow", "b.arrow"]
    assert load_routed_table(tmp_path, 2, schema).to_pydict() == {
        "id": ["p", "x", "z"], "row": [0, 10, 12]}  # producers in name order, rows stable
    assert load_routed_table(tmp_path, 1, schema).num_rows == 0
    assert load_routed_table(tmp_path / "none", 0, schema).schema == schema
