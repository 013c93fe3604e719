"""Shared pieces of the benchmarks: one deterministic synthetic graph, timing, memory, machine.

The default graph is the one the peer figures in DESIGN.md use: 1M nodes, ~20M directed edges
(10M undirected draws, both directions stored), log-normal degree skew, 128 float32 features,
built with gnnpipe's own contextual SBM generator so benches and pipeline share one code path.
``--scale 0.1`` gives 100k nodes / ~2M edges for a quick run.

    from bench.common import add_graph_args, load_graph
    args = add_graph_args(argparse.ArgumentParser()).parse_args()
    graph = load_graph(args)          # a TargetView (csr, x, y); same bytes for the same args

Run benches from the repository root as modules: ``python -m bench.propagate --scale 0.1``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from gnnpipe.data import synthetic
from gnnpipe.config import SyntheticParams
from gnnpipe.data.graph import Csr, Graph, TargetView
from gnnpipe.runtime.rng import make_rng

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from graph_oracle import normalize_edges  # noqa: E402 (the edge policies, whole)

BASE_NODES = 1_000_000


def add_graph_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    group = parser.add_argument_group("synthetic graph (bench/common.py)")
    group.add_argument("--scale", type=float, default=1.0,
                       help=f"nodes = scale * {BASE_NODES:,}; edges scale alike")
    group.add_argument("--avg-degree", type=float, default=20.0,
                       help="stored directed edges per node (both directions counted)")
    group.add_argument("--features", type=int, default=128)
    group.add_argument("--classes", type=int, default=10)
    group.add_argument("--homophily", type=float, default=0.8)
    group.add_argument("--degree-skew", type=float, default=1.0,
                       help="sigma of the log-normal degree propensities (0 = uniform)")
    group.add_argument("--seed", type=int, default=0)
    group.add_argument("--cache", type=Path, default=None,
                       help="folder to keep the built graph in (reused when arguments match)")
    return parser


def graph_params(args: argparse.Namespace) -> SyntheticParams:
    return SyntheticParams(num_nodes=max(2, int(round(BASE_NODES * args.scale))),
                           num_classes=args.classes, num_features=args.features,
                           avg_degree=args.avg_degree, homophily=args.homophily,
                           degree_skew=args.degree_skew)


def build_graph(cfg: SyntheticParams, seed: int = 0) -> TargetView:
    """The bench graph, undirected (both directions stored), deduplicated, no self-loops, as the
    flat view (``Graph.target_view``) that the single-relation code under test reads."""
    raw = synthetic.generate(cfg, make_rng(seed, "bench"))
    csr, _ = normalize_edges(raw["src"], raw["dst"], cfg.num_nodes, undirected=True, dedup=True,
                             remove_self_loops=True)
    return Graph.homogeneous(csr, torch.from_numpy(raw["x"]), torch.from_numpy(raw["y"]),
                             cfg.num_classes).target_view()


def prepared_graph(params) -> Graph:
    """``params.dataset``'s graph prepared by the prepare stage's code (``prepare_to``) in a
    temporary folder and read back whole into memory: for benches that start from a graph."""
    from gnnpipe import io
    from gnnpipe.commands.prepare import prepare_to

    with tempfile.TemporaryDirectory(prefix="gnnpipe-prepare-") as folder:
        prepare_to(params, Path(folder) / "prepared")
        return io.read_graph(Path(folder) / "prepared")


def load_graph(args: argparse.Namespace) -> TargetView:
    """``build_graph`` for the parsed arguments, through ``--cache`` when given."""
    cfg = graph_params(args)
    if args.cache is None:
        return build_graph(cfg, args.seed)
    name = (f"graph_n{cfg.num_nodes}_d{cfg.avg_degree:g}_f{cfg.num_features}_c{cfg.num_classes}"
            f"_h{cfg.homophily:g}_s{cfg.degree_skew:g}_seed{args.seed}.pt")
    path = Path(args.cache) / name
    if path.exists():
        p = torch.load(path, mmap=True, weights_only=True)
        return Graph.homogeneous(Csr(p["indptr"], p["indices"]), p["x"], p["y"],
                                 int(p["num_classes"])).target_view()
    graph = build_graph(cfg, args.seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"indptr": graph.csr.indptr, "indices": graph.csr.indices, "x": graph.x,
                "y": graph.y, "num_classes": graph.num_classes}, tmp)
    os.replace(tmp, path)
    return graph


# ------------------------------------------------------------------------------------ memory
def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def rss_mb() -> float:
    """Resident set size now (MiB)."""
    return _status_kib("VmRSS") / 1024


def peak_rss_mb() -> float:
    """High-water mark of the resident set since start or the last ``reset_peak_rss`` (MiB)."""
    return _status_kib("VmHWM") / 1024


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: ``echo 5 > /proc/self/clear_refs``)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class PeakMemory:
    """``with PeakMemory() as m: ...`` -> ``m.peak_mb`` (absolute) and ``m.added_mb`` (above
    the RSS at entry): what the block needed on top of what was already resident."""

    def __enter__(self) -> "PeakMemory":
        self.reset = reset_peak_rss()
        self.start_mb = rss_mb()
        return self

    def __exit__(self, *exc) -> None:
        self.peak_mb = peak_rss_mb()
        self.added_mb = self.peak_mb - self.start_mb if self.reset else float("nan")


# ------------------------------------------------------------------------------------ timing
def timed(fn: Callable[[], object], repeat: int = 3, warmup: int = 1) -> dict:
    """Best and median wall seconds of ``fn()`` over ``repeat`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"best": min(times), "median": statistics.median(times), "runs": len(times)}


def copy_bandwidth(nbytes: int = 1 << 30, repeat: int = 5) -> dict:
    """STREAM-like copy bandwidth (GB/s, bytes read + bytes written per second).

    ``numpy``: one thread (``np.copyto``); ``torch``: ``Tensor.copy_`` on all intra-op threads.
    """
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    moved = 2 * src.nbytes
    numpy_s = timed(lambda: np.copyto(dst, src), repeat)["best"]
    src_t, dst_t = torch.from_numpy(src), torch.from_numpy(dst)
    torch_s = timed(lambda: dst_t.copy_(src_t), repeat)["best"]
    return {"bytes": moved, "numpy_gb_s": moved / numpy_s / 1e9,
            "torch_gb_s": moved / torch_s / 1e9, "torch_threads": torch.get_num_threads()}


# ----------------------------------------------------------------------------------- machine
def machine() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gib = float("nan")
    return {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cpu": cpu,
            "cores": len(os.sched_getaffinity(0)), "memory_gib": round(mem_gib, 1),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "numpy": np.__version__, "load_average": os.getloadavg()}


def describe(graph: TargetView) -> str:
    deg = graph.csr.degrees()
    return (f"{graph.num_nodes:,} nodes, {graph.csr.num_edges:,} directed edges "
            f"(mean degree {float(deg.double().mean()):.1f}, max {int(deg.max())}), "
            f"{graph.x.shape[1]} float32 features")


def print_machine() -> None:
    m = machine()
    print(f"# {m['date']}  {m['cpu']}  {m['cores']} cores  {m['memory_gib']} GiB  "
          f"torch {m['torch']} ({m['torch_threads']} threads)  numpy {m['numpy']}  "
          f"load {m['load_average'][0]:.2f}")


def run_child(cmd: list[str], out: Path, first: torch.Tensor | None
              ) -> tuple[dict, torch.Tensor | None]:
    """Run one measuring child process that writes its row to ``out`` (JSON) and its output
    tensor to ``out.pt``; returns (row with ``max_abs_diff_vs_first``, the first output seen),
    or ({"exit_code": code}, first) when it failed (-9: killed for memory)."""
    import json
    import subprocess

    code = subprocess.run(cmd, check=False).returncode
    if code != 0:
        return {"exit_code": code}, first
    row = json.loads(out.read_text())
    value = torch.load(out.with_suffix(".pt"), weights_only=True)
    first = value if first is None else first
    row["max_abs_diff_vs_first"] = float((value - first).abs().max())
    return row, first
