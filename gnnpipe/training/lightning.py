"""``train.engine: lightning``: the train stage run by a Lightning ``Trainer``.

``NodeDataModule`` is PyG's ``LightningNodeData`` built from the pipeline's artifacts: the train
phase's message graph with ``loader='full'`` (``train.sampler: full``) or gnnpipe's
``CsrNeighborSampler`` as its ``node_sampler`` (``train.sampler: neighbor``; PyG's own
``NeighborSampler`` needs pyg-lib or torch-sparse). Its val / test / predict loaders yield one
full-graph batch per phase on that phase's own message graph (``batch.rows`` = the nodes to
score), exactly what the plain engine evaluates on. ``NodeClassifier`` is a ``LightningModule``
around the same ``gnnpipe.training.models`` network with the same Adam settings and per-epoch
reseeding as ``gnnpipe.training.train.fit``, and the hooks of the one loop
(gnnpipe/training/loop.py): the node task's step, its accuracy counts, the loop's history / perf
rows and its early-stopping step (which sets
``trainer.should_stop``). ``fit_lightning`` returns the same ``TrainResult`` as ``fit``, so the
stage writes the same artifacts and ``evaluate`` runs unchanged; for a fixed seed it gives the
plain engine's numbers (tests/training/test_lightning.py pins both samplers).

Not carried over from the plain engine: DDP (``train.dist.nproc``), the cluster / saint / sign
samplers and gnnpipe checkpoints (``train.checkpoint.every`` / ``resume``; Lightning users add
``ModelCheckpoint``). ``Params`` rejects the unsupported combinations at load time.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import random
import time
import warnings
from typing import Callable, Iterator

import lightning.pytorch as pl
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader
from torch_geometric.data import Data
from torch_geometric.data.lightning import LightningNodeData
from torch_geometric.sampler import BaseSampler

from gnnpipe.training import device as devices
from gnnpipe.training import embeddings
from gnnpipe.config import TrainParams
from gnnpipe.io.common import PHASES
from gnnpipe.training.distributed import SINGLE, all_reduce_sum
from gnnpipe.training.loop import (
    COMPILE_BACKEND,
    close_epoch,
    epoch_seed,
    guarded_step,
    history_row,
    perf_row,
)
from gnnpipe.sampling import batch as adapt
from gnnpipe.reporting.node_metric import node_metric
from gnnpipe.training.train import (TRAIN, Objective, PhaseInput, TrainResult, _evaluate,
                                     best_scores, node_step, phase_index)


def _first(items: list) -> Data:
    return items[0]


def _ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` rounded as ``gnnpipe.training.train.fit`` rounds its metrics
    (through a float32 tensor, divided in float64), so both engines write the same digits."""
    totals = all_reduce_sum(torch.tensor([numerator, denominator]), SINGLE)
    return float(totals[0] / totals[1])


class NodeDataModule(LightningNodeData):
    """PyG's ``LightningNodeData`` over the train phase's message graph.

    Train batches: with ``node_sampler`` None the whole train-phase graph with its
    ``train_mask`` (N,), one per epoch; otherwise ``NodeLoader`` batches of ``cfg.batch_size``
    seeds (``batch.n_id`` seeds first, ``batch.batch_size``). Val / test / predict batches: one
    ``Data`` per phase on that phase's message graph (``roles`` int8 (N,) role codes,
    ``gnnpipe.data.graph.ROLE_CODES``), ``rows`` (M,) the phase's nodes to score,
    ``phase`` its name and, with ``train.inference`` layer-wise, its ``layerwise`` engine;
    ``val_dataloader`` also scores the train nodes (train_acc).
    """

    def __init__(self, inputs: dict[str, PhaseInput], y: torch.Tensor, roles: np.ndarray,
                 cfg: TrainParams, node_sampler: BaseSampler | None = None,
                 pin_memory: bool = False):
        idx = phase_index(roles)
        train = inputs["train"]
        data = Data(x=train.x, y=y, edge_index=train.edge_index, num_nodes=y.numel())
        kwargs: dict = {"pin_memory": pin_memory}  # CUDA: async copies from page-locked batches
        if node_sampler is None:
            data.train_mask = torch.from_numpy(roles == TRAIN)
            loader = "full"
        else:
            loader = "custom"
            kwargs.update(batch_size=cfg.batch_size, num_workers=cfg.num_workers,
                          persistent_workers=cfg.num_workers > 0)
        super().__init__(data, input_train_nodes=idx["train"], input_val_nodes=idx["val"],
                         input_test_nodes=idx["test"], loader=loader, node_sampler=node_sampler,
                         **kwargs)
        # layerwise: the phase's layer-by-layer evaluation (train.inference), None = one forward
        self.phase_batches = {
            phase: Data(x=inputs[phase].x, edge_index=inputs[phase].edge_index, y=y,
                        rows=idx[phase], phase=phase, num_nodes=y.numel(),
                        layerwise=getattr(inputs[phase], "layerwise", None))
            for phase in PHASES}

    def _phases(self, *phases: str) -> DataLoader:
        # own generator: iterating draws a base seed, kept off torch's global RNG
        return DataLoader([self.phase_batches[p] for p in phases], batch_size=1,
                          collate_fn=_first, generator=torch.Generator())

    def train_dataloader(self) -> DataLoader:
        if self.loader == "full":
            # One graph per epoch: nothing to shuffle. Its own generator: a DataLoader iterator
            # draws a base seed, which must not shift the dropout masks off the plain engine's
            # (which has no loader here).
            return self.full_dataloader(shuffle=False, generator=torch.Generator(),
                                        **self.loader_kwargs)
        return super().train_dataloader()

    def val_dataloader(self) -> DataLoader:
        return self._phases("train", "val")

    def test_dataloader(self) -> DataLoader:
        return self._phases("test")

    def predict_dataloader(self) -> DataLoader:
        return self._phases(*PHASES)


class NodeClassifier(pl.LightningModule):
    """Node classification with a ``gnnpipe.training.models`` network, trained as ``fit`` trains it.

    Epoch ``e`` (1-based) reseeds torch from ``(seed, e)`` and restarts the sampler's stream,
    so dropout, shuffling and sampling match the plain engine. ``history`` / ``perf_history``
    get one row per epoch; ``best_state`` holds the weights of the best val value of
    ``objective.metric`` so far (``val_acc`` for accuracy), and training stops after
    ``cfg.patience`` epochs without a better one (``loop.close_epoch``); the loss is weighted by
    ``objective.class_weight``, as the plain engine's.
    """

    def __init__(self, model: nn.Module, cfg: TrainParams, seed: int, *,
                 node_sampler: BaseSampler | None = None, amp: bool = False,
                 compile_model: bool = False, objective: Objective = Objective()):
        super().__init__()
        self.model = model
        self.objective = objective
        # (C,) or None; a buffer moves with the module, non-persistent: not in any state dict
        self.register_buffer("class_weight", objective.class_weight, persistent=False)
        # the compiled wrapper shares model's parameters; kept out of the module tree so the
        # state dict has one copy of them
        self.__dict__["_net"] = (torch.compile(model, dynamic=True, backend=COMPILE_BACKEND)
                                 if compile_model else model)
        self.cfg, self.seed, self.node_sampler = cfg, seed, node_sampler
        # the train batches as the step reads them: the whole train-phase graph with its
        # train_mask (loss on the train nodes), or sampled subgraphs (loss on the seeds)
        self._loss_batch = adapt.train_nodes if node_sampler is None else adapt.seeds_first
        self.amp, self.compile_model = amp, compile_model
        self.perf_history: list[dict] = []
        # loop.run's early-stopping state (no checkpoints: Lightning users add ModelCheckpoint)
        self.state = {"epoch": 0, "best_val": -1.0, "best_epoch": 0, "stale": 0, "history": [],
                      "best_state": copy.deepcopy(model.state_dict())}
        self._counts: dict[str, list[float]] = {}
        # this epoch's val labels (V,) and logits (V, C), kept when the metric is not accuracy
        self._val: tuple[np.ndarray, torch.Tensor] | None = None

    history = property(lambda self: self.state["history"])
    best_val = property(lambda self: self.state["best_val"])
    best_epoch = property(lambda self: self.state["best_epoch"])
    best_state = property(lambda self: self.state["best_state"])

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        return self.model(x, edge_index)

    def configure_optimizers(self):
        # Adam; with train.embeddings Adam + lazy Adam for the table rows (one process)
        return embeddings.optimizer(self.model, self.cfg)

    def on_fit_start(self) -> None:
        # Epoch 1's train iterator is created before on_train_epoch_start (FitLoop.setup_data),
        # later epochs' after it: seed each epoch just before its iterator draws its seeds
        # from torch's RNG (NodeLoader: base seed, then shuffle), as the plain loop does.
        torch.manual_seed(epoch_seed(self.seed, 1))

    def on_train_epoch_start(self) -> None:
        epoch = self.current_epoch + 1
        if epoch > 1:
            torch.manual_seed(epoch_seed(self.seed, epoch))
        if hasattr(self.node_sampler, "set_epoch"):
            self.node_sampler.set_epoch(epoch)
        self._epoch_started = time.perf_counter()
        self._loss_sum, self._seen, self._steps = 0.0, 0, 0

    def training_step(self, batch: Data, batch_idx: int) -> torch.Tensor:
        autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.amp)
        weight = self.class_weight
        loss, examples = guarded_step(
            lambda net, loss_batch: node_step(net, loss_batch, class_weight=weight), self._net,
            self._loss_batch(batch), autocast, self.compile_model)
        self._loss_sum += float(loss.detach()) * examples
        self._seen += examples
        self._steps += 1
        return loss

    def _score(self, batch: Data) -> torch.Tensor:
        """Logits (M, C) of ``batch.rows`` on the batch's phase graph (float32, eval mode):
        one forward, or layer by layer when the batch carries a ``layerwise`` engine
        (``train.inference``), as the plain engine evaluates."""
        layerwise = batch.layerwise if "layerwise" in batch else None
        return _evaluate(self.model, PhaseInput(batch.x, batch.edge_index, layerwise), batch.rows,
                         SINGLE)

    def on_validation_epoch_start(self) -> None:
        self._train_seconds = time.perf_counter() - self._epoch_started
        self._counts = {}

    def validation_step(self, batch: Data, batch_idx: int) -> None:
        logits = self._score(batch)
        if batch.phase == "val" and self.objective.metric != "accuracy":
            self._val = (batch.y[batch.rows].cpu().numpy(), logits.float().cpu())
        hits = (logits.argmax(dim=1) == batch.y[batch.rows]).sum()
        correct, total = self._counts.get(batch.phase, [0.0, 0.0])
        self._counts[batch.phase] = [correct + float(hits), total + float(batch.rows.numel())]

    def _accuracy(self, phase: str) -> float:
        return _ratio(*self._counts[phase])

    def on_validation_epoch_end(self) -> None:
        epoch = self.current_epoch + 1
        train_loss = _ratio(self._loss_sum, float(self._seen))
        train_acc, val_acc = self._accuracy("train"), self._accuracy("val")
        scores = {"train_acc": train_acc, "val_acc": val_acc}
        if self.objective.metric != "accuracy":
            y, logits = self._val
            scores[self.objective.monitor] = node_metric(self.objective.metric, y, logits,
                                                         int(logits.shape[1]))
        self.log_dict({"train_loss": train_loss, **scores}, prog_bar=True)
        train_seconds = self._train_seconds
        self.perf_history.append(perf_row(
            epoch, train_seconds, time.perf_counter() - self._epoch_started - train_seconds,
            self._steps, self._seen))
        self.history.append(history_row(epoch, train_loss, scores))
        if close_epoch(self.state, "best_val", scores[self.objective.monitor], epoch, self.model,
                       None, self.cfg, None, SINGLE):
            self.trainer.should_stop = True

    def on_test_epoch_start(self) -> None:
        self._counts = {}

    def test_step(self, batch: Data, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)

    def on_test_epoch_end(self) -> None:
        self.log("test_acc", self._accuracy("test"))

    def predict_step(self, batch: Data, batch_idx: int) -> torch.Tensor:
        return self._score(batch).float()


@contextlib.contextmanager
def _isolated() -> Iterator[None]:
    """Leave the caller's RNGs, determinism flag, environment and warning filters as they were
    (``seed_everything`` and ``Trainer(deterministic=True)`` set them process-wide)."""
    np_state, py_state, env = np.random.get_state(), random.getstate(), dict(os.environ)
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [log.level for log in loggers]
    try:
        with torch.random.fork_rng(), warnings.catch_warnings():
            for log in loggers:  # "GPU available: False ..." banners
                log.setLevel(logging.WARNING)
            warnings.filterwarnings("ignore", ".*does not have many workers.*")
            # Lightning 2.6 builds torch's LeafSpec, which torch 2.13 deprecates
            warnings.filterwarnings("ignore", ".*isinstance\\(treespec, LeafSpec\\).*")
            warnings.filterwarnings("ignore", ".*smaller than the logging interval.*")
            yield
    finally:
        for log, level in zip(loggers, levels):
            log.setLevel(level)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        np.random.set_state(np_state)
        random.setstate(py_state)
        os.environ.clear()
        os.environ.update(env)


def fit_lightning(build_model: Callable[[], nn.Module], inputs: dict[str, PhaseInput],
                  y: torch.Tensor, roles: np.ndarray, cfg: TrainParams, seed: int, *,
                  node_sampler: BaseSampler | None = None, progress_bar: bool = False,
                  amp: bool = False, compile_model: bool = False,
                  device: torch.device = devices.CPU,
                  objective: Objective = Objective()) -> TrainResult:
    """``gnnpipe.training.train.fit`` through a Lightning ``Trainer``: same inputs, same
    ``TrainResult``.

    ``inputs`` are the per-phase model inputs (``build_inputs``), ``y`` int64 (N,) and ``roles``
    int8 (N,) role codes (``gnnpipe.data.graph.ROLE_CODES``); ``node_sampler`` (a
    ``CsrNeighborSampler`` over the train-phase graph) gives sampled batches, None full-graph
    steps. ``seed`` goes to ``seed_everything`` before the model is built and, with the epoch
    number, reseeds every epoch; the run is deterministic (``deterministic=True``) and leaves
    the caller's global state untouched. Logits (M, C) cover train, val then test nodes, each
    scored with the best weights on its own phase's graph. On a CUDA ``device`` the Trainer runs
    there (pinned batches; ``amp`` as Lightning's ``16-mixed`` precision, float16 with a
    GradScaler; deterministic algorithms only warn, as CUDA scatter has no deterministic
    kernel); logits come back to the CPU. ``objective``: the val metric early stopping
    maximises and the loss's class weights, as ``fit`` takes them.
    """
    cuda = device.type == "cuda"
    idx = phase_index(roles)
    started = time.perf_counter()
    with _isolated():
        # Lightning seeds Python, NumPy and torch (and DataLoader workers) from a 32-bit seed;
        # torch then gets the full one, as gnnpipe.training.train.fit seeds it, before the model is
        # built
        pl.seed_everything(seed % 2**32, workers=True, verbose=False)
        torch.manual_seed(seed)
        model = build_model()
        module = NodeClassifier(model, cfg, seed, node_sampler=node_sampler,
                                amp=amp and not cuda, compile_model=compile_model,
                                objective=objective)
        datamodule = NodeDataModule(inputs, y, roles, cfg, node_sampler, pin_memory=cuda)
        trainer = pl.Trainer(
            accelerator="gpu" if cuda else "cpu", devices=[device.index or 0] if cuda else 1,
            precision="16-mixed" if cuda and amp else "32-true",
            max_epochs=cfg.epochs, deterministic="warn" if cuda else True,
            logger=False, enable_checkpointing=False, enable_model_summary=False,
            enable_progress_bar=progress_bar, num_sanity_val_steps=0)
        trainer.fit(module, datamodule=datamodule)
        seconds = time.perf_counter() - started
        model.load_state_dict(module.best_state)
        logits = torch.cat([out.cpu() for out in trainer.predict(module, datamodule=datamodule)]
                           ).float()
    summary = {"best_epoch": module.best_epoch, **best_scores(module.state, objective.metric),
               "epochs_run": len(module.history),
               "parameters": sum(p.numel() for p in model.parameters())}
    perf = {"seconds": round(seconds, 3), "world_size": 1, "device": str(device),
            "train_seeds_per_s": round(len(module.history) * idx["train"].numel()
                                       / max(seconds, 1e-9), 1)}
    if any(getattr(inputs[p], "layerwise", None) is not None for p in PHASES):
        perf["eval_inference"] = "layerwise"  # as fit reports it
    return TrainResult(node_id=torch.cat([idx[p] for p in PHASES]), logits=logits,
                       state_dict=module.best_state, history=module.history, summary=summary,
                       perf=perf, perf_history=module.perf_history)
