"""Early stopping on the run's metric (evaluate.metric resolved, the same rule in train and
baseline): the kept epoch is the best val value of that metric, not of accuracy; the summary and
history name it; a resumed run keeps it; DDP ranks agree on it; accuracy is the loop of before."""

from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from gnnpipe.config import FitParams, NodeSplitParams, TrainParams
from gnnpipe.data.graph import ROLE_CODES
from graph_oracle import prepare
from gnnpipe.io.common import role_codes
from gnnpipe.reporting.node_metric import node_metric
from gnnpipe.runtime.rng import make_rng
from split_oracle import split_nodes
from gnnpipe.training.block_fit import fit_blocks
from gnnpipe.training.distributed import DistContext
from gnnpipe.training.loop import Checkpointing, LoopOptions
from gnnpipe.training.models import build_model
from gnnpipe.training.train import NodeTask, build_inputs, fit, node_objective, objective_for
from conftest import as_graph, small_params

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TRAIN, VAL, TEST, UNUSED = (ROLE_CODES[r] for r in ("train", "val", "test", "unused"))
CFG = TrainParams(epochs=60, patience=60, hidden=16, model="mlp")


@pytest.fixture(scope="module")
def imbalanced():
    """1,000 nodes, two classes, about 20% positives, weak features: val accuracy peaks early
    at about the base rate while val ROC-AUC keeps rising for tens of epochs."""
    params = small_params(num_classes=2, class_imbalance=2.0, feature_signal=0.5,
                          num_nodes=1000)
    graph = prepare(params.dataset, params.seed)[0].target_view()
    roles = role_codes(split_nodes(as_graph(graph), NodeSplitParams(), make_rng(0, "split")).roles)
    return graph, roles


def _fit(graph, roles, metric, cfg=CFG, **kw):
    objective = node_objective(metric, "none", graph.y, roles, 2)
    return fit(lambda: build_model("mlp", graph.x.shape[1], 2, cfg), build_inputs(graph.x),
               graph.y, roles, cfg, 0, objective=objective, **kw)


def _val_logits(result, roles):
    val = torch.from_numpy(roles[result.node_id.numpy()] == VAL)
    return result.node_id[val], result.logits[val]


def test_auto_resolves_on_the_labelled_split_nodes():
    """Two classes: ROC-AUC; a majority above half of the train/val/test nodes: macro-F1; else
    accuracy. Unused and unlabelled nodes do not count (here they would tip the majority)."""
    roles = np.array([TRAIN, VAL, TEST, TRAIN, VAL, TEST] + [UNUSED] * 6 + [TRAIN] * 3,
                     dtype=np.int8)
    y = torch.tensor([0, 0, 0, 1, 1, 2] + [0] * 6 + [-1] * 3)
    assert node_objective("auto", "none", y, roles, 3).metric == "accuracy"  # 3 of 6: not > half
    y_major = y.clone()
    y_major[5] = 0
    assert node_objective("auto", "none", y_major, roles, 3).metric == "macro_f1"  # 4 of 6
    assert node_objective("auto", "none", y.clamp(max=1), roles, 2).metric == "roc_auc"
    assert node_objective("average_precision", "none", y, roles, 3).metric == "average_precision"


def test_early_stopping_keeps_the_epoch_of_best_val_roc_auc_not_accuracy(imbalanced):
    graph, roles = imbalanced
    result = _fit(graph, roles, "roc_auc")
    history, summary = result.history, result.summary
    auc = [row["val_roc_auc"] for row in history]
    acc = [row["val_acc"] for row in history]
    best = int(np.argmax(auc)) + 1  # the first epoch of the highest value
    assert summary["best_epoch"] == best != int(np.argmax(acc)) + 1  # they disagree here
    assert summary["metric"] == "roc_auc" and summary["best_val"] == auc[best - 1]
    assert summary["best_val_acc"] == acc[best - 1]
    # the weights kept are that epoch's: their val ROC-AUC is the best one
    node_id, logits = _val_logits(result, roles)
    value = node_metric("roc_auc", graph.y[node_id].numpy(), logits, 2)
    assert value == pytest.approx(summary["best_val"], abs=1e-6)

    accuracy = _fit(graph, roles, "accuracy")
    assert list(accuracy.history[0]) == ["epoch", "train_loss", "train_acc", "val_acc"]
    assert accuracy.summary["best_epoch"] == int(np.argmax(
        [row["val_acc"] for row in accuracy.history])) + 1
    assert accuracy.summary["best_val"] == accuracy.summary["best_val_acc"]
    assert accuracy.summary["metric"] == "accuracy"
    # the same training steps, only the epoch kept differs
    assert [r["train_loss"] for r in accuracy.history] == [r["train_loss"] for r in history]


def test_resumed_run_keeps_the_metric_of_its_checkpoint(imbalanced):
    """A run killed after epoch 20 and resumed from its checkpoint ends as the whole run: the
    best score in the state is the metric's."""
    graph, roles = imbalanced
    saved: list[dict] = []
    whole = _fit(graph, roles, "macro_f1", options=LoopOptions(checkpointing=Checkpointing(
        every=1, save=lambda payload: saved.append(copy.deepcopy(payload)))))
    assert saved[19]["best_val"] == pytest.approx(max(r["val_macro_f1"]
                                                      for r in whole.history[:20]), abs=1e-6)
    resumed = _fit(graph, roles, "macro_f1", options=LoopOptions(checkpointing=Checkpointing(
        every=0, save=lambda payload: None, resume_from=saved[19])))
    assert resumed.history == whole.history and resumed.summary == whole.summary
    assert torch.equal(resumed.logits, whole.logits)


def test_blocks_baseline_stops_on_the_same_metric_as_the_memory_fit():
    rng = np.random.default_rng(1)
    n = 3000
    x = torch.from_numpy(rng.standard_normal((n, 6)).astype(np.float32))
    y = torch.from_numpy((x[:, 0].numpy() + rng.standard_normal(n) > 1.2).astype(np.int64))
    roles = rng.choice(np.arange(4, dtype=np.int8), n, p=[0.5, 0.2, 0.2, 0.1])
    cfg = FitParams(hidden=8, epochs=15, patience=15, dropout=0.5)
    build = lambda: build_model("mlp", 6, 2, cfg)
    objective = node_objective("average_precision", "none", y, roles, 2)
    memory = fit(build, build_inputs(x), y, roles, cfg, seed=3, objective=objective)
    blocks = fit_blocks(build, x, y, roles, cfg, seed=3, block_rows=4096, objective=objective)
    assert "val_average_precision" in blocks.history[0]
    assert memory.summary == blocks.summary  # one chunk: bit-identical
    assert memory.history == blocks.history


def test_the_objective_reads_evaluate_metric_and_train_class_weight():
    from gnnpipe.config import params_from_dict

    y = torch.tensor([0, 1, 1, 0])
    roles = np.array([TRAIN, TRAIN, VAL, TEST], dtype=np.int8)
    params = params_from_dict({"evaluate": {"metric": "average_precision"}})
    objective = objective_for(params, y, roles, 2)
    assert objective.metric == "average_precision" and objective.class_weight is None
    assert objective.monitor == "val_average_precision"


# ------------------------------------------------------------------------------- two ranks
class ThreadRanks:
    """The collectives of ``world`` ranks run as threads of this process: ``gather_objects``
    and ``all_reduce_sum`` meet at a barrier, as the gloo ones meet over the network (those are
    tested across real processes in tests/training/test_distributed.py); here what train.py
    does around them is tested, in milliseconds."""

    def __init__(self, world: int):
        self.world, self.slots = world, [None] * world
        self.barrier = threading.Barrier(world)

    def gather_objects(self, obj, ctx):
        if ctx.world_size == 1:
            return [obj]
        self.slots[ctx.rank] = obj
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()  # no rank refills a slot before every rank has read it
        return out

    def all_reduce_sum(self, values, ctx):
        parts = self.gather_objects(values.detach().clone().to(torch.float64), ctx)
        return torch.stack(parts).sum(dim=0)

    def run(self, monkeypatch, work):
        """``work(ctx)`` on every rank at once; the results in rank order."""
        from gnnpipe.training import train

        monkeypatch.setattr(train, "gather_objects", self.gather_objects)
        monkeypatch.setattr(train, "all_reduce_sum", self.all_reduce_sum)
        with ThreadPoolExecutor(self.world) as pool:
            futures = [pool.submit(work, DistContext(r, self.world, r)) for r in range(self.world)]
            return [f.result(timeout=60) for f in futures]


class RowsEvaluator:
    """A rank's ``Evaluator`` over the nodes ``ids`` it holds (as a shard evaluator holds its
    owned nodes): an MLP on their feature rows."""

    def __init__(self, x, y, roles, ids):
        self.x, self.ids = x, ids
        self._targets = y[ids], roles[ids.numpy()]

    def logits(self, model):
        return self.ids, model(self.x[self.ids])

    def targets(self):
        return self._targets


def test_ranks_agree_with_one_process_on_the_objective_and_the_val_metric(imbalanced,
                                                                          monkeypatch):
    """Each rank holds a share: class counts are summed and val logits gathered, so every rank
    gets one process's metric, weights and scores (full-graph rows strided by rank, and an
    evaluator's disjoint nodes); the val values do not depend on the world size."""
    graph, roles = imbalanced
    torch.manual_seed(0)
    model = build_model("mlp", graph.x.shape[1], 2, CFG).eval()
    inputs = build_inputs(graph.x)
    whole = node_objective("auto", "balanced", graph.y, roles, 2)
    expected = NodeTask(inputs, graph.y, roles, objective=whole).score(model)
    assert set(expected) == {"train_acc", "val_acc", "val_roc_auc"}

    def rank(ctx):
        share = torch.arange(ctx.rank, graph.num_nodes, ctx.world_size)  # disjoint nodes
        objective = node_objective("auto", "balanced", graph.y[share],
                                   roles[share.numpy()], 2, ctx)
        strided = NodeTask(inputs, graph.y, roles, ctx=ctx, objective=objective).score(model)
        evaluator = RowsEvaluator(graph.x, graph.y, roles, share)
        sharded = NodeTask(None, None, None, loader=[], ctx=ctx, evaluator=evaluator,
                           objective=objective).score(model)
        return objective, strided, sharded

    for objective, strided, sharded in ThreadRanks(2).run(monkeypatch, rank):
        assert objective.metric == whole.metric == "roc_auc"
        assert torch.equal(objective.class_weight, whole.class_weight)
        assert strided["val_roc_auc"] == sharded["val_roc_auc"] == expected["val_roc_auc"]
        assert strided == pytest.approx(expected) and sharded == pytest.approx(expected)
