"""Propagation speed and memory: gnnpipe vs torch.sparse.mm vs scipy.sparse, same graph, same run.

    python -m bench.propagate                 # 1M nodes, ~20M edges, 128 features, 2 hops
    python -m bench.propagate --scale 0.1     # quick
    python -m bench.propagate --sweep         # also block sizes and int32 vs int64 indices

Every method computes the same K hops of the same A_hat (gnnpipe's ``normalized_adjacency``):
  gnnpipe        ``propagate_adjacency`` in row blocks, hops kept in memory
  gnnpipe->disk  the same, each hop streamed to a memory-mappable file (what the stage does)
  torch.sparse   one ``torch.sparse.mm(A_hat, X)`` per hop on the whole matrix
  scipy          ``scipy.sparse.csr_matrix @ ndarray`` per hop (int32 indices, one thread)
Effective GB/s counts the least traffic a hop needs (A_hat and X_{k-1} read once, X_k written
once: ``gnnpipe.propagate.hop_traffic_bytes``) and is compared with a STREAM-like copy.
"gathered GB/s" counts one F-wide row read per stored edge instead, what a CSR kernel touches.
Peak memory is the rise of VmHWM above the RSS before each method (graph and X_0 resident).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `gnnpipe` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from bench.common import (PeakMemory, add_graph_args, copy_bandwidth, describe, load_graph,
                          print_machine, timed)
from gnnpipe import io
from gnnpipe.config import PropagateParams
from gnnpipe.propagate import hop_traffic_bytes, normalized_adjacency, propagate_adjacency


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
                        help="also time block sizes and int32 vs int64 indices")
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
    """Best and median seconds per method, timing the methods in turn in each round so a
    change of machine load hits all of them alike."""
    times = {name: [] for name in methods}
    for _ in range(repeat):
        for name, fn in methods.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: {"best": min(t), "median": float(np.median(t))} for name, t in times.items()}


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
    methods = {
        "gnnpipe": lambda: last(propagate_adjacency(adj, x, cfg)),
        "gnnpipe->disk": lambda: last(propagate_adjacency(adj, x, cfg,
                                                          sink=io.hop_writers(tmp, "bench"))),
        "torch.sparse": lambda: _chain(mix(lambda h: torch.sparse.mm(adj, h), x), x, k),
    }
    if not args.no_scipy:
        import scipy.sparse as sp

        scipy_adj = sp.csr_matrix((adj.values().numpy(), adj.col_indices().numpy().astype(np.int32),
                                   adj.crow_indices().numpy().astype(np.int32)), shape=(n, n))
        scipy_hop = mix(lambda h: scipy_adj @ h, x.numpy())
        methods["scipy"] = lambda: _chain(scipy_hop, x.numpy(), k)

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
        gathered = (n + 1) * 8 + nnz * (index_bytes + 4 + 4 * f) + n * f * 4
        results[name] = {"seconds_per_hop": per_hop, "median_seconds_per_hop": timing["median"] / k,
                         "effective_gb_s": traffic / per_hop / 1e9,
                         "gathered_gb_s": gathered / per_hop / 1e9,
                         "peak_added_mb": mem.added_mb, "peak_mb": mem.peak_mb}
        if name != "gnnpipe":
            diff = (outs[name] - outs["gnnpipe"]).abs().max()
            results[name]["max_abs_diff_vs_gnnpipe"] = float(diff)
            del outs[name]
    shutil.rmtree(tmp, ignore_errors=True)
    base = results["torch.sparse"]["seconds_per_hop"]
    print(f"\n{'method':<14} {'s/hop':>7} {'vs torch':>9} {'eff GB/s':>9} {'of copy':>8} "
          f"{'gath GB/s':>10} {'peak +MiB':>10}")
    for name, r in results.items():
        r["vs_torch_sparse"] = r["seconds_per_hop"] / base
        r["fraction_of_copy"] = r["effective_gb_s"] / reference_bw
        print(f"{name:<14} {r['seconds_per_hop']:7.3f} {r['vs_torch_sparse']:8.2f}x "
              f"{r['effective_gb_s']:9.2f} {r['fraction_of_copy']:7.1%} {r['gathered_gb_s']:10.2f} "
              f"{r['peak_added_mb']:10.0f}")
    hop_mb = n * f * 4 / 2**20
    graph_mb = (adj.crow_indices().numel() * 8 + nnz * 12) / 2**20
    print(f"# one hop = {hop_mb:.0f} MiB, A_hat = {graph_mb:.0f} MiB; max |diff| vs gnnpipe: "
          + ", ".join(f"{m} {r['max_abs_diff_vs_gnnpipe']:.1e}" for m, r in results.items()
                      if "max_abs_diff_vs_gnnpipe" in r))

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
                    lambda m=matrix, c=one: list(propagate_adjacency(m, x, c)))
        sweep = {name: t["best"] for name, t in _interleaved(candidates, args.repeat).items()}
        total = torch.get_num_threads()
        for threads in sorted({1, total}):
            torch.set_num_threads(threads)
            sweep[f"torch.sparse.mm int32, {threads} thread(s)"] = timed(
                lambda: torch.sparse.mm(adj32, x), args.repeat)["best"]
        torch.set_num_threads(total)
        for name, seconds in sweep.items():
            print(f"{name:<40} {seconds:7.3f}")

    summary = {"argv": sys.argv[1:] if argv is None else argv, "graph": describe(graph),
               "nnz": nnz, "hops": k, "norm": cfg.norm, "block_rows": cfg.block_rows,
               "copy": copy, "methods": results, "sweep": sweep,
               "one_hop_mib": hop_mb, "adjacency_mib": graph_mb}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=float) + "\n")
    return summary


if __name__ == "__main__":
    main()
