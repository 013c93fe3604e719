"""Evaluation forward at scale: full-graph vs layer-wise (gnnpipe/training/inference.py), same
graph.

    python -m bench.inference --cache /tmp/benchgraphs                     # 1M nodes, layerwise
    python -m bench.inference --scale 0.3 --modes full layerwise           # both, same graph
    python -m bench.inference --scale 0.3 --modes layerwise --block-edges 500000 2000000

Each (mode, block size) runs in its own subprocess, so each peak RSS (VmHWM) is that method's
alone: the graph is memory-mapped from ``--cache`` (its touched pages count), the model is
freshly initialised from ``--seed`` (the weights do not change the cost), and one eval-mode
forward over every node is timed once. ``added`` is the rise of VmHWM over the RSS just before
the forward (graph and model resident). The logits of every run are compared with the first.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `gnnpipe` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from bench.common import (PeakMemory, add_graph_args, describe, load_graph, print_machine,
                          rss_mb, run_child)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_graph_args(parser)
    parser.add_argument("--model", choices=["gcn", "sage", "gat"], default="sage")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--modes", nargs="+", choices=["full", "layerwise"],
                        default=["layerwise"])
    parser.add_argument("--block-edges", type=int, nargs="+", default=[2_000_000],
                        help="train.inference.block_edges values for the layerwise runs")
    parser.add_argument("--json", type=Path, default=None, help="write the results here too")
    parser.add_argument("--worker", nargs=3, metavar=("MODE", "BLOCK_EDGES", "OUT"),
                        help=argparse.SUPPRESS)  # internal: one measured run
    return parser.parse_args(argv)


def _worker(args: argparse.Namespace) -> None:
    from gnnpipe.config import TrainParams
    from gnnpipe.training.inference import LayerwiseInference, csr_view
    from gnnpipe.training.models import build_model

    mode, block_edges, out = args.worker[0], int(args.worker[1]), Path(args.worker[2])
    graph = load_graph(args)
    cfg = TrainParams(model=args.model, hidden=args.hidden, num_layers=args.layers)
    torch.manual_seed(args.seed)
    model = build_model(args.model, graph.x.shape[1], graph.num_classes, cfg).eval()
    if mode == "full":
        edge_index = graph.csr.edge_index()  # what build_inputs holds for the full forward

        def forward():
            with torch.no_grad():
                return model(graph.x, edge_index)
    else:
        engine = LayerwiseInference(*csr_view(graph.csr), block_edges)

        def forward():
            return engine(model, graph.x)
    before = rss_mb()
    with PeakMemory() as mem:
        start = time.perf_counter()
        logits = forward()
        seconds = time.perf_counter() - start
    torch.save(logits, out.with_suffix(".pt"))
    out.write_text(json.dumps({"mode": mode, "block_edges": block_edges if mode != "full" else None,
                               "seconds": round(seconds, 2), "rss_before_mb": round(before),
                               "peak_rss_mb": round(mem.peak_mb), "added_mb": round(mem.added_mb),
                               "graph": describe(graph)}))


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        return _worker(args)
    print_machine()
    print(describe(load_graph(args)))  # builds the --cache file once, before the subprocesses
    runs = [("full", 0)] if "full" in args.modes else []
    runs += [("layerwise", b) for b in args.block_edges] if "layerwise" in args.modes else []
    graph_argv = list(argv if argv is not None else sys.argv[1:])
    results, first = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for mode, block_edges in runs:
            out = Path(tmp) / f"{mode}_{block_edges}.json"
            cmd = [sys.executable, "-m", "bench.inference", *graph_argv,
                   "--worker", mode, str(block_edges), str(out)]
            row, first = run_child(cmd, out, first)
            if "exit_code" in row:
                print(f"{mode} (block_edges {block_edges}): failed, exit code "
                      f"{row['exit_code']} (killed for memory: -9)")
                results.append({"mode": mode, "block_edges": block_edges, **row})
                continue
            results.append(row)
            blocks = "-" if row["block_edges"] is None else f"{row['block_edges']:,}"
            print(f"{mode:9s} block_edges {blocks:>9s}  {row['seconds']:7.2f} s"
                  f"  peak RSS {row['peak_rss_mb']:6d} MiB (+{row['added_mb']} over "
                  f"{row['rss_before_mb']})  max |diff| {row['max_abs_diff_vs_first']:.2e}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
