"""Classification metrics against scikit-learn, including absent and prediction-only classes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn import metrics as skm

from gnnpipe.reporting.metrics import classification_metrics, confusion_matrix, per_class_f1


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
