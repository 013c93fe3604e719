"""gnnpipe/io/mapped_rows.py: gathered rows equal numpy's indexing (ids, slices, 1-D and 2-D,
batches smaller than the request), and the file's pages are dropped as the gather goes."""

from __future__ import annotations

import numpy as np
import pytest

from gnnpipe.io import mapped_rows
from gnnpipe.io.mapped_rows import gather, gather_npy


@pytest.mark.parametrize("shape, dtype", [((1000,), np.int64), ((700, 5), np.float32),
                                          ((300, 3), np.uint16)])
def test_gather_equals_numpy_indexing(tmp_path, monkeypatch, shape, dtype):
    monkeypatch.setattr(mapped_rows, "RELEASE_ROWS", 7)
    monkeypatch.setattr(mapped_rows, "RELEASE_BYTES", 64)
    array = (np.arange(int(np.prod(shape))) % 50_000).astype(dtype).reshape(shape)
    np.save(tmp_path / "a.npy", array)
    rng = np.random.default_rng(0)
    ids = np.unique(rng.integers(0, shape[0], 123))
    assert np.array_equal(gather_npy(tmp_path / "a.npy", ids), array[ids])
    shuffled = rng.permutation(ids)
    assert np.array_equal(gather_npy(tmp_path / "a.npy", shuffled), array[shuffled])
    assert np.array_equal(gather_npy(tmp_path / "a.npy", slice(5, 250)), array[5:250])
    assert gather_npy(tmp_path / "a.npy", np.zeros(0, dtype=np.int64)).shape == (0, *shape[1:])


def test_raw_rows_at_an_offset(tmp_path):
    array = np.arange(40, dtype=np.float32).reshape(10, 4)
    (tmp_path / "raw").write_bytes(b"x" * 13 + array.tobytes())
    assert np.array_equal(gather(tmp_path / "raw", 13, np.float32, (10, 4), np.array([9, 0, 3])),
                          array[[9, 0, 3]])


def test_out_of_range_rows_raise(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(5))
    with pytest.raises(IndexError):
        gather_npy(tmp_path / "a.npy", np.array([5]))
