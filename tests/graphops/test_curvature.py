"""analyze's curvature sample (gnnpipe/graphops/reach.py ``edge_curvature``), drawn and computed
by block tasks from row reads of the block files: the figures of a whole-graph oracle (kept
here: the sample and ``balanced_forman`` over ``symmetric_simple(csr)`` held whole) for any
block size and chunk budget (LocalClusters: tests/graphops/test_analyze_engines.py)."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gnnpipe.config.schema import CurvatureParams
from graph_oracle import normalize_edges
from gnnpipe.graphops.partition import symmetric_simple
from gnnpipe.graphops.reach import (CHUNK_PAIRS, balanced_forman, curvature_report,
                                    edge_curvature, sample_chunks, sample_pairs,
                                    sample_positions, simple_degrees, simple_rows)
from block_files import block_graph


# ----------------------------------------------------------------------- whole-graph oracle
def sample_undirected_edges(csr, size: int, rng: np.random.Generator):
    """``size`` distinct undirected edges ``(u, v)``, ``u < v``, of a simple undirected ``csr``
    held whole, and whether that is all of them (the stored positions drawn as the blocks
    draw them, mapped by the whole CSR)."""
    indptr, indices = csr.indptr.numpy(), csr.indices.numpy()
    pos, exact = sample_positions(indices.size, size, rng)
    rows = np.searchsorted(indptr, pos, side="right") - 1  # target of each drawn position
    return (*sample_pairs(rows, indices[pos], indptr.size - 1, size, exact), exact)


def whole_graph_curvature(csr, cfg: CurvatureParams, rng: np.random.Generator,
                          chunk_pairs: int = CHUNK_PAIRS) -> dict:
    """The curvature report of a simple undirected ``csr`` held whole: ``balanced_forman``
    over all of it, chunk by chunk."""
    u, v, exact = sample_undirected_edges(csr, cfg.sample_edges, rng)
    ric = np.zeros(u.size)
    for part in sample_chunks(csr, csr.degrees().numpy(), u, v, chunk_pairs):
        ric[part] = balanced_forman(csr, u[part], v[part])
    return curvature_report(u, v, ric, exact, csr.num_edges // 2, cfg)


def block_curvature(csr, cfg: CurvatureParams, rng: np.random.Generator,
                    chunk_pairs: int = CHUNK_PAIRS, block_rows: int = 1 << 16) -> dict:
    """``edge_curvature`` of ``csr`` written as block files in a temp folder, tasks here."""
    with tempfile.TemporaryDirectory() as tmp, block_graph(csr, Path(tmp)) as folder:
        return edge_curvature(None, folder, csr.num_nodes, cfg, rng, block_rows, chunk_pairs)


def curvature_graph(seed: int, n: int = 200, m: int = 1500, undirected: bool = False):
    """Directed edges, mostly near the source id (triangles and 4-cycles), hub 0 taking a fifth
    of them; repeats and self-loops kept unless undirected (then deduplicated)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = (src + rng.integers(-6, 7, m)) % n
    dst[rng.random(m) < 0.2] = 0
    csr, _ = normalize_edges(src, dst, n, undirected=undirected, dedup=undirected,
                             remove_self_loops=False)
    return csr


@functools.cache
def whole_graph_sample(seed: int, undirected: bool, size: int, chunk_pairs: int) -> dict:
    """The oracle of ``curvature_graph(seed)``'s simple graph: once for every block size."""
    cfg = CurvatureParams(sample_edges=size, most_negative=8)
    return whole_graph_curvature(symmetric_simple(curvature_graph(seed, undirected=undirected)),
                                 cfg, np.random.default_rng(seed), chunk_pairs)


@pytest.mark.parametrize("seed, undirected", [(0, False), (1, True), (2, False)])
@pytest.mark.parametrize("block_rows", [1, 37, 1000])
def test_blocks_draw_and_measure_the_whole_graph_sample(tmp_path, seed, undirected, block_rows):
    csr = curvature_graph(seed, undirected=undirected)
    with block_graph(csr, tmp_path) as folder:
        for size, chunk_pairs in ((40, 1 << 20), (300, 500), (10**5, 2000)):
            cfg = CurvatureParams(sample_edges=size, most_negative=8)
            want = whole_graph_sample(seed, undirected, size, chunk_pairs)
            got = edge_curvature(None, folder, csr.num_nodes, cfg, np.random.default_rng(seed),
                                 block_rows, chunk_pairs)
            assert got == want, (size, chunk_pairs)
            assert want["sample"]["exact"] == (size == 10**5)
    assert list(tmp_path.iterdir()) == []


def test_simple_rows_are_the_symmetric_simple_rows(tmp_path):
    csr = curvature_graph(3, n=60, m=400)
    simple = symmetric_simple(csr)
    want = simple.indptr.numpy()
    ids = np.array([0, 5, 6, 59])
    for graph, stored in ((csr, False), (simple, True)):  # stored: the rows read as they are
        with block_graph(graph, tmp_path) as folder:
            found = [simple_degrees(lo, min(lo + 7, 60), str(folder), 60)
                     for lo in range(0, 60, 7)]
            rows = simple_rows(folder, ids, 60, stored)
        assert np.array_equal(np.concatenate([d for d, _ in found]), np.diff(want))
        assert all(same == stored for _, same in found) if stored else not all(
            same for _, same in found)
        got_indptr, got = rows.indptr.numpy(), rows.indices.numpy()
        for v in range(60):
            expected = simple.indices.numpy()[want[v]:want[v + 1]] if v in ids else []
            assert np.array_equal(got[got_indptr[v]:got_indptr[v + 1]], expected), v


@pytest.mark.parametrize("block_rows", [11, 1000])
def test_a_simple_undirected_graph_is_read_as_stored_and_gives_the_oracle(block_rows):
    simple = symmetric_simple(curvature_graph(4))
    for size, chunk_pairs in ((50, 300), (10**5, 3000)):
        cfg = CurvatureParams(sample_edges=size, most_negative=8)
        want = whole_graph_curvature(simple, cfg, np.random.default_rng(4), chunk_pairs)
        assert block_curvature(simple, cfg, np.random.default_rng(4), chunk_pairs,
                               block_rows) == want


def test_an_edgeless_graph_samples_nothing(tmp_path):
    csr, _ = normalize_edges(np.array([3]), np.array([3]), 5, undirected=False, dedup=False,
                             remove_self_loops=False)  # one self-loop: no simple edge
    cfg = CurvatureParams(sample_edges=10)
    with block_graph(csr, tmp_path) as folder:
        got = edge_curvature(None, folder, 5, cfg, np.random.default_rng(0))
    assert got == whole_graph_curvature(symmetric_simple(csr), cfg, np.random.default_rng(0))
    assert got["sample"]["edges"] == 0 and got["mean"] is None
