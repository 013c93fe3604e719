"""Crashes lose nothing: a killed stage leaves the previous output or none, never a torn one."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gnnpipe.io import atomic_dir, atomic_path, read_graph
from gnnpipe.io.atomic import FAULT_ENV
from gnnpipe.io.temps import HOST

from conftest import run_stages


PARAMS = {"dataset": {"synthetic": {"num_nodes": 3000, "num_features": 16}}}


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


def _stage(args: list[str], cwd: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnpipe", *args], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "GNNPIPE_PROGRESS": "0", **env},
                          timeout=300)


@pytest.fixture
def workdir(tmp_path) -> Path:
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    return tmp_path


@pytest.mark.parametrize("victim", ["nodes_node.parquet", "edges_node__to__node.parquet",
                                    "graph.pt"])
def test_kill_before_rename_keeps_the_previous_output(workdir, victim):
    run_stages(workdir, ("prepare",))  # in this process: only the killed run needs its own
    before = _digest(workdir / "data/prepared")
    params = dict(PARAMS, seed=1)  # a different graph, so a torn write would show
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    killed = _stage(["prepare"], workdir, **{FAULT_ENV: victim})
    assert killed.returncode == -signal.SIGKILL
    assert _digest(workdir / "data/prepared") == before  # old output intact, file for file
    read_graph(workdir / "data/prepared")
    run_stages(workdir, ("prepare",))  # the next run recovers
    assert _digest(workdir / "data/prepared") != before
    assert not [p for p in (workdir / "data").iterdir() if p.name.startswith(".")]


def test_random_kills_never_leave_a_torn_graph(workdir):
    """SIGKILL at arbitrary moments: data/prepared is always absent or complete and readable."""
    params = {"dataset": {"synthetic": {"num_nodes": 60000, "num_features": 32}}}
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "GNNPIPE_PROGRESS": "0"}
    for delay in (0.8, 1.6, 2.4, 3.2):
        proc = subprocess.Popen([sys.executable, "-m", "gnnpipe", "prepare"], cwd=workdir,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        prepared = workdir / "data/prepared"
        if prepared.exists():
            assert sorted(p.name for p in prepared.iterdir()) == [
                "classes.parquet", "edges_node__to__node.parquet", "graph.json", "graph.pt",
                "nodes_node.parquet"]
            assert read_graph(prepared).num_nodes == 60000


def test_atomic_path_exception_leaves_no_file(tmp_path):
    target = tmp_path / "out.json"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash mid-write")
    assert list(tmp_path.iterdir()) == []


def test_atomic_dir_clears_what_a_killed_writer_left(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    for name in (f".out.p{dead}-{HOST}.abc12345.tmp",  # as a SIGKILLed writer leaves it
                 ".out.abc12345.tmp"):  # the same, by a gnnpipe before pid-tagged temps
        (tmp_path / name).mkdir()
        (tmp_path / name / "part.pt").write_bytes(b"torn")
    with atomic_dir(tmp_path / "out") as out:
        (out / "a.txt").write_text("complete")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert (tmp_path / "out" / "a.txt").read_text() == "complete"


def test_an_empty_history_is_written_as_its_header(tmp_path):
    """A train run resumed from its last epoch's checkpoint runs no epoch: its perf history is
    the header alone (an error before: 'no rows to write', and the run could never finish)."""
    from gnnpipe.io import write_csv
    from gnnpipe.training.loop import PERF_COLUMNS

    write_csv(tmp_path / "perf.csv", [], header=PERF_COLUMNS)
    assert (tmp_path / "perf.csv").read_text() == ",".join(PERF_COLUMNS) + "\n"
    with pytest.raises(ValueError, match="no rows to write"):
        write_csv(tmp_path / "other.csv", [])
