"""Atomic file and directory writes: a crash leaves the previous output or none, never half of one.

Inside ``publishing()`` (``gnnpipe.cli`` enters it once around a stage) the writes are staged:
each output is complete in a temp path beside its target and all are renamed into place together
at the end, the ones already renamed rolled back if a later one fails, so a stage publishes all
its outputs or none. Temp names carry the writer's pid and host (``.<name>.p<pid>-<host>.<rand>
.tmp``), so any later stage run can remove what a killed writer left (``gnnpipe/io/temps.py``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from gnnpipe.io.temps import remove_path, remove_stale_temps, temp_prefix

# Set to a file name (or "name@N" for its N-th write) to SIGKILL the writer after that file's
# temp copy is complete but before it is renamed into place: the worst moment for a crash,
# reproduced on demand by tests/pipeline/test_faults.py.
FAULT_ENV = "GNNPIPE_FAULT_KILL_BEFORE_RENAME"
# Tests: the same spec makes that write fail with ENOSPC (a full disk), or stall (a long stage).
ENOSPC_ENV = "GNNPIPE_FAULT_ENOSPC"
STALL_ENV = "GNNPIPE_FAULT_STALL_BEFORE_RENAME"
# Tests: renaming this file into place (in the final renames of a stage) fails with ENOSPC.
PUBLISH_FAULT_ENV = "GNNPIPE_FAULT_ENOSPC_ON_PUBLISH"
_writes: dict[tuple[str, str], int] = {}

def _hits(env: str, path: Path) -> bool:
    spec = os.environ.get(env)
    if not spec:
        return False
    name, _, nth = spec.partition("@")
    if name != path.name:
        return False
    _writes[env, name] = _writes.get((env, name), 0) + 1
    return _writes[env, name] == int(nth or 1)


def _maybe_fault(path: Path) -> None:
    if _hits(ENOSPC_ENV, path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    if _hits(STALL_ENV, path):
        time.sleep(3600)
    if _hits(FAULT_ENV, path):
        os.kill(os.getpid(), signal.SIGKILL)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ------------------------------------------------------------------------------- publishing
class _Publication:
    """The outputs a stage has staged: ``(temp, target)`` renamed in order by ``commit``."""

    def __init__(self, staged: list[tuple[Path, Path]] | None = None) -> None:
        self.staged: list[tuple[Path, Path]] = staged or []
        self.open_dirs: list[Path] = []  # atomic_dir temps being filled: written into directly
        self.after: list[Callable[[], None]] = []

    def inside_open_dir(self, path: Path) -> bool:
        path = Path(os.path.abspath(path))
        return any(path.is_relative_to(os.path.abspath(folder)) for folder in self.open_dirs)

    def commit(self) -> None:
        """Rename every staged temp onto its target (an existing target is moved aside first);
        on a failure put the moved-aside versions back and re-raise."""
        done: list[list] = []  # [temp, target, its old version moved aside or None, renamed]
        try:
            for tmp, target in self.staged:
                done.append([tmp, target, None, False])
                if target.exists() or target.is_symlink():
                    holder = Path(tempfile.mkdtemp(prefix=temp_prefix(target), suffix=".old",
                                                   dir=target.parent))
                    done[-1][2] = holder / target.name
                    os.replace(target, holder / target.name)  # rename cannot replace a full dir
                if _hits(PUBLISH_FAULT_ENV, target):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))
                os.replace(tmp, target)
                done[-1][3] = True
        except BaseException:
            for tmp, target, aside, renamed in reversed(done):
                if renamed:  # back to its temp name (removed below): one rename, not a tree walk
                    os.replace(target, tmp)
                if aside is not None and aside.exists():
                    os.replace(aside, target)
            raise
        finally:
            for tmp, _ in self.staged:
                if tmp.exists():
                    remove_path(tmp)
            for _, _, aside, _ in done:
                if aside is not None:
                    shutil.rmtree(aside.parent, ignore_errors=True)
        for action in self.after:
            action()


_current: _Publication | None = None


@contextlib.contextmanager
def publishing() -> Iterator[None]:
    """Stage every ``atomic_path`` / ``atomic_dir`` output written inside, and publish them all
    at the end (or, on an exception, none: their temps are removed)."""
    global _current
    if _current is not None:  # nested: the outer one publishes
        yield
        return
    publication = _current = _Publication()
    try:
        yield
        _current = None
        publication.commit()
    except BaseException:
        for tmp, _ in publication.staged:
            remove_path(tmp)
        raise
    finally:
        _current = None


def staged(path: str | Path) -> Path:
    """Where ``path``'s new version is now: its staged temp inside ``publishing()``, else ``path``."""
    found = [tmp for tmp, target in (_current.staged if _current else []) if target == Path(path)]
    return found[-1] if found else Path(path)


def remove_on_publish(path: str | Path) -> None:
    """Delete ``path`` once the stage's outputs are published (at once outside ``publishing``):
    a checkpoint is dropped only when the outputs that supersede it are in place."""
    action = lambda: Path(path).unlink(missing_ok=True)  # noqa: E731
    if _current is None:
        action()
    else:
        _current.after.append(action)


def _publish(tmp: Path, path: Path, now: bool) -> bool:
    """Rename now (True) or stage ``tmp`` for the end of ``publishing()`` (False)."""
    if now or _current is None or _current.inside_open_dir(path):
        return True
    _current.staged.append((tmp, path))
    return False


def _make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as err:
        blocking = next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()),
                        err.filename)
        raise NotADirectoryError(errno.ENOTDIR, f"cannot be written: {blocking} is a file, "
                                 "not a folder", str(path)) from err


def _write_failed(err: Exception, path: Path) -> None:
    """Raise the OSError that a writer library's error on a full disk stands for (torch.save
    says only ``unexpected pos``); other errors are left to propagate."""
    try:
        full = os.statvfs(path.parent).f_bavail == 0
    except OSError:
        full = False
    if full:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from err


def _name_target(err: OSError, tmp: Path, path: Path) -> None:
    """An error about the temp names its target, so the one-line message names a real file."""
    name = str(err.filename) if err.filename is not None else None
    if name is None:
        err.filename = str(path)
    elif name.startswith(str(tmp)):
        err.filename = str(path) + name[len(str(tmp)):]


@contextlib.contextmanager
def atomic_path(path: str | Path, *, now: bool = False) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success fsync and rename it onto ``path``.

    On an exception the temp file is removed and ``path`` is left untouched. Inside
    ``publishing()`` the rename waits for the end of the stage, unless ``now`` (a checkpoint,
    which must be on disk when the stage is killed) or ``path`` lies in an ``atomic_dir`` temp.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder; expected a file (or nothing) here",
                                str(path))
    _make_parent(path)
    fd, tmp_name = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual mode
    os.close(fd)
    tmp = Path(tmp_name)
    keep = False
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        _maybe_fault(path)
        if _publish(tmp, path, now):
            os.replace(tmp, path)
        else:
            keep = True
    except OSError as err:
        _name_target(err, tmp, path)
        raise
    except (RuntimeError, ValueError) as err:  # torch.save, pyarrow: a failed write, no file named
        _write_failed(err, path)
        raise
    finally:
        if not keep and tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(path: str | Path, *, now: bool = False) -> Iterator[Path]:
    """Yield a fresh temp directory beside ``path``; on success it replaces ``path`` whole.

    A stage that writes several files into one output folder uses this so that readers see
    either the old folder, no folder, or the complete new one. Files written into the temp
    directory are renamed there at once; inside ``publishing()`` the folder itself is swapped
    in at the end of the stage.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "is a file; expected a folder (or nothing) here",
                                 str(path))
    _make_parent(path)
    remove_stale_temps([path.parent])  # a killed writer's temps (never read: only renames publish)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())
    keep = False
    if _current is not None:
        _current.open_dirs.append(tmp)
    try:
        yield tmp
        if _current is not None:
            _current.open_dirs.remove(tmp)
        if _publish(tmp, path, now):  # now, alone: the old folder moved aside, then removed
            _Publication([(tmp, path)]).commit()
        else:
            keep = True
    except OSError as err:
        _name_target(err, tmp, path)
        raise
    finally:
        if _current is not None and tmp in _current.open_dirs:
            _current.open_dirs.remove(tmp)
        if not keep and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: str | Path, payload: Any, *, now: bool = False) -> None:
    """Pretty JSON written atomically (sorted keys, so reruns are byte-identical); ``now``: see
    ``atomic_path``."""
    with atomic_path(path, now=now) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def existing(path: str | Path) -> Path:
    """``path`` as a Path; a one-line ValueError naming it where there is no such file."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: file not found; run the stage that produces it first")
    return path


def read_json(path: str | Path) -> Any:
    path = existing(path)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None


def write_csv(path: str | Path, rows: list[dict], header: tuple[str, ...] = ()) -> None:
    """Rows of equal keys as CSV (header from the first row), written atomically; with no rows,
    the ``header`` alone (no rows and no header is an error)."""
    if not rows and not header:
        raise ValueError(f"{path}: no rows to write")
    header = list(rows[0]) if rows else list(header)
    lines = [",".join(header)] + [",".join(str(row[key]) for key in header) for row in rows]
    write_text(path, "\n".join(lines) + "\n")
