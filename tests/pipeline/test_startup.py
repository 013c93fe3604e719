"""A stage imports only what it uses (issue 46): PyG and its ``torch._dynamo`` chain only where
PyG objects are built (train, predict: inside their ``run``; the baseline's MLP is torch alone,
gnnpipe/training/mlp.py), scipy only where a sparse product runs; ``gnnpipe --help`` imports no
torch, the report none at all. Checked in fresh interpreters' ``sys.modules``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# every command module that does not build PyG objects at import (what `gnnpipe <stage> --help`
# loads), and the library modules split's, analyze's, evaluate's and the baseline MLP's runs reach
LEAN = ("gnnpipe.commands.prepare", "gnnpipe.commands.split", "gnnpipe.commands.analyze",
        "gnnpipe.commands.partition", "gnnpipe.commands.propagate", "gnnpipe.commands.baseline",
        "gnnpipe.commands.evaluate", "gnnpipe.commands.report", "gnnpipe.graphops.heuristics",
        "gnnpipe.graphops.reach", "gnnpipe.splitting.hard_negatives",
        "gnnpipe.training.baseline_fit", "gnnpipe.training.block_fit", "gnnpipe.training.mlp")
HEAVY = ("torch_geometric", "torch._dynamo", "scipy")

PROBE = f"""
import importlib, json, sys
from gnnpipe.cli import build_parser
build_parser(())  # what `gnnpipe --help` builds
helped = [m for m in ("torch", *{HEAVY!r}) if m in sys.modules]
for name in {LEAN!r}:
    importlib.import_module(name)
print(json.dumps({{"help": helped, "lean": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""


def test_help_and_lean_stages_skip_pyg_and_scipy():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded == {"help": [], "lean": []}


# the report reads JSON, CSV and Parquet: its command, its parser and every gnnpipe.io name its
# run uses (read_classes on a real classes.parquet) import no torch (about 1.3 s), and the cli
# pins no torch threads for it
REPORT_PROBE = """
import json, sys
import pyarrow as pa
from gnnpipe.cli import build_parser
args = build_parser(("report",)).parse_args(["report"])
from gnnpipe import io
io.write_classes(sys.argv[1], pa.array(["cat", "dog"]))
names = io.read_classes(sys.argv[1]).to_pylist()
for name in ("read_json", "atomic_path", "atomic_dir", "write_csv", "write_text"):
    getattr(io, name)
import gnnpipe.reporting.figures
print(json.dumps({"names": names, "uses_torch": getattr(args, "uses_torch", True),
                  "loaded": [m for m in ("torch", "torch_geometric", "lightgbm") if m in sys.modules]}))
"""


def test_report_starts_without_torch(tmp_path):
    done = subprocess.run([sys.executable, "-c", REPORT_PROBE, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == {"names": ["cat", "dog"],
                                                        "uses_torch": False, "loaded": []}


def test_io_names_are_their_familys():
    """gnnpipe.io imports a family on the first use of one of its names (``io.owners()``, read
    from the source): every name a family exports (as ``from gnnpipe.io.<family> import *``
    binds it) is that object, and one the family defines is looked up in that family alone."""
    import importlib

    import gnnpipe.io as io
    from gnnpipe import LazyModule

    for family in io.FAMILIES:
        module = importlib.import_module(f"gnnpipe.io.{family}")
        names = getattr(module, "__all__", None) or [n for n in vars(module) if n[0] != "_"]
        for name in names:
            value = getattr(module, name)
            if isinstance(value, (type(io), LazyModule)):  # a module it imported: no reader
                continue
            assert getattr(io, name) is value, f"gnnpipe.io.{name} is not {family}'s"
            if getattr(value, "__module__", None) == module.__name__:
                assert io.owners()[name] == family, name
    assert io.splits.__name__ == "gnnpipe.io.splits"  # a submodule by attribute


@pytest.mark.parametrize("stage", ["train", "predict"])
def test_help_of_a_model_stage_skips_pyg(stage):
    """`gnnpipe train --help` / `predict --help` build the command's parser: PyG is imported by
    the runs (commands/train.py: train_nodes, train_links; commands/predict.py: predict_nodes,
    predict_links, predict_new_graph), not by the module."""
    probe = (f"import sys\nfrom gnnpipe.cli import build_parser\nbuild_parser(({stage!r},))\n"
             "print([m for m in ('torch_geometric', 'torch._dynamo') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[]"
