"""Over-smoothing measures (gnnpipe/graphops/smoothing.py) against their definitions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graph_oracle import normalize_edges, restrict
from gnnpipe.graphops.smoothing import mean_cosine_similarity, smoothing_report


def test_cosine_similarity_matches_pairwise_mean():
    h = torch.randn(40, 5, generator=torch.Generator().manual_seed(0))
    h[3] = 0  # an all-zero row has similarity 0 with everything
    unit = torch.nn.functional.normalize(h.double(), dim=1)
    sims = unit @ unit.T
    off = ~torch.eye(40, dtype=torch.bool)
    assert mean_cosine_similarity(h) == pytest.approx(float(sims[off].mean()), abs=1e-9)
    assert mean_cosine_similarity(torch.ones(10, 3) * 7) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least 2"):
        mean_cosine_similarity(torch.ones(1, 3))


def every_node(h: torch.Tensor, csr, **kw) -> dict:
    """``smoothing_report`` with every node of ``csr`` given (rounded to 6 places)."""
    return smoothing_report(torch.arange(csr.num_nodes), h, csr, **kw)


def test_dirichlet_energy_matches_definition_and_vanishes_when_smoothed():
    rng = np.random.default_rng(3)
    csr, _ = normalize_edges(rng.integers(0, 30, 80), rng.integers(0, 30, 80), 30,
                             undirected=True, dedup=True, remove_self_loops=True)
    h = torch.randn(30, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    src, dst = csr.indices, csr.targets()
    want = float(((h[dst] - h[src]) ** 2).sum()) / 30
    deg = csr.degrees().double()
    adj = torch.zeros(30, 30, dtype=torch.float64)
    adj[dst, src] = 1.0
    has = deg > 0
    inv = torch.where(has, deg.clamp_min(1).rsqrt(), torch.zeros_like(deg))
    lap = torch.diag(has.double()) - inv[:, None] * adj * inv[None, :]
    rayleigh = float(torch.trace(h.T @ lap @ h) / h[has].square().sum())
    got = every_node(h, csr)
    assert got["dirichlet_energy"] == pytest.approx(want, abs=1e-6)
    assert got["rayleigh_quotient"] == pytest.approx(rayleigh, abs=1e-6)
    constant = every_node(torch.ones(30, 4), csr)
    assert constant["dirichlet_energy"] == 0.0
    # GCN's over-smoothed limit, h_i ~ sqrt(d_i), has zero normalised energy but not zero raw energy
    limit = every_node(deg.sqrt()[:, None].repeat(1, 3), csr)
    assert limit["rayleigh_quotient"] == pytest.approx(0.0, abs=1e-6)
    assert limit["dirichlet_energy"] > 0


def test_smoothing_report_uses_only_the_given_nodes(tiny_graph):
    node_id = torch.tensor([0, 1, 2, 3])  # a path 0-1-2-3 of the ring
    h = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    got = smoothing_report(node_id, h, tiny_graph.csr)
    keep = torch.zeros(tiny_graph.num_nodes, dtype=torch.bool)
    keep[node_id] = True
    sub = restrict(tiny_graph.csr, keep)
    edges = sub.num_edges  # each stored edge joins two orthogonal unit rows: |h_i - h_j|^2 = 2
    assert got["dirichlet_energy"] == pytest.approx(2 * edges / 4, abs=1e-6)
    assert got["cosine_similarity"] == pytest.approx((2 * 2 * 1) / (4 * 3), abs=1e-6)


def test_figures_do_not_depend_on_the_block_size():
    """Row blocks of one edge (and one row) give the figures of one block: the sums really run
    block by block, and the blocks cover every edge once."""
    rng = np.random.default_rng(5)
    csr, _ = normalize_edges(rng.integers(0, 60, 300), rng.integers(0, 60, 300), 60,
                             undirected=True, dedup=True, remove_self_loops=True)
    node_id = torch.from_numpy(rng.permutation(60)[:45])  # some nodes given, in no order
    h = torch.randn(45, 3, generator=torch.Generator().manual_seed(2))
    whole = smoothing_report(node_id, h, csr)
    assert smoothing_report(node_id, h, csr, block_floats=1) == whole
    assert smoothing_report(node_id, h, csr, block_floats=7) == whole
    # and against the definition over the restricted graph (the old whole-array code)
    keep = torch.zeros(60, dtype=torch.bool)
    keep[node_id] = True
    sub = restrict(csr, keep)
    full = torch.zeros(60, 3, dtype=torch.float64)
    full[node_id] = h.double()
    src, dst = sub.indices, sub.targets()
    want = float(((full[dst] - full[src]) ** 2).sum()) / 45
    assert whole["dirichlet_energy"] == pytest.approx(want, abs=1e-6)
    tiny = every_node(full, sub, block_floats=1)
    assert tiny["dirichlet_energy"] == pytest.approx(want * 45 / 60, abs=1e-6)
