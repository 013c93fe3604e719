"""Link heuristics (CN, AA, RA, PA) against a plain-Python reference, as a baseline that ranks,
and which of them a relation can use (none of the shared-neighbour ones across a bipartite one)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gnnpipe.data.edges import csr_from_edges
from gnnpipe.graphops.heuristics import even_walk_labels
from gnnpipe.graphops.partition import symmetric_simple
from gnnpipe.reporting.link_heuristics import (HEURISTICS, SHARED_NEIGHBOUR, heuristic_link_scores,
                                               not_applicable, pair_scores)
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
        out["preferential_attachment"].append(float(len(neighbours[u]) * len(neighbours[v])))
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
    for name in SHARED_NEIGHBOUR:
        pos, neg_scores = scores[name]
        assert (pos > 0).all() and (neg_scores == 0).all(), name
        assert link_metrics(pos, neg_scores)["mrr"] == 1.0, name
    # every endpoint of a held-out pair has degree 4, every other node 5: popularity puts the
    # positive (4 x 4) at or below its negatives (4 x 4 or 4 x 5), never above
    pos, neg_scores = scores["preferential_attachment"]
    assert (pos == 16).all() and ((neg_scores == 16) | (neg_scores == 20)).all()
    assert link_metrics(pos, neg_scores)["mrr"] < random["mrr"]


def test_only_the_named_heuristics_are_scored_and_an_unknown_name_is_refused():
    n = 30
    src, dst = _random_edges(n, 120, 5)
    csr = csr_from_edges(src, dst, n)
    u, v = np.arange(10), np.arange(10, 20)
    every = pair_scores(csr, u, v)
    popularity = pair_scores(csr, u, v, names=("preferential_attachment",))
    assert list(popularity) == ["preferential_attachment"]
    np.testing.assert_array_equal(popularity["preferential_attachment"],
                                  every["preferential_attachment"])
    with pytest.raises(ValueError, match="unknown heuristic 'katz'"):
        pair_scores(csr, u, v, names=("katz",))


def _even_walk_reference(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """(N, N) bool: a walk of even length joins u and v (BFS over (node, parity) states)."""
    neighbours = [set() for _ in range(n)]
    for a, b in zip(src.tolist(), dst.tolist()):
        if a != b:
            neighbours[a].add(b)
            neighbours[b].add(a)
    even = np.zeros((n, n), dtype=bool)
    for start in range(n):
        seen, frontier = {(start, 0)}, [(start, 0)]
        while frontier:
            node, parity = frontier.pop()
            for w in neighbours[node]:
                if (w, 1 - parity) not in seen:
                    seen.add((w, 1 - parity))
                    frontier.append((w, 1 - parity))
        even[start, [node for node, parity in seen if parity == 0]] = True
    return even


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_even_walk_labels_equal_a_breadth_first_reference(seed):
    """Sparse random graphs (several components, some bipartite, some with odd cycles) and a
    bipartite one: equal labels exactly where an even walk joins the pair."""
    rng = np.random.default_rng(seed)
    n = 24
    if seed == 3:  # bipartite: 0..11 on one side, 12..23 on the other
        src, dst = rng.integers(0, 12, 30), rng.integers(12, 24, 30)
    else:
        src, dst = rng.integers(0, n, 18), rng.integers(0, n, 18)
    labels = even_walk_labels(symmetric_simple(csr_from_edges(src, dst, n)))
    np.testing.assert_array_equal(labels[:, None] == labels[None, :],
                                  _even_walk_reference(n, src, dst))


def _user_item(users: int = 40, items: int = 30, seed: int = 0):
    """A homogeneous graph holding a bipartite relation: users 0..U-1 rate items U..U+I-1."""
    rng = np.random.default_rng(seed)
    u = rng.integers(0, users, 200)
    i = users + rng.integers(0, items, 200)
    return csr_from_edges(np.concatenate([u, i]), np.concatenate([i, u]), users + items)


def test_a_bipartite_relation_has_no_shared_neighbour_heuristics_but_keeps_popularity():
    users, items = 40, 30
    csr = _user_item(users, items)
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, users, 500), users + rng.integers(0, items, 500)
    skipped = not_applicable(csr, src, dst)
    assert set(skipped) == set(SHARED_NEIGHBOUR)  # preferential attachment stays
    scores = pair_scores(csr, src, dst)
    for name in SHARED_NEIGHBOUR:  # what "zero by construction" means
        assert (scores[name] == 0).all(), name
    assert (scores["preferential_attachment"] > 0).mean() > 0.9
    # one user-user pair among the scored ones: two users can share an item, so CN is defined
    assert not_applicable(csr, np.r_[src, 0], np.r_[dst, 1]) == {}


def test_a_homogeneous_graph_with_odd_cycles_keeps_every_heuristic():
    n = 40
    src, dst = _random_edges(n, 160, 0)
    csr = csr_from_edges(src, dst, n)
    rng = np.random.default_rng(2)
    assert not_applicable(csr, rng.integers(0, n, 50), rng.integers(0, n, 50)) == {}
