"""Epoch time of the train loop at 1 and 2 intra-op threads, idle and beside busy loops.

    python bench/threads.py [--busy N] [--nodes N]

Full-graph and neighbor-sampled SAGE on a synthetic graph; prints the median train seconds per
epoch (fit's perf_history) for each thread count, with the load average at the end of the run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench`, `gnnpipe` and `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.common import prepared_graph
from gnnpipe.config import NeighborParams, NodeSplitParams, TrainParams, params_from_dict
from gnnpipe.data.graph import ROLE_CODES
from gnnpipe.io.common import role_codes
from gnnpipe.training.models import build_model
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sampling.builders import neighbor_batches
from tests.split_oracle import split_nodes
from gnnpipe.training.train import build_inputs, fit


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--busy", type=int, default=0, help="busy-loop processes beside the run")
    parser.add_argument("--nodes", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    params = params_from_dict({"dataset": {"synthetic": {"num_nodes": args.nodes}}})
    typed = prepared_graph(params)
    roles = role_codes(split_nodes(typed, NodeSplitParams(), make_rng(0, "split")).roles)
    graph = typed.target_view()
    cfg = TrainParams(epochs=args.epochs, patience=args.epochs)
    inputs = build_inputs(graph.x, message_graphs={p: graph.csr for p in ("train", "val", "test")})
    seeds = torch.from_numpy(np.flatnonzero(roles == ROLE_CODES["train"]))
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        for sampler in ("full", "neighbor"):
            for threads in (1, 2):
                torch.set_num_threads(threads)
                loader = neighbor_batches(graph.x, graph.y, graph.csr, seeds, NeighborParams(),
                                          1, batch_size=1024) if sampler == "neighbor" else None
                result = fit(lambda: build_model("sage", graph.x.shape[1], graph.num_classes,
                                                 cfg), inputs, graph.y, roles, cfg, 0,
                             loader=loader)
                seconds = statistics.median(r["train_seconds"] for r in result.perf_history)
                print(f"{sampler:8s} threads={threads} busy={args.busy} "
                      f"s/epoch={seconds:.3f} load1={os.getloadavg()[0]:.2f}", flush=True)
    finally:
        for proc in busy:
            proc.kill()


if __name__ == "__main__":
    main()
