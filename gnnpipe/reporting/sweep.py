"""The depth sweep: the judged test metric and over-smoothing against ``train.num_layers``
across the experiments of a `dvc exp run` sweep, read from ``dvc exp show --json`` output (each
experiment's params and its headline ``metrics/summary.json``) and drawn as one PNG.

The metric is the headline's (``metric``: ``test_accuracy``, ``test_roc_auc``, ...), so the
columns are ``gnn_<metric>`` and ``mlp_<metric>`` (``gnn_test_accuracy`` on the default graph).
"""

from __future__ import annotations

import fnmatch

from gnnpipe.pipeline import SUMMARY
from gnnpipe.reporting import figures
from gnnpipe.reporting.summary import SMOOTHING

SWEEP_PARAM = "train.num_layers"  # the depth a sweep varies; its CSV column is "num_layers"
GNN_PREFIX = "gnn_test_"  # the GNN's column of the judged metric: gnn_test_<metric>


def metric_column(rows: list[dict]) -> str:
    """The ``sweep_rows`` column of the GNN's judged test metric (``gnn_test_accuracy``, ...)."""
    return next(key for key in rows[0] if key.startswith(GNN_PREFIX))


def _entries(node):
    """Every rev entry of ``dvc exp show --json`` output: the workspace and commits at the top,
    experiments in their ``experiments`` lists (DVC 3: ``[{rev, data, experiments: [{revs:
    [...]}]}]``)."""
    if isinstance(node, list):
        for item in node:
            yield from _entries(item)
    elif isinstance(node, dict):
        if "data" in node:
            yield node
        for key, value in node.items():
            if isinstance(value, (list, dict)) and key != "data":
                yield from _entries(value)


def _lookup(tree: dict, *keys: str):
    """``tree[k0][k1]...`` or None; keys are separate since file names hold dots."""
    for key in keys:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def _flat(tree, prefix: str = "") -> dict:
    """Nested params as ``{"train.num_layers": 2, ...}``."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _select(exp_show: list | dict, patterns: list[str]) -> list[tuple[str, dict]]:
    """``(name, data)`` of the entries (experiments, workspace, commits) whose name matches one
    of ``patterns`` (names or globs), in file order; every pattern must match one."""
    found = [(entry.get("name") or str(entry.get("rev", "")), entry)
             for entry in _entries(exp_show)]
    names = ", ".join(name for name, _ in found) or "nothing"
    chosen: dict[str, dict] = {}
    for pattern in patterns:
        hits = [(name, entry) for name, entry in found if fnmatch.fnmatchcase(name, pattern)]
        if not hits:
            raise ValueError(f"--experiments {pattern!r} matches no experiment of the sweep file; "
                             f"it holds: {names}")
        for name, entry in hits:
            chosen.setdefault(name, entry.get("data") or {})
    return list(chosen.items())


def sweep_rows(exp_show: list | dict, patterns: list[str], param: str = SWEEP_PARAM
               ) -> list[dict]:
    """One row per experiment named by ``patterns`` in ``dvc exp show --json`` output, sorted by
    ``param``.

    Only the named experiments count (``dvc exp show`` lists every experiment of the repository,
    most of them not part of the sweep). Each must have ``param`` and, in its headline
    ``metrics/summary.json``, the GNN/MLP test scores on its judged metric and the GNN's
    smoothing figures; no two may share a value of ``param`` or differ in the metric, and their
    params may differ only in ``param`` and per-layer lists (one entry per layer, such as
    ``train.neighbor.num_neighbors``); otherwise one line names the experiment and the key.
    """
    rows, seen, first = [], {}, None
    for name, data in _select(exp_show, patterns):
        params = _flat(_lookup(data, "params", "params.yaml", "data") or {})
        headline = _lookup(data, "metrics", SUMMARY, "data") or {}
        metric = headline.get("metric") or "test_accuracy"  # a headline before it named one
        value = params.get(param)
        row = {param.rsplit(".", 1)[-1]: value, "name": name,
               "model": params.get("train.model"),
               f"gnn_{metric}": headline.get("gnn"), f"mlp_{metric}": headline.get("baseline"),
               **{full: headline.get(short) for short, full in SMOOTHING.items()}}
        missing = [key for key, v in row.items() if v is None]
        if missing:
            raise ValueError(f"experiment {name!r} has no {missing[0]} (params.yaml {param}, "
                             f"{SUMMARY} test scores and smoothing figures): did it "
                             "fail, or is it a link-task run? Select the experiments of the "
                             "depth sweep")
        if rows and metric_column(rows) != f"gnn_{metric}":
            raise ValueError(f"experiments {first[0]!r} and {name!r} are judged on different "
                             f"metrics ({metric_column(rows)[4:]} vs {metric}): select the "
                             "experiments of one sweep")
        if value in seen:
            raise ValueError(f"experiments {seen[value]!r} and {name!r} both have {param}="
                             f"{value}; select one of them")
        seen[value] = name
        if first is None:
            first = (name, params)
        for key in sorted(set(params) | set(first[1])):
            a, b = first[1].get(key), params.get(key)
            per_layer = isinstance(a, list) and isinstance(b, list) \
                and len(a) == first[1].get(param) and len(b) == value
            if key != param and a != b and not per_layer:
                raise ValueError(f"experiments {first[0]!r} and {name!r} differ in {key} ({a!r} "
                                 f"vs {b!r}), not only in {param}: select the experiments of "
                                 "one sweep")
        rows.append(row)
    return sorted(rows, key=lambda r: r[param.rsplit(".", 1)[-1]])


def render_sweep(rows: list[dict], param: str = SWEEP_PARAM) -> bytes:
    """The depth-sweep PNG of ``sweep_rows`` output (ValueError when no point was found)."""
    if not rows:
        raise ValueError("no experiment selected; run the sweep (docs/evaluation.md) and "
                         "`dvc exp show --json > exps.json` first")
    column = metric_column(rows)
    return figures.depth_sweep(rows, param.rsplit(".", 1)[-1], column[len(GNN_PREFIX):])
