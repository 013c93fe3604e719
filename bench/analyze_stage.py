"""The analyze stage, this tree against another (``--old``), on one synthetic graph: wall time.

    python -m bench.analyze_stage --dir DIR --old OLD_TREE [--nodes 100000] [--rounds 3]

``OLD_TREE`` is a source tree (``git archive <commit> | tar -x -C OLD``). ``prepare`` and
``split`` run once in ``DIR`` with this tree (``dataset.synthetic``: ``--nodes`` nodes, average
degree 10, so about 10 stored edges a node; 8 features), then ``gnnpipe analyze`` runs as the
pipeline runs it (one process: imports, reading, the report, the curvature sample, writing) with
each tree's ``gnnpipe`` on ``PYTHONPATH``, alternating the trees each round (old first on even
rounds) so the load of a shared machine hits both alike. Prints each run, the median per tree,
the ratio new / old, and whether both trees wrote the same bytes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml


def _gnnpipe(tree: Path, folder: Path, *args: str) -> float:
    """Seconds of one ``python -m gnnpipe ...`` run in ``folder`` with ``tree`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gnnpipe", *args], cwd=folder, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    new = Path(__file__).resolve().parents[1]
    args.dir.mkdir(parents=True, exist_ok=True)
    params = {"dataset": {"synthetic": {"num_nodes": args.nodes, "num_features": 8}}}
    (args.dir / "params.yaml").write_text(yaml.safe_dump(params))
    if not (args.dir / "data/split").exists():
        _gnnpipe(new, args.dir, "prepare")
        _gnnpipe(new, args.dir, "split")
    times = {"old": [], "new": []}
    outputs = {}
    for r in range(args.rounds):
        for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
            tree = args.old if name == "old" else new
            metrics = f"out_{name}/graph.json"
            seconds = _gnnpipe(tree, args.dir, "analyze", "--metrics", metrics,
                               "--degree-hist", f"out_{name}/degree_hist.csv")
            times[name].append(seconds)
            load = os.getloadavg()[0]
            print(f"round {r} {name}: {seconds:.2f} s (load {load:.1f})", flush=True)
            outputs[name] = [(args.dir / f"out_{name}" / f).read_bytes()
                             for f in ("graph.json", "degree_hist.csv")]
    old, fresh = statistics.median(times["old"]), statistics.median(times["new"])
    print(f"median old {old:.2f} s, new {fresh:.2f} s, new / old {fresh / old:.3f}; "
          f"same bytes: {outputs['old'] == outputs['new']}")


if __name__ == "__main__":
    main()
