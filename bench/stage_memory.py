"""Peak anonymous memory of the train, predict and evaluate stages as the graph grows (issue 43
item 1: a constant plus batches plus a few bytes per node), one code tree against another on
the same prepared graph, same run.

    git archive HEAD | tar -x -C /tmp/gnnpipe-old            # the tree to compare against
    nice -n 5 python -m bench.stage_memory --dir /work/stage_mem --nodes 1000000 4000000 \\
        --trees old=/tmp/gnnpipe-old new=.

Builds the user tables of ``bench/data_path.py`` (``--features`` float32 features, 10 classes)
and runs prepare, split and baseline once with this repository's code (``cluster.engine:
local``). Then, per tree of ``--trees`` (``name=path``: its ``gnnpipe`` and ``stages`` are copied
into the run), the stages of ``--stages`` with dvc.yaml's command and ``STAGE_PARAMS``: GraphSAGE
on the neighbor sampler for one epoch, evaluation and predict layer by layer
(``train.inference.mode: layerwise``). Memory is sampled from /proc every 0.1 s
(``bench.data_path.TreePeaks``): ``anon`` is the stage process's peak anonymous memory
(RssAnon), ``peak`` its VmHWM (file-backed pages of memory maps too). ``per_node`` is anon / N
in bytes. ``md5`` hashes each stage's outputs, so trees whose arithmetic is the same show equal
bytes. With several ``--nodes`` (``--edges`` each, or ``--edges-per-node`` times the nodes; a
run folder per size under ``--dir``) the last lines give, per tree and stage, the peak at each
size and ``per_added_node``: the growth of the peak anonymous memory per added node in bytes,
(anon at the largest - anon at the smallest) / (their node difference): the figure the issue's
"a constant plus ~32 bytes per node" is about.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import yaml

from bench.data_path import merged, scratch_repo, traced_stage, write_tables

STAGE_PARAMS = {
    "split": {"node": {"train": 0.1, "val": 0.05, "test": 0.1}},
    "baseline": {"epochs": 2, "patience": 1},
    "train": {"model": "sage", "hidden": 16, "sampler": "neighbor", "epochs": 1, "patience": 1,
              "neighbor": {"num_neighbors": [5, 5]}, "checkpoint": {"every": 0},
              "inference": {"mode": "layerwise", "block_edges": 2_000_000}},
    "evaluate": {"bootstrap": 100},
}
# what each measured stage writes (hashed: equal bytes across trees = unchanged arithmetic)
OUTPUTS = {"train": ["data/model/predictions.pt", "data/model/model.pt"],
           "predict": ["data/predict/predictions.parquet", "data/predict/embeddings.parquet"],
           "evaluate": ["metrics/eval.json"]}


def _set_params(run: Path, over: dict) -> None:
    params = yaml.safe_load((run / "params.yaml").read_text())
    (run / "params.yaml").write_text(yaml.safe_dump(merged(params, over), sort_keys=False))


def _md5(run: Path, names: list[str]) -> str:
    digest = hashlib.md5()
    for name in names:
        path = run / name
        digest.update(path.read_bytes() if path.exists() else b"missing")
    return digest.hexdigest()[:12]


def run_stage(run: Path, stage: str, nodes: int) -> dict:
    """One stage with dvc.yaml's command: exit code, wall time, the stage process's peaks."""
    code, wall, output, peaks = traced_stage(run, stage)
    figures = peaks.stop()
    anon = figures["stage_anon_mb"]
    row = {"stage": stage, "exit_code": code, "wall_s": round(wall, 1),
           "anon_mb": anon, "peak_mb": figures["stage_peak_mb"],
           "per_node": round(anon * 2**20 / nodes, 1)}
    if stage in OUTPUTS:
        row["md5"] = _md5(run, OUTPUTS[stage])
    if code != 0:
        row["message"] = output.strip()[-2000:]
    return row


def _copy_code(tree: Path, run: Path) -> None:
    for name in ("gnnpipe", "stages"):
        shutil.rmtree(run / name, ignore_errors=True)
        shutil.copytree(tree / name, run / name, ignore=shutil.ignore_patterns("__pycache__"))


def run_size(root: Path, nodes: int, edges: int, args) -> list[dict]:
    """Prepare, split and baseline once for a graph of ``nodes`` / ``edges``, then every tree's
    stages on it (rows as ``run_stage``'s, with the tree, nodes and edges)."""
    tables, run = root / "tables", root / "run"
    write_tables(tables, nodes, edges, args.features)
    rows = []
    if not (args.reuse and (run / "data" / "baseline").exists()):
        scratch_repo(run, tables, "local", dvc=False)
        _set_params(run, STAGE_PARAMS)
        for stage in ("prepare", "split", "baseline"):
            rows.append({"nodes": nodes, "edges": edges, **run_stage(run, stage, nodes)})
            print(json.dumps(rows[-1]), flush=True)
    # set on every run (--reuse too): every tree of this run reads the same blocks
    _set_params(run, {"train": {"inference": {"block_edges": args.block_edges}}})
    for named in args.trees:
        name, _, path = named.partition("=")
        _copy_code(Path(path).resolve(), run)
        for stage in args.stages.split(","):
            row = {"tree": name, "nodes": nodes, "edges": edges, **run_stage(run, stage, nodes)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def growth(rows: list[dict]) -> list[dict]:
    """Per tree and stage: the peak anonymous MiB at each size and the bytes per added node
    between the smallest and the largest size (None with one size)."""
    out = []
    for tree in dict.fromkeys(r["tree"] for r in rows if "tree" in r):
        for stage in dict.fromkeys(r["stage"] for r in rows if r.get("tree") == tree):
            mine = sorted((r for r in rows if r.get("tree") == tree and r["stage"] == stage),
                          key=lambda r: r["nodes"])
            small, large = mine[0], mine[-1]
            added = large["nodes"] - small["nodes"]
            per_added = (round((large["anon_mb"] - small["anon_mb"]) * 2**20 / added, 1)
                         if added else None)
            out.append({"tree": tree, "stage": stage,
                        "anon_mb": {r["nodes"]: r["anon_mb"] for r in mine},
                        "per_added_node": per_added})
    return out


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True, help="tables and the runs (scratch)")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1_000_000],
                        help="graph sizes, each its own run folder under --dir")
    parser.add_argument("--edges", type=int, nargs="+", default=None,
                        help="directed edges of each size (default: --edges-per-node x nodes)")
    parser.add_argument("--edges-per-node", type=int, default=4)
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--trees", nargs="+", default=["new=."],
                        help="name=path of each code tree measured, in order")
    parser.add_argument("--stages", default="train,predict,evaluate")
    parser.add_argument("--block-edges", type=int,
                        default=STAGE_PARAMS["train"]["inference"]["block_edges"],
                        help="train.inference.block_edges: in-edges per layer-wise block. A "
                             "block is the batch of layer-wise predict: for per_added_node to be "
                             "the per-node cost, the smallest graph's edges must fill several")
    parser.add_argument("--reuse", action="store_true",
                        help="keep an earlier run's prepare / split / baseline outputs")
    parser.add_argument("--keep", action="store_true", help="keep the tables and the runs")
    args = parser.parse_args(argv)
    edges = args.edges or [n * args.edges_per_node for n in args.nodes]
    if len(edges) != len(args.nodes):
        parser.error(f"--edges gives {len(edges)} sizes for {len(args.nodes)} --nodes")
    root = args.dir.resolve()
    # one size keeps the folder layout of earlier runs (--reuse of a --keep'd run)
    rows = []
    for nodes, count in zip(args.nodes, edges):
        folder = root if len(args.nodes) == 1 else root / f"n{nodes}"
        rows += run_size(folder, nodes, count, args)
    for line in growth(rows):
        print(json.dumps(line), flush=True)
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)
    return rows

if __name__ == "__main__":
    main()
