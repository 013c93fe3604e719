"""The paired bootstrap of a metric that is no mean over items (ROC-AUC, average precision,
macro-F1): each resample's metric, counted per tie group from one sort, equals the metric
recomputed on the resampled items, and the interval equals the naive re-sorting bootstrap."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gnnpipe.reporting.verdict as verdict
from gnnpipe.reporting.node_metric import NODE_METRICS, node_metric, resampled_metric
from gnnpipe.reporting.verdict import paired_gap, paired_metric_gap


def _case(n: int, classes: int, seed: int, decimals: int = 1):
    """Labels and logits rounded to ``decimals``: many exact ties, within and across classes."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    logits = np.round(rng.normal(size=(n, classes)) + 0.8 * np.eye(classes)[y], decimals)
    return y, torch.tensor(logits, dtype=torch.float32)


def _naive(metric, y, logits, classes, idx) -> np.ndarray:
    """The metric of each resample (a row of drawn indices), re-sorted from scratch."""
    out = []
    for row in idx:
        try:
            out.append(node_metric(metric, y[row], logits[torch.from_numpy(row)], classes))
        except ValueError:  # a ranking metric with one class drawn: undefined
            out.append(np.nan)
    return np.array(out)


@pytest.mark.parametrize("classes", [2, 4])
@pytest.mark.parametrize("metric", NODE_METRICS)
def test_each_resample_scores_as_the_metric_of_its_drawn_items(metric, classes):
    y, logits = _case(40, classes, seed=classes)
    idx = np.random.default_rng(1).integers(0, 40, size=(60, 40))
    got = resampled_metric(metric, y, logits, classes)(idx)
    want = _naive(metric, y, logits, classes, idx)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.allclose(got, want, rtol=0, atol=1e-12, equal_nan=True)
    # the items themselves, drawn once each: the metric of the test set
    whole = resampled_metric(metric, y, logits, classes)(np.arange(40)[None])[0]
    assert whole == pytest.approx(node_metric(metric, y, logits, classes), abs=1e-12)


def test_a_resample_without_both_classes_is_undefined_for_ranking_metrics():
    y = np.array([1, 0, 0, 0, 0])
    logits = torch.tensor([[0.0, 2.0], [0.0, 1.0], [0.0, -1.0], [0.0, 0.5], [0.0, 0.0]])
    idx = np.array([[0, 1, 2, 3, 4], [1, 2, 3, 4, 4], [0, 0, 0, 0, 0]])
    for metric in ("roc_auc", "average_precision"):
        got = resampled_metric(metric, y, logits, 2)(idx)
        assert got[0] == 1.0 and np.isnan(got[1]) and (metric == "average_precision") == (
            got[2] == 1.0)  # AP needs a positive only; ROC-AUC a negative too


@pytest.mark.parametrize("metric", ["roc_auc", "average_precision", "macro_f1"])
def test_the_interval_equals_the_naive_resorting_bootstrap(metric):
    """The same draws (PCG64 of the seed, as ``paired_gap`` draws them), each model's metric
    recomputed from scratch on every resample: the same gap and interval."""
    y, gnn = _case(50, 2, seed=5)
    _, base = _case(50, 2, seed=6)  # another model's logits for the same items y
    gain = node_metric(metric, y, gnn, 2) - node_metric(metric, y, base, 2)
    gap = paired_metric_gap(resampled_metric(metric, y, gnn, 2),
                            resampled_metric(metric, y, base, 2), 50, gain, 300, 11)
    idx = np.random.Generator(np.random.PCG64(11)).integers(0, 50, size=(300, 50))
    diffs = _naive(metric, y, gnn, 2, idx) - _naive(metric, y, base, 2, idx)
    low, high = np.quantile(diffs[np.isfinite(diffs)], [0.025, 0.975])
    assert gap.gain == gain and gap.n == 50 and gap.samples == 300
    assert gap.low == pytest.approx(low, abs=1e-12) and gap.high == pytest.approx(high, abs=1e-12)


def test_accuracy_resampled_gives_the_per_item_interval():
    """Accuracy through the recomputing path equals the per-item mean path (which evaluate
    keeps for accuracy, byte for byte as before): the two paths draw the same resamples."""
    y, gnn = _case(300, 3, seed=2)
    _, base = _case(300, 3, seed=3)
    right = [(m.argmax(dim=1).numpy() == y).astype(np.float64) for m in (gnn, base)]
    per_item = paired_gap(*right, 500, 4)
    recomputed = paired_metric_gap(resampled_metric("accuracy", y, gnn, 3),
                                   resampled_metric("accuracy", y, base, 3), 300,
                                   per_item.gain, 500, 4)
    assert recomputed.low == pytest.approx(per_item.low, abs=1e-12)
    assert recomputed.high == pytest.approx(per_item.high, abs=1e-12)


def test_chunks_do_not_change_the_interval(monkeypatch):
    y, gnn = _case(120, 2, seed=8)
    _, base = _case(120, 2, seed=9)
    fns = [resampled_metric("roc_auc", y, m, 2) for m in (gnn, base)]
    whole = paired_metric_gap(*fns, 120, 0.1, 200, 3)
    monkeypatch.setattr(verdict, "_METRIC_CHUNK_ITEMS", 120 * 7)  # 7 resamples per chunk
    assert paired_metric_gap(*fns, 120, 0.1, 200, 3) == whole


def test_an_undefined_metric_on_every_resample_is_one_line():
    y = np.zeros(6, dtype=np.int64)
    logits = torch.zeros(6, 2)
    fn = resampled_metric("roc_auc", y, logits, 2)
    with pytest.raises(ValueError, match="^no bootstrap resample of the 6 test items holds two "
                                         "classes"):
        paired_metric_gap(fn, fn, 6, 0.0, 100, 0)
