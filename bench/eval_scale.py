"""Peak memory of evaluation, full-graph vs layer-wise, in the three places beyond the node task's
``fit`` that honour ``train.inference``: the link task's scoring, the Lightning engine's
evaluation step and shard-mode evaluation.

    python -m bench.eval_scale --scale 0.2 --cache /tmp/benchgraphs          # 200k nodes, all
    python -m bench.eval_scale --scale 0.2 --paths link --modes full layerwise

Each (path, mode) runs in its own subprocess, so each VmHWM is that evaluation's alone: the graph
is memory-mapped from ``--cache``, the model freshly initialised from ``--seed``, every input
(phase inputs, pairs, data module, shards) is built before the measured call, and the call is
timed once. ``added`` is the rise of VmHWM over the RSS just before the call.

* ``link``: ``gnnpipe.training.link_train.score_phase`` of ``--pairs`` positives with 20 fixed
  negatives each on the whole graph (the encoder's embeddings, then dot products).
* ``lightning``: ``NodeClassifier.predict_step`` on the data module's test batch (every node).
* ``shard``: ``ShardEvaluator.logits`` of one rank of two (part 0 of a 2-part BFS partition,
  2-hop halo) over its shard.

The outputs of the two modes of a path are compared (max |diff|).
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

import numpy as np
import torch

from bench.common import (PeakMemory, add_graph_args, describe, load_graph, print_machine,
                          rss_mb, run_child)

PATHS = ("link", "lightning", "shard")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_graph_args(parser)
    parser.add_argument("--model", choices=["gcn", "sage", "gat"], default="sage")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--modes", nargs="+", choices=["full", "layerwise"],
                        default=["full", "layerwise"])
    parser.add_argument("--block-edges", type=int, default=2_000_000,
                        help="train.inference.block_edges of the layerwise runs")
    parser.add_argument("--pairs", type=int, default=10_000, help="link: positives scored")
    parser.add_argument("--json", type=Path, default=None, help="write the results here too")
    parser.add_argument("--worker", nargs=3, metavar=("PATH", "MODE", "OUT"),
                        help=argparse.SUPPRESS)  # internal: one measured run
    return parser.parse_args(argv)


def _setup(args: argparse.Namespace, path: str, mode: str):
    """Everything the measured call needs, built outside the measurement; the call."""
    from gnnpipe.config import InferenceParams, TrainParams
    from gnnpipe.training.models import build_model
    from gnnpipe.data.graph import ROLE_CODES
    from gnnpipe.io.common import PHASES
    from gnnpipe.training.train import build_inputs

    graph = load_graph(args)
    cfg = TrainParams(model=args.model, hidden=args.hidden, num_layers=args.layers,
                      inference=InferenceParams(mode=mode, block_edges=args.block_edges))
    torch.manual_seed(args.seed)
    out_dim = args.hidden if path == "link" else graph.num_classes
    model = build_model(args.model, graph.x.shape[1], out_dim, cfg).eval()
    if path == "link":
        from gnnpipe.training.link_train import score_phase

        inputs = build_inputs(graph.x, message_graphs={p: graph.csr for p in PHASES}, cfg=cfg)
        rng = torch.Generator().manual_seed(args.seed)
        heads = torch.randint(graph.num_nodes, (2, args.pairs), generator=rng)
        negatives = torch.randint(graph.num_nodes, (args.pairs, 20), generator=rng)
        return lambda: torch.cat([s.reshape(-1) for s in score_phase(
            model, inputs["test"], heads, negatives)])
    if path == "lightning":
        from gnnpipe.training.lightning import NodeClassifier, NodeDataModule

        inputs = build_inputs(graph.x, message_graphs={p: graph.csr for p in PHASES}, cfg=cfg)
        roles = np.full(graph.num_nodes, ROLE_CODES["test"], dtype=np.int8)
        roles[:3] = [ROLE_CODES["train"], ROLE_CODES["val"], ROLE_CODES["train"]]
        module = NodeClassifier(model, cfg, args.seed)
        batch = NodeDataModule(inputs, graph.y, roles, cfg).phase_batches["test"]
        return torch.no_grad()(lambda: module.predict_step(batch, 0))  # as Trainer.predict
    from gnnpipe.config import PartitionParams
    from gnnpipe import io
    from gnnpipe.graphops.partition import assign_parts, write_shard
    from tests.graphops.shard_oracle import csr_rows
    from gnnpipe.runtime.rng import make_rng
    from gnnpipe.training.sharding import NodeRows, ShardEvaluator

    parts = assign_parts(graph.csr, PartitionParams(num_parts=2, method="bfs"),
                         make_rng(args.seed, "partition"))
    with tempfile.TemporaryDirectory(prefix="bench-shard-") as out:  # as the stage writes it
        write_shard(csr_rows(graph.csr), parts == 0, Path(out), 0, 2, graph.num_nodes, 2)
        io.write_json(Path(out) / "meta.json", {"num_parts": 2, "halo_hops": 2,
                                                "num_nodes": graph.num_nodes})
        shard = io.read_partition_shard(Path(out), 0)
    ids = shard.node_id.sort().values  # the rank's rows, as shard_setup reads them
    rows = NodeRows(graph.x[ids], graph.y[ids], ids)
    evaluator = ShardEvaluator([shard], rows, torch.zeros(ids.numel(), dtype=torch.int8), cfg)
    return lambda: evaluator.logits(model)[1]


def _worker(args: argparse.Namespace) -> None:
    path, mode, out = args.worker[0], args.worker[1], Path(args.worker[2])
    torch.set_num_threads(1)
    call = _setup(args, path, mode)
    before = rss_mb()
    with PeakMemory() as mem:
        start = time.perf_counter()
        result = call()
        seconds = time.perf_counter() - start
    torch.save(result, out.with_suffix(".pt"))
    out.write_text(json.dumps({"path": path, "mode": mode, "seconds": round(seconds, 2),
                               "rss_before_mb": round(before), "peak_rss_mb": round(mem.peak_mb),
                               "added_mb": round(mem.added_mb)}))


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        return _worker(args)
    print_machine()
    print(describe(load_graph(args)))  # builds the --cache file once, before the subprocesses
    print(f"{args.model}, {args.layers} layers, hidden {args.hidden}, "
          f"block_edges {args.block_edges:,}, one thread")
    argv = list(argv if argv is not None else sys.argv[1:])
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.paths:
            first = None
            for mode in args.modes:
                out = Path(tmp) / f"{path}_{mode}.json"
                cmd = [sys.executable, "-m", "bench.eval_scale", *argv, "--worker", path, mode,
                       str(out)]
                row, first = run_child(cmd, out, first)
                if "exit_code" in row:
                    print(f"{path} {mode}: failed, exit code {row['exit_code']} (killed for "
                          "memory: -9)")
                    results.append({"path": path, "mode": mode, **row})
                    continue
                results.append(row)
                print(f"{path:9s} {mode:9s} {row['seconds']:7.2f} s  peak RSS "
                      f"{row['peak_rss_mb']:6d} MiB (+{row['added_mb']} over "
                      f"{row['rss_before_mb']})  max |diff| {row['max_abs_diff_vs_first']:.2e}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
