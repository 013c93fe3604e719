"""Will the ranks and loader workers fit this machine? A memory floor against what is available.

The train and predict stages check this before they start ``train.dist.nproc`` ranks (each with
``train.num_workers`` DataLoader workers) on this machine. The estimate is a **floor**, counted
from measured bytes, so a refusal means the launch cannot fit; passing does not promise a fit
(training adds batches, the model, the optimizer and the evaluation forward: 1.1-2.0 GiB per
rank on the 200k-node graph of docs/benchmarks/2026-12-02-ddp.md):

- the graph's bytes (``data/prepared/graph.pt``: features, CSR, labels) once per machine, since
  its ranks memory-map it and share the pages; with ``train.dist.shard: partition`` this
  machine's share, graph bytes x nproc / (nproc x nnodes) (halo not counted);
- shared libraries of torch and PyG once per machine (``LIBRARY_BYTES``);
- per rank the private memory of an interpreter that imported the train stage, torch and PyG
  (``RANK_BYTES``);
- per DataLoader worker the private pages of a freshly forked worker (``WORKER_BYTES``: workers
  are forked and share the rank's pages copy-on-write).

Available memory is ``MemAvailable`` of /proc/meminfo, or less when a cgroup (v2 or v1) limit
minus its usage leaves less. Cores are ``os.sched_getaffinity`` (or a cgroup v2 ``cpu.max``
quota, if lower): more processes than cores is a warning, not a refusal (ranks then share cores:
slower, not wrong; docs/benchmarks/2026-12-02-ddp.md ran 4 ranks on 2 cores).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from gnnpipe.runtime.threads import available_cpus

MiB = 2**20
# measured: /proc/self/smaps_rollup after importing gnnpipe.commands.train, torch_geometric and
# the samplers (torch 2.13 CPU, PyG 2.8.1): 263 MiB private (anonymous), 146 MiB shared clean
RANK_BYTES = 263 * MiB
LIBRARY_BYTES = 146 * MiB
WORKER_BYTES = 8 * MiB  # Private_Dirty of a forked DataLoader worker after its first batches
MEMINFO_ENV = "GNNPIPE_MEMINFO"  # tests: read this file instead of /proc/meminfo
CGROUP_ENV = "GNNPIPE_CGROUP"  # tests: this folder instead of /sys/fs/cgroup


@dataclass(frozen=True)
class Machine:
    """What this machine offers: bytes available now (and where that figure comes from), cores."""

    available_bytes: int
    source: str  # "MemAvailable" or the cgroup file that bounded it
    cores: int


@dataclass(frozen=True)
class Estimate:
    """The memory floor of a launch on one machine (bytes) and its terms."""

    ranks: int
    workers: int  # DataLoader workers in all, over the ranks
    graph_bytes: int  # the graph's bytes this machine holds
    total_bytes: int


def estimate(graph_bytes: int, nproc: int, nnodes: int, num_workers: int,
             sharded: bool) -> Estimate:
    """The floor for ``nproc`` ranks with ``num_workers`` loader workers each on one of
    ``nnodes`` machines (module docstring); ``graph_bytes`` is the size of graph.pt."""
    held = math.ceil(graph_bytes / nnodes) if sharded else graph_bytes
    workers = nproc * num_workers
    total = held + LIBRARY_BYTES + nproc * RANK_BYTES + workers * WORKER_BYTES
    return Estimate(ranks=nproc, workers=workers, graph_bytes=held, total_bytes=total)


def machine(meminfo: Path | None = None, cgroup: Path | None = None) -> Machine:
    """Available memory and usable cores of this machine (paths: tests)."""
    meminfo = Path(meminfo or os.environ.get(MEMINFO_ENV) or "/proc/meminfo")
    cgroup = Path(cgroup or os.environ.get(CGROUP_ENV) or "/sys/fs/cgroup")
    available, source = _mem_available(meminfo), "MemAvailable"
    for limit_file, usage_file in (("memory.max", "memory.current"),  # cgroup v2
                                   ("memory/memory.limit_in_bytes",  # cgroup v1
                                    "memory/memory.usage_in_bytes")):
        limit, usage = _read_int(cgroup / limit_file), _read_int(cgroup / usage_file)
        if limit is not None and usage is not None and limit - usage < available:
            available, source = max(0, limit - usage), str(cgroup / limit_file)
    return Machine(available_bytes=available, source=source, cores=available_cpus(cgroup / "cpu.max"))


def check_launch(prepared: Path, cfg, num_workers: int) -> list[str]:
    """``check`` for ``cfg`` (``train.dist``) on this machine, from the size of
    ``<prepared>/graph.pt``; nothing when ``train.dist.check_resources`` is false or the graph
    is missing (its reader reports that)."""
    graph = Path(prepared) / "graph.pt"
    if not cfg.check_resources or not graph.is_file():
        return []
    est = estimate(graph.stat().st_size, cfg.nproc, cfg.nnodes, num_workers,
                   sharded=cfg.shard == "partition")
    return check(est, machine(), num_workers)


def check(est: Estimate, box: Machine, num_workers: int) -> list[str]:
    """Raises a one-line ``ValueError`` naming the keys when ``est`` passes what ``box`` has
    available; returns one-line warnings (more processes than cores)."""
    ranks = f"{est.ranks} ranks (train.dist.nproc={est.ranks})"
    if est.workers:
        ranks += f" + {est.workers} DataLoader workers (train.num_workers={num_workers})"
    if est.total_bytes > box.available_bytes:
        raise ValueError(
            f"{ranks} need at least {_gib(est.total_bytes)} GiB on this machine ({est.ranks} x "
            f"{RANK_BYTES // MiB} MiB per rank + the graph's {_gib(est.graph_bytes)} GiB + "
            f"{LIBRARY_BYTES // MiB} MiB of libraries), more than the "
            f"{_gib(box.available_bytes)} GiB available ({box.source}); lower train.dist.nproc "
            "/ train.num_workers, or set train.dist.check_resources: false to launch anyway")
    processes = est.ranks + est.workers
    if processes > box.cores:
        return [f"{ranks} = {processes} processes on {box.cores} cores; they will share cores "
                "(slower, not wrong)"]
    return []


def _mem_available(meminfo: Path) -> int:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024  # kB
    raise ValueError(f"{meminfo}: no MemAvailable line")


def _read_int(path: Path) -> int | None:
    """An integer file of a cgroup, or None when absent or unlimited ("max")."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f}"
