"""SIGN precomputation against dense and scipy.sparse references."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gnnpipe.config import PropagateParams
from gnnpipe.graph import Csr, normalize_edges
from gnnpipe.propagate import normalized_adjacency, propagate


def _graph(n=37, m=90, seed=0, isolated=(), undirected=True, loops=False) -> Csr:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    if isolated:
        keep = ~(np.isin(src, isolated) | np.isin(dst, isolated))
        src, dst = src[keep], dst[keep]
    csr, _ = normalize_edges(src, dst, n, undirected=undirected, dedup=True,
                             remove_self_loops=not loops)
    return csr


def dense_adjacency(csr: Csr, norm: str, self_loops: bool) -> np.ndarray:
    n = csr.num_nodes
    a = np.zeros((n, n))
    np.add.at(a, (csr.targets().numpy(), csr.indices.numpy()), 1.0)  # row v <- sources of v
    if self_loops:
        a += np.eye(n)
    deg = a.sum(axis=1)
    with np.errstate(divide="ignore"):
        if norm == "sym":
            d = np.where(deg > 0, deg ** -0.5, 0.0)
            return d[:, None] * a * d[None, :]
        return np.where(deg > 0, 1.0 / deg, 0.0)[:, None] * a


def scipy_adjacency(csr: Csr, norm: str, self_loops: bool) -> sp.csr_matrix:
    n = csr.num_nodes
    a = sp.csr_matrix((np.ones(csr.num_edges), csr.indices.numpy(), csr.indptr.numpy()),
                      shape=(n, n))
    if self_loops:
        a = a + sp.identity(n, format="csr")
    deg = np.asarray(a.sum(axis=1)).ravel()
    with np.errstate(divide="ignore"):
        if norm == "sym":
            d = sp.diags(np.where(deg > 0, deg ** -0.5, 0.0))
            return (d @ a @ d).tocsr()
        return (sp.diags(np.where(deg > 0, 1.0 / deg, 0.0)) @ a).tocsr()


def _features(n, f=4, seed=1) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal((n, f)).astype(np.float32))


CONFIGS = [(norm, loops, block) for norm in ("sym", "rw") for loops in (True, False)
           for block in (5, 37, 1000)]


@pytest.mark.parametrize("norm, self_loops, block_rows", CONFIGS)
def test_propagate_matches_dense_powers(norm, self_loops, block_rows):
    csr = _graph()
    x = _features(csr.num_nodes)
    x_before = x.clone()
    cfg = PropagateParams(hops=3, norm=norm, self_loops=self_loops, block_rows=block_rows)
    hops = list(propagate(csr, x, cfg))
    assert len(hops) == 3
    assert torch.equal(x, x_before)  # X_0 untouched
    a_hat = dense_adjacency(csr, norm, self_loops)
    a_sp = scipy_adjacency(csr, norm, self_loops)
    want = x.double().numpy()
    want_sp = want.copy()
    for k, got in enumerate(hops, start=1):
        want = a_hat @ want
        want_sp = a_sp @ want_sp
        assert got.dtype == torch.float32 and got.shape == x.shape
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5, err_msg=f"hop {k}")
        np.testing.assert_allclose(got.numpy(), want_sp, atol=1e-5, err_msg=f"hop {k} (scipy)")


@pytest.mark.parametrize("norm", ["sym", "rw"])
@pytest.mark.parametrize("self_loops", [True, False])
def test_isolated_nodes(norm, self_loops):
    isolated = (0, 7, 36)
    csr = _graph(isolated=isolated, seed=3)
    assert all(int(csr.degrees()[v]) == 0 for v in isolated)
    x = _features(csr.num_nodes, seed=4)
    cfg = PropagateParams(hops=2, norm=norm, self_loops=self_loops, block_rows=5)
    hops = list(propagate(csr, x, cfg))
    a_hat = dense_adjacency(csr, norm, self_loops)
    want = x.double().numpy()
    for got in hops:
        want = a_hat @ want
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
        assert np.isfinite(got.numpy()).all()
        for v in isolated:  # a self-loop keeps the node's own features, none zeroes them
            expect = x[v] if self_loops else torch.zeros_like(x[v])
            assert torch.allclose(got[v], expect, atol=1e-6)


@pytest.mark.parametrize("norm", ["sym", "rw"])
def test_directed_graph_and_existing_self_loops(norm):
    """Row normalisation follows in-degree; a stored loop plus the added one counts twice."""
    csr = _graph(n=20, m=50, seed=5, undirected=False, loops=True)
    x = _features(20, seed=6)
    for self_loops in (True, False):
        cfg = PropagateParams(hops=2, norm=norm, self_loops=self_loops, block_rows=3)
        a_hat = dense_adjacency(csr, norm, self_loops)
        want = x.double().numpy()
        for got in propagate(csr, x, cfg):
            want = a_hat @ want
            np.testing.assert_allclose(got.numpy(), want, atol=1e-5)


def test_rw_rows_sum_to_one_and_sym_is_symmetric():
    csr = _graph(seed=8)
    rw = normalized_adjacency(csr, PropagateParams(norm="rw", self_loops=True)).to_dense()
    np.testing.assert_allclose(rw.sum(dim=1).numpy(), np.ones(csr.num_nodes), atol=1e-6)
    sym = normalized_adjacency(csr, PropagateParams(norm="sym", self_loops=True)).to_dense()
    np.testing.assert_allclose(sym.numpy(), sym.numpy().T, atol=1e-7)
    np.testing.assert_allclose(sym.numpy(), dense_adjacency(csr, "sym", True), atol=1e-6)


def test_tiny_graph_one_hop_is_neighbour_mean(tiny_graph):
    """x[:, 0] is the node id: rw without loops gives the mean id of each node's neighbours."""
    cfg = PropagateParams(hops=1, norm="rw", self_loops=False, block_rows=4)
    (x1,) = propagate(tiny_graph.csr, tiny_graph.x, cfg)
    csr = tiny_graph.csr
    for v in range(tiny_graph.num_nodes):
        neighbours = csr.indices[csr.indptr[v]:csr.indptr[v + 1]].double()
        assert x1[v, 0].item() == pytest.approx(neighbours.mean().item(), abs=1e-5)
        assert x1[v, 1].item() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("hops", [0, 1, 4])
def test_number_of_yielded_hops_equals_cfg_hops(hops, tiny_graph):
    out = list(propagate(tiny_graph.csr, tiny_graph.x, PropagateParams(hops=hops)))
    assert len(out) == hops
    assert all(h is not tiny_graph.x for h in out)


def test_float64_features_are_propagated_as_float32(tiny_graph):
    x64 = tiny_graph.x.double()
    (x1,) = propagate(tiny_graph.csr, x64, PropagateParams(hops=1))
    assert x1.dtype == torch.float32
    assert x64.dtype == torch.float64


def test_feature_rows_must_match_nodes(tiny_graph):
    with pytest.raises(ValueError, match="features have 11 rows for a graph of 12 nodes"):
        list(propagate(tiny_graph.csr, tiny_graph.x[:11], PropagateParams()))
