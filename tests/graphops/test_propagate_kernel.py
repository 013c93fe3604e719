"""propagate.kernel: the numba kernel (``jit``) gives ATen's product bit for bit (random CSR,
empty rows, weighted sym/rw/ppr matrices, bfloat16 hops, row blocks, int64 indices), whatever the
thread count or prefetch distance; ``auto`` picks by size; ``jit`` without numba is one line."""

from __future__ import annotations

import dataclasses
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gnnpipe.config import PropagateParams
from graph_oracle import normalize_edges
from gnnpipe.graphops.propagate import FMA_CAPABILITIES, _sparse_csr, choose_kernel, propagate

kernel = pytest.importorskip("gnnpipe.graphops.propagate_kernel", reason="numba is not installed")


# ATen's AVX2 / AVX512 kernels fuse multiply-add as the jit kernel does: the same bits; its
# generic build (ATEN_CPU_CAPABILITY=default) rounds each product first: within 1e-6
SAME_BITS = torch.backends.cpu.get_cpu_capability() in FMA_CAPABILITIES


def assert_atens(got: torch.Tensor, want: torch.Tensor) -> None:
    if SAME_BITS:
        assert torch.equal(got, want)
    else:
        assert (got - want).abs().max() <= 1e-6 * max(1.0, float(want.abs().max()))


def _csr_arrays(n=300, nnz=2500, seed=0, empty_every=7, index=torch.int32):
    """A random CSR (n, n) with every ``empty_every``-th row empty, weights in (0, 1)."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, n, nnz)
    rows = rows[rows % empty_every != 0]
    counts = np.bincount(rows, minlength=n)
    crow = torch.zeros(n + 1, dtype=index)
    crow[1:] = torch.from_numpy(np.cumsum(counts))
    col = torch.from_numpy(rng.integers(0, n, counts.sum())).to(index)
    values = torch.from_numpy(rng.random(counts.sum(), dtype=np.float32))
    return crow, col, values


def _aten(crow, col, values, x):
    adj = _sparse_csr(crow, col, values, (x.shape[0], x.shape[0]))
    return torch.sparse.mm(adj, x, reduce="sum")


def test_features_equal_to_ids_sum_the_neighbour_ids():
    crow, col, _ = _csr_arrays()
    n = crow.numel() - 1
    x = torch.arange(n, dtype=torch.float32)[:, None].repeat(1, 5) + torch.arange(5.0) * 1000
    out = kernel.spmm_rows(crow, col, torch.ones(col.numel()), x, 0, n)
    want = torch.zeros(n, 5).index_add_(0, torch.repeat_interleave(
        torch.arange(n), (crow[1:] - crow[:-1]).long()), x[col.long()])
    assert torch.equal(out, want)  # integers below 2^24: exact, so any wrong gather shows
    assert torch.equal(out[::7], torch.zeros(len(range(0, n, 7)), 5))  # empty rows are zero


@pytest.mark.parametrize("index", [torch.int32, torch.int64])
@pytest.mark.parametrize("f", [1, 16, 37, 128])
def test_weighted_product_is_atens_bit_for_bit(index, f):
    crow, col, values = _csr_arrays(index=index, seed=f)
    x = torch.randn(crow.numel() - 1, f, generator=torch.Generator().manual_seed(f))
    want = _aten(crow, col, values, x)
    got = kernel.spmm_rows(crow, col, values, x, 0, x.shape[0])
    assert_atens(got, want)
    # a row block reads the whole matrix's offsets and gives the same rows
    assert torch.equal(kernel.spmm_rows(crow, col, values, x, 41, 203), got[41:203])


def test_bit_identity_is_sensitive_to_the_order_within_a_row():
    """The same matrix with each row's non-zeros stored in reverse gives other float32 bits, so
    the equality above pins the summation order (stored order, one fused multiply-add each)."""
    crow, col, values = _csr_arrays(n=200, nnz=6000)
    x = torch.randn(200, 64, generator=torch.Generator().manual_seed(3))
    counts = (crow[1:] - crow[:-1]).long()
    starts = torch.repeat_interleave(crow[:-1].long(), counts)
    ends = torch.repeat_interleave(crow[1:].long(), counts)
    reverse = starts + ends - 1 - torch.arange(col.numel())  # mirror each row's slots
    got = kernel.spmm_rows(crow, col[reverse], values[reverse], x, 0, 200)
    want = _aten(crow, col, values, x)
    assert torch.allclose(got, want, atol=1e-5) and not torch.equal(got, want)
    assert_atens(got, _aten(crow, col[reverse], values[reverse], x))


@pytest.mark.parametrize("ahead", [0, 1, 16, 10_000])
def test_prefetch_distance_does_not_change_the_result(ahead):
    crow, col, values = _csr_arrays()
    x = torch.randn(crow.numel() - 1, 24)
    got = kernel.spmm_rows(crow, col, values, x, 0, x.shape[0], ahead=ahead)
    assert torch.equal(got, kernel.spmm_rows(crow, col, values, x, 0, x.shape[0], ahead=0))
    assert_atens(got, _aten(crow, col, values, x))


def test_thread_count_follows_torch_and_does_not_change_bits():
    import numba

    crow, col, values = _csr_arrays(n=2000, nnz=30000)
    x = torch.randn(2000, 32)
    before = torch.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            outs.append(kernel.spmm_rows(crow, col, values, x, 0, 2000))
            assert numba.get_num_threads() == min(threads, numba.config.NUMBA_NUM_THREADS)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(outs[0], outs[1])
    assert_atens(outs[0], _aten(crow, col, values, x))


def _graph(n=400, m=3000, seed=0):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    csr, _ = normalize_edges(src, dst, n, undirected=seed % 2 == 0, dedup=True,
                             remove_self_loops=True)
    return csr


@pytest.mark.parametrize("norm", ["sym", "rw", "ppr"])
@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_propagate_with_jit_equals_aten_hop_for_hop(norm, self_loops, dtype):
    csr = _graph(seed=len(norm))
    x = torch.randn(csr.num_nodes, 12, generator=torch.Generator().manual_seed(1))
    cfg = PropagateParams(hops=3, norm=norm, self_loops=self_loops, dtype=dtype, block_rows=37)
    aten = list(propagate(csr, x, dataclasses.replace(cfg, kernel="aten")))
    jit = list(propagate(csr, x, dataclasses.replace(cfg, kernel="jit")))
    assert len(jit) == 3
    for a, b in zip(aten, jit):
        assert a.dtype == b.dtype == getattr(torch, dtype)
        if SAME_BITS or dtype == "float32":
            assert_atens(b.float(), a.float())
        else:  # the last bit of a float32 hop may flip a bfloat16 rounding, and then chain
            scale = float(a.float().abs().max())
            assert torch.allclose(b.float(), a.float(), rtol=2**-7, atol=2**-7 * scale)


def test_auto_picks_jit_only_on_large_hops(monkeypatch):
    from gnnpipe.graphops import propagate as module

    auto = PropagateParams(kernel="auto")
    limit = module.AUTO_JIT_GATHERED_BYTES
    assert choose_kernel(auto, limit // 512 - 1, 128) == "aten"
    assert choose_kernel(auto, limit // 512, 128) == ("jit" if SAME_BITS else "aten")
    assert choose_kernel(PropagateParams(kernel="aten"), 10 * limit, 128) == "aten"
    assert choose_kernel(PropagateParams(kernel="jit"), 1, 1) == "jit"
    # where ATen's build rounds each product (no FMA), auto keeps its bits
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert choose_kernel(auto, 10 * limit, 128) == "aten"
    monkeypatch.undo()
    # the default pipeline's graphs are far below the limit: its hops stay ATen's
    monkeypatch.setattr(module, "AUTO_JIT_GATHERED_BYTES", 0)
    csr = _graph()
    x = torch.randn(csr.num_nodes, 8)
    assert torch.equal(list(propagate(csr, x, auto))[-1],
                       list(propagate(csr, x, PropagateParams(kernel="aten")))[-1])


def test_jit_without_numba_is_a_one_line_error_and_auto_falls_back(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.delitem(sys.modules, "gnnpipe.graphops.propagate_kernel")
    with pytest.raises(ValueError, match=r"^propagate\.kernel=jit needs numba, which does not "
                                         r"import \(.*\); pip install numba, or set "
                                         r"propagate\.kernel: aten$"):
        choose_kernel(PropagateParams(kernel="jit"), 10, 4)
    assert choose_kernel(PropagateParams(kernel="auto"), 2**40, 128) == "aten"
    csr = _graph()
    with pytest.raises(ValueError, match="needs numba"):
        list(propagate(csr, torch.randn(csr.num_nodes, 4), PropagateParams(kernel="jit")))


def test_kernel_param_is_validated():
    from gnnpipe.config import ParamsError, params_from_dict

    with pytest.raises(ParamsError,
                       match=r"propagate\.kernel='numba' is not valid; expected one of: "
                             r"auto, aten, jit"):
        params_from_dict({"propagate": {"kernel": "numba"}})
    assert params_from_dict({}).propagate.kernel == "auto"


def test_no_writable_cache_location_compiles_without_caching(monkeypatch):
    import numba

    real, asked = numba.njit, []

    def njit(cache=False, **flags):  # numba raises this when no cache locator is writable
        asked.append(cache)
        if cache:
            raise RuntimeError("cannot cache function: no locator available")
        return real(**flags)

    monkeypatch.setattr(kernel, "numba", SimpleNamespace(njit=njit))
    compiled = kernel._jit(lambda a: a + 1.5)
    assert asked == [True, False] and compiled(1.0) == 2.5
