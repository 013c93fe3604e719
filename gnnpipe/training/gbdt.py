"""The gradient-boosted-tree baseline: LightGBM on node features alone (no edge is read), a
multiclass booster fitted on the labelled train rows and early-stopped on the val rows: on their
multi logloss (the round with the lowest val loss kept) when the run's metric is accuracy, as
before the metric existed; on the val value of any other metric (``evaluate.metric`` resolved:
macro-F1, ROC-AUC, average precision, computed by ``gnnpipe.reporting.node_metric`` each round,
the round of the highest kept), the metric the MLP and the GNN early-stop on.
``train.class_weight: balanced`` gives each train row its class's weight (LightGBM's sample
weights; the val rows stay unweighted, as every model's val metric is).

Deterministic for a fixed (seed, threads) on one machine: ``deterministic`` and
``force_row_wise`` (LightGBM otherwise picks row- or column-wise histograms by timing them), the
given thread count, and every LightGBM seed drawn from ``seed``. Its outputs have the MLP
baseline's shapes (gnnpipe/training/train.py ``TrainResult``), so the same writers store them.
"""

from __future__ import annotations

import time

import lightgbm as lgb
import numpy as np
import torch

from gnnpipe.config import GbdtParams
from gnnpipe.runtime.rng import make_rng
from gnnpipe.io.common import PHASES
from gnnpipe.reporting.node_metric import node_metric
from gnnpipe.training.train import Objective, TrainResult, phase_index

PREDICT_ROWS = 65_536  # rows scored at once: bounds the float32 copy of x to ~F x 256 KiB
SEED_KEYS = ("seed", "data_random_seed", "bagging_seed", "feature_fraction_seed")


def booster_params(cfg: GbdtParams, num_classes: int, seed: int, threads: int) -> dict:
    """LightGBM's parameters for ``cfg``: multiclass softmax over ``num_classes`` columns,
    pinned for reproducibility, each seed drawn from ``seed`` (int32, as LightGBM takes)."""
    draws = make_rng(seed, "gbdt").integers(0, 2**31 - 1, size=len(SEED_KEYS))
    return {
        "objective": "multiclass", "num_class": num_classes,
        "metric": ["multi_logloss", "multi_error"],  # the first one early-stops
        "num_leaves": cfg.num_leaves, "learning_rate": cfg.learning_rate,
        "min_data_in_leaf": cfg.min_data_in_leaf, "feature_fraction": cfg.feature_fraction,
        "num_threads": threads, "deterministic": True, "force_row_wise": True,
        "verbosity": -1, **{key: int(d) for key, d in zip(SEED_KEYS, draws)},
    }


class MetricStopping:
    """LightGBM callback: stop ``rounds`` rounds after the best val value of ``metric`` (a
    feval's, maximised; the first round of the best on a tie, as ``lgb.early_stopping``), or at
    the last round; the booster's ``best_iteration`` is then that round."""

    def __init__(self, metric: str, rounds: int):
        self.metric, self.rounds = metric, rounds
        # after record_evaluation (20), so the stopping round is recorded too; on the instance:
        # lgb.train gives a callback without its own ``order`` one that runs first
        self.order = 30
        self.best, self.best_iteration, self.best_results = -np.inf, 0, None

    def __call__(self, env) -> None:
        value = next(r[2] for r in env.evaluation_result_list
                     if r[0] == "val" and r[1] == self.metric)
        if value > self.best:
            self.best, self.best_iteration = value, env.iteration
            self.best_results = env.evaluation_result_list
        if (env.iteration - self.best_iteration >= self.rounds
                or env.iteration == env.end_iteration - 1):
            raise lgb.callback.EarlyStopException(self.best_iteration, self.best_results)


def _val_feval(metric: str, val: lgb.Dataset, y_val: np.ndarray, num_classes: int):
    """A LightGBM ``feval``: ``metric`` of the val rows (``y_val`` int64 (V,)) from the booster's
    class probabilities (V, C) (log-probabilities are logits to every node metric), nothing on
    the train rows (the history keeps their logloss and accuracy, and a ranking metric over every
    train row each round would cost more than the round)."""
    tiny = np.finfo(np.float64).tiny  # a probability rounded to 0 keeps a finite log

    def feval(preds: np.ndarray, data: lgb.Dataset) -> list:
        if data is not val:
            return []
        probs = np.asarray(preds, dtype=np.float64).reshape(y_val.size, num_classes)
        logits = torch.from_numpy(np.log(np.maximum(probs, tiny)))
        return [(metric, node_metric(metric, y_val, logits, num_classes), True)]

    return feval


def fit_gbdt(x: torch.Tensor, y: torch.Tensor, roles: np.ndarray, num_classes: int,
             cfg: GbdtParams, seed: int, threads: int,
             objective: Objective = Objective()) -> TrainResult:
    """Fit the booster on ``x`` rows of labelled train nodes and early-stop on labelled val nodes.

    ``x`` (N, F) node features (any float dtype, memory-mapped is fine; read as float32), or
    a ``gnnpipe.data.features.ModelFeatures`` (the baseline stage's): only the labelled
    train and val rows are held (LightGBM bins its training matrix in memory), every scored
    row is read in blocks of PREDICT_ROWS,
    ``y`` (N,) int64 class codes in [0, num_classes) or -1 for unlabelled (never fitted nor
    scored), ``roles`` int8 (N,) split role codes (``gnnpipe.data.graph.ROLE_CODES``). Typed
    graphs pass the target type's ``x`` and ``y``. Returns ``node_id`` int64 (M,) (train, val then test nodes,
    as the MLP's) and ``logits`` float32 (M, num_classes): log-probabilities, a column for every
    class, seen in train or not; ``history`` one row per boosting round (``epoch`` = round,
    train and val multi_logloss and accuracy); ``summary`` (deterministic) and ``perf`` (wall
    clock). ``objective`` (``gnnpipe.training.train.node_objective``): the metric early stopping
    maximises on val (accuracy: the lowest val multi logloss, unchanged; otherwise the history
    gets a ``val_<metric>`` column) and the class weights of the train rows; ``summary`` has
    ``metric`` and its ``best_val`` (at the kept round) beside ``best_val_acc``.
    """
    labelled = y.numpy() >= 0
    nodes = {p: ids.numpy() for p, ids in phase_index(roles).items()}
    rows = {p: nodes[p][labelled[nodes[p]]] for p in ("train", "val")}  # the labelled ones
    for phase, picked in rows.items():
        if picked.size == 0:
            raise ValueError(f"the gbdt baseline needs labelled {phase} nodes; the split has none")
    params = booster_params(cfg, num_classes, seed, threads)
    metric, class_weight = objective.metric, objective.class_weight
    start = time.perf_counter()
    train_y = y[rows["train"]]
    train = lgb.Dataset(_features(x, rows["train"]), label=train_y.numpy(), params=params,
                        free_raw_data=True,
                        weight=None if class_weight is None else class_weight[train_y].numpy())
    y_val = y[rows["val"]].numpy()
    val = lgb.Dataset(_features(x, rows["val"]), label=y_val, reference=train)
    record: dict = {}
    if metric == "accuracy":  # the lowest val multi_logloss, the first metric of params
        stopping, feval = lgb.early_stopping(cfg.early_stopping_rounds, first_metric_only=True,
                                             verbose=False), None
    else:
        stopping = MetricStopping(metric, cfg.early_stopping_rounds)
        feval = _val_feval(metric, val, y_val, num_classes)
    booster = lgb.train(params, train, num_boost_round=cfg.max_rounds, valid_sets=[train, val],
                        valid_names=["train", "val"], feval=feval,
                        callbacks=[stopping, lgb.record_evaluation(record)])
    fit_seconds = time.perf_counter() - start
    best = booster.best_iteration  # the early-stopping callback sets it, stopped early or not

    start = time.perf_counter()
    node_id = torch.from_numpy(np.concatenate([nodes[p] for p in PHASES]))
    logits = _log_probabilities(booster, x, node_id.numpy(), num_classes, best)
    predict_seconds = time.perf_counter() - start

    history = _history(record, metric)
    n_train = nodes["train"].size
    val_logits = logits[n_train:n_train + nodes["val"].size][labelled[nodes["val"]]]
    best_val_acc = round(float((val_logits.argmax(dim=1) == y[rows["val"]]).double().mean()), 6)
    summary = {
        "best_round": int(best),
        "best_val_acc": best_val_acc,
        "metric": metric,
        "best_val": best_val_acc if metric == "accuracy" else round(
            node_metric(metric, y_val, val_logits, num_classes), 6),
        "rounds_run": len(history),
        "early_stopped": len(history) < cfg.max_rounds,
        "trees": int(best) * num_classes,
    }
    perf = {"seconds": round(fit_seconds, 3), "predict_seconds": round(predict_seconds, 3),
            "threads": threads, "device": "cpu",
            "train_rows_per_s": round(len(history) * rows["train"].size
                                      / max(fit_seconds, 1e-9), 1)}
    return TrainResult(node_id=node_id, logits=logits, state_dict={}, history=history,
                       summary=summary, perf=perf)


def _features(x: torch.Tensor, rows: np.ndarray) -> np.ndarray:
    """(len(rows), F) float32, C-contiguous: what LightGBM reads without another copy."""
    return np.ascontiguousarray(x[torch.from_numpy(rows)].float().numpy())


def _log_probabilities(booster: lgb.Booster, x: torch.Tensor, node_id: np.ndarray,
                       num_classes: int, rounds: int) -> torch.Tensor:
    """(M, C) float32 log-softmax of the raw scores of the first ``rounds`` rounds, scored
    in blocks of PREDICT_ROWS rows (log-softmax in float64: a class never seen in train keeps a
    finite, very negative column)."""
    out = torch.empty((node_id.size, num_classes), dtype=torch.float32)
    for begin in range(0, node_id.size, PREDICT_ROWS):
        block = node_id[begin:begin + PREDICT_ROWS]
        raw = booster.predict(_features(x, block), raw_score=True, num_iteration=rounds)
        raw = torch.from_numpy(np.asarray(raw, dtype=np.float64).reshape(block.size, -1))
        out[begin:begin + block.size] = torch.log_softmax(raw, dim=1).float()
    return out


def _history(record: dict, metric: str = "accuracy") -> list[dict]:
    """One row per round from ``lgb.record_evaluation``: ``epoch`` (the round, 1-based, as the
    MLP's history names it), train_loss, train_acc, val_loss, val_acc, and ``val_<metric>``
    unless the metric is accuracy. The train loss is weighted under class weights (LightGBM
    weighs its train rows' metrics)."""
    train, val = record["train"], record["val"]
    extra = [] if metric == "accuracy" else [(f"val_{metric}", val[metric])]
    return [{"epoch": i + 1,
             "train_loss": round(float(train["multi_logloss"][i]), 6),
             "train_acc": round(1.0 - float(train["multi_error"][i]), 6),
             "val_loss": round(float(val["multi_logloss"][i]), 6),
             "val_acc": round(1.0 - float(val["multi_error"][i]), 6),
             **{name: round(float(values[i]), 6) for name, values in extra}}
            for i in range(len(val["multi_logloss"]))]
