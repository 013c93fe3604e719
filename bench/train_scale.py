"""Train, predict and evaluate as the graph grows (issue 43 item 3): the data-path bench's graphs
(10M / 40M / 160M directed edges, 128 features; ``bench/data_path.py``) through the ``gnnpipe``
CLI, the last stages in one process and training also as 2 DDP ranks on this machine, with the
peak anonymous memory of every process and the time per seed of the epoch.

    nice -n 5 python -m bench.train_scale --dir /work/scale_train --sizes 10M,40M,160M --keep

Each size: the user tables (``data_path.write_tables``), a scratch copy of the pipeline with
``data_path.PARAMS`` (GraphSAGE, neighbor sampler [10, 5], 1 epoch), prepare, split and
baseline on ``cluster.engine: dask`` (2 workers x 1 GiB, as the data-path bench ran them),
then train, predict and evaluate in the stage process, then train again with
``train.dist.nproc: 2`` (torchrun, gloo, two ranks on this machine). A sampler thread reads
/proc every 0.1 s for every process under the stage; a process's figure is its peak RssAnon
(anonymous memory: the memory maps of the prepared and split files are file-backed page cache,
shared and reclaimable, so VmHWM is reported beside it only for the stage process). The time
per seed is the epoch's ``train_seconds / seeds`` from ``metrics/perf/train_history.csv``.
``--resume`` skips the data stages whose outputs a kept run folder already has, and runs the
rest with the code of the tree the bench runs in (old vs new code on the same data).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import time
from pathlib import Path

import yaml

from bench import data_path as dp

DATA_STAGES = ("prepare", "split", "baseline")
LAST_STAGES = ("train", "predict", "evaluate")


def set_params(run: Path, over: dict) -> None:
    """``over``'s keys set in ``run``'s params.yaml (nested sections merged)."""
    path = run / "params.yaml"
    path.write_text(yaml.safe_dump(dp.merged(yaml.safe_load(path.read_text()), over),
                                   sort_keys=False))


def label(cmd: str) -> str:
    """A short name for a process of the stage's tree."""
    if "torchrun" in cmd or "torch.distributed.run" in cmd:
        return "torchrun"
    if "resource_tracker" in cmd or "forkserver" in cmd:
        return "mp-helper"
    return "dask-worker" if "spawn_main" in cmd else "rank"  # torchrun's children run the stage


def traced(run: Path, stage: str) -> dict:
    """One stage with dvc.yaml's command in ``run``: exit code, wall seconds, last output line,
    the stage process's peak RssAnon / VmHWM and every other process's peak RssAnon (MiB),
    largest first."""
    code, wall, output, peaks = dp.traced_stage(run, stage)
    peaks.stop()
    root = peaks.pid
    others = sorted(((round(a, 1), label(peaks.cmd.get(p, ""))) for p, a in peaks.anon.items()
                     if p != root and a > 20), reverse=True)
    return {"stage": stage, "exit_code": code, "wall_s": round(wall, 1),
            "stage_anon_mb": round(peaks.anon.get(root, 0.0), 1),
            "stage_hwm_mb": round(peaks.hwm.get(root, 0.0), 1),
            "children_anon_mb": [a for a, _ in others],
            "children": [k for _, k in others],
            "max_process_anon_mb": max([peaks.anon.get(root, 0.0)] + [a for a, _ in others]),
            "message": output.strip().splitlines()[-1] if output.strip() else "",
            "output_tail": "" if code == 0 else output.strip()[-2000:]}


def epoch_figures(run: Path) -> dict:
    """The first epoch's seconds, seeds and microseconds per seed from the perf history."""
    path = run / "metrics" / "perf" / "train_history.csv"
    if not path.exists():
        return {}
    rows = list(csv.DictReader(path.open()))
    first = rows[0]
    seconds, seeds = float(first["train_seconds"]), int(first["seeds"])
    own = json.loads((run / "metrics" / "perf" / "stages" / "train.json").read_text())
    return {"epoch_s": seconds, "seeds": seeds, "us_per_seed": round(seconds / seeds * 1e6, 2),
            "stage_own_s": own.get("seconds")}


def done(run: Path, stage: str) -> bool:
    """Whether every output dvc.yaml lists for ``stage`` exists in ``run``."""
    return all((run / out).exists() for out in dp.stage_outs(run, stage))


def refresh_code(run: Path) -> None:
    """``run``'s copy of the pipeline's code (``gnnpipe/``, ``stages/``, dvc.yaml) replaced by
    this tree's; params.yaml and the outputs stay."""
    for rel in ("gnnpipe", "stages"):
        shutil.rmtree(run / rel)
        shutil.copytree(dp.REPO / rel, run / rel, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(dp.REPO / "dvc.yaml", run / "dvc.yaml")


def run_size(args, size: tuple[str, int, int]) -> list[dict]:
    name, nodes, edges = size
    tables, run = args.dir / f"tables-{name}", args.dir / f"run-{name}"
    start = time.perf_counter()
    dp.write_tables(tables, nodes, edges, args.features)
    print(f"# {name}: tables ready in {time.perf_counter() - start:.0f} s", flush=True)
    if not (args.resume and (run / "params.yaml").exists()):
        dp.scratch_repo(run, tables, "dask", dvc=False)
    else:  # the kept data with the code of the tree this bench runs in
        refresh_code(run)
    set_params(run, {"train": {"dist": {"nproc": 1}}})
    rows = []

    def record(stage: str, ranks: int) -> dict:
        row = {"size": name, "nodes": nodes, "edges": edges, "ranks": ranks,
               "load": round(os.getloadavg()[0], 1), **traced(run, stage)}
        if stage == "train" and row["exit_code"] == 0:
            row.update(epoch_figures(run))
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "output_tail"}), flush=True)
        if row["exit_code"]:
            print(row["output_tail"], flush=True)
        return row

    for stage in DATA_STAGES:
        if args.resume and done(run, stage):
            continue
        if record(stage, 1)["exit_code"]:
            return rows
    for stage in LAST_STAGES:
        if record(stage, 1)["exit_code"]:
            return rows
    for ranks in args.ranks:
        set_params(run, {"train": {"dist": {"nproc": ranks}}})
        record("train", ranks)
    set_params(run, {"train": {"dist": {"nproc": 1}}})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| size | stage | ranks | wall s | us / seed (epoch s) | stage process anon (VmHWM) MiB "
             "| other processes' anon MiB | load |", "|---|---|---:|---:|---|---|---|---:|"]
    for r in rows:
        seed = f"{r['us_per_seed']} ({r['epoch_s']:.1f})" if "us_per_seed" in r else "-"
        kids = ", ".join(f"{k} {a:.0f}" for a, k in zip(r["children_anon_mb"], r["children"]))
        failed = "" if r["exit_code"] == 0 else f" **exit {r['exit_code']}**"
        lines.append(f"| {r['size']} | {r['stage']}{failed} | {r['ranks']} | {r['wall_s']} | "
                     f"{seed} | {r['stage_anon_mb']:.0f} ({r['stage_hwm_mb']:.0f}) | "
                     f"{kids or '-'} | {r['load']} |")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True, help="tables and runs (outside the "
                        "repository); removed at the end unless --keep")
    parser.add_argument("--sizes", default="10M,40M,160M", help="10M | 40M | 160M | NODES:EDGES")
    parser.add_argument("--ranks", default="2", help="DDP rank counts train also runs with")
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--keep", action="store_true", help="keep the tables and runs")
    parser.add_argument("--resume", action="store_true",
                        help="reuse a kept run's data-stage outputs, with this tree's code")
    parser.add_argument("--json", type=Path, default=None, help="write every row here too")
    args = parser.parse_args(argv)
    args.dir = args.dir.resolve()
    args.ranks = [int(r) for r in args.ranks.split(",") if r]
    rows = []
    for text in args.sizes.split(","):
        size = dp.parse_size(text)
        rows += run_size(args, size)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        if not args.keep:
            shutil.rmtree(args.dir / f"run-{size[0]}", ignore_errors=True)
            shutil.rmtree(args.dir / f"tables-{size[0]}", ignore_errors=True)
    print(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
