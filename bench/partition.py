"""Partition quality and cost: METIS (pymetis; torch-sparse / pyg-lib when installed), label
propagation by blocks (``lp`` in this process, ``lp/dask`` on an embedded LocalCluster of
``--workers`` processes), BFS and random on the shared bench graph, then the per-part shards
(owned nodes + halo) the stage writes.

    python -m bench.partition                  # 1M nodes, ~20M edges, 8 parts
    python -m bench.partition --scale 0.1 --parts 16
    python -m bench.partition --methods metis/pymetis,lp/dask,random --workers 2
    python -m bench.partition --stage DIR --scale 0.25 --workers 2 --memory-limit 1GiB

Edge cut = fraction of stored directed edges whose endpoints are in different parts; balance =
largest part / mean part. Peak memory is the rise of VmHWM above the RSS before each step; for
``lp/dask`` also each worker's VmHWM (the workers start before the clock, their peaks are reset).

``--stage DIR`` runs the partition stage itself instead (``gnnpipe partition`` as a process,
``partition.method: lp`` on ``cluster.engine: dask``) on a split of the bench graph written once
into ``DIR`` (every node a train node; the train message graph is the bench graph), and reports
the stage process's peak RSS (its own ``metrics/perf/partition.json``) and every worker's
(VmHWM of each process the stage starts, read every 0.1 s until it exits); ``--code`` picks the
checkout the stage imports, so two versions run on the same split.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `gnnpipe` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# lp of a CSR in memory is a test oracle (tests/graphops/lp_oracle.py, with its block_files)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "graphops"))

import numpy as np

from bench.common import PeakMemory, add_graph_args, describe, load_graph, print_machine
from tests.graphops.shard_oracle import csr_rows, partition_report
from gnnpipe.config import PartitionParams
from gnnpipe.config.schema import EngineParams
from gnnpipe.graphops.partition import symmetric_simple, halo_report, resolve_backend, write_shard
from gnnpipe.runtime.engine import session
from gnnpipe.runtime.rng import make_rng
from lp_oracle import assign_parts

METHODS = ("metis/pymetis", "metis/torch_sparse", "metis/pyg_lib", "lp", "lp/dask", "bfs",
           "random")


def _worker_peak_mb() -> float:
    from bench.common import peak_rss_mb

    return peak_rss_mb()


def _worker_reset() -> bool:
    from bench.common import reset_peak_rss

    return reset_peak_rss()


def _shards(csr, parts: np.ndarray, num_parts: int, halo_hops: int) -> list[dict]:
    """Every part's shard, written as the partition stage writes it (into a temp folder);
    their sizes."""
    with tempfile.TemporaryDirectory(prefix="bench-shards-") as out:
        return [write_shard(csr_rows(csr), parts == part, Path(out), part, num_parts,
                            csr.num_nodes, halo_hops) for part in range(num_parts)]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_graph_args(parser)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="comma-separated subset of: " + ", ".join(METHODS))
    parser.add_argument("--halo-hops", type=int, default=1,
                        help="shards are built for the pymetis parts (-1: skip)")
    parser.add_argument("--workers", type=int, default=2, help="lp/dask: worker processes")
    parser.add_argument("--memory-limit", default="4GiB", help="lp/dask: memory per worker")
    parser.add_argument("--json", type=Path, default=None, help="write the results here too")
    parser.add_argument("--stage", type=Path, default=None,
                        help="run the partition stage (lp on Dask) in this folder (module doc)")
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1],
                        help="--stage: the gnnpipe checkout the stage imports")
    return parser.parse_args(argv)


def write_bench_split(args: argparse.Namespace, folder: Path) -> Path:
    """``folder/data/split`` of the bench graph, written unless there: one message graph for
    every phase, every node a train node."""
    from gnnpipe import io
    from gnnpipe.data.graph import EDGE, Graph
    from gnnpipe.io.common import PHASES

    split = folder / "data/split"
    if (split / "meta.json").exists():
        return split
    view = load_graph(args)
    graph = Graph.homogeneous(view.csr, view.x[:, :1], view.y, view.num_classes)
    split.mkdir(parents=True, exist_ok=True)
    io.write_split(split, graph, {phase: {EDGE: view.csr} for phase in PHASES},
                   {"mode": "transductive"}, roles=np.zeros(view.num_nodes, dtype=np.int8))
    return split


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def stage_main(args: argparse.Namespace) -> dict:
    """``--stage``: the partition stage as a process on the bench graph's split (module doc)."""
    folder = args.stage / f"scale{args.scale:g}"
    write_bench_split(args, folder)
    params = {"partition": {"method": "lp", "num_parts": args.parts,
                            "halo_hops": max(args.halo_hops, 0)},
              "cluster": {"engine": "dask", "workers": args.workers,
                          "memory_limit": args.memory_limit}}
    (folder / "params.yaml").write_text(json.dumps(params))
    env = {**os.environ, "PYTHONPATH": str(args.code), "GNNPIPE_PROGRESS": "0"}
    tick = time.perf_counter()
    stage = subprocess.Popen([sys.executable, "-m", "gnnpipe", "partition"], cwd=folder, env=env)
    peaks: dict[int, float] = {}
    while stage.poll() is None:
        for pid in _descendants(stage.pid):
            peaks[pid] = max(peaks.get(pid, 0.0), _hwm_mb(pid) or 0.0)
        time.sleep(0.1)
    seconds = time.perf_counter() - tick
    if stage.returncode:
        raise SystemExit(f"the partition stage failed ({stage.returncode})")
    perf = json.loads((folder / "metrics/perf/partition.json").read_text())
    metrics = json.loads((folder / "metrics/partition.json").read_text())
    workers = sorted(peaks.values(), reverse=True)[:args.workers]  # the spawned workers
    result = {"code": str(args.code), "scale": args.scale, "seconds": seconds,
              "stage_peak_mb": perf["peak_rss_mb"], "worker_peak_mb": workers,
              "edge_cut_fraction": metrics["edge_cut_fraction"], "balance": metrics["balance"],
              "halo_fraction": metrics["halo_fraction"]}
    print(f"# partition stage (lp, {args.workers} Dask workers x {args.memory_limit}), "
          f"{args.code}: {seconds:.1f} s, stage process peak {perf['peak_rss_mb']:.0f} MiB, "
          f"workers " + ", ".join(f"{w:.0f}" for w in workers) + " MiB; edge cut "
          f"{metrics['edge_cut_fraction']:.3f}, balance {metrics['balance']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv=None) -> dict:
    args = parse_args(argv)
    print_machine()
    if args.stage is not None:
        return stage_main(args)
    started = time.perf_counter()
    graph = load_graph(args)
    csr = graph.csr
    print(f"# graph: {describe(graph)} (built in {time.perf_counter() - started:.1f} s); "
          f"{args.parts} parts")
    with PeakMemory() as mem:
        tick = time.perf_counter()
        symmetric_simple(csr)
        prep_seconds = time.perf_counter() - tick
    print(f"# symmetric simple graph for METIS: {prep_seconds:.1f} s, +{mem.added_mb:.0f} MiB "
          "(included in the METIS rows below)")

    results, kept = {}, {}
    print(f"\n{'method':<20} {'seconds':>8} {'edge cut':>9} {'balance':>8} {'peak +MiB':>10}")
    for name in args.methods.split(","):
        method, _, backend = name.partition("/")
        on_dask = name == "lp/dask"
        cfg = PartitionParams(method=method, backend="auto" if on_dask else backend or "auto",
                              num_parts=args.parts)
        try:
            resolve_backend(cfg)
        except ValueError as err:
            results[name] = {"skipped": str(err)}
            print(f"{name:<20} not run: {err}")
            continue
        engine = EngineParams(engine="dask" if on_dask else "local", workers=args.workers,
                              memory_limit=args.memory_limit)
        with session(engine) as client:
            if client is not None:
                client.run(_worker_reset)
            with PeakMemory() as mem:
                tick = time.perf_counter()
                parts = assign_parts(csr, cfg, make_rng(args.seed, "partition"), client)
                seconds = time.perf_counter() - tick
            workers = sorted(client.run(_worker_peak_mb).values()) if client else []
        report = partition_report(csr, parts, args.parts)
        results[name] = {"seconds": seconds, "edge_cut_fraction": report["edge_cut_fraction"],
                         "balance": report["balance"], "peak_added_mb": mem.added_mb,
                         "worker_peak_mb": workers}
        if workers:
            print(f"# {name}: worker peak RSS " + ", ".join(f"{w:.0f}" for w in workers)
                  + " MiB")
        kept[name] = parts
        print(f"{name:<20} {seconds:8.1f} {report['edge_cut_fraction']:9.3f} "
              f"{report['balance']:8.3f} {mem.added_mb:10.0f}")

    shards = {}
    if args.halo_hops >= 0 and "metis/pymetis" in kept:
        with PeakMemory() as mem:
            tick = time.perf_counter()
            summaries = _shards(csr, kept["metis/pymetis"], args.parts, args.halo_hops)
            seconds = time.perf_counter() - tick
        shards = {"halo_hops": args.halo_hops, "seconds": seconds, "peak_added_mb": mem.added_mb,
                  **halo_report(summaries),
                  "owned": [s["owned"] for s in summaries]}
        print(f"\n# shards of the pymetis parts, halo {args.halo_hops} hop(s): {seconds:.1f} s, "
              f"+{mem.added_mb:.0f} MiB; halo / owned = {shards['halo_fraction']:.2f}; "
              f"halo per part {min(shards['halo_sizes']):,} .. {max(shards['halo_sizes']):,}")
        if "random" in kept:
            rand = _shards(csr, kept["random"], args.parts, args.halo_hops)
            shards["random_halo_fraction"] = halo_report(rand)["halo_fraction"]
            print(f"# (random parts: halo / owned = {shards['random_halo_fraction']:.2f})")

    summary = {"argv": sys.argv[1:] if argv is None else argv, "graph": describe(graph),
               "parts": args.parts, "prep_seconds": prep_seconds, "methods": results,
               "shards": shards, "graph_args": dataclasses.asdict(
                   PartitionParams(num_parts=args.parts))}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=float) + "\n")
    return summary


if __name__ == "__main__":
    main()
