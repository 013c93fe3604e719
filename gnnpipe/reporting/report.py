"""The run report: one self-contained HTML page a person opens to see what a run did.

``render`` takes the metrics the stages wrote (as parsed JSON / CSV rows) and returns the HTML
and the PNG figures; the figures are embedded in the page as data URIs, so the single file can
be mailed or archived, and also returned separately so ``reports/figures/`` holds them for
``dvc plots`` and for linking. Missing optional inputs (partition stats, training histories)
turn into a line saying what to run, never into an error.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from typing import Callable

from gnnpipe.reporting import figures, svg
from gnnpipe.reporting.glance import baseline_label, comparison_bars, scored_models
from gnnpipe.reporting.node_metric import METRIC_NAMES, NODE_METRICS
from gnnpipe.reporting.summary import judged_on
from gnnpipe.reporting.verdict import (BASELINE_NAMES, STRUCTURE_FREE, described, listed,
                                       seeds_sentence)

PHASES = ("train", "val", "test")


@dataclass(frozen=True)
class ReportInputs:
    """Parsed stage outputs; the dict fields mirror the metrics files of the same name."""

    prepare: dict  # metrics/prepare.json
    graph: dict  # metrics/graph.json (analyze)
    split_audit: dict  # metrics/split_audit.json
    evaluation: dict  # metrics/eval.json
    details: dict  # reports/eval_details.json
    partition: dict | None = None  # metrics/partition.json
    train: dict | None = None  # metrics/train.json
    train_perf: dict | None = None  # metrics/perf/train.json (engine, evaluation forward, ranks)
    baseline: dict | None = None  # metrics/baseline.json
    train_history: list[dict] = field(default_factory=list)  # metrics/train_history.csv
    baseline_history: list[dict] = field(default_factory=list)  # metrics/baseline_history.csv
    degree_hist: list[dict] = field(default_factory=list)  # metrics/degree_hist.csv
    # data/prepared/classes.parquet: the user's label value of each class code; None (an older
    # prepared folder without it): classes are shown by code
    classes: list | None = None


@dataclass(frozen=True)
class Report:
    html: str
    figures: dict[str, bytes]  # file name (e.g. "training_curves.png") -> PNG bytes


# ---------------------------------------------------------------------------------- parsing
def parse_csv(text: str, where: str) -> list[dict]:
    """Rows of a CSV written by ``gnnpipe.io.write_csv``; numeric cells become int/float."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{where}: empty CSV, expected a header line")
    header = lines[0].split(",")

    def cell(value: str):
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                pass
        return value

    rows = []
    for number, line in enumerate(lines[1:], start=2):
        values = line.split(",")
        if len(values) != len(header):
            raise ValueError(f"{where}: line {number} has {len(values)} cells, header has "
                             f"{len(header)}")
        rows.append({key: cell(value) for key, value in zip(header, values)})
    return rows


# ---------------------------------------------------------------------------------- helpers
def _e(value) -> str:
    return html.escape(str(value))


def _fmt(value, digits: int = 4) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(_fmt(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _pairs(rows: list[tuple[str, object]]) -> str:
    return _table(["", "value"], [[k, v] for k, v in rows])


def _figure_html(href: str, png: bytes, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{_e(caption)}">'
            f'<figcaption>{_e(caption)} (<a href="{_e(href)}">{_e(href)}</a>)</figcaption></figure>')


CSS = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em;
       color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f3f3f3; }
.verdict { padding: 0.8em 1em; border-radius: 6px; font-size: 1.15em; }
.helps { background: #e6f4ea; border: 1px solid #34a853; }
.nothing { background: #fdecea; border: 1px solid #d93025; }
.warning { background: #fff4e5; border: 1px solid #f29900; padding: 0.6em 1em; margin: 0.4em 0;
           border-radius: 6px; }
figure { margin: 1em 0; } img { max-width: 100%; } figcaption { color: #555; font-size: 0.9em; }
.fail { color: #d93025; font-weight: bold; } .pass { color: #188038; }
.wide { overflow-x: auto; }
"""


# ---------------------------------------------------------------------------------- sections
def _warnings(inputs: ReportInputs) -> list[str]:
    found = [*inputs.prepare.get("warnings", []), *inputs.graph.get("warnings", [])]
    return [f'<div class="warning">&#9888; {_e(w)}</div>' for w in found]


def _judged(ev: dict) -> str:
    """The name of the metric eval.json's verdict is judged on, as sentences say it."""
    return METRIC_NAMES[judged_on(ev)]


def _chosen_from(ev: dict) -> str:
    """A sentence naming the models the baseline stage chose among on val (eval.json
    ``baseline_candidates``) where it had several, else nothing."""
    names = list(ev.get("baseline_candidates") or ())
    if len(names) < 2:
        return ""
    return (f" The {BASELINE_NAMES[ev.get('baseline_model', 'mlp')]} was the best on val of "
            f"{listed(names)} (baseline.models).")


def _headline(inputs: ReportInputs) -> str:
    """The verdict in plain words with its interval (evaluate's ``outcome`` and ``gap``: the
    gain in the test metric the run is judged on, test MRR for links, judged by
    gnnpipe/reporting/verdict.py); a margin is always said from the winner's side."""
    ev = inputs.evaluation
    metric, link = _judged(ev), ev.get("task") == "link"
    gap, model = ev["gap"], ev["model"]
    base = BASELINE_NAMES[ev.get("baseline_model", "mlp")]
    whole = described(ev.get("baseline_model", "mlp"))
    low, high = gap["interval"]
    if gap["gain"] < 0:  # the figures from the baseline's side: its lead and interval
        low, high = -high, -low
    spread = (f"95% interval {low:+.4f} to {high:+.4f} over {gap['test_items']} test "
              f"{'edges' if link else 'nodes'}")
    lead = abs(gap["gain"])
    if ev["outcome"] == "collapsed":  # no gain is claimed from rounding noise
        plain = ("No verdict: the link scores collapsed (near-equal for most positive and "
                 "negative pairs), so no gain is claimed; what was measured and the likely "
                 "causes follow.")
    elif ev["outcome"] == "helps":
        plain = f"The graph helps: {model} is {lead:+.4f} test {metric} over the {base} ({spread})."
    elif ev["outcome"] == "hurts":
        plain = (f"The {base} wins: {model} is {lead:.4f} test {metric} behind the "
                 f"{whole} ({spread}), so the graph does not help on this data.")
    elif gap["gain"] >= 0:
        plain = (f"Inconclusive: {model} is ahead of the {whole} by {lead:+.4f} test {metric} "
                 f"({spread}); this test set cannot tell them apart.")
    else:
        plain = (f"Inconclusive: the {whole} is ahead of {model} by {lead:+.4f} test {metric} "
                 f"({spread}); this test set cannot tell them apart.")
    plain += _chosen_from(ev)
    if ev.get("seeds"):  # evaluate.seeds > 1: how the outcome holds across training seeds
        over = seeds_sentence(ev["seeds"], metric, model, f"the {base}")
        plain += f" {over[0].upper()}{over[1:]}."
    kind = "helps" if ev["outcome"] == "helps" else "nothing"
    parts = [f'<div class="verdict {kind}"><strong>{_e(plain)}</strong><br>'
             f"evaluate: {_e(ev['verdict'])}</div>"]
    return "\n".join(parts + _warnings(inputs))


def _glance(inputs: ReportInputs) -> str:
    """The verdict's figures in one look: every comparison's gap with its 95% interval (per
    training seed too, with the seeds' spread), the reach plot (node task) and every scored
    model's test metrics (link task: the GNN, the MLP and whatever rows evaluate added)."""
    ev = inputs.evaluation
    link = ev.get("task") == "link"
    metric = f"test {_judged(ev)}"
    out = ["<h2>At a glance</h2>",
           svg.interval_bars(comparison_bars(ev), metric, f"Gap in {metric}: GNN minus "
                                                          "baseline, with its 95% interval")]
    seeds = ev.get("seeds")
    if seeds:
        base = baseline_label(ev)
        out.append(_table([f"{metric} over {seeds['count']} training seeds", "mean", "std",
                           "min", "max"],
                          [[name, *(seeds[key][s] for s in ("mean", "std", "min", "max"))]
                           for name, key in ((ev["model"], "gnn"), (base, "baseline"),
                                             ("gain (GNN − baseline)", "gain"))]))
    if ev.get("reach"):
        out.append(svg.reach_plot(ev["reach"]["bins"], ev["model"],
                                  baseline_label(ev)))
    if link:
        header, rows = scored_models(ev)
        out += ["<h3>Link metrics on the test edges</h3>",
                f'<div class="wide">{_table(header, rows)}</div>']
    return "\n".join(out)


def _run_setup(inputs: ReportInputs) -> str:
    """What ran: model, sampler, engine and evaluation forward, as the train stage recorded them
    (metrics/train.json; the engine and forward from metrics/perf/train.json)."""
    train, perf = inputs.train, inputs.train_perf
    if not train:
        return "<h2>Run</h2><p>No train metrics (run <code>dvc repro train</code>).</p>"
    task = inputs.evaluation.get("task", "node")
    rows = [("task", "link prediction" if task == "link" else "node classification"),
            ("model", train.get("model")), ("sampler", train.get("sampler"))]
    if train.get("edge_type"):
        rows.append(("held-out edge type", train["edge_type"]))
    if train.get("node_type"):
        rows.append(("target node type", train["node_type"]))
    if train.get("embeddings"):  # train.embeddings: learnable rows (type:width), untrained rows
        untrained = ", ".join(f"{t} {n:,}" for t, n in train["embedding_rows_untrained"].items())
        rows.append(("learnable node embeddings",
                     f"{train['embeddings']} ({train['embeddings_combine']}); rows no training "
                     f"step reached, reading the mean of the trained ones: {untrained}"))
    if perf is None:
        rows.append(("engine / evaluation forward", "not recorded (metrics/perf/train.json "
                                                   "missing)"))
    else:
        # only the homogeneous node task can run Lightning; the others record no engine
        rows += [("engine", perf.get("engine", "plain")),
                 ("evaluation forward", "layer-wise (blocks of target nodes)"
                  if perf.get("eval_inference") == "layerwise" else "full (one forward)"),
                 ("processes", perf.get("world_size", 1))]
        if perf.get("shard", "none") != "none":
            rows.append(("shards", perf["shard"]))
        rows += [(name, "on") for name in ("amp", "compile") if perf.get(name)]
    return "<h2>Run</h2>" + _pairs(rows)


@dataclass(frozen=True)
class _TaskView:
    """What the report shows differently per task: the headline, the metric rows, the curve
    plotted, the per-class section (figures and table; link: none), the split audit's summary
    and whether the depth sweep applies."""

    headline: Callable[[ReportInputs], str]
    metric_names: Callable[[dict], list[str]]  # eval.json -> metric names
    curve_key: Callable[[dict], str]  # eval.json -> the history column of the val metric
    class_figures: bool
    split_summary: Callable[[dict], str]  # split_audit.json -> HTML before its checks
    sweep: bool


def _class_name(inputs: ReportInputs, code: int) -> str:
    """The user's label value of class ``code`` (classes.parquet), else the code itself."""
    if inputs.classes is not None and 0 <= code < len(inputs.classes):
        return str(inputs.classes[code])
    return str(code)


def _class_header(inputs: ReportInputs) -> list[str]:
    return ["code", "label"] if inputs.classes is not None else ["class"]


def _class_cells(inputs: ReportInputs, code: int) -> list:
    return [code, _class_name(inputs, code)] if inputs.classes is not None else [code]


def _label_coverage(inputs: ReportInputs) -> str:
    """Labelled / unlabelled nodes: overall (prepare, else the split audit or analyze) and per
    split role (the split audit)."""
    coverage = inputs.split_audit.get("label_coverage") or inputs.graph.get("label_coverage")
    overall = inputs.prepare.get("label_coverage") or coverage
    if not overall:
        return ""
    out = ["<h3>Label coverage</h3>",
           _pairs([("labelled nodes", overall.get("labelled")),
                   ("unlabelled nodes", overall.get("unlabelled")),
                   ("labelled share", f"{overall.get('labelled_fraction', 0.0):.1%}")])]
    per_role = (coverage or {}).get("per_role")
    if per_role:
        out.append(_table(["role", "labelled", "unlabelled"],
                          [[role, counts["labelled"], counts["unlabelled"]]
                           for role, counts in per_role.items()]))
    dropped = (coverage or {}).get("public_split_unlabelled")
    if dropped and any(dropped.values()):
        out.append(f"<p>The dataset's official split names {sum(dropped.values())} unlabelled "
                   f"nodes ({_e(dropped)}); they are unused.</p>")
    out.append("<p>Unlabelled nodes carry messages in every phase's graph but are in no split: "
               "no loss or metric counts them.</p>")
    return "\n".join(out)


def _per_class(inputs: ReportInputs, model: str) -> str:
    """Per-class test F1 and support of both models, by the user's label values."""
    gnn, mlp = inputs.details["gnn"]["test"], inputs.details["mlp"]["test"]
    support = [sum(row) for row in gnn["confusion"]]
    rows = [[*_class_cells(inputs, c), support[c], gnn["per_class_f1"][c], mlp["per_class_f1"][c]]
            for c in range(len(gnn["per_class_f1"]))]
    return _table([*_class_header(inputs), "test nodes", f"{model} F1",
                   f"{baseline_label(inputs.evaluation)} F1"], rows)


def _dataset(inputs: ReportInputs) -> str:
    p, g = inputs.prepare, inputs.graph
    h, deg, comp = g["homophily"], g["degree"], g["components"]
    rows = [("source", p.get("source")), ("nodes", p.get("nodes")),
            ("stored edges (directed)", p.get("edges")), ("undirected", p.get("undirected")),
            ("features", p.get("features")), ("classes", p.get("classes")),
            ("duplicate edges removed", p.get("duplicates_removed")),
            ("self-loops removed", p.get("self_loops_removed")),
            ("edge homophily", h["edge"]), ("node homophily", h["node"]),
            ("class-insensitive homophily (Lim et al.)", h["class_insensitive"]),
            ("adjusted homophily (Platonov et al.)", h["adjusted"]),
            ("degree min / median / mean / max",
             f"{deg['min']} / {deg['median']:g} / {deg['mean']:.2f} / {deg['max']}"),
            ("isolated nodes", f"{deg['isolated_nodes']} ({deg['isolated_fraction']:.1%})"),
            ("connected components", comp["count"]),
            ("largest component", f"{comp['largest']} nodes ({comp['largest_fraction']:.1%})")]
    if "phases" in g:
        rows.append(("edge homophily among train nodes", g["phases"].get("train_label_homophily")))
    labels = g["labels"]
    label_rows = [[*_class_cells(inputs, c), n, f"{frac:.1%}", h["per_class"][c]]
                  for c, (n, frac) in enumerate(zip(labels["count"], labels["fraction"]))]
    return ("<h2>Dataset</h2>" + _pairs(rows) + "<h3>Labels</h3>"
            + _table([*_class_header(inputs), "nodes", "share", "same-class neighbour share h_k"],
                     label_rows) + _label_coverage(inputs))


def _node_split(audit: dict) -> str:
    """Mode, shared structure and the class balance of each node split."""
    balance = audit.get("class_balance", {})
    sizes = audit.get("sizes", {})
    balance_rows = [[role, sizes.get(role), " / ".join(f"{f:.1%}" for f in balance[role]["fraction"])]
                    for role in PHASES if role in balance]
    facts = [f"{name} <b>{_e(_fmt(audit[key]))}</b>" for name, key in (
        ("mode", "mode"), ("structure shared across phases", "structure_shared_across_phases"))
        if audit.get(key) is not None]
    out = [f"<p>{'; '.join(facts)}</p>"] if facts else []
    if balance_rows:
        out.append(_table(["split", "nodes", "class shares"], balance_rows))
    return "\n".join(out)


def _link_ranking(ev: dict) -> str:
    """Test MRR and Hits@K of the GNN and every baseline (MLP, heuristics) under each negative
    set evaluate scored (eval.json ``baselines``; ``random_negatives`` with
    evaluate.link.negatives both), the judged set's chosen baseline marked."""
    sets = {ev["negatives"]: {"gnn": ev["gnn"], "baselines": ev["baselines"]}}
    if "random_negatives" in ev:
        sets = {"random": ev["random_negatives"], **sets}
    ranked = [name for name in ev["gnn"]["test"] if name == "mrr" or name.startswith("hits@")]
    models = [(ev["model"], "gnn"), *((BASELINE_NAMES[name], name) for name in ev["baselines"])]
    header = ["model"] + [f"{metric} ({name} negatives)" for name in sets for metric in ranked]
    rows = []
    for label, key in models:
        cells = []
        for table in sets.values():
            scores = table["gnn"] if key == "gnn" else table["baselines"][key]
            cells += [scores["test"][metric] for metric in ranked]
        mark = " (the verdict compares with it)" if key == ev["baseline_model"] else ""
        rows.append([label + mark, *cells])
    return ("<h3>Link ranking: test scores under each negative set</h3>" + _table(header, rows)
            + f"<p>Hard negatives are the targets of highest resource allocation from each "
            "source in the train graph (HeaRT); the heuristics count shared neighbours "
            "(common neighbours, Adamic-Adar, resource allocation: scored only where a pair can "
            "share one) or rank by endpoint popularity (preferential attachment), in the train "
            f"graph only. The verdict is on the {_e(ev['negatives'])} negatives, against the "
            "baseline of best val MRR there.</p>")


def _link_split(audit: dict) -> str:
    """Positive edges per phase, its message graph, fixed negatives and how they were drawn."""
    sizes, negatives = audit.get("sizes", {}), audit.get("negatives", {})
    message = audit.get("message_edges", {})
    rows = [[phase, sizes.get("train_supervision" if phase == "train" else phase),
             message.get(phase), negatives.get(phase, {}).get("per_positive")]
            for phase in PHASES]
    hard = audit.get("hard_negatives", {})
    facts = [("edge type", audit.get("edge_type")),
             ("edges in the message role", sizes.get("message")),
             ("negatives drawn", audit.get("negative_strategy")),
             ("hard negatives per positive (HeaRT)",
              hard.get("test", {}).get("per_positive") if hard else None),
             ("supervision edges disjoint from message edges", audit.get("disjoint_supervision")),
             ("undirected", audit.get("undirected"))]
    return (_pairs([(k, v) for k, v in facts if v is not None])
            + _table(["phase", "positive edges", "message edges", "fixed negatives per positive"],
                     rows))


def _node_curve(ev: dict) -> str:
    """The history column of the metric a node run is judged on: ``val_acc``, or
    ``val_<metric>`` (train and baseline add it when the metric is not accuracy)."""
    metric = judged_on(ev)
    return "val_acc" if metric == "accuracy" else f"val_{metric}"


TASK_VIEWS = {
    "node": _TaskView(_headline, lambda ev: [m for m in NODE_METRICS if m in ev["gnn"]["test"]],
                      _node_curve, True, _node_split, True),
    "link": _TaskView(_headline, lambda ev: list(ev["gnn"]["test"]), lambda ev: "val_mrr", False,
                      _link_split, False),
}


def _split(inputs: ReportInputs, view: _TaskView) -> str:
    audit = inputs.split_audit
    status = ('<span class="pass">passed</span>' if audit["passed"]
              else '<span class="fail">FAILED</span>')
    checks = [[c["check"], "pass" if c["passed"] else "FAIL", c["detail"]] for c in audit["checks"]]
    phases = inputs.graph.get("phases", {})
    phase_rows = [[phase, phases[phase]["edges"], phases[phase]["isolated_nodes"],
                   f"{phases[phase]['isolated_fraction']:.1%}"] for phase in PHASES if phase in phases]
    out = [f"<h2>Split audit: {status}</h2>", view.split_summary(audit),
           _table(["check", "result", "detail"], checks)]
    if phase_rows:
        out.append(_table(["phase", "message edges", "own nodes isolated", "share"], phase_rows))
    return "\n".join(out)


def _partition(inputs: ReportInputs) -> str:
    part = inputs.partition
    if not part:
        return "<h2>Partition</h2><p>No partition stats (run <code>dvc repro partition</code>).</p>"
    sizes = part.get("part_sizes", [])
    rows = [("method", part.get("method")), ("parts", part.get("num_parts")),
            ("edge cut", part.get("edge_cut")), ("edge cut fraction", part.get("edge_cut_fraction")),
            ("balance (largest / mean part)", part.get("balance")),
            ("part sizes min / max", f"{min(sizes)} / {max(sizes)}" if sizes else None)]
    return "<h2>Partition</h2>" + _pairs(rows)


def _metrics(inputs: ReportInputs, names: list[str]) -> str:
    ev = inputs.evaluation
    base = ev.get("baseline_model", "mlp")  # eval.json's "mlp" holds the chosen baseline
    rows = []
    for role in ("val", "test"):
        for metric in names:
            gain = ev["gnn_minus_mlp"].get(f"{role}_{metric}")
            rows.append([f"{role} {metric}", ev["gnn"][role][metric], ev["mlp"][role][metric],
                         "n/a" if gain is None else f"{gain:+.4f}"])
    label = baseline_label(ev)
    named = label if base in STRUCTURE_FREE else BASELINE_NAMES[base]
    out = [f"<h2>Metrics vs the {_e(named)} baseline</h2>",
           _table(["metric", ev["model"], label, f"gnn − {label}"], rows)]
    if "baselines" in ev:  # a link run with hard negatives: every model under each set
        out.append(_link_ranking(ev))
    training = [[name, info.get("best_epoch"), info.get("epochs_run"), info.get("parameters")]
                for name, info in ((ev["model"], inputs.train), (label, inputs.baseline)) if info]
    if training:
        out.append(_table(["model", "best epoch", "epochs run", "parameters"], training))
    smooth = ev.get("smoothing")
    if smooth:
        out += ["<h3>Over-smoothing diagnostics (final-layer outputs = logits)</h3>",
                _table(["model", "mean pairwise cosine similarity", "Dirichlet energy",
                        "normalised Dirichlet energy (Rayleigh quotient)"],
                       [[name, s["cosine_similarity"], s["dirichlet_energy"],
                         s["rayleigh_quotient"]] for name, s in
                        ((ev["model"], smooth["gnn"]), (base, smooth["mlp"]))]),
                "<p>Computed on the test-phase message graph. Similarity near 1 and energy "
                "near 0 mean the GNN's outputs are nearly constant across neighbours: "
                "over-smoothing. See the depth sweep in docs/evaluation.md.</p>"]
    return "\n".join(out + _reach(ev, inputs.graph))


def _reach(ev: dict, graph: dict) -> list[str]:
    """Accuracy by hops to the nearest train node (evaluate) and the sampled edge curvature
    (analyze): under-reaching and over-squashing, when the stages measured them."""
    out = []
    reach, curvature = ev.get("reach"), (graph or {}).get("curvature")
    if reach:
        # what reach.py measured; an eval.json from before the comparison has no finding
        finding = reach.get("finding") or "the comparison of the GNN's fall with the baseline's " \
            "was not recorded (re-run evaluate)"
        out += ["<h3>Reach: test accuracy by hops to the nearest train node</h3>",
                _table(["hops", "test nodes", ev["model"], baseline_label(ev)],
                       [[b["bin"], b["count"], b["gnn_accuracy"], b["baseline_accuracy"]]
                        for b in reach["bins"]]),
                "<p>Nodes beyond the last layer's reach get no message from a labelled node. "
                + (f'<span class="warning">&#9888; {_e(reach["warning"])}</span>'
                   if reach.get("warning") else f"No warning: {_e(finding)}.") + "</p>"]
    if curvature:
        sample = curvature["sample"]
        worst = ", ".join(f"{m['u']}–{m['v']} ({m['curvature']:.2f})"
                          for m in curvature["most_negative"][:5])
        out += ["<h3>Bottlenecks: Balanced Forman curvature</h3>",
                _pairs([("edges sampled", f"{sample['edges']} of {sample['undirected_edges']}"
                         + (" (all)" if sample["exact"] else "")),
                        ("mean", _fmt(curvature["mean"])),
                        ("fraction negative", _fmt(curvature["fraction_negative"])),
                        ("median", _fmt(curvature["quantiles"]["q50"])),
                        ("most negative (node ids)", worst or "n/a")]),
                "<p>Very negative edges are bottlenecks that squash messages between the "
                "regions they join (Topping et al. 2022); compare graphs by the tail, not the "
                "sign alone.</p>"]
    return out


def _curve_key(key: str, inputs: ReportInputs) -> str:
    """``key``, or ``val_acc`` where a history lacks it (written before evaluate.metric)."""
    rows = [*inputs.train_history[:1], *inputs.baseline_history[:1]]
    return key if all(key in row for row in rows) else "val_acc"


# -------------------------------------------------------------------------------- rendering
def render(inputs: ReportInputs, figures_href: str = "figures") -> Report:
    """The HTML report and its PNG figures by file name.

    Each figure is embedded (data URI) and linked as ``<figures_href>/<name>``: the figures
    folder relative to the HTML file.
    """
    ev, details = inputs.evaluation, inputs.details
    model = ev["model"]
    pngs: dict[str, bytes] = {}
    captions: dict[str, str] = {}

    def add(name: str, png: bytes, caption: str) -> None:
        pngs[name], captions[name] = png, caption

    view = TASK_VIEWS[ev.get("task", "node")]
    chosen = ev.get("baseline_model", "mlp")  # the figures name it as baseline.models does
    if inputs.train_history or inputs.baseline_history:
        add("training_curves.png",
            figures.training_curves(inputs.train_history, inputs.baseline_history, model,
                                    _curve_key(view.curve_key(ev), inputs), chosen),
            f"training curves of {model} and the {baseline_label(ev)} baseline")
    if view.class_figures:
        add("confusion_test.png",
            figures.confusion_matrices({f"{model} (test)": details["gnn"]["test"]["confusion"],
                                        f"{chosen} (test)": details["mlp"]["test"]["confusion"]}),
            "test confusion matrices, rows normalised")
        add("per_class_f1.png",
            figures.per_class_f1(details["gnn"]["test"]["per_class_f1"],
                                 details["mlp"]["test"]["per_class_f1"], model, chosen),
            "per-class F1 on the test split")
    if inputs.degree_hist:
        add("degree_histogram.png", figures.degree_histogram(inputs.degree_hist),
            "degree distribution (log2 bins)")

    def fig(name: str) -> str:
        return (_figure_html(f"{figures_href}/{name}", pngs[name], captions[name])
                if name in pngs else "")

    missing_curves = ("" if "training_curves.png" in pngs else
                      "<p>No training histories found (run <code>dvc repro train baseline</code>).</p>")
    # The sweep spans many experiments, so it is not part of one run's (cached) report.
    sweep = ("<p>Accuracy and over-smoothing vs depth span many experiments: run the "
             "<code>dvc exp run --queue</code> sweep of docs/evaluation.md (Over-smoothing), "
             "then <code>gnnpipe report --sweep exps.json --experiments 'depth-*'</code> writes "
             "<code>reports/sweep/depth_sweep.png</code> and <code>depth_sweep.csv</code>.</p>")
    task = "link prediction" if ev.get("task") == "link" else "node classification"
    per_class = ["<h2>Confusion and per-class F1</h2>", fig("confusion_test.png"),
                 fig("per_class_f1.png"), _per_class(inputs, model)] if view.class_figures else []
    body = "\n".join([
        f"<h1>gnnpipe run: {_e(model)}, {task} on "
        f"{_e(inputs.prepare.get('source', 'the graph'))}</h1>",
        view.headline(inputs),
        _glance(inputs),
        _run_setup(inputs),
        _metrics(inputs, view.metric_names(ev)),
        "<h2>Training curves</h2>", fig("training_curves.png"), missing_curves,
        *per_class,
        _dataset(inputs), fig("degree_histogram.png"),
        _split(inputs, view),
        _partition(inputs),
        *(["<h2>Depth sweep (over-smoothing)</h2>", sweep] if view.sweep else []),
    ])
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>gnnpipe report: {_e(model)}</title><style>{CSS}</style></head>"
            f"<body>\n{body}\n</body></html>\n")
    return Report(html=page, figures=pngs)
