"""One bench against several source trees in the same run: ``--trees OLD NEW --rounds N``.

Each round runs the bench once per tree, in a fresh process whose working directory and
``PYTHONPATH`` are that tree (so it runs that tree's bench script on that tree's ``gnnpipe``),
one thread (``OMP_NUM_THREADS=1``, ``--threads 1``); rounds alternate the order of the trees, and
each row keeps its best of the ``N`` rounds per tree, so load from other processes (noted per
run) slows both sides alike and mostly drops out. By default the benches' timers read CPU time
(``--clock cpu``: their ``time.perf_counter`` is ``time.process_time``, the same for every tree),
since on a loaded machine the wall clock of a one-thread process mostly measures its wait.
Rows are matched by name; the ratio is each tree's best against the first tree's.

    python -m bench.sampler --scale 0.25 --cache DIR --trees ../old . --rounds 5
    git worktree add --detach ../old <commit>   # the tree to compare with
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def add_tree_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    group = parser.add_argument_group("compare source trees (bench/trees.py)")
    group.add_argument("--trees", nargs="+", type=Path, default=None,
                       help="run the bench once per tree and round; the first is the baseline")
    group.add_argument("--rounds", type=int, default=5, help="rounds per tree (best of)")
    group.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                       help="cpu: the benches' timers read the process's CPU time (under load "
                            "the wall clock mostly measures waiting for a core); wall: as is")
    return parser


# runs ``python -m MODULE ARGS`` with the bench's ``time.perf_counter`` reading CPU time
_CPU_CLOCK = ("import runpy, sys, time; time.perf_counter = time.process_time; "
              "module = sys.argv[1]; sys.argv = sys.argv[1:]; "
              "runpy.run_module(module, run_name='__main__', alter_sys=True)")


def _child_argv(argv: list[str]) -> list[str]:
    """``argv`` without ``--trees`` / ``--rounds`` / ``--clock`` / ``--json`` (and their
    values)."""
    out, skip = [], False
    for arg in argv:
        if skip and not arg.startswith("--"):
            continue
        skip = arg in ("--trees", "--rounds", "--json", "--clock")
        if not skip and not arg.startswith(("--trees=", "--rounds=", "--json=", "--clock=")):
            out.append(arg)
    return out


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               GNNPIPE_PROGRESS="0")
    return env


def _sampler_module(tree: Path) -> str:
    """Where the tree's process finds ``gnnpipe.sampling.neighbor`` (a check that it is the
    tree's own, not an installed copy)."""
    code = "import gnnpipe.sampling.neighbor as m; print(m.__file__)"
    return subprocess.run([sys.executable, "-c", code], cwd=tree, env=_env(tree), check=True,
                          capture_output=True, text=True).stdout.strip()


def compare_trees(module: str, argv: list[str], trees: list[Path], rounds: int,
                  clock: str = "cpu", json_out: Path | None = None) -> dict:
    """Run ``python -m module argv`` per tree and round; print and return the best rows."""
    trees = [t.resolve() for t in trees]
    names = [t.name for t in trees]
    child = _child_argv(argv) + ["--threads", "1"]
    for tree in trees:
        print(f"# {tree.name}: {_sampler_module(tree)}", flush=True)
    print(f"# {module} {' '.join(child)}; {rounds} rounds, tree order alternating, "
          f"{clock} clock", flush=True)
    run = ["-c", _CPU_CLOCK, module] if clock == "cpu" else ["-m", module]
    seen: dict[str, dict[str, list[float]]] = {}
    work: dict[str, dict[str, tuple]] = {}  # row -> tree -> (nodes, edges) per batch
    loads, graph = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for tree in trees if r % 2 == 0 else trees[::-1]:
                out = Path(tmp) / f"{tree.name}_{r}.json"
                load = os.getloadavg()[0]
                started = time.perf_counter()
                done = subprocess.run([sys.executable, *run, *child, "--json", str(out)],
                                      cwd=tree, env=_env(tree), capture_output=True, text=True)
                if done.returncode != 0:
                    raise RuntimeError(f"{module} in {tree} failed:\n{done.stdout[-3000:]}"
                                       f"\n{done.stderr[-3000:]}")
                loads.append(load)
                result = json.loads(out.read_text())
                graph = result["graph"]
                for row, values in result["results"].items():
                    seen.setdefault(row, {}).setdefault(tree.name, []).append(
                        values["seeds_per_s"])
                    work.setdefault(row, {})[tree.name] = (round(values["nodes_per_batch"]),
                                                           round(values["edges_per_batch"]))
                print(f"# round {r + 1} {tree.name}: {time.perf_counter() - started:.0f} s, "
                      f"load {load:.1f}", flush=True)
    best = {row: {name: max(v) for name, v in by_tree.items()} for row, by_tree in seen.items()}
    print(f"\n{'row':50s} " + " ".join(f"{n:>14s}" for n in names)
          + "".join(f" {n + '/' + names[0]:>16s}" for n in names[1:]))
    ratios = {}
    for row, by_tree in best.items():
        if len(by_tree) < len(names):
            continue  # a row one tree does not have
        ratios[row] = {n: by_tree[n] / by_tree[names[0]] for n in names[1:]}
        same = len(set(work[row].values())) == 1  # the trees sampled as many nodes and edges
        print(f"{row:50s} " + " ".join(f"{by_tree[n]:14,.0f}" for n in names)
              + "".join(f" {ratios[row][n]:15.3f}x" for n in names[1:])
              + ("" if same else f"  (work differs: {work[row]})"))
    print(f"# seeds/s ({clock} clock), best of {rounds} per tree; load average at the runs' "
          f"starts {min(loads):.1f}-{max(loads):.1f}")
    summary = {"module": module, "argv": child, "trees": [str(t) for t in trees],
               "rounds": rounds, "clock": clock, "graph": graph, "load": [min(loads), max(loads)],
               "runs": seen, "best": best, "ratios": ratios, "work": work}
    if json_out is not None:
        json_out.write_text(json.dumps(summary, indent=2))
    return summary
