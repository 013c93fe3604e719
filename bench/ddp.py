"""DDP memory and throughput: 1 vs 2 processes, shared memory-mapped graph vs partition shards.

    python -m bench.ddp                      # 200k nodes, ~2M edges, 128 features, 8 parts
    python -m bench.ddp --scale 0.5 --epochs 2

One graph (bench/common.py) is written as the pipeline's artifacts in a scratch folder
(prepared graph.pt, a transductive split, a METIS partition with 1-hop halos), then the real
train stage (``gnnpipe train``, ClusterGCN batches, sage) runs for every combination of
``train.dist.nproc`` in ``--procs`` and ``train.dist.shard`` in ``--modes``:

- ``none``: every rank memory-maps the whole graph, cuts its batches from it and evaluates
  with one full-graph forward per epoch and phase (its stride of the nodes scored).
- ``partition``: every rank reads only the shards ``rank_parts`` gives it and the feature rows of
  their nodes (+halo), and evaluates each shard on its own nodes.

Reported per run: training seeds/s and batches/s (from metrics/perf/train_history.csv, the
epochs after the first), evaluation seconds per epoch, and each rank's peak RSS
(``ru_maxrss``; file-backed pages of the shared map count in every rank that touched them).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `gnnpipe` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from bench.common import add_graph_args, describe, load_graph, print_machine
from gnnpipe import io
from gnnpipe.config import NodeSplitParams, PartitionParams
from gnnpipe.graphops.partition import assign_parts, write_shard
from gnnpipe.runtime.rng import make_rng
from tests.split_oracle import split_nodes
from tests.graphops.shard_oracle import csr_rows, partition_report
from gnnpipe.data.graph import EDGE, Graph

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_graph_args(parser)
    parser.set_defaults(scale=0.2, avg_degree=10.0)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--parts-per-batch", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--procs", default="1,2", help="train.dist.nproc values")
    parser.add_argument("--modes", default="none,partition", help="train.dist.shard values")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS per process")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="scratch folder for the artifacts (default: a temp folder); "
                             "reused by a later run with the same graph arguments")
    parser.add_argument("--json", type=Path, default=None, help="write the results here too")
    return parser.parse_args(argv)


def write_artifacts(args: argparse.Namespace, work: Path) -> str:
    """prepared/, split/ and partition/ of the bench graph under ``work``; a summary line."""
    graph = load_graph(args)
    typed = Graph.homogeneous(graph.csr, graph.x, graph.y, graph.num_classes)
    io.write_prepared(work / "prepared", typed)
    node_split = split_nodes(typed, NodeSplitParams(), make_rng(args.seed, "split"))
    io.write_split(work / "split", typed, node_split.message_graphs,
                   {"task": "node", "mode": node_split.mode}, roles=node_split.roles)
    csr = node_split.message_graphs["train"][EDGE]
    cfg = PartitionParams(num_parts=args.parts, halo_hops=1)
    parts = assign_parts(csr, cfg, make_rng(args.seed, "partition"))
    io.write_partition(work / "partition", parts)
    halo = sum(write_shard(csr_rows(csr), parts == part, work / "partition", part, args.parts,
                           csr.num_nodes, cfg.halo_hops)["halo"] for part in range(args.parts))
    io.write_json(work / "partition" / "meta.json", {
        "num_parts": args.parts, "halo_hops": cfg.halo_hops, "num_nodes": csr.num_nodes,
        "graph": "train", "method": "metis", "backend": "pymetis"})
    cut = partition_report(csr, parts, args.parts)["edge_cut_fraction"]
    return (f"{describe(graph)}; {args.parts} METIS parts, edge cut {cut:.3f}, "
            f"halo {halo / graph.num_nodes:.2f} x nodes")


def run_train(args: argparse.Namespace, work: Path, nproc: int, shard: str) -> dict:
    name = f"{shard}_{nproc}"
    params = {"train": {"sampler": "cluster", "dist": {"shard": shard, "nproc": nproc},
                        "epochs": args.epochs, "patience": args.epochs, "hidden": args.hidden,
                        "cluster": {"parts_per_batch": args.parts_per_batch},
                        "checkpoint": {"every": 0, "resume": False}}}
    (work / f"{name}.yaml").write_text(yaml.safe_dump(params))
    out = work / name
    cmd = [sys.executable, "-m", "gnnpipe", "train", "--params", f"{name}.yaml",
           "--prepared", "prepared", "--split", "split", "--partition", "partition",
           "--propagate", "propagate", "--out", f"{name}/model", "--metrics",
           f"{name}/train.json", "--perf", f"{name}/perf.json", "--history",
           f"{name}/history.csv", "--perf-history", f"{name}/perf_history.csv",
           "--checkpoint", f"{name}/checkpoint.pt"]
    # one intra-op thread per process in every run (torchrun sets this for nproc > 1 anyway),
    # so 1 vs 2 processes compares 1 vs 2 cores, not thread contention on a busy machine
    env = {**os.environ, "GNNPIPE_PROGRESS": "0", "PYTHONPATH": str(REPO),
           "OMP_NUM_THREADS": str(args.threads)}
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    perf = json.loads((out / "perf.json").read_text())
    with open(out / "perf_history.csv") as handle:
        rows = list(csv.DictReader(handle))
    steady = rows[1:] or rows  # the first epoch pays one-off costs (allocation, warm-up)
    return {
        "shard": shard, "nproc": nproc, "wall_s": round(wall, 1),
        "seeds_per_s": round(statistics.mean(float(r["seeds_per_s"]) for r in steady)),
        "batches_per_s": round(statistics.mean(float(r["batches_per_s"]) for r in steady), 2),
        "eval_s_per_epoch": round(statistics.mean(float(r["eval_seconds"]) for r in steady), 2),
        "peak_rss_mb": [r["peak_rss_mb"] for r in sorted(perf["ranks"], key=lambda r: r["rank"])],
        "nodes_held": [r.get("nodes_held") for r in sorted(perf["ranks"],
                                                           key=lambda r: r["rank"])],
        "best_val_acc": json.loads((out / "train.json").read_text())["best_val_acc"],
    }


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    print_machine()
    with tempfile.TemporaryDirectory(prefix="gnnpipe-ddp-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        tick = time.perf_counter()
        stamp = work / "bench_args.json"
        key = json.dumps({k: str(getattr(args, k)) for k in (
            "scale", "avg_degree", "features", "classes", "homophily", "degree_skew", "seed",
            "parts")}, sort_keys=True)
        if stamp.exists() and stamp.read_text() == key:  # --workdir reused with the same graph
            summary = (work / "bench_summary.txt").read_text()
        else:
            summary = write_artifacts(args, work)
            (work / "bench_summary.txt").write_text(summary)
            stamp.write_text(key)
        print(f"# {summary} (artifacts in {time.perf_counter() - tick:.0f} s)")
        print(f"# sage, hidden {args.hidden}, ClusterGCN {args.parts_per_batch} parts per batch, "
              f"{args.epochs} epochs; gloo on CPU, {args.threads} thread(s) per process")
        print("| train.dist.shard | nproc | seeds/s | batches/s (per rank) | eval s/epoch | "
              "peak RSS per rank (MiB) | nodes held per rank | best val acc |")
        print("|---|---:|---:|---:|---:|---|---|---:|")
        results = []
        for shard in args.modes.split(","):
            for nproc in (int(p) for p in args.procs.split(",")):
                r = run_train(args, work, nproc, shard)
                results.append(r)
                held = ", ".join("all" if h is None else f"{h:,}" for h in r["nodes_held"])
                rss = ", ".join(f"{m:,.0f}" for m in r["peak_rss_mb"])
                print(f"| {shard} | {nproc} | {r['seeds_per_s']:,} | {r['batches_per_s']} | "
                      f"{r['eval_s_per_epoch']} | {rss} | {held} | {r['best_val_acc']:.3f} |",
                      flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
