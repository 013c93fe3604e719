"""``gnnpipe <stage>``: every pipeline stage as a subcommand, usable with or without DVC."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from pathlib import Path

from gnnpipe import resources, threads
from gnnpipe.commands import STAGES
from gnnpipe.io import write_json

DESCRIPTION = """\
gnnpipe: a reproducible pipeline for training GNNs on large graphs.

Stages (run in this order; `dvc repro` runs exactly the ones whose inputs changed):
  prepare -> split -> analyze, partition, propagate -> baseline, train -> predict, evaluate
  -> report
dataset.task picks node classification or link prediction; train.dist.nproc > 1 runs DDP.
Every knob is in params.yaml (see README.md). Set GNNPIPE_DEBUG=1 for full tracebacks and
GNNPIPE_PROGRESS=0 to hide progress bars.
"""


def build_parser(stages: tuple[str, ...] = STAGES) -> argparse.ArgumentParser:
    """The ``gnnpipe`` parser with a subcommand for each of ``stages`` (importing only their
    command modules)."""
    parser = argparse.ArgumentParser(prog="gnnpipe", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="stage", metavar="STAGE", required=True)
    for stage in stages:
        module = importlib.import_module(f"gnnpipe.commands.{stage}")
        sub = subparsers.add_parser(stage, help=module.HELP, description=module.__doc__,
                                    formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        sub.add_argument("--params", type=Path, default=Path("params.yaml"),
                         help="params file (validated in full before anything runs)")
        sub.add_argument("--resources", type=Path, default=None,
                         help="record this run's wall time, peak RSS and output bytes in this "
                              "JSON file (dvc.yaml: metrics/perf/stages/<stage>.json)")
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one stage; user errors print one line to stderr and return 1 (no traceback)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # a known stage name builds only its own subcommand, so a stage imports its command alone
    named = tuple(a for a in argv[:1] if a in STAGES)
    args = build_parser(named or STAGES).parse_args(argv)
    args.argv = argv  # the train stage re-launches itself under torchrun with these
    started = time.perf_counter()
    try:
        pinned = threads.configure(args.stage, args.params)  # params threads, before torch work
        message = args.run(args)
    except (ValueError, FileNotFoundError) as err:
        if os.environ.get("GNNPIPE_DEBUG"):
            traceback.print_exc()
        print(f"gnnpipe {args.stage}: error: {err}", file=sys.stderr)
        return 1
    if args.resources is not None and not resources.is_worker_process():
        outputs = [path for path in (getattr(args, "out", None),) if path is not None]
        record = resources.stage_record(args.stage, time.perf_counter() - started, outputs)
        record["threads"] = pinned
        write_json(args.resources, record)
    if message:
        print(f"gnnpipe {args.stage}: {message}")
    return 0
