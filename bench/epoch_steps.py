"""The timing shared by the epoch benches (bench/train_epoch.py, bench/typed_epoch.py): ``fit``'s
step split from outside it (``StepClock``, ``timed_fit``), the plain PyG loop split alike
(``plain_epoch``), rows run in interleaved rounds (``interleave``), one line per epoch
(``record``) and the summary with its ratios (``summarize``, ``finish``)."""

from __future__ import annotations

import importlib
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import torch.utils.data

from gnnpipe.sampling.batch import Batches
from gnnpipe.training.loop import LoopOptions
from gnnpipe.training.train import fit

PHASES = ("sample", "gather", "assemble", "forward", "backward", "optimizer", "other")


class StepClock:
    """Splits ``fit``'s epochs into ``PHASES`` from outside ``fit``: a timed copy of its loader
    (``loader``) and hooks on its model (``watch``) and on every optimizer's step (while in a
    ``with clock:`` block). Per epoch, ``sample`` is the sampler (the ``DataLoader``'s next
    item), ``gather`` PyG's ``filter_fn`` (``x``/``y`` rows), ``assemble`` the ``LossBatch``
    adapter, ``forward`` from the model's call to the gradient of its output (model, loss and
    the loss's own backward), ``backward`` from there to the optimizer's step, ``optimizer``
    Adam's step; ``other`` (``split``) is the rest of fit's epoch: zero_grad,
    the trim keywords, the per-epoch loss sums."""

    def __init__(self):
        self.epochs: list[dict[str, float]] = []
        self.mark = 0.0
        self.handles: list = []

    def tick(self, phase: str | None) -> None:
        """Charge the time since the last tick to ``phase`` (None: to nothing, i.e. other)."""
        now = time.perf_counter()
        if phase is not None and self.epochs:
            self.epochs[-1][phase] += now - self.mark
        self.mark = now

    def loader(self, batches: Batches) -> Batches:
        """``batches`` (a ``Batches`` over a PyG ``NodeLoader``) with sample, gather and
        assemble timed; the same batches in the same order."""
        def convert(data):
            out = batches.convert(data)
            self.tick("assemble")
            return out
        return Batches(_TimedLoader(batches.loader, self), convert)

    def watch(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` with hooks timing its training forwards (grad-enabled calls only: the
        evaluator's probe is not an epoch's work)."""
        def before(module, args):
            if torch.is_grad_enabled():
                self.tick(None)

        def after(module, args, out):
            if torch.is_grad_enabled() and out.requires_grad:
                out.register_hook(lambda grad: self.tick("forward"))
        model.register_forward_pre_hook(before)
        model.register_forward_hook(after)
        return model

    def split(self, epoch: int, train_seconds: float) -> dict[str, float]:
        """Epoch ``epoch``'s (0-based) ``{phase}_seconds``; ``other`` = ``train_seconds`` (fit's
        ``perf_history``) less the rest."""
        spent = self.epochs[epoch]
        spent["other"] = train_seconds - sum(v for k, v in spent.items() if k != "other")
        return {f"{k}_seconds": v for k, v in spent.items()}

    def __enter__(self):
        hooks = importlib.import_module("torch.optim.optimizer")  # the global step hooks
        self.handles = [
            hooks.register_optimizer_step_pre_hook(lambda *a: self.tick("backward")),
            hooks.register_optimizer_step_post_hook(lambda *a: self.tick("optimizer"))]
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()


def interleave(keys: list[str], chosen: set[str], rounds: int, run_row) -> None:
    """``run_row(key, r)`` for the ``chosen`` keys, ``rounds`` times; odd rounds run the rows in
    reverse, so no row always goes first (after another's garbage) and a load change on a
    shared machine hits every row alike."""
    for r in range(rounds):
        for key in keys if r % 2 == 0 else keys[::-1]:
            if key in chosen:
                run_row(key, r)


def timed_fit(make_model, cfg, seed: int, loader, evaluator,
              options: LoopOptions) -> list[dict]:
    """``fit(make_model, None, None, None, cfg, seed, loader, evaluator, options)`` under a
    ``StepClock``: one dict per epoch with fit's ``train_seconds`` as ``seconds``, seeds,
    batches, the train loss, the probe loss the ``evaluator`` (``bench.train_epoch.NoEvaluation``)
    recorded, the step split and the load."""
    evaluator.losses.clear()
    clock = StepClock()
    with clock:
        result = fit(lambda: clock.watch(make_model()), None, None, None, cfg, seed=seed,
                     loader=clock.loader(loader), evaluator=evaluator, options=options)
    return [{"seconds": row["train_seconds"], "seeds": row["seeds"], "batches": row["batches"],
             "loss": hist["train_loss"], "probe": probed,
             **clock.split(i, row["train_seconds"]), "load1": os.getloadavg()[0]}
            for i, (row, hist, probed) in enumerate(zip(result.perf_history, result.history,
                                                        evaluator.losses))]


class _TimedLoader:
    """A ``NodeLoader`` iterated as ``NodeLoader`` does (sample in the ``DataLoader``, then
    ``filter_fn``), each half charged to ``clock``; one new epoch per iteration."""

    def __init__(self, loader, clock: StepClock):
        self.loader, self.clock = loader, clock

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):  # node_sampler (set_epoch), ...
        if name in ("loader", "clock"):
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self):
        loader, clock = self.loader, self.clock
        clock.epochs.append(dict.fromkeys(PHASES, 0.0))
        per_worker, loader.filter_per_worker = loader.filter_per_worker, False
        try:
            samples = torch.utils.data.DataLoader._get_iterator(loader)
            while True:
                clock.tick(None)
                out = next(samples, None)
                if out is None:
                    return
                clock.tick("sample")
                batch = loader.filter_fn(out)
                clock.tick("gather")
                yield batch
        finally:
            loader.filter_per_worker = per_worker


def plain_epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader, inputs,
                trim: bool = False) -> dict:
    """One epoch of the PyG docs' loop over a ``NodeLoader`` (or ``NeighborLoader``), seconds
    split into sample, gather, forward, backward and optimizer (``PHASES``; a plain loop has
    no adapter and no bookkeeping to time). ``inputs(model, batch, trim)`` gives the model's
    arguments, keywords and the seeds' labels (the logits of the first ``len(labels)`` output
    rows carry the loss)."""
    model.train()
    timed = ("sample", "gather", "forward", "backward", "optimizer")
    spent = dict.fromkeys(timed, 0.0)
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
            args, kwargs, y = inputs(model, batch, trim)
            loss = F.cross_entropy(model(*args, **kwargs)[:y.numel()], y)
            ticks.append(time.perf_counter())
            loss.backward()
            ticks.append(time.perf_counter())
            optimizer.step()
            ticks.append(time.perf_counter())
            for phase, (a, b) in zip(timed, zip(ticks, ticks[1:])):
                spent[phase] += b - a
            loss_sum += float(loss.detach()) * y.numel()
            seeds += y.numel()
            nodes += batch.num_nodes
            batches += 1
    finally:
        loader.filter_per_worker = per_worker
    return {"seconds": sum(spent.values()), **{f"{k}_seconds": v for k, v in spent.items()},
            "seeds": seeds, "loss": loss_sum / max(seeds, 1),
            "nodes_per_batch": nodes / max(batches, 1), "batches": batches}


def record(epochs: dict[str, list[dict]], name: str, e: dict) -> None:
    """Keep epoch ``e`` of row ``name`` and print its line."""
    epochs[name].append(e)
    show(name, e)


def show(name: str, e: dict) -> None:
    """One epoch's line: seconds, seeds/s, the step split where timed, loss, probe, load."""
    split = " ".join(f"{e[f'{p}_seconds']:7.2f}" if f"{p}_seconds" in e else f"{'-':>7}"
                     for p in PHASES)
    nodes = f"{e['nodes_per_batch']:11,.0f}" if "nodes_per_batch" in e else f"{'-':>11}"
    probe = f"{e['probe']:7.4f}" if "probe" in e else f"{'-':>7}"
    print(f"{name:40s} {e['seconds']:8.3f} {e['seeds'] / e['seconds']:8,.0f} {split} "
          f"{nodes} {e['loss']:7.4f} {probe} {e['load1']:5.2f}", flush=True)


HEADER = (f"{'row':40s} {'epoch s':>8} {'seeds/s':>8} " + " ".join(f"{p[:7]:>7}" for p in PHASES)
          + f" {'nodes/batch':>11} {'loss':>7} {'probe':>7} {'load1':>5}")


def summarize(epochs: dict[str, list[dict]], baselines: list[str], ours: list[str]) -> dict:
    """Best / mean epoch and mean split per row, and baseline / ours ratios of the mean epoch
    with the relative difference of the mean train loss and probe loss."""
    results = {}
    for name, rows in epochs.items():
        if not rows:
            continue
        best = min(rows, key=lambda e: e["seconds"])
        results[name] = {"best_epoch_seconds": best["seconds"],
                         "mean_epoch_seconds": statistics.mean(e["seconds"] for e in rows),
                         "best_seeds_per_s": best["seeds"] / best["seconds"],
                         "mean_split_seconds": {p: statistics.mean(e[f"{p}_seconds"] for e in rows)
                                                for p in PHASES if f"{p}_seconds" in rows[0]},
                         "epochs": rows}
    print()
    for name, row in results.items():
        split = ", ".join(f"{p} {v:.3f}" for p, v in row["mean_split_seconds"].items())
        print(f"{name:40s} best epoch {row['best_epoch_seconds']:7.3f} s  "
              f"mean {row['mean_epoch_seconds']:7.3f} s  {row['best_seeds_per_s']:8,.0f} seeds/s"
              + (f"  mean split: {split}" if split else ""))
    ratios = {}
    for base in (b for b in baselines if b in results):
        for name in (o for o in ours if o in results and o != base):
            key = f"{base} / {name.strip()} (mean epoch time)"
            ratios[key] = {"ratio": results[base]["mean_epoch_seconds"]
                           / results[name]["mean_epoch_seconds"]}
            line = f"ratio {key}: {ratios[key]['ratio']:.2f}x"
            for what in ("loss", "probe"):
                if all(what in e for e in results[name]["epochs"] + results[base]["epochs"]):
                    diff = (statistics.mean(e[what] for e in results[name]["epochs"])
                            / statistics.mean(e[what] for e in results[base]["epochs"]) - 1)
                    ratios[key][what] = diff
                    line += f"  (mean {what} {diff:+.2%})"
            print(line)
    return {"results": results, "ratios": ratios}


def finish(summary: dict, path: Path | None) -> dict:
    """``summary`` with the load average at the end (printed too), written to ``path``."""
    summary["load_average_end"] = os.getloadavg()
    print(f"# load average at the end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if path is not None:
        path.write_text(json.dumps(summary, indent=2, default=float) + "\n")
    return summary
