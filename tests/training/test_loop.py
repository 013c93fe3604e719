"""The one training loop: early stopping, resume, callbacks and perf rows, on a toy task."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gnnpipe.training import distributed, loop
from gnnpipe.config import TrainParams
from gnnpipe.training.device import to_device
from gnnpipe.training.loop import Checkpointing, LoopOptions

CFG = TrainParams(epochs=6, patience=6, lr=0.05)
TIMING = ("train_seconds", "eval_seconds", "seeds_per_s", "batches_per_s")


class ToyTask:
    """32 rows of 4 features, 2 classes; batches of 8 rows in an order drawn from torch's RNG
    (so a wrong per-epoch reseed shows); ``scores`` scripts the val metric per epoch."""

    best_key, monitor, counters = "best_val", "val_acc", ("batches_seen",)
    examples_per_seed, saves_scaler = 2, False  # pretend each seed is two examples

    def __init__(self, scores: list[float] | None = None):
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(32, 4, generator=gen)
        self.y = (self.x[:, 0] > 0).long()
        self.scores = scores
        self.batch_counts, self.epoch = 0, 0

    def place(self, device):
        self.x, self.y = to_device(self.x, device), to_device(self.y, device)

    def batches(self, epoch: int, seed: int):
        self.batch_counts, self.epoch = 0, epoch
        return torch.randperm(32).split(8)  # global RNG: reseeded by the loop every epoch

    def step(self, model, batch):
        self.batch_counts += 1
        return F.cross_entropy(model(self.x[batch]), self.y[batch]), 2 * batch.numel()

    def counts(self):
        return [float(self.batch_counts)]

    @torch.no_grad()
    def score(self, model):
        model.eval()
        acc = float((model(self.x).argmax(1) == self.y).float().mean())
        return {"train_acc": acc, "val_acc": self.scores[self.epoch - 1] if self.scores else acc}


def _build():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 2))


def _rows(perf):
    return [{k: v for k, v in row.items() if k not in TIMING} for row in perf]


def test_early_stopping_stops_after_patience_stale_epochs_and_keeps_the_best_weights():
    cfg = dataclasses.replace(CFG, epochs=20, patience=2)
    saved = []
    scores = [0.1, 0.5, 0.4, 0.5, 0.9, 0.2]  # best at 2; epochs 3 and 4 stale (0.5 is no gain)
    outcome = loop.run(ToyTask(scores), _build, cfg, 0, LoopOptions(checkpointing=Checkpointing(
        every=1, save=lambda payload: saved.append(copy.deepcopy(payload)))))
    assert [row["epoch"] for row in outcome.history] == [1, 2, 3, 4]
    assert outcome.state["best_epoch"] == 2 and outcome.state["best_val"] == 0.5
    assert [row["val_acc"] for row in outcome.history] == scores[:4]
    best = saved[1]["model"]  # the weights right after epoch 2
    assert all(torch.equal(outcome.model.state_dict()[k], best[k]) for k in best)
    assert not torch.equal(outcome.model.state_dict()["0.weight"], saved[3]["model"]["0.weight"])
    assert [s["epoch"] for s in saved] == [1, 2, 3, 4]  # the stopping epoch is saved too
    assert "scaler" not in saved[0]  # saves_scaler False: the payload has no scaler entry


def test_a_resumed_run_equals_an_uninterrupted_one_and_the_global_rng_is_untouched():
    saved = []
    torch.manual_seed(1)
    before = torch.rand(1)
    torch.manual_seed(1)
    whole = loop.run(ToyTask(), _build, CFG, 7, LoopOptions(checkpointing=Checkpointing(
        every=1, save=lambda payload: saved.append(copy.deepcopy(payload)))))
    assert torch.equal(torch.rand(1), before)  # the loop forked the RNG
    resumed = loop.run(ToyTask(), _build, CFG, 7, LoopOptions(checkpointing=Checkpointing(
        every=0, save=lambda payload: None, resume_from=saved[2])))  # killed after epoch 3
    assert resumed.history == whole.history and resumed.resumed_epoch == 3
    assert resumed.epochs_here == 3 and len(resumed.perf_history) == 3
    assert _rows(resumed.perf_history) == _rows(whole.perf_history)[3:]
    for key, value in whole.state["best_state"].items():
        assert torch.equal(resumed.state["best_state"][key], value), key
    assert resumed.state["batches_seen"] == whole.state["batches_seen"] == 6 * 4
    other = loop.run(ToyTask(), _build, CFG, 8)
    assert other.history != whole.history  # the seed matters


def test_callbacks_run_once_per_epoch_with_the_epoch_number():
    calls: list[int] = []
    loop.run(ToyTask(), _build, CFG, 0, LoopOptions(callbacks=[calls.append]))
    assert calls == [1, 2, 3, 4, 5, 6]
    saved = []
    loop.run(ToyTask(), _build, CFG, 0, LoopOptions(checkpointing=Checkpointing(
        every=2, save=saved.append)))
    calls.clear()
    loop.run(ToyTask(), _build, CFG, 0, LoopOptions(callbacks=[calls.append],
                                                    checkpointing=Checkpointing(
                                                        every=0, save=print,
                                                        resume_from=saved[0])))
    assert calls == [3, 4, 5, 6]  # epochs before the checkpoint are not run again


def test_one_perf_row_and_one_history_row_per_epoch():
    outcome = loop.run(ToyTask(), _build, CFG, 0)
    assert [row["epoch"] for row in outcome.perf_history] == list(range(1, 7))
    assert [row["epoch"] for row in outcome.history] == list(range(1, 7))
    for row in outcome.perf_history:
        assert list(row) == ["epoch", "train_seconds", "eval_seconds", "batches", "seeds",
                             "seeds_per_s", "batches_per_s"]
        assert row["batches"] == 4 and row["seeds"] == 32  # 64 examples, 2 per seed
    assert list(outcome.history[0]) == ["epoch", "train_loss", "train_acc", "val_acc"]


def test_injected_fault_is_a_callback_of_the_named_rank_only(monkeypatch):
    monkeypatch.delenv(distributed.FAULT_RANK_ENV, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert distributed.injected_faults() == []
    monkeypatch.setenv(distributed.FAULT_RANK_ENV, "0")
    assert distributed.injected_faults() == []  # another rank
    monkeypatch.setenv(distributed.FAULT_RANK_ENV, "1")
    (fault,) = distributed.injected_faults()
    with pytest.raises(RuntimeError, match="injected failure on rank 1"):
        loop.run(ToyTask(), _build, CFG, 0, LoopOptions(callbacks=[fault]))
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert distributed.injected_faults() == []  # one process: nothing to fail over
