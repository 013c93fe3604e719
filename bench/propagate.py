"""Propagation speed and memory: gnnpipe vs torch.sparse.mm vs scipy.sparse, same graph, same run.

    python -m bench.propagate                 # 1M nodes, ~20M edges, 128 features, 2 hops
    python -m bench.propagate --scale 0.1     # quick
    python -m bench.propagate --sweep         # also block sizes, index width, feature blocks, bf16

Every method computes the same K hops of the same A_hat (``normalized_adjacency`` here, from
gnnpipe's block pieces):
  gnnpipe        ``propagate``'s block tasks in this process (A_hat built by blocks in the
                 timed run), hops kept in memory (kernel: aten)
  gnnpipe jit    the same with ``propagate.kernel: jit`` (numba, prefetching; when numba imports)
  gnnpipe->disk  the same, each hop streamed to a memory-mappable file (what the stage does)
  torch.sparse   one ``torch.sparse.mm(A_hat, X)`` per hop on the whole matrix
  scipy          ``scipy.sparse.csr_matrix @ ndarray`` per hop (int32 indices, one thread)
Bandwidth, per hop, divided by the best wall seconds of that hop:
  eff GB/s       least traffic a hop needs: A_hat (offsets, int32 indices, float32 values) read
                 once, X_{k-1} read once, X_k written once (+ X_0 read once for ppr);
                 ``gnnpipe.graphops.propagate.hop_traffic_bytes``
  gathered GB/s  the same with X_{k-1} read as one F-wide row per stored non-zero, what a CSR
                 kernel touches (``hop_gathered_bytes`` here)
  of copy        eff GB/s / the STREAM-like copy bandwidth (bytes read + bytes written per
                 second, ``bench.common.copy_bandwidth``) measured at the start of the same run
CPU seconds (all threads) are printed beside wall seconds: the box is shared, and CPU time is
the figure that load inflates least. Peak memory is the rise of VmHWM above the RSS before each
method (graph and X_0 resident).

    python -m bench.propagate --skip-methods --roofline --orders   # why the goal is not met

``--roofline`` times the same kernel with the same row structure but other column indices
(banded: every operand row in L1/L2, the kernel's own ceiling; uniform random: no locality),
the machine's random F-wide-row read bandwidth and a small C kernel with software prefetch
(compiled with the system C compiler into a temporary folder; skipped without one), next to
gnnpipe's numba kernel (``propagate.kernel: jit``); *of roofline* = the hop time if every gathered
row came at the best measured random-row rate / the row's time. ``--orders``
computes one hop in a locality order (class, degree, RCM) and un-permutes the result.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from functools import partial
from typing import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `gnnpipe` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from bench.common import (PeakMemory, add_graph_args, copy_bandwidth, describe, load_graph,
                          print_machine, timed)
from gnnpipe import io
from gnnpipe.config import PropagateParams
from gnnpipe.data.graph import Csr
from gnnpipe.graphops.propagate import (ROW_KERNELS, INT32_MAX, _sparse_csr, adjacency_rows,
                                        adjacency_values, hop_traffic_bytes,
                                        hugepage_empty, jit_missing, node_scale, propagate)


def hop_gathered_bytes(num_nodes: int, num_edges: int, num_features: int, *,
                       in_itemsize: int = 4, out_itemsize: int = 4,
                       index_itemsize: int | None = None, ppr: bool = False) -> int:
    """Bytes a CSR kernel touches in one hop: ``hop_traffic_bytes`` with X_{k-1} read as one
    F-wide row per stored non-zero (``num_edges`` rows) instead of once per node.

    Each row read lands at a random address of X_{k-1}; on graphs without locality nearly all
    of them come from DRAM, so this, not ``hop_traffic_bytes``, is what the memory moves.
    (Below ``hop_traffic_bytes`` only when there are fewer non-zeros than nodes.)
    """
    least = hop_traffic_bytes(num_nodes, num_edges, num_features, in_itemsize=in_itemsize,
                              out_itemsize=out_itemsize, index_itemsize=index_itemsize, ppr=ppr)
    return least + (num_edges - num_nodes) * num_features * in_itemsize


def normalized_adjacency(csr: Csr, cfg: PropagateParams) -> torch.Tensor:
    """``A_hat`` of the whole graph as one sparse CSR (N, N) float32, int32 indices when they
    fit: the matrix the block tasks build row block by row block, for the whole-matrix peers."""
    n = csr.num_nodes
    indptr, indices, counts = adjacency_rows(csr.indptr.numpy(), csr.indices.numpy(), 0, cfg)
    scale = node_scale(csr.degrees(), cfg).numpy()
    indptr, indices, values = map(torch.from_numpy, (
        indptr, indices, adjacency_values(scale, counts, scale[indices], cfg)))
    if indices.numel() <= INT32_MAX and n <= INT32_MAX:
        indptr, indices = indptr.to(torch.int32), indices.to(torch.int32)
    return _sparse_csr(indptr, indices, values, (n, n))


def block_hops(adj: torch.Tensor, x: torch.Tensor, cfg: PropagateParams) -> list[torch.Tensor]:
    """K hops of a given matrix (a permuted or re-indexed ``A_hat``) in row blocks of
    ``cfg.block_rows`` by ``cfg.kernel``, float32 in memory (sym / rw: no ppr term)."""
    crow, col, values = adj.crow_indices(), adj.col_indices(), adj.values()
    kernel = ROW_KERNELS["aten" if cfg.kernel == "auto" else cfg.kernel]
    hops, previous = [], x
    for _ in range(cfg.hops):
        hop = torch.empty_like(x)
        for start in range(0, x.shape[0], cfg.block_rows):
            stop = min(start + cfg.block_rows, x.shape[0])
            hop[start:stop] = kernel(crow, col, values, previous, start, stop)
        hops.append(hop)
        previous = hop
    return hops


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_graph_args(parser)
    parser.add_argument("--hops", type=int, default=2)
    parser.add_argument("--norm", choices=["sym", "rw", "ppr"], default="sym")
    parser.add_argument("--block-rows", type=int, default=PropagateParams().block_rows)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per method (best kept)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--copy-gib", type=float, default=1.0, help="array size of the copy test")
    parser.add_argument("--no-scipy", action="store_true")
    parser.add_argument("--sweep", action="store_true",
                        help="also time block sizes, int32 vs int64 indices, feature blocks, "
                             "bfloat16 operands")
    parser.add_argument("--roofline", action="store_true",
                        help="also time the kernel without locality / with perfect locality, "
                             "random-row read bandwidth and a prefetching C kernel")
    parser.add_argument("--orders", action="store_true",
                        help="also time one hop computed in class / degree / RCM node order")
    parser.add_argument("--skip-methods", action="store_true",
                        help="skip the gnnpipe / torch.sparse / scipy comparison")
    parser.add_argument("--json", type=Path, default=None, help="write the results here too")
    return parser.parse_args(argv)


def _chain(step, x, hops):
    out = x
    for _ in range(hops):
        out = step(out)
    return out


def _with_index(adj: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(adj.crow_indices().to(dtype), adj.col_indices().to(dtype),
                                       adj.values(), size=adj.shape, check_invariants=False)


def _interleaved(methods: dict, repeat: int) -> dict:
    """Best and median wall seconds and best CPU seconds (all threads) per method, timing the
    methods in turn in each round so a change of machine load hits all of them alike."""
    times = {name: [] for name in methods}
    cpu = {name: [] for name in methods}
    for _ in range(repeat):
        for name, fn in methods.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return {name: {"best": min(t), "median": float(np.median(t)), "cpu": min(cpu[name])}
            for name, t in times.items()}


# ----------------------------------------------------------------------------- roofline probes
NATIVE_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <immintrin.h>
/* out[r] = sum over row r's non-zeros, in stored order, of val[e] * x[col[e]], like ATen's
   spmm_reduce "sum" (built with the compiler's default FP contraction it matches it bit for
   bit on x86-64 with FMA); the F-wide row `dist` non-zeros ahead is prefetched into L1. */
void spmm_f32(int64_t n, const int32_t *crow, const int32_t *col, const float *val,
              const float *x, int64_t f, float *out, int64_t dist, int threads) {
  int64_t nnz = crow[n];
  #pragma omp parallel for schedule(dynamic, 4096) num_threads(threads)
  for (int64_t r = 0; r < n; r++) {
    float *o = out + r * f;
    memset(o, 0, f * sizeof(float));
    for (int64_t e = crow[r]; e < crow[r + 1]; e++) {
      if (dist > 0 && e + dist < nnz) {
        const char *p = (const char *)(x + (int64_t)col[e + dist] * f);
        for (int64_t b = 0; b < f * 4; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
      }
      const float *xr = x + (int64_t)col[e] * f;
      float v = val[e];
      for (int64_t k = 0; k < f; k++) o[k] = o[k] + xr[k] * v;
    }
  }
}
/* the same with a bfloat16 operand (the upper half of a float32), float32 accumulation */
void spmm_bf16(int64_t n, const int32_t *crow, const int32_t *col, const float *val,
               const uint16_t *x, int64_t f, float *out, int64_t dist, int threads) {
  int64_t nnz = crow[n];
  #pragma omp parallel for schedule(dynamic, 4096) num_threads(threads)
  for (int64_t r = 0; r < n; r++) {
    float *o = out + r * f;
    memset(o, 0, f * sizeof(float));
    for (int64_t e = crow[r]; e < crow[r + 1]; e++) {
      if (dist > 0 && e + dist < nnz) {
        const char *p = (const char *)(x + (int64_t)col[e + dist] * f);
        for (int64_t b = 0; b < f * 2; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
      }
      const uint16_t *xr = x + (int64_t)col[e] * f;
      float v = val[e];
      for (int64_t k = 0; k < f; k++) {
        uint32_t u = (uint32_t)xr[k] << 16;
        float xv;
        memcpy(&xv, &u, 4);
        o[k] = o[k] + xv * v;
      }
    }
  }
}
/* read rows x[idx[0..m)] (f <= 1024 floats) and sum them into one per-thread row: the
   random-row read bandwidth with no output traffic */
double gather_rows(const int32_t *idx, int64_t m, const float *x, int64_t f, int64_t dist,
                   int threads) {
  double total = 0;
  #pragma omp parallel reduction(+:total) num_threads(threads)
  {
    float acc[1024] = {0};
    #pragma omp for schedule(static)
    for (int64_t e = 0; e < m; e++) {
      if (dist > 0 && e + dist < m) {
        const char *p = (const char *)(x + (int64_t)idx[e + dist] * f);
        for (int64_t b = 0; b < f * 4; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
      }
      const float *xr = x + (int64_t)idx[e] * f;
      for (int64_t k = 0; k < f; k++) acc[k] += xr[k];
    }
    for (int64_t k = 0; k < f; k++) total += acc[k];
  }
  return total;
}
"""


def _native_probe() -> tuple[object, str]:
    """The C probe kernels as a ctypes library, or (None, why not). Bench-only: gnnpipe itself
    stays pure torch."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None, "no C compiler (cc/gcc) on PATH"
    folder = Path(tempfile.mkdtemp(prefix="bench_propagate_native_"))
    (folder / "probe.c").write_text(NATIVE_SOURCE)
    built = subprocess.run([cc, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
                            str(folder / "probe.c"), "-o", str(folder / "probe.so")],
                           capture_output=True, text=True)
    if built.returncode:
        return None, f"{cc} failed: {built.stderr.strip()[-300:]}"
    lib = ctypes.CDLL(str(folder / "probe.so"))
    shutil.rmtree(folder, ignore_errors=True)  # the loaded library stays mapped
    i64, ptr, i32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
    for name in ("spmm_f32", "spmm_bf16"):
        getattr(lib, name).argtypes = [i64, ptr, ptr, ptr, ptr, i64, ptr, i64, i32]
    lib.gather_rows.argtypes = [ptr, i64, ptr, i64, i64, i32]
    lib.gather_rows.restype = ctypes.c_double
    return lib, ""


def _on_hugepages(t: torch.Tensor) -> torch.Tensor:
    """A float32 copy on huge pages, as gnnpipe keeps its operand (``hugepage_empty``)."""
    out = hugepage_empty(tuple(t.shape))
    out.copy_(t)
    return out


def _csr(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, n: int) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, size=(n, n), check_invariants=False)


class _Rows:
    """Times one-hop callables one after another and prints each row as soon as it is timed
    (so a run cut short keeps what it measured): best wall and CPU seconds of ``repeat`` runs,
    after one warm-up run when ``repeat`` > 1, and the bandwidths of the module docstring."""

    def __init__(self, traffic: int, gathered: int, reference_bw: float, repeat: int,
                 floor: float | None = None):
        self.traffic, self.gathered, self.reference_bw = traffic, gathered, reference_bw
        self.repeat, self.table, self.floor = repeat, {}, floor  # floor: roofline hop seconds
        print(f"{'one hop':<54} {'s':>7} {'cpu s':>7} {'eff GB/s':>9} {'of copy':>8} "
              f"{'gath GB/s':>10}" + (f" {'of roofline':>11}" if floor else ""), flush=True)

    def time(self, name: str, fn: Callable[[], object], note: str = "") -> dict:
        if self.repeat > 1:
            fn()
        t = _interleaved({name: fn}, self.repeat)[name]
        r = {"seconds": t["best"], "cpu_seconds": t["cpu"],
             "effective_gb_s": self.traffic / t["best"] / 1e9,
             "gathered_gb_s": self.gathered / t["best"] / 1e9}
        r["fraction_of_copy"] = r["effective_gb_s"] / self.reference_bw
        roof = ""
        if self.floor:
            r["fraction_of_roofline"] = self.floor / t["best"]
            roof = f" {r['fraction_of_roofline']:10.1%}"
        if note:
            r["note"] = note
        self.table[name] = r
        print(f"{name:<54} {r['seconds']:7.3f} {r['cpu_seconds']:7.2f} "
              f"{r['effective_gb_s']:9.2f} {r['fraction_of_copy']:7.1%} "
              f"{r['gathered_gb_s']:10.2f}{roof}" + (f"  {note}" if note else ""), flush=True)
        return r


def roofline(adj: torch.Tensor, x: torch.Tensor, repeat: int, reference_bw: float) -> dict:
    """One hop of A_hat X (whole matrix, all threads) under access patterns that bound it."""
    n, f = x.shape
    crow, col, values = adj.crow_indices(), adj.col_indices(), adj.values()
    nnz = values.numel()
    threads = torch.get_num_threads()
    operand = _on_hugepages(x)
    out = _on_hugepages(torch.zeros(n, f))
    reference = torch.sparse.mm(adj, operand, reduce="sum")
    counts = (crow[1:] - crow[:-1]).to(torch.int64)
    rows = torch.repeat_interleave(torch.arange(n), counts)
    within = torch.arange(nnz) - torch.repeat_interleave(crow[:-1].to(torch.int64), counts)
    banded = ((rows + within) % n).to(torch.int32)  # row v reads rows v .. v+deg-1: in L1/L2
    del rows, within
    generator = torch.Generator().manual_seed(0)
    uniform = torch.randint(0, n, (nnz,), dtype=torch.int32, generator=generator)
    adj_banded, adj_uniform = _csr(crow, banded, values, n), _csr(crow, uniform, values, n)
    traffic = hop_traffic_bytes(n, nnz, f, index_itemsize=col.element_size())
    gathered = hop_gathered_bytes(n, nnz, f, index_itemsize=col.element_size())
    lib, why = _native_probe() if f <= 1024 else (None, "more than 1024 features")
    gather, checks, bounds = {}, {}, {}
    if lib is None:
        print(f"# C probe skipped: {why}")
    else:
        for dist in (0, 16):  # nnz random rows of the operand, summed: no output traffic
            t = _interleaved({"g": lambda d=dist: lib.gather_rows(
                uniform.data_ptr(), nnz, operand.data_ptr(), f, d, threads)}, 1)["g"]
            gather[f"prefetch {dist}"] = nnz * f * 4 / t["best"] / 1e9
        print(f"# random {f * 4}-byte row reads of the {n * f * 4 / 2**20:.0f} MiB operand "
              f"({threads} threads): " + ", ".join(f"{k} {v:.2f} GB/s" for k, v in gather.items()))
        floor = (gathered - traffic) / (max(gather.values()) * 1e9) + traffic / (reference_bw * 1e9)
        bounds = {"random_row_read_gb_s": gather, "hop_seconds_at_random_read": floor,
                  "fraction_of_copy_at_random_read": traffic / floor / 1e9 / reference_bw}
        print(f"# a hop whose gathered rows all came from DRAM at the best random-row rate "
              f"would take {floor:.3f} s: eff {traffic / floor / 1e9:.2f} GB/s = "
              f"{bounds['fraction_of_copy_at_random_read']:.1%} of copy", flush=True)
    rows = _Rows(traffic, gathered, reference_bw, repeat, bounds.get("hop_seconds_at_random_read"))
    rows.time("ATen kernel (gnnpipe's), the graph",
              lambda: torch.sparse.mm(adj, operand, reduce="sum"))
    rows.time("ATen kernel, banded columns (rows in cache)",
              lambda: torch.sparse.mm(adj_banded, operand, reduce="sum"), "kernel ceiling")
    rows.time("ATen kernel, uniform random columns",
              lambda: torch.sparse.mm(adj_uniform, operand, reduce="sum"), "no locality")
    if not jit_missing():
        checks.update(_jit_rows(rows, crow, col, banded, values, operand, reference))
    else:
        print("# numba kernel skipped: numba does not import")
    if lib is not None:
        operand_bf16 = operand.to(torch.bfloat16)

        def c_spmm(columns, dist, bf16=False):
            fn = lib.spmm_bf16 if bf16 else lib.spmm_f32
            return lambda: fn(n, crow.data_ptr(), columns.data_ptr(), values.data_ptr(),
                              (operand_bf16 if bf16 else operand).data_ptr(), f, out.data_ptr(),
                              dist, threads)

        rows.time("C kernel, the graph, prefetch 16 non-zeros ahead", c_spmm(col, 16))
        same = torch.equal(out, reference)  # the last timed call left its product in `out`
        checks["c_max_abs_diff_vs_aten"] = float((out - reference).abs().max())
        print(f"#   bit-identical to ATen's product: {same}")
        rows.time("C kernel, the graph, bfloat16 operand, prefetch 16", c_spmm(col, 16, True))
        bf16_err = float((out - reference).abs().max() / reference.abs().max())
        print(f"#   max relative error (operand rounded to bfloat16): {bf16_err:.1e}")
        checks.update({"c_identical_to_aten": same, "c_bf16_max_rel_error": bf16_err})
        rows.time("C kernel, banded columns (rows in cache)", c_spmm(banded, 0), "ceiling")
    table = rows.table
    return {"rows": table, "bounds": bounds, "checks": checks}


def _jit_rows(rows: _Rows, crow, col, banded, values, operand, reference) -> dict:
    """gnnpipe's numba kernel (``propagate.kernel: jit``) on the graph with and without its
    prefetch, and on banded columns; its fixed cost (import, then compile or cache load, on a
    one-row product) timed first: meaningful only where numba was not yet used in the process."""
    started = time.perf_counter()
    from gnnpipe.graphops import propagate_kernel

    n = operand.shape[0]
    result = {}

    def hop(columns, ahead=propagate_kernel.PREFETCH_AHEAD):
        def run():
            result["out"] = propagate_kernel.spmm_rows(crow, columns, values, operand, 0, n,
                                                       ahead=ahead)
        return run

    propagate_kernel.spmm_rows(crow, col, values, operand, 0, 1)  # one row: the fixed cost
    first = time.perf_counter() - started
    stats = propagate_kernel._kernel.stats  # numba's: machine code from its on-disk cache?
    cached = bool(stats.cache_hits) and not stats.cache_misses
    print(f"# numba kernel: import + first call (one row) {first:.2f} s "
          f"({'machine code from the cache' if cached else 'compiled'})", flush=True)
    ahead = propagate_kernel.PREFETCH_AHEAD
    rows.time(f"numba kernel (kernel: jit), the graph, prefetch {ahead}", hop(col))
    checks = {"jit_identical_to_aten": torch.equal(result["out"], reference),
              "jit_max_abs_diff_vs_aten": float((result["out"] - reference).abs().max()),
              "jit_first_call_seconds": first, "jit_from_cache": cached}
    print(f"#   bit-identical to ATen's product: {checks['jit_identical_to_aten']}")
    rows.time("numba kernel, the graph, no prefetch", hop(col, 0))
    rows.time("numba kernel, banded columns (rows in cache)", hop(banded, 0), "ceiling")
    return checks


def _permute(adj: torch.Tensor, perm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A_hat with rows and columns renumbered (new id i = old id perm[i]), each row's entries
    kept in their stored order so every output element is the same sum in the same order;
    returns it and the inverse permutation (old id -> new id)."""
    n = adj.shape[0]
    crow, col, values = adj.crow_indices(), adj.col_indices(), adj.values()
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(n)
    counts = (crow[1:] - crow[:-1]).to(torch.int64)[perm]
    new_crow = torch.zeros(n + 1, dtype=torch.int64)
    new_crow[1:] = torch.cumsum(counts, 0)
    source = (torch.repeat_interleave(crow[:-1].to(torch.int64)[perm] - new_crow[:-1], counts)
              + torch.arange(values.numel()))
    new_col = inverse[col[source].to(torch.int64)].to(col.dtype)
    return _csr(new_crow.to(crow.dtype), new_col, values[source], n), inverse


def orders(adj: torch.Tensor, x: torch.Tensor, y: torch.Tensor, repeat: int,
           reference_bw: float) -> dict:
    """One hop computed in a locality order: the permuted A_hat times the permuted operand,
    then the result un-permuted (``out[inverse]``); checked bit-identical to the given order."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    n, f = x.shape
    crow, col = adj.crow_indices(), adj.col_indices()
    nnz = col.numel()
    operand = _on_hugepages(x)
    reference = torch.sparse.mm(adj, operand, reduce="sum")
    counts = crow[1:] - crow[:-1]

    def rcm():
        pattern = sp.csr_matrix((np.ones(nnz, np.float32), col.numpy(), crow.numpy()),
                                shape=(n, n))
        return torch.from_numpy(reverse_cuthill_mckee(pattern, symmetric_mode=True)
                                .astype(np.int64))

    makers = {"class (labels; an oracle community order)": lambda: torch.argsort(y, stable=True),
              "degree, descending": lambda: torch.argsort(counts, descending=True, stable=True),
              "reverse Cuthill-McKee (scipy)": rcm}
    traffic = hop_traffic_bytes(n, nnz, f, index_itemsize=col.element_size())
    gathered = hop_gathered_bytes(n, nnz, f, index_itemsize=col.element_size())
    rows = _Rows(traffic, gathered, reference_bw, repeat)
    rows.time("given order", lambda: torch.sparse.mm(adj, operand, reduce="sum"))
    for name, make in makers.items():
        start = time.perf_counter()
        perm = make()
        matrix, inverse = _permute(adj, perm)
        permuted = _on_hugepages(x[perm])
        cost = time.perf_counter() - start
        result = {}

        def hop(m=matrix, p=permuted, i=inverse):
            result["out"] = torch.sparse.mm(m, p, reduce="sum")[i]

        row = rows.time(name, hop, f"order + permute {cost:.2f} s once")
        row.update(order_seconds=cost, identical=torch.equal(result.pop("out"), reference))
        print(f"#   bit-identical to the given order: {row['identical']}", flush=True)
        del matrix, permuted, inverse, perm
    return rows.table


def compare_methods(args: argparse.Namespace, cfg: PropagateParams, csr: Csr,
                    adj: torch.Tensor, x: torch.Tensor, reference_bw: float) -> dict:
    """K hops four ways (module docstring), timed interleaved; per-method figures."""
    n, f, k = x.shape[0], x.shape[1], cfg.hops
    nnz = adj.values().numel()

    def last(hops):  # keep only the newest hop, as the stage does
        out = None
        for out in hops:
            pass
        return out

    def mix(step, x0):  # ppr: (1 - alpha) A_hat h + alpha X_0, else A_hat h
        if cfg.norm != "ppr":
            return step
        return lambda h: (1 - cfg.alpha) * step(h) + cfg.alpha * x0

    tmp = Path(tempfile.mkdtemp(prefix="bench_propagate_"))
    aten = dataclasses.replace(cfg, kernel="aten")
    methods = {
        "gnnpipe": lambda: last(propagate(csr, x, aten)),
        "gnnpipe->disk": lambda: last(propagate(csr, x, aten,
                                                sink=partial(io.HopWriter, tmp, "bench"))),
        "torch.sparse": lambda: _chain(mix(lambda h: torch.sparse.mm(adj, h), x), x, k),
    }
    if not args.no_scipy:
        import scipy.sparse as sp

        scipy_adj = sp.csr_matrix((adj.values().numpy(), adj.col_indices().numpy().astype(np.int32),
                                   adj.crow_indices().numpy().astype(np.int32)), shape=(n, n))
        scipy_hop = mix(lambda h: scipy_adj @ h, x.numpy())
        methods["scipy"] = lambda: _chain(scipy_hop, x.numpy(), k)
    if not jit_missing():
        jit = dataclasses.replace(cfg, kernel="jit")  # first (warm-up) call compiles
        methods["gnnpipe jit"] = lambda: last(propagate(csr, x, jit))

    results, outs, peaks = {}, {}, {}
    for name, fn in methods.items():
        with PeakMemory() as mem:
            outs[name] = torch.as_tensor(np.asarray(fn()))  # warm-up run, measures memory too
        peaks[name] = mem
    timings = _interleaved(methods, args.repeat)
    index_bytes = adj.col_indices().element_size()
    for name in methods:
        timing, mem = timings[name], peaks[name]
        per_hop = timing["best"] / k
        traffic = hop_traffic_bytes(n, nnz, f, index_itemsize=index_bytes, ppr=cfg.norm == "ppr")
        gathered = hop_gathered_bytes(n, nnz, f, index_itemsize=index_bytes,
                                      ppr=cfg.norm == "ppr")
        results[name] = {"seconds_per_hop": per_hop, "median_seconds_per_hop": timing["median"] / k,
                         "cpu_seconds_per_hop": timing["cpu"] / k,
                         "effective_gb_s": traffic / per_hop / 1e9,
                         "gathered_gb_s": gathered / per_hop / 1e9,
                         "peak_added_mb": mem.added_mb, "peak_mb": mem.peak_mb}
        if name != "gnnpipe":
            diff = (outs[name] - outs["gnnpipe"]).abs().max()
            results[name]["max_abs_diff_vs_gnnpipe"] = float(diff)
            del outs[name]
    shutil.rmtree(tmp, ignore_errors=True)
    base = results["torch.sparse"]["seconds_per_hop"]
    print(f"\n{'method':<14} {'s/hop':>7} {'cpu s':>6} {'vs torch':>9} {'eff GB/s':>9} "
          f"{'of copy':>8} {'gath GB/s':>10} {'peak +MiB':>10}")
    for name, r in results.items():
        r["vs_torch_sparse"] = r["seconds_per_hop"] / base
        r["fraction_of_copy"] = r["effective_gb_s"] / reference_bw
        print(f"{name:<14} {r['seconds_per_hop']:7.3f} {r['cpu_seconds_per_hop']:6.2f} "
              f"{r['vs_torch_sparse']:8.2f}x "
              f"{r['effective_gb_s']:9.2f} {r['fraction_of_copy']:7.1%} {r['gathered_gb_s']:10.2f} "
              f"{r['peak_added_mb']:10.0f}")
    print("# max |diff| vs gnnpipe: "
          + ", ".join(f"{m} {r['max_abs_diff_vs_gnnpipe']:.1e}" for m, r in results.items()
                      if "max_abs_diff_vs_gnnpipe" in r))

    return results


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print_machine()
    started = time.perf_counter()
    graph = load_graph(args)
    print(f"# graph: {describe(graph)} (built in {time.perf_counter() - started:.1f} s)")
    cfg = PropagateParams(hops=args.hops, norm=args.norm, block_rows=args.block_rows)
    n, f, k = graph.num_nodes, graph.x.shape[1], args.hops
    x = graph.x.contiguous()

    copy = copy_bandwidth(int(args.copy_gib * 2**30))
    reference_bw = max(copy["numpy_gb_s"], copy["torch_gb_s"])
    print(f"# copy bandwidth: numpy (1 thread) {copy['numpy_gb_s']:.1f} GB/s, torch "
          f"({copy['torch_threads']} threads) {copy['torch_gb_s']:.1f} GB/s")

    build = timed(lambda: normalized_adjacency(graph.csr, cfg), repeat=1, warmup=0)
    adj = normalized_adjacency(graph.csr, cfg)
    nnz = adj.values().numel()
    index_name = str(adj.col_indices().dtype).removeprefix("torch.")
    print(f"# A_hat ({cfg.norm}, self-loops): {nnz:,} non-zeros, {index_name} indices, "
          f"built in {build['best']:.2f} s; "
          f"{k} hops, block_rows {cfg.block_rows:,}, repeat {args.repeat}")

    hop_mb = n * f * 4 / 2**20
    graph_mb = (adj.crow_indices().numel() * adj.crow_indices().element_size()
                + nnz * (adj.col_indices().element_size() + 4)) / 2**20
    print(f"# one hop = {hop_mb:.0f} MiB, A_hat = {graph_mb:.0f} MiB")
    results = {} if args.skip_methods else compare_methods(args, cfg, graph.csr, adj, x,
                                                           reference_bw)
    probes = {}
    if args.roofline:
        print("\n# roofline: one hop, whole matrix, best of repeat")
        probes["roofline"] = roofline(adj, x, args.repeat, reference_bw)
    if args.orders:
        print("\n# node orders: one hop in the permuted order, result un-permuted")
        probes["orders"] = orders(adj, x, graph.y, args.repeat, reference_bw)

    sweep = {}
    if args.sweep:
        print("\n# sweep: seconds per hop (best of repeat, interleaved)")
        adj32, adj64 = _with_index(adj, torch.int32), _with_index(adj, torch.int64)
        candidates = {
            "torch.sparse.mm int64": lambda: torch.sparse.mm(adj64, x),
            "torch.sparse.mm int32": lambda: torch.sparse.mm(adj32, x),
            "torch.sparse.mm reduce=sum int32": lambda: torch.sparse.mm(adj32, x, reduce="sum"),
        }
        for block in (4096, 16384, 65536, 262144, n):
            one = dataclasses.replace(cfg, hops=1, block_rows=block)
            for label, matrix in (("int64", adj64), ("int32", adj32)):
                candidates[f"gnnpipe block {block} {label}"] = (
                    lambda m=matrix, c=one: block_hops(m, x, c))
        # feature blocks: F/fb products on contiguous column slices, so the rows gathered per
        # product are fb * 4 bytes (a slice of the operand that might stay in cache)
        def feature_blocks(fb):
            out = torch.empty(n, f)
            for j in range(0, f, fb):
                out[:, j:j + fb] = torch.sparse.mm(adj32, x[:, j:j + fb].contiguous(),
                                                   reduce="sum")
            return out

        full = torch.sparse.mm(adj32, x, reduce="sum")
        for fb in (32, 64):
            same = torch.equal(feature_blocks(fb), full)
            candidates[f"reduce=sum, {fb}-column feature blocks (identical: {same})"] = (
                lambda fb=fb: feature_blocks(fb))
        # bfloat16: ATen's kernel needs A_hat and X both bfloat16 (float32 accumulation inside,
        # bfloat16 output)
        adj_bf16 = _csr(adj32.crow_indices(), adj32.col_indices(),
                        adj32.values().to(torch.bfloat16), n)
        x_bf16 = x.to(torch.bfloat16)
        error = float((torch.sparse.mm(adj_bf16, x_bf16, reduce="sum").float() - full).abs().max()
                      / full.abs().max())
        candidates[f"reduce=sum, bfloat16 A_hat and X (max rel. error {error:.1e})"] = (
            lambda: torch.sparse.mm(adj_bf16, x_bf16, reduce="sum"))
        sweep = {name: t["best"] for name, t in _interleaved(candidates, args.repeat).items()}
        total = torch.get_num_threads()
        for threads in sorted({1, total}):
            torch.set_num_threads(threads)
            sweep[f"torch.sparse.mm int32, {threads} thread(s)"] = timed(
                lambda: torch.sparse.mm(adj32, x), args.repeat)["best"]
        torch.set_num_threads(total)
        for name, seconds in sweep.items():
            print(f"{name:<64} {seconds:7.3f}")

    summary = {"argv": sys.argv[1:] if argv is None else argv, "graph": describe(graph),
               "nnz": nnz, "hops": k, "norm": cfg.norm, "block_rows": cfg.block_rows,
               "copy": copy, "methods": results, "sweep": sweep, **probes,
               "one_hop_mib": hop_mb, "adjacency_mib": graph_mb}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=float) + "\n")
    return summary


if __name__ == "__main__":
    main()
