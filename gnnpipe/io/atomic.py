"""Atomic file and directory writes: a crash leaves the previous output or none, never half of one."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any, Iterator

# Set to a file name (or "name@N" for its N-th write) to SIGKILL the writer after that file's
# temp copy is complete but before it is renamed into place: the worst moment for a crash,
# reproduced on demand by tests/test_faults.py.
FAULT_ENV = "GNNPIPE_FAULT_KILL_BEFORE_RENAME"
_writes: dict[str, int] = {}


def _maybe_fault(path: Path) -> None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    name, _, nth = spec.partition("@")
    if name == path.name:
        _writes[name] = _writes.get(name, 0) + 1
        if _writes[name] == int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove_stale(path: Path) -> None:
    """Temp folders a killed writer of ``path`` left behind (never read: only renames publish)."""
    for stale in path.parent.glob(f".{path.name}.*"):
        if stale.suffix in (".tmp", ".old") and stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success fsync and rename it onto ``path``.

    On an exception the temp file is removed and ``path`` is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual mode
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        _maybe_fault(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temp directory beside ``path``; on success it replaces ``path`` whole.

    A stage that writes several files into one output folder uses this so that readers see
    either the old folder, no folder, or the complete new one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)  # moved aside first: rename cannot replace a full dir
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: str | Path, payload: Any) -> None:
    """Pretty JSON written atomically (sorted keys, so reruns are byte-identical)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def read_json(path: str | Path) -> Any:
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: file not found; run the stage that produces it first")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None


def write_csv(path: str | Path, rows: list[dict]) -> None:
    """Rows of equal keys as CSV (header from the first row), written atomically."""
    if not rows:
        raise ValueError(f"{path}: no rows to write")
    header = list(rows[0])
    lines = [",".join(header)] + [",".join(str(row[key]) for key in header) for row in rows]
    write_text(path, "\n".join(lines) + "\n")
