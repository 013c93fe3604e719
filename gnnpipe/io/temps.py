"""Temp names that say who wrote them, the sweep that removes what killed writers left, and
the memory-mapped scratch tables a stage keeps beside its outputs.

A temp is ``.<target name>.p<pid>-<host>.<8 random chars>.tmp`` (``.old``: a previous version
moved aside while publishing). Any stage run may remove the temps of a pid of this machine that
no longer runs; a live writer's and another machine's are never touched.
"""

from __future__ import annotations

import contextlib
import errno
import math
import mmap
import os
import re
import shutil
import socket
import tempfile
import zlib
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

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


# ---------------------------------------------------------------------- mapped scratch tables
# The folder a stage's scratch tables go to: beside its outputs (``scratch_beside``, entered once
# per stage run); an environment variable, so torchrun ranks the stage launches inherit it.
SCRATCH_ENV = "GNNPIPE_SCRATCH_DIR"
SCRATCH_NAME = Path("layerwise")  # scratch tables are .layerwise.p<pid>-<host>.<8 chars>.tmp


@contextlib.contextmanager
def scratch_beside(output: Path | None) -> Iterator[Path | None]:
    """Scratch tables (``scratch_array``) of the code inside go to the folder holding
    ``output`` (a stage's output path; None: anonymous memory, as outside a stage)."""
    saved = os.environ.get(SCRATCH_ENV)
    folder = None if output is None else Path(os.path.abspath(output)).parent
    if folder is not None:
        os.environ[SCRATCH_ENV] = str(folder)
    try:
        yield folder
    finally:
        if saved is None:
            os.environ.pop(SCRATCH_ENV, None)
        else:
            os.environ[SCRATCH_ENV] = saved


def scratch_folder() -> Path | None:
    """Where ``scratch_array`` maps its files now; None: it allocates anonymous memory."""
    folder = os.environ.get(SCRATCH_ENV)
    return Path(folder) if folder else None


def scratch_array(rows: int, width: int, dtype=np.float32) -> np.ndarray | None:
    """An uninitialised writable (rows, width) array whose pages belong to a file in
    ``scratch_folder()``: the kernel writes them back to disk under memory pressure instead of
    counting them as the process's anonymous memory. None without a scratch folder (or for an
    empty table): the caller allocates in memory.

    The file is a temp of the sweep's pattern, its blocks reserved first (a full disk raises
    OSError here, not SIGBUS on a later write), and unlinked as soon as it is mapped: the
    mapping keeps it until the array's last view goes, so nothing is left on disk after the
    run, an error or a kill (a kill between create and unlink leaves a temp the next run's
    sweep removes)."""
    folder = scratch_folder()
    nbytes = rows * width * np.dtype(dtype).itemsize
    if folder is None or nbytes == 0:
        return None
    folder.mkdir(parents=True, exist_ok=True)  # a stage's output folder exists only once written
    fd, name = tempfile.mkstemp(prefix=temp_prefix(SCRATCH_NAME), suffix=".tmp", dir=folder)
    try:
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError as err:  # a filesystem without fallocate: a sparse file
            if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            os.ftruncate(fd, nbytes)
        region = mmap.mmap(fd, nbytes)  # MAP_SHARED: written back to the file, not to swap
    finally:
        os.close(fd)
        os.unlink(name)
    return np.frombuffer(region, dtype=dtype).reshape(rows, width)


def scratch_or_memory(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised writable array of ``shape`` (any rank) and ``dtype``: a ``scratch_array``
    inside a stage, anonymous memory where that gives none (outside a stage, an empty table)."""
    mapped = scratch_array(shape[0], math.prod(shape[1:]), dtype)
    return np.empty(shape, dtype=dtype) if mapped is None else mapped.reshape(shape)
