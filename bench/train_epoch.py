"""Epoch time of GraphSAGE mini-batch training: gnnpipe's train path vs PyG's recipe, same run.

    python -m bench.train_epoch --cache /tmp/gnnpipe-bench    # 1M nodes, 20,480 seeds per epoch
    python -m bench.train_epoch --scale 0.2 --seeds 10240     # quick

Every row trains the same model (PyG's ``GraphSAGE`` as ``gnnpipe.models.build_model("sage")``
builds it from the ``train:`` defaults: hidden 64, 2 layers, dropout 0.5, Adam lr 0.01, weight
decay 5e-4) on the same graph (bench/common.py), the same fan-out and batch size, and the same
``--seeds`` train seeds per epoch (a fixed random subset: a full epoch over 1M seeds would take an
hour on 2 cores, and the per-seed cost does not depend on how many seeds an epoch has):

- ``gnnpipe fit``: what ``train.sampler: neighbor`` runs: ``gnnpipe.train.fit`` over
  ``gnnpipe.sampling.neighbor_loader`` (gnnpipe's CSR sampler in PyG's ``NodeLoader``). Its epoch
  time is fit's own ``train_seconds`` (``perf_history``), which excludes evaluation. fit's
  per-epoch evaluation is stubbed out here (``NoEvaluation``: constant logits, fixed epoch
  count): the stage's full-graph forward over 1M nodes would cost more than the epochs measured.
- ``PyG recipe (torch-sparse)``: the loop of PyG's scaling docs: ``NeighborLoader(data,
  num_neighbors, batch_size, input_nodes, shuffle=True)``, then per batch
  ``model(batch.x, batch.edge_index)[:batch.batch_size]``, cross-entropy on the seeds, backward,
  step. Runs when torch-sparse or pyg-lib is importable (else the row says why not).
- ``PyG recipe loop on gnnpipe's sampler``: the same plain loop over gnnpipe's ``NodeLoader``:
  separates what the sampler gains from what ``fit`` adds. For both plain loops the epoch is
  also split into time waiting for the next batch (sampling + gathering ``x``/``y``) and time
  in the training step.
- ``gnnpipe's sampler + trim_to_layer``: the same loop, with the per-hop node and edge counts
  gnnpipe's sampler returns passed to the model (``num_sampled_nodes_per_hop`` /
  ``num_sampled_edges_per_hop``, PyG's hierarchical neighbourhood sampling): layer ``l`` only
  computes the nodes that later layers still need. Not what ``fit`` does (yet); torch-sparse's
  sampler returns no per-hop counts, so the peer cannot do this.

Rows run in rounds (``--rounds``), each round every row for ``--epochs`` epochs, so load changes on
a shared machine hit all rows alike; the figure is the best epoch of each row (``mean`` too).
``loss`` is the mean train loss of the epoch: the rows train the same model alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `gnnpipe` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
import torch.nn.functional as F
import torch_geometric.typing
from torch_geometric.data import Data

from bench.common import add_graph_args, describe, load_graph, machine, print_machine
from gnnpipe.config import CheckpointParams, NeighborParams, TrainParams
from gnnpipe.models import build_model
from gnnpipe.sampling import neighbor_loader
from gnnpipe.train import fit


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_graph_args(parser)
    parser.add_argument("--fanout", default="15,10", help="comma-separated, one per layer")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seeds", type=int, default=20_480, help="train seeds per epoch")
    parser.add_argument("--val", type=int, default=2048,
                        help="val nodes in the split fit gets (scored by NoEvaluation only)")
    parser.add_argument("--epochs", type=int, default=2, help="epochs per row and round")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    return parser.parse_args(argv)


def peer_library() -> str | None:
    """What PyG's ``NeighborLoader`` samples with here, or None when it cannot run."""
    if torch_geometric.typing.WITH_PYG_LIB:
        return "pyg-lib"
    if torch_geometric.typing.WITH_TORCH_SPARSE:
        return "torch-sparse"
    return None


class NoEvaluation:
    """fit's ``Evaluator`` that scores nothing: zero logits for the split nodes, instantly."""

    def __init__(self, node_id: torch.Tensor, num_classes: int):
        self.node_id, self.num_classes = node_id, num_classes

    def logits(self, model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        return self.node_id, torch.zeros(self.node_id.numel(), self.num_classes)


def plain_epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader,
                trim: bool = False) -> dict:
    """One epoch of the PyG docs' loop; seconds split into waiting for batches and stepping.
    ``trim`` passes the batch's per-hop counts so PyG trims each layer's input."""
    model.train()
    wait = step = loss_sum = 0.0
    seeds = nodes = batches = 0
    tick = time.perf_counter()
    for batch in loader:
        got = time.perf_counter()
        wait += got - tick
        optimizer.zero_grad()
        kwargs = {}
        if trim:
            kwargs = {"num_sampled_nodes_per_hop": batch.num_sampled_nodes,
                      "num_sampled_edges_per_hop": batch.num_sampled_edges}
        out = model(batch.x, batch.edge_index, **kwargs)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size])
        loss.backward()
        optimizer.step()
        tick = time.perf_counter()
        step += tick - got
        loss_sum += float(loss.detach()) * batch.batch_size
        seeds += batch.batch_size
        nodes += batch.num_nodes
        batches += 1
    return {"seconds": wait + step, "wait_seconds": wait, "step_seconds": step, "seeds": seeds,
            "loss": loss_sum / max(seeds, 1),
            "nodes_per_batch": nodes / max(batches, 1), "batches": batches}


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    fanout = tuple(int(k) for k in args.fanout.split(","))
    cfg = TrainParams(model="sage", sampler="neighbor", neighbor=NeighborParams(fanout),
                      num_layers=len(fanout),  # one hop per layer: trim_to_layer needs it
                      batch_size=args.batch_size, epochs=args.epochs, patience=args.epochs + 1,
                      checkpoint=CheckpointParams(every=0))
    print_machine()
    started = time.perf_counter()
    graph = load_graph(args)
    print(f"# graph: {describe(graph)}; built/loaded in {time.perf_counter() - started:.1f} s")
    # clone: a --cache graph is memory-mapped, and first touches would count as epoch time
    x, y = graph.x.clone(), graph.y.long().clone()
    edge_index = graph.csr.edge_index()
    n, in_dim, num_classes = graph.num_nodes, x.shape[1], graph.num_classes
    order = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed))
    train_idx = order[:args.seeds]
    roles = np.full(n, "none", dtype=object)
    roles[train_idx.numpy()] = "train"
    roles[order[args.seeds:args.seeds + args.val].numpy()] = "val"
    roles = roles.astype(str)
    print(f"# GraphSAGE hidden {cfg.hidden}, {cfg.num_layers} layers; fan-out {list(fanout)}, "
          f"batch {cfg.batch_size}, {train_idx.numel():,} train seeds per epoch (a fixed subset), "
          f"{args.epochs} epoch(s) x {args.rounds} round(s) per row; {args.threads} torch threads")
    peer = peer_library()
    data = Data(x=x, y=y, edge_index=edge_index, num_nodes=n)
    evaluator = NoEvaluation(torch.from_numpy(np.flatnonzero(roles != "none")), num_classes)
    make_model = lambda: build_model("sage", in_dim, num_classes, cfg)  # noqa: E731

    def adam(model):
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    tick = time.perf_counter()
    ours = neighbor_loader(x, y, graph.csr, train_idx, cfg.neighbor, seed=args.seed,
                           batch_size=cfg.batch_size, edge_index=edge_index)
    setup = {"gnnpipe": time.perf_counter() - tick}
    peer_loader = None
    if peer is not None:
        from torch_geometric.loader import NeighborLoader

        tick = time.perf_counter()  # NeighborLoader converts edge_index to CSC here (a sort)
        peer_loader = NeighborLoader(data, num_neighbors=list(fanout), batch_size=cfg.batch_size,
                                     input_nodes=train_idx, shuffle=True)
        setup["peer"] = time.perf_counter() - tick
    print("# loader set-up: " + ", ".join(f"{k} {v:.1f} s" for k, v in setup.items()))

    names = ["gnnpipe fit", f"PyG recipe ({peer})" if peer else "PyG recipe",
             "PyG recipe loop on gnnpipe's sampler", "gnnpipe's sampler + trim_to_layer"]
    epochs: dict[str, list[dict]] = {name: [] for name in names}
    header = (f"{'row':40s} {'epoch s':>8} {'seeds/s':>8} {'wait s':>7} {'step s':>7} "
              f"{'nodes/batch':>11} {'loss':>7}")
    print(header)

    def show(name: str, e: dict) -> None:
        wait = f"{e['wait_seconds']:7.2f}" if "wait_seconds" in e else f"{'-':>7}"
        step = f"{e['step_seconds']:7.2f}" if "step_seconds" in e else f"{'-':>7}"
        nodes = f"{e['nodes_per_batch']:11,.0f}" if "nodes_per_batch" in e else f"{'-':>11}"
        print(f"{name:40s} {e['seconds']:8.2f} {e['seeds'] / e['seconds']:8,.0f} {wait} {step} "
              f"{nodes} {e['loss']:7.4f}", flush=True)

    # warm-up, untimed: one training step per loader (first-call allocations, lazy inits),
    # so the first timed row (fit, round 1) does not pay what the others then skip
    warm = make_model()
    warm_opt = adam(warm)
    for loader in (ours, peer_loader):
        if loader is not None:
            batch = next(iter(loader))
            F.cross_entropy(warm(batch.x, batch.edge_index)[:batch.batch_size],
                            batch.y[:batch.batch_size]).backward()
            warm_opt.step()

    for r in range(args.rounds):
        torch.manual_seed(args.seed + r)
        result = fit(make_model, None, y, roles, cfg, seed=args.seed + r, loader=ours,
                     evaluator=evaluator)
        for row, hist in zip(result.perf_history, result.history):
            e = {"seconds": row["train_seconds"], "seeds": row["seeds"],
                 "batches": row["batches"], "loss": hist["train_loss"]}
            epochs[names[0]].append(e)
            show(names[0], e)
        if peer_loader is not None:
            torch.manual_seed(args.seed + r)
            model = make_model()
            optimizer = adam(model)
            for _ in range(args.epochs):
                e = plain_epoch(model, optimizer, peer_loader)
                epochs[names[1]].append(e)
                show(names[1], e)
        elif r == 0:
            print(f"{names[1]:40s} not run: PyG's NeighborLoader needs torch-sparse or pyg-lib, "
                  "neither is installed")
        torch.manual_seed(args.seed + r)
        model = make_model()
        optimizer = adam(model)
        for _ in range(args.epochs):
            e = plain_epoch(model, optimizer, ours)
            epochs[names[2]].append(e)
            show(names[2], e)
        torch.manual_seed(args.seed + r)
        model = make_model()
        optimizer = adam(model)
        for _ in range(args.epochs):
            e = plain_epoch(model, optimizer, ours, trim=True)
            epochs[names[3]].append(e)
            show(names[3], e)

    results = {}
    for name, rows in epochs.items():
        if not rows:
            continue
        best = min(rows, key=lambda e: e["seconds"])
        results[name] = {"best_epoch_seconds": best["seconds"],
                         "mean_epoch_seconds": statistics.mean(e["seconds"] for e in rows),
                         "best_seeds_per_s": best["seeds"] / best["seconds"], "epochs": rows}
    print()
    for name, row in results.items():
        print(f"{name:40s} best epoch {row['best_epoch_seconds']:7.2f} s  "
              f"mean {row['mean_epoch_seconds']:7.2f} s  {row['best_seeds_per_s']:8,.0f} seeds/s")
    ratios = {}
    if names[1] in results:
        for ours_name in names[0], names[2], names[3]:
            key = f"{names[1]} / {ours_name} (epoch time)"
            ratios[key] = (results[names[1]]["best_epoch_seconds"]
                           / results[ours_name]["best_epoch_seconds"])
            print(f"ratio {key}: {ratios[key]:.2f}x")
    summary = {"machine": machine(), "graph": describe(graph), "fanout": list(fanout),
               "batch_size": cfg.batch_size, "seeds_per_epoch": int(train_idx.numel()),
               "threads": args.threads, "peer": peer or "none", "setup_seconds": setup,
               "results": results, "ratios": ratios}
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2, default=float) + "\n")
    return summary


if __name__ == "__main__":
    main()
