"""report: one self-contained HTML page of the run (reports/report.html) plus its PNG figures.

With ``--sweep exps.json --experiments 'depth-*'`` (the output of ``dvc exp show --json`` after a
depth sweep, and the names of the sweep's experiments) it writes instead the accuracy /
over-smoothing vs ``train.num_layers`` plot and table to ``--sweep-out``.
"""

import os
from pathlib import Path

from gnnpipe import io
from gnnpipe.reporting.report import ReportInputs, parse_csv, render
from gnnpipe.reporting.sweep import SWEEP_PARAM, metric_column, render_sweep, sweep_rows

# the report reads JSON, CSV and Parquet and draws with matplotlib: no torch, so the cli pins no
# torch threads and the stage starts without importing it (tests/pipeline/test_startup.py)
TORCH = False


def add_arguments(parser):
    parser.add_argument("--sweep", type=Path, default=None,
                        help="`dvc exp show --json` output of a train.num_layers sweep: write the "
                             "depth-sweep plot and table instead of the run report")
    parser.add_argument("--experiments", nargs="+", metavar="NAME", default=None,
                        help="with --sweep: the sweep's experiments, by name or glob (e.g. "
                             "'depth-*' for `dvc exp run -n depth-3 ...`); they may differ only "
                             "in train.num_layers and per-layer lists")


def _read_optional_json(path: Path):
    return io.read_json(path) if path.exists() else None


def _read_csv(path: Path) -> list[dict]:
    return parse_csv(path.read_text(), str(path)) if path.exists() else []


def _write_png(path: Path, png: bytes) -> None:
    with io.atomic_path(path) as tmp:
        tmp.write_bytes(png)


def _sweep(args) -> str:
    exp_show = io.read_json(args.sweep)  # written by `dvc exp show --json > exps.json`
    if not args.experiments:  # dvc exp show lists every experiment, not only the sweep's
        raise ValueError(f"--sweep {args.sweep} needs --experiments NAME [NAME ...]: the sweep's "
                         "experiment names or globs, e.g. --experiments 'depth-*'")
    rows = sweep_rows(exp_show, args.experiments, SWEEP_PARAM)
    png = render_sweep(rows, SWEEP_PARAM)
    _write_png(args.sweep_out / "depth_sweep.png", png)
    io.write_csv(args.sweep_out / "depth_sweep.csv", rows)
    column = metric_column(rows)  # gnn_test_<the metric the runs are judged on>
    points = ", ".join(f"{r['num_layers']}: {r[column]:.3f}" for r in rows)
    return (f"{len(rows)} depths (num_layers: GNN {column[4:]}) {points} -> {args.sweep_out}")


def _read_classes(prepared: Path) -> list:
    """The user's label values by class code (data/prepared/classes.parquet)."""
    if not (prepared / "classes.parquet").exists():
        raise ValueError(f"{prepared / 'classes.parquet'}: file not found; it is written by "
                         "prepare: re-run the pipeline (`dvc repro`)")
    return io.read_classes(prepared).to_pylist()


def run(args):
    if args.sweep is not None:
        return _sweep(args)
    if args.experiments:
        raise ValueError("--experiments selects the experiments of --sweep; give --sweep too")
    m = args.metrics_dir
    inputs = ReportInputs(
        prepare=io.read_json(m / "prepare.json"),
        graph=io.read_json(m / "graph.json"),
        split_audit=io.read_json(m / "split_audit.json"),
        evaluation=io.read_json(m / "eval.json"),
        details=io.read_json(args.details),
        partition=_read_optional_json(m / "partition.json"),
        train=_read_optional_json(m / "train.json"),
        train_perf=_read_optional_json(m / "perf" / "train.json"),
        baseline=_read_optional_json(m / "baseline.json"),
        train_history=_read_csv(m / "train_history.csv"),
        baseline_history=_read_csv(m / "baseline_history.csv"),
        degree_hist=_read_csv(m / "degree_hist.csv"),
        classes=_read_classes(args.prepared),
    )
    try:
        report = render(inputs, Path(os.path.relpath(args.figures, args.out.parent)).as_posix())
    except KeyError as err:  # a metrics file from an older gnnpipe or edited by hand
        raise ValueError(f"{m}: a metrics file lacks the key {err}; re-run the pipeline "
                         "(`dvc repro`) so every stage writes the current format") from None
    with io.atomic_dir(args.figures) as figures:
        for name, png in report.figures.items():
            _write_png(figures / name, png)
    io.write_text(args.out, report.html)
    return f"{len(report.figures)} figures -> {args.out}"
