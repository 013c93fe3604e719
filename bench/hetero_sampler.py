"""Typed neighbor-sampling throughput: gnnpipe's HeteroNeighborSampler against PyG's
NeighborLoader on HeteroData (torch-sparse's ``hetero_neighbor_sample`` or pyg-lib's), in the
same run, on the same graph, seeds and fan-outs.

    python -m bench.hetero_sampler --cache /tmp/gnnpipe-bench    # 1M papers, [15, 10]
    python -m bench.hetero_sampler --scale 0.1 --seeds 20480     # quick
    python -m bench.hetero_sampler --scale 0.25 --trees OLD .    # against another tree

The graph is the built-in typed one (the prepare stage's, ``prepared_graph``: papers cite papers, authors write papers, papers sit in venues, reverse types
stored): ``--scale`` * 1M papers with ``--avg-degree`` cites per paper, ``--authors`` and
``--venues`` scaled alike. Run it with the python of a venv that has torch-sparse
(``bash bench/build_peers.sh VENV``) for the peer rows;
without one only gnnpipe's rows run. ``sampler`` rows time ``sample_from_nodes`` alone
(indices only); ``loader`` rows time PyG's ``NodeLoader`` batches, i.e. sampling plus gathering
every type's ``x`` and building the typed ``edge_index``. Nodes and edges per batch are summed
over the node / edge types on both sides, so equal work shows as equal counts. ``--check``
also compares both samplers at fan-out -1 on a few seeds: the same node set per type and the
same edge set (as data edge ids) per edge type.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch_geometric.typing
from torch_geometric.data import HeteroData
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import NodeSamplerInput

from bench.common import machine, prepared_graph, print_machine
from bench.trees import add_tree_args, compare_trees
from gnnpipe.config import params_from_dict
from gnnpipe.data.graph import Csr
from gnnpipe.sampling import HeteroNeighborSampler

BASE_PAPERS, BASE_AUTHORS, BASE_VENUES = 1_000_000, 200_000, 1_000
VARIANTS = {  # extra rows: gnnpipe's sampler in its other modes (sampler only)
    "replace": {"replace": True},
    "disjoint": {"disjoint": True},
    "induced": {"subgraph_type": "induced"},
    "weighted (weight_attr, uniform random weights)": {"weight_attr": "bench_weight"},
    "backward (sample_direction)": {"sample_direction": "backward"},
}


def build_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    group = parser.add_argument_group("typed synthetic graph")
    group.add_argument("--scale", type=float, default=1.0,
                       help=f"papers = scale * {BASE_PAPERS:,}; authors and venues scale alike")
    group.add_argument("--avg-degree", type=float, default=20.0, help="cites edges per paper")
    group.add_argument("--authors-per-paper", type=float, default=3.0)
    group.add_argument("--features", type=int, default=128, help="paper features")
    group.add_argument("--seed", type=int, default=0)
    group.add_argument("--cache", type=Path, default=None,
                       help="folder to keep the built graph in (reused when arguments match)")
    return parser


def load_typed_graph(args) -> tuple[dict[str, torch.Tensor], dict[tuple, Csr]]:
    """``x`` per node type and ``csr`` per edge type, through ``--cache`` when given."""
    papers = max(10, int(round(BASE_PAPERS * args.scale)))
    authors = max(2, int(round(BASE_AUTHORS * args.scale)))
    venues = max(2, int(round(BASE_VENUES * args.scale)))
    name = (f"hetero_p{papers}_a{authors}_v{venues}_d{args.avg_degree:g}"
            f"_w{args.authors_per_paper:g}_f{args.features}_seed{args.seed}.pt")
    path = None if args.cache is None else Path(args.cache) / name
    if path is not None and path.exists():
        p = torch.load(path, mmap=True, weights_only=False)
        return p["x"], {e: Csr(*v) for e, v in p["csr"].items()}
    params = params_from_dict({"seed": args.seed, "dataset": {"layout": "typed", "synthetic": {
        "num_nodes": papers, "num_authors": authors, "num_venues": venues,
        "avg_degree": args.avg_degree, "authors_per_paper": args.authors_per_paper,
        "num_features": args.features, "num_classes": 10}}})
    graph = prepared_graph(params)
    x, csr = dict(graph.x), dict(graph.csr)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save({"x": x, "csr": {e: (c.indptr, c.indices) for e, c in csr.items()}}, tmp)
        os.replace(tmp, path)
    return x, csr


def describe(x, csr) -> str:
    nodes = ", ".join(f"{v.shape[0]:,} {t}" for t, v in x.items())
    edges = ", ".join(f"{c.num_edges:,} {e[1]}" for e, c in csr.items())
    return f"{nodes}; {edges}"


def _rate(seeds: int, seconds: float, nodes: float, edges: float, batches: int) -> dict:
    return {"seeds_per_s": seeds / seconds, "seconds": seconds, "batches": batches,
            "nodes_per_batch": nodes / batches, "edges_per_batch": edges / batches}


def _inputs(seeds: torch.Tensor) -> NodeSamplerInput:
    return NodeSamplerInput(input_id=None, node=seeds, input_type="paper")


def time_sampler(sampler, batches: list[torch.Tensor]) -> dict:
    sampler.sample_from_nodes(_inputs(batches[0]))  # warm-up (allocations)
    nodes = edges = 0
    start = time.perf_counter()
    for seeds in batches:
        out = sampler.sample_from_nodes(_inputs(seeds))
        nodes += sum(v.numel() for v in out.node.values())
        edges += sum(v.numel() for v in out.row.values())
    return _rate(sum(b.numel() for b in batches), time.perf_counter() - start, nodes, edges,
                 len(batches))


def time_loader(loader) -> dict:
    nodes = edges = seeds = 0
    start = time.perf_counter()
    for batch in loader:
        nodes += batch.num_nodes
        edges += batch.num_edges
        seeds += batch["paper"].batch_size
    return _rate(seeds, time.perf_counter() - start, nodes, edges, len(loader))


def check_full_fanout(data: HeteroData, ours_cls, seeds: torch.Tensor, hops: int) -> dict:
    """Both samplers at fan-out -1 from ``seeds``: node sets per type and edge sets (data edge
    ids) per edge type must be equal. Returns the counts compared."""
    from torch_geometric.loader import NeighborLoader

    ours = NodeLoader(data, node_sampler=ours_cls.from_hetero_data(data, [-1] * hops, seed=0),
                      input_nodes=("paper", seeds), batch_size=seeds.numel())
    peer = NeighborLoader(data, num_neighbors=[-1] * hops, input_nodes=("paper", seeds),
                          batch_size=seeds.numel())
    a, b = next(iter(ours)), next(iter(peer))
    counts = {}
    for t in data.node_types:
        same = torch.equal(a[t].n_id.sort().values, b[t].n_id.sort().values)
        if not same:
            raise AssertionError(f"node type {t}: {a[t].num_nodes} vs {b[t].num_nodes} nodes")
        counts[t] = a[t].num_nodes
    for e in data.edge_types:
        same = torch.equal(a[e].e_id.sort().values, b[e].e_id.sort().values)
        if not same:
            raise AssertionError(f"edge type {e}: {a[e].num_edges} vs {b[e].num_edges} edges")
        counts["__".join(e)] = a[e].num_edges
    assert torch.equal(a["paper"].n_id[:seeds.numel()], b["paper"].n_id[:seeds.numel()])
    return counts


def main(argv=None) -> dict:
    parser = build_args(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    parser.add_argument("--fanout", default="15,10",
                        help="comma-separated fan-outs per hop, the same for every edge type")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seeds", type=int, default=51_200, help="seeds timed per row")
    parser.add_argument("--peer-seeds", type=int, default=None,
                        help="seeds the PyG rows time (the first whole batches of --seeds)")
    parser.add_argument("--variant-batches", type=int, default=10)
    parser.add_argument("--check", action="store_true",
                        help="also compare both samplers at fan-out -1 (needs the peer)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = add_tree_args(parser).parse_args(argv)
    if args.trees:  # this bench once per tree and round, in their own processes
        return compare_trees("bench.hetero_sampler", sys.argv[1:] if argv is None else list(argv), args.trees,
                             args.rounds, args.clock, args.json)
    torch.set_num_threads(args.threads)
    fanout = [int(k) for k in args.fanout.split(",")]
    print_machine()
    started = time.perf_counter()
    x, csr = load_typed_graph(args)
    print(f"# graph: {describe(x, csr)}; built/loaded in {time.perf_counter() - started:.1f} s")
    print(f"# fan-out {fanout} per edge type, batch {args.batch_size}, {args.seeds:,} paper "
          "seeds per timed row")
    num_papers = x["paper"].shape[0]
    order = torch.randperm(num_papers, generator=torch.Generator().manual_seed(args.seed))
    seeds = order[:args.seeds]
    batches = list(seeds.split(args.batch_size))
    data = HeteroData()
    for t, v in x.items():  # clone: a --cache graph is memory-mapped
        data[t].x = v.clone()
    for e, c in csr.items():  # CSR order: PyG's CSC conversion finds it sorted already
        data[e].edge_index = c.edge_index()
    results: dict[str, dict] = {}

    def report(name: str, row: dict) -> None:
        results[name] = row
        print(f"{name:36s} {row['seeds_per_s']:9,.0f} seeds/s  {row['seconds']:7.2f} s  "
              f"{row['nodes_per_batch']:9,.0f} nodes/batch  {row['edges_per_batch']:9,.0f} "
              f"edges/batch  {row['batches']} batches", flush=True)

    started = time.perf_counter()
    ours = HeteroNeighborSampler.from_hetero_data(data, fanout, seed=0)
    print(f"# gnnpipe sampler built in {time.perf_counter() - started:.1f} s")
    report("gnnpipe sampler", time_sampler(ours, batches))
    report("gnnpipe NodeLoader (+x gather)",
           time_loader(NodeLoader(data, node_sampler=ours, input_nodes=("paper", seeds),
                                  batch_size=args.batch_size)))
    peer_lib = ("pyg-lib" if torch_geometric.typing.WITH_PYG_LIB else
                "torch-sparse" if torch_geometric.typing.WITH_TORCH_SPARSE else None)
    pairs, check = [], None
    if peer_lib is not None:
        from torch_geometric.loader import NeighborLoader

        peer_batches = batches
        if args.peer_seeds is not None:
            peer_batches = batches[:max(1, -(-args.peer_seeds // args.batch_size))]
            print(f"# PyG rows: the first {len(peer_batches)} of the {len(batches)} batches")
        peer_seeds = torch.cat(peer_batches)
        started = time.perf_counter()
        loader = NeighborLoader(data, num_neighbors=fanout, input_nodes=("paper", peer_seeds),
                                batch_size=args.batch_size)
        print(f"# PyG sampler built in {time.perf_counter() - started:.1f} s")
        report(f"PyG sampler ({peer_lib})", time_sampler(loader.node_sampler, peer_batches))
        report(f"PyG NeighborLoader ({peer_lib})", time_loader(loader))
        pairs = [("gnnpipe sampler", f"PyG sampler ({peer_lib})"),
                 ("gnnpipe NodeLoader (+x gather)", f"PyG NeighborLoader ({peer_lib})")]
        if args.check:
            check = check_full_fanout(data, HeteroNeighborSampler, seeds[:4], len(fanout))
            print(f"# fan-out -1 check on 4 seeds: equal node and edge sets {check}")
    else:
        print("# torch-sparse and pyg-lib are not installed: no peer rows")
    weights = torch.Generator().manual_seed(1)
    for e in data.edge_types:  # for the weighted row (PyG reads weight_attr off each edge type)
        data[e].bench_weight = torch.rand(data[e].edge_index.size(1), generator=weights)
    for name, kwargs in VARIANTS.items():
        sampler = HeteroNeighborSampler.from_hetero_data(data, fanout, seed=0, **kwargs)
        report(f"gnnpipe sampler, {name}", time_sampler(sampler, batches[:args.variant_batches]))
    ratios = {f"{a} / {b}": results[a]["seeds_per_s"] / results[b]["seeds_per_s"] for a, b in pairs}
    for name, ratio in ratios.items():
        print(f"ratio {name}: {ratio:.1f}x")
    summary = {"machine": machine(), "graph": describe(x, csr), "fanout": fanout,
               "batch_size": args.batch_size, "threads": args.threads, "peer": peer_lib,
               "peer_seeds": args.peer_seeds, "results": results, "ratios": ratios,
               "check": check}
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
