"""``gnnpipe <stage>``: every pipeline stage as a subcommand, usable with or without DVC."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pickle
import sys
import time
import traceback
import zipfile
from pathlib import Path
from typing import Iterator

from gnnpipe.runtime import threads

threads.default_env()  # before any later import loads torch (its allocator) and OpenMP, which read them

from gnnpipe.pipeline import HELP, STAGES

# torch, pyarrow and gnnpipe.io are imported by the functions that run a stage, not here:
# `gnnpipe --help` and a stage's own --help then start in a fraction of a second


def environment_errors() -> tuple[type, ...]:
    """What the disk, the OS, pyarrow and torch raise on a damaged file or a full disk: one
    line each."""
    import pyarrow as pa
    return (OSError, EOFError, MemoryError, RuntimeError, pa.ArrowException,
            pickle.UnpicklingError, zipfile.BadZipFile)

# where killed writers leave temps: swept (only dead writers' temps) by every stage that runs
TEMP_ROOTS = ("data", "metrics", "reports")

DESCRIPTION = """\
gnnpipe: a reproducible pipeline for training GNNs on large graphs.

Stages (run in this order; `dvc repro` runs exactly the ones whose inputs changed):
  prepare -> split -> analyze, partition, propagate -> baseline, train -> predict, evaluate
  -> report
dataset.task picks node classification or link prediction; train.dist.nproc > 1 runs DDP.
Every knob is in params.yaml (see docs/params.md). Set GNNPIPE_DEBUG=1 for full tracebacks and
GNNPIPE_PROGRESS=0 to hide progress bars.
"""


WARM_HELP = ("gnnpipe warm -- dvc repro (or dvc exp run ...): the stages skip their imports "
             "(a warm server forks each one); same outputs")

# an option's help where the stage table gives none (argparse shows a default only with a help)
KIND_HELP = {"in": "an upstream stage's output this stage reads",
             "out": "where this stage writes its output",
             "perf": "wall-clock figures (cached by DVC, kept out of git)",
             "record": "this stage's figures, JSON (kept in git; not a DVC metric)",
             "metric": "a DVC metrics file", "plot": "a CSV for `dvc plots`",
             "local": "a file DVC does not track"}


def build_parser(stages: tuple[str, ...] = tuple(STAGES)) -> argparse.ArgumentParser:
    """The ``gnnpipe`` parser with a subcommand for each of ``stages`` (importing only their
    command modules): its paths as ``gnnpipe/pipeline.py`` lists them, then the command's own
    options (its ``add_arguments``, where it has one). The other stages are listed with their
    one-line help only, so ``gnnpipe --help`` imports no command (nor torch)."""
    parser = argparse.ArgumentParser(prog="gnnpipe", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="stage", metavar="STAGE", required=True)
    for stage in STAGES:
        if stage not in stages:
            subparsers.add_parser(stage, help=HELP[stage])
            continue
        module = importlib.import_module(f"gnnpipe.commands.{stage}")
        sub = subparsers.add_parser(stage, help=HELP[stage], description=module.__doc__,
                                    formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        sub.add_argument("--params", type=Path, default=Path("params.yaml"),
                         help="params file (validated in full before anything runs)")
        sub.add_argument("--resources", type=Path, default=None,
                         help="record this run's wall time, peak RSS and output bytes in this "
                              "JSON file (dvc.yaml: metrics/perf/stages/<stage>.json)")
        for artifact in STAGES[stage].paths:
            if artifact.option is not None:
                sub.add_argument(artifact.option, type=Path, default=Path(artifact.path),
                                 help=artifact.help or KIND_HELP[artifact.kind])
        if hasattr(module, "add_arguments"):
            module.add_arguments(sub)
        # a command with TORCH = False never runs torch: its threads are not pinned (that would
        # import torch, about 1.3 s, for nothing)
        sub.set_defaults(run=module.run, uses_torch=getattr(module, "TORCH", True))
    # not a stage (no dvc.yaml entry): main runs it before parsing (gnnpipe/runtime/warm.py)
    subparsers.add_parser("warm", help=WARM_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one stage; user errors print one line to stderr and return 1 (no traceback)."""
    console = argv is None  # `gnnpipe` / `python -m gnnpipe`, not a caller's own process
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["warm"]:
        from gnnpipe.runtime import warm
        return warm.command(argv[1:])
    if os.environ.get("GNNPIPE_WARM") and argv[:1] and argv[0] in STAGES:
        # started under `gnnpipe warm`: a fork of its server runs the stage, imports done
        from gnnpipe.runtime import warm
        served = warm.serve(argv, console)
        if served is not None:
            return served
    # a known stage name builds only its own subcommand, so a stage imports its command alone
    named = tuple(a for a in argv[:1] if a in STAGES)
    args = build_parser(named).parse_args(argv)
    args.argv = argv  # the train stage re-launches itself under torchrun with these
    from gnnpipe.io import write_json
    from gnnpipe.runtime import resources
    environment = environment_errors()
    started = time.perf_counter()
    try:
        with stage_process(args):
            # params threads, before torch work (None: a stage that runs no torch)
            pinned = threads.configure(args.stage, args.params) if args.uses_torch else None
            message = args.run(args)
            if args.resources is not None and not resources.is_worker_process():
                outputs = [path for path in (getattr(args, "out", None),) if path is not None]
                record = resources.stage_record(args.stage, time.perf_counter() - started,
                                                outputs)
                record["threads"] = pinned
                write_json(args.resources, record)
    except (ValueError, FileNotFoundError) as err:
        return _fail(args.stage, str(err))
    except environment as err:
        return _fail(args.stage, one_line(err))
    except KeyboardInterrupt:
        return _fail(args.stage, "interrupted; nothing was published", code=130)
    if message:
        print(f"gnnpipe {args.stage}: {message}")
    return 0


@contextlib.contextmanager
def stage_process(args) -> Iterator[None]:
    """What surrounds every stage run: it dies with its parent; the launching process (not a
    torchrun rank) holds the lock of the stage's output, clears dead writers' temps and gives the
    run its own temp folder (its ranks inherit it), removed at exit; the outputs are published
    together at the end, or none of them."""
    from gnnpipe.io.atomic import publishing
    from gnnpipe.io.lock import exclusive
    from gnnpipe.io.temps import remove_stale_temps, run_scratch, scratch_beside
    from gnnpipe.runtime import resources
    from gnnpipe.runtime.progress import heartbeat
    resources.die_with_parent()
    with contextlib.ExitStack() as stack:
        if not resources.is_worker_process():
            output = getattr(args, "out", None) or getattr(args, "metrics", None)
            # the lock folder is the system temp dir's (shared by every run), so lock first
            stack.enter_context(exclusive(args.stage, output or Path(args.stage)))
            stack.enter_context(run_scratch())
            stack.enter_context(heartbeat(f"gnnpipe {args.stage}"))
            beside = {Path(os.path.abspath(value)).parent for value in vars(args).values()
                      if isinstance(value, Path)}
            remove_stale_temps(sorted(beside), [Path(root) for root in TEMP_ROOTS])
        # layer-wise tables: mapped scratch files beside the output (every rank), not anon memory
        stack.enter_context(scratch_beside(getattr(args, "out", None)
                                           or getattr(args, "metrics", None)))
        stack.enter_context(publishing())
        yield


def one_line(err: BaseException) -> str:
    """An OS, pyarrow or torch error as one line naming the file where it is known."""
    text = str(err).strip()
    first = text.splitlines()[0][:300] if text else ""
    if isinstance(err, OSError) and err.filename is not None:
        what = err.strerror or first or type(err).__name__
        other = f" -> {err.filename2}" if err.filename2 is not None else ""
        return f"{err.filename}{other}: {what}"
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _fail(stage: str, message: str, code: int = 1) -> int:
    if os.environ.get("GNNPIPE_DEBUG"):
        traceback.print_exc()
    print(f"gnnpipe {stage}: error: {message}", file=sys.stderr)
    from gnnpipe.runtime import resources
    if resources.is_worker_process():
        # a failed torchrun rank leaves now: interpreter teardown can block on a process group
        # whose peers sit in a collective, and the agent stops the job only once this rank exits
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
