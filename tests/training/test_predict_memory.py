"""The memory-lean layer-wise path predict uses: equal to a plain full-graph forward, without
per-edge messages or a block cache for GCN / mean-SAGE, the generic gather path for the rest."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn import GCN, GraphSAGE

from gnnpipe.config import TrainParams
from gnnpipe.data.edges import csr_from_edges
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
