"""Training: the GNN uses the graph, runs are deterministic, phases see only their own graph."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gnnpipe.config import (NodeSplitParams, ParamsError, PropagateParams, TrainParams,
                            params_from_dict)
from gnnpipe.training.models import build_model
from gnnpipe.graphops.propagate import propagate
from gnnpipe.io.common import role_codes
from gnnpipe.runtime.rng import make_rng
from split_oracle import split_nodes
from gnnpipe.training.train import build_inputs, fit
from gnnpipe.data.graph import phase_csrs
from conftest import as_graph

FAST = TrainParams(epochs=60, patience=20, hidden=32)


def _accuracy(result, graph, roles, role):
    pred = torch.empty(graph.num_nodes, dtype=torch.int64)
    pred[result.node_id] = result.logits.argmax(1)
    nodes = torch.from_numpy(np.flatnonzero(roles == role))
    return float((pred[nodes] == graph.y[nodes]).double().mean())


def _train(graph, roles, model="sage", cfg=FAST, seed=0, message_graphs=None, **kw):
    cfg = dataclasses.replace(cfg, model=model)
    inputs = build_inputs(graph.x, message_graphs=message_graphs or
                          {p: graph.csr for p in ("train", "val", "test")})
    if model == "mlp":
        inputs = build_inputs(graph.x)
    return fit(lambda: build_model(model, graph.x.shape[1], graph.num_classes, cfg), inputs,
               graph.y, role_codes(roles), cfg, seed, **kw)


@pytest.fixture
def split_roles(small_graph):
    return split_nodes(as_graph(small_graph), NodeSplitParams(), make_rng(0, "split")).roles


def test_gnn_beats_the_mlp_on_a_homophilous_graph(small_graph, split_roles):
    gnn = _accuracy(_train(small_graph, split_roles, "sage"), small_graph, split_roles, "test")
    mlp = _accuracy(_train(small_graph, split_roles, "mlp"), small_graph, split_roles, "test")
    assert gnn > mlp + 0.15, (gnn, mlp)


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_other_graph_models_learn(small_graph, split_roles, model):
    acc = _accuracy(_train(small_graph, split_roles, model), small_graph, split_roles, "val")
    assert acc > 0.7, acc


def test_sign_on_precomputed_hops_matches_a_graph_model(small_graph, split_roles):
    hops = [small_graph.x, *propagate(small_graph.csr, small_graph.x, PropagateParams(hops=2))]
    cfg = dataclasses.replace(FAST, model="sign", sampler="sign", batch_size=256)
    inputs = build_inputs(small_graph.x, hops={p: hops for p in ("train", "val", "test")})
    assert all(i.edge_index is None for i in inputs.values())  # no graph in the training loop
    result = fit(lambda: build_model("sign", small_graph.x.shape[1], 3, cfg, num_hops=2), inputs,
                 small_graph.y, role_codes(split_roles), cfg, 0, batch_size=cfg.batch_size)
    sign = _accuracy(result, small_graph, split_roles, "test")
    sage = _accuracy(_train(small_graph, split_roles, "sage"), small_graph, split_roles, "test")
    assert sign > sage - 0.08, (sign, sage)


def test_same_seed_same_result_and_global_rng_untouched(small_graph, split_roles):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    first = _train(small_graph, split_roles, seed=7)
    assert torch.equal(torch.rand(1), before)  # fit forked the RNG
    second = _train(small_graph, split_roles, seed=7)
    other = _train(small_graph, split_roles, seed=8)
    assert torch.equal(first.logits, second.logits)
    assert first.history == second.history
    assert not torch.equal(first.logits, other.logits)


def test_predictions_cover_each_split_node_once(small_graph, split_roles):
    result = _train(small_graph, split_roles, "mlp")
    expected = np.flatnonzero(split_roles != "unused")
    assert sorted(result.node_id.tolist()) == expected.tolist()
    assert result.logits.shape == (expected.size, small_graph.num_classes)
    assert 1 <= result.summary["best_epoch"] <= result.summary["epochs_run"]


def test_inductive_training_never_sees_test_features(small_graph):
    node_split = split_nodes(as_graph(small_graph), NodeSplitParams(mode="inductive"),
                             make_rng(0, "split"))
    roles, graphs = node_split.roles, phase_csrs(node_split.message_graphs)
    clean = _train(small_graph, roles, message_graphs=graphs)
    test_nodes = torch.from_numpy(np.flatnonzero(roles == "test"))
    poisoned_x = small_graph.x.clone()
    poisoned_x[test_nodes] = 1e3  # if anything before test time read these, it would show
    poisoned = _train(dataclasses.replace(small_graph, x=poisoned_x), roles, message_graphs=graphs)
    not_test = torch.from_numpy(roles[clean.node_id.numpy()] != "test")
    assert torch.equal(clean.logits[not_test], poisoned.logits[not_test])
    assert not torch.equal(clean.logits[~not_test], poisoned.logits[~not_test])


@pytest.mark.parametrize("mode, forwards", [("transductive", 1), ("inductive", 2)])
def test_phases_sharing_a_message_graph_share_one_evaluation_forward(small_graph, mode,
                                                                     forwards):
    from gnnpipe.training.distributed import SINGLE
    from gnnpipe.training.train import _evaluate, _phase_outputs

    node_split = split_nodes(as_graph(small_graph), NodeSplitParams(mode=mode),
                             make_rng(0, "split"))
    graphs = phase_csrs(node_split.message_graphs)
    inputs = build_inputs(small_graph.x, message_graphs=graphs)
    model = build_model("sage", small_graph.x.shape[1], small_graph.num_classes, FAST).eval()
    rows = {p: torch.from_numpy(np.flatnonzero(node_split.roles == p)) for p in ("train", "val")}
    calls = []
    model.register_forward_hook(lambda module, args, out: calls.append(out.shape[0]))
    with torch.no_grad():
        shared = _phase_outputs(model, inputs, rows, SINGLE)
        assert len(calls) == forwards  # inductive: the val phase has its own message graph
        for phase, mine in rows.items():  # the same logits each phase's own forward gives
            assert torch.equal(shared[phase], _evaluate(model, inputs[phase], mine, SINGLE))


def test_gat_rejects_hidden_not_divisible_by_heads():
    with pytest.raises(ParamsError, match="train.hidden=30 must be divisible by train.heads=4 "
                                          "for gat"):
        params_from_dict({"train": {"model": "gat", "hidden": 30, "heads": 4}})


def test_row_batches_need_a_row_model(small_graph, split_roles):
    with pytest.raises(ValueError, match="row model"):
        _train(small_graph, split_roles, "sage", batch_size=64)
