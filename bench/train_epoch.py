"""Epoch time of GraphSAGE mini-batch training: gnnpipe's train path vs PyG's recipe, same run.

    python -m bench.train_epoch --cache /tmp/gnnpipe-bench    # 1M nodes, 20,480 seeds per epoch
    python -m bench.train_epoch --scale 0.2 --seeds 10240     # quick

Every row trains the same model (PyG's ``GraphSAGE`` as ``gnnpipe.models.build_model("sage")``
builds it from the ``train:`` defaults: hidden 64, 2 layers, dropout 0.5, Adam lr 0.01, weight
decay 5e-4) on the same graph (bench/common.py), the same fan-out and batch size, and the same
``--seeds`` train seeds per epoch (a fixed random subset: a full epoch over 1M seeds would take an
hour on 2 cores, and the per-seed cost does not depend on how many seeds an epoch has):

- ``gnnpipe fit``: what ``train.sampler: neighbor`` runs: ``gnnpipe.train.fit`` over
  ``gnnpipe.sampling.neighbor_loader`` (gnnpipe's CSR sampler in PyG's ``NodeLoader``), which
  passes the sampler's per-hop counts to the model (each layer computes only the rows later
  layers read: ``gnnpipe.models.sampled_forward``), with ``train.aggregation`` scatter (the
  default) and csr (a sparse CSR product over target rows). Its epoch time is fit's own
  ``train_seconds`` (``perf_history``), which excludes evaluation. fit's per-epoch evaluation is
  stubbed out here (``NoEvaluation``: constant logits, fixed epoch count): the stage's
  full-graph forward over 1M nodes would cost more than the epochs measured.
- ``PyG recipe (torch-sparse)``: the loop of PyG's scaling docs: ``NeighborLoader(data,
  num_neighbors, batch_size, input_nodes, shuffle=True)``, then per batch
  ``model(batch.x, batch.edge_index)[:batch.batch_size]``, cross-entropy on the seeds, backward,
  step. Runs when torch-sparse or pyg-lib is importable (PyG 2.8 has no sampler without them;
  else the row says why not).
- ``PyG recipe loop on gnnpipe's sampler``: the same plain loop over gnnpipe's ``NodeLoader``
  (untrimmed, scatter): the recipe as it would run with a sampler as fast as gnnpipe's, so
  ``it / fit`` is a lower bound of ``recipe / fit`` (gnnpipe's sampler is the faster one).
- ``... + trim`` and ``... + trim + csr``: the same loop passing the per-hop counts, with
  scatter and with CSR aggregation: what ``fit`` does inside, without ``fit``'s bookkeeping.

Every plain loop splits its epoch into the phases of a step: ``sample`` (the sampler: node ids
and local edges), ``gather`` (PyG's ``filter_fn``: ``x``/``y`` rows of the batch), ``forward``
(model and loss), ``backward`` and ``optimizer`` (Adam's step).

Rows run in rounds (``--rounds``), each round every row for ``--epochs`` epochs (odd rounds in
reverse order), so load changes on a shared machine hit all rows alike; the figure is the best epoch of each row (``mean`` too).
``loss`` is the mean train loss of the epoch: the rows train the same model alike.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `gnnpipe` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.data
import torch_geometric.typing
from torch_geometric.data import Data

from bench.common import add_graph_args, describe, load_graph, machine, print_machine
from gnnpipe.config import CheckpointParams, NeighborParams, TrainParams
from gnnpipe.models import build_model, trim_kwargs
from gnnpipe.sampling import neighbor_loader
from gnnpipe.device import resolve
from gnnpipe.train import LoopOptions, fit


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
    parser.add_argument("--rows", default="all",
                        help="comma-separated row keys to run (fit,fit_csr,peer,plain,trim,"
                             "trim_csr) or all")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"),
                        help="train.device of the fit rows (the plain loops stay on the CPU)")
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


PHASES = ("sample", "gather", "forward", "backward", "optimizer")


def plain_epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader,
                trim: bool = False) -> dict:
    """One epoch of the PyG docs' loop over a ``NodeLoader`` (or ``NeighborLoader``), seconds
    split into ``PHASES``. ``trim`` passes the batch's per-hop counts (``trim_kwargs``)."""
    model.train()
    spent = dict.fromkeys(PHASES, 0.0)
    loss_sum, seeds, nodes, batches = 0.0, 0, 0, 0
    # NodeLoader = DataLoader(collate_fn=sample [+ filter_fn when filter_per_worker]) +
    # filter_fn (gather): sample in the DataLoader, gather here, timed apart
    per_worker, loader.filter_per_worker = loader.filter_per_worker, False
    try:
        samples = torch.utils.data.DataLoader._get_iterator(loader)
        while True:
            ticks = [time.perf_counter()]
            out = next(samples, None)
            if out is None:
                break
            ticks.append(time.perf_counter())
            batch = loader.filter_fn(out)
            ticks.append(time.perf_counter())
            optimizer.zero_grad()
            kwargs = trim_kwargs(model, batch) if trim else {}
            logits = model(batch.x, batch.edge_index, **kwargs)[:batch.batch_size]
            loss = F.cross_entropy(logits, batch.y[:batch.batch_size])
            ticks.append(time.perf_counter())
            loss.backward()
            ticks.append(time.perf_counter())
            optimizer.step()
            ticks.append(time.perf_counter())
            for phase, (a, b) in zip(PHASES, zip(ticks, ticks[1:])):
                spent[phase] += b - a
            loss_sum += float(loss.detach()) * batch.batch_size
            seeds += batch.batch_size
            nodes += batch.num_nodes
            batches += 1
    finally:
        loader.filter_per_worker = per_worker
    return {"seconds": sum(spent.values()), **{f"{k}_seconds": v for k, v in spent.items()},
            "seeds": seeds, "loss": loss_sum / max(seeds, 1),
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
    cfg_csr = dataclasses.replace(cfg, aggregation="csr")

    def make_model(aggregation: str = "scatter"):
        return build_model("sage", in_dim, num_classes, cfg_csr if aggregation == "csr" else cfg)

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

    keys = ["fit", "fit_csr", "peer", "plain", "trim", "trim_csr"]
    names = dict(zip(keys, [
        "gnnpipe fit (trim, scatter)", "gnnpipe fit (trim, csr)",
        f"PyG recipe ({peer})" if peer else "PyG recipe",
        "PyG recipe loop on gnnpipe's sampler", "  ... + trim (scatter)", "  ... + trim + csr"]))
    run = set(keys if args.rows == "all" else args.rows.split(","))
    epochs: dict[str, list[dict]] = {names[k]: [] for k in keys}
    header = (f"{'row':40s} {'epoch s':>8} {'seeds/s':>8} "
              + " ".join(f"{p[:7]:>7}" for p in PHASES) + f" {'nodes/batch':>11} {'loss':>7}")
    print(header)

    def show(name: str, e: dict) -> None:
        split = " ".join(f"{e[f'{p}_seconds']:7.2f}" if f"{p}_seconds" in e else f"{'-':>7}"
                         for p in PHASES)
        nodes = f"{e['nodes_per_batch']:11,.0f}" if "nodes_per_batch" in e else f"{'-':>11}"
        print(f"{name:40s} {e['seconds']:8.2f} {e['seeds'] / e['seconds']:8,.0f} {split} "
              f"{nodes} {e['loss']:7.4f}", flush=True)

    # warm-up, untimed: one training step per loader and aggregation (first-call allocations,
    # lazy inits), so the first timed row does not pay what the others then skip
    for aggregation in ("scatter", "csr"):
        warm = make_model(aggregation)
        warm_opt = adam(warm)
        for loader in (ours, peer_loader):
            if loader is not None:
                batch = next(iter(loader))
                F.cross_entropy(warm(batch.x, batch.edge_index, **trim_kwargs(warm, batch))[
                    :batch.batch_size], batch.y[:batch.batch_size]).backward()
                warm_opt.step()

    def fit_row(key: str, r: int) -> None:
        aggregation = "csr" if key == "fit_csr" else "scatter"
        torch.manual_seed(args.seed + r)
        result = fit(lambda: make_model(aggregation), None, y, roles,
                     cfg_csr if aggregation == "csr" else cfg, seed=args.seed + r,
                     loader=ours, evaluator=evaluator,
                     options=LoopOptions(device=resolve(args.device, key="--device")))
        for row, hist in zip(result.perf_history, result.history):
            e = {"seconds": row["train_seconds"], "seeds": row["seeds"],
                 "batches": row["batches"], "loss": hist["train_loss"]}
            epochs[names[key]].append(e)
            show(names[key], e)

    def loop_row(key: str, r: int) -> None:
        if key == "peer" and peer_loader is None:
            if r == 0:
                print(f"{names['peer']:40s} not run: PyG's NeighborLoader needs torch-sparse or "
                      "pyg-lib, neither is installed")
            return
        torch.manual_seed(args.seed + r)
        model = make_model("csr" if key == "trim_csr" else "scatter")
        optimizer = adam(model)
        for _ in range(args.epochs):
            e = plain_epoch(model, optimizer, peer_loader if key == "peer" else ours,
                            trim=key in ("trim", "trim_csr"))
            epochs[names[key]].append(e)
            show(names[key], e)

    for r in range(args.rounds):
        # odd rounds run the rows in reverse: no row always goes first (after another's garbage)
        for key in keys if r % 2 == 0 else keys[::-1]:
            if key in run:
                (fit_row if key.startswith("fit") else loop_row)(key, r)

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
    baselines = [names[k] for k in ("peer", "plain") if names[k] in results]
    for base in baselines:
        for ours_name in (names[k] for k in ("fit", "fit_csr", "trim", "trim_csr")):
            if ours_name not in results:
                continue
            key = f"{base} / {ours_name.strip()} (mean epoch time)"
            ratios[key] = (results[base]["mean_epoch_seconds"]
                           / results[ours_name]["mean_epoch_seconds"])
            loss = (statistics.mean(e["loss"] for e in results[ours_name]["epochs"])
                    / statistics.mean(e["loss"] for e in results[base]["epochs"]) - 1)
            print(f"ratio {key}: {ratios[key]:.2f}x  (mean train loss {loss:+.1%})")
    print(f"# load average at the end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    summary = {"load_average_end": os.getloadavg(), "machine": machine(), "graph": describe(graph), "fanout": list(fanout),
               "batch_size": cfg.batch_size, "seeds_per_epoch": int(train_idx.numel()),
               "threads": args.threads, "device": args.device, "peer": peer or "none", "setup_seconds": setup,
               "results": results, "ratios": ratios}
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2, default=float) + "\n")
    return summary


if __name__ == "__main__":
    main()
