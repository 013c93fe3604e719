"""The one training loop of node, link and typed training (and the rows Lightning writes).

``run(task, build_model, cfg, seed, options)`` owns what every task shares: ``fork_rng`` and the
model's initial seed, Adam, resume from a checkpoint, the DDP wrapper, AMP / ``torch.compile``,
per-epoch reseeding from ``(seed, epoch)``, the loss / example sums reduced across ranks, one perf
row and one history row per epoch, early stopping with the best weights, checkpoints, and the
device (``train.device``, gnnpipe/training/device.py): the model, what the task holds
(``Task.place``) and each batch go there here and nowhere else; best weights and checkpoints come
back to the CPU. A
``Task`` supplies what differs: the epoch's batches, the loss of one batch and the validation score.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gnnpipe.training import device as devices
from gnnpipe.training import embeddings
from gnnpipe.config import FitParams
from gnnpipe.runtime.resources import release_memory
from gnnpipe.training.distributed import SINGLE, DistContext, all_reduce_sum

# steps between returns of freed heap pages to the OS (``release_memory``): an epoch of varied
# batch sizes otherwise grows the heap it keeps (a constant a few batches large, not per node)
TRIM_EVERY = 64

COMPILE_BACKEND = "inductor"  # torch.compile backend (tests swap in one that fails)


@dataclass(frozen=True)
class Checkpointing:
    """How ``run`` saves its state every ``every`` epochs (0: never) and what it resumes from."""

    every: int
    save: Callable[[dict], None]  # called on rank 0 with a weights_only-loadable payload
    resume_from: dict | None = None  # a payload an earlier, killed run saved


@dataclass(frozen=True)
class LoopOptions:
    """How to run the loop, apart from what to train: DDP context, checkpoints, progress bar,
    AMP, ``torch.compile``, ``device`` (``gnnpipe.training.device.resolve``) and ``callbacks`` (each
    called as ``callback(epoch)`` on every rank after the epoch's training steps, before its sums
    are reduced: fault injection, tests)."""

    ctx: DistContext = SINGLE
    checkpointing: Checkpointing | None = None
    progress: Callable[..., Any] | None = None  # gnnpipe.runtime.progress.progress: epochs shown
    amp: bool = False
    compile_model: bool = False
    callbacks: tuple[Callable[[int], None], ...] | list = ()
    device: torch.device = devices.CPU


class Task(Protocol):
    """What one kind of training adds to the loop."""

    best_key: ClassVar[str]  # state / checkpoint key of the best score: "best_val", "best_val_mrr"
    # the ``score`` entry early stopping maximises: "val_acc", "val_mrr"; a node task sets it
    # per run from its metric ("val_roc_auc": gnnpipe.training.train.Objective.monitor)
    monitor: str
    counters: ClassVar[tuple[str, ...]]  # per-epoch counts summed over ranks and epochs into state
    examples_per_seed: ClassVar[int]  # examples ``step`` counts per seed (link: a pair, 2)
    # checkpoints carry a "scaler" entry ({} without a scaler: node task); with one, every task
    saves_scaler: ClassVar[bool]

    def place(self, device: torch.device) -> None:
        """Move what every step or score reads besides the batch (whole-graph inputs, labels)
        to ``device`` once (``gnnpipe.training.device.to_device``); called before the first
        epoch."""

    def batches(self, epoch: int, seed: int) -> Iterable:
        """This rank's batches of ``epoch`` (1-based); torch is already reseeded for it."""

    def step(self, model: nn.Module, batch) -> tuple[torch.Tensor, int]:
        """Loss (scalar) of one batch and the examples it averages over."""

    def counts(self) -> list[float]:
        """This rank's values of ``counters`` for the epoch just trained."""

    def score(self, model: nn.Module) -> dict[str, float]:
        """Metrics of the epoch (the same on every rank), ``monitor`` among them, in history order."""


@dataclass
class LoopOutcome:
    model: nn.Module  # the user's module (unwrapped), holding the best weights, in eval mode
    state: dict  # epoch, best score (task.best_key), best_epoch, stale, history, best_state, counters
    perf_history: list[dict] = field(default_factory=list)  # one row per epoch run here
    seconds: float = 0.0  # wall clock of the whole run
    resumed_epoch: int = 0  # epochs the resumed checkpoint had already run
    device: str = "cpu"  # where it trained ("cuda:0"), for the perf files

    @property
    def history(self) -> list[dict]:
        return self.state["history"]

    @property
    def epochs_here(self) -> int:
        return len(self.history) - self.resumed_epoch


def epoch_seed(seed: int, epoch: int) -> int:
    """Each epoch reseeds torch from (seed, epoch): a resumed run draws exactly the same."""
    return int(np.random.default_rng([seed, epoch]).integers(0, 2**62))


def close_epoch(state: dict, best_key: str, score: float, epoch: int, model: nn.Module,
                optimizer: torch.optim.Optimizer | None, cfg: FitParams,
                checkpointing: Checkpointing | None, ctx: DistContext,
                extra: dict | None = None) -> bool:
    """Early-stopping bookkeeping of one finished epoch.

    Keeps the best weights by ``score`` (``state[best_key]``), counts stale epochs, checkpoints
    (rank 0, every ``checkpointing.every`` epochs and at the end; ``extra`` entries are saved
    after model and optimizer) and returns True when training stops. Best weights and the
    checkpoint are CPU tensors whatever the model's device.
    """
    if score > state[best_key]:
        state.update({best_key: score, "best_epoch": epoch, "stale": 0,
                      "best_state": devices.state_on_cpu(model)})
    else:
        state["stale"] += 1
    state["epoch"] = epoch
    done = state["stale"] >= cfg.patience or epoch == cfg.epochs
    if checkpointing and checkpointing.every and ctx.is_main and (
            epoch % checkpointing.every == 0 or done):
        checkpointing.save(devices.to_cpu({
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), **(extra or {}),
            **state}))
    return done


PERF_COLUMNS = ("epoch", "train_seconds", "eval_seconds", "batches", "seeds", "seeds_per_s",
                "batches_per_s")


def perf_row(epoch: int, train_seconds: float, eval_seconds: float, batches: int,
             seeds: int | float) -> dict:
    """One row of wall-clock throughput (``PERF_COLUMNS``): ``batches`` per rank, ``seeds`` over
    all ranks."""
    return dict(zip(PERF_COLUMNS, (
        epoch, round(train_seconds, 4), round(eval_seconds, 4), batches, int(seeds),
        round(seeds / max(train_seconds, 1e-9), 1), round(batches / max(train_seconds, 1e-9), 3))))


def history_row(epoch: int, train_loss: float, metrics: dict[str, float]) -> dict:
    return {"epoch": epoch, "train_loss": round(train_loss, 6),
            **{key: round(value, 6) for key, value in metrics.items()}}


def _compile_failed(err: Exception) -> ValueError:
    """One line naming the root cause (dynamo wraps the backend's own error)."""
    inner: BaseException = err
    while getattr(inner, "inner_exception", None) is not None or inner.__cause__ is not None:
        inner = getattr(inner, "inner_exception", None) or inner.__cause__
    text = str(inner).strip()
    reason = text.splitlines()[0][:300] if text else "no message"
    return ValueError(f"train.compile=true: torch.compile failed on this machine "
                      f"({type(inner).__name__}: {reason}); set train.compile: false")


def _compile_errors() -> tuple[type, ...]:
    """What a failing torch.compile raises (dynamo wraps backend failures; inductor's own)."""
    import torch._dynamo  # noqa: F401 - only looked up once something has failed

    errors: list[type] = [torch._dynamo.exc.TorchDynamoException]
    inductor_error = getattr(getattr(torch, "_inductor", None), "exc", None)
    if inductor_error is not None and hasattr(inductor_error, "InductorError"):
        errors.append(inductor_error.InductorError)
    return tuple(errors)


def guarded_step(step: Callable, model: nn.Module, batch, autocast,
                 compile_model: bool) -> tuple[torch.Tensor, int]:
    """``step(model, batch)`` under ``autocast``; a compiler failure becomes one ValueError."""
    try:
        with autocast:
            return step(model, batch)
    except _compile_errors() as err:
        if not compile_model:
            raise
        raise _compile_failed(err) from None


def run(task: Task, build_model: Callable[[], nn.Module], cfg: FitParams, seed: int,
        options: LoopOptions = LoopOptions()) -> LoopOutcome:
    """Build a model with ``build_model()`` (torch seeded with ``seed``) and train it with Adam
    until ``cfg.epochs`` or ``cfg.patience`` epochs without a better ``task.monitor``.

    Under DDP (``options.ctx``) gradients are averaged and every rank takes the same decisions.
    The model is built on the CPU (the same initial weights everywhere) and moved to
    ``options.device`` with the task's inputs and every batch; ``options.amp`` autocasts to
    bfloat16 on the CPU and to float16 with a ``GradScaler`` (kept in checkpoints) on CUDA.
    The caller's global torch RNG is left untouched. Returns the model with the best weights.
    """
    ctx, checkpointing, device = options.ctx, options.checkpointing, options.device
    started = time.perf_counter()
    # CUDA: fork only this rank's GPU's RNG state (torch warns when asked to guess among several)
    with torch.random.fork_rng(**({"devices": [device.index]} if device.type == "cuda" else {})):
        torch.manual_seed(seed)
        model = build_model().to(device)
        task.place(device)
        # Adam; with train.embeddings Adam + lazy Adam for the table rows (averaged over ctx)
        optimizer = embeddings.optimizer(model, cfg, ctx)
        scaler = devices.grad_scaler(device, options.amp)
        state = {"epoch": 0, task.best_key: -1.0, "best_epoch": 0, "stale": 0, "history": [],
                 "best_state": devices.state_on_cpu(model),
                 **{key: 0 for key in task.counters}}
        resume = checkpointing.resume_from if checkpointing else None
        if resume is not None:
            model.load_state_dict(resume["model"])
            optimizer.load_state_dict(resume["optimizer"])
            if scaler is not None and resume.get("scaler"):
                scaler.load_state_dict(resume["scaler"])
            state = {key: resume.get(key, value) for key, value in state.items()}
        # a model whose loss leaves some parameters out (typed: the last layer's convs into
        # non-target types) says so; DDP would otherwise wait for their gradients forever
        unused = bool(getattr(model, "ddp_find_unused_parameters", False))
        trained = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=unused) if ctx.world_size > 1 else model
        if options.compile_model:
            trained = torch.compile(trained, dynamic=True, backend=COMPILE_BACKEND)
        autocast = torch.autocast(device.type, dtype=devices.amp_dtype(device),
                                  enabled=options.amp)
        perf_history: list[dict] = []
        first = state["epoch"] + 1 if state["stale"] < cfg.patience else cfg.epochs + 1
        # one rank reports: every rank's lines would repeat the same reduced figures
        bar = options.progress(None, total=cfg.epochs, initial=first - 1, desc="epochs",
                               unit="ep") if options.progress and ctx.is_main else None
        for epoch in range(first, cfg.epochs + 1):
            epoch_started = time.perf_counter()
            torch.manual_seed(epoch_seed(seed, epoch))  # dropout, shuffling of this epoch
            trained.train()
            losses: list[tuple[torch.Tensor, int]] = []  # read after the epoch: no sync per step
            for batch in task.batches(epoch, seed):
                batch = devices.to_device(batch, device)  # the one move of every batch kind
                optimizer.zero_grad()
                loss, examples = guarded_step(task.step, trained, batch, autocast,
                                              options.compile_model)
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    loss.backward()
                    optimizer.step()
                losses.append((loss.detach(), examples))
                if len(losses) % TRIM_EVERY == 0:
                    release_memory()  # glibc keeps the freed batches' pages: 8M nodes +170 MiB
            loss_sum, seen, steps = 0.0, 0, len(losses)
            for loss, examples in losses:  # the same float64 sum, in order, as step by step
                loss_sum += float(loss) * examples
                seen += examples
            for callback in options.callbacks:
                callback(epoch)
            totals = all_reduce_sum(torch.tensor([loss_sum, float(seen), *task.counts()]), ctx)
            train_loss = float(totals[0] / totals[1])
            for i, key in enumerate(task.counters):
                state[key] += int(totals[2 + i])
            train_seconds = time.perf_counter() - epoch_started
            metrics = task.score(model)
            perf_history.append(perf_row(
                epoch, train_seconds, time.perf_counter() - epoch_started - train_seconds, steps,
                int(totals[1]) // task.examples_per_seed))
            state["history"].append(history_row(epoch, train_loss, metrics))
            if bar is not None:
                bar.set_postfix(loss=f"{train_loss:.4f}", **{
                    task.monitor: f"{metrics[task.monitor]:.4f}"},
                    seeds_s=f"{perf_history[-1]['seeds_per_s']:.0f}")
                bar.update(1)
            extra = {"scaler": scaler.state_dict() if scaler else {}} if (
                task.saves_scaler or scaler) else {}
            if close_epoch(state, task.best_key, metrics[task.monitor], epoch, model, optimizer,
                           cfg, checkpointing, ctx, extra=extra):
                break
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - started
    model.load_state_dict(state["best_state"])
    model.eval()
    return LoopOutcome(model=model, state=state, perf_history=perf_history, seconds=seconds,
                       resumed_epoch=resume["epoch"] if resume is not None else 0,
                       device=str(device))
