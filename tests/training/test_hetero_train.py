"""Typed graphs at scale: neighbor mini-batches, AMP, layer-wise evaluation, DDP, resume."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
import yaml

from gnnpipe.config import params_from_dict
from gnnpipe.hetero.inputs import phase_inputs
from gnnpipe.hetero.loader import align_typed_edge_times
from gnnpipe.sampling.builders import typed_neighbor_batches
from gnnpipe.hetero.models import build_hetero_model
from gnnpipe.data.graph import Csr
from gnnpipe.training.inference import LayerwiseInference, cost_prefix, row_blocks
from gnnpipe.training.loop import LoopOptions
from gnnpipe.runtime.rng import make_rng
from gnnpipe.io.common import role_codes
from gnnpipe.training.train import fit
from split_oracle import split_nodes
from gnnpipe.cli import main

from conftest import run_stages
from test_hetero_data import small_hetero

TRAIN = {"epochs": 6, "patience": 6, "hidden": 16, "heads": 2, "dropout": 0.2, "lr": 0.02,
         "sampler": "neighbor", "batch_size": 64, "neighbor": {"num_neighbors": [4, 3]}}


@pytest.fixture(scope="module")
def node_task():
    graph = small_hetero(feature_signal=0.5)
    params = params_from_dict({"dataset": {"layout": "typed"}, "train": TRAIN})
    split = split_nodes(graph, params.split.node, make_rng(0, "split"))
    return graph, params, split


def _dims(graph):
    return {t: x.shape[1] for t, x in graph.x.items()}


def _fit_neighbor(graph, cfg, split, amp=False, seed=0):
    train_nodes = np.flatnonzero(split.roles == "train")
    loader = typed_neighbor_batches(graph, split.message_graphs["train"], train_nodes,
                                    cfg.neighbor, cfg.batch_size, 7)
    build = lambda: build_hetero_model(cfg.model, graph.metadata(), _dims(graph),  # noqa: E731
                                       graph.num_classes, graph.target, cfg)
    return fit(build, phase_inputs(graph, split.message_graphs), graph.y,
               role_codes(split.roles), cfg, seed, loader=loader,
               options=LoopOptions(amp=amp)), loader


def test_neighbor_batches_hold_only_train_graph_edges_seeds_first(node_task):
    graph, params, split = node_task
    train_graph = split.message_graphs["train"]
    train_nodes = np.flatnonzero(split.roles == "train")
    loader = typed_neighbor_batches(graph, train_graph, train_nodes, params.train.neighbor, 64, 7)
    assert len(loader) == -(-train_nodes.size // 64)
    loader.node_sampler.set_epoch(1)
    seen = []
    for raw in loader.loader:  # the HeteroData batch: n_id maps local ids back to the graph
        for edge_type in graph.edge_types:
            ei = raw[edge_type].edge_index
            src = raw[edge_type[0]].n_id[ei[0]]
            dst = raw[edge_type[2]].n_id[ei[1]]
            keys = set((train_graph[edge_type].indices * 10**6 +
                        train_graph[edge_type].targets()).tolist())
            assert set((src * 10**6 + dst).tolist()) <= keys, edge_type  # no held-out edge
        seen.append(raw["paper"].n_id[:raw["paper"].batch_size])
    assert sorted(torch.cat(seen).tolist()) == train_nodes.tolist()  # every seed once
    batch = next(iter(loader))
    assert set(batch.edge_index) == set(graph.edge_types)  # every edge type, (2, 0) if none
    assert batch.rows == slice(None, batch.target.numel()) and batch.target.numel() <= 64


@pytest.mark.parametrize("model", ["sage", "hgt", "rgcn"])
def test_neighbor_training_learns_and_is_deterministic(node_task, model):
    graph, params, split = node_task
    cfg = dataclasses.replace(params.train, model=model)
    a, loader = _fit_neighbor(graph, cfg, split)
    b, _ = _fit_neighbor(graph, cfg, split)
    assert torch.equal(a.logits, b.logits) and a.history == b.history
    assert a.logits.shape == (600, 3) and a.summary["best_val_acc"] > 0.5  # chance: 1/3
    assert len(a.perf_history[0]) and a.perf_history[0]["batches"] == len(loader)


def test_amp_trains_typed_models_in_bfloat16(node_task):
    graph, params, split = node_task
    cfg = dataclasses.replace(params.train, model="sage")
    amp, _ = _fit_neighbor(graph, cfg, split, amp=True)
    plain, _ = _fit_neighbor(graph, cfg, split)
    assert amp.logits.dtype == torch.float32 and torch.isfinite(amp.logits).all()
    assert amp.history != plain.history  # autocast did change the arithmetic
    assert amp.summary["best_val_acc"] > 0.5


@pytest.mark.parametrize("model", ["sage", "rgcn"])
@pytest.mark.parametrize("out", ["target", "all"])
def test_layerwise_equals_the_full_forward(node_task, model, out):
    graph, params, split = node_task
    cfg = dataclasses.replace(params.train, model=model)
    torch.manual_seed(0)
    net = build_hetero_model(model, graph.metadata(), _dims(graph), 3, "paper", cfg, out=out)
    net.eval()
    phase = split.message_graphs["val"]
    full = net(graph.x, {e: csr.edge_index() for e, csr in phase.items()})
    sizes = graph.num_nodes_dict
    engine = LayerwiseInference(phase, sizes, block_edges=97)  # many small blocks
    assert len(engine.blocks("paper")) > 10
    blocked = engine(net, graph.x)
    assert blocked.shape == full.shape and torch.allclose(blocked, full, atol=1e-5)
    assert engine(net, graph.x) is blocked  # memoised on unchanged weights
    with torch.no_grad():
        next(net.parameters()).add_(1.0)
    assert not torch.allclose(engine(net, graph.x), blocked)


def test_destination_blocks_tile_the_rows_within_the_budget():
    csrs = [Csr(torch.tensor([0, 2, 2, 9, 10]), torch.zeros(10, dtype=torch.int64)),
            Csr(torch.tensor([0, 1, 1, 1, 3]), torch.zeros(3, dtype=torch.int64))]
    # row costs (in-edges over both edge types + 1): 4, 1, 8, 4
    blocks = row_blocks(cost_prefix(csrs, 4), block_cost=5)
    assert blocks == [(0, 2), (2, 3), (3, 4)]  # row 2 alone costs 8 > 5: its own block
    assert row_blocks(cost_prefix(csrs, 4), block_cost=100) == [(0, 4)]


def test_layerwise_inference_in_fit_gives_the_full_forwards_predictions(node_task):
    graph, params, split = node_task
    cfg = dataclasses.replace(params.train, model="sage", sampler="full", epochs=3, patience=3)
    build = lambda: build_hetero_model("sage", graph.metadata(), _dims(graph), 3,  # noqa: E731
                                       "paper", cfg)
    full = fit(build, phase_inputs(graph, split.message_graphs), graph.y,
               role_codes(split.roles), cfg, 0)
    layer = dataclasses.replace(cfg, inference=dataclasses.replace(cfg.inference,
                                                                   mode="layerwise",
                                                                   block_edges=200))
    inputs = phase_inputs(graph, split.message_graphs, layer)
    assert isinstance(inputs["val"].layerwise, LayerwiseInference)
    blocked = fit(build, inputs, graph.y, role_codes(split.roles), layer, 0)
    assert blocked.perf["eval_inference"] == "layerwise"
    assert torch.allclose(blocked.logits, full.logits, atol=1e-5)
    auto = phase_inputs(graph, split.message_graphs, cfg)  # auto: a small graph stays full
    assert auto["val"].layerwise is None


def test_edge_times_follow_edges_into_the_message_graph():
    full = Csr(torch.tensor([0, 3, 5]), torch.tensor([4, 1, 7, 2, 7]))  # columns unsorted
    times = np.array([40, 10, 70, 20, 71])
    sub = Csr(torch.tensor([0, 1, 3]), torch.tensor([7, 7, 2]))
    assert align_typed_edge_times(full, times, sub, num_src=8).tolist() == [70, 71, 20]
    with pytest.raises(ValueError, match="holds typed edges the prepared graph lacks"):
        align_typed_edge_times(full, times, Csr(torch.tensor([0, 1, 1]), torch.tensor([5])), 8)


# ---------------- the train stage (a killed run, and the DDP ranks, in processes of their own)
STAGE = {
    "dataset": {"layout": "typed", "synthetic": {"num_nodes": 600, "num_features": 8,
                              "num_classes": 3, "num_authors": 150, "num_venues": 6}},
    "train": {"model": "sage", "epochs": 6, "patience": 6, "hidden": 16, "dropout": 0.0,
              "lr": 0.02, "sampler": "neighbor", "batch_size": 64,
              "neighbor": {"num_neighbors": [4, 3]}, "checkpoint": {"every": 2}},
}


def _gnnpipe(args: list[str], cwd: Path, timeout: float = 300, **env):
    return subprocess.run([sys.executable, "-m", "gnnpipe", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "GNNPIPE_PROGRESS": "0", "OMP_NUM_THREADS": "1",
                               **env})


@pytest.fixture(scope="module")
def typed_upstream(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("typed")
    (folder / "params.yaml").write_text(yaml.safe_dump(STAGE))
    run_stages(folder, ("prepare", "split"))
    return folder


def _here(args: list[str], cwd: Path, capfd, **env) -> subprocess.CompletedProcess:
    """``gnnpipe <args>`` in this process (no interpreter start for the stage; its ranks are
    still torchrun's processes), with stdout / stderr of it and of every process it started."""
    capfd.readouterr()  # only this run's output
    with contextlib.chdir(cwd), mock.patch.dict(os.environ, {"OMP_NUM_THREADS": "1", **env}):
        code = main(args)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


def _stage_args(folder: Path, out: str, params: dict) -> list[str]:
    (folder / f"{out}.yaml").write_text(yaml.safe_dump(params))
    return ["train", "--params", f"{out}.yaml", "--out", f"data/{out}",
            "--metrics", f"{out}/train.json", "--history", f"{out}/history.csv",
            "--perf", f"{out}/perf.json", "--perf-history", f"{out}/perf_history.csv",
            "--checkpoint", f"{out}/checkpoint.pt"]


def _train(folder: Path, out: str, train: dict, capfd=None, **env):
    """The train stage on ``STAGE`` + ``train``: in this process given ``capfd``, else in a
    process of its own (one that must die: a fault kills it)."""
    args = _stage_args(folder, out, {**STAGE, "train": {**STAGE["train"], **train}})
    return _gnnpipe(args, folder, **env) if capfd is None else _here(args, folder, capfd, **env)


def test_killed_typed_neighbor_run_resumes_to_identical_predictions(typed_upstream, capfd):
    from gnnpipe.io.atomic import FAULT_ENV

    whole = _train(typed_upstream, "whole", {}, capfd)
    assert whole.returncode == 0, whole.stderr[-2000:]
    killed = _train(typed_upstream, "resumed", {}, **{FAULT_ENV: "checkpoint.pt@2"})
    assert killed.returncode == -signal.SIGKILL  # died writing the epoch-4 checkpoint
    resumed = _train(typed_upstream, "resumed", {}, capfd)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from resumed/checkpoint.pt (epoch 2)" in resumed.stdout
    for name in ("train.json", "history.csv"):
        assert (typed_upstream / "resumed" / name).read_text() == \
            (typed_upstream / "whole" / name).read_text()
    assert (typed_upstream / "data/resumed/predictions.pt").read_bytes() == \
        (typed_upstream / "data/whole/predictions.pt").read_bytes()
    metrics = json.loads((typed_upstream / "whole/train.json").read_text())
    assert metrics["sampler"] == "neighbor" and metrics["node_type"] == "paper"
    assert "hetero" not in metrics and metrics["batches_per_epoch"] == 6  # 360 train papers / 64


def test_two_gloo_ranks_match_one_process_with_the_doubled_batch(typed_upstream, capfd):
    # every in-edge (-1 fan-outs) and no dropout: a seed's logits do not depend on its batch,
    # so two ranks of 180 seeds step exactly as one process with all 360
    exact = {"neighbor": {"num_neighbors": [-1, -1]}, "checkpoint": {"every": 0}, "epochs": 4,
             "patience": 4}
    one = _train(typed_upstream, "one", {**exact, "batch_size": 360}, capfd)
    assert one.returncode == 0, one.stderr[-2000:]
    # the ranks also split layer-wise evaluation blocks (a collective), the same logits as full
    two = _train(typed_upstream, "two", {**exact, "batch_size": 180, "dist": {"nproc": 2},
                                         "inference": {"mode": "layerwise", "block_edges": 500}},
                 capfd)
    assert two.returncode == 0, two.stderr[-2000:]
    one_rows = (typed_upstream / "one/history.csv").read_text().splitlines()[1:]
    two_rows = (typed_upstream / "two/history.csv").read_text().splitlines()[1:]
    assert len(one_rows) == len(two_rows) == 4
    for a, b in zip(one_rows, two_rows):
        fa, fb = [float(v) for v in a.split(",")], [float(v) for v in b.split(",")]
        assert abs(fa[1] - fb[1]) < 1e-4 and fa[2:] == pytest.approx(fb[2:], abs=1e-3), (a, b)
    perf = json.loads((typed_upstream / "two/perf.json").read_text())
    assert perf["world_size"] == 2 and len(perf["ranks"]) == 2
    assert perf["eval_inference"] == "layerwise"
    from gnnpipe.io.models import read_predictions

    two_id, two_logits = read_predictions(typed_upstream / "data/two")
    one_id, one_logits = read_predictions(typed_upstream / "data/one")
    assert torch.equal(two_id, one_id) and two_logits.shape == (600, 3)
    assert torch.allclose(two_logits, one_logits, atol=1e-3)


LINK = {"seed": 1,  # 1404 train supervision edges: an even count, so no rank pads its share
        "dataset": {**STAGE["dataset"], "task": "link"},
        "split": {"link": {"num_val_negatives": 20, "num_test_negatives": 20}},
        # lr: a steady descent, so the ranks' rounding (a mean of two half-batch gradients)
        # is not amplified into the figures compared below
        "train": {**STAGE["train"], "sampler": "link_neighbor", "checkpoint": {"every": 0},
                  "epochs": 3, "patience": 3, "batch_size": 256, "lr": 0.005,
                  "neighbor": {"num_neighbors": [-1, -1]}}}


@pytest.fixture(scope="module")
def link_upstream(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("typed_link")
    (folder / "params.yaml").write_text(yaml.safe_dump(LINK))
    run_stages(folder, ("prepare", "split"))
    return folder


def _train_link(folder: Path, out: str, train: dict, capfd=None, **env):
    """``_train`` on ``LINK`` + ``train``."""
    args = _stage_args(folder, out, {**LINK, "train": {**LINK["train"], **train}})
    return _gnnpipe(args, folder, **env) if capfd is None else _here(args, folder, capfd, **env)


def test_typed_link_neighbor_on_two_ranks_matches_one_process(link_upstream, capfd):
    # every in-edge (-1 fan-outs), no dropout, one batch: two ranks of 702 pairs step exactly
    # as one process with all 1404 (the loader gives both the same negatives)
    one = _train_link(link_upstream, "one", {"batch_size": 2048}, capfd)
    assert one.returncode == 0, one.stderr[-2000:]
    two = _train_link(link_upstream, "two", {"batch_size": 1024, "dist": {"nproc": 2}}, capfd)
    assert two.returncode == 0, two.stderr[-2000:]
    metrics = {k: json.loads((link_upstream / k / "train.json").read_text())
               for k in ("one", "two")}
    assert metrics["one"]["sampler"] == "link_neighbor" and "hetero" not in metrics["one"]
    assert metrics["one"]["edge_type"] == "author__writes__paper"
    assert metrics["one"]["batches_per_epoch"] == metrics["two"]["batches_per_epoch"] == 1
    one_rows = (link_upstream / "one/history.csv").read_text().splitlines()[1:]
    two_rows = (link_upstream / "two/history.csv").read_text().splitlines()[1:]
    assert len(one_rows) == len(two_rows) == 3
    for epoch, (a, b) in enumerate(zip(one_rows, two_rows)):
        fa, fb = [float(v) for v in a.split(",")], [float(v) for v in b.split(",")]
        # the first loss is before any step; Adam's normalised steps then amplify rounding
        assert abs(fa[1] - fb[1]) < (1e-4 if epoch == 0 else 2e-3), (a, b)
        assert abs(fa[2] - fb[2]) < 1e-3, (a, b)
    assert json.loads((link_upstream / "two/perf.json").read_text())["world_size"] == 2
    assert sorted(p.name for p in (link_upstream / "data/two").iterdir()) == sorted(
        p.name for p in (link_upstream / "data/one").iterdir())  # rank 0 wrote the outputs


class _Timed:
    """The typed graph with node times, as the typed tables will carry them (``node_time``)."""

    def __init__(self, graph, node_time):
        self._graph, self.node_time = graph, node_time

    def __getattr__(self, name):
        return getattr(self._graph, name)


def test_node_temporal_batches_draw_no_neighbour_later_than_the_seed(node_task):
    from gnnpipe.hetero.loader import typed_temporal

    graph, params, split = node_task
    rng = np.random.default_rng(3)
    times = {t: torch.from_numpy(rng.integers(0, 100, graph.num_nodes_dict[t]))
             for t in graph.node_types}
    timed = _Timed(graph, times)
    seeds = np.flatnonzero(split.roles == "train")[:40]
    temporal = typed_temporal("node", "uniform", timed, split.message_graphs["train"], seeds)
    assert temporal["input_time"].tolist() == times["paper"][seeds].tolist()
    loader = typed_neighbor_batches(timed, split.message_graphs["train"], seeds,
                                    params.train.neighbor, 1, 7, temporal=temporal)
    later = 0
    for raw in loader.loader:  # one seed per batch: every drawn source is no later than it
        seed_time = int(times["paper"][raw["paper"].n_id[0]])
        for edge_type in graph.edge_types:
            src = raw[edge_type[0]].n_id[raw[edge_type].edge_index[0]]
            later += int((times[edge_type[0]][src] > seed_time).sum())
    assert later == 0
    untimed = typed_neighbor_batches(graph, split.message_graphs["train"], seeds,
                                     params.train.neighbor, 1, 7)
    assert sum(int((times[e[0]][raw[e[0]].n_id[raw[e].edge_index[0]]] >
                    int(times["paper"][raw["paper"].n_id[0]])).sum())
               for raw in untimed.loader for e in graph.edge_types) > 0  # the check can fail
    with pytest.raises(ValueError, match="train.temporal.by='node' takes each seed's time"):
        typed_temporal("node", "uniform", graph, split.message_graphs["train"], seeds)


def test_killed_typed_link_neighbor_run_under_amp_resumes_to_identical_scores(link_upstream,
                                                                               capfd):
    from gnnpipe.io.atomic import FAULT_ENV

    run = {"amp": True, "epochs": 4, "patience": 4, "checkpoint": {"every": 2},
           "neighbor": {"num_neighbors": [4, 3]}}
    whole = _train_link(link_upstream, "lwhole", run, capfd)
    assert whole.returncode == 0, whole.stderr[-2000:]
    assert json.loads((link_upstream / "lwhole/perf.json").read_text())["amp"] is True
    killed = _train_link(link_upstream, "lresumed", run, **{FAULT_ENV: "checkpoint.pt@2"})
    assert killed.returncode == -signal.SIGKILL  # died writing the epoch-4 checkpoint
    resumed = _train_link(link_upstream, "lresumed", run, capfd)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from lresumed/checkpoint.pt (epoch 2)" in resumed.stdout
    for name in ("train.json", "history.csv"):
        assert (link_upstream / "lresumed" / name).read_text() == \
            (link_upstream / "lwhole" / name).read_text()
    for f in (link_upstream / "data/lwhole").iterdir():
        assert (link_upstream / "data/lresumed" / f.name).read_bytes() == f.read_bytes(), f.name
