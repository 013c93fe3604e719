"""``gnnpipe warm`` (issue 46): a stage served by a fork of the warm server writes the bytes a
cold stage process writes, exits with its code, dies with its client, runs cold where the server
cannot stand in for a fresh interpreter, never runs stale gnnpipe code, and nothing of the
server outlives its command. The stages run as dvc.yaml starts them (``python stages/<s>.py``)
in folders beside a copy of the sources (PYTHONPATH), as a `dvc exp run --temp` workspace does."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gnnpipe.io.atomic import STALL_ENV

REPO = Path(__file__).resolve().parents[2]
PARAMS = {"dataset": {"synthetic": {"num_nodes": 500, "num_features": 8, "num_classes": 3}},
          "train": {"epochs": 5, "patience": 5, "hidden": 8},
          "baseline": {"epochs": 5, "patience": 5, "hidden": 8, "models": ["mlp"]}}
SERVED = re.compile(r"gnnpipe (\w+): served by the warm server \(pid (\d+)\)")


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    """gnnpipe and stages/ copied (what a workspace copy holds); the stages' folders beside."""
    root = tmp_path_factory.mktemp("warm")
    for name in ("gnnpipe", "stages"):
        shutil.copytree(REPO / name, root / "src" / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return root / "src"


def _env(sources: Path, **extra) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "GNNPIPE_WARM"}
    return {**env, "PYTHONPATH": str(sources), "GNNPIPE_PROGRESS": "0", "GNNPIPE_DEBUG": "1",
            **extra}


def _folder(root: Path, name: str) -> Path:
    folder = root.parent / name
    folder.mkdir()
    (folder / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    return folder


def _stage(sources: Path, cwd: Path, stage: str, *args: str, warm: str | None = None,
           **env) -> subprocess.CompletedProcess:
    """``python stages/<stage>.py ARGS`` in ``cwd`` (through the server at ``warm``)."""
    extra = {"GNNPIPE_WARM": warm} if warm else {}
    return subprocess.run([sys.executable, str(sources / "stages" / f"{stage}.py"), *args],
                          cwd=cwd, env=_env(sources, **extra, **env), capture_output=True,
                          text=True, timeout=300)


def _server_pids(path: str) -> list[int]:
    """Live processes whose command line names the socket ``path`` (the server)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and path.encode() in (entry / "cmdline").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                found += [int(entry.name)] if state not in ("Z", "X") else []
        except OSError:
            pass
    return found


def _gone(pid: int, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    return False


def _start(sources: Path, code: str) -> tuple[subprocess.Popen, str]:
    """``gnnpipe warm -- python -c CODE`` where CODE prints GNNPIPE_WARM first: the front and
    the socket path."""
    front = subprocess.Popen(
        [sys.executable, "-m", "gnnpipe", "warm", "--", sys.executable, "-c",
         "import os, sys, time; print(os.environ['GNNPIPE_WARM'], flush=True); " + code],
        cwd=sources, env=_env(sources), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    return front, front.stdout.readline().strip()


@pytest.fixture(scope="module")
def server(sources):
    """One warm server for the module, its command waiting for stdin to close; on teardown
    the server (past its imports, children run) and its folder must be gone."""
    front, path = _start(sources, "sys.stdin.read()")
    yield path
    front.stdin.close()
    assert front.wait(60) == 0
    assert not Path(path).parent.exists() and not _server_pids(path)


def _files(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()
            and "perf" not in p.relative_to(folder).parts}  # wall-clock records differ


def test_served_stages_write_the_bytes_cold_ones_write(sources, server):
    cold, served = _folder(sources, "cold"), _folder(sources, "served")
    for stage in ("prepare", "split", "train"):
        perf = ("--resources", f"metrics/perf/stages/{stage}.json")
        done = _stage(sources, cold, stage, *perf)
        assert done.returncode == 0 and not SERVED.search(done.stderr), done.stderr
        done = _stage(sources, served, stage, *perf, warm=server)
        assert done.returncode == 0, done.stderr
        assert SERVED.search(done.stderr) and SERVED.search(done.stderr)[1] == stage, done.stderr
    files = _files(cold)
    assert "data/model/model.pt" in files and _files(served) == files
    assert (served / "metrics/perf/stages/train.json").exists()


def test_output_and_exit_codes_come_back(sources, server):
    empty = sources.parent / "empty"
    empty.mkdir()
    cold = _stage(sources, empty, "report", "--help")
    done = _stage(sources, empty, "report", "--help", warm=server)
    assert done.returncode == 0 and done.stdout == cold.stdout and "--params" in done.stdout
    done = _stage(sources, empty, "prepare", "--no-such-option", warm=server)
    assert done.returncode == 2 and "unrecognized arguments" in done.stderr
    assert SERVED.search(done.stderr)
    done = _stage(sources, empty, "split", warm=server)  # no params.yaml, no upstream
    assert done.returncode == 1 and SERVED.search(done.stderr)
    assert re.search(r"gnnpipe split: error: .*params\.yaml", done.stderr), done.stderr


def test_a_different_import_environment_runs_cold(sources, server):
    empty = sources.parent / "cold_env"
    empty.mkdir()
    done = _stage(sources, empty, "report", "--help", warm=server, OMP_NUM_THREADS="3")
    assert done.returncode == 0 and "--params" in done.stdout
    assert not SERVED.search(done.stderr)
    assert "running cold: import-time environment differs: OMP_NUM_THREADS" in done.stderr
    done = _stage(sources, empty, "report", "--help", warm=str(sources / "no.sock"))
    assert done.returncode == 0 and "running cold: no warm server" in done.stderr


def _stalled(sources: Path, folder: Path, server: str) -> tuple[subprocess.Popen, int]:
    """A served prepare stalled before publishing (the fault hook): the client and the pid of
    the child that runs it (the writer's pid in its temp name)."""
    client = subprocess.Popen(
        [sys.executable, str(sources / "stages" / "prepare.py"), "--resources", "perf.json"],
        cwd=folder, env=_env(sources, GNNPIPE_WARM=server, **{STALL_ENV: "perf.json"}),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        temps = [m for p in folder.glob(".perf.json.p*")
                 if (m := re.match(r"\.perf\.json\.p(\d+)-", p.name))]
        if temps:
            return client, int(temps[0].group(1))
        assert client.poll() is None, client.communicate()
        time.sleep(0.1)
    client.kill()
    raise AssertionError("the served stage never reached its stall")


def test_a_killed_client_takes_its_stage_along(sources, server):
    client, child = _stalled(sources, _folder(sources, "killed"), server)
    assert child != client.pid  # the stage runs in the server's fork
    client.kill()  # as `kill -9` of the stage DVC started
    client.wait()
    assert _gone(child), "the served stage outlived its client"


def test_ctrl_c_reaches_the_served_stage(sources, server):
    folder = _folder(sources, "interrupted")
    client, child = _stalled(sources, folder, server)
    client.send_signal(signal.SIGINT)
    _, err = client.communicate(timeout=60)
    assert client.returncode == 130 and "interrupted; nothing was published" in err
    assert _gone(child) and not list(folder.glob(".perf.json.p*"))


def test_an_edit_between_two_served_runs_is_seen(sources, server):
    empty = sources.parent / "edited"
    empty.mkdir()
    command = sources / "gnnpipe" / "commands" / "report.py"
    before = command.read_text()
    first = _stage(sources, empty, "report", "--help", warm=server)
    try:
        command.write_text(before.replace('"""', '"""Edited between two runs. ', 1))
        second = _stage(sources, empty, "report", "--help", warm=server)
    finally:
        command.write_text(before)
    assert SERVED.search(first.stderr) and SERVED.search(second.stderr)
    assert "Edited between" not in first.stdout and "Edited between" in second.stdout


def test_the_server_goes_with_its_command(sources):
    front, path = _start(sources, "sys.exit(3)")
    assert front.wait(60) == 3  # the command's own code
    assert not Path(path).parent.exists() and not _server_pids(path)
    # SIGTERM to `gnnpipe warm`: its command gets it, the server stops, the code says so
    front, path = _start(sources, "time.sleep(60)")
    assert Path(path).exists()  # bound before the command starts
    front.send_signal(signal.SIGTERM)
    assert front.wait(60) == 128 + signal.SIGTERM
    assert not Path(path).parent.exists() and not _server_pids(path)


# in a fresh interpreter (this one's torch pools come and go): the checks the server makes
# before each fork, with and without a thread running
FORK_PROBE = """
import os, socket, sys, threading
from gnnpipe.runtime import warm_server
with socket.socket(socket.AF_UNIX) as listener:
    server = warm_server.Server(listener)
    server.threads = warm_server.tasks()
    request = {"interpreter": warm_server.interpreter(), "env": dict(os.environ), "path": sys.path}
    found = [server.fork_safe(), server.refusal(request)]
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    found += [server.fork_safe(), server.refusal(request)]
    stop.set()
    thread.join()
    other = {**request, "interpreter": {**request["interpreter"], "prefix": "/elsewhere"}}
    found += [server.refusal(other)]
print(found)
"""


def test_no_fork_past_a_thread_or_for_another_interpreter():
    done = subprocess.run([sys.executable, "-c", FORK_PROBE], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.strip() == str(["", "", "2 Python threads", "2 Python threads",
                                       "another interpreter or interpreter options"])


# in a fresh interpreter: the server's preloads, then in a fork per stage what a served child
# imports before its stage's own seconds start (the command's parser, gnnpipe.cli's imports):
# the installed (site-packages) modules that loads beyond the preloads, as JSON per stage
PRELOAD_PROBE = """
import importlib, json, os, sys, sysconfig
from gnnpipe.runtime import threads, warm_server
from gnnpipe.pipeline import STAGES
threads.default_env()
for name in warm_server.PRELOAD:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
for name in [m for m in sys.modules if m == "gnnpipe" or m.startswith("gnnpipe.")]:
    del sys.modules[name]
site = tuple({sysconfig.get_paths()[key] for key in ("purelib", "platlib")})
found = {}
for stage in STAGES:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        before = set(sys.modules)
        cli = importlib.import_module("gnnpipe.cli")
        cli.build_parser((stage,))
        cli.environment_errors()
        importlib.import_module("gnnpipe.runtime.resources")
        new = sorted(m for m in set(sys.modules) - before
                     if (getattr(sys.modules[m], "__file__", None) or "").startswith(site))
        os.write(write, json.dumps(new).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as stream:
        found[stage] = json.loads(stream.read() or b"null")
    os.waitpid(pid, 0)
print(json.dumps(found))
"""


def test_a_served_stage_imports_only_gnnpipe_before_it_runs():
    # what a served stage imports before its own seconds start is overhead on every stage
    # (issue 46): the installed packages among it belong in the server's PRELOAD
    import json

    done = subprocess.run([sys.executable, "-c", PRELOAD_PROBE], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    found = json.loads(done.stdout)
    assert set(found) >= {"prepare", "train", "report"}
    assert {stage: new for stage, new in found.items() if new} == {}


def test_a_waiting_request_goes_before_the_next_preload(tmp_path):
    # the server imports PRELOAD one module at a time between requests: a stage that connects
    # early (the first one, while torch & co. still import) is served at once, not after all
    import socket

    from gnnpipe.runtime import warm_server

    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(tmp_path / "s.sock"))
        listener.listen(4)
        server = warm_server.Server(listener)
        calls = []

        def preload():
            calls.append(server.pending.pop(0))
            server.stopping = not server.pending

        def accept():
            calls.append("request")
            listener.accept()[0].close()

        server.preload, server.accept = preload, accept
        server.pending = ["first", "second", "third"]
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(tmp_path / "s.sock"))
            server.serve()
    assert calls == ["request", "first", "second", "third"]
