"""Epoch time of GraphSAGE mini-batch training: gnnpipe's train path vs PyG's recipe, same run.

    python -m bench.train_epoch --cache /tmp/gnnpipe-bench    # 1M nodes, 20,480 seeds per epoch
    python -m bench.train_epoch --scale 0.2 --seeds 10240     # quick

Every row trains the same model (PyG's ``GraphSAGE`` as
``gnnpipe.training.models.build_model("sage")`` builds it from the ``train:`` defaults: hidden 64, 2
layers, dropout 0.5, Adam lr 0.01, weight decay 5e-4) on the same graph (bench/common.py), the same
fan-out and batch size, and the same
``--seeds`` train seeds per epoch (a fixed random subset: a full epoch over 1M seeds would take an
hour on 2 cores, and the per-seed cost does not depend on how many seeds an epoch has):

- ``gnnpipe fit``: what ``train.sampler: neighbor`` runs: ``gnnpipe.training.train.fit`` over
  ``gnnpipe.sampling.neighbor_loader`` (gnnpipe's CSR sampler in PyG's ``NodeLoader``), which
  passes the sampler's per-hop counts to the model (each layer computes only the rows later
  layers read: ``gnnpipe.training.models.sampled_forward``), with ``train.aggregation`` csr (a
  sparse CSR product over target rows: what the default ``auto`` runs for sage) and scatter. Its epoch time is fit's own
  ``train_seconds`` (``perf_history``), which excludes evaluation. fit's per-epoch evaluation is
  stubbed out here (``NoEvaluation``: constant logits, fixed epoch count): the stage's
  full-graph forward over 1M nodes would cost more than the epochs measured.
- ``PyG recipe (torch-sparse)``: the loop of PyG's scaling docs: ``NeighborLoader(data,
  num_neighbors, batch_size, input_nodes, shuffle=True)``, then per batch
  ``model(batch.x, batch.edge_index)[:batch.batch_size]``, cross-entropy on the seeds, backward,
  step. Runs when torch-sparse or pyg-lib is importable (PyG 2.8 has no sampler without them;
  else the row says why not).
- ``PyG best (torch-sparse, trim, adj_t)``: PyG's fastest CPU configuration without pyg-lib
  (which is not on PyPI): the same ``NeighborLoader`` on torch-sparse, each batch converted to a
  ``SparseTensor`` ``adj_t`` (``transform=T.ToSparseTensor()``: SAGEConv then aggregates by
  torch-sparse's fused ``spmm`` mean, no per-edge messages) and PyG's own ``GraphSAGE`` forward
  trimmed per layer (``num_sampled_nodes_per_hop`` / ``num_sampled_edges_per_hop``:
  ``trim_to_layer``). torch-sparse's sampler returns no per-hop counts (pyg-lib's does), so
  ``transform_sampler_output`` reads them off its breadth-first output (``hop_counts``: a few
  tensor ops per batch, timed with the sampler). The model is PyG's ``GraphSAGE`` holding the
  same initial weights as every other row. Runs when torch-sparse is importable.
- ``DGL (NeighborSampler, SAGEConv)`` (``--dgl PYTHON``, DGL's venv from bench/build_dgl.sh:
  dgl 2.1.0 on torch 2.2.1): bench/dgl_epoch.py in that venv, one subprocess per round, reading
  the graph (CSR as DGL's CSC), features, labels, seeds, the probe batch and the round's initial
  weights from plain numpy files (``write_dgl_inputs``): DGL's own recipe,
  ``dgl.dataloading.NeighborSampler`` (fan-out reversed: DGL lists it input layer first) with
  ``prefetch_node_feats`` in DGL's ``DataLoader``, ``SAGEConv('mean')`` layers holding gnnpipe's
  initial weights (``dgl_epoch.dgl_state``: PyG's ``lin_l`` -> ``fc_neigh`` with its bias on
  ``fc_self``, ``lin_r`` -> ``fc_self``), Adam. Its initial probe loss is printed beside
  gnnpipe's (equal to 6 digits when the mapping holds). DGL samples each layer's block from
  that layer's targets, the seeds included, so the seeds' neighbours are drawn again for the
  inner layer (~1.7% more nodes per batch at 1M nodes); its ``sample`` is the loader's whole
  call (DGL slices x and y inside it), ``forward`` model and loss, ``backward``
  ``loss.backward()``. ``OMP_NUM_THREADS`` = ``--threads`` for DGL's sampler.
- ``PyG recipe loop on gnnpipe's sampler``: the same plain loop over gnnpipe's ``NodeLoader``
  (untrimmed, scatter): the recipe as it would run with a sampler as fast as gnnpipe's, so
  ``it / fit`` is a lower bound of ``recipe / fit`` (gnnpipe's sampler is the faster one).
- ``... + trim`` and ``... + trim + csr``: the same loop passing the per-hop counts, with
  scatter and with CSR aggregation: the bare loop a user could write on gnnpipe's sampler, doing
  what ``fit`` does inside without ``fit``'s bookkeeping. ``... + trim (scatter) / gnnpipe fit
  (trim, scatter)`` (and the csr pair) is the goal ratio: at least 1.0x, fit no slower.

Every row splits its epoch into the phases of a step (bench/epoch_steps.py), timed by one
instrument (``StepClock``: a timed copy of the loader, hooks on the model and on the optimizer's
step) over one span, the whole epoch (fit's ``train_seconds``; for a loop row, from
``model.train()`` through its last step's loss sum): ``sample`` (the sampler: node ids and
local edges), ``gather`` (PyG's ``filter_fn``: ``x``/``y`` rows of the batch), ``assemble``
(fit's ``LossBatch`` adapter; none in a loop row), ``forward`` (model, loss and the loss's own
backward, up to the gradient of the model's output), ``backward`` (the model's), ``optimizer``
(Adam's step) and ``other``, the rest: zero_grad, the trim keywords, the loss sums, the
loader's iterator, and in fit its per-epoch reseeding and ``set_epoch``.

``--ops`` first counts, not times, what one epoch of ``fit`` and of the bare loop (trim,
scatter) execute (``Tally``): aten operator calls (``torch.profiler``) and Python function
calls (``cProfile``) from the first batch to the last loss sum, which load does not change.
The warm-up (a step per loader and aggregation, and a one-batch ``fit`` per aggregation) is
untimed.

Rows run in rounds (``--rounds``), each round every row for ``--epochs`` epochs (odd rounds in
reverse order), so load changes on a shared machine hit all rows alike; the figure is the mean
epoch of each row (the best too), and each ratio also has the median of its epoch-by-epoch
ratios (``paired``: epoch i of both rows ran in the same round, so a load change between
rounds cancels out; ``--epochs 1`` with many rounds pairs neighbours). ``loss`` is the mean
train loss of the epoch's batches; ``probe`` the train loss *after* the epoch: cross-entropy in
eval mode on one fixed sampled batch of 2,048 train seeds (the same subgraph for every row), so
rows compare on equal input.
``load1`` is the 1-minute load average at the end of each epoch.

fit beside DGL (2026-12-07, BENCHMARKS.md, issue 43 item 4; ``--threads 1``, 1M nodes, 20
batches, ``--dgl .venv-dgl/bin/python``): DGL / ``fit`` (scatter, the default) 0.98x mean
(paired median 1.05x) at load 2.6-3.2 over 6 rounds, 1.00x (1.08x) at load 3.8-5.8 over 5;
DGL / ``fit`` (csr) 1.38x (1.51x) and 1.56x (1.55x). The issue's goal, fit >= 2x DGL, is not
met: DGL's sampler with slicing is as fast as gnnpipe's sample + gather (1.38 / 1.55 s), its
forward beats the scatter one (1.14 / 1.83 s), its backward is slower (1.06 / 0.24 s).

fit beside the bare loop (2026-12-06, BENCHMARKS.md, issue 43 item 5): one epoch of ``fit``
runs exactly the bare loop's aten ops (``--ops``: 9,636 at 1M nodes, 20 batches; no op's count
differs) and ~15 more Python calls per batch (2,398 / 2,384: the CPU ``to_device``, the disabled
autocast, the ``LossBatch`` adapter, the task's step wrappers; ~20 us against a 100-200 ms step).
Timed at 1M nodes (1 thread, 10 rounds) ``... + trim (scatter) / fit`` is 1.10x (paired median
1.06x); over 44 pairs at 200k and 1M nodes the geometric mean is 1.002x. The issue's 0.82x was
load (2 threads on 2 loaded cores: one row's epochs spread 2.8-13.6 s; at 1 thread a burst
doubled two adjacent fit epochs, their ``sample`` phase too) on a split whose loop rows left
their iterator and loss sums untimed.

``--part full`` (or ``both``) times full-batch training on a graph of the default pipeline's
size (``dataset.synthetic`` defaults: 20,000 nodes, 64 features, ~200k edges; a 60/20/20 random
split): ``gnnpipe fit`` with ``train.sampler: full`` (scatter, the default, and csr) against the
plain PyG loop (``torch_geometric.nn.GraphSAGE``: forward on the whole graph, cross-entropy on
the train rows, backward, step), and the same loop on gnnpipe's model with csr, split into
forward / backward / optimizer; ``--full-epochs`` epochs per row and round.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `gnnpipe` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnnpipe.runtime import threads

# before torch loads: every row (and the DGL subprocess) runs with a stage process's environment
threads.default_env()

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.data
import torch_geometric.transforms as T
import torch_geometric.typing
from torch_geometric.data import Data
from torch_geometric.nn import GraphSAGE

from bench.common import (add_graph_args, build_graph, describe, load_graph, machine,
                          print_machine)
from bench.epoch_steps import (HEADER, Tally, compare_tallies, finish, interleave, plain_epoch,
                               record, show, summarize, timed_fit)
from gnnpipe.config import CheckpointParams, NeighborParams, SyntheticParams, TrainParams
from gnnpipe.training.loop import LoopOptions
from gnnpipe.training.models import build_model, trim_kwargs
from gnnpipe.sampling import neighbor_loader
from gnnpipe.sampling.builders import neighbor_batches
from gnnpipe.training.device import resolve
from gnnpipe.data.graph import ROLE_CODES
from gnnpipe.training.train import build_inputs, fit


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
                        help="comma-separated row keys to run (fit,fit_csr,peer,peer_best,"
                             "dgl,plain,trim,trim_csr) or all")
    parser.add_argument("--part", choices=("sampled", "full", "both"), default="sampled",
                        help="sampled: the 1M-node mini-batch rows; full: full-batch on the "
                             "default-size graph")
    parser.add_argument("--full-epochs", type=int, default=20,
                        help="--part full: epochs per row and round")
    parser.add_argument("--ops", action="store_true",
                        help="first count what one epoch of fit and of the bare loop (trim, "
                             "scatter) execute: aten ops and Python calls (Tally)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"),
                        help="train.device of the sampled part's fit rows (every other row: CPU)")
    parser.add_argument("--dgl", type=Path, default=None,
                        help="python of DGL's venv (bench/build_dgl.sh): adds the DGL row "
                             "(bench/dgl_epoch.py, one subprocess per round)")
    return parser.parse_args(argv)


def peer_library() -> str | None:
    """What PyG's ``NeighborLoader`` samples with here, or None when it cannot run."""
    if torch_geometric.typing.WITH_PYG_LIB:
        return "pyg-lib"
    if torch_geometric.typing.WITH_TORCH_SPARSE:
        return "torch-sparse"
    return None


def hop_counts(out, hops: int):
    """``out`` (torch-sparse's ``SamplerOutput``) with the per-hop counts pyg-lib would return:
    ``num_sampled_nodes`` (hops + 1,) and ``num_sampled_edges`` (hops,). torch-sparse samples
    frontier by frontier: local node ids are handed out in order of first sight (seeds first)
    and the edges of hop k, targets ascending (``col``), point into hop k-1's new nodes, so the
    edges of a hop are a ``searchsorted`` range and its new nodes end at its largest source."""
    row, col = out.row, out.col
    nodes, edges = [int(out.metadata[0].numel())], []
    end, first = nodes[0], 0  # nodes seen so far; the hop's first edge
    for _ in range(hops):
        last = int(torch.searchsorted(col, end))  # the edges into [previous end, end)
        seen = max(end, int(row[first:last].max()) + 1) if last > first else end
        nodes.append(seen - end)
        edges.append(last - first)
        end, first = seen, last
    assert end == out.node.numel() and first == col.numel(), "not a breadth-first sample"
    out.num_sampled_nodes, out.num_sampled_edges = nodes, edges
    return out


class NoEvaluation:
    """fit's ``Evaluator`` that scores nothing: zero logits for the split nodes ``node_id``
    (M,) of ``roles`` (int8 role codes (M,), ``gnnpipe.data.graph.ROLE_CODES``), no labels.
    With a ``probe`` batch it records ``loss(model, probe)`` (``probe_loss`` by default) after
    each epoch (fit scores after its ``train_seconds`` are taken, so the probe is not timed)."""

    def __init__(self, node_id: torch.Tensor, roles: np.ndarray, num_classes: int, probe=None,
                 loss=None):
        self.node_id, self.roles, self.num_classes, self.probe = node_id, roles, num_classes, probe
        self.loss = loss or probe_loss
        self.losses: list[float] = []

    def targets(self) -> tuple[torch.Tensor, np.ndarray]:
        return torch.full((self.node_id.numel(),), -1), self.roles  # -1: nothing is scored

    def logits(self, model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        if self.probe is not None:
            self.losses.append(self.loss(model, self.probe))
        return self.node_id, torch.zeros(self.node_id.numel(), self.num_classes)


def probe_loss(model: torch.nn.Module, probe) -> float:
    """Cross-entropy on the seeds of the fixed sampled batch ``probe``, eval mode, no grad."""
    training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(probe.x, probe.edge_index, **trim_kwargs(model, probe))
        loss = F.cross_entropy(logits[:probe.batch_size], probe.y[:probe.batch_size])
    model.train(training)
    return float(loss)


def homogeneous_inputs(model: torch.nn.Module, batch, trim: bool) -> tuple:
    """``plain_epoch``'s step of a ``Data`` batch: ``(x, edge_index or adj_t)``, the per-hop
    counts when ``trim`` (``trim_kwargs``, or PyG's ``num_sampled_*_per_hop`` keywords for a
    PyG model), and the seeds' labels."""
    kwargs = ((trim_kwargs(model, batch) if getattr(model, "trims", False)
               else pyg_trim_kwargs(batch)) if trim else {})
    adj = batch.adj_t if "adj_t" in batch else batch.edge_index
    return (batch.x, adj), kwargs, batch.y[:batch.batch_size]


def write_dgl_inputs(folder: Path, csr, x: torch.Tensor, y: torch.Tensor,
                     train_idx: torch.Tensor, probe, weights: list[dict], meta: dict) -> None:
    """What bench/dgl_epoch.py reads, as plain numpy files in ``folder``: the CSR (``indptr``
    (N + 1,), ``indices`` (E,), int64, rows = targets), ``x`` float32 (N, F), ``y`` int64 (N,),
    ``train`` int64 (S,), the probe batch (``probe_nid`` global ids (P,), seeds first;
    ``probe_src``/``probe_dst`` its local edges (E',)), ``weights_{r}.npz`` (round r's initial
    PyG ``GraphSAGE`` state) and ``meta.json``."""
    arrays = {"indptr": csr.indptr, "indices": csr.indices, "x": x, "y": y, "train": train_idx,
              "probe_nid": probe.n_id, "probe_src": probe.edge_index[0],
              "probe_dst": probe.edge_index[1]}
    for name, tensor in arrays.items():
        np.save(folder / f"{name}.npy", tensor.numpy())
    for r, state in enumerate(weights):
        np.savez(folder / f"weights_{r}.npz", **{k: v.numpy() for k, v in state.items()})
    (folder / "meta.json").write_text(json.dumps({**meta, "probe_size": int(probe.batch_size)}))


def dgl_round(python: Path, folder: Path, r: int, epochs: int, seed: int,
              threads: int) -> tuple[dict, list[dict]]:
    """bench/dgl_epoch.py in DGL's venv for round ``r``: its ``DGL_INIT`` dict (the probe loss
    at the initial weights, versions) and one dict per epoch; ``threads`` both for torch and
    for DGL's OpenMP sampler."""
    script = Path(__file__).resolve().with_name("dgl_epoch.py")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "DGLBACKEND": "pytorch"}
    done = subprocess.run([str(python), str(script), str(folder), "--round", str(r),
                           "--epochs", str(epochs), "--seed", str(seed), "--threads",
                           str(threads)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"bench/dgl_epoch.py failed ({done.returncode}): "
                         + (done.stderr.strip().splitlines() or ["no stderr"])[-1])
    lines = [line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith("DGL_")]
    init = next(json.loads(v) for k, v in lines if k == "DGL_INIT")
    return init, [json.loads(v) for k, v in lines if k == "DGL_EPOCH"]


def pyg_trim_kwargs(batch) -> dict:
    """PyG's ``BasicGNN`` keywords for ``trim_to_layer``: the batch's per-hop counts."""
    return {"num_sampled_nodes_per_hop": list(batch.num_sampled_nodes),
            "num_sampled_edges_per_hop": list(batch.num_sampled_edges)}


def sampled(args: argparse.Namespace) -> dict:
    """The mini-batch rows on the bench graph (module docstring)."""
    fanout = tuple(int(k) for k in args.fanout.split(","))
    cfg = TrainParams(model="sage", sampler="neighbor", neighbor=NeighborParams(fanout),
                      num_layers=len(fanout),  # one hop per layer: trim_to_layer needs it
                      batch_size=args.batch_size, epochs=args.epochs, patience=args.epochs + 1,
                      checkpoint=CheckpointParams(every=0), aggregation="scatter")
    started = time.perf_counter()
    graph = load_graph(args)
    print(f"# graph: {describe(graph)}; built/loaded in {time.perf_counter() - started:.1f} s")
    # clone: a --cache graph is memory-mapped, and first touches would count as epoch time
    x, y = graph.x.clone(), graph.y.long().clone()
    edge_index = graph.csr.edge_index()
    n, in_dim, num_classes = graph.num_nodes, x.shape[1], graph.num_classes
    order = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed))
    train_idx = order[:args.seeds]
    roles = np.full(n, ROLE_CODES["unused"], dtype=np.int8)
    roles[train_idx.numpy()] = ROLE_CODES["train"]
    roles[order[args.seeds:args.seeds + args.val].numpy()] = ROLE_CODES["val"]
    print(f"# GraphSAGE hidden {cfg.hidden}, {cfg.num_layers} layers; fan-out {list(fanout)}, "
          f"batch {cfg.batch_size}, {train_idx.numel():,} train seeds per epoch (a fixed subset), "
          f"{args.epochs} epoch(s) x {args.rounds} round(s) per row; {args.threads} torch threads")
    peer = peer_library()
    data = Data(x=x, y=y, edge_index=edge_index, num_nodes=n)
    # the train loss after each epoch: one fixed sampled batch of train seeds, for every row
    probe = next(iter(neighbor_loader(x, y, graph.csr, train_idx[:2048], cfg.neighbor,
                                      seed=args.seed + 1, batch_size=2048, shuffle=False)))
    split = np.flatnonzero(roles != ROLE_CODES["unused"])
    evaluator = NoEvaluation(torch.from_numpy(split), roles[split], num_classes, probe)
    cfg_csr = dataclasses.replace(cfg, aggregation="csr")

    def make_model(aggregation: str = "scatter"):
        return build_model("sage", in_dim, num_classes, cfg_csr if aggregation == "csr" else cfg)

    def pyg_model():
        """PyG's own GraphSAGE (its forward, its trim) with ``make_model()``'s initial weights:
        built after the same seeding, the same parameters drawn."""
        weights = make_model().state_dict()  # first: the seeded draws of every row's model
        model = GraphSAGE(in_dim, cfg.hidden, cfg.num_layers, num_classes, dropout=cfg.dropout)
        model.load_state_dict(weights)
        return model

    def adam(model):
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    dgl_tmp = dgl_dir = init_probe = None
    if args.dgl is not None:  # the graph, the probe and every round's initial weights, as files
        tick = time.perf_counter()
        dgl_tmp = tempfile.TemporaryDirectory(prefix="gnnpipe-dgl-")  # removed on any exit
        dgl_dir = Path(dgl_tmp.name)
        weights, init_probe = [], []
        for r in range(args.rounds):  # what fit and the loop rows of round r start from
            torch.manual_seed(args.seed + r)
            model = make_model()
            weights.append(model.state_dict())
            init_probe.append(probe_loss(model, probe))
        write_dgl_inputs(dgl_dir, graph.csr, x, y, train_idx, probe, weights, {
            "fanout": list(fanout), "batch_size": cfg.batch_size, "hidden": cfg.hidden,
            "num_layers": cfg.num_layers, "num_classes": num_classes, "dropout": cfg.dropout,
            "lr": cfg.lr, "weight_decay": cfg.weight_decay})
        print(f"# DGL inputs written to {dgl_dir} in {time.perf_counter() - tick:.1f} s")

    tick = time.perf_counter()
    ours = neighbor_batches(x, y, graph.csr, train_idx, cfg.neighbor, seed=args.seed,
                            batch_size=cfg.batch_size, edge_index=edge_index)
    setup = {"gnnpipe": time.perf_counter() - tick}
    peer_loader = best_loader = None
    if peer is not None:
        from torch_geometric.loader import NeighborLoader

        tick = time.perf_counter()  # NeighborLoader converts edge_index to CSC here (a sort)
        peer_loader = NeighborLoader(data, num_neighbors=list(fanout), batch_size=cfg.batch_size,
                                     input_nodes=train_idx, shuffle=True)
        setup["peer"] = time.perf_counter() - tick
        if peer == "torch-sparse":  # pyg-lib would return the counts itself
            tick = time.perf_counter()
            best_loader = NeighborLoader(
                data, num_neighbors=list(fanout), batch_size=cfg.batch_size,
                input_nodes=train_idx, shuffle=True, transform=T.ToSparseTensor(),
                transform_sampler_output=lambda out: hop_counts(out, len(fanout)))
            setup["peer_best"] = time.perf_counter() - tick
    print("# loader set-up: " + ", ".join(f"{k} {v:.1f} s" for k, v in setup.items()))

    keys = ["fit", "fit_csr", "peer", "peer_best", "dgl", "plain", "trim", "trim_csr"]
    names = dict(zip(keys, [
        "gnnpipe fit (trim, scatter)", "gnnpipe fit (trim, csr: the default)",
        f"PyG recipe ({peer})" if peer else "PyG recipe",
        "PyG best (torch-sparse, trim, adj_t)", "DGL (NeighborSampler, SAGEConv)",
        "PyG recipe loop on gnnpipe's sampler", "  ... + trim (scatter)", "  ... + trim + csr"]))
    run = set(keys if args.rows == "all" else args.rows.split(","))
    epochs: dict[str, list[dict]] = {names[k]: [] for k in keys}
    options = LoopOptions(device=resolve(args.device, key="--device"))

    # warm-up, untimed: one training step per loader and aggregation (first-call allocations,
    # lazy inits), so the first timed row does not pay what the others then skip
    for aggregation in ("scatter", "csr"):
        warm = make_model(aggregation)
        warm_opt = adam(warm)
        for loader in (ours.loader, peer_loader):  # the PyG batches of both
            if loader is not None:
                batch = next(iter(loader))
                F.cross_entropy(warm(batch.x, batch.edge_index, **trim_kwargs(warm, batch))[
                    :batch.batch_size], batch.y[:batch.batch_size]).backward()
                warm_opt.step()
    if best_loader is not None:  # the adj_t batches and PyG's own trimmed forward
        warm = pyg_model()
        batch = next(iter(best_loader))
        F.cross_entropy(warm(batch.x, batch.adj_t, **pyg_trim_kwargs(batch))[:batch.batch_size],
                        batch.y[:batch.batch_size]).backward()
    # and fit's own first calls (fork_rng, autocast, the loop's hooks): one epoch of one batch
    one = neighbor_batches(x, y, graph.csr, train_idx[:cfg.batch_size], cfg.neighbor,
                           seed=args.seed, batch_size=cfg.batch_size, edge_index=edge_index)
    for fit_cfg in (cfg, cfg_csr):
        timed_fit(lambda: make_model(fit_cfg.aggregation), dataclasses.replace(
            fit_cfg, epochs=1, patience=2), args.seed, one, evaluator, options)

    tallies = {}
    if args.ops:  # the goal pair's work, counted (not timed) on one epoch each
        tallies = {key: Tally() for key in ("fit", "trim")}
        timed_fit(make_model, dataclasses.replace(cfg, epochs=1, patience=2), args.seed, ours,
                  evaluator, options, tally=tallies["fit"])
        torch.manual_seed(args.seed)
        model = make_model()
        plain_epoch(model, adam(model), ours.loader, homogeneous_inputs, trim=True,
                    tally=tallies["trim"])
        tallies = compare_tallies(names["fit"], tallies["fit"], names["trim"], tallies["trim"])
    print(HEADER)

    def fit_row(key: str, r: int) -> None:
        aggregation = "csr" if key == "fit_csr" else "scatter"
        for e in timed_fit(lambda: make_model(aggregation),
                           cfg_csr if aggregation == "csr" else cfg, args.seed + r, ours,
                           evaluator, options):
            record(epochs, names[key], e)

    def loop_row(key: str, r: int) -> None:
        loader = {"peer": peer_loader, "peer_best": best_loader}.get(key, ours.loader)
        if loader is None:
            if r == 0:
                print(f"{names[key]:40s} not run: needs torch-sparse"
                      + (" or pyg-lib" if key == "peer" else "") + ", not installed")
            return
        torch.manual_seed(args.seed + r)
        model = (pyg_model() if key == "peer_best"
                 else make_model("csr" if key == "trim_csr" else "scatter"))
        optimizer = adam(model)
        for _ in range(args.epochs):
            e = plain_epoch(model, optimizer, loader, homogeneous_inputs,
                            trim=key in ("peer_best", "trim", "trim_csr"))
            e.update(probe=probe_loss(model, probe), load1=os.getloadavg()[0])
            record(epochs, names[key], e)

    dgl_init: list[dict] = []

    def dgl_row(key: str, r: int) -> None:
        if dgl_dir is None:
            if r == 0:
                print(f"{names[key]:40s} not run: needs --dgl (bench/build_dgl.sh)")
            return
        init, rows = dgl_round(args.dgl, dgl_dir, r, args.epochs, args.seed + r, args.threads)
        # the same weights on the same probe batch: equal losses say the mapping is right
        init["gnnpipe_probe"] = init_probe[r]
        dgl_init.append(init)
        print(f"# DGL round {r} (torch {init['torch']}, dgl {init['dgl']}, {init['threads']} "
              f"thread(s)): initial probe loss {init['probe']:.6f}, gnnpipe's "
              f"{init_probe[r]:.6f}")
        for e in rows:
            record(epochs, names[key], e)

    interleave(keys, run, args.rounds, lambda key, r: (
        fit_row if key.startswith("fit") else dgl_row if key == "dgl" else loop_row)(key, r))
    if dgl_tmp is not None:
        dgl_tmp.cleanup()

    # pairs: fit against the bare loop that does what fit does inside (trim, aggregation)
    summary = summarize(epochs, [names[k] for k in ("peer", "peer_best", "dgl", "plain")],
                        [names[k] for k in ("fit", "fit_csr", "plain", "trim", "trim_csr")],
                        pairs=((names["trim"], names["fit"]),
                               (names["trim_csr"], names["fit_csr"])))
    return {"graph": describe(graph), "fanout": list(fanout), "batch_size": cfg.batch_size,
            "seeds_per_epoch": int(train_idx.numel()), "peer": peer or "none",
            "setup_seconds": setup, "tally": tallies, "dgl_init": dgl_init, **summary}


def full_epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
               edge_index: torch.Tensor, y: torch.Tensor, train: torch.Tensor) -> dict:
    """One full-batch step (PyG's plain loop), split into forward (with the loss), backward
    and optimizer seconds."""
    model.train()
    ticks = [time.perf_counter()]
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x, edge_index)[train], y[train])
    ticks.append(time.perf_counter())
    loss.backward()
    ticks.append(time.perf_counter())
    optimizer.step()
    ticks.append(time.perf_counter())
    spent = {f"{p}_seconds": b - a for p, (a, b) in
             zip(("forward", "backward", "optimizer"), zip(ticks, ticks[1:]))}
    return {"seconds": ticks[-1] - ticks[0], **spent, "seeds": int(train.numel()),
            "loss": float(loss.detach())}


def full_batch(args: argparse.Namespace) -> dict:
    """Full-batch GraphSAGE on a graph of the default pipeline's size (module docstring)."""
    synthetic = SyntheticParams()
    graph = build_graph(synthetic, args.seed)
    x, y, edge_index = graph.x, graph.y.long(), graph.csr.edge_index()
    n = graph.num_nodes
    order = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed))
    roles = np.full(n, ROLE_CODES["test"], dtype=np.int8)
    roles[order[:int(0.6 * n)].numpy()] = ROLE_CODES["train"]
    roles[order[int(0.6 * n):int(0.8 * n)].numpy()] = ROLE_CODES["val"]
    train = torch.from_numpy(np.flatnonzero(roles == ROLE_CODES["train"]))
    epochs_per = args.full_epochs
    cfg = TrainParams(model="sage", sampler="full", epochs=epochs_per, patience=epochs_per + 1,
                      checkpoint=CheckpointParams(every=0))
    print(f"\n# full batch: {describe(graph)} (dataset.synthetic defaults), {train.numel():,} "
          f"train nodes; GraphSAGE hidden {cfg.hidden}, {cfg.num_layers} layers; {epochs_per} "
          f"epochs x {args.rounds} round(s) per row; {args.threads} torch threads")
    inputs = build_inputs(x, {phase: graph.csr for phase in ("train", "val", "test")})
    keys = ["fit", "fit_csr", "pyg", "csr_loop"]
    names = dict(zip(keys, ["gnnpipe fit (full, scatter)", "gnnpipe fit (full, csr: the default)",
                            "plain PyG full-batch loop", "  ... on gnnpipe's model, csr"]))
    epochs: dict[str, list[dict]] = {names[k]: [] for k in keys}
    print(HEADER)

    def make_model(aggregation: str):
        return build_model("sage", x.shape[1], graph.num_classes,
                           dataclasses.replace(cfg, aggregation=aggregation))

    def fit_row(key: str, r: int) -> None:
        aggregation = "csr" if key == "fit_csr" else "scatter"
        result = fit(lambda: make_model(aggregation), inputs, y, roles,
                     dataclasses.replace(cfg, aggregation=aggregation), seed=args.seed + r)
        for row, hist in zip(result.perf_history, result.history):
            e = {"seconds": row["train_seconds"], "seeds": row["seeds"],
                 "loss": hist["train_loss"], "load1": os.getloadavg()[0]}
            epochs[names[key]].append(e)
        show(names[key] + f" x{len(result.perf_history)}", {
            **e, "seconds": statistics.mean(e["seconds"] for e in epochs[names[key]][-epochs_per:])})

    def loop_row(key: str, r: int) -> None:
        torch.manual_seed(args.seed + r)
        model = (GraphSAGE(x.shape[1], cfg.hidden, cfg.num_layers, graph.num_classes,
                           dropout=cfg.dropout) if key == "pyg" else make_model("csr"))
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        for _ in range(epochs_per):
            e = full_epoch(model, optimizer, x, edge_index, y, train)
            e["load1"] = os.getloadavg()[0]
            epochs[names[key]].append(e)
        mean = {k: statistics.mean(e[k] for e in epochs[names[key]][-epochs_per:])
                for k in e if k.endswith("seconds")}
        show(names[key] + f" x{epochs_per}", {**e, **mean})

    interleave(keys, set(keys), args.rounds, lambda key, r: (
        fit_row if key.startswith("fit") else loop_row)(key, r))
    summary = summarize(epochs, [names["pyg"]], [names[k] for k in ("fit", "fit_csr",
                                                                     "csr_loop")])
    return {"graph": describe(graph), "train_nodes": int(train.numel()), **summary}


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    print_machine()
    summary = {"machine": machine(), "threads": args.threads, "device": args.device}
    if args.part in ("sampled", "both"):
        summary["sampled"] = sampled(args)
    if args.part in ("full", "both"):
        summary["full"] = full_batch(args)
    return finish(summary, args.json)




if __name__ == "__main__":
    main()
