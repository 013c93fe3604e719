"""How many intra-op threads a stage process uses (params ``threads``, ``train.threads``).

``auto`` is a rule, not a measurement: ``OMP_NUM_THREADS`` when the environment sets it (the
tests, torchrun's one thread per rank); otherwise the cores this process may run on (its CPU
affinity, capped by a cgroup v2 CPU quota) divided by the DDP ranks torchrun started on this
machine (``LOCAL_WORLD_SIZE``), at least 1. So ranks never oversubscribe the machine's cores,
and a container limited to 2 CPUs does not start 64 threads. A number is taken as given.

Results are byte-identical run to run only for the same thread count (torch splits reductions
into one chunk per thread), which is why the count is pinned here and recorded in the perf files.

How idle threads wait is set here too (``default_env``, before torch loads OpenMP): they sleep
at once instead of spinning, which changes no result, only how a busy machine's cores are shared.
So is how torch backs its large CPU buffers: with transparent huge pages, one page fault per
2 MiB instead of 512 (placement only, no result changes).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"
# Environment a stage process runs with unless its environment sets them, read once at start-up:
ENV_DEFAULTS = {
    # libgomp's default spins ~300,000 rounds at every barrier before sleeping, and on cores busy
    # with other work the spinning thread burns the time slice its preempted partner needs
    # (bench/default_speed.py)
    "OMP_WAIT_POLICY": "PASSIVE",
    # c10 madvises buffers >= 2 MiB for huge pages: a fresh ~48 MB feature gather per batch
    # faulted 4 KiB at a time was a third of a 1M-node epoch (bench/thp.py)
    "THP_MEM_ALLOC_ENABLE": "1",
}


def default_env(environ: dict | None = None) -> dict[str, str]:
    """Put ``ENV_DEFAULTS`` into ``environ`` (``os.environ``) where it sets nothing; the values
    the process then has. OpenMP reads them when torch loads it and torch's CPU allocator at its
    first allocation: call before importing torch (``gnnpipe.cli`` does, first thing); child
    processes inherit them."""
    environ = os.environ if environ is None else environ
    for key, value in ENV_DEFAULTS.items():
        environ.setdefault(key, value)
    return {key: environ[key] for key in ENV_DEFAULTS}


def cgroup_cpus(cpu_max: Path = CPU_MAX) -> int | None:
    """CPUs the cgroup quota allows (rounded up), or None without a quota."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def available_cpus(cpu_max: Path = CPU_MAX) -> int:
    """Cores this process may use: its affinity set, capped by the cgroup quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    quota = cgroup_cpus(cpu_max)
    return max(1, min(cores or 1, quota or cores or 1))


def local_ranks(environ: dict | None = None) -> int:
    """DDP processes torchrun started on this machine (1 outside torchrun)."""
    environ = os.environ if environ is None else environ
    return max(1, int(environ.get("LOCAL_WORLD_SIZE", "1")))


def resolve(setting: str | int, cpus: int | None = None, ranks: int | None = None,
            environ: dict | None = None) -> int:
    """Threads for ``setting`` (``"auto"`` or a count): auto = ``OMP_NUM_THREADS`` if set,
    else cpus // ranks, at least 1."""
    if setting != "auto":
        return int(setting)
    environ = os.environ if environ is None else environ
    if environ.get("OMP_NUM_THREADS", "").isdigit() and int(environ["OMP_NUM_THREADS"]) > 0:
        return int(environ["OMP_NUM_THREADS"])
    cpus = available_cpus() if cpus is None else cpus
    ranks = local_ranks(environ) if ranks is None else ranks
    return max(1, cpus // ranks)


def stage_setting(params, stage: str) -> str | int:
    """The ``threads`` value a stage runs with: ``train.threads`` for train unless it is
    ``inherit``, otherwise the top-level ``threads``."""
    if stage == "train" and params.train.threads != "inherit":
        return params.train.threads
    return params.threads


def apply(threads: int) -> dict:
    """Pin torch's intra-op (and, if still possible, inter-op) pool to ``threads``; returns the
    record for the perf files."""
    import torch

    torch.set_num_threads(threads)
    try:  # only allowed before the first inter-op parallel work of the process
        torch.set_num_interop_threads(threads)
    except RuntimeError:
        pass
    return {"threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
            "cpus_available": available_cpus(), "local_ranks": local_ranks(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
            "thp_mem_alloc": os.environ.get("THP_MEM_ALLOC_ENABLE", "")}


def configure(stage: str, params_path: Path) -> dict | None:
    """Read ``params_path`` and pin this stage process's threads; None when the file is absent
    (the stage itself then reports it)."""
    from gnnpipe.config import load_params

    if not Path(params_path).exists():
        return None
    params = load_params(params_path)
    setting = stage_setting(params, stage)
    return {"setting": setting, **apply(resolve(setting))}
