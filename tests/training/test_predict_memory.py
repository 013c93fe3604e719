"""The memory-lean layer-wise path predict uses: equal to a plain full-graph forward, without
per-edge messages or a block cache for GCN / mean-SAGE, the generic gather path for the rest."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn import GCN, GraphSAGE

from gnnpipe.config import TrainParams
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.training import inference
from gnnpipe.training.inference import LayerwiseInference, layerwise_logits, csr_view
from gnnpipe.training.models import build_model, forward_with_hidden

N, F, C = 300, 7, 4


@pytest.fixture(scope="module")
def graph():
    """Random directed edges with loops and duplicates; nodes 280.. have no in-edges."""
    rng = np.random.default_rng(3)
    src = np.concatenate([rng.integers(0, N, 2000), [5, 5, 9]])
    dst = np.concatenate([rng.integers(0, 280, 2000), [5, 5, 9]])
    x = torch.randn(N, F, generator=torch.Generator().manual_seed(2))
    return csr_from_edges(src, dst, N), x


def _full(model, x, csr):
    with torch.no_grad():
        return forward_with_hidden(model, x, csr.edge_index())


CASES = [("sage", {}), ("gcn", {}), ("sage", {"jk": "cat"}), ("gcn", {"residual": True}),
         ("sage", {"num_layers": 1})]


@pytest.mark.parametrize("name, extra", CASES, ids=[f"{n}-{e}" for n, e in CASES])
@pytest.mark.parametrize("block_edges", [1, 37, 10**6])
def test_lean_path_equals_the_full_forward(graph, name, extra, block_edges):
    csr, x = graph
    torch.manual_seed(0)
    model = build_model(name, F, C, TrainParams(model=name, hidden=8, **{"num_layers": 3,
                                                                           **extra})).eval()
    want_out, want_hidden = _full(model, x, csr)
    engine = LayerwiseInference(*csr_view(csr), block_edges)
    out, hidden = layerwise_logits(model, x, engine, with_hidden=True)
    torch.testing.assert_close(out, want_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(hidden, want_hidden, atol=1e-5, rtol=1e-5)
    assert out.dtype == hidden.dtype == torch.float32


def _refuse_messages(model):
    def boom(*args, **kwargs):
        raise AssertionError("per-edge propagate called")

    for conv in model.convs:
        conv.propagate = boom


@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_gcn_and_mean_sage_build_no_messages_and_cache_no_blocks(graph, name):
    csr, x = graph
    model = build_model(name, F, C, TrainParams(model=name, hidden=8)).eval()
    want = _full(model, x, csr)[0]
    _refuse_messages(model)  # an E x F message tensor would come from propagate
    engine = LayerwiseInference(*csr_view(csr), 50)
    torch.testing.assert_close(layerwise_logits(model, x, engine), want, atol=1e-5, rtol=1e-5)
    assert engine.num_gathered == 0  # no per-edge local ids kept between layers


def test_other_sage_aggregations_take_the_gather_path(graph):
    csr, x = graph
    torch.manual_seed(0)
    model = GraphSAGE(F, 8, 2, C, aggr="max").eval()
    want = _full(model, x, csr)[0]
    engine = LayerwiseInference(*csr_view(csr), 50)
    torch.testing.assert_close(layerwise_logits(model, x, engine), want, atol=1e-5, rtol=1e-5)
    assert engine.num_gathered > 0  # it went block by block (gathers)


def test_improved_gcn_is_refused_not_silently_different(graph):
    """PyG's GCNConv(improved=True) drops the loop weight 2 when no edge weights are passed;
    layer-wise refuses it rather than compute another model."""
    csr, x = graph
    model = GCN(F, 8, 2, C, improved=True).eval()
    with pytest.raises(ValueError, match="train.inference.mode: full"):
        layerwise_logits(model, x, LayerwiseInference(*csr_view(csr), 40))


class _RowsPerRequest:
    """Features read per request (as ``ModelFeatures``): not a tensor, so mean SAGE gathers
    its first layer's blocks."""

    def __init__(self, x):
        self.x, self.shape, self.dtype = x, x.shape, x.dtype

    def __getitem__(self, index):
        return self.x[index]


def _engines(csr, block_edges):
    """The same engine twice: for calls that come again (train) and for one call (predict)."""
    return (LayerwiseInference(*csr_view(csr), block_edges),
            LayerwiseInference(*csr_view(csr), block_edges, reuse=False))


@pytest.mark.parametrize("name, lazy", [("gat", False), ("max-sage", False), ("sage", True)])
def test_one_call_keeps_no_gathered_block_past_its_last_read(graph, name, lazy):
    """predict's engine (``reuse=False``) caches a block only while a later layer of the call
    gathers it again and holds none when the call ends; its outputs are the caching engine's,
    bit for bit. Mean SAGE over per-request features gathers the first layer only: nothing is
    ever kept."""
    csr, x = graph
    torch.manual_seed(0)
    model = (GraphSAGE(F, 8, 3, C, aggr="max") if name == "max-sage" else
             build_model(name, F, C, TrainParams(model=name, hidden=8, num_layers=3))).eval()
    features = _RowsPerRequest(x) if lazy else x
    again, once = _engines(csr, 200)
    want = layerwise_logits(model, features, again, with_hidden=True)
    got = layerwise_logits(model, features, once, with_hidden=True)
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    assert again.cached_bytes > 0 and once.cached_bytes == 0
    # each block is gathered once: later gathering layers read what the first one kept
    assert once.num_gathered == again.num_gathered == len(once.blocks("node"))
    if lazy:  # layer 0 alone gathers: nothing to keep, not even during the call
        seen = []
        gather = once.gather
        once.gather = lambda *a: (seen.append(once.cached_bytes), gather(*a))[1]
        layerwise_logits(model, features, once)
        assert seen and max(seen) == 0


@pytest.mark.parametrize("hidden, gathers", [(4, False), (8, True)])
def test_narrowing_sage_over_rows_read_per_request_projects_first(graph, hidden, gathers):
    """Mean SAGE whose first layer narrows features read per request (F=7 -> 4) projects every
    row once and takes the table path: no block is gathered, and the logits and hidden rows are
    the full forward's to float rounding (the projected mean sums in another order); widening
    (7 -> 8) still gathers its first layer's blocks. Nodes 280.. have no in-edges: lin_l's bias
    alone, as PyG's 0-mean gives."""
    csr, x = graph
    torch.manual_seed(0)
    model = build_model("sage", F, C, TrainParams(model="sage", hidden=hidden,
                                                  num_layers=2)).eval()
    engine = LayerwiseInference(*csr_view(csr), 300, reuse=False)
    got = layerwise_logits(model, _RowsPerRequest(x), engine, with_hidden=True)
    want = _full(model, x, csr)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert (engine.num_gathered > 0) == gathers
    assert inference._projects_first(model.convs[0], _RowsPerRequest(x)) == (not gathers)
    assert not inference._projects_first(model.convs[0], x)  # a table: the mean over it


def test_predict_outputs_leave_no_gathered_blocks(graph):
    """``model_outputs`` (the predict stage's forward) runs the engine as one call."""
    from gnnpipe.training.distributed import SINGLE
    from gnnpipe.training.predict import model_outputs
    from gnnpipe.training.train import PhaseInput

    csr, x = graph
    torch.manual_seed(0)
    model = build_model("gat", F, C, TrainParams(model="gat", hidden=8)).eval()
    engine = LayerwiseInference(*csr_view(csr), 200)
    phase = PhaseInput(x=x, edge_index=None, layerwise=engine)
    out, hidden, how = model_outputs(model, phase, SINGLE, block_rows=64)
    assert how == "layerwise" and engine.num_gathered > 0 and engine.cached_bytes == 0
    torch.testing.assert_close(out, _full(model, x, csr)[0], atol=1e-5, rtol=1e-5)
