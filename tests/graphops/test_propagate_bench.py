"""bench/propagate.py on a tiny graph: the locality orders compute the same hop bit for bit, the
roofline probes run, and the bandwidth figures follow their definitions."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
import torch

from gnnpipe.config import PropagateParams
from gnnpipe.graphops.propagate import hop_traffic_bytes, jit_missing

# bench/ is a folder of the repository, not part of the installed package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.propagate import hop_gathered_bytes, normalized_adjacency  # noqa: E402


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    from bench import propagate as bench

    out = tmp_path_factory.mktemp("bench") / "propagate.json"
    summary = bench.main(["--scale", "0.003", "--features", "16", "--repeat", "1",
                          "--copy-gib", "0.01", "--no-scipy", "--roofline", "--orders",
                          "--json", str(out)])
    assert out.exists()
    return summary


def test_orders_compute_the_same_hop_bit_for_bit(small_run):
    orders = small_run["orders"]
    assert set(orders) == {"given order", "class (labels; an oracle community order)",
                           "degree, descending", "reverse Cuthill-McKee (scipy)"}
    for name, row in orders.items():
        if name != "given order":
            assert row["identical"] is True, name
            assert row["order_seconds"] >= 0


def test_permute_keeps_each_rows_entries_in_order():
    from bench.common import build_graph, graph_params
    from bench.propagate import _permute, _with_index

    args = argparse.Namespace(scale=0.001, avg_degree=8.0, features=8, classes=3, homophily=0.8,
                              degree_skew=1.0, seed=0)
    graph = build_graph(graph_params(args))
    adj = normalized_adjacency(graph.csr, PropagateParams())
    perm = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(1))
    permuted, inverse = _permute(adj, perm)
    assert torch.equal(inverse[perm], torch.arange(graph.num_nodes))
    dense, dense_p = adj.to_dense(), permuted.to_dense()
    assert torch.equal(dense_p, dense[perm][:, perm])  # the same matrix, renumbered
    x = graph.x
    want = torch.sparse.mm(adj, x, reduce="sum")
    got = torch.sparse.mm(permuted, x[perm].contiguous(), reduce="sum")[inverse]
    assert torch.equal(got, want)
    assert _with_index(permuted, torch.int64).col_indices().dtype == torch.int64


def test_roofline_rows_and_bandwidth_definitions(small_run):
    roof = small_run["roofline"]
    rows = roof["rows"]
    assert {"ATen kernel (gnnpipe's), the graph", "ATen kernel, banded columns (rows in cache)",
            "ATen kernel, uniform random columns"} <= set(rows)
    n, nnz, f = 3000, small_run["nnz"], 16
    traffic = hop_traffic_bytes(n, nnz, f)
    gathered = hop_gathered_bytes(n, nnz, f)
    for row in rows.values():
        assert row["effective_gb_s"] == pytest.approx(traffic / row["seconds"] / 1e9)
        assert row["gathered_gb_s"] == pytest.approx(gathered / row["seconds"] / 1e9)
        copy = small_run["copy"]
        assert row["fraction_of_copy"] == pytest.approx(
            row["effective_gb_s"] / max(copy["numpy_gb_s"], copy["torch_gb_s"]))
    if roof["checks"]:  # a C compiler was found: the probe kernel computes the same product
        assert roof["checks"]["c_max_abs_diff_vs_aten"] < 1e-5
        assert roof["checks"]["c_bf16_max_rel_error"] < 2 ** -7
        assert roof["bounds"]["random_row_read_gb_s"]["prefetch 16"] > 0
        for row in rows.values():  # hop seconds at the random-row rate / the row's seconds
            assert row["fraction_of_roofline"] == pytest.approx(
                roof["bounds"]["hop_seconds_at_random_read"] / row["seconds"])
    if not jit_missing():
        assert roof["checks"]["jit_identical_to_aten"] is True
        assert roof["checks"]["jit_first_call_seconds"] >= 0
        assert {"numba kernel (kernel: jit), the graph, prefetch 16",
                "numba kernel, banded columns (rows in cache)"} <= set(rows)


def test_methods_agree(small_run):
    methods = small_run["methods"]
    jit = set() if jit_missing() else {"gnnpipe jit"}
    assert set(methods) == {"gnnpipe", "gnnpipe->disk", "torch.sparse"} | jit
    assert methods["gnnpipe->disk"]["max_abs_diff_vs_gnnpipe"] == 0.0
    for name in jit:  # propagate.kernel: jit computes ATen's bits
        assert methods[name]["max_abs_diff_vs_gnnpipe"] == 0.0
    assert methods["torch.sparse"]["max_abs_diff_vs_gnnpipe"] < 1e-5
