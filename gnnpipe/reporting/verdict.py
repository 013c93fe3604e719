"""Does the graph help? The GNN-minus-baseline gap with its uncertainty, and the verdict.

The gap is the mean over test items (nodes: 1 when the prediction is right; links: the
reciprocal rank of each positive among its negatives) of the GNN's score minus the baseline's.
A paired bootstrap over the test items gives its 95% interval: both models are scored on the
same resampled items, so what they share (an easy or a hard test set) cancels. The verdict is
``helps`` or ``hurts`` only when the interval excludes 0 and the gap reaches
``evaluate.min_gain``; otherwise ``inconclusive``, and the advice says why.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# bootstrap indices drawn per chunk (samples x items): bounds memory at ~32 MB for any test set
_CHUNK_ITEMS = 1 << 22
LEVEL = 0.95
# how a verdict names each baseline: the structure-free models of baseline.models, and the
# structure heuristics of a link run (gnnpipe/reporting/link_heuristics.py)
BASELINE_NAMES = {"mlp": "MLP", "gbdt": "gradient-boosted trees (gbdt)",
                  "common_neighbours": "common-neighbours heuristic",
                  "adamic_adar": "Adamic-Adar heuristic",
                  "resource_allocation": "resource-allocation heuristic"}
STRUCTURE_FREE = ("mlp", "gbdt")


@dataclass(frozen=True)
class Gap:
    """The paired gap of two models on ``n`` test items: ``gain`` = mean(gnn - baseline) and
    its ``LEVEL`` percentile interval [``low``, ``high``] from ``samples`` bootstrap draws."""

    n: int
    gain: float
    low: float
    high: float
    samples: int

    def as_dict(self) -> dict:
        return {"test_items": self.n, "gain": round(self.gain, 6),
                "interval": [round(self.low, 6), round(self.high, 6)],
                "level": LEVEL, "bootstrap_samples": self.samples}


def paired_gap(gnn: np.ndarray, baseline: np.ndarray, samples: int, seed: int) -> Gap:
    """``gnn``, ``baseline`` float (n,): per-item scores of the two models on the same test
    items. Resamples the items ``samples`` times with replacement (numpy PCG64 seeded by
    ``seed``: the same call gives the same interval)."""
    diff = np.asarray(gnn, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    n = diff.size
    if n == 0:
        raise ValueError("no test items to compare the models on")
    rng = np.random.Generator(np.random.PCG64(seed))
    means = np.empty(samples)
    step = max(1, _CHUNK_ITEMS // n)
    for start in range(0, samples, step):
        count = min(step, samples - start)
        means[start:start + count] = diff[rng.integers(0, n, size=(count, n))].mean(axis=1)
    tail = (1.0 - LEVEL) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Gap(n=n, gain=float(diff.mean()), low=float(low), high=float(high), samples=samples)


def judge(gap: Gap, min_gain: float) -> str:
    """``helps`` (interval above 0, gain >= min_gain), ``hurts`` (below 0, gain <= -min_gain),
    else ``inconclusive``."""
    if gap.low > 0 and gap.gain >= min_gain:
        return "helps"
    if gap.high < 0 and gap.gain <= -min_gain:
        return "hurts"
    return "inconclusive"


def sentence(model: str, baseline: str, metric: str, gap: Gap, outcome: str, min_gain: float,
             low_homophily: bool | None, items: str) -> str:
    """The verdict in words, with the gap, its interval and the test-set size; the advice
    follows the measured cause: heterophily only when analyze measured low homophily
    (``low_homophily``: None when not measured or not applicable), a small test set when the
    interval is wide."""
    figures = _figures(gap, metric, items)
    if outcome == "helps":
        return f"{model} beats the structure-free {baseline} by {figures}: the graph helps"
    if outcome == "hurts":
        cause = ("homophily is low (metrics/graph.json): try a heterophily-aware model"
                 if low_homophily else
                 "homophily is not low, so check depth and over-smoothing (reports/report.html) "
                 "and whether the features alone carry the labels" if low_homophily is False else
                 "homophily was not measured (the analyze stage); check depth and over-smoothing "
                 "and whether the features alone carry the labels")
        return (f"the structure-free {baseline} beats {model} by {figures}: the graph hurts "
                f"here; prefer the {baseline}; {cause}")
    return (f"inconclusive: {model} vs the structure-free {baseline} is {figures}; "
            f"{_why_inconclusive(gap, min_gain, items)}")


def _figures(gap: Gap, metric: str, items: str) -> str:
    return (f"{gap.gain:+.4f} test {metric} (95% interval {gap.low:+.4f} to {gap.high:+.4f}, "
            f"{gap.n} test {items})")


def _why_inconclusive(gap: Gap, min_gain: float, items: str) -> str:
    if gap.low <= 0 <= gap.high:
        return (f"the interval contains 0: {gap.n} test {items} are too few to tell these "
                "models apart; more labelled test items would narrow it")
    return f"|gain| is below evaluate.min_gain={min_gain}"


def described(baseline: str) -> str:
    """A baseline (a key of ``BASELINE_NAMES``) as a verdict names it: what it reads."""
    kind = "structure-free " if baseline in STRUCTURE_FREE else ""
    where = "" if baseline in STRUCTURE_FREE else " (train graph only)"
    return f"{kind}{BASELINE_NAMES[baseline]}{where}"


# ------------------------------------------------------------------------------------ links
def heuristic_sentence(model: str, heuristic: str, gap: Gap, outcome: str,
                       min_gain: float) -> str:
    """The link verdict against a structure heuristic (a key of ``BASELINE_NAMES`` outside
    ``STRUCTURE_FREE``), on test MRR: beating it says the encoder adds to counting shared
    neighbours; losing says it misses what the train graph already shows."""
    name = described(heuristic)
    figures = _figures(gap, "MRR", "edges")
    if outcome == "helps":
        return (f"{model} beats the {name}, the best baseline, by {figures}: the encoder adds to "
                "what shared neighbours tell")
    if outcome == "hurts":
        return (f"the {name} beats {model} by {figures}: counting shared neighbours ranks the "
                "held-out edges better than the encoder; prefer the heuristic, or a link model "
                "with pair features (SEAL / NCN-style), and check the GNN's training (epochs, "
                "depth, train.lr)")
    return (f"inconclusive: {model} vs the {name}, the best baseline, is {figures}; "
            f"{_why_inconclusive(gap, min_gain, 'edges')}")


# ---------------------------------------------------------------------- over training seeds
OUTCOMES = ("helps", "hurts", "inconclusive")


def seed_run(seed: int, gnn: np.ndarray, baseline: np.ndarray, gap: Gap, outcome: str) -> dict:
    """One training seed's row of eval.json ``seeds.runs``: the test score of each model (the
    mean of its per-item scores ``gnn``, ``baseline`` float (n,)), the paired ``gap`` with its
    interval and the ``outcome`` ``judge`` gave it."""
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


def seeds_sentence(seeds: dict, metric: str) -> str:
    """``over_seeds`` in words: the outcome counts and the gain's mean, std and range."""
    n, gain = seeds["count"], seeds["gain"]
    counts = ", ".join(f"{outcome} in {count} of {n}"
                       for outcome, count in seeds["outcomes"].items() if count)
    return (f"over {n} training seeds: {counts}; test {metric} gain "
            f"{gain['mean']:+.4f} (std {gain['std']:.4f}, {gain['min']:+.4f} to "
            f"{gain['max']:+.4f})")
