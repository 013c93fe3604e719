"""A stage process: what it cost (wall time, peak resident memory, bytes left on disk) and how
long it lives (no longer than the process that started it).

``gnnpipe <stage>`` writes one record per run to ``metrics/perf/stages/<stage>.json`` (a DVC
metric with ``cache: false``), so a scale run's cost per stage is read off, not remembered.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

from gnnpipe.io.atomic import staged

# Linux reports ru_maxrss in KiB, macOS in bytes.
_RSS_UNIT = 1 if sys.platform == "darwin" else 1024


def peak_rss_mb() -> dict[str, float]:
    """Peak RSS in MiB of this process and of its largest waited-for descendant (torchrun ranks)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _RSS_UNIT / 2**20
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * _RSS_UNIT / 2**20
    return {"self": round(own, 1), "children": round(children, 1)}


def bytes_on_disk(path: Path) -> dict[str, int]:
    """``{relative file name: bytes}`` of a file or of every file under a folder (sorted)."""
    path = Path(path)
    if path.is_file():
        return {path.name: path.stat().st_size}
    if not path.is_dir():
        return {}
    return {str(f.relative_to(path)): f.stat().st_size
            for f in sorted(path.rglob("*")) if f.is_file()}


def stage_record(stage: str, seconds: float, outputs: list[Path]) -> dict:
    """The record of one finished stage run; ``outputs`` are its artifact files or folders."""
    rss = peak_rss_mb()
    files = {}
    for out in outputs:  # inside io.publishing() the new version is still in its temp
        now = staged(out)
        for name, size in bytes_on_disk(now).items():
            files[str(Path(out) / name) if now.is_dir() else str(out)] = size
    return {
        "stage": stage,
        "seconds": round(seconds, 3),
        "peak_rss_mb": max(rss["self"], rss["children"]),
        "peak_rss_mb_self": rss["self"],
        "peak_rss_mb_children": rss["children"],
        "bytes": files,
        "total_bytes": sum(files.values()),
    }


def _glibc(name: str):
    """glibc's function ``name`` where it exists (Linux with glibc), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _glibc("malloc_trim")

_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (glibc's malloc.h)
MAPPED_FROM = 1 << 20  # bytes: blocks this large get their own mapping in a layer-wise pass
# glibc's ceiling of its self-raising threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): where a
# process that has freed large blocks ends up anyway, restored after the pass
HEAP_UP_TO = 32 << 20
_MALLOPT = _glibc("mallopt")


@contextlib.contextmanager
def large_blocks_mapped(threshold: int = MAPPED_FROM) -> Iterator[None]:
    """Inside, glibc serves every allocation of at least ``threshold`` bytes by a mapping of
    its own, returned to the OS when freed (``mallopt(M_MMAP_THRESHOLD)``); after, blocks up to
    ``HEAP_UP_TO`` come from the heap again. Why: glibc raises its threshold to the size of
    each large block freed, so a pass over row blocks soon takes every block from the heap,
    which fragments and never shrinks (predict at 8M nodes: 829 MiB anonymous, 514 inside
    this). A no-op without glibc."""
    if _MALLOPT is None:
        yield
        return
    _MALLOPT(_M_MMAP_THRESHOLD, threshold)
    try:
        yield
    finally:
        _MALLOPT(_M_MMAP_THRESHOLD, HEAP_UP_TO)


def release_memory() -> bool:
    """Hand memory this process freed back to the OS: pyarrow's pool (when pyarrow is loaded)
    and glibc's heap (``malloc_trim(0)``). Freed small blocks otherwise stay in the process's
    anonymous memory, so a later phase's peak sits on the previous phase's garbage (an epoch's
    batches under layer-wise evaluation: 445 MiB at 1.9M typed nodes). True when glibc trimmed."""
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.default_memory_pool().release_unused()
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


def is_worker_process() -> bool:
    """True inside a torchrun rank: the launching process writes the stage record, not ranks."""
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


# ------------------------------------------------------------------------------ lifetime
SURVIVE_ENV = "GNNPIPE_SURVIVE_PARENT"  # 1: keep running when the starting process dies
_PR_SET_PDEATHSIG = 1
_SHELLS = {"sh", "dash", "bash", "zsh", "ksh", "mksh", "fish"}
_WATCH_S = 1.0
_watching = False


def _prctl():
    """libc's prctl where it exists (Linux), loaded before any fork (no dlopen in a child)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Linux: this process gets ``sig`` when its parent exits, so no stage outlives a killed
    ``dvc repro`` (torchrun's agent and ranks are bound to the stage by
    ``gnnpipe.training.distributed.die_with_parent``). When the parent is a shell (DVC runs a stage
    through
    ``$SHELL -c``, and dash does not exec), a watcher thread also ends this process once the
    shell's own parent is gone. No-op elsewhere, or with GNNPIPE_SURVIVE_PARENT=1."""
    global _watching
    if _PRCTL is None or os.environ.get(SURVIVE_ENV, "0") not in ("", "0"):
        return
    _PRCTL(_PR_SET_PDEATHSIG, ctypes.c_ulong(int(sig)), *(ctypes.c_ulong(0),) * 3)
    parent = os.getppid()
    grandparent = _parent_of(parent) if _comm(parent) in _SHELLS else None
    if _watching or grandparent is None or grandparent <= 1:
        return
    _watching = True

    def watch() -> None:
        while True:
            time.sleep(_WATCH_S)
            if os.getppid() != parent or _parent_of(parent) != grandparent:
                os.kill(os.getpid(), sig)
                return

    threading.Thread(target=watch, name="gnnpipe-parent-watch", daemon=True).start()

