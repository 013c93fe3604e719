"""analyze's curvature sample by blocks (gnnpipe/graphops/curvature_blocks.py): the figures of
``edge_curvature(symmetric_simple(csr))`` for any block size and chunk budget, drawn and
computed from row reads of the block files (LocalClusters: tests/graphops/test_dask_analyze.py)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from gnnpipe.config.schema import CurvatureParams
from gnnpipe.data.edges import normalize_edges
from gnnpipe.graphops.curvature_blocks import edge_curvature_blocks, simple_degrees, simple_rows
from gnnpipe.graphops.partition import symmetric_simple
from gnnpipe.graphops.reach import edge_curvature
from gnnpipe.io.csr_blocks import block_graph


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
    """``edge_curvature`` of ``curvature_graph(seed)``'s simple graph: once for every block size."""
    cfg = CurvatureParams(sample_edges=size, most_negative=8)
    return edge_curvature(symmetric_simple(curvature_graph(seed, undirected=undirected)), cfg,
                          np.random.default_rng(seed), chunk_pairs)


@pytest.mark.parametrize("seed, undirected", [(0, False), (1, True), (2, False)])
@pytest.mark.parametrize("block_rows", [1, 37, 1000])
def test_blocks_draw_and_measure_the_whole_graph_sample(tmp_path, seed, undirected, block_rows):
    csr = curvature_graph(seed, undirected=undirected)
    with block_graph(csr, tmp_path) as folder:
        for size, chunk_pairs in ((40, 1 << 20), (300, 500), (10**5, 2000)):
            cfg = CurvatureParams(sample_edges=size, most_negative=8)
            want = whole_graph_sample(seed, undirected, size, chunk_pairs)
            got = edge_curvature_blocks(None, folder, csr.num_nodes, cfg,
                                        np.random.default_rng(seed), block_rows, chunk_pairs)
            assert got == want, (size, chunk_pairs)
            assert want["sample"]["exact"] == (size == 10**5)
    assert list(tmp_path.iterdir()) == []


def test_simple_rows_are_the_symmetric_simple_rows(tmp_path):
    csr = curvature_graph(3, n=60, m=400)
    simple = symmetric_simple(csr)
    want = simple.indptr.numpy()
    with block_graph(csr, tmp_path) as folder:
        degree = np.concatenate([simple_degrees(lo, min(lo + 7, 60), str(folder), 60)
                                 for lo in range(0, 60, 7)])
        ids = np.array([0, 5, 6, 59])
        rows = simple_rows(folder, ids, 60)
    assert np.array_equal(degree, np.diff(want))
    got_indptr, got = rows.indptr.numpy(), rows.indices.numpy()
    for v in range(60):
        expected = simple.indices.numpy()[want[v]:want[v + 1]] if v in ids else []
        assert np.array_equal(got[got_indptr[v]:got_indptr[v + 1]], expected), v


def test_an_edgeless_graph_samples_nothing(tmp_path):
    csr, _ = normalize_edges(np.array([3]), np.array([3]), 5, undirected=False, dedup=False,
                             remove_self_loops=False)  # one self-loop: no simple edge
    cfg = CurvatureParams(sample_edges=10)
    with block_graph(csr, tmp_path) as folder:
        got = edge_curvature_blocks(None, folder, 5, cfg, np.random.default_rng(0))
    assert got == edge_curvature(symmetric_simple(csr), cfg, np.random.default_rng(0))
    assert got["sample"]["edges"] == 0 and got["mean"] is None
