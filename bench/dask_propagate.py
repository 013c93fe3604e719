"""Peak RSS per Dask worker of propagate's block SpMM (gnnpipe/graphops/propagate.py) on
random graphs of growing size: the figure that must stay flat as the graph grows.

    python bench/dask_propagate.py --nodes 250000 1000000 --degree 10 --features 64

Each size: a random directed graph (``degree`` in-edges a node, sorted columns) and features
written to a temp folder, hop 0 written as the stage writes it, then ``--hops`` hops on an
embedded LocalCluster (``--workers`` of ``--memory-limit``), ``propagate.block_rows`` rows a
task. Prints one JSON row per size: seconds per hop, the largest worker peak RSS (VmHWM of the
worker processes, imports included) and this client's (ru_maxrss: the high-water mark of the
whole run, the bench's own graph building included); with ``--compare-local`` also the same
tasks' seconds per hop in this process (the local engine) and whether the hop files are
identical.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnnpipe import io  # noqa: E402
from gnnpipe.config import PropagateParams  # noqa: E402
from gnnpipe.config.schema import EngineParams  # noqa: E402
from gnnpipe.data.graph import Csr  # noqa: E402
from gnnpipe.graphops.propagate import propagate  # noqa: E402
from gnnpipe.runtime.engine import session  # noqa: E402


def random_graph(n: int, degree: int, seed: int = 0) -> Csr:
    """``degree`` random in-edges per node, columns sorted in each row, int64."""
    rng = np.random.default_rng(seed)
    cols = np.sort(rng.integers(0, n, (n, degree)), axis=1).ravel()
    indptr = np.arange(0, n * degree + 1, degree, dtype=np.int64)
    return Csr(torch.from_numpy(indptr), torch.from_numpy(cols))


def run_size(n: int, args, client) -> dict:
    csr = random_graph(n, args.degree)
    x = torch.from_numpy(np.random.default_rng(1).standard_normal(
        (n, args.features)).astype(np.float32))
    cfg = PropagateParams(hops=args.hops, block_rows=args.block_rows, kernel="aten")
    with tempfile.TemporaryDirectory(dir=args.where) as tmp:
        out, scratch = Path(tmp) / "out", Path(tmp) / "scratch"
        out.mkdir()
        io.write_hop(out, "g", 0, x)
        x0 = io.hop_rows(out, "g", 0, tuple(x.shape), torch.float32)
        peaks, seconds = [], []
        tick = time.perf_counter()
        for _ in propagate(csr, x, cfg, client=client, sink=partial(io.HopWriter, out, "g"),
                           scratch=scratch, stored_x0=x0, peaks=peaks):
            seconds.append(round(time.perf_counter() - tick, 2))
            tick = time.perf_counter()
        row = {"nodes": n, "edges": n * args.degree, "features": args.features,
               "hop_seconds": seconds, "worker_peak_rss_mb": round(max(peaks), 1),
               "client_peak_rss_mb": round(
                   resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
        if args.compare_local:  # the local engine in this process, same hops, same files?
            local = Path(tmp) / "local"
            local.mkdir()
            io.write_hop(local, "g", 0, x)
            tick, row["local_hop_seconds"] = time.perf_counter(), []
            for _ in propagate(csr, x, cfg, sink=partial(io.HopWriter, local, "g")):
                row["local_hop_seconds"].append(round(time.perf_counter() - tick, 2))
                tick = time.perf_counter()
            row["identical"] = all(
                (out / name).read_bytes() == (local / name).read_bytes()
                for name in (f"g_hop_{k}.pt" for k in range(args.hops + 1)))
    return row


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[250_000, 1_000_000])
    parser.add_argument("--degree", type=int, default=10)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--hops", type=int, default=2)
    parser.add_argument("--block-rows", type=int, default=65_536)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="1GiB")
    parser.add_argument("--where", default=None, help="folder for the graph and hops")
    parser.add_argument("--compare-local", action="store_true",
                        help="also run the local engine here: its seconds, identical files")
    args = parser.parse_args(argv)
    rows = []
    engine = EngineParams(engine="dask", workers=args.workers, memory_limit=args.memory_limit)
    for n in args.nodes:  # a fresh cluster per size: ru_maxrss is a process's high-water mark
        with session(engine) as client:
            rows.append(run_size(n, args, client))
        print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    main()
