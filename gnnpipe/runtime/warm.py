"""``gnnpipe warm -- CMD``: CMD's stage processes skip their heavy imports (issue 46).

``command`` starts the warm server (``gnnpipe/runtime/warm_server.py``: torch, PyG, Arrow,
lightgbm, ... imported once) on a Unix socket in a private temp folder, runs CMD (``dvc repro``,
``dvc exp run -S train.lr=0.02``) with ``GNNPIPE_WARM=<socket>`` in its environment and stops
the server when CMD ends, also on Ctrl-C or SIGTERM; CMD's exit code is its own. A stage process
CMD starts (``gnnpipe.cli.main``) hands itself to the server (``serve``): the server forks a
child that runs the stage exactly as that process would have, from its own cwd, environment,
stdin/stdout/stderr and sys.path (gnnpipe's modules imported anew: an edit is never stale); the
stage process waits for it, forwards SIGINT and SIGTERM, and exits with its status. Where the
server cannot stand in for a fresh interpreter (another Python, another import-time environment
such as OMP_NUM_THREADS, a module resolving elsewhere) or is not there, the stage runs cold, as
without ``gnnpipe warm``; GNNPIPE_DEBUG=1 says which in one line.
"""

from __future__ import annotations

import os
import signal
import socket
import sys

from gnnpipe.runtime.warm_protocol import interpreter, read_reply, send_request

ENV = "GNNPIPE_WARM"  # the server's socket, set for CMD by `gnnpipe warm`
CONNECT_S = 2.0  # a listening socket accepts at once; longer means something is wrong
# the server answers between two of its imports (a second or two at its start; a loaded
# machine, more); a server that has not answered by then is stuck, and the stage runs cold
READY_S = 120.0
STOP_S = 15.0  # the server stops its children (SIGTERM, SIGKILL 5 s later) and itself
FORWARDED = (signal.SIGINT, signal.SIGTERM)

DESCRIPTION = """\
Run CMD with a warm stage server: each gnnpipe stage CMD starts (dvc repro, dvc exp run) runs in
a fork of a process that has already imported torch, PyG, Arrow and lightgbm, instead of
importing them itself (seconds per stage). Outputs are the same bytes; a stage the server cannot
stand in for (another Python, another OMP_NUM_THREADS, ...) runs as usual. The server stops when
CMD ends. GNNPIPE_DEBUG=1 prints one line per stage: served or cold, and why.

  gnnpipe warm -- dvc repro
  gnnpipe warm -- dvc exp run -S train.lr=0.02
"""


def command(argv: list[str]) -> int:
    """``gnnpipe warm [--] CMD ...``: CMD's exit code."""
    import argparse

    parser = argparse.ArgumentParser(prog="gnnpipe warm", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                        help="the command to run with the server (dvc repro, dvc exp run ...)")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("give the command to run, e.g. gnnpipe warm -- dvc repro")
    return run(cmd)


def run(cmd: list[str]) -> int:
    """CMD with a warm server for its stages; the server and its folder are gone on return.
    Where no server can be started (not Linux, no temp folder), CMD runs with cold stages."""
    import shutil  # here, not at the top: a stage process imports this module to be served
    import subprocess
    import tempfile

    server = child = folder = None
    signals: list[int] = []

    def forward(signum, frame) -> None:
        # Ctrl-C reaches CMD from the terminal itself (one process group); SIGTERM or SIGHUP
        # sent to this process alone is passed on, and CMD ends as it chooses
        if child is not None and child.poll() is None and signum != signal.SIGINT:
            child.send_signal(signum)
        signals.append(signum)

    previous = {sig: signal.signal(sig, forward)
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    env = dict(os.environ)
    try:
        try:
            if not sys.platform.startswith("linux"):  # the server's checks read /proc
                raise OSError("Linux only")
            folder = tempfile.mkdtemp(prefix="gnnpipe-warm-")  # 0700: this user's stages alone
            path = os.path.join(folder, "server.sock")
            # bound before CMD starts: a stage that connects while the server still imports
            # waits in the backlog instead of finding no socket and running cold
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
                listener.bind(path)
                listener.listen(64)
                server = subprocess.Popen(
                    [sys.executable, "-m", "gnnpipe.runtime.warm_server", "--fd",
                     str(listener.fileno()), "--path", path], pass_fds=(listener.fileno(),),
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
            env[ENV] = path
        except OSError as err:
            print(f"gnnpipe warm: no server ({err}); the stages run cold", file=sys.stderr)
        if signals:  # stopped before CMD started
            return 128 + signals[0]
        try:
            child = subprocess.Popen(cmd, env=env)
        except OSError as err:
            print(f"gnnpipe warm: {cmd[0]}: {err.strerror}", file=sys.stderr)
            return 127 if isinstance(err, FileNotFoundError) else 126
        code = child.wait()
        return code if code >= 0 else 128 - code
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(STOP_S)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(argv: list[str], console: bool) -> int | None:
    """Run the stage ``argv`` in a fork of the warm server named by ``GNNPIPE_WARM``: its exit
    code, or None when the server cannot (the caller runs the stage itself). ``console``: this
    process is ``gnnpipe``/``python -m gnnpipe``; otherwise only a ``stages/<stage>.py`` script
    is served (a test calling ``main`` in its own process runs it there)."""
    path = os.environ.get(ENV)
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if not path or not (console or _is_stage_script(main_file, argv[0])):
        return None
    spec = getattr(main, "__spec__", None)
    request = {"argv": argv, "argv0": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ),
               "path": sys.path, "main_file": main_file,
               "main_spec": getattr(spec, "name", None), "interpreter": interpreter()}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stream = sock.makefile("rb")  # closed with sock: a client that gives up is seen to leave
    try:
        sock.settimeout(CONNECT_S)
        sock.connect(path)
        send_request(sock, request, [0, 1, 2])
        sock.settimeout(READY_S)
        answer = read_reply(stream) or {"why": "the server hung up"}
    except (OSError, ValueError) as err:
        answer = {"why": f"no warm server at {path} ({type(err).__name__}: {err})"}
    try:
        if answer.get("ok"):  # from here on the stage runs there, never also here
            _debug(f"gnnpipe {argv[0]}: served by the warm server (pid {answer['pid']})")
            return _wait(sock, stream, answer["pid"], argv[0])
    finally:
        stream.close()
        sock.close()
    _debug(f"gnnpipe {argv[0]}: running cold: {answer.get('why')}")
    return None


def _wait(sock: socket.socket, stream, pid: int, stage: str) -> int:
    """The served child's exit code; SIGINT and SIGTERM sent here go to it meanwhile. A child
    ended by a signal ends this process by the same signal, as if it had run here."""
    from gnnpipe.runtime import resources

    def forward(signum, frame) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        # this process still dies with DVC; the server then kills the child (the socket closes)
        resources.die_with_parent()
        sock.settimeout(None)  # a stage runs as long as it runs; the server's end is EOF
        ended = read_reply(stream)
    except (OSError, ValueError):
        ended = None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if ended is None:
        print(f"gnnpipe {stage}: error: the warm server stopped while the stage ran",
              file=sys.stderr)
        return 1
    if "signal" in ended:
        sys.stdout.flush()
        signal.signal(ended["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), ended["signal"])
        return 128 + ended["signal"]  # a signal that does not end a process
    return ended["exit"]


def _is_stage_script(main_file: str | None, stage: str) -> bool:
    """``main_file`` is ``stages/<stage>.py`` (how dvc.yaml starts a stage)."""
    if not main_file:
        return False
    head, name = os.path.split(main_file)
    return name == f"{stage}.py" and os.path.basename(head) == "stages"


def _debug(line: str) -> None:
    if os.environ.get("GNNPIPE_DEBUG"):
        print(line, file=sys.stderr, flush=True)
