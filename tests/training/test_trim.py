"""Trimmed sampled steps (gnnpipe.training.models.sampled_forward, trim_kwargs): with the sampler's
per-hop counts every layer computes only what later layers read, and the seeds' logits and gradients
equal the untrimmed forward's, for gcn / sage / gat, with jk and residual, node and link batches."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from conftest import make_tiny_graph
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpipe.config import NeighborParams, TrainParams
from gnnpipe.training.link_train import _pair_step
from gnnpipe.training.models import build_model, trim_kwargs
from link_oracle import training_sampler
from gnnpipe.sampling import neighbor_loader
from gnnpipe.sampling import batch as adapt
from gnnpipe.sampling.link import link_neighbor_loader
from gnnpipe.training.train import _step

FANOUT = (3, 2, 2)  # three hops, small fan-outs: each hop leaves nodes out, trimming bites
SEEDS = torch.arange(0, 60, 7)


@pytest.fixture(scope="module")
def graph():
    return make_tiny_graph(60)  # x[:, 0] == node id


def _cfg(name: str, jk: str = "none", residual: bool = False, disjoint: bool = False,
         **kwargs) -> TrainParams:
    return TrainParams(model=name, num_layers=3, jk=jk, residual=residual, hidden=8, heads=2,
                       neighbor=NeighborParams(FANOUT, disjoint=disjoint), **kwargs)


def _batches(graph, cfg: TrainParams, batch_size: int = 4):
    return list(neighbor_loader(graph.x, graph.y, graph.csr, SEEDS, cfg.neighbor, seed=0,
                                batch_size=batch_size, shuffle=False))


def assert_grads_close(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    """All parameters' gradients within 1e-5 of the gradient's scale (its largest entry, >= 1):
    features are node ids, entries reach the tens, and float32 sums in another order move any
    entry by ~1e-6 of that (both orders are that far from a float64 reference)."""
    got, want = torch.cat([g.flatten() for g in got]), torch.cat([g.flatten() for g in want])
    scale = max(1.0, float(want.abs().max()))
    torch.testing.assert_close(got, want, atol=1e-5 * scale, rtol=0)


CASES = [(name, jk, residual) for name, jk, residual in itertools.product(
    ("gcn", "sage", "gat"), ("none", "cat", "max"), (False, True))]
CASES += [("sep", jk, False) for jk in ("none", "cat", "max")]  # sep's skips are built in


@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("name,jk,residual", CASES)
def test_trimmed_seed_logits_and_gradients_equal_the_untrimmed(graph, name, jk, residual,
                                                               disjoint):
    cfg = _cfg(name, jk, residual, disjoint)
    torch.manual_seed(0)
    model = build_model(name, 2, 3, cfg).eval()  # eval: no dropout, both passes comparable
    trimmed_rows = []
    for batch in _batches(graph, cfg):
        kwargs = trim_kwargs(model, batch)
        assert len(kwargs["num_sampled_nodes_per_hop"]) == len(FANOUT) + 1
        b = batch.batch_size
        grads = []
        for trim in (False, True):
            model.zero_grad()
            out = model(batch.x, batch.edge_index, **(kwargs if trim else {}))
            F.cross_entropy(out[:b], batch.y[:b]).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            if trim:
                trimmed_rows.append((out.shape[0], batch.num_nodes))
                torch.testing.assert_close(out[:b], full[:b], atol=1e-5, rtol=0)
            else:
                full = out.detach()
        assert_grads_close(grads[1], grads[0])
    # the last layer read fewer rows than the batch holds: the test exercised trimming
    assert all(rows < nodes for rows, nodes in trimmed_rows)


def test_pyg_trim_of_gcn_would_renormalise_and_change_the_seeds(graph):
    """Why gcn is normalised once on the whole subgraph: PyG's BasicGNN trim recomputes degrees
    on the trimmed edges, so its seed logits differ from the untrimmed forward's."""
    cfg = _cfg("gcn")
    torch.manual_seed(0)
    model = build_model("gcn", 2, 3, cfg).eval()
    batch = _batches(graph, cfg)[0]
    kwargs, b = trim_kwargs(model, batch), batch.batch_size
    full = model(batch.x, batch.edge_index)[:b]
    pyg = BasicGNN.forward(model, batch.x, batch.edge_index, **kwargs)[:b]
    ours = model(batch.x, batch.edge_index, **kwargs)[:b]
    assert (pyg - full).abs().max() > 1e-3
    torch.testing.assert_close(ours, full, atol=1e-5, rtol=0)


def test_node_step_passes_the_counts(graph, monkeypatch):
    cfg = _cfg("sage")
    torch.manual_seed(0)
    model = build_model("sage", 2, 3, cfg).eval()
    batch = _batches(graph, cfg)[0]
    seen = []
    forward = type(model).forward
    monkeypatch.setattr(type(model), "forward", lambda self, *a, **kw: seen.append(kw) or
                        forward(self, *a, **kw))
    logits, target, weight = _step(model, None, adapt.seeds_first(batch), None)
    assert seen[0]["num_sampled_nodes_per_hop"] == list(batch.num_sampled_nodes)
    assert seen[0]["num_sampled_edges_per_hop"] == list(batch.num_sampled_edges)
    assert logits.shape[0] == batch.batch_size and torch.equal(target, batch.y[:batch.batch_size])
    full = forward(model, batch.x, batch.edge_index)[:batch.batch_size]
    torch.testing.assert_close(logits, full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("subgraph_type", ["induced", "bidirectional"])
def test_batches_without_hop_structure_are_not_trimmed(graph, subgraph_type):
    """Induced and bidirectional batches carry no per-hop edge counts: the full forward runs."""
    cfg = TrainParams(model="sage", num_layers=3, neighbor=NeighborParams(
        FANOUT, subgraph_type=subgraph_type))
    model = build_model("sage", 2, 3, cfg)
    assert trim_kwargs(model, _batches(graph, cfg)[0]) == {}


def test_models_without_per_hop_semantics_are_not_trimmed(graph):
    cfg = _cfg("sage")
    batch = _batches(graph, cfg)[0]
    assert trim_kwargs(build_model("mlp", 2, 3, cfg), batch) == {}
    two_layers = build_model("sage", 2, 3, TrainParams(num_layers=4))  # more layers than hops
    assert trim_kwargs(two_layers, batch) == {}


@pytest.mark.parametrize("name", ["gcn", "sage", "gat", "sep"])
def test_trimmed_link_step_scores_equal_the_untrimmed(graph, name):
    """Link batches: the pair endpoints are the seeds; their scores survive trimming."""
    cfg = TrainParams(model=name, num_layers=2, hidden=8, heads=2,
                      neighbor=NeighborParams((3, 2)))
    src, dst = graph.csr.edge_index()
    supervision = torch.stack([src[:20], dst[:20]])
    loader = link_neighbor_loader(graph.x, graph.csr, supervision,
                                  training_sampler(src.numpy(), dst.numpy(), graph.num_nodes),
                                  cfg.neighbor, 0, batch_size=5)
    loader.set_epoch(1)
    torch.manual_seed(0)
    model = build_model(name, 2, 8, cfg).eval()
    for batch in loader:
        assert trim_kwargs(model, batch)
        logits, labels = _pair_step(model, None, supervision, None, adapt.pairs(batch))
        z = model(batch.x, batch.edge_index)  # untrimmed
        pairs = batch.edge_label_index
        full = (z[pairs[0]] * z[pairs[1]]).sum(-1)
        torch.testing.assert_close(logits, full, atol=1e-5, rtol=0)


def _typed(fanout: tuple[int, ...], name: str = "sage", out: str = "target"):
    """A small typed graph, its neighbor batches with ``fanout`` and a fresh typed model."""
    import numpy as np
    from test_hetero_data import small_hetero

    from gnnpipe.hetero.models import build_hetero_model
    from gnnpipe.sampling.builders import typed_neighbor_batches

    typed = small_hetero()
    cfg = TrainParams(model=name, hidden=8, heads=2, num_layers=len(fanout),
                      neighbor=NeighborParams(fanout))
    seeds = np.arange(0, typed.num_nodes_dict[typed.target], 3)
    batches = list(typed_neighbor_batches(typed, typed.csr, seeds, cfg.neighbor, 16, 0))
    torch.manual_seed(0)
    dims = {t: x.shape[1] for t, x in typed.x.items()}
    return batches, build_hetero_model(name, typed.metadata(), dims, 3, typed.target, cfg,
                                       out=out)


@pytest.mark.parametrize("fanout", [(4, 3), (3, 2, 2), (-1, 2)])
def test_typed_sage_trims_to_the_untrimmed_seed_logits_and_gradients(fanout):
    """Typed neighbor batches carry per-type hop counts; the trimmed typed sage computes only
    the seeds at the last layer, with the untrimmed forward's logits and gradients."""
    batches, model = _typed(fanout)
    model.eval()  # no dropout: both forwards compute the same function
    for batch in batches:
        kwargs = trim_kwargs(model, batch)
        assert set(kwargs["num_sampled_nodes_per_hop"]) == set(batch.x)
        assert set(kwargs["num_sampled_edges_per_hop"]) == set(batch.edge_index)
        trimmed = model(batch.x, batch.edge_index, **kwargs)
        full = model(batch.x, batch.edge_index)
        assert trimmed.shape[0] == batch.target.numel() < full.shape[0]
        torch.testing.assert_close(trimmed, full[batch.rows], atol=1e-5, rtol=0)
        grads = []
        for logits in (trimmed, full[batch.rows]):
            model.zero_grad()
            F.cross_entropy(logits, batch.target).backward(retain_graph=True)
            grads.append([p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                          for p in model.parameters()])
        for a, b in zip(*grads):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_typed_models_trim_only_sage_on_the_target_rows():
    """hgt never trims, nor sage scoring every type (``out="all"``: the link task)."""
    batches, hgt = _typed((4, 3), "hgt")
    assert trim_kwargs(hgt, batches[0]) == {}
    batches, every = _typed((4, 3), out="all")
    assert trim_kwargs(every, batches[0]) == {}


@pytest.mark.parametrize("p", [0.0, 0.25, 0.5])
def test_sampled_dropout_keeps_one_minus_p_and_scales(p):
    """The sampled step's dropout (gnnpipe.training.models.dropout): entries kept with 1 - p, scaled
    by 1 / (1 - p), zeros elsewhere; the gradient is the same mask; seeded by torch's RNG."""
    from gnnpipe.training.models import dropout

    h = torch.ones(200, 500, requires_grad=True)
    torch.manual_seed(0)
    out = dropout(h, p)
    torch.manual_seed(0)
    assert torch.equal(out, dropout(h, p))
    kept = out != 0
    assert torch.all(out[kept] == 1.0 / (1.0 - p))
    assert abs(float(kept.float().mean()) - (1.0 - p)) < 0.01
    out.sum().backward()
    assert torch.equal(h.grad, out.detach())


def test_trimmed_training_step_draws_dropout_only_in_train_mode(graph):
    """Train mode: two draws of the trimmed forward differ (dropout); eval mode: identical."""
    cfg = _cfg("sage")
    batch = _batches(graph, cfg)[0]
    torch.manual_seed(0)
    model = build_model("sage", 2, 3, cfg)
    kwargs = trim_kwargs(model, batch)
    assert not torch.equal(model(batch.x, batch.edge_index, **kwargs),
                           model(batch.x, batch.edge_index, **kwargs))
    model.eval()
    assert torch.equal(model(batch.x, batch.edge_index, **kwargs),
                       model(batch.x, batch.edge_index, **kwargs))
