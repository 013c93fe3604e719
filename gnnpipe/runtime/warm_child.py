"""A child of the warm server (gnnpipe/runtime/warm_server.py) becoming the stage process its
client would have been: the client's stdin/stdout/stderr, cwd, environment, sys.argv, sys.path
and ``__main__``, default signal handlers, no server fds, gnnpipe's modules imported anew; then
``gnnpipe.cli.main(argv)`` and the exit an interpreter would make of its outcome."""

from __future__ import annotations

import importlib
import importlib.machinery
import io
import os
import signal
import sys
import traceback

ENTRY = "gnnpipe.cli"  # a name, not an import: what each child imports anew


def become(request: dict, fds: list[int], sockets: list, pipe: tuple[int, int],
           added_env: dict[str, str]) -> None:
    """In the forked child: turn into the client's stage process and run it; never returns."""
    code, interrupted = 1, False
    try:
        try:
            os.setpgid(0, 0)  # its own group: the server can stop it with what it started
        except OSError:
            pass
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own default
        signal.set_wakeup_fd(-1)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for sock in sockets:
            sock.close()
        for fd in pipe:
            os.close(fd)
        code = run_stage(request, fds, added_env)
    except SystemExit as done:
        code = _exit_code(done.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        interrupted = True
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    finally:
        _finish()
        if interrupted:  # as an interpreter ends on an uncaught KeyboardInterrupt: by SIGINT
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code)


def run_stage(request: dict, fds: list[int], added_env: dict[str, str]) -> int:
    """The client's process state, then ``gnnpipe.cli.main(argv)`` from its sys.path."""
    _flush()
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)  # inheritable, as a process's standard fds are
        os.close(fd)
    fds.clear()
    _std_streams()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update({**added_env, **request["env"]})
    os.environ.pop("GNNPIPE_WARM", None)  # the stage runs here; its own subprocesses run cold
    sys.argv[:] = request["argv0"]
    sys.path[:] = request["path"]
    _fresh_main(request.get("main_file"), request.get("main_spec"))
    for name in [m for m in sys.modules if m == "gnnpipe" or m.startswith("gnnpipe.")]:
        del sys.modules[name]  # the server's own: each stage imports gnnpipe anew
    importlib.invalidate_caches()
    if "linecache" in sys.modules:  # caches a fresh process would not have
        sys.modules["linecache"].clearcache()
    if "tempfile" in sys.modules:
        sys.modules["tempfile"].tempdir = None
    if "multiprocessing.process" in sys.modules:  # spawn finds __main__ relative to it
        sys.modules["multiprocessing.process"].ORIGINAL_DIR = request["cwd"]
    entry = importlib.import_module(ENTRY)
    return _exit_code(entry.main(request["argv"]))


def _std_streams() -> None:
    """sys.stdin/stdout/stderr on the new fds, buffered as the interpreter's start-up does
    (line-buffered on a terminal, stderr always; -u / PYTHONUNBUFFERED: write-through)."""
    unbuffered = bool(getattr(sys.__stdout__, "write_through", False))  # -u, as started
    streams = []
    for fd, mode, like in ((0, "r", sys.__stdin__), (1, "w", sys.__stdout__),
                           (2, "w", sys.__stderr__)):
        encoding = getattr(like, "encoding", None) or "utf-8"
        errors = getattr(like, "errors", None) or ("backslashreplace" if fd == 2 else "strict")
        if mode == "r":
            streams.append(open(fd, "r", encoding=encoding, errors=errors, closefd=False))
            continue
        raw_tty = os.isatty(fd)
        stream = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)
        streams.append(io.TextIOWrapper(
            stream, encoding=encoding, errors=errors,
            line_buffering=not unbuffered and (raw_tty or fd == 2), write_through=unbuffered))
    sys.stdin, sys.stdout, sys.stderr = streams
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams


def _fresh_main(main_file: str | None, main_spec: str | None) -> None:
    """A ``__main__`` like the client's (multiprocessing's spawn re-imports it by file or name)."""
    module = type(sys)("__main__")
    if main_file:
        module.__file__ = main_file
    module.__spec__ = (importlib.machinery.ModuleSpec(main_spec, None, origin=main_file)
                       if main_spec else None)
    sys.modules["__main__"] = module


def _exit_code(code) -> int:
    """What ``sys.exit(code)`` makes the process's status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def _finish() -> None:
    """What an interpreter does at exit that matters here: atexit handlers, flushed streams."""
    import atexit

    try:
        atexit._run_exitfuncs()
    finally:
        _flush()
