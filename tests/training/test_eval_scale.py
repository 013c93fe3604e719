"""Layer-wise evaluation everywhere (``train.inference``): the link task, the Lightning engine and
shard-mode evaluation give the embeddings / scores / logits of their full-graph forward to 1e-5,
and the train / predict stages wire the mode in (in-process stage runs on a 90-node graph)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.config import (InferenceParams, LinkSplitParams, NodeSplitParams, TrainParams,
                            params_from_dict)
from gnnpipe.training.inference import NODE, LayerwiseInference, csr_view
from link_oracle import split_links, training_sampler
from gnnpipe.training.link_train import embed, encode, fit_link
from gnnpipe.training.models import build_model
from gnnpipe.graphops.partition import assign_parts
from shard_oracle import build_shard
from graph_oracle import prepare
from prepared_oracle import embedding_matrix
from gnnpipe.runtime.rng import make_rng
from gnnpipe.training.sharding import NodeRows, ShardEvaluator
from split_oracle import split_nodes
from gnnpipe.io.common import PHASES, role_codes
from gnnpipe.training.train import PhaseInput, build_inputs
from gnnpipe.data.graph import EDGE, phase_csrs

from conftest import as_graph, small_params
from test_predict import TRAIN, _features, _graph, _ids, _params, _prepare, _roles

MODELS = ("gcn", "sage", "gat")  # what layer-wise blocks (mlp has no edges to block)
FULL = InferenceParams(mode="full")
LAYERED = InferenceParams(mode="layerwise", block_edges=300)  # several blocks on these graphs
TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def graph():
    params = small_params(num_nodes=400)
    return prepare(params.dataset, params.seed)[0].target_view()


def _cfg(model: str, inference: InferenceParams, **extra) -> TrainParams:
    return TrainParams(**{"model": model, "hidden": 16, "epochs": 4, "patience": 4, "lr": 0.05,
                          "inference": inference, **extra})


# ------------------------------------------------------------------------------------ link task
@pytest.fixture(scope="module")
def link_data(graph):
    link = split_links(as_graph(graph), LinkSplitParams(), make_rng(0, "split"))
    visible = torch.cat([link.edges["message"], link.edges["train_supervision"]], 1).numpy()
    return link, training_sampler(visible[0], visible[1], graph.num_nodes)


@pytest.mark.parametrize("model, extra", [("gcn", {}), ("sage", {}), ("gat", {}),
                                          ("sage", {"jk": "cat"})])
def test_link_embeddings_layer_by_layer_are_the_encoders(graph, link_data, model, extra):
    link, _ = link_data
    cfg = _cfg(model, LAYERED, **extra)
    torch.manual_seed(0)
    encoder = build_model(model, graph.x.shape[1], cfg.hidden, cfg)
    test = phase_csrs(link.message_graphs)["test"]
    inputs = PhaseInput(graph.x, test.edge_index(), LayerwiseInference(*csr_view(test), 300))
    assert len(inputs.layerwise.blocks(NODE)) > 2
    with torch.no_grad():
        want = encode(encoder.eval(), inputs)
    torch.testing.assert_close(embed(encoder, inputs), want, **TOL)


@pytest.mark.parametrize("model", MODELS)
def test_link_training_scores_layer_by_layer_as_full_forwards(graph, link_data, model):
    link, sampler = link_data
    runs = {}
    for name, inference in (("full", FULL), ("layerwise", LAYERED)):
        cfg = _cfg(model, inference)
        inputs = build_inputs(graph.x, message_graphs=phase_csrs(link.message_graphs), cfg=cfg)
        assert (inputs["val"].layerwise is not None) == (name == "layerwise")
        runs[name] = fit_link(lambda cfg=cfg: build_model(model, graph.x.shape[1], cfg.hidden, cfg),
                              inputs, link.edges, link.negatives, sampler, cfg, 0)
    full, layered = runs["full"], runs["layerwise"]
    assert layered.perf["eval_inference"] == "layerwise" and "eval_inference" not in full.perf
    for phase in ("val", "test"):
        for got, want in zip(layered.scores[phase], full.scores[phase]):
            torch.testing.assert_close(got, want, **TOL)
    assert layered.summary["best_epoch"] == full.summary["best_epoch"]
    for a, b in zip(layered.history, full.history):
        assert a["train_loss"] == b["train_loss"]  # training itself is untouched
        assert a["val_mrr"] == pytest.approx(b["val_mrr"], abs=1e-5)


# ------------------------------------------------------------------------------- lightning
@pytest.mark.parametrize("model", MODELS)
def test_lightning_evaluates_layer_by_layer_as_its_full_forward(graph, model):
    from gnnpipe.training.lightning import fit_lightning

    roles = role_codes(split_nodes(as_graph(graph), NodeSplitParams(), make_rng(0, "split")).roles)
    runs = {}
    for name, inference in (("full", FULL), ("layerwise", LAYERED)):
        cfg = _cfg(model, inference, epochs=3, patience=3)
        inputs = build_inputs(graph.x, message_graphs={p: graph.csr for p in PHASES}, cfg=cfg)
        runs[name] = fit_lightning(
            lambda cfg=cfg: build_model(model, graph.x.shape[1], graph.num_classes, cfg),
            inputs, graph.y, roles, cfg, 0)
    full, layered = runs["full"], runs["layerwise"]
    assert layered.perf["eval_inference"] == "layerwise" and "eval_inference" not in full.perf
    torch.testing.assert_close(layered.logits, full.logits, **TOL)
    assert layered.summary == full.summary  # same accuracies, same best epoch
    assert [r["val_acc"] for r in layered.history] == [r["val_acc"] for r in full.history]


# ------------------------------------------------------------------------------------- shards
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("halo", [1, 2])  # 1 < num_layers: the shard graph itself still agrees
def test_shard_evaluation_layer_by_layer_is_the_shard_forward(graph, model, halo):
    from gnnpipe.config import PartitionParams

    parts = assign_parts(graph.csr, PartitionParams(num_parts=4, method="bfs"),
                         make_rng(0, "partition"))
    shards = [build_shard(graph.csr, parts, p, 4, halo) for p in range(4)]
    ids = torch.unique(torch.cat([s.node_id for s in shards[:3]]))
    rows = NodeRows(graph.x[ids], graph.y[ids], ids)
    roles = torch.zeros(ids.numel(), dtype=torch.int8)  # every row a train node
    cfg = _cfg(model, LAYERED)
    torch.manual_seed(0)
    net = build_model(model, graph.x.shape[1], graph.num_classes, cfg).eval()
    full = ShardEvaluator(shards[:3], rows, roles, _cfg(model, FULL))
    layered = ShardEvaluator(shards[:3], rows, roles, cfg)
    assert layered.layerwise and not full.layerwise
    assert not ShardEvaluator(shards[:3], rows, roles,
                              _cfg(model, InferenceParams())).layerwise  # auto
    (id_full, out_full), (id_lw, out_lw) = full.logits(net), layered.logits(net)
    assert torch.equal(id_full, id_lw)
    assert sorted(id_lw.tolist()) == np.flatnonzero(parts < 3).tolist()
    torch.testing.assert_close(out_lw, out_full, **TOL)


# ------------------------------------------------------------------------------------ params
@pytest.mark.parametrize("sections", [
    {"dataset": {"task": "link"}},
    {"train": {"engine": "lightning"}},
    {"train": {"sampler": "cluster", "dist": {"shard": "partition"}}},
    {"dataset": {"task": "link", "layout": "typed"}, "train": {"model": "rgcn"}},
])
def test_layerwise_is_accepted_for_links_lightning_and_shards(sections):
    train = {**sections.get("train", {}), "inference": {"mode": "layerwise"}}
    params = params_from_dict({**sections, "train": train})
    assert params.train.inference.mode == "layerwise"


# ------------------------------------------------------------------------- stages, in process
def _twins(root, setup, train: dict, stages: tuple[str, ...], block_edges: int = 40,
           **sections) -> tuple:
    """Folders ``full`` and ``layerwise`` under ``root``, each given ``setup(folder)`` (inputs)
    and params differing only in ``train.inference.mode``, each run through ``stages``."""
    folders = []
    for mode in ("full", "layerwise"):
        folder = root / mode
        folder.mkdir()
        setup(folder)
        _params(folder, **sections, train={**train, "inference": {"mode": mode,
                                                                   "block_edges": block_edges}})
        for stage in stages:
            cwd = os.getcwd()
            os.chdir(folder)
            try:
                assert main([stage]) == 0, stage
            finally:
                os.chdir(cwd)
        folders.append(folder)
    return tuple(folders)


def _same_link_scores(full, layered) -> None:
    assert io.read_json(layered / "metrics/perf/train.json")["eval_inference"] == "layerwise"
    assert "eval_inference" not in io.read_json(full / "metrics/perf/train.json")
    assert io.read_json(layered / "metrics/predict.json")["inference"] == "layerwise"
    assert io.read_json(full / "metrics/predict.json")["inference"] == "full"
    want, got = (io.read_link_predictions(f / "data/model") for f in (full, layered))
    for phase in ("val", "test"):
        for a, b in zip(got[phase], want[phase]):
            torch.testing.assert_close(a, b, **TOL)


def _labelled_graph():
    """test_predict's 90-node graph with every label valid (link and shard rows need them)."""
    from test_predict import Graph, C  # noqa: N811 - that module's constant names

    graph = _graph()
    return Graph.homogeneous(graph.csr, graph.x, graph.y.clamp(min=0), C).target_view()


def test_link_stages_train_and_predict_layer_by_layer(tmp_path):
    graph = _labelled_graph()
    full, layered = _twins(tmp_path, lambda f: _prepare(f, graph, _ids(), None), {},
                           ("split", "train", "predict"), dataset={"task": "link"},
                           split={"link": {"num_val_negatives": 5, "num_test_negatives": 5}})
    _same_link_scores(full, layered)
    emb = [embedding_matrix(io.read_embeddings(f / "data/predict")) for f in (full, layered)]
    np.testing.assert_allclose(emb[1], emb[0], atol=1e-5)
    assert emb[0].shape == (graph.num_nodes, TRAIN["hidden"])


def test_shard_mode_train_stage_evaluates_layer_by_layer(tmp_path):
    graph = _labelled_graph()
    roles = _roles(_graph().y)  # the unlabelled nodes (label 0 in graph) are in no split

    def setup(folder):
        _prepare(folder, graph, _ids(), None)
        io.write_split(folder / "data/split", as_graph(graph),
                       {p: {EDGE: graph.csr} for p in PHASES},
                       {"task": "node", "mode": "transductive"}, roles=roles)
        _features(folder, graph)

    full, layered = _twins(tmp_path, setup, {"sampler": "cluster", "dist": {"shard": "partition"},
                                             "cluster": {"parts_per_batch": 3}},
                           ("partition", "train"), partition={"num_parts": 3, "halo_hops": 2})
    ranks = io.read_json(layered / "metrics/perf/train.json")["ranks"]
    assert [r.get("eval_inference") for r in ranks] == ["layerwise"]
    assert "eval_inference" not in io.read_json(full / "metrics/perf/train.json")["ranks"][0]
    (id_lw, got), (id_full, want) = (io.read_predictions(f / "data/model")
                                     for f in (layered, full))
    assert torch.equal(id_lw, id_full)
    torch.testing.assert_close(got, want, **TOL)
    assert (io.read_json(layered / "metrics/train.json")["best_val_acc"]
            == io.read_json(full / "metrics/train.json")["best_val_acc"])


def test_typed_link_stages_train_and_predict_layer_by_layer(tmp_path):
    # sage (to_hetero); rgcn takes the same wiring (tests/training/test_hetero_train.py blocks both)
    hetero = {"num_nodes": 240, "num_features": 8, "num_classes": 3,
              "num_authors": 80, "num_venues": 6}
    full, layered = _twins(tmp_path, lambda f: None,
                           {"model": "sage", "epochs": 3, "patience": 3},
                           ("prepare", "split", "train", "predict"), block_edges=200,
                           dataset={"task": "link", "layout": "typed", "synthetic": hetero},
                           split={"link": {"num_val_negatives": 5, "num_test_negatives": 5}})
    _same_link_scores(full, layered)
    for node_type in ("paper", "author", "venue"):
        emb = [embedding_matrix(io.read_embeddings(f / "data/predict", node_type))
               for f in (full, layered)]
        np.testing.assert_allclose(emb[1], emb[0], atol=1e-5)
