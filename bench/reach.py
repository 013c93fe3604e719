"""Reach diagnostics at scale: hops to the nearest train node and Balanced Forman curvature on an
edge sample, time and peak memory on the shared bench graph.

    python -m bench.reach --cache DIR                     # 1M nodes, ~20M edges
    python -m bench.reach --scale 0.1 --samples 1000      # quick

Train nodes: a seeded ``--train-fraction`` of the nodes (10%, as ``profiles/scale.yaml``).
``hops_to_train`` runs to ``--max-hops`` (num_layers + 1 shows who sits just past the reach).
Curvature: ``edge_curvature`` with each ``--samples`` size. Peak memory is the rise of VmHWM
above the RSS before each call (graph paged in first); best of ``--repeat`` wall seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench`, `gnnpipe` and `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from bench.common import PeakMemory, add_graph_args, describe, load_graph, print_machine, timed
from gnnpipe.config.schema import CurvatureParams
from gnnpipe.graphops.reach import BEYOND, edge_curvature, hops_to_train
from gnnpipe.io.blocks import temp_folder
from gnnpipe.runtime.rng import make_rng
from tests.graphops.block_files import write_blocks


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_graph_args(parser)
    parser.add_argument("--train-fraction", type=float, default=0.1)
    parser.add_argument("--max-hops", type=int, default=3)
    parser.add_argument("--samples", type=int, nargs="+", default=[1000, 10000, 100000],
                        help="curvature sample sizes (undirected edges)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="write the results here too")
    return parser.parse_args(argv)


def measure(fn, repeat: int) -> tuple[dict, object]:
    """Best wall seconds over ``repeat`` runs, the peak added memory of the first, its result."""
    with PeakMemory() as mem:
        result = fn()
    row = timed(fn, repeat=repeat, warmup=0)
    return {"best_s": round(row["best"], 3), "median_s": round(row["median"], 3),
            "added_mib": round(mem.added_mb, 1)}, result


def main(argv=None) -> dict:
    args = parse_args(argv)
    print_machine()
    graph = load_graph(args)
    csr = graph.csr
    int(csr.indptr.sum() + csr.indices.sum())  # page a memory-mapped cache in: not the call's memory
    print(f"# graph: {describe(graph)}")
    train = make_rng(args.seed, "bench-reach").random(graph.num_nodes) < args.train_fraction
    row, dist = measure(lambda: hops_to_train(csr, train, args.max_hops), args.repeat)
    hist = {str(h): int((dist == h).sum()) for h in range(args.max_hops + 1)}
    hist["beyond"] = int((dist == BEYOND).sum())
    results = {"graph": describe(graph), "hops": {**row, "max_hops": args.max_hops,
                                                  "train_nodes": int(train.sum()), "nodes": hist}}
    print(f"hops_to_train  max_hops {args.max_hops}: {row['best_s']:.3f} s (median "
          f"{row['median_s']:.3f}), +{row['added_mib']:.0f} MiB; nodes per hop {hist}")
    results["curvature"] = []
    for size in args.samples:
        cfg = CurvatureParams(sample_edges=size)
        fn = lambda: edge_curvature(None, folder, csr.num_nodes, cfg,  # noqa: E731
                                    make_rng(args.seed, "bench-curvature"))
        with temp_folder(None, "bench-reach") as folder:  # the block files analyze reads
            write_blocks(folder, csr)
            row, out = measure(fn, args.repeat)
        q = out["quantiles"]
        results["curvature"].append({**row, "sample": out["sample"], "quantiles": q,
                                     "fraction_negative": out["fraction_negative"],
                                     "most_negative": out["most_negative"][:3]})
        print(f"edge_curvature {size:>7,} edges: {row['best_s']:.3f} s (median "
              f"{row['median_s']:.3f}), +{row['added_mib']:.0f} MiB; median {q['q50']:.3f}, "
              f"q01 {q['q01']:.3f}, min {q['q00']:.3f}, negative {out['fraction_negative']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
