"""Layer-wise inference: the same logits as a full forward, blocks that tile the CSR, GCN's
whole-graph normalisation, the auto switch, DDP block splitting and the residual option."""

from __future__ import annotations

import dataclasses
import os
import socket

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from gnnpipe.training import distributed
from gnnpipe.config import (InferenceParams, NodeSplitParams, ParamsError, TrainParams,
                            params_from_dict, replace)
from gnnpipe.training.distributed import DistContext
from gnnpipe.data.graph import Csr
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.training.inference import (AUTO_MESSAGE_FLOATS, EDGE, NODE, LayerwiseInference, _gcn_rows,
                               cost_prefix, gcn_inv_sqrt_degree, layerwise_logits, csr_view,
                               plan, rank_rows, row_blocks)
from gnnpipe.io.common import role_codes
from gnnpipe.io.temps import SCRATCH_ENV
from gnnpipe.training.loop import LoopOptions
from gnnpipe.training.models import build_model
from gnnpipe.runtime.rng import make_rng
from split_oracle import split_nodes
from gnnpipe.training.train import build_inputs, fit
from conftest import as_graph
from mapped_pages import mapped_file

NUM_NODES, IN_DIM, CLASSES = 60, 6, 4


def awkward_csr() -> Csr:
    """Directed edges among nodes 0..39 with self-loops, duplicates and a hub (node 7 has 40
    in-edges); nodes 40..59 have no in-edges, 50..59 are isolated."""
    rng = np.random.default_rng(0)
    src = np.concatenate([rng.integers(0, 40, 150), [3, 3, 5, 11, 11], rng.integers(0, 50, 40),
                          np.arange(40, 50)])
    dst = np.concatenate([rng.integers(0, 40, 150), [3, 3, 5, 2, 2], np.full(40, 7),
                          rng.integers(0, 40, 10)])
    return csr_from_edges(src, dst, NUM_NODES)


@pytest.fixture(scope="module")
def csr() -> Csr:
    return awkward_csr()


@pytest.fixture(scope="module")
def features() -> torch.Tensor:
    x = torch.randn(NUM_NODES, IN_DIM, generator=torch.Generator().manual_seed(1))
    x[:, 0] = torch.arange(NUM_NODES, dtype=torch.float32)  # a wrong gather shows up loudly
    return x


def _model(name: str, **train):
    cfg = TrainParams(model=name, hidden=8, heads=2, num_layers=3, dropout=0.5, **train)
    torch.manual_seed(0)
    return build_model(name, IN_DIM, CLASSES, cfg).eval()


def _full(model, x, csr):
    with torch.no_grad():
        return model(x, csr.edge_index())


# ----------------------------------------------------------------------------------- exactness
CASES = [("gcn", {}), ("sage", {}), ("gat", {}), ("mlp", {}),
         ("gcn", {"jk": "cat"}), ("sage", {"jk": "max"}), ("gat", {"jk": "cat"}),
         ("gcn", {"residual": True}), ("sage", {"residual": True}), ("gat", {"residual": True}),
         ("sage", {"residual": True, "jk": "cat"})]


@pytest.mark.parametrize("name, train", CASES, ids=[f"{n}-{t}" for n, t in CASES])
@pytest.mark.parametrize("block_edges", [1, 9, 70, 10**6])
def test_layerwise_logits_equal_the_full_forward(csr, features, name, train, block_edges):
    model = _model(name, **train)
    lw = layerwise_logits(model, features, LayerwiseInference(*csr_view(csr), block_edges))
    assert lw.shape == (NUM_NODES, CLASSES)
    torch.testing.assert_close(lw, _full(model, features, csr), atol=1e-5, rtol=1e-5)
    assert not model.training


def test_layerwise_restores_training_mode(csr, features):
    model = _model("sage").train()
    layerwise_logits(model, features, LayerwiseInference(*csr_view(csr), 9))
    assert model.training


# ---------------------------------------------------------------------------- GCN normalisation
def test_gcn_degrees_come_from_the_whole_graph(csr):
    edge_index, weight = gcn_norm(csr.edge_index(), None, NUM_NODES, add_self_loops=True)
    loops = edge_index[0] == edge_index[1]
    assert int(loops.sum()) == NUM_NODES  # stored loops dropped, one per node added
    inv_sqrt = gcn_inv_sqrt_degree(csr, chunk_edges=7)  # counted in small row chunks
    torch.testing.assert_close(weight[loops], inv_sqrt[edge_index[0][loops]] ** 2)
    # node 3 stores two self-loops and node 5 one: gcn_norm counts neither
    non_loop_in = torch.bincount(edge_index[1][~loops], minlength=NUM_NODES)
    torch.testing.assert_close(inv_sqrt, (non_loop_in + 1.0) ** -0.5)


def test_block_local_gcn_normalisation_would_be_wrong(csr, features):
    """The trap the whole-graph weights avoid: GCNConv on a block normalises with block degrees."""
    model = _model("gcn")
    lw = LayerwiseInference(*csr_view(csr), 9)
    block = lw.gather(EDGE, *lw.blocks(NODE)[0])
    conv = model.convs[0]
    with torch.no_grad():
        naive = conv(features[block.n_id], block.edge_index)[:block.batch_size]
        exact = conv(features, csr.edge_index())[block.start:block.stop]
        xlin = conv.lin(features)
        ours = _gcn_rows(conv, xlin, csr, block.start, block.stop,
                         lw.inv_sqrt_degree(EDGE, 1.0), 1.0)
    torch.testing.assert_close(ours, exact, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(naive, exact, atol=1e-3)


# --------------------------------------------------------------------------------------- blocks
@pytest.mark.parametrize("block_cost", [1, 4, 9, 33, 10**6])
def test_blocks_tile_the_rows_and_hold_every_in_edge(csr, block_cost):
    engine = LayerwiseInference(*csr_view(csr), block_cost)
    blocks = [engine.gather(EDGE, a, b) for a, b in engine.blocks(NODE)]
    assert [b.start for b in blocks] == [0] + [b.stop for b in blocks[:-1]]
    assert blocks[-1].stop == NUM_NODES
    degrees = csr.degrees()
    src, dst = [], []
    for b in blocks:
        cost = int(degrees[b.start:b.stop].sum()) + b.batch_size
        assert cost <= block_cost or b.batch_size == 1  # only a lone heavy row may exceed it
        assert torch.equal(b.n_id[:b.batch_size], torch.arange(b.start, b.stop))
        others = b.n_id[b.batch_size:]
        assert bool((others[1:] > others[:-1]).all())  # distinct, ascending
        assert not bool(((others >= b.start) & (others < b.stop)).any())
        assert bool((b.edge_index[1] < b.batch_size).all())
        src.append(b.n_id[b.edge_index[0]])
        dst.append(b.start + b.edge_index[1])
    # exactly the CSR's edges, in CSR order: nothing sampled, nothing duplicated
    assert torch.equal(torch.stack([torch.cat(src), torch.cat(dst)]), csr.edge_index())


def test_cached_blocks_equal_fresh_ones(csr):
    engine = LayerwiseInference(*csr_view(csr), 9)
    first = [engine.gather(EDGE, a, b) for a, b in engine.blocks(NODE)]
    assert engine.num_gathered == len(first)
    second = [engine.gather(EDGE, a, b) for a, b in engine.blocks(NODE)]  # from the cache
    assert engine.num_gathered == len(first)
    for a, b in zip(first, second, strict=True):
        assert (a.start, a.stop) == (b.start, b.stop) and torch.equal(a.n_id, b.n_id)
        assert torch.equal(a.edge_index, b.edge_index) and b.edge_index.dtype == torch.int64


def test_rows_without_in_edges_are_blocks_too(csr):
    bounds = row_blocks(cost_prefix([csr], NUM_NODES), 4, lo=50, hi=NUM_NODES)  # isolated only
    assert bounds == [(50, 54), (54, 58), (58, 60)]
    engine = LayerwiseInference(*csr_view(csr), 4)
    blocks = [engine.gather(EDGE, a, b) for a, b in bounds]
    assert all(b.edge_index.shape == (2, 0) and b.n_id.numel() == b.batch_size for b in blocks)


def test_a_hub_row_is_a_block_of_its_own(csr):
    hub = [b for b in row_blocks(cost_prefix([csr], NUM_NODES), 20) if b[0] <= 7 < b[1]]
    assert hub == [(7, 8)]
    assert LayerwiseInference(*csr_view(csr), 20).gather(EDGE, 7, 8).edge_index.shape[1] > 20


@pytest.mark.parametrize("world", [1, 2, 3, 7, 100])
def test_rank_rows_tile_the_graph(csr, world):
    rows = [rank_rows(cost_prefix([csr], NUM_NODES), DistContext(r, world, r))
            for r in range(world)]
    assert rows[0][0] == 0 and rows[-1][1] == NUM_NODES
    assert all(a[1] == b[0] for a, b in zip(rows, rows[1:]))


# ------------------------------------------------------------------------------- auto and memo
def _csr_with(num_edges: int, num_nodes: int = 1000) -> Csr:
    indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    indptr[1:] = num_edges
    return Csr(indptr, torch.zeros(num_edges, dtype=torch.int64))


def test_auto_keeps_the_default_graph_on_the_full_forward():
    default = TrainParams()
    assert default.inference.mode == "auto"
    # the default synthetic graph: 20k nodes, avg degree 10 (both directions stored), 64 features
    assert plan(*csr_view(_csr_with(2 * 20_000 * 10)), 64, default) is None
    big = _csr_with(AUTO_MESSAGE_FLOATS // 128 + 1)
    assert isinstance(plan(*csr_view(big), 128, default), LayerwiseInference)
    assert plan(*csr_view(big), 128, replace(default, inference={"mode": "full"})) is None
    no_messages = dataclasses.replace(default, model="mlp")
    assert plan(*csr_view(big), 128, no_messages) is None
    forced = plan(*csr_view(_csr_with(10)), 4, replace(default, inference={
        "mode": "layerwise", "block_edges": 123}))
    assert forced.block_edges == 123


def test_auto_blocks_any_graph_on_several_ranks():
    """The one auto rule: on DDP ranks that share a graph's blocks a whole-graph forward would
    run on every rank, so auto is layer-wise however small the graph; one process, a model
    auto cannot block and ``full`` keep the full forward."""
    default, small = TrainParams(), csr_view(_csr_with(10))
    assert plan(*small, 4, default) is None
    assert isinstance(plan(*small, 4, default, world_size=2), LayerwiseInference)
    assert plan(*small, 4, dataclasses.replace(default, model="mlp"), world_size=2) is None
    assert plan(*small, 4, replace(default, inference={"mode": "full"}), world_size=2) is None


def test_memo_skips_recomputing_for_unchanged_weights(csr, features):
    model = _model("sage")
    engine = LayerwiseInference(*csr_view(csr), 9)
    first = engine(model, features)
    assert engine(model, features) is first  # train and val accuracy of one epoch: one pass
    with torch.no_grad():
        model.convs[0].lin_l.weight.add_(0.5)  # an optimizer step changes weights in place
    second = engine(model, features)
    assert second is not first and not torch.allclose(second, first)
    torch.testing.assert_close(second, _full(model, features, csr), atol=1e-5, rtol=1e-5)


def test_unsupported_models_are_refused(csr, features):
    sign = build_model("sign", IN_DIM, CLASSES, TrainParams(model="sign", sampler="sign"), 1)
    with pytest.raises(ValueError, match="train.inference.mode: full"):
        layerwise_logits(sign, features, LayerwiseInference(*csr_view(csr), 9))


# ------------------------------------------------------------------------------- typed graphs
TYPED_SIZES = {"a": 30, "b": 12, "c": 5}


def typed_graph() -> dict:
    """Three node types, five edge types (one a self-relation of a, with loops and a hub; c
    gets only 3 in-edges: some of its rows have none)."""
    rng = np.random.default_rng(2)

    def edges(s, d, n, hub=None):
        src, dst = rng.integers(0, TYPED_SIZES[s], n), rng.integers(0, TYPED_SIZES[d], n)
        if hub is not None:
            dst[: n // 3] = hub
        return csr_from_edges(src, dst, TYPED_SIZES[d], TYPED_SIZES[s])

    return {("a", "cites", "a"): edges("a", "a", 80, hub=4), ("a", "to", "b"): edges("a", "b", 40),
            ("b", "to", "a"): edges("b", "a", 40), ("c", "to", "a"): edges("c", "a", 20),
            ("a", "in", "c"): edges("a", "c", 3)}


def _typed_model(name: str, out: str = "target"):
    from gnnpipe.hetero.models import build_hetero_model

    graph = typed_graph()
    torch.manual_seed(0)
    dims = {"a": 6, "b": 3, "c": 2}
    model = build_hetero_model(name, (list(TYPED_SIZES), list(graph)), dims, CLASSES, "a",
                               TrainParams(model=name, hidden=8, heads=2, num_layers=2), out=out)
    x = {t: torch.randn(n, dims[t], generator=torch.Generator().manual_seed(3))
         for t, n in TYPED_SIZES.items()}
    return model.eval(), graph, x


@pytest.mark.parametrize("name", ["sage", "rgcn"])
@pytest.mark.parametrize("out", ["target", "all"])
@pytest.mark.parametrize("block_edges", [1, 11, 10**6])
def test_typed_layerwise_equals_the_full_forward_with_hidden(name, out, block_edges):
    model, graph, x = _typed_model(name, out)
    with torch.no_grad():
        edges = {e: c.edge_index() for e, c in graph.items()}
        want, want_hidden = model.forward_with_hidden(x, edges)
    engine = LayerwiseInference(graph, TYPED_SIZES, block_edges)
    got, hidden = layerwise_logits(model, x, engine, with_hidden=True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert hidden.keys() == want_hidden.keys()
    for t in hidden:
        torch.testing.assert_close(hidden[t], want_hidden[t], atol=1e-5, rtol=1e-5)


def test_typed_sage_builds_no_messages():
    """Each edge type's SAGEConv aggregates by the sparse product, as the homogeneous one."""
    model, graph, x = _typed_model("sage")
    with torch.no_grad():
        want = model(x, {e: c.edge_index() for e, c in graph.items()})

    def boom(*args, **kwargs):
        raise AssertionError("per-edge propagate called")
    for layer_convs in model.body.convs:
        for conv in layer_convs.values():
            conv.propagate = boom
    engine = LayerwiseInference(graph, TYPED_SIZES, 11)
    torch.testing.assert_close(layerwise_logits(model, x, engine), want, atol=1e-5, rtol=1e-5)
    assert engine.num_gathered == 0
    assert len(engine.blocks("a")) > 3 and engine.blocks("c") == [(0, 5)]  # 5 rows + 3 edges


@pytest.mark.parametrize("name", ["hgt", "mlp"])
def test_typed_models_it_cannot_block_are_refused(name):
    model, graph, x = _typed_model(name)
    with pytest.raises(ValueError, match=f"evaluates typed sage and rgcn models, not "
                                         f"train.model='{name}'"):
        layerwise_logits(model, x, LayerwiseInference(graph, TYPED_SIZES, 11))


def test_typed_plan_counts_every_edge_type():
    graph, cfg = typed_graph(), TrainParams(model="rgcn")
    edges = sum(c.num_edges for c in graph.values())
    assert plan(graph, TYPED_SIZES, AUTO_MESSAGE_FLOATS // edges, cfg) is None
    assert isinstance(plan(graph, TYPED_SIZES, AUTO_MESSAGE_FLOATS // edges + 1, cfg),
                      LayerwiseInference)
    assert plan(graph, TYPED_SIZES, 10**9, replace(cfg, model="hgt")) is None  # auto: no hgt


# ------------------------------------------------------------------------------ fit integration
def test_fit_with_layerwise_evaluation_matches_the_full_forward(small_graph, tmp_path,
                                                                 monkeypatch):
    """The same logits to 1e-5; the layer-wise fit's (rank 0's split logits) in a mapped
    scratch table of the stage's folder, not anonymous memory."""
    roles = role_codes(split_nodes(as_graph(small_graph), NodeSplitParams(),
                                   make_rng(0, "split")).roles)
    graphs = {p: small_graph.csr for p in ("train", "val", "test")}
    cfg = TrainParams(model="gcn", epochs=6, patience=6, hidden=16)
    results = {}
    for mode in ("full", "layerwise"):
        mode_cfg = replace(cfg, inference={"mode": mode, "block_edges": 2000})
        inputs = build_inputs(small_graph.x, message_graphs=graphs, cfg=mode_cfg)
        assert (inputs["val"].layerwise is not None) == (mode == "layerwise")
        if mode == "layerwise":
            monkeypatch.setenv(SCRATCH_ENV, str(tmp_path))
        results[mode] = fit(lambda: build_model("gcn", small_graph.x.shape[1], 3, mode_cfg),
                            inputs, small_graph.y, roles, mode_cfg, 0)
    full, lw = results["full"], results["layerwise"]
    assert lw.perf["eval_inference"] == "layerwise" and "eval_inference" not in full.perf
    assert mapped_file(lw.logits).endswith("(deleted)")
    assert not mapped_file(full.logits).endswith("(deleted)")
    assert torch.equal(full.node_id, lw.node_id)
    torch.testing.assert_close(lw.logits, full.logits, atol=1e-5, rtol=1e-5)
    assert [h["val_acc"] for h in lw.history] == [h["val_acc"] for h in full.history]


# ------------------------------------------------------------------------------------------ DDP
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ddp_worker(rank: int, world: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    ctx = DistContext(rank, world, rank)
    distributed.init_process_group(ctx, timeout_s=60)
    try:
        csr, x = awkward_csr(), torch.randn(NUM_NODES, IN_DIM,
                                            generator=torch.Generator().manual_seed(1))
        out = {}
        for name, train in [("gcn", {}), ("gat", {"jk": "cat"}), ("sage", {"residual": True})]:
            model = _model(name, **train)
            engine = LayerwiseInference(*csr_view(csr), 9)
            logits = layerwise_logits(model, x, engine, ctx)
            out[name] = (logits.numpy(), len(engine.blocks(NODE, ctx)))  # numpy: pickled by value
        # fit under DDP: val has 1 node, so rank 1 scores none of it and must still join
        roles = role_codes(np.array(["train"] * 40 + ["val"] + ["test"] * 19))
        cfg = TrainParams(model="sage", epochs=2, hidden=8,
                          inference=InferenceParams(mode="layerwise", block_edges=9))
        inputs = build_inputs(x, message_graphs={p: csr for p in ("train", "val", "test")},
                              cfg=cfg)
        y = torch.arange(NUM_NODES) % CLASSES
        result = fit(lambda: build_model("sage", IN_DIM, CLASSES, cfg), inputs, y, roles, cfg,
                     0, options=LoopOptions(ctx=ctx))
        queue.put((rank, out, tuple(result.logits.shape), result.history))
    finally:
        distributed.shutdown()


def test_two_gloo_ranks_split_the_blocks_and_agree_with_one_process(csr, features):
    queue = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(_ddp_worker, args=(2, _free_port(), queue), nprocs=2,
                       start_method="spawn")
    got = dict((rank, rest) for rank, *rest in (queue.get(), queue.get()))
    x = torch.randn(NUM_NODES, IN_DIM, generator=torch.Generator().manual_seed(1))
    single_blocks = len(row_blocks(cost_prefix([csr], NUM_NODES), 9))
    for name, train in [("gcn", {}), ("gat", {"jk": "cat"}), ("sage", {"residual": True})]:
        expected = _full(_model(name, **train), x, csr)
        for rank in (0, 1):
            logits, num_blocks = got[rank][0][name]
            torch.testing.assert_close(torch.from_numpy(logits), expected, atol=1e-5,
                                       rtol=1e-5)  # all N rows on every rank
            assert num_blocks < single_blocks  # each rank did only its share
    assert got[0][1] == (NUM_NODES, CLASSES) and got[1][1] == (0,)  # rank 0 keeps the logits
    assert got[0][2] == got[1][2] and len(got[0][2]) == 2  # same metrics on both ranks


# ------------------------------------------------------------------------------------- residual
def test_residual_keeps_the_parameters_and_changes_the_output(csr, features):
    plain, residual = _model("sage"), _model("sage", residual=True)
    assert type(residual).__name__ == "ResidualGraphSAGE"
    assert plain.state_dict().keys() == residual.state_dict().keys()
    residual.load_state_dict(plain.state_dict())
    assert not torch.allclose(_full(plain, features, csr), _full(residual, features, csr))
    shallow = build_model("gcn", IN_DIM, CLASSES, TrainParams(model="gcn", num_layers=2))
    assert not hasattr(shallow, "residual")  # the default stays PyG's own class


def test_residual_trains(small_graph):
    roles = role_codes(split_nodes(as_graph(small_graph), NodeSplitParams(),
                                   make_rng(0, "split")).roles)
    cfg = TrainParams(model="sage", num_layers=3, residual=True, epochs=40, patience=20,
                      hidden=32)
    inputs = build_inputs(small_graph.x,
                          message_graphs={p: small_graph.csr for p in ("train", "val", "test")})
    result = fit(lambda: build_model("sage", small_graph.x.shape[1], 3, cfg), inputs,
                 small_graph.y, roles, cfg, 0)
    assert result.summary["best_val_acc"] > 0.7, result.summary
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]


@pytest.mark.parametrize("train, match", [
    ({"model": "mlp", "residual": True, "num_layers": 3}, "applies to gcn, sage and gat"),
    ({"model": "sage", "residual": True}, r"train.num_layers >= 3"),
    ({"model": "gat", "residual": True, "num_layers": 1, "jk": "cat"}, r"num_layers >= 2"),
])
def test_residual_without_hidden_layers_is_refused(train, match):
    with pytest.raises(ParamsError, match=match):
        params_from_dict({"train": train})
    params_from_dict({"train": {"model": "sage", "residual": True, "num_layers": 2, "jk": "max"}})


@pytest.mark.parametrize("raw, match", [
    ({"train": {"model": "sign", "sampler": "sign", "inference": {"mode": "layerwise"}}}, "not train.model"),
    ({"dataset": {"task": "link"}, "train": {"model": "sign", "sampler": "sign",
                                             "inference": {"mode": "layerwise"}}}, "not train.model"),
])
def test_layerwise_for_a_model_it_cannot_block_is_refused(raw, match):
    # link task, lightning and shards accept it (tests/training/test_eval_scale.py)
    with pytest.raises(ParamsError, match=match):
        params_from_dict(raw)
    params_from_dict({"train": {"model": "gat", "inference": {"mode": "layerwise"}}})
