"""The gradient-boosted-tree baseline: learns what the features say, early-stops on val, is
byte-identical for a fixed (seed, threads), never fits an unlabelled row and keeps a column for
every class."""

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
