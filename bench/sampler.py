"""Neighbor-sampling throughput: gnnpipe's CSR sampler against a peer measured in the same run.

    python -m bench.sampler --cache /tmp/gnnpipe-bench     # 1M nodes / ~20M edges, [15, 10, 5]
    python -m bench.sampler --scale 0.1 --seeds 20480      # quick
    python -m bench.sampler --scale 0.25 --trees OLD .     # against another tree (bench/trees.py)

The peer is PyG's ``NeighborLoader`` when torch-sparse or pyg-lib is installed (``bash
bench/build_peers.sh VENV`` builds torch-sparse into a separate venv; run this with that venv's
python); ``--peer-seeds`` times the peer on the first batches only. Otherwise a naive
reference sampler (per-node Python loop, ``Generator.choice`` per frontier node, a dict for the
global-to-local map) run on ``--naive-batches`` batches only and extrapolated to seeds/s, since
a full epoch of it would take hours. Both sides sample the same seed batches of the same graph
with the same fan-out. ``sampler`` rows time ``sample_from_nodes`` alone (indices only);
``loader`` rows time PyG's ``NodeLoader`` batches, i.e. sampling plus gathering ``x``/``y`` and
building ``edge_index``, which is what the DESIGN.md peer figure measured.

The variant rows time gnnpipe's other modes on the first ``--variant-batches`` batches: PyG's
``weight_attr`` (random uniform edge weights), ``sample_direction='backward'``,
``num_neighbors=[]``; and ``BidirectionalNeighborSampler`` (PyG's merge, O(nodes x edges) per
batch) on ``--bidir-batch``-seed batches at ``--bidir-fanout``, next to the default sampler on
the same small batches. pyg-lib, which PyG needs for all of these, is not installed here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch_geometric.typing
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import NodeSamplerInput

from bench.common import add_graph_args, describe, load_graph, machine, print_machine
from bench.trees import add_tree_args, compare_trees
from gnnpipe.sampling import CsrNeighborSampler
from gnnpipe.sampling.bidirectional import BidirectionalNeighborSampler

VARIANTS = {  # extra rows: gnnpipe's sampler in its other modes (sampler only)
    "replace": {"replace": True},
    "bidirectional": {"subgraph_type": "bidirectional"},
    "disjoint": {"disjoint": True},
    "induced": {"subgraph_type": "induced"},
    "weighted (weight_attr)": {"edge_weight": "random"},
    "weighted, replace": {"edge_weight": "random", "replace": True},
    "backward (sample_direction)": {"sample_direction": "backward"},
    "num_neighbors=[]": {"num_neighbors": []},
}


def naive_sample(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray, fanout: list[int],
                 rng: np.random.Generator) -> tuple[list[int], list[int], list[int]]:
    """The reference: what one writes without vectorizing (nodes, rows, cols)."""
    nodes = seeds.tolist()
    local = {v: i for i, v in enumerate(nodes)}
    rows: list[int] = []
    cols: list[int] = []
    frontier = list(range(len(nodes)))
    for k in fanout:
        nxt = []
        for v in frontier:
            g = nodes[v]
            nbrs = indices[indptr[g]:indptr[g + 1]]
            if 0 <= k < nbrs.size:
                nbrs = rng.choice(nbrs, k, replace=False)
            for u in nbrs.tolist():
                j = local.get(u)
                if j is None:
                    j = local[u] = len(nodes)
                    nodes.append(u)
                    nxt.append(j)
                rows.append(j)
                cols.append(v)
        frontier = nxt
    return nodes, rows, cols


def _rate(seeds: int, seconds: float, nodes: float, edges: float, batches: int, **extra) -> dict:
    return {"seeds_per_s": seeds / seconds, "seconds": seconds, "batches": batches,
            "nodes_per_batch": nodes / batches, "edges_per_batch": edges / batches, **extra}


def time_sampler(sampler, batches: list[torch.Tensor]) -> dict:
    sampler.sample_from_nodes(NodeSamplerInput(None, batches[0]))  # warm-up (allocations)
    nodes = edges = 0
    start = time.perf_counter()
    for seeds in batches:
        out = sampler.sample_from_nodes(NodeSamplerInput(None, seeds))
        nodes += out.node.numel()
        edges += out.row.numel()
    return _rate(sum(b.numel() for b in batches), time.perf_counter() - start, nodes, edges,
                 len(batches))


def time_loader(loader) -> dict:
    nodes = edges = seeds = 0
    start = time.perf_counter()
    for batch in loader:
        nodes += batch.num_nodes
        edges += batch.num_edges
        seeds += batch.batch_size
    return _rate(seeds, time.perf_counter() - start, nodes, edges, len(loader))


def time_naive(graph, batches: list[torch.Tensor], fanout: list[int]) -> dict:
    indptr, indices = graph.csr.indptr.numpy(), graph.csr.indices.numpy()
    rng = np.random.default_rng(0)
    nodes = edges = 0
    start = time.perf_counter()
    for seeds in batches:
        n, r, _ = naive_sample(indptr, indices, seeds.numpy(), fanout, rng)
        nodes += len(n)
        edges += len(r)
    return _rate(sum(b.numel() for b in batches), time.perf_counter() - start, nodes, edges,
                 len(batches), extrapolated=True)


def main(argv=None) -> dict:
    parser = add_graph_args(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    parser.add_argument("--fanout", default="15,10,5", help="comma-separated, -1 = all")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seeds", type=int, default=102_400, help="seeds timed per row")
    parser.add_argument("--peer-seeds", type=int, default=None,
                        help="seeds the PyG rows time (the first ones of --seeds, whole batches); "
                             "default: all of --seeds")
    parser.add_argument("--naive-batches", type=int, default=2,
                        help="batches the naive reference runs (it is extrapolated)")
    parser.add_argument("--variant-batches", type=int, default=10)
    parser.add_argument("--bidir-batch", type=int, default=32)
    parser.add_argument("--bidir-fanout", default="5,5")
    parser.add_argument("--bidir-batches", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = add_tree_args(parser).parse_args(argv)
    if args.trees:  # this bench once per tree and round, in their own processes
        return compare_trees("bench.sampler", sys.argv[1:] if argv is None else list(argv), args.trees,
                             args.rounds, args.clock, args.json)
    torch.set_num_threads(args.threads)
    fanout = [int(k) for k in args.fanout.split(",")]
    print_machine()
    started = time.perf_counter()
    graph = load_graph(args)
    print(f"# graph: {describe(graph)}; built/loaded in {time.perf_counter() - started:.1f} s")
    print(f"# fan-out {fanout}, batch {args.batch_size}, {args.seeds:,} seeds per timed row")
    order = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(args.seed))
    seeds = order[:args.seeds]
    batches = list(seeds.split(args.batch_size))
    # clone: a --cache graph is memory-mapped, and first touches would count as gather time
    data = Data(x=graph.x.clone(), y=graph.y.clone(), edge_index=graph.csr.edge_index(),
                num_nodes=graph.num_nodes)
    results: dict[str, dict] = {}

    def report(name: str, row: dict) -> None:
        results[name] = row
        note = " (extrapolated)" if row.get("extrapolated") else ""
        print(f"{name:34s} {row['seeds_per_s']:10,.0f} seeds/s  {row['seconds']:7.2f} s  "
              f"{row['nodes_per_batch']:9,.0f} nodes/batch  {row['edges_per_batch']:9,.0f} "
              f"edges/batch  {row['batches']} batches{note}", flush=True)

    ours = CsrNeighborSampler(graph.csr, fanout, seed=0, backend="gnnpipe")
    report("gnnpipe sampler", time_sampler(ours, batches))
    report("gnnpipe NodeLoader (+x, y gather)",
           time_loader(NodeLoader(data, node_sampler=CsrNeighborSampler(graph.csr, fanout, seed=0),
                                  input_nodes=seeds, batch_size=args.batch_size)))
    peer_lib = ("pyg-lib" if torch_geometric.typing.WITH_PYG_LIB else
                "torch-sparse" if torch_geometric.typing.WITH_TORCH_SPARSE else None)
    if peer_lib is not None:
        from torch_geometric.loader import NeighborLoader

        peer_batches = batches
        if args.peer_seeds is not None:
            peer_batches = batches[:max(1, -(-args.peer_seeds // args.batch_size))]
            print(f"# PyG rows: the first {len(peer_batches)} of the {len(batches)} batches")
        peer_seeds = torch.cat(peer_batches)
        loader = NeighborLoader(data, num_neighbors=fanout, input_nodes=peer_seeds,
                                batch_size=args.batch_size)
        report(f"PyG sampler ({peer_lib})", time_sampler(loader.node_sampler, peer_batches))
        report(f"PyG NeighborLoader ({peer_lib})", time_loader(loader))
        pairs = [("gnnpipe sampler", f"PyG sampler ({peer_lib})"),
                 ("gnnpipe NodeLoader (+x, y gather)", f"PyG NeighborLoader ({peer_lib})")]
    else:
        print(f"# torch-sparse and pyg-lib are not installed: the peer is the naive reference, "
              f"run on {args.naive_batches} batches and extrapolated")
        report("naive reference sampler", time_naive(graph, batches[:args.naive_batches], fanout))
        pairs = [("gnnpipe sampler", "naive reference sampler")]
    weight = torch.rand(graph.csr.num_edges, generator=torch.Generator().manual_seed(1))
    for name, kwargs in VARIANTS.items():
        kwargs = dict(kwargs)
        hops = kwargs.pop("num_neighbors", fanout)
        if kwargs.get("edge_weight") == "random":
            kwargs["edge_weight"] = weight
        sampler = CsrNeighborSampler(graph.csr, hops, seed=0, **kwargs)
        report(f"gnnpipe sampler, {name}", time_sampler(sampler, batches[:args.variant_batches]))
    small = list(order[:args.bidir_batch * args.bidir_batches].split(args.bidir_batch))
    bifan = [int(k) for k in args.bidir_fanout.split(",")]
    tag = f"batch {args.bidir_batch}, fan-out {bifan}"
    report(f"gnnpipe sampler ({tag})",
           time_sampler(CsrNeighborSampler(graph.csr, bifan, seed=0), small))
    report(f"gnnpipe BidirectionalNeighborSampler ({tag})",
           time_sampler(BidirectionalNeighborSampler(graph.csr, bifan, seed=0), small))
    ratios = {f"{a} / {b}": results[a]["seeds_per_s"] / results[b]["seeds_per_s"] for a, b in pairs}
    for name, ratio in ratios.items():
        print(f"ratio {name}: {ratio:.1f}x")
    summary = {"machine": machine(), "graph": describe(graph), "fanout": fanout,
               "batch_size": args.batch_size, "threads": args.threads, "peer": peer_lib or "naive",
               "peer_seeds": args.peer_seeds,
               "results": results, "ratios": ratios}
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
