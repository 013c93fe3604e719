"""sep (gnnpipe.training.models SepConv / SepGNN): a node's own state and its neighbours' mean
through separate weights, concatenated; trimmed sampled steps and layer-wise inference equal the
full forward; on a generated heterophilous graph it beats GCN and the MLP."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_tiny_graph, small_params
from test_inference import awkward_csr

from gnnpipe.config import (NeighborParams, NodeSplitParams, ParamsError, TrainParams,
                            params_from_dict)
from graph_oracle import prepare
from gnnpipe.io.common import role_codes
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sampling.builders import neighbor_batches
from split_oracle import split_nodes
from gnnpipe.training.inference import LayerwiseInference, csr_view, layerwise_logits, plan
from gnnpipe.training.models import SepConv, SepGNN, build_model, forward_with_hidden
from gnnpipe.training.train import build_inputs, fit

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------------ the layer
# in-edges (source -> target): 0 <- 1, 2, 3; 1 <- 0, 4; 4 <- 4 (a self-loop); 5 has none
EDGES = torch.tensor([[1, 2, 3, 0, 4, 4], [0, 0, 0, 1, 1, 4]])


def _conv(out: int = 6) -> SepConv:
    torch.manual_seed(0)
    return SepConv(3, out)


def _x() -> torch.Tensor:
    return torch.randn(6, 3, generator=torch.Generator().manual_seed(1))


def test_the_layer_is_the_ego_map_beside_the_neighbour_mean_map():
    conv, x = _conv(), _x()
    adj = torch.zeros(6, 6)
    adj[EDGES[1], EDGES[0]] = 1.0  # (target, source)
    mean = adj @ x / adj.sum(1, keepdim=True).clamp(min=1)  # (6, 3); 0 for node 5
    want = torch.cat([conv.lin_ego(x), conv.lin_nbr(mean)], dim=1)
    out = conv(x, EDGES)
    assert out.shape == (6, 6)
    torch.testing.assert_close(out, want, atol=1e-6, rtol=0)
    odd = _conv(5)  # the neighbour half takes the odd channel
    assert (odd.lin_ego.out_features, odd.lin_nbr.out_features) == (2, 3)
    assert odd(x, EDGES).shape == (6, 5)


def test_an_isolated_node_reads_only_its_own_features():
    conv, x = _conv(), _x()
    out = conv(x, EDGES)[5]
    others = x.clone()
    others[:5] = torch.randn(5, 3)  # every other node changes
    torch.testing.assert_close(conv(others, EDGES)[5], out, atol=0, rtol=0)
    torch.testing.assert_close(out[3:], conv.lin_nbr.bias, atol=0, rtol=0)  # empty mean: bias
    own = x.clone()
    own[5] += 1.0
    assert not torch.allclose(conv(own, EDGES)[5, :3], out[:3])


def test_neighbours_move_only_the_neighbour_half_and_the_node_only_the_ego_half():
    conv, x = _conv(), _x()
    out = conv(x, EDGES)[0]  # node 0: in-neighbours 1, 2, 3, no self-loop
    swapped = x.clone()
    swapped[[1, 2, 3]] = x[[4, 5, 4]]  # other neighbours' features
    moved = conv(swapped, EDGES)[0]
    torch.testing.assert_close(moved[:3], out[:3], atol=0, rtol=0)
    assert (moved[3:] - out[3:]).abs().min() > 1e-4
    own = x.clone()
    own[0] = torch.tensor([2.0, -1.0, 0.5])
    moved = conv(own, EDGES)[0]
    torch.testing.assert_close(moved[3:], out[3:], atol=0, rtol=0)
    assert (moved[:3] - out[:3]).abs().min() > 1e-4


def test_the_halves_have_their_own_weights():
    """A loss on the ego half alone gives the neighbour weights no gradient, and back."""
    conv, x = _conv(), _x()
    for half, idle in ((slice(0, 3), conv.lin_nbr), (slice(3, 6), conv.lin_ego)):
        conv.zero_grad()
        conv(x, EDGES)[:, half].square().sum().backward()
        assert float(idle.weight.grad.abs().max()) == 0.0
        busy = conv.lin_ego if idle is conv.lin_nbr else conv.lin_nbr
        assert float(busy.weight.grad.abs().max()) > 0.0


def test_bipartite_call_equals_the_full_call_on_the_targets():
    """What the trimmed forward calls: sources ``x[:n_in]``, targets ``x[:n_out]``."""
    conv, x = _conv(), _x()
    keep = EDGES[1] < 2  # edges into targets 0, 1
    out = conv((x, x[:2]), EDGES[:, keep], size=(6, 2))
    torch.testing.assert_close(out, conv(x, EDGES)[:2], atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------------ the model
def test_the_model_adds_skips_norms_and_a_head():
    """eval mode: h1 = relu(LN(conv0(x))), h2 = relu(LN(conv1(h1))) + h1, logits = lin(h2)
    (train.jk none: a head over the last layer; cat: over every layer)."""
    tiny = make_tiny_graph(20)
    cfg = TrainParams(model="sep", hidden=8, num_layers=2)
    torch.manual_seed(0)
    model = build_model("sep", 2, 3, cfg).eval()
    assert isinstance(model, SepGNN) and model.jk_mode == "last"
    assert all(isinstance(c, SepConv) and c.out_channels == 8 for c in model.convs)
    x, ei = tiny.x, tiny.csr.edge_index()
    h1 = torch.relu(model.norms[0](model.convs[0](x, ei)))
    h2 = torch.relu(model.norms[1](model.convs[1](h1, ei))) + h1
    torch.testing.assert_close(model(x, ei), model.lin(h2), atol=1e-6, rtol=0)
    out, hidden = forward_with_hidden(model, x, ei)
    torch.testing.assert_close(hidden, h2, atol=1e-6, rtol=0)
    torch.testing.assert_close(out, model.lin(h2), atol=1e-6, rtol=0)
    cat = build_model("sep", 2, 3, TrainParams(model="sep", hidden=8, num_layers=3, jk="cat"))
    assert cat.jk_mode == "cat" and cat.lin.in_features == 24


# (sampled node and link batches: sep is a case of tests/training/test_trim.py's trimming tests)


# ---------------------------------------------------------------------------- layer-wise blocks
@pytest.mark.parametrize("jk", ["none", "cat", "max"])
@pytest.mark.parametrize("block_edges", [1, 9, 70, 10**6])
def test_layerwise_logits_and_hidden_equal_the_full_forward(jk, block_edges):
    csr = awkward_csr()  # self-loops, duplicates, a hub, rows without in-edges
    x = torch.randn(csr.num_nodes, 6, generator=torch.Generator().manual_seed(1))
    x[:, 0] = torch.arange(csr.num_nodes, dtype=torch.float32)  # a wrong gather shows loudly
    torch.manual_seed(0)
    model = build_model("sep", 6, 4, TrainParams(model="sep", hidden=8, num_layers=3, jk=jk,
                                                 dropout=0.5)).eval()
    engine = LayerwiseInference(*csr_view(csr), block_edges)
    out, hidden = layerwise_logits(model, x, engine, with_hidden=True)
    with torch.no_grad():
        want, want_hidden = forward_with_hidden(model, x, csr.edge_index())
        torch.testing.assert_close(want, model(x, csr.edge_index()), atol=1e-5, rtol=0)
    assert out.shape == (csr.num_nodes, 4) and engine.num_gathered == 0  # no per-edge gathers
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(hidden, want_hidden, atol=1e-5, rtol=1e-5)


def test_auto_inference_blocks_sep_on_a_big_graph():
    from test_inference import _csr_with

    cfg = TrainParams(model="sep")
    assert plan(*csr_view(_csr_with(1000)), 64, cfg) is None
    assert isinstance(plan(*csr_view(_csr_with(2**28 // 128 + 1)), 128, cfg), LayerwiseInference)


# ------------------------------------------------------------------------------------- params
@pytest.mark.parametrize("train", [
    {"sampler": "full"}, {"sampler": "neighbor"}, {"sampler": "cluster"}, {"sampler": "saint"},
    {"sampler": "shadow"}, {"inference": {"mode": "layerwise"}}, {"jk": "cat"},
    {"engine": "lightning", "sampler": "neighbor"}, {"dist": {"nproc": 2}, "sampler": "neighbor"}])
def test_params_accept_sep_where_the_homogeneous_models_run(train):
    assert params_from_dict({"train": {"model": "sep", **train}}).train.model == "sep"


def test_params_accept_sep_as_the_link_encoder():
    params_from_dict({"dataset": {"task": "link"},
                      "train": {"model": "sep", "sampler": "link_neighbor"}})


@pytest.mark.parametrize("raw, match", [
    ({"dataset": {"layout": "typed"}, "train": {"model": "sep"}},
     "train.model='sep' is not available for heterogeneous graphs"),
    ({"train": {"model": "sep", "sampler": "sign"}}, "use train.model=sign together with"),
    ({"train": {"model": "sep", "aggregation": "csr"}},
     "train.aggregation='csr' applies to gcn and sage"),
])
def test_params_refuse_what_sep_does_not_run_in_one_line(raw, match):
    with pytest.raises(ParamsError, match=match) as err:
        params_from_dict(raw)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------- heterophily
def _heterophilous():
    """2,400 nodes, 3 classes, 10% of edges inside a class: a neighbour's class is mostly
    another one, so its features say which the node is not (informative, but only when kept
    apart from the node's own); weak features (signal 1.5 in 16 dims) leave the MLP short."""
    params = small_params(num_nodes=2400, num_classes=3, num_features=16, avg_degree=10.0,
                          homophily=0.1, feature_signal=1.5)
    graph = prepare(params.dataset, params.seed)[0]
    roles = role_codes(split_nodes(graph, NodeSplitParams(), make_rng(0, "split")).roles)
    return graph.target_view(), roles


def _test_accuracy(result, view, roles) -> float:
    test = torch.from_numpy(np.flatnonzero(roles == role_codes(np.array(["test"]))[0]))
    rows = torch.isin(result.node_id, test)
    assert int(rows.sum()) == test.numel() > 200
    return float((result.logits[rows].argmax(1) == view.y[result.node_id[rows]]).float().mean())


def test_sep_beats_gcn_and_the_mlp_on_a_heterophilous_graph():
    view, roles = _heterophilous()
    inputs = build_inputs(view.x, {p: view.csr for p in ("train", "val", "test")})
    acc = {}
    for name in ("mlp", "gcn", "sep"):
        cfg = TrainParams(model=name, epochs=120, patience=40)
        acc[name] = _test_accuracy(fit(lambda: build_model(name, 16, 3, cfg), inputs, view.y,
                                       roles, cfg, 0), view, roles)
    # measured (the block generator's draws, 2,400 nodes): sep 0.815, mlp 0.723, gcn 0.706;
    # the margins asked are about half the gaps
    assert acc["sep"] > acc["mlp"] + 0.04 and acc["sep"] > acc["gcn"] + 0.06, acc
    # trained on neighbor batches (trimmed steps), it still beats both
    cfg = TrainParams(model="sep", sampler="neighbor", epochs=60, patience=20, batch_size=256,
                      neighbor=NeighborParams((10, 10)))
    train = torch.from_numpy(np.flatnonzero(roles == role_codes(np.array(["train"]))[0]))
    loader = neighbor_batches(view.x, view.y, view.csr, train, cfg.neighbor, seed=0,
                              batch_size=cfg.batch_size)
    sampled = _test_accuracy(fit(lambda: build_model("sep", 16, 3, cfg), inputs, view.y, roles,
                                 cfg, 0, loader=loader), view, roles)
    assert sampled > acc["mlp"] + 0.04 and sampled > acc["gcn"] + 0.06, (sampled, acc)
