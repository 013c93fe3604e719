"""train.engine: lightning: a real LightningDataModule / LightningModule that trains exactly as
the plain engine does, and a train stage whose artifacts evaluate reads unchanged."""

from __future__ import annotations

import dataclasses
import json
import os
import random

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
import yaml
from torch_geometric.data.lightning import LightningNodeData

from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.config import (InferenceParams, NeighborParams, NodeSplitParams, ParamsError,
                            TrainParams, params_from_dict)
from gnnpipe.training.lightning import NodeClassifier, NodeDataModule, fit_lightning
from gnnpipe.training.loop import LoopOptions
from gnnpipe.training.models import build_model
from graph_oracle import prepare, restrict
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sampling.builders import neighbor_batches
from split_oracle import split_nodes
from gnnpipe.data.graph import ROLE_CODES
from gnnpipe.io.common import PHASES, role_codes
from gnnpipe.training.train import build_inputs, fit
from conftest import as_graph, small_params

# lr high and patience short, so early stopping ends the runs before train.epochs
CFG = {"full": TrainParams(epochs=60, patience=6, hidden=16, lr=0.05),
       "neighbor": TrainParams(epochs=25, patience=6, hidden=16, lr=0.05, sampler="neighbor",
                               batch_size=256, neighbor=NeighborParams(num_neighbors=(5, 5))),
       "full-amp": TrainParams(epochs=8, patience=8, hidden=16, amp=True)}


@pytest.fixture(scope="module")
def graph():
    params = small_params()
    return prepare(params.dataset, params.seed)[0].target_view()


@pytest.fixture(scope="module")
def roles(graph):
    return role_codes(split_nodes(as_graph(graph), NodeSplitParams(), make_rng(0, "split")).roles)


@pytest.fixture(scope="module")
def inputs(graph):
    return build_inputs(graph.x, message_graphs={p: graph.csr for p in PHASES})


def _sampler(graph, roles, inputs, cfg, csr=None):
    """The plain engine's NodeLoader (its ``node_sampler`` goes to Lightning), or None."""
    if cfg.sampler != "neighbor":
        return None
    train = torch.from_numpy(np.flatnonzero(roles == ROLE_CODES["train"]))
    return neighbor_batches(graph.x, graph.y, csr or graph.csr, train, cfg.neighbor, 11,
                            batch_size=cfg.batch_size, num_workers=cfg.num_workers,
                            edge_index=inputs["train"].edge_index)


def _both(graph, roles, inputs, cfg, seed=3):
    """(plain, lightning) results of one config: same model builder, seeds and sampler."""
    def build():
        return build_model("sage", graph.x.shape[1], graph.num_classes, cfg)

    plain = fit(build, inputs, graph.y, roles, cfg, seed,
                loader=_sampler(graph, roles, inputs, cfg), options=LoopOptions(amp=cfg.amp))
    loader = _sampler(graph, roles, inputs, cfg)
    light = fit_lightning(build, inputs, graph.y, roles, cfg, seed,
                          node_sampler=getattr(loader, "node_sampler", None), amp=cfg.amp)
    return plain, light


@pytest.fixture(scope="module")
def runs(graph, roles, inputs):
    return {name: _both(graph, roles, inputs, cfg) for name, cfg in CFG.items()}


def _test_accuracy(result, graph, roles):
    pred = torch.empty(graph.num_nodes, dtype=torch.int64)
    pred[result.node_id] = result.logits.argmax(1)
    test = torch.from_numpy(np.flatnonzero(roles == ROLE_CODES["test"]))
    return float((pred[test] == graph.y[test]).double().mean())


@pytest.mark.parametrize("name", list(CFG))
def test_lightning_trains_exactly_as_the_plain_engine(runs, graph, roles, name):
    plain, light = runs[name]
    assert light.summary.keys() == plain.summary.keys()
    assert light.summary == plain.summary
    assert light.history == plain.history  # loss, train and val accuracy of every epoch
    assert torch.equal(light.node_id, plain.node_id)
    assert torch.equal(light.logits, plain.logits)  # bit for bit: same masks, batches, steps
    assert light.state_dict.keys() == plain.state_dict.keys()  # model.pt loads the same way
    assert [row.keys() for row in light.perf_history] == [row.keys() for row in plain.perf_history]
    if name != "full-amp":
        assert light.summary["epochs_run"] < CFG[name].epochs  # EarlyStopping ended the run
        assert _test_accuracy(light, graph, roles) > 0.7  # 3 balanced classes: chance is 1/3


@pytest.mark.parametrize("sampler", ["full", "neighbor"])
def test_lightning_weighs_classes_and_early_stops_on_the_metric_as_the_plain_engine(
        graph, roles, inputs, sampler):
    """train.class_weight: balanced with evaluate.metric macro_f1 (a majority class made here):
    the same weighted steps, the same val_macro_f1 column and the same epoch kept."""
    from gnnpipe.training.train import node_objective

    y = graph.y.clone()
    y[torch.from_numpy(np.flatnonzero((graph.y == 1).numpy())[::2])] = 0  # class 0 the majority
    objective = node_objective("auto", "balanced", y, roles, 3)
    assert objective.metric == "macro_f1" and objective.class_weight is not None
    cfg = dataclasses.replace(CFG[sampler], epochs=12)

    def build():
        return build_model("sage", graph.x.shape[1], 3, cfg)

    relabelled = dataclasses.replace(graph, y=y)  # the loader's batches carry these labels
    plain = fit(build, inputs, y, roles, cfg, 3, objective=objective,
                loader=_sampler(relabelled, roles, inputs, cfg))
    unweighted = fit(build, inputs, y, roles, cfg, 3,
                     loader=_sampler(relabelled, roles, inputs, cfg))
    light = fit_lightning(build, inputs, y, roles, cfg, 3, objective=objective,
                          node_sampler=getattr(_sampler(relabelled, roles, inputs, cfg),
                                               "node_sampler", None))
    assert "val_macro_f1" in light.history[0] and light.summary["metric"] == "macro_f1"
    assert light.history == plain.history and light.summary == plain.summary
    assert torch.equal(light.logits, plain.logits)
    assert plain.history[0]["train_loss"] != unweighted.history[0]["train_loss"]


def test_lightning_evaluates_layer_by_layer_as_the_plain_engine(graph, roles):
    cfg = TrainParams(epochs=3, patience=3, hidden=16,  # several blocks on this graph
                      inference=InferenceParams(mode="layerwise", block_edges=3000))
    layered = build_inputs(graph.x, message_graphs={p: graph.csr for p in PHASES}, cfg=cfg)
    plain, light = _both(graph, roles, layered, cfg)
    assert light.perf["eval_inference"] == plain.perf["eval_inference"] == "layerwise"
    assert torch.equal(light.logits, plain.logits) and light.history == plain.history


def test_lightning_runs_repeat_and_leave_global_state_alone(runs, graph, roles, inputs):
    cfg = CFG["neighbor"]
    torch.manual_seed(5)
    np.random.seed(5)
    random.seed(5)
    before = (torch.rand(1), np.random.rand(), random.random())
    torch.manual_seed(5)
    np.random.seed(5)
    random.seed(5)
    env = dict(os.environ)
    loader = _sampler(graph, roles, inputs, cfg)
    again = fit_lightning(lambda: build_model("sage", graph.x.shape[1], 3, cfg), inputs,
                          graph.y, roles, cfg, 3, node_sampler=loader.node_sampler)
    assert (torch.rand(1), np.random.rand(), random.random()) == before
    assert dict(os.environ) == env  # no PL_GLOBAL_SEED / CUBLAS_WORKSPACE_CONFIG left behind
    assert not torch.are_deterministic_algorithms_enabled()
    first = runs["neighbor"][1]
    assert torch.equal(again.logits, first.logits) and again.history == first.history
    other = fit_lightning(lambda: build_model("sage", graph.x.shape[1], 3, cfg), inputs,
                          graph.y, roles, dataclasses.replace(cfg, epochs=2), 4,
                          node_sampler=_sampler(graph, roles, inputs, cfg).node_sampler)
    assert other.history[0] != first.history[0]  # the seed matters


def test_datamodule_and_module_plug_into_a_users_trainer(graph, roles):
    # val / test get their own message graphs (as in an inductive split): each phase's batch
    # must carry its own phase's edges, not the train graph's
    graphs = {"train": restrict(graph.csr, torch.from_numpy(roles == ROLE_CODES["train"])),
              "val": restrict(graph.csr, torch.from_numpy(roles != ROLE_CODES["test"])),
              "test": graph.csr}
    phase_inputs = build_inputs(graph.x, message_graphs=graphs)
    cfg = CFG["neighbor"]
    loader = _sampler(graph, roles, phase_inputs, cfg, graphs["train"])
    data = NodeDataModule(phase_inputs, graph.y, roles, cfg, loader.node_sampler)
    assert isinstance(data, LightningNodeData) and isinstance(data, pl.LightningDataModule)
    batch = next(iter(data.train_dataloader()))
    assert batch.batch_size == cfg.batch_size
    assert set(roles[batch.n_id[:batch.batch_size].numpy()]) == {ROLE_CODES["train"]}  # seeds first
    val_batches = list(data.val_dataloader())
    assert [b.phase for b in val_batches] == ["train", "val"]
    assert val_batches[0].edge_index is phase_inputs["train"].edge_index
    assert val_batches[1].edge_index is phase_inputs["val"].edge_index
    assert val_batches[0].edge_index.shape[1] < val_batches[1].edge_index.shape[1]
    assert batch.edge_index.max() < batch.num_nodes
    assert set(roles[val_batches[1].rows.numpy()]) == {ROLE_CODES["val"]}

    torch.manual_seed(0)
    module = NodeClassifier(build_model("sage", graph.x.shape[1], 3, cfg), cfg, seed=0,
                            node_sampler=loader.node_sampler)
    assert isinstance(module, pl.LightningModule)
    trainer = pl.Trainer(max_epochs=3, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, accelerator="cpu")
    trainer.fit(module, datamodule=data)
    assert len(module.history) == 3 and trainer.callback_metrics["val_acc"] > 0.5
    (tested,) = trainer.test(module, datamodule=data, verbose=False)
    assert 0.5 < tested["test_acc"] <= 1.0


@pytest.mark.parametrize("overrides, found", [
    ({"train": {"sampler": "cluster"}}, "train.sampler='cluster'"),
    ({"train": {"sampler": "saint", "model": "gcn"}}, "train.sampler='saint'"),
    ({"train": {"sampler": "sign", "model": "sign"}}, "train.model='sign'"),
    ({"train": {"dist": {"nproc": 2}}}, "train.dist.nproc=2"),
    ({"dataset": {"task": "link"}}, "dataset.task='link'"),
    ({"train": {"sampler": "neighbor", "temporal": {"by": "node"}}}, "train.temporal.by='node'"),
])
def test_unsupported_combinations_name_the_engine(overrides, found):
    section = overrides.setdefault("train", {})
    section["engine"] = "lightning"
    with pytest.raises(ParamsError, match=r"train\.engine='lightning' supports .*full or "
                                          r"neighbor.*found .*" + found.replace(".", r"\.")):
        params_from_dict(overrides)


def test_train_stage_with_lightning_writes_what_evaluate_reads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = {"dataset": {"synthetic": {"num_nodes": 800, "num_features": 16, "num_classes": 3}},
              "train": {"epochs": 15, "patience": 5, "hidden": 16, "sampler": "neighbor",
                        "neighbor": {"num_neighbors": [5, 5]}, "batch_size": 128},
              "baseline": {"epochs": 15, "patience": 5, "hidden": 16}}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    for stage in ("prepare", "split", "baseline", "train"):
        assert main([stage]) == 0, stage
    plain = {name: (tmp_path / name).read_bytes()
             for name in ("metrics/train.json", "metrics/train_history.csv")}
    plain_predictions = io.read_predictions(tmp_path / "data/model")

    params["train"]["engine"] = "lightning"
    path.write_text(yaml.safe_dump(params))
    assert main(["train"]) == 0
    for name, content in plain.items():  # the deterministic metrics come out byte-identical
        assert (tmp_path / name).read_bytes() == content, name
    predictions = io.read_predictions(tmp_path / "data/model")  # (node_id, logits)
    assert all(torch.equal(a, b) for a, b in zip(predictions, plain_predictions))
    assert (tmp_path / "data/model/model.pt").is_file()
    assert json.loads((tmp_path / "metrics/perf/train.json").read_text())["engine"] == "lightning"

    assert main(["evaluate"]) == 0
    evaluation = json.loads((tmp_path / "metrics/eval.json").read_text())
    assert evaluation["gnn"]["test"]["accuracy"] > 0.6
