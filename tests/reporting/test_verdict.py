"""The verdict with its uncertainty: known answers on generated per-item scores."""

import re
from dataclasses import replace

import numpy as np
import pytest

from gnnpipe.reporting.verdict import (Causes, Gap, TopClass, why_inconclusive, causes_of,
                                       imbalanced, judge, margin, paired_gap, sentence)


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
    heterophilous = sentence("gcn", "MLP", "accuracy", hurts, "hurts", 0.01, True, "nodes")
    homophilous = sentence("sage", "MLP", "accuracy", hurts, "hurts", 0.01, False, "nodes")
    assert "heterophily-aware model, -S train.model=sep" in heterophilous
    assert "heterophily" not in homophilous and "over-smoothing" in homophilous
    unmeasured = sentence("sage", "MLP", "accuracy", hurts, "hurts", 0.01, None, "nodes")
    assert "not measured" in unmeasured and "heterophily" not in unmeasured
    # the margin from the winner's side: the MLP leads by +0.05, interval +0.03 to +0.07
    assert "4000 test nodes" in homophilous and "+0.0300 to +0.0700" in homophilous
    small = Gap(n=4000, gain=0.004, low=0.001, high=0.007, samples=100)
    assert "below evaluate.min_gain=0.01" in sentence("gcn", "MLP", "MRR", small,
                                                      "inconclusive", 0.01, None, "edges")


# ------------------------------------------------------------------------- sign of a margin
@pytest.mark.parametrize("gap, outcome, start", [
    (Gap(4000, 0.05, 0.03, 0.07, 100), "helps",
     "sage beats the structure-free MLP by +0.0500 test accuracy (95% interval +0.0300 to "
     "+0.0700, 4000 test nodes): the graph helps"),
    (Gap(4000, -0.3243, -0.35, -0.30, 100), "hurts",
     "the structure-free MLP beats sage by +0.3243 test accuracy (95% interval +0.3000 to "
     "+0.3500, 4000 test nodes): the graph hurts here; prefer the MLP"),
    (Gap(175, 0.017, -0.08, 0.11, 100), "inconclusive",
     "inconclusive: sage is ahead of the structure-free MLP by +0.0170 test accuracy (95% "
     "interval -0.0800 to +0.1100, 175 test nodes)"),
    (Gap(175, -0.017, -0.11, 0.08, 100), "inconclusive",
     "inconclusive: the structure-free MLP is ahead of sage by +0.0170 test accuracy (95% "
     "interval -0.0800 to +0.1100, 175 test nodes)"),
], ids=["helps", "hurts", "inconclusive-gnn-ahead", "inconclusive-baseline-ahead"])
def test_a_margin_is_always_positive_and_said_from_the_leaders_side(gap, outcome, start):
    for low_homophily in (True, False, None):
        text = sentence("sage", "MLP", "accuracy", gap, outcome, 0.01, low_homophily, "nodes")
        assert text.startswith(start), text
        assert not re.search(r"by -|beats [^;]* by [^+]", text)
    assert margin(gap, "MRR", "edges").startswith(f"+{abs(gap.gain):.4f} test MRR")


def test_the_verdict_names_the_baseline_chosen_on_val_among_several():
    gap = Gap(4000, 0.05, 0.03, 0.07, 100)
    text = sentence("sage", "gradient-boosted trees (gbdt)", "accuracy", gap, "helps", 0.01,
                    False, "nodes", candidates=("mlp", "gbdt"))
    assert text.startswith("sage beats the structure-free gradient-boosted trees (gbdt), the "
                           "best on val of mlp and gbdt, by +0.0500 test accuracy")
    lost = sentence("sage", "MLP", "accuracy", Gap(4000, -0.05, -0.07, -0.03, 100), "hurts",
                    0.01, False, "nodes", candidates=("mlp", "gbdt"))
    assert lost.startswith("the structure-free MLP, the best on val of mlp and gbdt, beats sage "
                           "by +0.0500")
    alone = sentence("sage", "MLP", "accuracy", gap, "helps", 0.01, False, "nodes",
                     candidates=("mlp",))
    assert "best on val" not in alone


# ------------------------------------------------------------------- advice chosen by cause
BINARY_80 = Causes(metric="accuracy", num_classes=2, majority_fraction=0.8)
NOT_STUCK = {"gnn": TopClass(0, 0.7, 0.8), "baseline": TopClass(0, 0.75, 0.8)}
STUCK = {"gnn": TopClass(0, 0.7, 0.8), "baseline": TopClass(0, 1.0, 0.8)}
TIED = Gap(2940, 0.001, -0.004, 0.006, 1000)  # narrow around 0: more items would not help
WIDE = Gap(175, 0.017, -0.08, 0.11, 1000)  # wide: 175 items are too few


@pytest.mark.parametrize("gap, outcome, low_h, causes, model, expected, phrases, absent", [
    # the case: judged on accuracy, an imbalanced binary task, a narrow gap near 0
    (TIED, "inconclusive", False, replace(BINARY_80, top_class=NOT_STUCK), "sage",
     ["imbalanced", "tied"],
     ["the classes are imbalanced (the largest holds 80.0% of the labelled nodes)",
      "always predicting it scores 0.800", "judge on -S evaluate.metric=roc_auc",
      "-S train.class_weight=balanced", "the models are tied on this test set"],
     ["too few", "heterophily"]),
    # the same imbalance judged on ROC-AUC: the metric is no cause
    (TIED, "inconclusive", False, replace(BINARY_80, metric="roc_auc"), "sage", ["tied"],
     ["within ±0.01"], ["imbalanced", "evaluate.metric"]),
    # five classes, the largest above half: macro-F1 is what auto picks
    (TIED, "inconclusive", None, Causes("accuracy", 5, 0.6, class_weight="balanced"), "sage",
     ["imbalanced", "tied"], ["-S evaluate.metric=macro_f1"], ["-S train.class_weight"]),
    # balanced classes, a wide interval: the test size, and how many items would do
    (WIDE, "inconclusive", False, Causes("accuracy", 5, 0.21), "sage", ["few_test_items"],
     ["175 test nodes are too few to tell these models apart",
      "about 15,794 would narrow it to ±0.01"], ["imbalanced", "tied"]),
    # low homophily: the concrete setting, unless a model that separates ego and neighbours ran
    (TIED, "inconclusive", True, None, "gcn", ["tied", "low_homophily"],
     ["homophily is low (metrics/graph.json): try the heterophily-aware model, "
      "-S train.model=sep"], []),
    (TIED, "inconclusive", True, None, "sep", ["tied", "low_homophily"],
     ["sep already keeps a node's own state apart"], ["-S train.model"]),
    (TIED, "inconclusive", True, None, "sage", ["tied", "low_homophily"],
     ["sage already keeps a node's own state apart"], ["-S train.model"]),
    # a baseline stuck at the base rate, said even when the graph helps
    (Gap(4000, 0.05, 0.03, 0.07, 100), "helps", False,
     replace(BINARY_80, metric="roc_auc", top_class=STUCK), "sage",
     ["baseline_at_base_rate"],
     ["the graph helps; note: the MLP predicts class 0 for 100.0% of the test nodes (of which "
      "80.0% are of it): it is stuck at the base rate"], ["sage predicts"]),
    (Gap(4000, -0.05, -0.07, -0.03, 100), "hurts", False,
     replace(BINARY_80, metric="roc_auc", top_class={"gnn": TopClass(1, 0.995, 0.2)}), "sage",
     ["gnn_at_base_rate", "homophily_not_low"],
     ["sage predicts class 1 for 99.5% of the test nodes", "over-smoothing"], ["the MLP predicts"]),
], ids=["imbalanced-tied", "ranked-metric", "multiclass", "few-items", "low-homophily",
        "sep-ran", "sage-ran", "stuck-baseline", "stuck-gnn"])
def test_advice_is_chosen_by_the_measured_cause(gap, outcome, low_h, causes, model, expected,
                                                 phrases, absent):
    assert judge(gap, 0.01) == outcome
    assert causes_of(outcome, gap, 0.01, low_h, causes) == expected
    text = sentence(model, "MLP", "accuracy", gap, outcome, 0.01, low_h, "nodes", causes=causes)
    for phrase in phrases:
        assert phrase in text, (phrase, text)
    for phrase in absent:
        assert phrase not in text, (phrase, text)


@pytest.mark.parametrize("fraction, classes, expected", [
    (0.8, 2, True), (2 / 3, 2, True), (0.6, 2, False), (0.5, 2, False), (0.51, 3, True),
    (0.5, 3, False), (0.45, 5, False), (0.55, 10, True), (None, 2, False)])
def test_imbalance_is_a_majority_above_half_and_twice_the_others_mean(fraction, classes,
                                                                      expected):
    assert imbalanced(fraction, classes) is expected


@pytest.mark.parametrize("top, stuck", [
    (TopClass(0, 1.0, 0.8), True), (TopClass(0, 0.99, 0.8), True),
    (TopClass(0, 0.985, 0.8), False),  # 1.5% of its predictions are of another class
    (TopClass(0, 1.0, 0.995), False)])  # the test nodes are that class: predicting it is right
def test_stuck_is_one_class_for_99_percent_of_test_nodes_that_are_not(top, stuck):
    assert top.stuck is stuck


def test_the_interval_cause_alone_explains_a_link_verdict():
    """``why_inconclusive`` (the link heuristics' sentence) says the test size only for a wide
    interval."""
    assert "too few" in why_inconclusive(Gap(200, 0.02, -0.05, 0.09, 100), 0.01, "edges")
    assert "tied" in why_inconclusive(Gap(20000, 0.0, -0.004, 0.004, 100), 0.01, "edges")
    # min_gain 0: every interval across 0 is too wide, and no item count is promised
    assert why_inconclusive(Gap(200, 0.0, -0.01, 0.01, 100), 0.0, "edges").endswith(
        "200 test edges are too few to tell these models apart; more labelled test edges would "
        "narrow it")


def test_no_test_items_is_one_line():
    with pytest.raises(ValueError, match="^no test items"):
        paired_gap(np.zeros(0), np.zeros(0), 10, 0)
