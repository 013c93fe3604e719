"""One writer per output: a stage holds a lock named after its output path while it runs.

The lock files live outside the repository (a per-user folder of this machine's temp dir), so
DVC and git never see them; the kernel releases a lock when its holder exits, however it dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import time
from pathlib import Path
from typing import Iterator

LOCK_DIR_ENV = "GNNPIPE_LOCK_DIR"  # where the lock files live (default: <tmp>/gnnpipe-locks-<uid>)
# a holder killed with its parent takes a moment to exit (the shell watcher polls each second):
# a run started right after `kill <dvc>` waits this long before it is refused
WAIT_S = 5.0


def _acquire(path: Path, output: Path) -> int:
    """An open descriptor of ``path`` holding its exclusive lock; refused when another process
    holds it for more than ``WAIT_S``."""
    deadline = time.monotonic() + WAIT_S
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 300, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            if time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            raise ValueError(f"{output} is being written by {holder}; wait for it to finish or "
                             "stop it (one writer per output)") from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # a releasing holder unlinked the file we opened: lock the new one


@contextlib.contextmanager
def exclusive(stage: str, output: Path) -> Iterator[None]:
    """Hold the lock of ``output`` for the body; a second ``gnnpipe`` writing the same output
    (a leftover run, another ``dvc repro``) gets a one-line ``ValueError`` naming the holder."""
    folder = Path(os.environ.get(LOCK_DIR_ENV)
                  or Path(tempfile.gettempdir()) / f"gnnpipe-locks-{os.getuid()}")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = hashlib.sha256(os.path.abspath(output).encode()).hexdigest()[:24]
    path = folder / f"{key}.lock"
    fd = _acquire(path, output)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"gnnpipe {stage} (pid {os.getpid()}, in {os.getcwd()})".encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # while still held, so no new holder is locking a removed file
        os.close(fd)
