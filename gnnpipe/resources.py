"""What a stage cost: wall time, peak resident memory and the bytes it left on disk.

``gnnpipe <stage>`` writes one record per run to ``metrics/perf/stages/<stage>.json`` (a DVC
metric with ``cache: false``), so a scale run's cost per stage is read off, not remembered.
"""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

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
    for out in outputs:
        for name, size in bytes_on_disk(out).items():
            files[str(Path(out) / name) if Path(out).is_dir() else str(out)] = size
    return {
        "stage": stage,
        "seconds": round(seconds, 3),
        "peak_rss_mb": max(rss["self"], rss["children"]),
        "peak_rss_mb_self": rss["self"],
        "peak_rss_mb_children": rss["children"],
        "bytes": files,
        "total_bytes": sum(files.values()),
    }


def is_worker_process() -> bool:
    """True inside a torchrun rank: the launching process writes the stage record, not ranks."""
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ
