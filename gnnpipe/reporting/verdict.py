"""Does the graph help? The GNN-minus-baseline gap with its uncertainty, and the verdict.

The gap is the GNN's test score minus the baseline's on the metric the run is judged on. For
accuracy (and a link run's MRR) that is the mean over test items of a per-item score (nodes: 1
when the prediction is right; links: the reciprocal rank of each positive among its
negatives). A paired bootstrap over the test items gives its 95% interval: both models are
scored on the same resampled items, so what they share (an easy or a hard test set) cancels.
A metric that is no mean over items (ROC-AUC, average precision, macro-F1) is recomputed for
both models on each resample (``paired_metric_gap``, from the weighted form of
``gnnpipe.reporting.node_metric.resampled_metric``). The verdict is ``helps`` or ``hurts``
only when the interval excludes 0 and the gap reaches ``evaluate.min_gain``; otherwise
``inconclusive``. The sentence gives the margin from the winner's side (``X beats Y by +d``)
and advice chosen by what was measured (``causes_of``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

import numpy as np

# bootstrap indices drawn per chunk (samples x items): ~8 MB of int64 draws and 8 MB of their
# float64 scores for any test set of up to 2^20 items (the draws do not depend on it)
_CHUNK_ITEMS = 1 << 20
# the same for a recomputed metric: the draws and a few (samples x items) temporaries of the
# metric at ~8 MB each
_METRIC_CHUNK_ITEMS = 1 << 20
LEVEL = 0.95
# how a verdict names each baseline: the structure-free models of baseline.models, and the
# structure heuristics of a link run (gnnpipe/reporting/link_heuristics.py)
BASELINE_NAMES = {"mlp": "MLP", "gbdt": "gradient-boosted trees (gbdt)",
                  "common_neighbours": "common-neighbours heuristic",
                  "adamic_adar": "Adamic-Adar heuristic",
                  "resource_allocation": "resource-allocation heuristic",
                  "preferential_attachment": "preferential-attachment heuristic"}
STRUCTURE_FREE = ("mlp", "gbdt")
# a model that predicts one class for at least this share of the test nodes (of which fewer
# are of that class) is stuck at the base rate
STUCK_SHARE = 0.99
# the heterophily-aware model the advice names (train.model)
HETEROPHILY_MODEL = "sep"
# models that transform a node's own state apart from its neighbours' (sage's root weight, sep)
SEPARATES_EGO = ("sage", HETEROPHILY_MODEL)


@dataclass(frozen=True)
class Gap:
    """The paired gap of two models on ``n`` test items: ``gain`` = the GNN's test metric minus
    the baseline's and its ``LEVEL`` percentile interval [``low``, ``high``] from ``samples``
    bootstrap draws."""

    n: int
    gain: float
    low: float
    high: float
    samples: int

    def as_dict(self) -> dict:
        return {"test_items": self.n, "gain": round(self.gain, 6),
                "interval": [round(self.low, 6), round(self.high, 6)],
                "level": LEVEL, "bootstrap_samples": self.samples}


def _draws(n: int, samples: int, seed: int, chunk_items: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, idx)``: the bootstrap draws in chunks, idx int64 (count, n) item indices drawn
    with replacement (numpy PCG64 seeded by ``seed``; the chunking does not change them)."""
    if n == 0:
        raise ValueError("no test items to compare the models on")
    rng = np.random.Generator(np.random.PCG64(seed))
    step = max(1, chunk_items // n)
    return ((start, rng.integers(0, n, size=(min(step, samples - start), n)))
            for start in range(0, samples, step))


def _interval(values: np.ndarray) -> tuple[float, float]:
    tail = (1.0 - LEVEL) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


def paired_gap(gnn: np.ndarray, baseline: np.ndarray, samples: int, seed: int) -> Gap:
    """``gnn``, ``baseline`` float (n,): per-item scores of the two models on the same test
    items (the metric is their mean). Resamples the items ``samples`` times with replacement
    (numpy PCG64 seeded by ``seed``: the same call gives the same interval)."""
    diff = np.asarray(gnn, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    means = np.empty(samples)
    for start, idx in _draws(diff.size, samples, seed, _CHUNK_ITEMS):
        means[start:start + idx.shape[0]] = diff[idx].mean(axis=1)
    return Gap(diff.size, float(diff.mean()), *_interval(means), samples=samples)


def paired_metric_gap(gnn: Callable[[np.ndarray], np.ndarray],
                      baseline: Callable[[np.ndarray], np.ndarray], n: int, gain: float,
                      samples: int, seed: int) -> Gap:
    """The gap of a metric that is no mean over items: ``gnn`` and ``baseline`` map a chunk of
    resamples, drawn item indices int64 (B, n), to each model's metric on each (B,)
    (``node_metric.resampled_metric``); ``gain`` is the gap on the test items themselves. The
    resamples are ``paired_gap``'s for the same ``n``, ``samples`` and ``seed``; one that
    leaves the metric undefined (a single class drawn) is left out of the interval."""
    diffs = np.empty(samples)
    for start, idx in _draws(n, samples, seed, _METRIC_CHUNK_ITEMS):
        diffs[start:start + idx.shape[0]] = gnn(idx) - baseline(idx)
    defined = diffs[np.isfinite(diffs)]
    if defined.size == 0:
        raise ValueError(f"no bootstrap resample of the {n} test items holds two classes; the "
                         "metric is undefined: set evaluate.metric to accuracy or macro_f1")
    return Gap(n, float(gain), *_interval(defined), samples=samples)


def judge(gap: Gap, min_gain: float) -> str:
    """``helps`` (interval above 0, gain >= min_gain), ``hurts`` (below 0, gain <= -min_gain),
    else ``inconclusive``."""
    if gap.low > 0 and gap.gain >= min_gain:
        return "helps"
    if gap.high < 0 and gap.gain <= -min_gain:
        return "hurts"
    return "inconclusive"


# -------------------------------------------------------------------------- measured causes
def imbalanced(majority_fraction: float | None, num_classes: int) -> bool:
    """Whether accuracy barely separates models here: the largest class holds more than half of
    the labelled nodes and at least twice the mean share of the others (``m >= 2 / (C + 1)``:
    2:1 for two classes, more than half for three or more)."""
    if majority_fraction is None or num_classes < 2:
        return False
    return majority_fraction > 0.5 and majority_fraction >= 2.0 / (num_classes + 1)


@dataclass(frozen=True)
class TopClass:
    """The class a model predicts most often on the test nodes (``label``), the share of the
    test nodes it is predicted for and the share that truly are of it."""

    label: int
    share: float
    true_share: float

    @property
    def stuck(self) -> bool:
        """One class for at least ``STUCK_SHARE`` of the test nodes, fewer of which are of it:
        the model learned the base rate, not the classes."""
        return self.share >= STUCK_SHARE and self.true_share < STUCK_SHARE

    def as_dict(self) -> dict:
        return {"class": self.label, "share": round(self.share, 6),
                "true_share": round(self.true_share, 6)}


@dataclass(frozen=True)
class Causes:
    """What evaluate measured on a node run that can explain its verdict: the ``metric`` judged
    on (a ``node_metric.NODE_METRICS`` name), the class balance of the labelled target nodes
    (``majority_fraction`` of ``num_classes``), each model's ``top_class`` on the test nodes
    (keys ``gnn``, ``baseline``) and ``train.class_weight``."""

    metric: str = "accuracy"
    num_classes: int = 0
    majority_fraction: float | None = None
    top_class: Mapping[str, TopClass] = field(default_factory=dict)
    class_weight: str = "none"


def causes_of(outcome: str, gap: Gap, min_gain: float, low_homophily: bool | None,
              causes: Causes | None = None) -> list[str]:
    """The causes a verdict's advice names, in its order (eval.json ``causes``):

    * ``imbalanced``: judged on accuracy while the classes are imbalanced (``imbalanced``);
    * ``baseline_at_base_rate`` / ``gnn_at_base_rate``: that model is stuck (``TopClass``);
    * inconclusive only: ``few_test_items`` when the interval holds 0 and reaches past
      ``±min_gain`` (more items would decide it), ``tied`` when it lies within ``±min_gain``
      (they would not), ``below_min_gain`` when it excludes 0 with ``|gain| < min_gain``;
    * ``low_homophily`` (hurts or inconclusive, as analyze measured it); a loss on a graph
      whose homophily is not low, or not measured: ``homophily_not_low`` /
      ``homophily_not_measured``.
    """
    found = []
    if causes is not None:
        if causes.metric == "accuracy" and imbalanced(causes.majority_fraction,
                                                      causes.num_classes):
            found.append("imbalanced")
        found += [f"{who}_at_base_rate" for who in ("baseline", "gnn")
                  if who in causes.top_class and causes.top_class[who].stuck]
    if outcome == "inconclusive":
        if not gap.low <= 0 <= gap.high:
            found.append("below_min_gain")
        elif gap.low < -min_gain or gap.high > min_gain:
            found.append("few_test_items")
        else:
            found.append("tied")
    if low_homophily and outcome != "helps":
        found.append("low_homophily")
    elif outcome == "hurts":
        found.append("homophily_not_low" if low_homophily is False else "homophily_not_measured")
    return found


def _items_needed(gap: Gap, min_gain: float) -> int:
    """Test items at which the interval's half-width would shrink to ``min_gain`` (it narrows
    as one over the square root of the count)."""
    half = (gap.high - gap.low) / 2.0
    return math.ceil(gap.n * (half / min_gain) ** 2)


def _advice(cause: str, model: str, baseline: str, gap: Gap, min_gain: float, items: str,
            causes: Causes | None) -> str:
    """One cause of ``causes_of`` in words, naming the setting that addresses it."""
    causes = causes or Causes()
    weigh = ("even with train.class_weight=balanced" if causes.class_weight == "balanced" else
             "-S train.class_weight=balanced weighs the classes in the loss")
    if cause == "imbalanced":
        m = causes.majority_fraction
        better = "roc_auc" if causes.num_classes == 2 else "macro_f1"
        return (f"the classes are imbalanced (the largest holds {m:.1%} of the labelled nodes), "
                f"so accuracy barely separates models (always predicting it scores {m:.3f}): "
                f"judge on -S evaluate.metric={better} (what auto picks here)"
                + ("" if causes.class_weight == "balanced" else
                   " and weigh the classes with -S train.class_weight=balanced"))
    if cause.endswith("_at_base_rate"):
        who = "gnn" if cause == "gnn_at_base_rate" else "baseline"
        top = causes.top_class[who]
        name = model if who == "gnn" else f"the {baseline}"
        return (f"{name} predicts class {top.label} for {top.share:.1%} of the test nodes (of "
                f"which {top.true_share:.1%} are of it): it is stuck at the base rate, a "
                f"majority-class predictor; {weigh}")
    if cause == "few_test_items":
        more = (f"about {_items_needed(gap, min_gain):,} would narrow it to ±{min_gain}"
                if min_gain > 0 else f"more labelled test {items} would narrow it")
        return (f"the interval contains 0 and reaches past ±{min_gain} (evaluate.min_gain): "
                f"{gap.n} test {items} are too few to tell these models apart; {more}")
    if cause == "tied":
        return (f"the whole interval lies within ±{min_gain} (evaluate.min_gain): the models "
                f"are tied on this test set, and more test {items} would not change that")
    if cause == "below_min_gain":
        return f"|gain| is below evaluate.min_gain={min_gain}"
    if cause == "low_homophily":
        if model in SEPARATES_EGO:
            return (f"homophily is low (metrics/graph.json) and {model} already keeps a node's "
                    "own state apart from its neighbours' (sage and sep measured within 0.01 of "
                    "each other there, docs/models.md): the features alone may carry the labels")
        return ("homophily is low (metrics/graph.json): try the heterophily-aware model, "
                f"-S train.model={HETEROPHILY_MODEL} (ego/neighbour separation: 0.13-0.15 above "
                "gcn on generated heterophilous graphs, docs/models.md)")
    if cause == "homophily_not_low":
        return ("homophily is not low, so check depth and over-smoothing (reports/report.html) "
                "and whether the features alone carry the labels")
    if cause == "homophily_not_measured":
        return ("homophily was not measured (the analyze stage); check depth and over-smoothing "
                "and whether the features alone carry the labels")
    raise AssertionError(f"no advice for cause {cause!r}")


# ---------------------------------------------------------------------------------- wording
def margin(gap: Gap, metric: str, items: str) -> str:
    """The gap from the leader's side: ``+d test <metric> (95% interval +a to +b, n test
    <items>)`` with ``d >= 0``, the interval flipped with it when the baseline leads."""
    if gap.gain >= 0:
        gain, low, high = gap.gain, gap.low, gap.high
    else:
        gain, low, high = -gap.gain, -gap.high, -gap.low
    return (f"{gain:+.4f} test {metric} (95% interval {low:+.4f} to {high:+.4f}, "
            f"{gap.n} test {items})")


def listed(names) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def sentence(model: str, baseline: str, metric: str, gap: Gap, outcome: str, min_gain: float,
             low_homophily: bool | None, items: str, *, causes: Causes | None = None,
             candidates: tuple[str, ...] = ()) -> str:
    """The verdict in words: who beats whom by a positive margin (``margin``), the interval and
    the test-set size, then the advice of each cause ``causes_of`` finds (a note when the
    graph helps). ``low_homophily``: analyze's flag, None when not measured or not
    applicable; ``causes``: the node run's measurements (None: none); ``candidates``: the
    ``baseline.models`` the baseline was chosen from on val (named when several)."""
    base = f"the structure-free {baseline}"
    if len(candidates) > 1:
        base += f", the best on val of {listed(candidates)},"
    found = causes_of(outcome, gap, min_gain, low_homophily, causes)
    advice = [_advice(c, model, baseline, gap, min_gain, items, causes) for c in found]
    figures = margin(gap, metric, items)
    if outcome == "helps":
        return (f"{model} beats {base} by {figures}: the graph helps"
                + (f"; note: {'; '.join(advice)}" if advice else ""))
    if outcome == "hurts":
        return (f"{base} beats {model} by {figures}: the graph hurts here; prefer the "
                f"{baseline}; {'; '.join(advice)}")
    if gap.gain >= 0:
        lead = f"{model} is ahead of {base} by {figures}"
    else:
        lead = f"{base} is ahead of {model} by {figures}"
    return f"inconclusive: {lead}; {'; '.join(advice)}"


def why_inconclusive(gap: Gap, min_gain: float, items: str) -> str:
    """Why an inconclusive gap is one: the interval-based cause of ``causes_of`` in words."""
    (cause,) = causes_of("inconclusive", gap, min_gain, None)
    return _advice(cause, "", "", gap, min_gain, items, None)


def described(baseline: str) -> str:
    """A baseline (a key of ``BASELINE_NAMES``) as a verdict names it: what it reads."""
    kind = "structure-free " if baseline in STRUCTURE_FREE else ""
    what = "endpoint popularity, " if baseline == "preferential_attachment" else ""
    where = "" if baseline in STRUCTURE_FREE else f" ({what}train graph only)"
    return f"{kind}{BASELINE_NAMES[baseline]}{where}"


# ---------------------------------------------------------------------- over training seeds
OUTCOMES = ("helps", "hurts", "inconclusive")


def seed_run(seed: int, gnn, baseline, gap: Gap, outcome: str) -> dict:
    """One training seed's row of eval.json ``seeds.runs``: the test score of each model
    (``gnn``, ``baseline``: the judged metric's value, or per-item scores float (n,) whose
    mean it is), the paired ``gap`` with its interval and the ``outcome`` ``judge`` gave it."""
    return {"seed": seed, "gnn": round(float(np.mean(gnn)), 6),
            "baseline": round(float(np.mean(baseline)), 6), "gain": round(gap.gain, 6),
            "interval": [round(gap.low, 6), round(gap.high, 6)], "outcome": outcome}


def spread(values: list[float]) -> dict:
    """``mean``, ``std`` (sample standard deviation, ddof 1; 0 for one value), ``min``, ``max``."""
    v = np.asarray(values, dtype=np.float64)
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return {"mean": round(float(v.mean()), 6), "std": round(std, 6),
            "min": round(float(v.min()), 6), "max": round(float(v.max()), 6)}


def over_seeds(runs: list[dict]) -> dict:
    """eval.json's ``seeds``: the ``seed_run`` rows, the ``spread`` of each model's test score
    and of the gain over them, and how many seeds gave each outcome."""
    return {"count": len(runs), "runs": runs,
            **{key: spread([run[key] for run in runs]) for key in ("gnn", "baseline", "gain")},
            "outcomes": {o: sum(run["outcome"] == o for run in runs) for o in OUTCOMES}}


def seeds_sentence(seeds: dict, metric: str, model: str = "the GNN",
                   baseline: str = "the baseline") -> str:
    """``over_seeds`` in words: the outcome counts and the mean, std and range of the signed
    difference ``model`` minus ``baseline`` in test ``metric``."""
    n, gain = seeds["count"], seeds["gain"]
    counts = ", ".join(f"{outcome} in {count} of {n}"
                       for outcome, count in seeds["outcomes"].items() if count)
    return (f"over {n} training seeds: {counts}; test {metric} of {model} minus {baseline}: "
            f"mean {gain['mean']:+.4f} (std {gain['std']:.4f}, {gain['min']:+.4f} to "
            f"{gain['max']:+.4f})")
