"""partition: METIS (or lp / random / BFS) parts of the train-phase message graph, plus one
shard per part (its nodes and their partition.halo_hops in-neighbourhood, as a local CSR with
global ids), so a ClusterGCN batch or a distributed rank reads only its own part_<k>.pt."""

import resource
import time

import numpy as np

from gnnpipe import io
from gnnpipe.config import load_params
from gnnpipe.data.graph import TYPED, Csr
from gnnpipe.data.edges import homogeneous_csr
from gnnpipe.graphops.partition import (assign_parts, build_shards, halo_report, partition_report,
                               resolve_backend, shard_summary)
from gnnpipe.runtime.engine import session
from gnnpipe.runtime.progress import progress
from gnnpipe.runtime.rng import make_rng


def run(args):
    params = load_params(args.params)
    csr, graph_meta = train_graph(args)  # either task partitions the train-phase graph
    return _partition(args, params, csr, graph_meta)


def train_graph(args) -> tuple[Csr, dict]:
    """The train phase's message graph of every edge type as one CSR over every node
    (``to_homogeneous`` ids), and what meta.json adds about it: typed files list the type
    offsets; a homogeneous layout's one CSR is that graph as it is."""
    sizes, graphs = io.read_typed_message_graphs(args.split)
    if io.read_split_meta(args.split)["layout"] != TYPED:
        (csr,) = graphs["train"].values()
        return csr, {}
    starts = np.cumsum([0] + [n for _, n in sizes]).tolist()
    return homogeneous_csr(sizes, graphs["train"]), {
        "projection": "to_homogeneous",
        "node_types": [[t, starts[i], n] for i, (t, n) in enumerate(sizes)]}


def _partition(args, params, csr: Csr, extra_meta: dict) -> str:
    cfg = params.partition
    started = time.perf_counter()
    backend = resolve_backend(cfg)
    parts = _assign(args, params, csr)
    assigned = time.perf_counter()
    report = {**partition_report(csr, parts, cfg.num_parts), "method": cfg.method,
              "backend": backend, "halo_hops": cfg.halo_hops}
    with io.atomic_dir(args.out) as out:
        io.write_partition(out, parts)
        summaries = []
        for shard in progress(build_shards(csr, parts, cfg.num_parts, cfg.halo_hops),
                              desc="shards", unit="part", total=cfg.num_parts):
            io.write_partition_shard(out, shard)
            summaries.append(shard_summary(shard))
        io.write_partition_meta(out, {"num_parts": cfg.num_parts, "halo_hops": cfg.halo_hops,
                                      "num_nodes": csr.num_nodes, "graph": "train",
                                      "method": cfg.method, "backend": backend,
                                      **extra_meta})
    report.update(halo_report(summaries))
    io.write_json(args.metrics, report)
    finished = time.perf_counter()
    io.write_json(args.perf, {
        "seconds": round(finished - started, 3),
        "assign_seconds": round(assigned - started, 3),
        "shard_seconds": round(finished - assigned, 3),
        # ru_maxrss is KiB on Linux: the process's high-water mark, input loading included
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    })
    return (f"{report['num_parts']} parts ({cfg.method}"
            f"{'/' + backend if backend != 'none' else ''}), edge cut "
            f"{report['edge_cut_fraction']:.3f}, balance {report['balance']:.3f}, halo "
            f"{report['halo_fraction']:.2f} x owned -> {args.out}")


def _assign(args, params, csr: Csr) -> np.ndarray:
    """lp runs its blocks on cluster.engine, its block files in the run's scratch, or beside the
    output when cluster.address names a cluster (whose workers must see them); the other
    methods run here."""
    rng = make_rng(params.seed, "partition")
    if params.partition.method != "lp":
        return assign_parts(csr, params.partition, rng)
    scratch = args.out.resolve().parent if params.cluster.address else None
    with session(params.cluster) as client:
        return assign_parts(csr, params.partition, rng, client, scratch)
