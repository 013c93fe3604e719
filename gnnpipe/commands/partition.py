"""partition: METIS (or lp / random / BFS) parts of the train-phase message graph, plus one
shard per part (its nodes and their partition.halo_hops in-neighbourhood, as a local CSR with
global ids), so a ClusterGCN batch or a distributed rank reads only its own part_<k>/.
Every method goes by block tasks (gnnpipe/graphops/partition_blocks.py: in this process, or on
cluster.engine's workers): the block files, the cut and the shards, each written as its rows
are read (``graphops.partition.write_shard``); ``lp`` finds the parts by blocks too, the other
methods from the graph mapped whole in this process."""

import time

from gnnpipe import io
from gnnpipe.config import load_params
from gnnpipe.graphops.partition import halo_report, projection_meta, resolve_backend
from gnnpipe.graphops.partition_blocks import partition_stage
from gnnpipe.io.csr_blocks import stored_message_graph
from gnnpipe.runtime.engine import session
from gnnpipe.runtime.resources import peak_rss_mb
from gnnpipe.runtime.rng import make_rng


def run(args) -> str:
    params = load_params(args.params)
    cfg = params.partition
    started = time.perf_counter()
    backend = resolve_backend(cfg)
    with io.atomic_dir(args.out) as out:
        graph = stored_message_graph(args.split)
        # the block files lie in a temp folder beside the output (on disk, not in a
        # memory-backed /tmp; a real cluster's workers see that path too)
        with session(params.cluster) as client:
            parts, report, summaries, assigned = partition_stage(
                graph, cfg, make_rng(params.seed, "partition"), out.resolve(), client,
                args.out.resolve().parent)
        split = io.read_split_meta(args.split)
        io.write_partition(out, parts)
        io.write_json(out / "meta.json", {
            "num_parts": cfg.num_parts, "halo_hops": cfg.halo_hops, "num_nodes": graph.num_nodes,
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
