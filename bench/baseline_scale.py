"""The baseline stage in memory vs by blocks (issue 32 item 5): peak RSS and wall time of
``gnnpipe baseline`` with ``baseline.source: memory`` and ``blocks``, same prepared graph and
split, at each size given, for the node or the link task (``--task``).

    python -m bench.baseline_scale --dir /tmp/bscale --nodes 500000 2000000 --features 128
    python -m bench.baseline_scale --dir /tmp/bscale_link --task link --nodes 200000

Per size, one child process prepares and splits a synthetic graph (``--avg-degree`` stored
edges per node, 10 classes, default stratified 60/20/20 split, or the default link split with
``--task link``; kept for a later run with the same arguments; prepare's ``dataset.storage.features: auto`` keeps x in graph.pt below 1 GiB,
in features_node.npy from it); then one child process per source runs the stage
(``baseline.models``: ``--models``, ``--epochs`` epochs without early stopping, ``threads:
--threads``) and reports its peak RSS (VmHWM of /proc/self/status: anonymous and file-backed
pages it ever held), its RSS after importing the stage (``base``), the stage's wall time and
its CPU time (user + system: the figure to trust on a loaded machine). Printed per size: both
rows, the largest logit (link: pair score) difference between the two predictions and each
source's best val accuracy (link: MRR).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml


def _status_bytes(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _params(args, nodes: int, source: str | None = None) -> dict:
    params = {"dataset": {"synthetic": {"num_nodes": nodes, "num_features": args.features,
                                        "avg_degree": args.avg_degree, "num_classes": 10},
                          "task": args.task},
              "threads": args.threads}
    if source is not None:
        params["baseline"] = {"source": source, "models": args.models, "epochs": args.epochs,
                              "patience": args.epochs}
    return params


def child_prepare(args) -> dict:
    from gnnpipe.cli import main

    os.chdir(args.dir)
    params = yaml.safe_dump(_params(args, args.child_nodes))
    if Path("data/split").is_dir() and Path("params.yaml").read_text() == params:
        return {"seconds": 0.0}  # prepared and split by an earlier run with these params
    Path("params.yaml").write_text(params)
    start = time.perf_counter()
    for stage in ("prepare", "split"):
        assert main([stage]) == 0, stage
    return {"seconds": round(time.perf_counter() - start, 1)}


def child_baseline(args) -> dict:
    from gnnpipe.cli import main
    import gnnpipe.commands.baseline  # noqa: F401 - the stage's imports, counted in ``base``
    import gnnpipe.training.train  # noqa: F401

    os.chdir(args.dir)
    source = args.child_source
    Path(f"{source}.yaml").write_text(yaml.safe_dump(_params(args, args.child_nodes, source)))
    base = _status_bytes("VmRSS:")
    start, cpu = time.perf_counter(), _cpu_seconds()
    assert main(["baseline", "--params", f"{source}.yaml", "--out", f"out_{source}",
                 "--metrics", f"{source}_metrics.json", "--perf", f"{source}_perf.json",
                 "--history", f"{source}_history.csv"]) == 0
    return {"source": source, "seconds": round(time.perf_counter() - start, 1),
            "cpu_s": round(_cpu_seconds() - cpu, 1),
            "peak_mib": round(_status_bytes("VmHWM:") / 2**20),
            "base_mib": round(base / 2**20)}


def _child(args, mode: str, nodes: int, source: str = "") -> dict:
    command = [sys.executable, "-m", "bench.baseline_scale", "--dir", str(args.dir),
               "--features", str(args.features), "--avg-degree", str(args.avg_degree),
               "--task", args.task,
               "--epochs", str(args.epochs), "--threads", str(args.threads),
               "--models", *args.models, "--child", mode, "--child-nodes", str(nodes),
               "--child-source", source]
    done = subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "GNNPIPE_PROGRESS": "0"})
    if done.returncode:
        raise SystemExit(f"{mode} {nodes} {source} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(folder: Path, task: str) -> dict:
    import torch

    from gnnpipe import io

    sources = ("memory", "blocks")
    if task == "link":
        mem, blk = (io.read_link_predictions(folder / f"out_{s}") for s in sources)
        diff = max(float((a - b).abs().max()) for p in mem for a, b in zip(mem[p], blk[p]))
    else:
        (mem_id, mem), (blk_id, blk) = (io.read_predictions(folder / f"out_{s}") for s in sources)
        assert torch.equal(mem_id, blk_id)
        diff = float((mem - blk).abs().max())
    key = "best_val_mrr" if task == "link" else "best_val_acc"
    scores = {s: json.loads((folder / f"{s}_metrics.json").read_text())[key] for s in sources}
    return {"max_logit_diff": diff, key: scores}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--nodes", type=int, nargs="+", default=[500_000, 2_000_000])
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--avg-degree", type=float, default=4.0)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--models", nargs="+", default=["mlp"])
    parser.add_argument("--task", choices=["node", "link"], default="node")
    parser.add_argument("--child", choices=["prepare", "baseline"], help=argparse.SUPPRESS)
    parser.add_argument("--child-nodes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-source", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.dir = args.dir / str(args.child_nodes)
        args.dir.mkdir(parents=True, exist_ok=True)
        print(json.dumps((child_prepare if args.child == "prepare" else child_baseline)(args)))
        return 0
    print(f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs, threads {args.threads}, "
          f"{args.features} features, avg degree {args.avg_degree:g}, {args.epochs} epochs, "
          f"models {','.join(args.models)}, task {args.task}")
    for nodes in args.nodes:
        prepared = _child(args, "prepare", nodes)
        rows = [_child(args, "baseline", nodes, source) for source in ("memory", "blocks")]
        result = {"nodes": nodes, "prepare_split_s": prepared["seconds"], "runs": rows,
                  **compare(args.dir / str(nodes), args.task), "load": round(os.getloadavg()[0], 1)}
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
