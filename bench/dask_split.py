"""The node split on ``cluster.engine: dask`` as the graph grows (issue 32 item 3): wall time and
peak memory of each Dask worker and of the stage process, for prepared graphs of several sizes,
on an embedded LocalCluster of 2 workers.

    python -m bench.dask_split --dir /tmp/dsplit --sizes 1,8 [--task link --negatives 20]

Size ``s``: ``s * 1M`` stored directed edges between ``s * 50,000`` nodes (random pairs, 4
classes, every 10th node unlabelled, 8 float32 features), written by ``io.write_prepared``. Each
run is its own child process (``--one``): the node task (stratified, mode inductive: two
message graphs written by row blocks) or the link task (every directed edge a positive, val /
test 10% each with ``--negatives`` fixed negatives each), the block audit, the files written;
peaks as bench/prepare_scale.py reads them (VmHWM, and RssAnon sampled every 20 ms).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench.prepare_scale import AnonPeak, _read_sampler, _start_sampler

BASE_NODES, BASE_EDGES = 50_000, 1_000_000


def write_graph(folder: Path, scale: float) -> None:
    """A prepared graph of size ``scale`` (skipped when it exists)."""
    from gnnpipe import io
    from gnnpipe.data.graph import Graph
    from gnnpipe.data.edges import csr_from_edges

    if (folder / "graph.pt").exists():
        return
    rng = np.random.default_rng(0)
    n, e = int(BASE_NODES * scale), int(BASE_EDGES * scale)
    csr = csr_from_edges(rng.integers(0, n, e), rng.integers(0, n, e), n)
    y = torch.from_numpy(rng.integers(0, 4, n))
    y[::10] = -1
    graph = Graph.homogeneous(csr=csr, x=torch.from_numpy(rng.random((n, 8), dtype=np.float32)),
                              y=y, num_classes=4)
    io.write_prepared(folder, graph)


def run_one(prepared: Path, out: Path, block_edges: int, memory_limit: str, task: str,
            negatives: int) -> dict:
    """Split ``prepared`` into ``out`` by blocks; wall time and memory peaks."""
    from gnnpipe import io
    from gnnpipe.config import params_from_dict

    from gnnpipe.io.blocks import open_memmap, scratch_beside
    from gnnpipe.runtime.engine import session
    from gnnpipe.splitting.link_audit import audit_links
    from gnnpipe.splitting.link_split import split_links
    from gnnpipe.splitting.split import BlockSizes, split_node_blocks
    from gnnpipe.splitting.stage import audit_node_blocks

    peak = AnonPeak()
    params = params_from_dict({"split": {"assign": "hash", "node": {"mode": "inductive"},
                                         "link": {"num_val_negatives": negatives,
                                                  "num_test_negatives": negatives}},
                               "cluster": {"engine": "dask", "workers": 2,
                                           "memory_limit": memory_limit}})
    cfg = params.split.node
    start = time.perf_counter()
    graph = io.read_graph(prepared, mmap=True, stored_x=True)
    (edge_type,) = graph.edge_types
    sizes = BlockSizes(rows=1 << 20, edges=block_edges)
    n = graph.num_nodes_dict[graph.target]
    with scratch_beside(out) as scratch:
        with session(params.cluster) as client:
            client.run(_start_sampler)
            if task == "node":
                split = split_node_blocks(client, graph, cfg, 0, scratch, prepared / "graph.pt",
                                          sizes)
                report = audit_node_blocks(client, graph, prepared / "graph.pt", split, cfg)
            else:
                split = split_links(client, graph, prepared / "graph.pt", params.split.link, 0,
                                    scratch, sizes)
                report = audit_links(client, graph, split)
            workers = client.run(_read_sampler)
        split_s = time.perf_counter() - start
        if task == "node":  # the link tables' streaming is the stage's: timed in split_s's rest
            with io.atomic_dir(out) as target:
                io.write_split(target, graph, split.message_graphs(graph), {"mode": cfg.mode},
                               roles=open_memmap(split.roles))
    return {"task": task, "nodes": n, "edges": graph.csr[edge_type].num_edges,
            "blocks": sum(map(len, split.blocks)) if task == "link" else len(split.blocks),
            "passed": report["passed"],
            "split_s": round(split_s, 1), "wall_s": round(time.perf_counter() - start, 1),
            "stage": peak.read(), "workers": list(workers.values())}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="graphs and outputs")
    parser.add_argument("--sizes", default="1,8", help="comma-separated scales")
    parser.add_argument("--block-edges", type=int, default=1 << 18)
    parser.add_argument("--memory-limit", default="1GiB")
    parser.add_argument("--task", choices=("node", "link"), default="node")
    parser.add_argument("--negatives", type=int, default=100, help="per val / test positive")
    parser.add_argument("--one", metavar="SCALE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.dir / f"prepared-{args.one}", args.dir / f"split-{args.one}",
                                 args.block_edges, args.memory_limit, args.task, args.negatives)))
        return
    for scale in args.sizes.split(","):
        write_graph(args.dir / f"prepared-{scale}", float(scale))
        done = subprocess.run([sys.executable, "-m", "bench.dask_split", "--dir", str(args.dir),
                               "--block-edges", str(args.block_edges), "--memory-limit",
                               args.memory_limit, "--task", args.task, "--negatives",
                               str(args.negatives), "--one", scale],
                              check=True, stdout=subprocess.PIPE, text=True)
        print(done.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
