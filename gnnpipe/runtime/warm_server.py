"""The warm stage server (``gnnpipe warm``, issue 46): a process that has imported the heavy
third-party modules once and forks a child per stage, so a stage skips seconds of imports.
It imports them one by one between requests: a stage that comes before they are all in (the
first one, seconds after the start) is served with those imported by then and imports the rest
itself, as a cold process would, instead of waiting for all of them.

Started by ``gnnpipe.runtime.warm.run`` as ``python -m gnnpipe.runtime.warm_server --fd FD
--path SOCKET`` with the listening Unix socket already bound (a stage that connects before the
imports end waits in the backlog instead of finding no socket). A client (``gnnpipe.cli.main``
of a stage process, ``gnnpipe.runtime.warm.serve``) sends a request (``warm_protocol``: argv,
cwd, environment, sys.path, interpreter) with its stdin, stdout and stderr; the server checks
that a fresh interpreter there would have imported the same modules the same way (``refusal``),
forks, and the child becomes that stage process (``gnnpipe/runtime/warm_child.py``): cwd,
environment, fds, signals, sys.path, ``__main__``, then ``gnnpipe.cli.main(argv)`` with every
gnnpipe module imported anew from the client's sys.path (an edit is never served stale; another
workspace runs its own code). The exit status goes back to the client, which exits with it; a
client that vanishes gets its child killed. One thread, one select loop: nothing here may start
a thread (see ``fork_safe``).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import importlib.machinery
import os
import select
import signal
import socket
import sys
import time
import warnings

from gnnpipe.runtime import threads
from gnnpipe.runtime.warm_child import become
from gnnpipe.runtime.warm_protocol import interpreter, receive_request, reply

# What the stages import that is slow, imported here once: every stage's torch / PyG / Arrow
# (pyarrow.compute: every stage's gnnpipe imports load it, ~0.04 s of CPU each), the baseline's
# lightgbm (with sklearn, scipy), hard negatives' scipy.sparse, partition's pymetis,
# propagate's numba, the report's matplotlib. A module that is not installed is skipped.
# Never a gnnpipe module: those are imported by each child from its client's sys.path.
# The ones that start a thread come first, each alone (THREADS_ALLOWED).
PRELOAD = ("numpy", "scipy.linalg", "pyarrow", "pyarrow.parquet", "pyarrow.compute",
           "pyarrow.csv", "yaml", "tqdm.auto", "torch", "torch_geometric", "scipy.sparse",
           "lightgbm", "pymetis", "numba", "matplotlib.figure",
           "matplotlib.backends.backend_agg")
# Native threads these leave behind at import, and why forking past them is safe: OpenBLAS
# (numpy's, scipy's) stops its pool in a pthread_atfork handler and restarts it on the next BLAS
# call; jemalloc (pyarrow's) holds its locks across fork and turns background purging off in the
# child. Any other import that starts a thread (or an OpenMP / torch pool) makes the server
# refuse every request: a child forked past another library's thread can inherit a held lock.
THREADS_ALLOWED = ("numpy", "scipy.linalg", "pyarrow")
# Environment the preloaded modules read at import (threads, allocators, locale, interpreter,
# matplotlib's rc and cache, torchrun's rank variables): a client whose values differ from the
# server's runs cold. PYTHONPATH is checked through where the modules resolve (``refusal``).
IMPORT_ENV_PREFIXES = ("OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "GOTO", "BLIS_", "THP_",
                       "PYTORCH_", "TORCH", "CUDA", "NUMBA_", "NUMEXPR", "ARROW_", "JE_",
                       "MALLOC_", "LD_", "PYTHON", "MPL", "MATPLOTLIB", "LANG", "LC_", "XDG_",
                       "HOME", "TZ", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                       "MASTER_", *threads.ENV_DEFAULTS)
IMPORT_ENV_FREE = ("PYTHONPATH",)
REQUEST_S = 10.0  # a connected client sends its request at once
KILL_S = 5.0  # SIGTERM, then SIGKILL, for a child whose client went away or a stopping server


def import_env(environ) -> dict[str, str]:
    """The entries of ``environ`` that modules read at import (``IMPORT_ENV_PREFIXES``)."""
    return {key: value for key, value in environ.items()
            if key.startswith(IMPORT_ENV_PREFIXES) and key not in IMPORT_ENV_FREE}


def tasks() -> set[str]:
    """This process's native thread ids (Linux ``/proc``; the count is what matters)."""
    return set(os.listdir("/proc/self/task"))


class Server:
    """Preloaded modules, the listening socket, and one child per running request."""

    def __init__(self, listener: socket.socket):
        self.listener = listener
        self.env = import_env(os.environ)  # before the imports, as a cold stage has it
        self.interpreter = interpreter()
        self.cwd = os.getcwd()
        self.unsafe = ""  # why no child may be forked (a thread someone should not have started)
        self.pending = list(PRELOAD)  # still to import, one at a time between requests
        self.base_env = dict(os.environ)  # before the imports: what they set is added_env
        self.added_env: dict[str, str] = {}
        self.modules: dict[str, str] = {}  # top-level preloaded package -> its file
        self.threads = tasks()  # this thread's; each import that may start more updates it
        self.jobs: dict[int, socket.socket] = {}  # child pid -> its client's connection
        self.doomed: dict[int, float] = {}  # child pid -> when SIGKILL follows the SIGTERM
        self.stopping = False
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def preload(self) -> None:
        """Import ``PRELOAD``'s next module (skipped when not installed); note the native
        threads it left and what the imports so far set in os.environ (sklearn's KMP_*
        defaults: a cold stage importing it has them too, a child forked before gets none)."""
        name = self.pending.pop(0)
        seen = tasks()
        try:
            importlib.import_module(name)
        except ImportError:
            return
        if tasks() - seen and name not in THREADS_ALLOWED and not self.unsafe:
            self.unsafe = f"importing {name} started a thread"
            # once, on the terminal: every later stage will run cold
            print(f"gnnpipe warm: {self.unsafe}; the stages run cold", file=sys.stderr)
        self.added_env = {k: v for k, v in os.environ.items() if k not in self.base_env}
        top = name.split(".")[0]
        self.modules[top] = sys.modules[top].__spec__.origin
        self.threads = tasks()

    def fork_safe(self) -> str:
        """Why forking now would be unsafe ('' when it is safe). A fork copies only the calling
        thread: any other thread's locks stay held forever in the child, and an OpenMP pool
        that ran (torch's intra-op work) hangs the child's first parallel region. So: no Python
        thread, no native thread beyond those the allowed imports left (an op run here would
        start torch's pools: the server runs none)."""
        import threading

        if self.unsafe:
            return self.unsafe
        if threading.active_count() != 1:
            return f"{threading.active_count()} Python threads"
        if tasks() - self.threads:
            return "a native thread started after the imports"
        return ""

    def refusal(self, request: dict) -> str:
        """Why this server cannot run ``request`` as a fresh interpreter would ('' if it can)."""
        if request.get("interpreter") != self.interpreter:
            return "another interpreter or interpreter options"
        env = import_env(request["env"])
        if env != self.env:
            keys = sorted(k for k in env.keys() | self.env.keys() if env.get(k) != self.env.get(k))
            return f"import-time environment differs: {', '.join(keys)}"
        for name, origin in self.modules.items():
            spec = importlib.machinery.PathFinder.find_spec(name, request["path"])
            if spec is None or spec.origin != origin:
                return f"{name} resolves elsewhere on this sys.path"
        # matplotlib read ./matplotlibrc at import, from the server's folder
        if "matplotlib" in self.modules and any(
                os.path.exists(os.path.join(folder, "matplotlibrc"))
                for folder in (request["cwd"], self.cwd)):
            return "a matplotlibrc in the working folder"
        return self.fork_safe()

    # ---------------------------------------------------------------------- the loop
    def wake(self, signum, frame) -> None:
        if signum != signal.SIGCHLD:
            self.stopping = True

    def serve(self) -> None:
        """Accept requests, reap children, kill those whose client left, until SIGTERM; while
        ``PRELOAD`` is not all imported, import its next module whenever no request waits."""
        while not self.stopping or self.jobs:
            if self.stopping:
                self.stop_children()
            waiting = [self.wake_r, *self.jobs.values()]
            if not self.stopping:
                waiting.append(self.listener)
            timeout = max(0.0, min(self.doomed.values()) - time.monotonic()) if self.doomed \
                else None
            if self.pending and not self.stopping:
                timeout = 0.0  # a look: imports go on unless a request waits
            readable, _, _ = select.select(waiting, [], [], timeout)
            if self.wake_r in readable:
                while True:
                    try:
                        if not os.read(self.wake_r, 512):
                            break
                    except BlockingIOError:
                        break
            self.reap()
            for pid, conn in list(self.jobs.items()):
                if conn in readable and pid not in self.doomed and not _peek(conn):
                    self.kill(pid)  # EOF: the client died (SIGKILL) or gave up
            now = time.monotonic()
            for pid, when in list(self.doomed.items()):
                if when <= now:
                    _killpg(pid, signal.SIGKILL)
                    self.doomed[pid] = now + KILL_S
            if self.listener in readable and not self.stopping:
                self.accept()
            elif self.pending and not self.stopping:
                self.preload()

    def kill(self, pid: int) -> None:
        """SIGTERM to the child's process group (its own subprocesses too), SIGKILL later."""
        _killpg(pid, signal.SIGTERM)
        self.doomed[pid] = time.monotonic() + KILL_S

    def stop_children(self) -> None:
        for pid in self.jobs:
            if pid not in self.doomed:
                self.kill(pid)

    def reap(self) -> None:
        """Wait for finished children; tell each client how its child ended."""
        while self.jobs:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.jobs.pop(pid, None)
            self.doomed.pop(pid, None)
            if conn is None:
                continue
            ended = ({"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status)
                     else {"exit": os.waitstatus_to_exitcode(status)})
            try:
                reply(conn, ended)
            except OSError:
                pass
            conn.close()

    def accept(self) -> None:
        """Read one request; refuse it, or fork its child and answer with the child's pid."""
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        conn.settimeout(REQUEST_S)
        fds: list[int] = []
        try:
            request, fds = receive_request(conn)
            why = self.refusal(request) or _gone_client(conn)
            if why:
                reply(conn, {"ok": False, "why": why})
                conn.close()
                return
            with warnings.catch_warnings():  # restored in the child too, as fork returns
                # Python 3.12+ warns on fork with native threads; fork_safe vetted them
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:
                become(request, fds, [self.listener, conn, *self.jobs.values()],
                       (self.wake_r, self.wake_w), self.added_env)
        except (OSError, ValueError, KeyError):
            conn.close()
            return
        finally:
            for fd in fds:
                os.close(fd)
        try:
            os.setpgid(pid, pid)  # the child does the same; whichever runs first
        except OSError:
            pass
        self.jobs[pid] = conn  # closed once the child is reaped
        try:
            conn.settimeout(None)
            reply(conn, {"ok": True, "pid": pid})
        except OSError:
            self.kill(pid)  # the client left meanwhile


def _gone_client(conn: socket.socket) -> str:
    """'the client left' when it hung up after its request (it gave up waiting)."""
    timeout = conn.gettimeout()
    conn.setblocking(False)  # a look, no wait
    try:
        return "" if conn.recv(1, socket.MSG_PEEK) else "the client left"
    except BlockingIOError:
        return ""
    except OSError:
        return "the client left"
    finally:
        conn.settimeout(timeout)


def _peek(conn: socket.socket) -> bytes:
    """A byte from a client that sends none after its request: b'' once it is gone."""
    try:
        return conn.recv(1)
    except OSError:
        return b""


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:  # not (yet) a group of its own
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


# -------------------------------------------------------------------------- server entry
def _die_with_parent() -> None:
    """SIGTERM when ``gnnpipe warm`` (the parent) dies, even by SIGKILL (Linux; elsewhere the
    parent's own stop is all there is)."""
    if not sys.platform.startswith("linux"):
        return
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl(1, ctypes.c_ulong(signal.SIGTERM), *(ctypes.c_ulong(0),) * 3)  # PR_SET_PDEATHSIG


class _Stop(Exception):
    pass


def _stop_now(signum, frame):
    raise _Stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gnnpipe.runtime.warm_server")
    parser.add_argument("--fd", type=int, required=True, help="the bound, listening socket")
    parser.add_argument("--path", required=True, help="its file (removed at exit)")
    args = parser.parse_args(argv)
    listener = socket.socket(fileno=args.fd)
    listener.set_inheritable(False)
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.getcwd():
        del sys.path[0]  # `-m` put the cwd first; a stage's sys.path starts with stages/
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _stop_now)  # before the loop: stop at once
    server = None
    try:
        _die_with_parent()
        if os.getppid() == 1:  # the parent died before the death signal was armed
            return 0
        threads.default_env()  # as gnnpipe.cli does before anything loads torch
        server = Server(listener)
        signal.set_wakeup_fd(server.wake_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, server.wake)
        server.serve()
    except _Stop:
        pass
    finally:
        listener.close()
        for path in (args.path, os.path.dirname(args.path)):
            try:
                (os.unlink if path == args.path else os.rmdir)(path)
            except OSError:
                pass
        if server is not None and server.jobs:
            for pid in server.jobs:
                _killpg(pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown of torch & co. (seconds): nothing left to save
