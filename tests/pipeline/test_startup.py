"""A stage imports only what it uses (issue 46): PyG and its ``torch._dynamo`` chain only where
PyG objects are built (train, predict, baseline's PyG ``MLP``: inside their ``run``), scipy only
where a sparse product runs; ``gnnpipe --help`` imports no torch. Checked in one fresh
interpreter's ``sys.modules``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# every command module that does not build PyG objects at import (what `gnnpipe <stage> --help`
# loads), and the library modules split's, analyze's and evaluate's runs reach
LEAN = ("gnnpipe.commands.prepare", "gnnpipe.commands.split", "gnnpipe.commands.analyze",
        "gnnpipe.commands.partition", "gnnpipe.commands.propagate", "gnnpipe.commands.baseline",
        "gnnpipe.commands.evaluate", "gnnpipe.commands.report", "gnnpipe.graphops.heuristics",
        "gnnpipe.graphops.reach", "gnnpipe.splitting.hard_negatives")
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
