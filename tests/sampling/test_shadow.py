"""ShaDow k-hop sampling (gnnpipe/sampling/shadow.py) and train.sampler: shadow."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from torch_geometric.data import Data
from torch_geometric.nn.models import GCN, GAT, GraphSAGE

from gnnpipe import cli
from gnnpipe.config import (NodeSplitParams, ParamsError, ShadowParams, TrainParams,
                            params_from_dict)
from gnnpipe.data.graph import Csr
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.training.models import build_model
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sampling import batch as adapt
from gnnpipe.sampling.builders import shadow_batches
from gnnpipe.sampling.shadow import ShadowKHopSampler, shadow_loader
from split_oracle import split_nodes
from gnnpipe.io.common import role_codes
from gnnpipe.training.train import _step, build_inputs, fit
from conftest import as_graph


def _undirected(num_nodes=200, avg_degree=5, seed=0) -> Csr:
    """Skewed degrees, both directions of every edge, no duplicates or self-loops."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_nodes, num_nodes * avg_degree // 2)
    dst = (rng.pareto(1.5, src.size) * 10).astype(np.int64) % num_nodes
    keep = src != dst
    src, dst = src[keep], dst[keep]
    keys = np.unique(np.concatenate([src * num_nodes + dst, dst * num_nodes + src]))
    return csr_from_edges(keys // num_nodes, keys % num_nodes, num_nodes)


def _features(n, width=8):
    """Column 0 = node id, so a wrong gather shows; the rest random."""
    rest = torch.randn(n, width - 1, generator=torch.Generator().manual_seed(0))
    return torch.cat([torch.arange(n, dtype=torch.float32)[:, None], rest], 1)


def _cfg(**kw) -> ShadowParams:
    return ShadowParams(**kw)


def _loader(csr, cfg, seeds=None, **kw):
    n = csr.num_nodes
    seeds = torch.arange(n) if seeds is None else seeds
    return shadow_loader(_features(n), torch.arange(n) % 3, csr, seeds, cfg, 0, batch_size=32,
                         shuffle=False, **kw)


@pytest.mark.parametrize("model,depth", [
    (lambda: GraphSAGE(8, 16, num_layers=2, out_channels=4), 2),
    (lambda: GAT(8, 16, num_layers=2, out_channels=4, heads=2), 2),
    (lambda: GraphSAGE(8, 16, num_layers=2, out_channels=4), 3),
    (lambda: GCN(8, 16, num_layers=2, out_channels=4), 3)])  # gcn also needs sources' degrees
def test_root_outputs_equal_the_full_graph_forward_when_the_subgraphs_are_deep_enough(model,
                                                                                      depth):
    torch.manual_seed(0)
    model = model().eval()
    csr = _undirected()
    x = _features(csr.num_nodes)
    cfg = _cfg(depth=depth, num_neighbors=-1)
    with torch.no_grad():
        full = model(x, csr.edge_index())
        batches = 0
        for batch in _loader(csr, cfg):
            roots = batch.root_n_id
            assert torch.equal(batch.n_id[roots], batch.input_id)  # root i is seed i
            logits, target, weight = _step(model, None, adapt.roots(batch), None)
            torch.testing.assert_close(logits, full[batch.n_id[roots]], atol=1e-5, rtol=1e-5)
            assert torch.equal(target, batch.y[roots]) and weight is None
            batches += 1
    assert batches == 7


def test_shallow_subgraphs_do_not_give_the_full_graph_output():
    """The check above has teeth: depth 1 under a 2-layer sage, or gcn at depth = layers."""
    torch.manual_seed(0)
    csr = _undirected()
    x = _features(csr.num_nodes)
    for model, depth in [(GraphSAGE(8, 16, num_layers=2, out_channels=4), 1),
                         (GCN(8, 16, num_layers=2, out_channels=4), 2)]:
        model.eval()
        with torch.no_grad():
            full = model(x, csr.edge_index())
            worst = max(
                float((_step(model, None, adapt.roots(b), None)[0]
                       - full[b.n_id[b.root_n_id]]).abs().max())
                for b in _loader(csr, _cfg(depth=depth, num_neighbors=-1)))
        assert worst > 1e-3


@pytest.mark.parametrize("fanout", [-1, 3])
def test_subgraphs_are_induced_disjoint_and_within_depth_hops(fanout):
    csr = _undirected(seed=1)
    n = csr.num_nodes
    src, dst = csr.edge_index()
    depth = 2
    cfg = _cfg(depth=depth, num_neighbors=fanout)
    for batch in _loader(csr, cfg):
        b = batch.batch_size
        assert torch.equal(batch.root_n_id, torch.arange(b))
        assert torch.equal(batch.batch[:b], torch.arange(b))  # root i heads subgraph i
        assert torch.equal(batch.x[:, 0].long(), batch.n_id)
        ei = batch.edge_index
        assert torch.equal(batch.batch[ei[0]], batch.batch[ei[1]])  # no edge between subgraphs
        got_keys = batch.n_id[ei[0]] * n + batch.n_id[ei[1]]
        assert torch.equal(got_keys, src[batch.e_id] * n + dst[batch.e_id])  # real edges
        for i in range(b):
            nodes = batch.n_id[batch.batch == i]
            assert nodes.unique().numel() == nodes.numel()
            inside = torch.isin(src, nodes) & torch.isin(dst, nodes)
            mine = batch.batch[ei[1]] == i
            # induced: exactly every graph edge among the subgraph's nodes, each once
            assert sorted(batch.e_id[mine].tolist()) == torch.nonzero(inside).flatten().tolist()
            # scope: within depth hops of the root; with fan-out -1, all of them
            scope, frontier = {int(nodes[0])}, {int(nodes[0])}
            for _ in range(depth):
                frontier = set(src[torch.isin(dst, torch.tensor(sorted(frontier)))].tolist())
                scope |= frontier
            assert set(nodes.tolist()) <= scope
            if fanout == -1:
                assert set(nodes.tolist()) == scope
            else:
                assert nodes.numel() <= 1 + fanout + fanout ** 2


def test_seeds_from_a_data_object_and_a_bad_depth():
    csr = _undirected(seed=2)
    data = Data(edge_index=csr.edge_index(), num_nodes=csr.num_nodes)
    sampler = ShadowKHopSampler(data, depth=2, num_neighbors=4, seed=0)
    assert sampler.disjoint and sampler.subgraph_type == "induced" and sampler.backend == "gnnpipe"
    assert sampler.num_neighbors == [4, 4]
    with pytest.raises(ValueError, match="depth=0"):
        ShadowKHopSampler(csr, depth=0, num_neighbors=4)


def test_temporal_shadow_keeps_only_edges_no_later_than_the_root():
    csr = _undirected(seed=3)
    edge_time = np.random.default_rng(0).random(csr.num_edges)
    seeds = torch.arange(0, csr.num_nodes, 2)
    seed_time = torch.rand(seeds.numel(), generator=torch.Generator().manual_seed(1),
                           dtype=torch.float64)
    loader = _loader(csr, _cfg(num_neighbors=5), seeds=seeds, edge_time=edge_time,
                     input_time=seed_time)
    total = 0
    for batch in loader:
        tree = batch.batch[batch.edge_index[1]]
        assert bool((torch.from_numpy(edge_time)[batch.e_id] <= batch.seed_time[tree]).all())
        total += batch.e_id.numel()
    assert total > 100


def test_shadow_training_learns_on_a_homophilous_graph(small_graph):
    roles = split_nodes(as_graph(small_graph), NodeSplitParams(), make_rng(0, "split")).roles
    graphs = {p: small_graph.csr for p in ("train", "val", "test")}
    inputs = build_inputs(small_graph.x, message_graphs=graphs)
    cfg = TrainParams(sampler="shadow", epochs=8, patience=8, hidden=32, batch_size=256,
                      num_layers=3, shadow=ShadowParams(depth=2, num_neighbors=5))
    seeds = torch.from_numpy(np.flatnonzero(roles == "train"))
    loader = shadow_batches(small_graph.x, small_graph.y, graphs["train"], seeds, cfg.shadow, 1,
                            batch_size=cfg.batch_size, edge_index=inputs["train"].edge_index)
    result = fit(lambda: build_model("sage", small_graph.x.shape[1], small_graph.num_classes,
                                     cfg), inputs, small_graph.y, role_codes(roles), cfg, 0,
                 loader=loader)
    assert result.summary["best_val_acc"] > 0.8, result.summary


def test_params_accept_shadow_and_name_its_limits():
    params = params_from_dict({"train": {"sampler": "shadow", "num_layers": 4,
                                         "shadow": {"depth": 2, "num_neighbors": -1}}})
    assert params.train.shadow.depth == 2  # depth and layers are independent
    with pytest.raises(ParamsError, match="train.shadow.depth=0 is out of range"):
        params_from_dict({"train": {"sampler": "shadow", "shadow": {"depth": 0}}})
    with pytest.raises(ParamsError, match="train.sampler='shadow' samples around labelled"):
        params_from_dict({"dataset": {"task": "link"}, "train": {"sampler": "shadow"}})


def test_train_stage_runs_with_the_shadow_sampler(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data/raw").mkdir(parents=True)
    params = {"dataset": {"synthetic": {"num_nodes": 600, "num_features": 8,
                                        "num_classes": 3}},
              "train": {"sampler": "shadow", "epochs": 3, "patience": 3, "hidden": 16,
                        "batch_size": 128, "shadow": {"depth": 2, "num_neighbors": 5},
                        "checkpoint": {"every": 0}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    for stage in ("prepare", "split", "propagate", "train"):
        assert cli.main([stage]) == 0, stage
    summary = json.loads((tmp_path / "metrics/train.json").read_text())
    assert summary["sampler"] == "shadow" and summary["epochs_run"] == 3
    perf = (tmp_path / "metrics/perf/train_history.csv").read_text().splitlines()
    assert len(perf) == 4 and perf[1].split(",")[3] == "3"  # ceil(360 train seeds / 128)
