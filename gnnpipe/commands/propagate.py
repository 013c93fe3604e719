"""propagate: precompute A_hat^k X (k = 0..propagate.hops) for each distinct phase message graph.

Each phase uses only its own message graph (data/split/meta.json), so inductive splits never
propagate over val/test edges in training. Every hop is block SpMM tasks
(gnnpipe/graphops/propagate.py) writing the hop file row block by row block: in this process
(peak memory about the graph plus one hop, not K hops) or, on ``cluster.engine: dask``, on the
cluster's workers; the same files either way."""

import dataclasses
import functools
import time

import torch

from gnnpipe import io
from gnnpipe.splitting.inputs import read_model_typed
from gnnpipe.data.graph import TYPED, phase_csrs
from gnnpipe.config import load_params
from gnnpipe.runtime.progress import progress
from gnnpipe.runtime.resources import peak_rss_mb
from gnnpipe.graphops.propagate import DTYPES, choose_kernel, hop_traffic_bytes, propagate
from gnnpipe.io.blocks import scratch_beside
from gnnpipe.runtime.engine import session

NOT_APPLICABLE = ("SIGN hops A^k X need one feature space and one adjacency; a heterogeneous "
                  "graph has one per node type and edge type, so the propagate stage does not "
                  "apply (train.sampler=sign is refused)")


def run(args) -> str:
    """The hops of every distinct phase message graph, whatever the task (they are of nodes);
    typed files: a meta.json marked ``applicable: false`` and no hop files."""
    params = load_params(args.params)
    cfg = params.propagate
    if io.read_split_meta(args.split)["layout"] == TYPED:  # decided before reading the graph
        with io.atomic_dir(args.out) as out:
            io.write_json(out / "meta.json", {"applicable": False, "reason": NOT_APPLICABLE})
        io.write_json(args.perf, {"applicable": False, "seconds": 0.0, "hop_seconds": []})
        return f"not applicable to a heterogeneous graph; marked {args.out / 'meta.json'}"
    # X_0 is read from the page cache (features.normalize none) or normalized once in memory
    typed = read_model_typed(args, mmap=True)
    (x,) = typed.graph.x.values()
    graphs = phase_csrs(typed.graphs)
    phase_graph = {phase: name.removesuffix(".pt")
                   for phase, name in typed.meta["message_graph"].items()}
    dtype = DTYPES[cfg.dtype]
    started = time.perf_counter()
    hop_seconds, traffic, kernels, worker_peaks = [], 0, {}, []
    # the scratch folder (beside the output, which a real cluster's workers see) serves dask
    with session(params.cluster) as client, io.atomic_dir(args.out) as out, \
            scratch_beside(args.out) as scratch:
        done = set()
        for phase, name in phase_graph.items():  # phases sharing a message graph share hops
            if name in done:
                continue
            done.add(name)
            io.write_hop(out, name, 0, x.to(dtype))
            csr = graphs[phase]
            nnz = csr.num_edges + (csr.num_nodes if cfg.self_loops else 0)  # of A_hat
            kernels[name] = choose_kernel(cfg, nnz, x.shape[1])  # same bits either way
            shown = functools.partial(progress, desc=f"propagate {name}", unit="hop")
            # on dask, X_0 float32 for the workers is hop 0 itself (else a scratch copy)
            stored_x0 = (io.hop_rows(out, name, 0, tuple(x.shape), dtype)
                         if client is not None and dtype == torch.float32 else None)
            hops = propagate(csr, x, dataclasses.replace(cfg, kernel=kernels[name]),
                             client=client, sink=functools.partial(io.HopWriter, out, name),
                             scratch=scratch / name, stored_x0=stored_x0,
                             progress=shown, peaks=worker_peaks if client is not None else None)
            tick = time.perf_counter()
            for _ in hops:  # each hop is already on disk when yielded
                hop_seconds.append(time.perf_counter() - tick)
                traffic += hop_traffic_bytes(
                    csr.num_nodes, nnz, x.shape[1],
                    out_itemsize=dtype.itemsize,  # products read float32
                    ppr=cfg.norm == "ppr")
                tick = time.perf_counter()
        io.write_json(out / "meta.json", {"hops": cfg.hops, "phase_graph": phase_graph,
                                          "norm": cfg.norm, "self_loops": cfg.self_loops,
                                          "alpha": cfg.alpha, "dtype": cfg.dtype})
    seconds = sum(hop_seconds)
    io.write_json(args.perf, {
        "seconds": round(time.perf_counter() - started, 3),
        "hop_seconds": [round(s, 3) for s in hop_seconds],
        "effective_gb_per_s": round(traffic / seconds / 1e9, 6) if seconds > 0 else None,
        "kernel": kernels,  # message graph -> aten | jit (propagate.kernel resolved)
        "peak_rss_mb": peak_rss_mb()["self"],  # the high-water mark, input loading included
        **({"worker_peak_rss_mb": round(max(worker_peaks), 1)} if worker_peaks else {}),
    })
    return (f"{cfg.hops} hops ({cfg.norm}, {cfg.dtype}) over {len(done)} message graph(s) "
            f"-> {args.out}")
