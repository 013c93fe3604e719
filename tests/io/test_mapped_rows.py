"""gnnpipe/io/mapped_rows.py: gathered rows equal numpy's indexing (ids in any order with
repeats, ascending ids, slices; 1-D and 2-D; one window or many, found by a sort or by masks;
read or through the map), dense windows are read and sparse ones mapped, and rows outside the
array raise naming the file."""

from __future__ import annotations

import numpy as np
import pytest

from gnnpipe.io import mapped_rows
from gnnpipe.io.mapped_rows import gather, gather_npy, npy_layout


def _requests(n: int, rng: np.random.Generator) -> list:
    """Row requests of every kind ``gather`` tells apart."""
    ids = rng.integers(0, n, 3 * n)  # repeats, any order, dense
    return [ids, np.sort(ids), np.unique(rng.integers(0, n, n // 9)), ids[:5], ids[:1],
            np.array([n - 1, 0, n // 2]), slice(5, n - 7), slice(n - 1, 2, -3), slice(4, 4),
            ids[:0]]


@pytest.mark.parametrize("shape, dtype", [((1000,), np.int64), ((700, 5), np.float32),
                                          ((300, 3), np.uint16), ((101,), np.int32)])
@pytest.mark.parametrize("window_bytes", [64, 1 << 20])  # many windows, one window
@pytest.mark.parametrize("row_bytes", [1 << 30, -1 << 30])  # every window read, every row mapped
@pytest.mark.parametrize("masked", [0, 1000])  # ids in no order: sorted by window, or masked
def test_gather_equals_numpy_indexing(tmp_path, monkeypatch, shape, dtype, window_bytes,
                                      row_bytes, masked):
    monkeypatch.setattr(mapped_rows, "WINDOW_BYTES", window_bytes)
    monkeypatch.setattr(mapped_rows, "MASKED_WINDOWS", masked)
    monkeypatch.setattr(mapped_rows, "MAPPED_ROW_BYTES", row_bytes)
    monkeypatch.setattr(mapped_rows, "ORDERED_ROW_BYTES", row_bytes)
    monkeypatch.setattr(mapped_rows, "RELEASE_ROWS", 7)
    array = (np.arange(int(np.prod(shape))) % 50_000).astype(dtype).reshape(shape)
    np.save(tmp_path / "a.npy", array)
    for rows in _requests(shape[0], np.random.default_rng(0)):
        got = gather_npy(tmp_path / "a.npy", rows)
        assert got.dtype == dtype and np.array_equal(got, array[rows])


def test_dense_windows_are_read_and_sparse_ones_mapped(tmp_path, monkeypatch):
    monkeypatch.setattr(mapped_rows, "WINDOW_BYTES", 80_000)  # 10k int64 rows a window
    mapped = []
    real = mapped_rows._mapped
    monkeypatch.setattr(mapped_rows, "_mapped", lambda *args: (
        mapped.extend(w for _, w in args[4]), real(*args))[1])
    array = np.arange(30_000, dtype=np.int64)
    np.save(tmp_path / "a.npy", array)
    dense = np.arange(0, 10_000, 3)  # the first window, a third of its rows
    sparse = np.array([10_000, 15_000, 19_999, 20_000, 29_999])  # two windows, a few rows
    for ids in (np.concatenate([dense, sparse]), np.concatenate([sparse, dense[::-1]])):
        mapped.clear()
        assert np.array_equal(gather_npy(tmp_path / "a.npy", ids), array[ids])
        assert sorted(np.concatenate(mapped).tolist()) == sparse.tolist()
    mapped.clear()
    assert np.array_equal(gather_npy(tmp_path / "a.npy", slice(0, 30_000)), array)
    assert mapped == []


def test_raw_rows_at_an_offset(tmp_path):
    array = np.arange(40, dtype=np.float32).reshape(10, 4)
    (tmp_path / "raw").write_bytes(b"x" * 13 + array.tobytes())
    for rows in (np.array([9, 0, 3]), slice(2, 9)):
        assert np.array_equal(gather(tmp_path / "raw", 13, np.float32, (10, 4), rows),
                              array[rows])


def test_npy_layout_reads_the_header_only(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((6, 2), dtype=np.uint16))
    shape, dtype, offset = npy_layout(tmp_path / "a.npy")
    assert (shape, dtype) == ((6, 2), np.uint16)
    assert offset == (tmp_path / "a.npy").stat().st_size - 24


@pytest.mark.parametrize("ids", [[5], [-1], [0, 4, 7]])
def test_out_of_range_rows_raise_naming_the_file(tmp_path, ids):
    np.save(tmp_path / "a.npy", np.arange(5))
    with pytest.raises(IndexError, match=r"a\.npy: rows outside \[0, 5\)"):
        gather_npy(tmp_path / "a.npy", np.array(ids))
