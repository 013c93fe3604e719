"""train.aggregation: csr (a sparse CSR product over target rows) against the scatter path of
the same weights, forward and gradients, full graph and trimmed batches; scatter is the models'
own forward bit for bit; auto (the default) is csr for gcn and sage, scatter for the rest;
timed times both on the first batch and records its choice."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import make_tiny_graph, small_params
from torch_geometric.nn.models import GCN, GraphSAGE

from gnnpipe.config import NeighborParams, ParamsError, TrainParams, replace
from gnnpipe.io.common import role_codes
from gnnpipe.training.models import build_model, choose_aggregation, trim_kwargs
from gnnpipe.sampling import neighbor_loader
from gnnpipe.sampling.builders import neighbor_batches
from gnnpipe.training.train import fit

from test_trim import assert_grads_close

FANOUT = (3, 2, 2)


@pytest.fixture(scope="module")
def graph():
    return make_tiny_graph(60)  # x[:, 0] == node id


def _grads(model, x, edge_index, rows, y, **kwargs):
    model.zero_grad()
    out = model(x, edge_index, **kwargs)[:rows]
    F.cross_entropy(out, y[:rows]).backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


CASES = list(itertools.product(("gcn", "sage"), ("none", "cat"), (False, True)))


@pytest.mark.parametrize("name,jk,residual", CASES)
def test_csr_equals_scatter_on_the_full_graph(graph, name, jk, residual):
    cfg = TrainParams(model=name, num_layers=3, jk=jk, residual=residual, hidden=8)
    torch.manual_seed(0)
    model = build_model(name, 2, 3, cfg).eval()
    edge_index, n = graph.csr.edge_index(), graph.num_nodes
    out, grads = _grads(model, graph.x, edge_index, n, graph.y)
    model.aggregation = "csr"
    csr_out, csr_grads = _grads(model, graph.x, edge_index, n, graph.y)
    torch.testing.assert_close(csr_out, out, atol=1e-5, rtol=0)
    assert_grads_close(csr_grads, grads)
    # an edge list in no particular order gives the same (the CSR is built by a stable sort)
    perm = torch.randperm(edge_index.shape[1], generator=torch.Generator().manual_seed(1))
    shuffled, _ = _grads(model, graph.x, edge_index[:, perm], n, graph.y)
    torch.testing.assert_close(shuffled, out, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name,jk,residual", CASES)
def test_csr_equals_scatter_on_trimmed_batches(graph, name, jk, residual):
    cfg = TrainParams(model=name, num_layers=3, jk=jk, residual=residual, hidden=8,
                      neighbor=NeighborParams(FANOUT))
    torch.manual_seed(0)
    model = build_model(name, 2, 3, cfg).eval()
    for batch in neighbor_loader(graph.x, graph.y, graph.csr, torch.arange(0, 60, 7),
                                 cfg.neighbor, seed=0, batch_size=4, shuffle=False):
        kwargs, b = trim_kwargs(model, batch), batch.batch_size
        model.aggregation = "scatter"
        out, grads = _grads(model, batch.x, batch.edge_index, b, batch.y)  # untrimmed scatter
        model.aggregation = "csr"
        csr_out, csr_grads = _grads(model, batch.x, batch.edge_index, b, batch.y, **kwargs)
        torch.testing.assert_close(csr_out, out, atol=1e-5, rtol=0)
        assert_grads_close(csr_grads, grads)


@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_csr_is_deterministic(graph, name):
    cfg = TrainParams(model=name, num_layers=2, hidden=8, aggregation="csr")
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = build_model(name, 2, 3, cfg).eval()
        runs.append(_grads(model, graph.x, graph.csr.edge_index(), graph.num_nodes, graph.y))
    assert torch.equal(runs[0][0], runs[1][0])
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))


@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_csr_runs_under_bfloat16_autocast(graph, name):
    """train.amp: the CSR products take bfloat16 (MKL's CSR addmm does not: gcn uses the
    reduce kernel); the loss stays close to the float32 one."""
    cfg = TrainParams(model=name, num_layers=2, hidden=8, aggregation="csr")
    torch.manual_seed(0)
    model = build_model(name, 2, 3, cfg).eval()
    edge_index, n = graph.csr.edge_index(), graph.num_nodes
    x = graph.x / n  # ids scaled to [0, 1): bfloat16 keeps ~3 digits
    want = F.cross_entropy(model(x, edge_index), graph.y)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x, edge_index), graph.y)
    loss.backward()
    assert abs(float(loss) - float(want)) < 0.05 and all(
        p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name,pyg", [("gcn", GCN), ("sage", GraphSAGE)])
def test_scatter_is_the_pyg_forward_bit_for_bit(graph, name, pyg):
    """train.aggregation: scatter (no counts) runs PyG's own forward, bit for bit."""
    cfg = TrainParams(model=name, hidden=8, aggregation="scatter")
    torch.manual_seed(0)
    model = build_model(name, 2, 3, cfg)
    torch.manual_seed(0)
    reference = pyg(in_channels=2, hidden_channels=8, num_layers=2, out_channels=3, dropout=0.5)
    reference.load_state_dict(model.state_dict())
    model.eval(), reference.eval()
    edge_index = graph.csr.edge_index()
    assert torch.equal(model(graph.x, edge_index), reference(graph.x, edge_index))


@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_the_default_runs_csr_on_gcn_and_sage(name):
    assert TrainParams().aggregation == "auto"
    assert build_model(name, 2, 3, TrainParams(model=name, hidden=8)).aggregation == "csr"
    assert build_model(name, 2, 3, TrainParams(model=name, hidden=8,
                                               aggregation="scatter")).aggregation == "scatter"


def test_gat_and_other_models_stay_on_scatter():
    for setting in ("auto", "timed"):
        model = build_model("gat", 2, 3, TrainParams(model="gat", hidden=8, heads=2,
                                                     aggregation=setting))
        assert model.aggregation == "scatter"
    params = small_params()
    for bad in ({"model": "gat", "aggregation": "csr"}, {"model": "mlp", "aggregation": "csr"}):
        with pytest.raises(ParamsError, match="train.aggregation='csr' applies to gcn and sage"):
            replace(params, train=bad)


def test_choose_aggregation_keeps_the_faster_and_leaves_no_trace(graph):
    torch.manual_seed(0)
    model = build_model("sage", 2, 3, TrainParams(hidden=8, aggregation="timed"))
    edge_index = graph.csr.edge_index()
    state = torch.get_rng_state()
    seconds = choose_aggregation(model, lambda: F.cross_entropy(
        model(graph.x, edge_index), graph.y))  # train mode: dropout draws
    assert set(seconds) == {"scatter", "csr"}
    assert model.aggregation == min(seconds, key=seconds.get)
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(torch.get_rng_state(), state)


def test_fit_with_timed_records_the_choice(graph):
    cfg = TrainParams(model="sage", sampler="neighbor", hidden=8, epochs=2, patience=5,
                      batch_size=8, aggregation="timed", neighbor=NeighborParams((3, 2)))
    roles = role_codes(np.array(["train"] * 30 + ["val"] * 15 + ["test"] * 15))
    loader = neighbor_batches(graph.x, graph.y, graph.csr, torch.arange(30), cfg.neighbor,
                              seed=0, batch_size=8)
    from gnnpipe.training.train import build_inputs

    result = fit(lambda: build_model("sage", 2, 3, cfg), build_inputs(
        graph.x, {p: graph.csr for p in ("train", "val", "test")}), graph.y, roles, cfg, 0,
        loader=loader)
    chosen = result.perf["aggregation"]
    assert chosen["chosen"] in ("scatter", "csr")
    assert chosen["chosen"] == min(chosen["step_seconds"], key=chosen["step_seconds"].get)
    assert np.isfinite(result.history[-1]["train_loss"])
