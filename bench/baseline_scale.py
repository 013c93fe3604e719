"""The baseline stage of two source trees on the same graph (issue 44 item 3: one fit, by
blocks, against the fit it replaced): peak RSS, wall and CPU time of ``gnnpipe baseline`` run
from each tree given, same prepared graph, split and params, at each size given, for the node
or the link task (``--task``).

    mkdir -p /tmp/old && git archive HEAD | tar -x -C /tmp/old
    python -m bench.baseline_scale --dir /tmp/bscale --trees /tmp/old . --nodes 500000
    python -m bench.baseline_scale --dir /tmp/bscale_default --trees /tmp/old . --nodes 20000 \\
        --features 64 --avg-degree 10 --classes 5 --epochs 200 --patience 50 --models auto

Per size, one child process of the first tree prepares and splits a synthetic graph
(``--avg-degree`` stored edges per node, ``--classes`` classes, the default split; kept for a
later run with the same arguments); then one child process per tree (``PYTHONPATH`` = the tree,
so its ``gnnpipe`` is imported; the trees alternate ``--repeat`` times) runs the stage with the
same params (``baseline.models``: ``--models``, ``--epochs`` / ``--patience``, ``threads:
--threads``; no ``baseline.source``: a tree that has it resolves ``auto``, in memory on local
below 1 GiB of features) and reports its peak RSS (VmHWM of /proc/self/status), its RSS after
importing the stage (``base``), the stage's wall time and its CPU time (user + system: the
figure to trust on a loaded machine). Printed per size: every run, the ratio of the medians
(each tree over the first) and the largest logit (link: pair score) difference between the
trees' predictions and each tree's best val accuracy (link: MRR).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
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


def _params(args, nodes: int, stage: bool = False) -> dict:
    params = {"dataset": {"synthetic": {"num_nodes": nodes, "num_features": args.features,
                                        "avg_degree": args.avg_degree,
                                        "num_classes": args.classes},
                          "task": args.task},
              "threads": args.threads}
    if stage:
        models = args.models[0] if args.models == ["auto"] else args.models
        params["baseline"] = {"models": models, "epochs": args.epochs,
                              "patience": args.patience or args.epochs}
    return params


def child_prepare(args) -> dict:
    from gnnpipe.cli import main

    params = yaml.safe_dump(_params(args, args.child_nodes))
    if Path("data/split").is_dir() and Path("params.yaml").read_text() == params:
        return {"seconds": 0.0}  # prepared and split by an earlier run with these params
    Path("params.yaml").write_text(params)
    start = time.perf_counter()
    for stage in ("prepare", "split"):
        assert main([stage]) == 0, stage
    return {"seconds": round(time.perf_counter() - start, 1)}


def child_baseline(args) -> dict:
    import gnnpipe
    from gnnpipe.cli import main
    import gnnpipe.commands.baseline  # noqa: F401 - the stage's imports, counted in ``base``
    import gnnpipe.training.train  # noqa: F401

    tag = args.child_tag
    Path(f"{tag}.yaml").write_text(yaml.safe_dump(_params(args, args.child_nodes, stage=True)))
    base = _status_bytes("VmRSS:")
    start, cpu = time.perf_counter(), _cpu_seconds()
    assert main(["baseline", "--params", f"{tag}.yaml", "--out", f"out_{tag}",
                 "--metrics", f"{tag}_metrics.json", "--perf", f"{tag}_perf.json",
                 "--history", f"{tag}_history.csv"]) == 0
    return {"tree": str(Path(gnnpipe.__file__).parents[1]),
            "seconds": round(time.perf_counter() - start, 2),
            "cpu_s": round(_cpu_seconds() - cpu, 2),
            "peak_mib": round(_status_bytes("VmHWM:") / 2**20),
            "base_mib": round(base / 2**20)}


def _child(args, mode: str, nodes: int, tree: Path, tag: str = "") -> dict:
    # the script by path (not -m from a tree): sys.path[0] is bench/, so PYTHONPATH's tree
    # provides ``gnnpipe`` ahead of the editable install
    command = [sys.executable, str(Path(__file__).resolve()), "--dir", str(args.dir),
               "--features", str(args.features), "--avg-degree", str(args.avg_degree),
               "--classes", str(args.classes), "--task", args.task,
               "--epochs", str(args.epochs), "--patience", str(args.patience),
               "--threads", str(args.threads), "--models", *args.models, "--child", mode,
               "--child-nodes", str(nodes), "--child-tag", tag]
    folder = args.dir / str(nodes)
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, capture_output=True, text=True, cwd=folder,
                          env={**os.environ, "GNNPIPE_PROGRESS": "0",
                               "PYTHONPATH": str(tree.resolve())})
    if done.returncode:
        raise SystemExit(f"{mode} {nodes} {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(folder: Path, task: str, tags: list[str]) -> dict:
    import torch

    from gnnpipe import io

    first, *others = tags
    key = "best_val_mrr" if task == "link" else "best_val_acc"
    out = {key: {t: json.loads((folder / f"{t}_metrics.json").read_text())[key] for t in tags}}
    for other in others:
        if task == "link":
            a, b = (io.read_link_predictions(folder / f"out_{t}") for t in (first, other))
            diff = max(float((x - y).abs().max()) for p in a for x, y in zip(a[p], b[p]))
        else:
            (a_id, a), (b_id, b) = (io.read_predictions(folder / f"out_{t}")
                                    for t in (first, other))
            diff = float((a - b).abs().max()) if torch.equal(a_id, b_id) else None
        out[f"max_logit_diff_{other}"] = diff
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--trees", type=Path, nargs="+", default=[Path(__file__).parents[1]],
                        help="source trees to compare (the first prepares the graph)")
    parser.add_argument("--nodes", type=int, nargs="+", default=[500_000])
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--avg-degree", type=float, default=4.0)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--patience", type=int, default=0, help="0: --epochs (no early stop)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--models", nargs="+", default=["mlp"])
    parser.add_argument("--task", choices=["node", "link"], default="node")
    parser.add_argument("--child", choices=["prepare", "baseline"], help=argparse.SUPPRESS)
    parser.add_argument("--child-nodes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-tag", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps((child_prepare if args.child == "prepare" else child_baseline)(args)))
        return 0
    args.dir = args.dir.resolve()
    tags = [f"tree{i}" for i in range(len(args.trees))]
    print(f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs, threads {args.threads}, "
          f"{args.features} features, avg degree {args.avg_degree:g}, {args.epochs} epochs, "
          f"models {','.join(args.models)}, task {args.task}, trees "
          + ", ".join(f"{t}={p.resolve()}" for t, p in zip(tags, args.trees)))
    for nodes in args.nodes:
        prepared = _child(args, "prepare", nodes, args.trees[0])
        runs = {t: [] for t in tags}
        for _ in range(args.repeat):  # alternating: load drifts hit every tree alike
            for tag, tree in zip(tags, args.trees):
                runs[tag].append(_child(args, "baseline", nodes, tree, tag))
        median = {t: {k: statistics.median(r[k] for r in rows) for k in ("seconds", "cpu_s",
                                                                        "peak_mib")}
                  for t, rows in runs.items()}
        ratios = {t: {k: round(median[t][k] / max(median[tags[0]][k], 1e-9), 3)
                      for k in median[t]} for t in tags[1:]}
        result = {"nodes": nodes, "prepare_split_s": prepared["seconds"], "runs": runs,
                  "median": median, f"ratio_over_{tags[0]}": ratios,
                  **compare(args.dir / str(nodes), args.task, tags),
                  "load": round(os.getloadavg()[0], 1)}
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
