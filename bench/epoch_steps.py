"""The timing shared by the epoch benches (bench/train_epoch.py, bench/typed_epoch.py): ``fit``'s
step split from outside it (``StepClock``, ``timed_fit``), the plain PyG loop split by the same
clock over the same span (``plain_epoch``), what an epoch executes, which load does not change
(``Tally``: aten operator and Python function calls), rows run in interleaved rounds
(``interleave``), one line per epoch (``record``) and the summary with its ratios
(``summarize``, ``finish``)."""

from __future__ import annotations

import cProfile
import collections
import dataclasses
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
    ``with clock:`` block; the model's hooks go at its end too). Per epoch, ``sample`` is the
    sampler (the ``DataLoader``'s next item), ``gather`` PyG's ``filter_fn`` (``x``/``y`` rows),
    ``assemble`` the ``LossBatch`` adapter, ``forward`` from the model's call to the gradient of
    its output (model, loss and the loss's own backward), ``backward`` from there to the
    optimizer's step, ``optimizer`` Adam's step; ``other`` (``split``) is the rest of the
    epoch: the loader's iterator, zero_grad, the trim keywords, the loss sums (fit's: also its
    per-epoch reseeding and ``set_epoch``)."""

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
        self.handles += [model.register_forward_pre_hook(before),
                         model.register_forward_hook(after)]
        return model

    def split(self, epoch: int, train_seconds: float) -> dict[str, float]:
        """Epoch ``epoch``'s (0-based) ``{phase}_seconds``; ``other`` = ``train_seconds`` (fit's
        ``perf_history``) less the rest."""
        spent = self.epochs[epoch]
        spent["other"] = train_seconds - sum(v for k, v in spent.items() if k != "other")
        return {f"{k}_seconds": v for k, v in spent.items()}

    def __enter__(self):
        hooks = importlib.import_module("torch.optim.optimizer")  # the global step hooks
        self.handles += [
            hooks.register_optimizer_step_pre_hook(lambda *a: self.tick("backward")),
            hooks.register_optimizer_step_post_hook(lambda *a: self.tick("optimizer"))]
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()
        self.handles = []


class Tally:
    """What runs between ``start()`` and ``stop()``, which load does not change: aten operator
    calls (``torch.profiler``, CPU; nested ones too) and Python function calls (``cProfile``,
    built-ins included), summed over the sessions; ``batches`` counts the steps seen."""

    def __init__(self):
        self.ops: collections.Counter = collections.Counter()
        self.calls = 0
        self.batches = 0
        self._sessions: tuple | None = None

    def start(self) -> None:
        ops = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        ops.__enter__()
        calls = cProfile.Profile()
        self._sessions = (ops, calls)
        calls.enable()  # last in, first out: neither profiler counts the other's start

    def stop(self, *_) -> None:
        ops, calls = self._sessions
        calls.disable()
        ops.__exit__(None, None, None)
        self.ops.update(e.name for e in ops.events() if e.name.startswith("aten::"))
        self.calls += sum(entry.callcount for entry in calls.getstats())
        self._sessions = None

    def differences(self, other: "Tally") -> dict[str, tuple[int, int]]:
        """aten op -> (count here, count in ``other``) where they differ."""
        return {op: (self.ops[op], other.ops[op]) for op in sorted(set(self.ops) | set(other.ops))
                if self.ops[op] != other.ops[op]}


class _Tallied:
    """``loader`` whose every iteration starts ``tally`` and counts its batches (``fit``'s
    ``callbacks`` stop it after the epoch's steps and loss sums)."""

    def __init__(self, loader, tally: Tally):
        self.loader, self.tally = loader, tally

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):  # node_sampler (set_epoch), skipped, ...
        if name in ("loader", "tally"):
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self):
        self.tally.start()
        for batch in self.loader:
            self.tally.batches += 1
            yield batch


def interleave(keys: list[str], chosen: set[str], rounds: int, run_row) -> None:
    """``run_row(key, r)`` for the ``chosen`` keys, ``rounds`` times; odd rounds run the rows in
    reverse, so no row always goes first (after another's garbage) and a load change on a
    shared machine hits every row alike."""
    for r in range(rounds):
        for key in keys if r % 2 == 0 else keys[::-1]:
            if key in chosen:
                run_row(key, r)


def timed_fit(make_model, cfg, seed: int, loader, evaluator,
              options: LoopOptions, tally: Tally | None = None) -> list[dict]:
    """``fit(make_model, None, None, None, cfg, seed, loader, evaluator, options)`` under a
    ``StepClock``: one dict per epoch with fit's ``train_seconds`` as ``seconds``, seeds,
    batches, the train loss, the probe loss the ``evaluator`` (``bench.train_epoch.NoEvaluation``)
    recorded, the step split and the load. ``tally`` counts each epoch's steps and loss sums
    (from the loader's first batch to fit's ``callbacks``)."""
    evaluator.losses.clear()
    clock = StepClock()
    batches = clock.loader(loader)
    if tally is not None:
        batches = _Tallied(batches, tally)
        options = dataclasses.replace(options, callbacks=(*options.callbacks, tally.stop))
    with clock:
        result = fit(lambda: clock.watch(make_model()), None, None, None, cfg, seed=seed,
                     loader=batches, evaluator=evaluator, options=options)
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
                trim: bool = False, tally: Tally | None = None) -> dict:
    """One epoch of the PyG docs' loop over a ``NodeLoader`` (or ``NeighborLoader``), timed as
    ``timed_fit`` times fit: the same ``StepClock`` (its timed loader, model and optimizer
    hooks), ``seconds`` the wall time of the whole epoch (``model.train()``, the loader's
    iterator, every step and its loss sum, as fit's ``train_seconds``), split into ``PHASES``
    (no ``assemble``: a plain loop has no adapter; ``other``: zero_grad, ``inputs``, the loss
    sums, the iterator). ``inputs(model, batch, trim)`` gives the model's arguments, keywords
    and the seeds' labels (the logits of the first ``len(labels)`` output rows carry the
    loss). ``tally`` counts the steps and loss sums (from the first batch to the last sum)."""
    clock = StepClock()
    loss_sum, seeds, nodes, batches = 0.0, 0, 0, 0
    with clock:
        clock.watch(model)
        started = time.perf_counter()
        model.train()
        timed = _TimedLoader(loader, clock)
        for batch in timed if tally is None else _Tallied(timed, tally):
            optimizer.zero_grad()
            args, kwargs, y = inputs(model, batch, trim)
            loss = F.cross_entropy(model(*args, **kwargs)[:y.numel()], y)
            loss.backward()
            optimizer.step()
            loss_sum += float(loss.detach()) * y.numel()
            seeds += y.numel()
            nodes += batch.num_nodes
            batches += 1
        if tally is not None:
            tally.stop()
        seconds = time.perf_counter() - started
    split = clock.split(0, seconds)
    del split["assemble_seconds"]
    return {"seconds": seconds, **split, "seeds": seeds, "loss": loss_sum / max(seeds, 1),
            "nodes_per_batch": nodes / max(batches, 1), "batches": batches}


def compare_tallies(name: str, mine: Tally, base: str, theirs: Tally) -> dict:
    """Print and return what one epoch of row ``name`` executes beside row ``base``'s: batches,
    aten operator calls (total, and each op whose count differs) and Python calls per batch."""
    per_batch = [t.calls / max(t.batches, 1) for t in (mine, theirs)]
    differ = mine.differences(theirs)
    print(f"# one epoch's work (load-independent), {name.strip()} / {base.strip()}: "
          f"{mine.batches} / {theirs.batches} batches, aten ops {sum(mine.ops.values()):,} / "
          f"{sum(theirs.ops.values()):,}, Python calls per batch {per_batch[0]:,.0f} / "
          f"{per_batch[1]:,.0f}; ops whose counts differ: "
          + (", ".join(f"{op} {a} / {b}" for op, (a, b) in differ.items()) or "none"))
    return {"rows": [name.strip(), base.strip()], "batches": [mine.batches, theirs.batches],
            "aten_ops": [sum(mine.ops.values()), sum(theirs.ops.values())],
            "python_calls_per_batch": per_batch, "ops_differing": differ}


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


def summarize(epochs: dict[str, list[dict]], baselines: list[str], ours: list[str],
              pairs: tuple[tuple[str, str], ...] = ()) -> dict:
    """Best / mean epoch and mean split per row, and baseline / ours ratios of the mean epoch
    (every baseline against every row of ``ours``, then each (baseline, ours) of ``pairs``) with
    the relative difference of the mean train loss and probe loss, and the median of the
    epoch-by-epoch ratios (``paired``: epoch i of both rows ran in the same round, minutes
    apart at most, so a load change between rounds cancels out)."""
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
    compared = [(b, o) for b in baselines for o in ours] + list(pairs)
    for base, name in compared:
        key = f"{base.strip()} / {name.strip()} (mean epoch time)"
        if base not in results or name not in results or base == name or key in ratios:
            continue
        mine, theirs = results[name]["epochs"], results[base]["epochs"]
        ratios[key] = {"ratio": results[base]["mean_epoch_seconds"]
                       / results[name]["mean_epoch_seconds"]}
        line = f"ratio {key}: {ratios[key]['ratio']:.2f}x"
        if len(mine) == len(theirs):
            ratios[key]["paired"] = statistics.median(b["seconds"] / a["seconds"]
                                                      for a, b in zip(mine, theirs))
            line += f" (paired median {ratios[key]['paired']:.2f}x)"
        for what in ("loss", "probe"):
            if all(what in e for e in mine + theirs):
                diff = (statistics.mean(e[what] for e in mine)
                        / statistics.mean(e[what] for e in theirs) - 1)
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
