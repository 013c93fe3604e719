"""What a link training process keeps out of its anonymous memory (issue 43 item 1): the training
negative sampler's forbidden keys are built by head buckets (``negatives.forbidden_keys``) into a
mapped scratch file of the stage, and the split's link edges are read by Parquet batches
(``io.link_edge_blocks``) into mapped scratch tables; both give exactly what the in-memory reads
give, so the draws do not change."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from mapped_pages import mapped_file

from gnnpipe.data.edges import contains
from gnnpipe.io.temps import SCRATCH_ENV, SCRATCH_NAME
from gnnpipe.splitting import negatives
from gnnpipe.splitting.negatives import forbidden_keys, saturated_heads
from link_oracle import edge_keys_both_directions, training_sampler


def _edges(n: int, e: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random edges with repeats, reverse pairs and self-loops (deduplication has work)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    return np.r_[src, dst[:e // 4], 3], np.r_[dst, src[:e // 4], 3]


def _blocks(src: np.ndarray, dst: np.ndarray, size: int):
    return lambda: [(src[i:i + size], dst[i:i + size]) for i in range(0, src.size, size)]


@pytest.mark.parametrize("bucket", [2, 7, 64, 1 << 22])
@pytest.mark.parametrize("n,e", [(2, 0), (5, 4), (40, 300), (500, 4000)])
def test_keys_built_by_buckets_are_the_sorted_unique_keys(n, e, bucket, monkeypatch):
    monkeypatch.setattr(negatives, "BUCKET_KEYS", bucket)  # many buckets, chunks of a block
    src, dst = _edges(n, e) if e else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    want = edge_keys_both_directions(src, dst, n)
    got = forbidden_keys(_blocks(src, dst, 7), n)
    assert got.dtype == np.int64 and np.array_equal(got, want)
    given = {}  # a caller's array (a mapped file in a stage): the keys are its first K entries
    into = forbidden_keys(_blocks(src, dst, 5), n,
                          lambda count: given.setdefault("keys", np.full(count, -1)))
    assert np.array_equal(into, want) and (want.size == 0 or np.shares_memory(into, given["keys"]))
    partners = np.bincount(want // n, minlength=n) - contains(want, np.arange(n) * (n + 1))
    assert np.array_equal(saturated_heads(got, n), partners >= n - 1)


def test_a_saturated_head_is_found_across_buckets(monkeypatch):
    monkeypatch.setattr(negatives, "BUCKET_KEYS", 3)
    n = 7  # node 0 linked to all, with a self-loop; node 2 to all but 6
    src = np.r_[np.zeros(n, np.int64), np.full(4, 2)]
    dst = np.r_[np.arange(n), [1, 3, 4, 5]]
    assert saturated_heads(forbidden_keys(_blocks(src, dst, 3), n), n).tolist() == [
        True, False, False, False, False, False, False]


def test_a_stage_keeps_the_forbidden_keys_in_an_unlinked_scratch_file(tmp_path, monkeypatch):
    """Under a stage's scratch folder (``GNNPIPE_SCRATCH_DIR``) the keys are file pages of an
    unlinked scratch file, searched in place: the same keys and the same draws as in memory,
    and nothing left on disk."""
    src, dst = _edges(300, 2000)
    monkeypatch.setattr(negatives, "BUCKET_KEYS", 256)
    memory = training_sampler(src, dst, 300)
    assert SCRATCH_NAME.name not in mapped_file(torch.from_numpy(memory.forbidden))  # memory
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path))
    mapped = training_sampler(src, dst, 300)
    where = mapped_file(torch.from_numpy(mapped.forbidden))
    assert SCRATCH_NAME.name in where and where.endswith("(deleted)"), where
    assert np.array_equal(mapped.forbidden, memory.forbidden)
    assert np.array_equal(mapped.saturated, memory.saturated)
    heads = np.repeat(np.arange(300), 3)
    assert np.array_equal(mapped.sample(heads, 4, np.random.default_rng(1)),
                          memory.sample(heads, 4, np.random.default_rng(1)))
    del mapped
    gc.collect()
    assert not list(tmp_path.iterdir())
