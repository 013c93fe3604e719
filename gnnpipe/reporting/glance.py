"""What the report's at-a-glance section reads from metrics/eval.json, found by shape rather
than by name, so that a comparison or a scored model that evaluate adds later appears without
more code:

- a **comparison** is any object with a ``gain`` and an ``interval`` (``gap``: the GNN against
  the chosen baseline; with ``evaluate.seeds`` > 1 also each run of ``seeds.runs``);
- a **scored model** is any object with a ``test`` object of numbers (``gnn``, ``mlp``, and any
  heuristic or hard-negative rows a link evaluation holds), nested numbers flattened as
  ``outer.inner``.
"""

from __future__ import annotations

from gnnpipe.reporting.summary import judged_on
from gnnpipe.reporting.svg import Bar

SEEDS = "seeds"  # eval.json's per-seed runs: drawn as their own rows, not found by shape


def baseline_label(ev: dict) -> str:
    """The structure-free model eval.json's ``mlp`` scores are of, as a column or row names
    it: MLP, or the ``baseline.models`` name the baseline stage chose (gbdt)."""
    chosen = ev.get("baseline_model", "mlp")
    return "MLP" if chosen == "mlp" else chosen


def _named(ev: dict, path: tuple[str, ...]) -> str:
    """A row's label: the GNN and the baseline by their names, anything else by its path."""
    model, baseline = ev.get("model", "gnn"), baseline_label(ev)
    names = {("gnn",): model, ("mlp",): baseline, ("gap",): f"{model} − {baseline}"}
    return names.get(path, " / ".join(path))


def _walk(node: dict, path: tuple[str, ...] = ()):
    """(path, object) of every object under ``node`` (lists are not entered), depth first in
    file order; the ``seeds`` subtree is left out."""
    for key, value in node.items():
        if isinstance(value, dict) and key != SEEDS:
            yield (*path, str(key)), value
            yield from _walk(value, (*path, str(key)))


def comparison_bars(ev: dict) -> list[Bar]:
    """Every comparison of eval.json as a ``Bar`` (``gap`` carries the run's ``outcome``), then
    one per other training seed (``seeds.runs`` after the first, which is ``gap`` itself)."""
    runs = ev.get(SEEDS, {}).get("runs", [])
    bars = []
    for path, obj in _walk(ev):
        if "gain" in obj and isinstance(obj.get("interval"), list):
            outcome = ev.get("outcome") if path == ("gap",) else obj.get("outcome")
            # with seeds, ``gap`` is the first run's (the pipeline seed's)
            label = _named(ev, path) + (f" (seed {runs[0]['seed']})"
                                        if runs and path == ("gap",) else "")
            bars.append(Bar(label, obj["gain"], *obj["interval"], outcome))
    bars += [Bar(f"seed {run['seed']}", run["gain"], *run["interval"], run["outcome"])
             for run in runs[1:]]
    return bars


def _flatten(scores: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in scores.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    return out


def scored_models(ev: dict) -> tuple[list[str], list[list]]:
    """(header, rows) of every scored model's test metrics: ``["model", *metrics]``, the
    verdict's metric first, the others in the order first seen; a model without one gets None."""
    found = [(_named(ev, path), _flatten(obj["test"])) for path, obj in _walk(ev)
             if isinstance(obj.get("test"), dict)]
    metrics = [judged_on(ev)]  # the verdict's metric first
    for _, scores in found:
        metrics += [m for m in scores if m not in metrics]
    return ["model", *metrics], [[name, *(scores.get(m) for m in metrics)]
                                 for name, scores in found]
