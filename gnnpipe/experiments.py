"""``make exp`` / ``python -m gnnpipe.experiments``: `dvc exp show` narrowed to what a user compares.

Plain `dvc exp show` has a column for every key of params.yaml and for every file a stage depends
on (about 250 here): at any terminal width its cells are "…". DVC has no setting for a default
view, so this runs it with ``--drop`` / ``--keep`` filters that leave the headline
(``metrics/summary.json``: the metric the verdict is judged on, both models' test scores on it,
the gain and the verdict) and the params that pick the model. Further arguments go to `dvc exp
show` as they are: ``--keep`` adds columns (``--keep 'train\\.sampler'``), ``--csv`` or ``--json``
give everything the filters leave.
"""

from __future__ import annotations

import os
import subprocess
import sys

# params.yaml keys shown after the headline (full key paths): with an experiment's name
# (about 26 characters) and the longest metric name (test_average_precision) the table is
# about 118 columns wide; train.sampler did not fit beside the metric's name
PARAMS = ("train.model", "train.lr")
# metrics/summary.json keys (gnnpipe/reporting/summary.py headline): ``metric`` names what
# gnn, baseline and gain are scores of (test_accuracy, test_roc_auc, ...)
METRICS = ("metric", "gnn", "baseline", "gain", "verdict")
SUMMARY = "metrics/summary.json"


def keep_pattern() -> str:
    """The regex of the columns kept: exact names, so ``gain`` keeps no ``train.gain_x``. A
    metric's column is ``<file>:<key>`` where an older commit's metrics file has the same key."""
    params = "|".join(name.replace(".", r"\.") for name in PARAMS)
    return (f"^(Experiment|({SUMMARY}:)?({'|'.join(METRICS)})|{params})$")


def command(extra: list[str]) -> list[str]:
    """The `dvc exp show` argv: drop every column, keep ours, then the caller's arguments."""
    return ["dvc", "exp", "show", "--drop", ".*", "--keep", keep_pattern(), *extra]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    try:
        return subprocess.call(command(args), env=os.environ)
    except FileNotFoundError:
        print("gnnpipe.experiments: dvc is not on PATH; run `make setup` and use .venv/bin",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
