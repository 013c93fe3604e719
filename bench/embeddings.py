"""Epoch time and memory of GraphSAGE neighbor training with and without learnable node
embeddings (``train.embeddings``), and against a dense-gradient table, same run.

    python -m bench.embeddings --cache DIR --avg-degree 10 --features 64   # 1M nodes
    python -m bench.embeddings --scale 0.1                                  # quick

Rows, each the same GraphSAGE (``build_model("sage")`` with the ``train:`` defaults: hidden 64,
2 layers, fan-out 15/10) over the same ``--batches`` neighbor batches of ``--batch-size`` seeds
(gnnpipe's loader, the train stage's step: ``node_step``, backward, the optimizer's step):

- ``features``: no embeddings (``train.embeddings.dim: 0``), Adam;
- ``sparse``: ``train.embeddings: {dim: --dim}`` (concat): the rows a batch gathers get a sparse
  gradient and ``RowSparseAdam`` steps them (gnnpipe/training/embeddings.py);
- ``dense``: the same table with a dense gradient and plain Adam over it: what a plain
  ``nn.Embedding`` in the model costs (every step reads and writes all N x D rows and both
  Adam moments).

Rows run in ``--rounds`` rounds (odd rounds reversed) so load changes hit all alike; the figure
is each row's mean epoch. Memory: the table (N x D float32), the optimizer state after the
epochs, and the peak RSS the row added above what was resident when it started (Linux VmHWM).
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np
import torch

from bench.common import PeakMemory, add_graph_args, describe, load_graph, print_machine
from gnnpipe.config import TrainParams
from gnnpipe.config.schema import EmbeddingsParams
from gnnpipe.sampling.builders import neighbor_batches
from gnnpipe.training import embeddings
from gnnpipe.training.models import build_model
from gnnpipe.training.train import node_step

ROWS = ("features", "sparse", "dense")


def parse_args(argv=None) -> argparse.Namespace:
    parser = add_graph_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--dim", type=int, default=64, help="embedding width")
    parser.add_argument("--batches", type=int, default=10, help="batches per epoch")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=2, help="epochs per row and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows", default=",".join(ROWS))
    return parser.parse_args(argv)


def build(row: str, graph, dim: int):
    """(model, optimizer) of ``row`` (``ROWS``)."""
    cfg = TrainParams(embeddings=EmbeddingsParams(dim=0 if row == "features" else dim))
    torch.manual_seed(0)
    model = build_model("sage", graph.x.shape[1], graph.num_classes, cfg,
                        num_nodes={"node": graph.num_nodes})
    if row != "dense":
        return model, embeddings.optimizer(model, cfg)
    model.node_inputs.tables[0].embedding.sparse = False  # a dense (N, D) gradient per step
    return model, torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def epoch(model, optimizer, loader) -> tuple[float, float]:
    """Seconds and mean loss of one pass over ``loader``."""
    model.train()
    start, losses = time.perf_counter(), []
    for batch in loader:
        optimizer.zero_grad()
        loss, _ = node_step(model, batch)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return time.perf_counter() - start, float(np.mean(losses))


def state_bytes(optimizer) -> int:
    return sum(v.numel() * v.element_size() for s in optimizer.state.values()
               for v in s.values() if isinstance(v, torch.Tensor))


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    print_machine()
    graph = load_graph(args)
    print(f"# {describe(graph)}; {args.batches} batches x {args.batch_size} seeds, "
          f"dim {args.dim}, {args.threads} thread(s)")
    seeds = torch.from_numpy(np.random.default_rng(0).choice(
        graph.num_nodes, args.batches * args.batch_size, replace=False))
    loader = neighbor_batches(graph.x, graph.y, graph.csr, seeds, TrainParams().neighbor, 0,
                              batch_size=args.batch_size)
    rows = args.rows.split(",")
    times: dict[str, list[float]] = {r: [] for r in rows}
    facts: dict[str, dict] = {}
    for round_ in range(args.rounds):
        for row in (rows if round_ % 2 == 0 else rows[::-1]):
            gc.collect()
            with PeakMemory() as memory:
                model, optimizer = build(row, graph, args.dim)
                epoch(model, optimizer, [next(iter(loader))])  # warm-up: allocations
                runs = [epoch(model, optimizer, loader) for _ in range(args.epochs)]
            times[row] += [seconds for seconds, _ in runs]
            table = embeddings.tables(model)
            facts[row] = {"loss": runs[-1][1], "added_mb": memory.added_mb,
                          "table_mb": sum(t.embedding.weight.numel() * 4
                                          for t in table.values()) / 2**20,
                          "state_mb": state_bytes(optimizer) / 2**20,
                          "untrained": embeddings.untrained_rows(model)}
            del model, optimizer
    base = np.mean(times[rows[0]])
    print(f"\n| row | epoch s (mean, best) | vs {rows[0]} | table MiB | optimizer state MiB "
          f"| peak RSS added MiB | last loss | untrained rows |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        f = facts[row]
        print(f"| {row} | {np.mean(times[row]):.3f}, {min(times[row]):.3f} | "
              f"{np.mean(times[row]) / base:.2f}x | {f['table_mb']:.0f} | {f['state_mb']:.0f} | "
              f"{f['added_mb']:.0f} | {f['loss']:.4f} | {f['untrained']} |")


if __name__ == "__main__":
    main()
