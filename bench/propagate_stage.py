"""The propagate stage in two source trees on one graph: wall seconds and peak RSS, same run.

    python -m bench.propagate_stage --dir DIR --trees OLD . --nodes 500000 --degree 20

``DIR`` gets ``params.yaml`` (a synthetic graph of ``--nodes`` nodes, ``--degree`` mean degree,
``--features`` features; ``propagate`` defaults unless ``--propagate`` gives a YAML mapping) and
the ``prepare`` and ``split`` outputs, made once by the first tree and reused. Then
``gnnpipe propagate`` runs in every tree (``PYTHONPATH``; ``git archive <commit> | tar -x -C OLD``
gives one) once per round, odd rounds in reverse order so a shared machine's load hits all alike;
each run's wall and CPU seconds, its ``metrics/perf/propagate.json`` (seconds, peak_rss_mb) and the hop
files' sha256 (the trees must write the same bytes). Prints one JSON row per tree: mean and best
wall seconds, mean CPU seconds, peak RSS, and the ratios against the first tree; the 1-minute
load average of each run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml


def run(tree: Path, folder: Path, stage: str) -> tuple[float, float]:
    """``gnnpipe <stage>`` from ``tree`` in ``folder``; wall and CPU seconds (user + system:
    what a shared machine's load inflates least)."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "GNNPIPE_PROGRESS": "0"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gnnpipe", stage], cwd=folder, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return time.perf_counter() - start, cpu


def digest(folder: Path) -> str:
    sha = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        sha.update(path.name.encode() + path.read_bytes())
    return sha.hexdigest()[:16]


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--trees", type=Path, nargs="+", required=True)
    parser.add_argument("--nodes", type=int, default=500_000)
    parser.add_argument("--degree", type=float, default=20.0)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--propagate", default="{}", help="propagate params, a YAML mapping")
    parser.add_argument("--cluster", default="{}", help="cluster params, a YAML mapping")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    params = {"dataset": {"synthetic": {"num_nodes": args.nodes, "avg_degree": args.degree,
                                        "num_features": args.features}},
              "propagate": yaml.safe_load(args.propagate),
              "cluster": yaml.safe_load(args.cluster)}
    (args.dir / "params.yaml").write_text(yaml.safe_dump(params))
    if not (args.dir / "data/split").exists():
        for stage in ("prepare", "split"):
            print(f"# {stage}: {run(args.trees[0], args.dir, stage)[0]:.1f} s", flush=True)
    runs = {str(tree): [] for tree in args.trees}
    for round_ in range(args.rounds):
        for tree in (args.trees if round_ % 2 == 0 else args.trees[::-1]):
            seconds, cpu = run(tree, args.dir, "propagate")
            perf = json.loads((args.dir / "metrics/perf/propagate.json").read_text())
            row = {"wall_s": round(seconds, 2), "cpu_s": round(cpu, 2), "stage_s": perf["seconds"],
                   "peak_rss_mb": perf["peak_rss_mb"], "kernel": perf["kernel"],
                   "sha256": digest(args.dir / "data/propagate"),
                   "load_1m": os.getloadavg()[0]}
            runs[str(tree)].append(row)
            print(f"# round {round_} {tree}: {json.dumps(row)}", flush=True)
    rows = []
    for tree, done in runs.items():
        rows.append({"tree": tree, "mean_wall_s": round(statistics.mean(r["wall_s"] for r in done), 2),
                     "best_wall_s": min(r["wall_s"] for r in done),
                     "mean_cpu_s": round(statistics.mean(r["cpu_s"] for r in done), 2),
                     "peak_rss_mb": max(r["peak_rss_mb"] for r in done),
                     "sha256": sorted({r["sha256"] for r in done})})
    for row in rows:
        row["wall_ratio"] = round(row["mean_wall_s"] / rows[0]["mean_wall_s"], 3)
        row["best_ratio"] = round(row["best_wall_s"] / rows[0]["best_wall_s"], 3)
        row["cpu_ratio"] = round(row["mean_cpu_s"] / rows[0]["mean_cpu_s"], 3)
        row["rss_ratio"] = round(row["peak_rss_mb"] / rows[0]["peak_rss_mb"], 3)
        print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    main()
