"""Temp names that say who wrote them, and the sweep that removes what killed writers left.

A temp is ``.<target name>.p<pid>-<host>.<8 random chars>.tmp`` (``.old``: a previous version
moved aside while publishing). Any stage run may remove the temps of a pid of this machine that
no longer runs; a live writer's and another machine's are never touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import zlib
from pathlib import Path
from typing import Iterable, Iterator

HOST = f"{zlib.crc32(socket.gethostname().encode()):08x}"
# .<target name>.p<pid>-<host>.<mkstemp's 8 random chars>.tmp|.old; older gnnpipe: no p<pid>-<host>
TEMP_NAME = re.compile(r"^\.(?P<name>.+?)\.(?:p(?P<pid>\d+)-(?P<host>[0-9a-f]{8})\.)?"
                   r"[a-z0-9_]{8}\.(?:tmp|old)$")


def temp_prefix(path: Path) -> str:
    return f".{path.name}.p{os.getpid()}-{HOST}."


def _proc_stat(pid: int) -> tuple[str, float] | None:
    """State letter and start time (seconds since the epoch) of ``pid``; None where /proc
    cannot tell."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
        return fields[0], boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _writer_alive(pid: int, since: float) -> bool:
    """Whether ``pid`` still runs and is the process that wrote a temp last touched at ``since``
    (a process started after that is another one that reuses the pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    stat = _proc_stat(pid)
    if stat is None:
        return True
    state, started = stat
    return state not in ("Z", "X") and started <= since + 1  # a zombie has exited


def _is_stale(entry: Path) -> bool:
    match = TEMP_NAME.match(entry.name)
    if match is None:
        return False
    if match["pid"] is None:  # left by an older gnnpipe, whose writers never shared a target
        return True
    if match["host"] != HOST:  # another machine's writer (a shared filesystem): its business
        return False
    try:
        since = entry.lstat().st_mtime
    except FileNotFoundError:
        return False
    return not _writer_alive(int(match["pid"]), since)


def remove_path(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            entry.unlink()


def remove_stale_temps(folders: Iterable[Path], recursive: Iterable[Path] = ()) -> list[Path]:
    """Remove the temp files and folders that killed writers left in ``folders`` and anywhere
    under ``recursive`` (only ``.<name>.p<pid>-<host>.*.tmp|.old`` of a pid of this machine that
    no longer runs, and the untagged ones of older versions). Returns what was removed."""
    removed: list[Path] = []

    def sweep(folder: Path) -> list[Path]:
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return []
        subfolders = []
        for entry in entries:
            path = Path(entry.path)
            if TEMP_NAME.match(entry.name):
                if _is_stale(path):
                    remove_path(path)
                    removed.append(path)
            elif entry.is_dir(follow_symlinks=False):
                subfolders.append(path)
        return subfolders

    for folder in folders:
        sweep(Path(folder))
    for root in recursive:
        stack = [Path(root)]
        while stack:
            stack.extend(sweep(stack.pop()))
    return removed


def remove_stale_beside(path: Path) -> None:
    """Temps a killed writer of ``path`` left behind (never read: only renames publish)."""
    for stale in path.parent.glob(f".{path.name}.*"):
        match = TEMP_NAME.match(stale.name)
        if match and match["name"] == path.name and _is_stale(stale):
            remove_path(stale)


RUN_SCRATCH = Path("gnnpipe-run")  # the per-run scratch folder's target name in the system temp


@contextlib.contextmanager
def run_scratch() -> Iterator[Path]:
    """This stage run's own temp folder, ``.gnnpipe-run.p<pid>-<host>.<8 chars>.tmp`` in the
    system temp dir: ``tempfile`` (so PyG's generated ``*_propagate_*.py`` templates and Dask's
    spill files) and child processes (``TMPDIR``: torchrun ranks, Dask workers) write there, and
    it is removed at exit, also after an error; a killed run's folder matches the temp pattern,
    so the next run's sweep removes it."""
    system = Path(tempfile.gettempdir())
    remove_stale_temps([system])
    folder = Path(tempfile.mkdtemp(prefix=temp_prefix(RUN_SCRATCH), suffix=".tmp", dir=system))
    saved_env, saved_dir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = str(folder), str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = saved_dir
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        shutil.rmtree(folder, ignore_errors=True)
