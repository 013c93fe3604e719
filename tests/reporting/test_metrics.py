"""Classification metrics against scikit-learn, including absent and prediction-only classes;
link metrics that rank near-ties (equal within float rounding) as ties."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn import metrics as skm

from gnnpipe.reporting.metrics import (TIE_RTOL, average_precision, classification_metrics,
                                       confusion_matrix, link_metrics, link_ranks, near,
                                       per_class_f1, roc_auc, tie_groups)


def _sklearn(y_true, y_pred, c):
    with warnings.catch_warnings():  # zero-division warnings for absent classes
        warnings.simplefilter("ignore")
        return {
            "accuracy": skm.accuracy_score(y_true, y_pred),
            "macro_f1": skm.f1_score(y_true, y_pred, average="macro"),
            "per_class_f1": skm.f1_score(y_true, y_pred, average=None, labels=list(range(c)),
                                         zero_division=0),
            "confusion": skm.confusion_matrix(y_true, y_pred, labels=list(range(c))),
        }


def _cases():
    cases = []
    for seed, (n, c) in enumerate([(50, 3), (200, 5), (7, 4), (1000, 10)]):
        rng = np.random.default_rng(seed)
        y_true = rng.integers(0, c, n)
        # correlated predictions: right about 60% of the time
        y_pred = np.where(rng.random(n) < 0.6, y_true, rng.integers(0, c, n))
        cases.append((f"random-{n}-{c}", y_true, y_pred, c))
    rng = np.random.default_rng(42)
    # class 4 absent from both truth and prediction; class 3 only ever predicted
    y_true = rng.integers(0, 3, 80)
    y_pred = np.where(rng.random(80) < 0.7, y_true, 3)
    cases.append(("absent-and-predicted-only", y_true, y_pred, 5))
    # class 0 only in truth (never predicted), class 2 absent
    y_true = np.array([0, 0, 1, 1, 3, 3, 3])
    y_pred = np.array([1, 3, 1, 1, 3, 1, 3])
    cases.append(("never-predicted", y_true, y_pred, 4))
    cases.append(("perfect", np.arange(6) % 3, np.arange(6) % 3, 3))
    cases.append(("all-wrong", np.zeros(5, dtype=np.int64), np.ones(5, dtype=np.int64), 2))
    return cases


@pytest.mark.parametrize("name, y_true, y_pred, c", _cases(), ids=[case[0] for case in _cases()])
def test_classification_metrics_match_sklearn(name, y_true, y_pred, c):
    got = classification_metrics(y_true, y_pred, c)
    want = _sklearn(y_true, y_pred, c)
    assert got["count"] == y_true.size
    assert got["accuracy"] == pytest.approx(want["accuracy"], abs=1e-6)
    assert got["macro_f1"] == pytest.approx(want["macro_f1"], abs=1e-6)
    assert len(got["per_class_f1"]) == c
    np.testing.assert_allclose(got["per_class_f1"], want["per_class_f1"], atol=1e-6)
    assert np.array_equal(np.array(got["confusion"]), want["confusion"])


def test_absent_class_excluded_from_macro_but_scores_zero():
    y_true = np.array([0, 0, 1, 1])
    y_pred = np.array([0, 0, 1, 1])
    got = classification_metrics(y_true, y_pred, 3)
    assert got["per_class_f1"] == [1.0, 1.0, 0.0]
    assert got["macro_f1"] == 1.0  # class 2 appears nowhere: not averaged in
    assert got["confusion"] == [[2, 0, 0], [0, 2, 0], [0, 0, 0]]


def test_prediction_only_class_counts_in_macro():
    y_true = np.array([0, 0, 1, 1])
    y_pred = np.array([0, 2, 1, 1])
    got = classification_metrics(y_true, y_pred, 3)
    assert got["per_class_f1"][2] == 0.0
    # f1: class 0 = 2/3, class 1 = 1, class 2 = 0; macro over three present classes
    assert got["macro_f1"] == pytest.approx((2 / 3 + 1 + 0) / 3, abs=1e-6)
    assert got["accuracy"] == 0.75


def test_confusion_rows_are_truth_columns_predictions():
    conf = confusion_matrix(np.array([0, 1, 1, 2]), np.array([1, 1, 2, 2]), 3)
    assert conf.dtype == np.int64
    assert conf.tolist() == [[0, 1, 0], [0, 1, 1], [0, 0, 1]]
    assert per_class_f1(conf).tolist() == pytest.approx([0.0, 0.5, 2 / 3])


def test_metrics_are_json_friendly_and_rounded():
    got = classification_metrics(np.array([0, 1, 2]), np.array([0, 1, 1]), 3)
    assert type(got["accuracy"]) is float and type(got["count"]) is int
    assert got["accuracy"] == 0.666667
    assert all(type(v) is float for v in got["per_class_f1"])
    assert all(type(v) is int for row in got["confusion"] for v in row)


def test_empty_input_raises():
    with pytest.raises(ValueError, match="no target nodes to score"):
        classification_metrics(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 3)


# ------------------------------------------------------------------- link metrics: near-ties
def _constant_up_to_noise(p: int, k: int, level: float, seed: int = 0):
    """Scores equal to ``level`` up to float32 rounding noise (1e-7 relative): a collapsed
    encoder. The noise favours the positives, as degree-correlated rounding did."""
    rng = np.random.default_rng(seed)
    pos = (level * (1 + 1e-7 * (1 + rng.random(p)))).astype(np.float32)
    neg = (level * (1 + 1e-7 * rng.random((p, k)))).astype(np.float32)
    return pos.astype(np.float64), neg.astype(np.float64)


@pytest.mark.parametrize("level", [3.0, -250.0, 1e-3])
def test_a_constant_scorer_up_to_rounding_noise_ranks_at_chance(level):
    p, k = 200, 20
    pos, neg = _constant_up_to_noise(p, k, level)
    got = link_metrics(pos, neg, ks=(1, 10, 11))
    assert got["roc_auc"] == 0.5
    # one threshold over every score: the base rate
    assert got["average_precision"] == pytest.approx(p / (p + p * k))
    assert got["mrr"] == pytest.approx(1 / (1 + k / 2))  # every negative tied: rank 1 + K/2
    assert got["hits@1"] == 0.0 and got["hits@10"] == 0.0 and got["hits@11"] == 1.0
    # what the noise would have claimed, ranked exactly (the collapse the tolerance catches)
    if level > 0:
        assert roc_auc(pos, neg, rtol=0.0) > 0.6 and link_metrics(pos, neg, rtol=0.0)["mrr"] > 0.3
    shared = neg[0]  # a shared pool (Q,) ties the same way
    assert link_ranks(pos, shared).tolist() == [1 + k / 2] * p


def test_near_ties_are_pairwise_relative_and_zero_ties_only_zero():
    pos = np.array([1.0, 1.0, 100.0, 0.0, 0.0, -5.0])
    neg = np.array([[1.0 + 1e-6, 0.5],        # tied (1e-6 < 2e-5), below: rank 1.5
                    [1.0 + 1e-3, 0.5],        # above (1e-3 > 2e-5): rank 2
                    [100.0 - 1e-4, 101.0],    # tied, above: rank 2.5
                    [0.0, 1e-12],             # 0 ties 0 only; 1e-12 is above: rank 2.5
                    [-1e-12, -1.0],           # below both: rank 1
                    [-5.0 - 4e-5, -4.0]])     # tied (4e-5 < 1e-4), above: rank 2.5
    assert link_ranks(pos, neg).tolist() == [1.5, 2.0, 2.5, 2.5, 1.0, 2.5]
    assert link_ranks(pos, neg, rtol=0.0).tolist() == [2.0, 2.0, 2.0, 2.5, 1.0, 2.0]
    assert near(1.0, 1.0 + 2e-5 * 0.99) and not near(1.0, 1.0 + 2e-5 * 1.01)
    assert not near(0.0, 1e-300) and near(0.0, 0.0) and not near(1e-9, -1e-9)


def test_shared_negatives_rank_near_ties_as_the_same_pool_repeated_per_positive():
    rng = np.random.default_rng(5)
    pos = np.round(rng.normal(size=40), 3)
    shared = np.r_[pos[:10] * (1 + 3e-6), rng.normal(size=50)]  # near-ties of ten positives
    assert np.array_equal(link_ranks(pos, shared), link_ranks(pos, np.tile(shared, (40, 1))))


def _greedy_groups(sorted_scores: np.ndarray, rtol: float) -> list[int]:
    """Plain-Python anchored groups: a new group at the first score not tied with the start."""
    starts = [0]
    for i in range(1, sorted_scores.size):
        if not near(sorted_scores[starts[-1]], sorted_scores[i], rtol):
            starts.append(i)
    return starts


@pytest.mark.parametrize("seed", range(6))
def test_tie_groups_are_anchored_at_their_lowest_score(seed):
    rng = np.random.default_rng(seed)
    scale = [1.0, 1e3, 1e-3, 1.0, 1.0, 50.0][seed]
    scores = np.sort(np.round(rng.normal(0, 1, 300) * scale, 4 + seed % 3))
    for rtol in (0.0, TIE_RTOL, 1e-3, 0.05):
        assert tie_groups(scores, rtol).tolist() == _greedy_groups(scores, rtol), rtol
    # rtol 0: the groups are the distinct scores, as ties always were
    assert tie_groups(scores, 0.0).tolist() == np.flatnonzero(
        np.r_[True, scores[1:] != scores[:-1]]).tolist()


def test_a_dense_run_of_near_scores_does_not_chain_into_one_tie():
    """Each score is within the tolerance of the next, not of scores far along: anchored
    groups stay as wide as the tolerance, where chaining would tie the whole run."""
    scores = 1.0 + np.arange(1000) * 1.5e-5  # consecutive gaps 1.5e-5 < 2e-5 (the tolerance)
    starts = tie_groups(scores)
    assert starts.tolist() == list(range(0, 1000, 2))  # pairs: start and its one neighbour
    # positives above every negative in the run still rank above them, to one pair's tie
    pos, neg = scores[500:], scores[:500]
    assert roc_auc(pos, neg) == 1.0 and roc_auc(pos, neg, rtol=0.0) == 1.0


def test_average_precision_takes_one_threshold_per_near_tie_group():
    # positives 1.0 and 1.0 + 1e-7 tie with the negative 1.0 - 1e-7: one group of 3 with 2
    # positives, then the negative 0.5: AP = (2/2) * (2/3)
    pos, neg = np.array([1.0, 1.0 + 1e-7]), np.array([1.0 - 1e-7, 0.5])
    assert average_precision(pos, neg) == pytest.approx(2 / 3)
    assert average_precision(pos, neg, rtol=0.0) == pytest.approx(1.0)


def test_a_tolerance_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match=r"rtol must be in \[0, 1\)"):
        roc_auc(np.ones(2), np.ones(3), rtol=1.0)
    with pytest.raises(ValueError, match=r"rtol must be in \[0, 1\)"):
        link_ranks(np.ones(2), np.ones(3), rtol=-0.1)
