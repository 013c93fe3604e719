"""partition: METIS (or lp / random / BFS) parts of the train-phase message graph, plus one
shard per part (its nodes and their partition.halo_hops in-neighbourhood, as a local CSR with
global ids), so a ClusterGCN batch or a distributed rank reads only its own part_<k>/.
``lp`` reads the graph by blocks of rows (gnnpipe/graphops/partition_blocks.py); the other
methods read it whole. Either way each shard is written as its rows are read
(``graphops.partition.write_shard``)."""

import time

import numpy as np

from gnnpipe import io
from gnnpipe.config import load_params
from gnnpipe.graphops.partition import (assign_parts, csr_rows, halo_report, partition_report,
                                        projection_meta, resolve_backend, write_shard)
from gnnpipe.graphops.heuristics import train_projection
from gnnpipe.graphops.partition_blocks import lp_stage
from gnnpipe.io.csr_blocks import stored_message_graph
from gnnpipe.runtime.engine import session
from gnnpipe.runtime.progress import progress
from gnnpipe.runtime.resources import peak_rss_mb
from gnnpipe.runtime.rng import make_rng


def run(args) -> str:
    params = load_params(args.params)
    cfg = params.partition
    # either task partitions the train-phase graph
    work = _by_blocks if cfg.method == "lp" else _whole
    started = time.perf_counter()
    backend = resolve_backend(cfg)
    with io.atomic_dir(args.out) as out:
        num_nodes, parts, report, summaries, assigned = work(args, params, out)
        split = io.read_split_meta(args.split)
        io.write_partition(out, parts)
        io.write_json(out / "meta.json", {
            "num_parts": cfg.num_parts, "halo_hops": cfg.halo_hops, "num_nodes": num_nodes,
            "graph": "train", "method": cfg.method, "backend": backend,
            **projection_meta(split["sizes"], split["edge_type_list"])})
    report = {**report, "method": cfg.method, "backend": backend, "halo_hops": cfg.halo_hops,
              **halo_report(summaries)}
    io.write_json(args.metrics, report)
    finished = time.perf_counter()
    io.write_json(args.perf, {
        "seconds": round(finished - started, 3),
        "assign_seconds": round(assigned - started, 3),
        "shard_seconds": round(finished - assigned, 3),
        "peak_rss_mb": peak_rss_mb()["self"],  # the high-water mark, input loading included
    })
    return (f"{report['num_parts']} parts ({cfg.method}"
            f"{'/' + backend if backend != 'none' else ''}), edge cut "
            f"{report['edge_cut_fraction']:.3f}, balance {report['balance']:.3f}, halo "
            f"{report['halo_fraction']:.2f} x owned -> {args.out}")


def _whole(args, params, out) -> tuple[int, np.ndarray, dict, list[dict], float]:
    """METIS, random, bfs: the graph read whole, parts and shards made here. Returns the node
    count, parts, ``partition_report``, shard summaries and when the parts were done."""
    cfg = params.partition
    sizes, graphs = io.read_typed_message_graphs(args.split)
    csr = train_projection(sizes, graphs["train"])
    parts = assign_parts(csr, cfg, make_rng(params.seed, "partition"))
    assigned = time.perf_counter()
    report = partition_report(csr, parts, cfg.num_parts)
    rows, n, k = csr_rows(csr), csr.num_nodes, cfg.num_parts
    summaries = [write_shard(rows, parts == part, out, part, k, n, cfg.halo_hops)
                 for part in progress(range(k), desc="shards", unit="part")]
    return csr.num_nodes, parts, report, summaries, assigned


def _by_blocks(args, params, out) -> tuple[int, np.ndarray, dict, list[dict], float]:
    """lp: block tasks (in this process, or on cluster.engine's workers) read the split's files
    by rows and write the shards; the block files lie in a temp folder beside the output (on
    disk, not in a memory-backed /tmp; a real cluster's workers see that path too)."""
    graph = stored_message_graph(args.split)
    seed = int(make_rng(params.seed, "partition").integers(0, 2**31 - 1))
    scratch = args.out.resolve().parent  # exists: the atomic output folder lies in it
    with session(params.cluster) as client:
        done = lp_stage(graph, params.partition, seed, out.resolve(), client, scratch)
    return (graph.num_nodes, *done)

