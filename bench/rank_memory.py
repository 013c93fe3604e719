"""What a training process holds per node of the whole graph (issue 32 item 5): the train stage's
peak memory, the process itself and each ``torchrun`` rank, on a generated graph with few features
(so the per-node arrays are not hidden under the feature matrix).

    nice -n 5 python -m bench.rank_memory --dir /work/rank_mem --nodes 2000000 --edges 8000000

Builds the user tables of ``bench/data_path.py`` (``--features`` float32 features, 10 classes),
runs prepare, split and partition (``partition.method: random``, 8 parts, ``halo_hops`` 1) once
on ``cluster.engine: local``, then the train stage in each variant of ``VARIANTS`` (1 epoch, no
checkpoint): ``neighbor`` (one process, the whole graph memory-mapped, as in the data path run)
and ``shard`` (``train.sampler: cluster``, ``train.dist.shard: partition``, 2 ``torchrun``
ranks, each holding its own parts). Memory is sampled from /proc every 0.1 s
(``bench.data_path.TreePeaks``): ``anon`` is the peak anonymous memory (RssAnon) of a process,
``peak`` its VmHWM (which also counts file-backed pages of the memory maps). Per-node arrays are
reported as bytes per node of the graph, from their element sizes.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import yaml

from bench.data_path import merged, scratch_repo, traced_stage, write_tables

STAGE_PARAMS = {"partition": {"method": "random", "num_parts": 8, "halo_hops": 1},
                "train": {"hidden": 16}}
VARIANTS = {
    "neighbor": {"train": {"sampler": "neighbor", "dist": {"shard": "none", "nproc": 1}}},
    "shard": {"train": {"sampler": "cluster", "dist": {"shard": "partition", "nproc": 2}}},
}


def _set_params(run: Path, over: dict) -> None:
    params = yaml.safe_load((run / "params.yaml").read_text())
    (run / "params.yaml").write_text(yaml.safe_dump(merged(params, over), sort_keys=False))


def run_stage(run: Path, stage: str) -> dict:
    """One stage with dvc.yaml's command: wall time, exit code, the stage process's peaks and
    every descendant's (``ranks``: the processes that are neither torchrun's agent nor a
    multiprocessing helper)."""
    code, wall, output, peaks = traced_stage(run, stage)
    peaks.stop()
    root = peaks.pid
    ranks = sorted((round(peaks.anon[p], 1), round(peaks.hwm[p], 1)) for p in peaks.hwm
                   if p != root and peaks.cmd.get(p) != peaks.cmd.get(root)
                   and "torchrun" not in peaks.cmd.get(p, "")
                   and "resource_tracker" not in peaks.cmd.get(p, ""))
    return {"stage": stage, "exit_code": code, "wall_s": round(wall, 1),
            "stage_peak_mb": round(peaks.hwm.get(root, 0.0), 1),
            "stage_anon_mb": round(peaks.anon.get(root, 0.0), 1),
            "ranks_anon_peak_mb": ranks,
            "message": output.strip().splitlines()[-1] if output.strip() else ""}


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True, help="tables and the run (scratch)")
    parser.add_argument("--nodes", type=int, default=2_000_000)
    parser.add_argument("--edges", type=int, default=8_000_000)
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--reuse", action="store_true",
                        help="keep an earlier run's prepare / split / partition outputs")
    parser.add_argument("--keep", action="store_true", help="keep the tables and the run")
    args = parser.parse_args(argv)
    tables, run = args.dir.resolve() / "tables", args.dir.resolve() / "run"
    write_tables(tables, args.nodes, args.edges, args.features)
    rows = []
    upstream = ("prepare", "split", "partition")
    if not (args.reuse and (run / "data" / "partition" / "meta.json").exists()):
        scratch_repo(run, tables, "local", dvc=False)
        _set_params(run, STAGE_PARAMS)
        for stage in upstream:
            rows.append(run_stage(run, stage))
            print(json.dumps(rows[-1]), flush=True)
    else:  # the code under test changed: copy it in again, keep the data
        for name in ("gnnpipe", "stages"):
            shutil.rmtree(run / name)
            shutil.copytree(Path(__file__).resolve().parents[1] / name, run / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
    for variant in args.variants.split(","):
        _set_params(run, VARIANTS[variant])
        row = {"variant": variant, "nodes": args.nodes, "edges": args.edges,
               **run_stage(run, "train")}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)
    return rows


if __name__ == "__main__":
    main()
