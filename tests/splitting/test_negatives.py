"""Negative sampling: never a true edge nor a self-loop, degree-matched option, what training may avoid."""

from __future__ import annotations

import numpy as np
import pytest

from gnnpipe.data.edges import contains
from link_oracle import training_sampler


def _dense_graph(n: int = 30, p: float = 0.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Each unordered pair is an edge with probability ``p``, stored in one random direction only:
    a sampler that checked just the stored direction would hit the reverse edges."""
    rng = np.random.default_rng(seed)
    u, v = np.triu_indices(n, k=1)
    keep = rng.random(u.size) < p
    u, v = u[keep], v[keep]
    flip = rng.random(u.size) < 0.5
    return np.where(flip, v, u), np.where(flip, u, v)


def test_negatives_never_hit_a_true_edge_in_either_direction_on_a_dense_graph():
    n = 30
    src, dst = _dense_graph(n)
    true_pairs = set(zip(src.tolist(), dst.tolist())) | set(zip(dst.tolist(), src.tolist()))
    assert len(true_pairs) / (n * (n - 1)) > 0.4  # rejection really has work to do
    heads = np.repeat(np.arange(n), 20)
    targets = training_sampler(src, dst, n).sample(heads, 50, np.random.default_rng(1))
    assert targets.shape == (heads.size, 50)
    drawn = set(zip(np.repeat(heads, 50).tolist(), targets.reshape(-1).tolist()))
    assert not drawn & true_pairs
    assert all(h != t for h, t in drawn)
    # and the sampler still reaches every allowed pair (it is not trivially conservative)
    allowed = {(h, t) for h in range(n) for t in range(n) if h != t} - true_pairs
    assert drawn == allowed


def test_same_rng_seed_gives_the_same_negatives():
    src, dst = _dense_graph()
    sampler = training_sampler(src, dst, 30)
    heads = np.arange(30)
    first = sampler.sample(heads, 10, np.random.default_rng(7))
    assert np.array_equal(first, sampler.sample(heads, 10, np.random.default_rng(7)))
    assert not np.array_equal(first, sampler.sample(heads, 10, np.random.default_rng(8)))


def test_a_head_linked_to_every_other_node_is_rejected_clearly():
    n = 6
    src, dst = np.zeros(n - 1, dtype=np.int64), np.arange(1, n)  # node 0 is linked to all
    sampler = training_sampler(src, dst, n)
    with pytest.raises(ValueError, match="node 0 is linked to every other node"):
        sampler.sample(np.array([1, 0]), 3, np.random.default_rng(0))
    # other heads still work: their only allowed targets are the leaves other than themselves
    targets = sampler.sample(np.array([1, 2]), 20, np.random.default_rng(0))
    assert not (targets == 0).any() and (targets[0] != 1).all() and (targets[1] != 2).all()


def test_self_loops_in_the_forbidden_set_do_not_fake_saturation():
    # node 0: linked to 1 and 2 and to itself; 3 is still a valid negative target
    src, dst = np.array([0, 0, 0]), np.array([0, 1, 2])
    targets = training_sampler(src, dst, 4).sample(np.array([0]), 10, np.random.default_rng(0))
    assert (targets == 3).all()


def test_degree_negatives_follow_the_degree_and_never_pick_zero_degree_targets():
    n = 200
    rng = np.random.default_rng(0)
    src = rng.integers(0, n, 600)
    dst = rng.integers(0, n, 600)
    degrees = np.zeros(n)
    degrees[:100] = np.arange(1, 101)  # nodes 100.. have degree 0 in the train graph
    sampler = training_sampler(src, dst, n, degrees)  # the train graph's degrees: weights
    targets = sampler.sample(np.arange(n), 200, np.random.default_rng(1)).reshape(-1)
    assert not (targets >= 100).any()
    counts = np.bincount(targets, minlength=n)[:100]
    # frequency proportional to degree: the top decile is drawn ~ (91..100)/(1..10) = 17x as often
    assert counts[90:].sum() / counts[:10].sum() > 10
    assert np.corrcoef(counts, degrees[:100])[0, 1] > 0.95


def test_degree_negatives_fail_clearly_when_every_weighted_target_is_a_neighbour():
    n = 5
    src, dst = np.array([0, 0]), np.array([1, 2])
    weights = np.array([0.0, 1.0, 1.0, 0.0, 0.0])  # only 1 and 2 can be drawn: both neighbours of 0
    with pytest.raises(ValueError, match="could not draw a valid negative .*negative_strategy=uniform"):
        training_sampler(src, dst, n, weights).sample(np.array([0]), 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="weights must be"):
        training_sampler(src, dst, n, np.zeros(n))


def test_training_negatives_avoid_only_what_training_sees():
    """Held-out edges are not forbidden for training: filtering them would leak them."""
    n = 8
    visible_src, visible_dst = np.array([0, 0, 0, 0, 0]), np.array([1, 2, 3, 4, 5])
    held_out = (0, 6)  # a val/test edge; training must not know it exists
    targets = training_sampler(visible_src, visible_dst, n).sample(
        np.zeros(400, dtype=np.int64), 1, np.random.default_rng(0))[:, 0]
    assert set(targets.tolist()) == {6, 7}  # 6 (the held-out edge) is drawn like any non-edge
    assert abs((targets == held_out[1]).mean() - 0.5) < 0.1


def test_contains_on_empty_and_filled_key_sets():
    assert not contains(np.array([], dtype=np.int64), np.array([1, 2])).any()
    keys = np.array([2, 5, 9])
    assert contains(keys, np.array([1, 2, 9, 10])).tolist() == [False, True, True, False]
