"""Link heuristics (CN, AA, RA) against a plain-Python reference, and as a baseline that ranks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gnnpipe.data.edges import csr_from_edges
from gnnpipe.reporting.link_heuristics import HEURISTICS, heuristic_link_scores, pair_scores
from gnnpipe.reporting.metrics import link_metrics


def _random_edges(n: int, e: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Directed edges with repeats and self-loops: the heuristics must see the simple
    undirected graph behind them."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, e), rng.integers(0, n, e)


def _reference(n: int, src: np.ndarray, dst: np.ndarray, pairs) -> dict[str, list[float]]:
    neighbours = [set() for _ in range(n)]
    for u, v in zip(src.tolist(), dst.tolist()):
        if u != v:
            neighbours[u].add(v)
            neighbours[v].add(u)
    out = {name: [] for name in HEURISTICS}
    for u, v in pairs:
        common = neighbours[u] & neighbours[v]
        out["common_neighbours"].append(float(len(common)))
        out["adamic_adar"].append(sum(1 / math.log(len(neighbours[w])) for w in common))
        out["resource_allocation"].append(sum(1 / len(neighbours[w]) for w in common))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("budget", [1, 7, 1 << 21])
def test_scores_equal_a_plain_python_reference_on_random_graphs(seed, budget):
    n = 40
    src, dst = _random_edges(n, 160, seed)
    csr = csr_from_edges(src, dst, n)
    rng = np.random.default_rng(seed + 10)
    u, v = rng.integers(0, n, 300), rng.integers(0, n, 300)
    keep = u != v
    u, v = u[keep], v[keep]
    got = pair_scores(csr, u, v, budget=budget)
    want = _reference(n, src, dst, zip(u.tolist(), v.tolist()))
    assert (got["common_neighbours"] > 0).mean() > 0.2  # the graph is dense enough to matter
    for name in HEURISTICS:
        assert got[name].shape == (u.size,)
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=0, err_msg=name)


def test_a_common_neighbour_counts_whichever_way_its_edges_point():
    # 0 -> 2 and 2 -> 1 (directed): 2 is a common neighbour of 0 and 1, degree 2
    csr = csr_from_edges(np.array([0, 2, 3]), np.array([2, 1, 2]), 4)
    got = pair_scores(csr, np.array([0, 1, 0]), np.array([1, 0, 3]))
    np.testing.assert_allclose(got["common_neighbours"], [1, 1, 1])
    np.testing.assert_allclose(got["resource_allocation"], [1 / 3] * 3)  # deg 2 = {0, 1, 3}
    np.testing.assert_allclose(got["adamic_adar"], [1 / math.log(3)] * 3)


def test_positive_and_negative_scores_have_the_shapes_link_metrics_takes():
    n = 30
    src, dst = _random_edges(n, 120, 3)
    csr = csr_from_edges(src, dst, n)
    rng = np.random.default_rng(4)
    pos_src, pos_dst = rng.integers(0, n, 9), rng.integers(0, n, 9)
    neg = rng.integers(0, n, (9, 5))
    scores = heuristic_link_scores(csr, pos_src, pos_dst, neg)
    assert set(scores) == set(HEURISTICS)
    flat = pair_scores(csr, np.repeat(pos_src, 5), neg.reshape(-1))
    for name, (pos, neg_scores) in scores.items():
        assert pos.shape == (9,) and neg_scores.shape == (9, 5)
        np.testing.assert_array_equal(pos, pair_scores(csr, pos_src, pos_dst)[name])
        np.testing.assert_array_equal(neg_scores, flat[name].reshape(9, 5))  # row i = head i
    with pytest.raises(ValueError, match="negatives must be \\(P, K\\) with P=9"):
        heuristic_link_scores(csr, pos_src, pos_dst, neg[:4])
    with pytest.raises(ValueError, match="src and dst must be 1-D of one length"):
        pair_scores(csr, pos_src, pos_dst[:3])


def test_on_a_graph_of_cliques_every_heuristic_beats_a_random_scorer():
    # 25 cliques of 6; one edge per clique is held out, negatives are other cliques' nodes
    size, cliques = 6, 25
    n = size * cliques
    u, v = np.triu_indices(size, k=1)
    base = np.repeat(np.arange(cliques) * size, u.size)
    src, dst = base + np.tile(u, cliques), base + np.tile(v, cliques)
    held = np.arange(cliques) * u.size  # the first pair of every clique
    message = np.ones(src.size, dtype=bool)
    message[held] = False
    csr = csr_from_edges(np.concatenate([src[message], dst[message]]),
                         np.concatenate([dst[message], src[message]]), n)
    rng = np.random.default_rng(0)
    pos_src, pos_dst = src[held], dst[held]
    neg = (pos_src[:, None] + size * rng.integers(1, cliques, (cliques, 20))) % n  # other cliques
    scores = heuristic_link_scores(csr, pos_src, pos_dst, neg)
    random = link_metrics(rng.random(cliques), rng.random((cliques, 20)))
    assert random["mrr"] < 0.5
    for name, (pos, neg_scores) in scores.items():
        assert (pos > 0).all() and (neg_scores == 0).all(), name
        assert link_metrics(pos, neg_scores)["mrr"] == 1.0, name
