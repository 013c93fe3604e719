"""The verdict with its uncertainty: known answers on generated per-item scores."""

import numpy as np
import pytest

from gnnpipe.reporting.verdict import Gap, judge, paired_gap, sentence


def _scores(n: int, p: float, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < p).astype(float)


def test_interval_covers_the_true_gap_at_about_the_nominal_rate():
    """Two models right with probability 0.8 and 0.7, independently per item: over 200 test
    sets of 300 items the 95% interval holds the true gap 0.1 about 95% of the time."""
    covered = 0
    for k in range(200):
        gap = paired_gap(_scores(300, 0.8, 2 * k), _scores(300, 0.7, 2 * k + 1), 400, k)
        covered += gap.low <= 0.1 <= gap.high
    assert 180 <= covered <= 198


def test_pairing_cancels_what_both_models_share():
    """The same hard items for both: the paired interval is far narrower than the spread of
    each model's own accuracy."""
    shared = _scores(2000, 0.5, 0)
    gnn = np.maximum(shared, _scores(2000, 0.05, 1))  # right on the shared items and 5% more
    gap = paired_gap(gnn, shared, 1000, 0)
    assert gap.low > 0 and gap.high - gap.low < 0.03
    assert gap.gain == pytest.approx(gnn.mean() - shared.mean())


def test_same_seed_same_interval_and_the_seed_matters():
    a, b = _scores(500, 0.6, 0), _scores(500, 0.55, 1)
    assert paired_gap(a, b, 300, 7) == paired_gap(a, b, 300, 7)
    assert paired_gap(a, b, 300, 7) != paired_gap(a, b, 300, 8)


def test_chunked_draws_give_the_same_interval_as_one_draw(monkeypatch):
    import gnnpipe.reporting.verdict as verdict
    a, b = _scores(100, 0.6, 0), _scores(100, 0.5, 1)
    whole = paired_gap(a, b, 50, 3)
    monkeypatch.setattr(verdict, "_CHUNK_ITEMS", 100 * 7)  # 7 samples per chunk
    assert paired_gap(a, b, 50, 3) == whole


def test_a_tiny_test_set_is_inconclusive_and_says_so():
    """The issue's case: 3 test nodes of 175 apart: the interval contains 0."""
    gnn = np.r_[np.ones(100), np.zeros(75)]
    mlp = np.r_[np.ones(103), np.zeros(72)]
    rng = np.random.default_rng(0)
    order = rng.permutation(175)
    gap = paired_gap(gnn[order], mlp[rng.permutation(175)], 1000, 0)
    assert gap.low < 0 < gap.high
    outcome = judge(gap, 0.01)
    assert outcome == "inconclusive"
    text = sentence("sage", "MLP", "accuracy", gap, outcome, 0.01, False, "nodes")
    assert "175 test nodes are too few" in text and "heterophily" not in text


@pytest.mark.parametrize("low, high, gain, expected", [
    (0.02, 0.08, 0.05, "helps"), (-0.08, -0.02, -0.05, "hurts"),
    (-0.01, 0.08, 0.04, "inconclusive"), (0.001, 0.009, 0.005, "inconclusive"),
    (-0.009, -0.001, -0.005, "inconclusive")])
def test_judge_needs_the_interval_off_zero_and_the_minimum_gain(low, high, gain, expected):
    assert judge(Gap(n=100, gain=gain, low=low, high=high, samples=10), 0.01) == expected


def test_advice_follows_the_measured_cause():
    hurts = Gap(n=4000, gain=-0.05, low=-0.07, high=-0.03, samples=100)
    heterophilous = sentence("sage", "MLP", "accuracy", hurts, "hurts", 0.01, True, "nodes")
    homophilous = sentence("sage", "MLP", "accuracy", hurts, "hurts", 0.01, False, "nodes")
    assert "heterophily-aware" in heterophilous
    assert "heterophily" not in homophilous and "over-smoothing" in homophilous
    unmeasured = sentence("sage", "MLP", "accuracy", hurts, "hurts", 0.01, None, "nodes")
    assert "not measured" in unmeasured and "heterophily" not in unmeasured
    assert "4000 test nodes" in homophilous and "-0.0700 to -0.0300" in homophilous
    small = Gap(n=4000, gain=0.004, low=0.001, high=0.007, samples=100)
    assert "below evaluate.min_gain=0.01" in sentence("gcn", "MLP", "MRR", small,
                                                      "inconclusive", 0.01, None, "edges")


def test_no_test_items_is_one_line():
    with pytest.raises(ValueError, match="^no test items"):
        paired_gap(np.zeros(0), np.zeros(0), 10, 0)
