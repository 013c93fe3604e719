"""What a training process holds per node of the whole graph (issue 32 item 5): the train stage's
peak memory, the process itself and each ``torchrun`` rank, on a generated graph with few features
(so the per-node arrays are not hidden under the feature matrix).

    nice -n 5 python -m bench.rank_memory --dir /work/rank_mem --nodes 2000000 --edges 8000000

Builds the user tables of ``bench/data_path.py`` (``--features`` float32 features, 10 classes),
runs prepare, split and partition (``partition.method: random``, 8 parts, ``halo_hops`` 1) once
on ``cluster.engine: local``, then the train stage in each variant of ``VARIANTS`` (1 epoch, no
checkpoint): ``neighbor`` (one process, the whole graph memory-mapped, as in the data path run)
and ``shard`` (``train.sampler: cluster``, ``train.dist.shard: partition``, 2 ``torchrun``
ranks, each holding its own parts); issue 43 item 2: ``neighbor2`` / ``neighbor2auto``
(``train.sampler: neighbor`` on 2 ranks over the shared memory-mapped files, evaluation
``layerwise`` / ``auto``) and ``link2`` / ``link1`` (``link_neighbor`` on 2 ranks / in one
process; ``--task link`` splits for them). ``--trees old=DIR,new=DIR`` runs the train stage
with each tree's code on the same data, interleaved (``--rounds``); the upstream stages run
with the first tree's code and params. Memory is sampled from /proc every 0.1 s
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

from bench.data_path import PARAMS, merged, scratch_repo, traced_stage, write_tables

STAGE_PARAMS = {"partition": {"method": "random", "num_parts": 8, "halo_hops": 1},
                "train": {"hidden": 16}}
VARIANTS = {
    "neighbor": {"train": {"sampler": "neighbor", "dist": {"shard": "none", "nproc": 1}}},
    "shard": {"train": {"sampler": "cluster", "dist": {"shard": "partition", "nproc": 2}}},
    # issue 43 item 2: neighbor sampling on 2 ranks over the shared memory-mapped files
    "neighbor2": {"train": {"sampler": "neighbor", "dist": {"shard": "none", "nproc": 2},
                            "inference": {"mode": "layerwise"}}},
    "neighbor2auto": {"train": {"sampler": "neighbor", "dist": {"shard": "none", "nproc": 2},
                                "inference": {"mode": "auto"}}},
    "link2": {"train": {"sampler": "link_neighbor", "dist": {"shard": "none", "nproc": 2},
                        "inference": {"mode": "layerwise"}}},  # needs --task link
    # issue 43 item 1: the same in one process (its link edges and negative keys alike)
    "link1": {"train": {"sampler": "link_neighbor", "dist": {"shard": "none", "nproc": 1},
                        "inference": {"mode": "layerwise"}}},  # needs --task link
}


def _set_params(run: Path, over: dict) -> None:
    params = yaml.safe_load((run / "params.yaml").read_text())
    (run / "params.yaml").write_text(yaml.safe_dump(merged(params, over), sort_keys=False))


def _use_code(run: Path, tree: Path) -> None:
    """``tree``'s gnnpipe/ and stages/ copied into the run (its data and params are kept)."""
    for name in ("gnnpipe", "stages"):
        shutil.rmtree(run / name, ignore_errors=True)
        shutil.copytree(tree / name, run / name, ignore=shutil.ignore_patterns("__pycache__"))


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
    parser.add_argument("--variants", default="neighbor,shard")
    parser.add_argument("--task", default="node", choices=("node", "link"),
                        help="dataset.task of the split (link: the link2 variant)")
    parser.add_argument("--reuse", action="store_true",
                        help="keep an earlier run's prepare / split / partition outputs")
    parser.add_argument("--keep", action="store_true", help="keep the tables and the run")
    parser.add_argument("--trees", default="",
                        help="NAME=DIR,...: run the train stage with each tree's gnnpipe/ and "
                             "stages/ (e.g. old=/tmp/old from git archive HEAD), same data")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds of the trees")
    args = parser.parse_args(argv)
    tables, run = args.dir.resolve() / "tables", args.dir.resolve() / "run"
    write_tables(tables, args.nodes, args.edges, args.features)
    rows = []
    upstream = ("prepare", "split", "partition")
    trees = dict(t.split("=", 1) for t in args.trees.split(",")) if args.trees else {
        "": str(Path(__file__).resolve().parents[1])}
    if not (args.reuse and (run / "data" / "partition" / "meta.json").exists()):
        scratch_repo(run, tables, "local", dvc=False)
        first = Path(next(iter(trees.values())))  # upstream: the first tree's code and params
        _use_code(run, first)
        (run / "params.yaml").write_text(yaml.safe_dump(merged(
            yaml.safe_load((first / "params.yaml").read_text()),
            merged(PARAMS, {"dataset": {"path": str(tables)}, "cluster": {"engine": "local"}})),
            sort_keys=False))
        _set_params(run, merged(STAGE_PARAMS, {"dataset": {"task": args.task}, **(
            {"train": {"sampler": "link_neighbor"}} if args.task == "link" else {})}))
        for stage in upstream:
            rows.append(run_stage(run, stage))
            print(json.dumps(rows[-1]), flush=True)
    for _ in range(args.rounds):
        for tree, code in trees.items():  # interleaved: each tree's code runs on the same data
            _use_code(run, Path(code))
            for variant in args.variants.split(","):
                _set_params(run, VARIANTS[variant])
                row = {"variant": variant, **({"tree": tree} if tree else {}),
                       "nodes": args.nodes, "edges": args.edges, **run_stage(run, "train")}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)
    return rows


if __name__ == "__main__":
    main()
