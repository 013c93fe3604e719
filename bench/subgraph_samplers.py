"""Batch throughput of the subgraph samplers, all on the same graph in the same run.

    python -m bench.subgraph_samplers --scale 0.1 --cache /tmp/gnnpipe-bench   # 100k nodes
    python -m bench.subgraph_samplers --scale 0.02 --batches 5                  # quick

Rows: the neighbor sampler (reference), the same sampler on PyG's remote backend
(``(FeatureStore, GraphStore)`` of ``gnnpipe.sampling.store``, in memory and over a prepared
graph.pt opened memory-mapped), weighted (``edge_weight``, uniform random weights), the typed
sampler on the same graph as one node and edge type (on a ``HeteroData`` and on stores), ShaDow in
both layouts, GraphSAINT's random-walk / node /
edge samplers and ClusterGCN (with and without inter-cluster edges) as the train stage builds
them (``gnnpipe.sampling``: batches with ``x``, ``y``, norms and masks), then the PyG-named
drop-ins of ``gnnpipe.sampling.pyg_loaders`` on a ``Data`` of the same graph (they also map
``e_id`` back to the user's edge order and gather every attribute). Each row times
``--batches`` batches after one warm-up batch (setup apart: GraphSAINT's norm pre-sampling at
``--coverage``, METIS once for all cluster rows). ``seeds/s``: loss nodes per second (the seeds
of neighbor / ShaDow batches, the train nodes of a GraphSAINT / ClusterGCN batch); ``nodes/s``:
all nodes of the batches. PyG's own classes need torch-sparse, not installed here, so there is
no peer row. One train.batch_size (``--batch-size``) for every sampler, as the train stage uses
it: roots (random walk), nodes drawn (node), edges drawn (edge), seeds (neighbor, ShaDow).
``--only neighbor`` runs the rows whose name contains ``neighbor`` (METIS only for cluster rows).
PyG's testing ``MyFeatureStore`` has no row: its get scans every stored id per asked row.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import NeighborLoader, NodeLoader

from bench.common import add_graph_args, describe, load_graph, machine, print_machine
from gnnpipe.config import NeighborParams, PartitionParams, ShadowParams
from gnnpipe.graphops.partition import assign_parts
from gnnpipe.runtime.rng import make_rng
from gnnpipe import io
from gnnpipe.sampling import CsrNeighborSampler, HeteroNeighborSampler, neighbor_loader
from gnnpipe.sampling import pyg_loaders as pyg
from gnnpipe.sampling.cluster import ClusterLoader, GraphParts
from gnnpipe.sampling.saint import SaintLoader, estimate_norm, make_sampler
from gnnpipe.sampling.shadow import shadow_loader
from gnnpipe.sampling.store import CsrGraphStore, GnnpipeFeatureStore, open_prepared
from gnnpipe.data.graph import Graph
from gnnpipe.training.sharding import NodeRows


def seeds_of(batch) -> int:
    """Loss nodes of a batch (see the module docstring)."""
    if "root_n_id" in batch:  # ShaDow (either layout): the roots
        return int(batch.root_n_id.numel())
    if isinstance(batch, HeteroData):  # the seed type's batch_size
        return sum(int(store.batch_size) for store in batch.node_stores if "batch_size" in store)
    if "train_mask" in batch:
        return int(batch.train_mask.sum())
    return int(batch.batch_size)


def measure(make, batches: int) -> dict:
    """Build the loader (``setup_s``), then time ``batches`` batches after one warm-up."""
    start = time.perf_counter()
    loader = make()
    setup = time.perf_counter() - start
    stream = _endless(loader)
    next(stream)
    seeds = nodes = 0
    start = time.perf_counter()
    for _ in range(batches):
        batch = next(stream)
        seeds += seeds_of(batch)
        nodes += int(batch.num_nodes)
    seconds = time.perf_counter() - start
    return {"setup_s": round(setup, 2), "batches_per_s": round(batches / seconds, 2),
            "seeds_per_s": round(seeds / seconds), "nodes_per_s": round(nodes / seconds),
            "nodes_per_batch": round(nodes / batches)}


def _endless(loader):
    while True:
        yield from loader


def main(argv=None) -> None:
    parser = add_graph_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--coverage", type=int, default=5, help="GraphSAINT sample_coverage")
    parser.add_argument("--num-parts", type=int, default=64, help="METIS parts (cluster rows)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--only", default="", help="run the rows whose name contains this")
    args = parser.parse_args(argv)
    print_machine()
    graph = load_graph(args)
    print(f"# graph: {describe(graph)}")
    n, bs = graph.num_nodes, args.batch_size
    rng = np.random.default_rng(0)
    roles = np.where(rng.random(n) < 0.6, "train", "val")
    train = torch.from_numpy(np.flatnonzero(roles == "train"))
    mask = torch.from_numpy(roles == "train")
    rows = NodeRows(graph.x, graph.y)
    csr = graph.csr
    metis = {}

    def partition():  # METIS once, for the cluster rows only
        if not metis:
            start = time.perf_counter()
            metis["parts"] = assign_parts(csr, PartitionParams(num_parts=args.num_parts),
                                          make_rng(0, "partition"))
            metis["s"] = time.perf_counter() - start
            print(f"# METIS into {args.num_parts} parts: {metis['s']:.1f} s (cluster rows' "
                  "setup excludes it)")
        return metis["parts"]
    data = Data(x=graph.x, y=graph.y, edge_index=csr.edge_index(), train_mask=mask, num_nodes=n)
    torch.manual_seed(0)

    def saint(kind):
        sampler = make_sampler(kind, csr, train, bs, 2)
        return SaintLoader(sampler, estimate_norm(sampler, args.coverage, 0), rows, mask,
                           num_steps=10**6)

    def cluster(keep):
        parts = partition()
        per_part = np.bincount(parts[roles == "train"], minlength=args.num_parts)
        return ClusterLoader(GraphParts(csr, parts, args.num_parts, keep), rows, mask, per_part, 2)

    def on_stores(stores):  # PyG's NeighborLoader on (FeatureStore, GraphStore)
        sampler = CsrNeighborSampler(stores, [15, 10], seed=0)
        return NeighborLoader(stores, [15, 10], input_nodes=train, batch_size=bs, shuffle=True,
                              neighbor_sampler=sampler)

    # the same graph typed: one node type "v", one edge type ("v", "to", "v")
    typed_csr, edge_type = {("v", "to", "v"): csr}, ("v", "to", "v")
    hetero = HeteroData()
    hetero["v"].x, hetero["v"].y = graph.x, graph.y
    hetero[edge_type].edge_index = csr.edge_index()

    def typed_on_stores():
        fs = GnnpipeFeatureStore()
        fs.put_tensor(graph.x, group_name="v", attr_name="x", index=None)
        fs.put_tensor(graph.y, group_name="v", attr_name="y", index=None)
        stores = (fs, CsrGraphStore.from_typed({"v": n}, typed_csr))
        return NeighborLoader(stores, [15, 10], input_nodes=("v", train), batch_size=bs,
                              shuffle=True, neighbor_sampler=HeteroNeighborSampler.from_stores(
                                  stores, [15, 10], seed=0))

    scratch = tempfile.TemporaryDirectory(prefix="gnnpipe-bench-")
    weight = torch.rand(csr.num_edges, generator=torch.Generator().manual_seed(0))

    def shadow(layout):
        return shadow_loader(graph.x, graph.y, csr, train, ShadowParams(layout=layout), 0,
                             batch_size=bs)

    # PyG pre-samples whole passes of num_steps subgraphs: an epoch-sized num_steps, not 10**6
    saint_kw = dict(batch_size=bs, num_steps=args.batches + 1, sample_coverage=args.coverage,
                    log=False)
    cases = {
        "neighbor [15, 10] (reference)": lambda: neighbor_loader(
            graph.x, graph.y, csr, train, NeighborParams(), 0, batch_size=bs),
        "neighbor [15, 10] on (FeatureStore, GraphStore), in memory": lambda: on_stores(
            (GnnpipeFeatureStore.from_graph(graph), CsrGraphStore.from_csr(csr))),
        "neighbor [15, 10] on (FeatureStore, GraphStore), graph.pt mmap": lambda: on_stores(
            open_prepared(_prepared(graph, Path(scratch.name)))),
        "neighbor [15, 10] weighted": lambda: neighbor_loader(
            graph.x, graph.y, csr, train, NeighborParams(), 0, batch_size=bs,
            edge_weight=weight),
        "typed neighbor [15, 10], one node and edge type (HeteroData)": lambda: NodeLoader(
            hetero, node_sampler=HeteroNeighborSampler({"v": n}, typed_csr, [15, 10], seed=0),
            input_nodes=("v", train), batch_size=bs, shuffle=True),
        "typed neighbor [15, 10], one node and edge type, on stores": typed_on_stores,
        "shadow depth 2, 10 (roots_first)": lambda: shadow("roots_first"),
        "shadow depth 2, 10 (layout pyg)": lambda: shadow("pyg"),
        "saint random_walk (walk 2)": lambda: saint("random_walk"),
        "saint node": lambda: saint("node"),
        "saint edge": lambda: saint("edge"),
        "cluster (2 parts)": lambda: cluster(False),
        "cluster (2 parts, keep_inter_cluster_edges)": lambda: cluster(True),
        "pyg_loaders.GraphSAINTRandomWalkSampler": lambda: pyg.GraphSAINTRandomWalkSampler(
            data, walk_length=2, **saint_kw),
        "pyg_loaders.GraphSAINTNodeSampler": lambda: pyg.GraphSAINTNodeSampler(data, **saint_kw),
        "pyg_loaders.GraphSAINTEdgeSampler": lambda: pyg.GraphSAINTEdgeSampler(data, **saint_kw),
        "pyg_loaders.ClusterData + ClusterLoader (2 parts)": lambda: pyg.ClusterLoader(
            pyg.ClusterData(data, args.num_parts, log=False, parts=partition()), batch_size=2,
            shuffle=True),
        "pyg_loaders.ShaDowKHopSampler (2, 10)": lambda: pyg.ShaDowKHopSampler(
            data, 2, 10, node_idx=mask, batch_size=bs, shuffle=True),
    }
    results = {"machine": machine(), "graph": describe(graph), "batch_size": bs, "rows": {}}
    print("| sampler | setup s | batches/s | seeds/s | nodes/s | nodes per batch |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, make in cases.items():
        if args.only not in name:
            continue
        if "luster" in name:
            partition()  # before the clock: the cluster rows' setup excludes METIS
        row = measure(make, args.batches)
        results["rows"][name] = row
        print(f"| {name} | {row['setup_s']} | {row['batches_per_s']} | {row['seeds_per_s']:,} | "
              f"{row['nodes_per_s']:,} | {row['nodes_per_batch']:,} |", flush=True)
    results["load_average_end"] = machine()["load_average"]
    if metis:
        results["metis_s"] = round(metis["s"], 1)
    scratch.cleanup()
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


def _prepared(graph, folder: Path) -> Path:
    """``graph`` (the bench graph's view) written as the prepare stage writes it (graph.pt is
    what the store maps)."""
    io.write_prepared(folder, Graph.homogeneous(graph.csr, graph.x, graph.y,
                                                graph.num_classes))
    return folder


if __name__ == "__main__":
    main()
