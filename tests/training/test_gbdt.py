"""The gradient-boosted-tree baseline: learns what the features say, early-stops on val (its
loss for accuracy, the run's metric otherwise), is byte-identical for a fixed (seed, threads),
never fits an unlabelled row, keeps a column for every class and weighs classes when asked."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gnnpipe.config import GbdtParams
from gnnpipe.data.graph import ROLE_CODES, ROLES
from gnnpipe.training.gbdt import fit_gbdt

FAST = GbdtParams(num_leaves=8, max_rounds=400, early_stopping_rounds=10)
ROLES = np.arange(len(ROLES), dtype=np.int8)  # role codes: train, val, test, unused


@pytest.fixture(scope="module")
def tabular():
    """1,200 nodes whose 4 classes are two thresholds on two of 6 feature columns (10% of the
    labels redrawn, so val loss bottoms out), and a seeded train/val/test/unused role each."""
    rng = np.random.default_rng(0)
    n = 1200
    x = rng.standard_normal((n, 6)).astype(np.float32)
    y = (x[:, 0] > 0) * 2 + (x[:, 1] > 0.3)
    noisy = rng.random(n) < 0.1
    y[noisy] = rng.integers(0, 4, int(noisy.sum()))
    roles = rng.choice(ROLES, n, p=[0.5, 0.2, 0.2, 0.1])
    return torch.from_numpy(x), torch.from_numpy(y.astype(np.int64)), roles


def _phase_acc(result, y, roles, phase):
    pred = torch.full_like(y, -1)
    pred[result.node_id] = result.logits.argmax(dim=1)
    nodes = torch.from_numpy(np.flatnonzero(roles == ROLE_CODES[phase]))
    return float((pred[nodes] == y[nodes]).double().mean())


def test_gbdt_learns_the_features_and_stops_early(tabular):
    x, y, roles = tabular
    result = fit_gbdt(x, y, roles, 4, FAST, seed=0, threads=1)
    assert _phase_acc(result, y, roles, "test") > 0.8  # chance is 0.25; the noise caps it at ~0.93
    summary = result.summary
    assert summary["early_stopped"] and summary["rounds_run"] < FAST.max_rounds
    assert summary["rounds_run"] == summary["best_round"] + FAST.early_stopping_rounds
    assert summary["best_val_acc"] == pytest.approx(_phase_acc(result, y, roles, "val"))
    assert [row["epoch"] for row in result.history] == list(range(1, summary["rounds_run"] + 1))
    assert result.history[-1]["val_loss"] > min(row["val_loss"] for row in result.history)


def test_outputs_have_the_mlp_baselines_shapes(tabular):
    """node_id: train, val then test nodes (unused ones not scored); logits: log-probabilities."""
    x, y, roles = tabular
    result = fit_gbdt(x, y, roles, 4, FAST, seed=0, threads=1)
    expected = np.concatenate([np.flatnonzero(roles == ROLE_CODES[p])
                               for p in ("train", "val", "test")])
    assert result.node_id.dtype == torch.int64 and np.array_equal(result.node_id, expected)
    assert result.logits.dtype == torch.float32 and result.logits.shape == (expected.size, 4)
    assert torch.allclose(result.logits.exp().sum(dim=1), torch.ones(expected.size), atol=1e-5)


def test_same_seed_and_threads_give_the_same_bytes_and_the_seed_is_used(tabular):
    x, y, roles = tabular
    # feature_fraction draws columns, so the seed matters; few rounds, as two OpenMP threads
    # spin-wait at every barrier on a loaded 2-core machine
    cfg = dataclasses.replace(FAST, feature_fraction=0.5, max_rounds=8)
    first, again = (fit_gbdt(x, y, roles, 4, cfg, seed=3, threads=2) for _ in range(2))
    assert torch.equal(first.node_id, again.node_id)
    assert first.logits.numpy().tobytes() == again.logits.numpy().tobytes()
    assert first.history == again.history and first.summary == again.summary
    other = fit_gbdt(x, y, roles, 4, cfg, seed=4, threads=2)
    assert not torch.equal(first.logits, other.logits)


def test_unlabelled_rows_are_never_fitted(tabular):
    """Train nodes with y = -1 give the booster of a split without them; they are still
    scored (they are in the train role)."""
    x, y, roles = tabular
    hidden = np.flatnonzero(roles == ROLE_CODES["train"])[::4]
    y_partial = y.clone()
    y_partial[hidden] = -1
    with_unlabelled = fit_gbdt(x, y_partial, roles, 4, FAST, seed=0, threads=1)
    roles_without = roles.copy()
    roles_without[hidden] = ROLE_CODES["unused"]
    without = fit_gbdt(x, y_partial, roles_without, 4, FAST, seed=0, threads=1)
    assert np.isin(hidden, with_unlabelled.node_id.numpy()).all()
    kept = ~np.isin(with_unlabelled.node_id.numpy(), hidden)
    assert torch.equal(with_unlabelled.logits[torch.from_numpy(kept)], without.logits)
    assert with_unlabelled.summary == without.summary


def test_a_class_absent_from_train_still_has_a_finite_column(tabular):
    """num_classes 5 with no train node of class 4 (some val and test nodes have it)."""
    x, y, roles = tabular
    y5 = y.clone()
    y5[np.flatnonzero(roles != ROLE_CODES["train"])[::7]] = 4
    result = fit_gbdt(x, y5, roles, 5, FAST, seed=0, threads=1)
    assert result.logits.shape[1] == 5 and torch.isfinite(result.logits).all()
    assert (result.logits.argmax(dim=1) != 4).all()  # never predicted: nothing taught it
    assert _phase_acc(result, y, roles, "test") > 0.7


def test_no_labelled_val_node_is_a_one_line_error(tabular):
    x, y, roles = tabular
    y_no_val = y.clone()
    y_no_val[np.flatnonzero(roles == ROLE_CODES["val"])] = -1
    with pytest.raises(ValueError, match="the gbdt baseline needs labelled val nodes; the split "
                                         "has none"):
        fit_gbdt(x, y_no_val, roles, 4, FAST, seed=0, threads=1)


@pytest.fixture(scope="module")
def rare():
    """1,200 nodes, two classes, about 13% positives: a noisy threshold on one column."""
    rng = np.random.default_rng(0)
    n = 1200
    x = rng.standard_normal((n, 6)).astype(np.float32)
    y = ((x[:, 0] + rng.standard_normal(n)) > 1.6).astype(np.int64)
    roles = rng.choice(ROLES, n, p=[0.5, 0.2, 0.2, 0.1])
    return torch.from_numpy(x), torch.from_numpy(y), roles


def _objective(metric, class_weight, y, roles, num_classes=2):
    from gnnpipe.training.train import node_objective

    return node_objective(metric, class_weight, y, roles, num_classes)


@pytest.mark.parametrize("max_rounds", [400, 6])
def test_gbdt_early_stops_on_the_best_val_value_of_the_metric(rare, max_rounds):
    """ROC-AUC: the round kept is the first of the highest val ROC-AUC (here not the one of the
    lowest val loss), patience counted as LightGBM's own, or the best of every round when the
    last comes first; summary and history name the metric."""
    from gnnpipe.reporting.node_metric import node_metric

    x, y, roles = rare
    cfg = dataclasses.replace(FAST, max_rounds=max_rounds)
    result = fit_gbdt(x, y, roles, 2, cfg, seed=0, threads=1,
                      objective=_objective("roc_auc", "none", y, roles))
    auc = [row["val_roc_auc"] for row in result.history]
    summary = result.summary
    assert summary["best_round"] == int(np.argmax(auc)) + 1
    assert summary["rounds_run"] == min(summary["best_round"] + FAST.early_stopping_rounds,
                                        max_rounds)
    assert summary["metric"] == "roc_auc"
    val = torch.from_numpy(roles[result.node_id.numpy()] == ROLE_CODES["val"])
    value = node_metric("roc_auc", y[result.node_id[val]].numpy(), result.logits[val], 2)
    assert summary["best_val"] == pytest.approx(value, abs=1e-6)
    assert summary["best_val"] == pytest.approx(max(auc), abs=1e-5)
    if max_rounds == 400:  # where they disagree: accuracy keeps the lowest val loss
        accuracy = fit_gbdt(x, y, roles, 2, cfg, seed=0, threads=1)
        assert "val_roc_auc" not in accuracy.history[0]
        loss = [row["val_loss"] for row in accuracy.history]
        assert accuracy.summary["best_round"] == int(np.argmin(loss)) + 1
        assert accuracy.summary["best_round"] != summary["best_round"]


def test_balanced_weights_make_gbdt_find_more_of_the_minority(rare):
    """LightGBM sample weights n / (C x count) on the train rows: the rare class is predicted
    far more often and its recall rises."""
    x, y, roles = rare
    runs = {cw: fit_gbdt(x, y, roles, 2, FAST, seed=0, threads=1,
                         objective=_objective("accuracy", cw, y, roles))
            for cw in ("none", "balanced")}
    test = torch.from_numpy(roles == ROLE_CODES["test"])
    recall, predicted = {}, {}
    for cw, result in runs.items():
        pred = torch.full_like(y, -1)
        pred[result.node_id] = result.logits.argmax(dim=1)
        predicted[cw] = int((pred[test] == 1).sum())
        recall[cw] = float(((pred[test] == 1) & (y[test] == 1)).sum() / (y[test] == 1).sum())
    assert predicted["balanced"] > 2 * predicted["none"]
    assert recall["balanced"] > recall["none"] + 0.15
