"""SIGN precomputation against dense and scipy.sparse references and, bit for bit, the
whole-graph hop loop (an oracle kept here); ppr, bfloat16, streaming to disk (memory-mappable
files), one hop held at a time, and the stage's per-phase graphs."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gnnpipe.config import PropagateParams
from gnnpipe.data.graph import Csr, phase_csrs
from graph_oracle import normalize_edges
from gnnpipe.graphops.propagate import (DTYPES, _sparse_csr, adjacency_rows, adjacency_values,
                                        node_scale, propagate)


def _graph(n=37, m=90, seed=0, isolated=(), undirected=True, loops=False) -> Csr:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    if isolated:
        keep = ~(np.isin(src, isolated) | np.isin(dst, isolated))
        src, dst = src[keep], dst[keep]
    csr, _ = normalize_edges(src, dst, n, undirected=undirected, dedup=True,
                             remove_self_loops=not loops)
    return csr


def dense_adjacency(csr: Csr, norm: str, self_loops: bool) -> np.ndarray:
    """A_hat as a dense float64 matrix; ppr uses the sym matrix."""
    n = csr.num_nodes
    a = np.zeros((n, n))
    np.add.at(a, (csr.targets().numpy(), csr.indices.numpy()), 1.0)  # row v <- sources of v
    if self_loops:
        a += np.eye(n)
    deg = a.sum(axis=1)
    with np.errstate(divide="ignore"):
        if norm in ("sym", "ppr"):
            d = np.where(deg > 0, deg ** -0.5, 0.0)
            return d[:, None] * a * d[None, :]
        return np.where(deg > 0, 1.0 / deg, 0.0)[:, None] * a


def reference_hops(csr: Csr, x: torch.Tensor, cfg: PropagateParams) -> list[np.ndarray]:
    """X_1..X_K in float64 from the dense matrix (APPNP recursion for ppr)."""
    a_hat = dense_adjacency(csr, cfg.norm, cfg.self_loops)
    x0 = x.double().numpy()
    out, h = [], x0
    for _ in range(cfg.hops):
        h = a_hat @ h
        if cfg.norm == "ppr":
            h = (1 - cfg.alpha) * h + cfg.alpha * x0
        out.append(h)
    return out


def scipy_adjacency(csr: Csr, norm: str, self_loops: bool) -> sp.csr_matrix:
    n = csr.num_nodes
    a = sp.csr_matrix((np.ones(csr.num_edges), csr.indices.numpy(), csr.indptr.numpy()),
                      shape=(n, n))
    if self_loops:
        a = a + sp.identity(n, format="csr")
    deg = np.asarray(a.sum(axis=1)).ravel()
    with np.errstate(divide="ignore"):
        if norm in ("sym", "ppr"):
            d = sp.diags(np.where(deg > 0, deg ** -0.5, 0.0))
            return (d @ a @ d).tocsr()
        return (sp.diags(np.where(deg > 0, 1.0 / deg, 0.0)) @ a).tocsr()


def normalized_adjacency(csr: Csr, cfg: PropagateParams) -> torch.Tensor:
    """Oracle: A_hat of the whole graph as one sparse CSR (N, N) float32, int64 indices."""
    indptr, indices, counts = adjacency_rows(csr.indptr.numpy(), csr.indices.numpy(), 0, cfg)
    scale = node_scale(csr.degrees(), cfg).numpy()
    values = adjacency_values(scale, counts, scale[indices], cfg)
    return _sparse_csr(*map(torch.from_numpy, (indptr, indices, values)),
                       (csr.num_nodes, csr.num_nodes))


def oracle_hops(csr: Csr, x: torch.Tensor, cfg: PropagateParams) -> list[torch.Tensor]:
    """Oracle: the whole-graph hop loop, one ATen product of the whole A_hat per hop, each hop
    from the previous one as stored."""
    adj, x0 = normalized_adjacency(csr, cfg), x.float()
    hops, previous = [], x0
    for _ in range(cfg.hops):
        hop = torch.sparse.mm(adj, previous, reduce="sum")
        if cfg.norm == "ppr":
            hop.mul_(1.0 - cfg.alpha).add_(x0, alpha=cfg.alpha)
        hops.append(hop.to(DTYPES[cfg.dtype]))
        previous = hops[-1].float()
    return hops


def _features(n, f=4, seed=1) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal((n, f)).astype(np.float32))


CONFIGS = [(norm, loops, block) for norm in ("sym", "rw", "ppr") for loops in (True, False)
           for block in (5, 37, 1000)]


@pytest.mark.parametrize("norm, self_loops, block_rows", CONFIGS)
def test_propagate_matches_dense_powers(norm, self_loops, block_rows):
    csr = _graph()
    x = _features(csr.num_nodes)
    x_before = x.clone()
    cfg = PropagateParams(hops=3, norm=norm, self_loops=self_loops, block_rows=block_rows,
                          alpha=0.2)
    hops = list(propagate(csr, x, cfg))
    assert len(hops) == 3
    assert torch.equal(x, x_before)  # X_0 untouched
    a_sp = scipy_adjacency(csr, norm, self_loops)
    x0 = x.double().numpy()
    want_sp = x0.copy()
    for k, (got, want) in enumerate(zip(hops, reference_hops(csr, x, cfg)), start=1):
        want_sp = a_sp @ want_sp
        if norm == "ppr":
            want_sp = 0.8 * want_sp + 0.2 * x0
        assert got.dtype == torch.float32 and got.shape == x.shape
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5, err_msg=f"hop {k}")
        np.testing.assert_allclose(got.numpy(), want_sp, atol=1e-5, err_msg=f"hop {k} (scipy)")


@pytest.mark.parametrize("norm, dtype", [("sym", "float32"), ("rw", "bfloat16"),
                                         ("ppr", "bfloat16"), ("ppr", "float32")])
def test_blocks_give_the_whole_graph_oracles_bits(norm, dtype):
    """Any block size (1 row, 7, all), with and without self-loops, directed with stored
    loops: the block tasks' hops equal the whole-matrix product's, bit for bit."""
    for csr in (_graph(isolated=(0, 7)), _graph(n=30, m=80, seed=5, undirected=False,
                                                 loops=True)):
        x = _features(csr.num_nodes, f=6, seed=2)
        for self_loops in (True, False):
            cfg = PropagateParams(hops=3, norm=norm, self_loops=self_loops, dtype=dtype,
                                  alpha=0.3, kernel="aten")
            want = oracle_hops(csr, x, cfg)
            for block_rows in (1, 7, csr.num_nodes):
                got = list(propagate(csr, x, PropagateParams(**{**cfg.__dict__,
                                                                "block_rows": block_rows})))
                assert all(torch.equal(a, b) for a, b in zip(got, want)), (block_rows,
                                                                           self_loops)


@pytest.mark.parametrize("norm", ["sym", "rw"])
@pytest.mark.parametrize("self_loops", [True, False])
def test_isolated_nodes(norm, self_loops):
    isolated = (0, 7, 36)
    csr = _graph(isolated=isolated, seed=3)
    assert all(int(csr.degrees()[v]) == 0 for v in isolated)
    x = _features(csr.num_nodes, seed=4)
    cfg = PropagateParams(hops=2, norm=norm, self_loops=self_loops, block_rows=5)
    hops = list(propagate(csr, x, cfg))
    a_hat = dense_adjacency(csr, norm, self_loops)
    want = x.double().numpy()
    for got in hops:
        want = a_hat @ want
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
        assert np.isfinite(got.numpy()).all()
        for v in isolated:  # a self-loop keeps the node's own features, none zeroes them
            expect = x[v] if self_loops else torch.zeros_like(x[v])
            assert torch.allclose(got[v], expect, atol=1e-6)


@pytest.mark.parametrize("norm", ["sym", "rw"])
def test_directed_graph_and_existing_self_loops(norm):
    """Row normalisation follows in-degree; a stored loop plus the added one counts twice."""
    csr = _graph(n=20, m=50, seed=5, undirected=False, loops=True)
    x = _features(20, seed=6)
    for self_loops in (True, False):
        cfg = PropagateParams(hops=2, norm=norm, self_loops=self_loops, block_rows=3)
        a_hat = dense_adjacency(csr, norm, self_loops)
        want = x.double().numpy()
        for got in propagate(csr, x, cfg):
            want = a_hat @ want
            np.testing.assert_allclose(got.numpy(), want, atol=1e-5)


def test_rw_rows_sum_to_one_and_sym_is_symmetric():
    csr = _graph(seed=8)
    rw = normalized_adjacency(csr, PropagateParams(norm="rw", self_loops=True)).to_dense()
    np.testing.assert_allclose(rw.sum(dim=1).numpy(), np.ones(csr.num_nodes), atol=1e-6)
    sym = normalized_adjacency(csr, PropagateParams(norm="sym", self_loops=True)).to_dense()
    np.testing.assert_allclose(sym.numpy(), sym.numpy().T, atol=1e-7)
    np.testing.assert_allclose(sym.numpy(), dense_adjacency(csr, "sym", True), atol=1e-6)


@pytest.mark.parametrize("self_loops", [True, False])
def test_adjacency_blocks_in_any_order_fill_the_whole_matrix(self_loops):
    """Block tasks of 5 rows, run last block first, write A_hat's column ids (int32) and values
    where the whole matrix has them."""
    from gnnpipe.graphops.propagate import Adjacency, adjacency_block

    csr = _graph(seed=8)
    cfg = PropagateParams(norm="sym", self_loops=self_loops)
    want = normalized_adjacency(csr, cfg)
    nnz = want.values().numel()
    adj = Adjacency(csr.indptr.numpy(), csr.indices.numpy(),
                    node_scale(csr.degrees(), cfg).numpy(), np.full(nnz, -1, np.int32),
                    np.full(nnz, np.nan, np.float32))
    for start in reversed(range(0, csr.num_nodes, 5)):
        assert adjacency_block(start, min(start + 5, csr.num_nodes), adjacency=adj,
                               cfg=cfg) > 0  # peak RSS, MiB
    assert np.array_equal(adj.col, want.col_indices().numpy())
    assert np.array_equal(adj.values, want.values().numpy())


def test_tiny_graph_one_hop_is_neighbour_mean(tiny_graph):
    """x[:, 0] is the node id: rw without loops gives the mean id of each node's neighbours."""
    cfg = PropagateParams(hops=1, norm="rw", self_loops=False, block_rows=4)
    (x1,) = propagate(tiny_graph.csr, tiny_graph.x, cfg)
    csr = tiny_graph.csr
    for v in range(tiny_graph.num_nodes):
        neighbours = csr.indices[csr.indptr[v]:csr.indptr[v + 1]].double()
        assert x1[v, 0].item() == pytest.approx(neighbours.mean().item(), abs=1e-5)
        assert x1[v, 1].item() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("hops", [0, 1, 4])
def test_number_of_yielded_hops_equals_cfg_hops(hops, tiny_graph):
    out = list(propagate(tiny_graph.csr, tiny_graph.x, PropagateParams(hops=hops)))
    assert len(out) == hops
    assert all(h is not tiny_graph.x for h in out)


def test_float64_features_are_propagated_as_float32(tiny_graph):
    x64 = tiny_graph.x.double()
    (x1,) = propagate(tiny_graph.csr, x64, PropagateParams(hops=1))
    assert x1.dtype == torch.float32
    assert x64.dtype == torch.float64


def test_feature_rows_must_match_nodes(tiny_graph):
    with pytest.raises(ValueError, match="features have 11 rows for a graph of 12 nodes"):
        list(propagate(tiny_graph.csr, tiny_graph.x[:11], PropagateParams()))


# ------------------------------------------------------------------------------------- ppr
def test_ppr_one_hop_is_the_appnp_step_and_many_hops_reach_pagerank_diffusion():
    csr = _graph(seed=9)
    x = _features(csr.num_nodes, seed=10)
    a_hat = dense_adjacency(csr, "sym", True)
    (x1,) = propagate(csr, x, PropagateParams(hops=1, norm="ppr", alpha=0.3))
    want = 0.7 * a_hat @ x.double().numpy() + 0.3 * x.double().numpy()
    np.testing.assert_allclose(x1.numpy(), want, atol=1e-5)
    # X_K -> alpha (I - (1 - alpha) A_hat)^-1 X, the personalized-PageRank diffusion
    *_, x_last = propagate(csr, x, PropagateParams(hops=80, norm="ppr", alpha=0.2))
    exact = 0.2 * np.linalg.solve(np.eye(csr.num_nodes) - 0.8 * a_hat, x.double().numpy())
    np.testing.assert_allclose(x_last.numpy(), exact, atol=1e-5)


def test_sym_and_ppr_share_the_matrix_and_alpha_matters_only_for_ppr():
    csr = _graph(seed=11)
    sym = normalized_adjacency(csr, PropagateParams(norm="sym")).to_dense()
    ppr = normalized_adjacency(csr, PropagateParams(norm="ppr")).to_dense()
    assert torch.equal(sym, ppr)
    x = _features(csr.num_nodes)
    a = list(propagate(csr, x, PropagateParams(hops=2, norm="sym", alpha=0.1)))
    b = list(propagate(csr, x, PropagateParams(hops=2, norm="sym", alpha=0.5)))
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    c = list(propagate(csr, x, PropagateParams(hops=2, norm="ppr", alpha=0.5)))
    assert not torch.allclose(a[1], c[1])


# -------------------------------------------------------------------------------- bfloat16
@pytest.mark.parametrize("norm", ["sym", "rw", "ppr"])
def test_bfloat16_hops_round_each_float32_step_of_the_stored_previous_hop(norm):
    csr = _graph(seed=12)
    x = _features(csr.num_nodes, f=6, seed=13)
    cfg = PropagateParams(hops=3, norm=norm, dtype="bfloat16", block_rows=7)
    hops = list(propagate(csr, x, cfg))
    assert all(h.dtype == torch.bfloat16 and h.shape == x.shape for h in hops)
    a_hat = dense_adjacency(csr, norm, True)
    x0 = x.double().numpy()
    previous = x0
    for got in hops:  # each hop: one float32 step from the previous *stored* hop, then rounded
        step = a_hat @ previous
        if norm == "ppr":
            step = (1 - cfg.alpha) * step + cfg.alpha * x0
        np.testing.assert_allclose(got.double().numpy(), step, rtol=2 ** -8, atol=1e-5)
        previous = got.double().numpy()
    # and the chain stays within bfloat16 precision of the exact float64 powers
    for got, want in zip(hops, reference_hops(csr, x, cfg)):
        scale = np.abs(want).max()
        assert np.abs(got.double().numpy() - want).max() <= 3 * 2 ** -8 * scale


# --------------------------------------------------------------------- memory and the sink
def test_only_one_hop_is_alive_while_a_consumer_keeps_none():
    import gc
    import weakref

    csr = _graph()
    x = _features(csr.num_nodes)
    alive = []
    refs = []
    for hop in propagate(csr, x, PropagateParams(hops=5, block_rows=8)):
        refs.append(weakref.ref(hop))
        del hop
        gc.collect()
        alive.append(sum(r() is not None for r in refs))
    assert alive == [1] * 5  # the generator holds the previous hop only, never all K


class _RecordingSink:
    """A memory sink that records the blocks it receives."""

    def __init__(self):
        self.writes = []

    def __call__(self, hop, shape, dtype):
        sink = self

        class Writer:
            out = torch.full(shape, float("nan"), dtype=dtype)

            def write(self, start, block):
                sink.writes.append((hop, start, block.shape[0], block.dtype))
                self.out[start:start + block.shape[0]] = block

            def finish(self):
                return self.out

            def discard(self):
                sink.writes.append((hop, "discarded"))

        return Writer()


def test_hops_reach_the_sink_in_row_blocks_in_order():
    csr = _graph()
    sink = _RecordingSink()
    hops = list(propagate(csr, _features(37), PropagateParams(hops=2, block_rows=10,
                                                               dtype="bfloat16"), sink=sink))
    assert sink.writes == [(h, s, min(10, 37 - s), torch.float32) for h in (1, 2)
                           for s in (0, 10, 20, 30)]
    assert all(not torch.isnan(h.float()).any() for h in hops)


def test_hop_files_stream_to_disk_and_load_memory_mapped(tmp_path):
    from gnnpipe import io

    csr = _graph(n=300, m=1200, seed=14)
    x = _features(300, f=5, seed=15)
    for dtype in ("float32", "bfloat16"):
        cfg = PropagateParams(hops=3, norm="ppr", dtype=dtype, block_rows=64)
        in_memory = list(propagate(csr, x, cfg))
        out = tmp_path / dtype
        out.mkdir()
        streamed = list(propagate(csr, x, cfg, sink=partial(io.HopWriter, out, "message_train")))
        for k, (mem, disk) in enumerate(zip(in_memory, streamed), start=1):
            path = out / f"message_train_hop_{k}.pt"
            assert torch.equal(mem, disk) and disk.dtype == mem.dtype
            mapped = torch.load(path, mmap=True, weights_only=True)
            loaded = torch.load(path, weights_only=True)
            assert mapped["schema"] == "gnnpipe.hop/1" and mapped["meta"] == {
                "hop": k, "graph": "message_train"}
            assert torch.equal(mapped["x"], mem) and torch.equal(loaded["x"], mem)
            assert str(path) in open("/proc/self/maps").read()  # really file-backed
        assert sorted(p.name for p in out.iterdir()) == [
            f"message_train_hop_{k}.pt" for k in (1, 2, 3)]  # no temp files left


def test_a_failed_hop_leaves_no_file_behind(tmp_path):
    from gnnpipe import io

    csr = _graph()
    writers = partial(io.HopWriter, tmp_path, "g")
    calls = {"n": 0}

    def failing_sink(hop, shape, dtype):
        writer = writers(hop, shape, dtype)
        original = writer.write

        def write(start, block):
            calls["n"] += 1
            if hop == 2 and calls["n"] > 5:
                raise RuntimeError("disk full")
            original(start, block)

        writer.write = write
        return writer

    hops = propagate(csr, _features(37), PropagateParams(hops=2, block_rows=5), sink=failing_sink)
    next(hops)
    with pytest.raises(RuntimeError, match="disk full"):
        next(hops)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g_hop_1.pt"]


def test_traffic_bytes_counts_graph_and_rows_once():
    from gnnpipe.graphops.propagate import hop_traffic_bytes

    assert hop_traffic_bytes(10, 30, 4) == 11 * 4 + 30 * 8 + 10 * 4 * 8  # int32 indices
    assert hop_traffic_bytes(10, 30, 4, out_itemsize=2, index_itemsize=8, ppr=True) == (
        11 * 8 + 30 * 12 + 10 * 4 * (4 + 2 + 4))
    assert hop_traffic_bytes(10, 2**31, 4) == 11 * 8 + 2**31 * 12 + 10 * 4 * 8


# ------------------------------------------------------------------------------------ stage
@pytest.fixture(scope="module")
def inductive_folder(tmp_path_factory):
    import os

    import yaml

    from gnnpipe.cli import main

    folder = tmp_path_factory.mktemp("propagate_stage")
    params = {"dataset": {"synthetic": {"num_nodes": 900, "num_features": 6, "num_classes": 3}},
              "split": {"node": {"mode": "inductive"}},
              "propagate": {"hops": 2, "norm": "ppr", "alpha": 0.15, "dtype": "bfloat16",
                            "block_rows": 100}}
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        assert main(["prepare"]) == 0 and main(["split"]) == 0 and main(["propagate"]) == 0
    finally:
        os.chdir(cwd)
    return folder


def test_stage_propagates_each_phase_over_its_own_message_graph(inductive_folder):
    import json

    from gnnpipe import io

    graph = io.read_graph(inductive_folder / "data/prepared").target_view()
    graphs = phase_csrs(io.read_typed_message_graphs(inductive_folder / "data/split")[1])
    hops = io.read_propagated(inductive_folder / "data/propagate")
    cfg = PropagateParams(hops=2, norm="ppr", alpha=0.15, dtype="bfloat16", block_rows=100)
    for phase in ("train", "val", "test"):
        want = [graph.x.to(torch.bfloat16), *propagate(graphs[phase], graph.x, cfg)]
        assert len(hops[phase]) == 3
        assert all(torch.equal(a, b) for a, b in zip(hops[phase], want)), phase
    assert not torch.equal(hops["train"][1], hops["test"][1])  # train never saw test edges
    meta = json.loads((inductive_folder / "data/propagate/meta.json").read_text())
    assert meta == {"hops": 2, "norm": "ppr", "self_loops": True, "alpha": 0.15,
                    "dtype": "bfloat16", "phase_graph": {p: f"message_{p}" for p in
                                                         ("train", "val", "test")}}
    perf = json.loads((inductive_folder / "metrics/perf/propagate.json").read_text())
    assert len(perf["hop_seconds"]) == 6 and perf["effective_gb_per_s"] > 0, perf
    # kernel auto on a small graph: ATen's, recorded per message graph
    assert perf["kernel"] == {f"message_{p}": "aten" for p in ("train", "val", "test")}
    assert perf["peak_rss_mb"] > 50


def test_stage_rerun_is_byte_identical(inductive_folder, monkeypatch):
    from gnnpipe.cli import main

    out = inductive_folder / "data/propagate"
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.chdir(inductive_folder)
    assert main(["propagate"]) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first


@pytest.mark.parametrize("raw, message", [
    ({"norm": "appnp"}, r"propagate\.norm='appnp' is not valid; expected one of: sym, rw, ppr"),
    ({"alpha": 1.0}, r"propagate\.alpha=1\.0 is out of range; expected < 1\.0"),
    ({"alpha": 0}, r"propagate\.alpha=0\.0 is out of range; expected > 0\.0"),
    ({"dtype": "float16"}, r"propagate\.dtype='float16' .* float32, bfloat16"),
])
def test_propagate_params_are_validated(raw, message):
    from gnnpipe.config import ParamsError, params_from_dict

    with pytest.raises(ParamsError, match=message):
        params_from_dict({"propagate": raw})


@pytest.mark.parametrize("sink_kind", ["memory", "disk"])
def test_blocks_without_edges_come_out_zero_not_stale(tmp_path, sink_kind):
    """Rows 8.. are isolated: their block's product has no non-zeros and must not keep the
    reused staging buffer's previous contents."""
    from gnnpipe import io

    src = np.array([0, 1, 2, 3, 4, 5, 6])
    csr, _ = normalize_edges(src, src + 1, 20, undirected=True, dedup=True,
                             remove_self_loops=True)
    x = _features(20, seed=17) + 10.0
    cfg = PropagateParams(hops=2, self_loops=False, block_rows=8, dtype="bfloat16")
    sink = partial(io.HopWriter, tmp_path, "g") if sink_kind == "disk" else None
    hops = list(propagate(csr, x, cfg, **({"sink": sink} if sink else {})))
    for hop in hops:
        assert bool((hop[8:] == 0).all()) and bool((hop[:8].abs() > 0).any())
    empty = Csr(torch.zeros(21, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
    assert all(bool((h == 0).all()) for h in propagate(empty, x, cfg))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hop_writer_reads_back_in_chunks_without_mapping(tmp_path, dtype):
    from gnnpipe.io.propagated import HopWriter

    x = _features(50, f=3, seed=18)
    writer = HopWriter(tmp_path, "g", 1, (50, 3), dtype)
    for start in (40, 0, 20):  # any order: each block lands at its own offset
        writer.write(start, x[start:start + 20])
    mapped = writer.finish()
    assert torch.equal(mapped, x.to(dtype))
    before = open("/proc/self/maps").read().count(str(tmp_path / "g_hop_1.pt"))
    out = torch.full((50, 3), float("nan"))
    writer.read_into(out, chunk_bytes=7 * 3 * 4)  # 7 rows per read: several partial chunks
    assert torch.equal(out, x.to(dtype).float())
    assert open("/proc/self/maps").read().count(str(tmp_path / "g_hop_1.pt")) == before


def test_the_operand_buffer_is_on_huge_pages_when_large():
    from gnnpipe.graphops.propagate import hugepage_empty

    small = hugepage_empty((10, 4))
    assert small.shape == (10, 4) and small.dtype == torch.float32
    big = hugepage_empty((4096, 256))  # 4 MiB
    big.fill_(1.5)
    assert big.shape == (4096, 256) and float(big.sum()) == 1.5 * 4096 * 256
    assert big.is_contiguous() and big.data_ptr() % 4096 == 0
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if mode.exists() and "[never]" not in mode.read_text():  # Linux with THP on: advised
        flags = _vm_flags(big.data_ptr())
        assert "hg" in flags.split(), flags  # VM_HUGEPAGE: madvise(MADV_HUGEPAGE) took


def _vm_flags(address: int) -> str:
    """The VmFlags line of the mapping holding ``address`` (from /proc/self/smaps)."""
    inside = False
    for line in open("/proc/self/smaps"):
        head = line.split()[0]
        if "-" in head and ":" not in head:
            start, end = (int(v, 16) for v in head.split("-"))
            inside = start <= address < end
        elif inside and line.startswith("VmFlags:"):
            return line
    raise AssertionError(f"no mapping holds {address:#x}")


def test_gathered_bytes_read_one_row_per_non_zero():
    from bench.propagate import hop_gathered_bytes
    from gnnpipe.graphops.propagate import hop_traffic_bytes

    # 10 nodes, 30 non-zeros, F = 4, int32: graph 11*4 + 30*8, 30 rows of 16 B read, 10 written
    assert hop_gathered_bytes(10, 30, 4) == 11 * 4 + 30 * 8 + 30 * 16 + 10 * 16
    assert hop_gathered_bytes(10, 30, 4, in_itemsize=2, ppr=True) == (
        11 * 4 + 30 * 8 + 30 * 4 * 2 + 10 * 4 * (4 + 4))
    assert hop_gathered_bytes(10, 10, 4) == hop_traffic_bytes(10, 10, 4)  # one non-zero a row
