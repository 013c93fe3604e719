"""params cluster / gnnpipe.runtime.engine: the local engine, an embedded Dask LocalCluster's lifecycle
(workers with their memory limit, nothing left behind after the stage, an error or a kill), a
scheduler address that does not answer, and the memory_limit check."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gnnpipe.runtime import engine
from gnnpipe.config import ParamsError, params_from_dict
from gnnpipe.config.rules import memory_bytes
from gnnpipe.config.schema import EngineParams


def _children(pid: int) -> set[int]:
    """Live descendants of ``pid`` (Linux /proc)."""
    found, frontier = set(), [pid]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for kid in map(int, kids):
                if kid not in found:
                    found.add(kid)
                    frontier.append(kid)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_local_engine_runs_in_process():
    with engine.session(EngineParams()) as client:
        assert client is None


def _shifted(value: int, by: int) -> int:
    return value + by


def _digits(a: int, b: int) -> int:  # not commutative: the fold's order shows
    return a * 10 + b


def test_blocks_in_this_process_fold_each_result_as_it_comes():
    events = []

    def task(value, by):
        events.append(("run", value))
        return value + by

    def combine(a, b):
        events.append(("combine", b))
        return _digits(a, b)

    calls = [(d,) for d in (2, 7, 1, 8)]
    assert engine.run_blocks(None, _shifted, calls, by=1) == [3, 8, 2, 9]
    assert engine.fold_blocks(None, task, calls, combine, by=0) == 2718
    # one result held at a time: each is folded before the next task runs
    assert events == [("run", 2), ("run", 7), ("combine", 7), ("run", 1), ("combine", 1),
                      ("run", 8), ("combine", 8)]
    with pytest.raises(ValueError, match="no calls"):
        engine.fold_blocks(None, task, [], combine, by=0)


class _Future:
    def __init__(self, events: list, index: int, value):
        self.events, self.index, self.value = events, index, value

    def result(self):
        self.events.append(("result", self.index))
        return self.value

    def release(self):
        self.events.append(("release", self.index))


class _Client:
    """Dask's ``map`` surface: tasks run at submission, results wait in futures."""

    def __init__(self):
        self.events = []

    def map(self, fn, *iterables, pure=True):
        assert pure is False  # block tasks write files: never deduplicated by Dask
        return [_Future(self.events, i, fn(*args)) for i, args in enumerate(zip(*iterables))]


def test_a_fold_on_dask_fetches_and_releases_every_result_in_call_order():
    """So a worker never holds all of a map's results (lp's sweep histograms)."""
    client = _Client()
    assert engine.fold_blocks(client, _shifted, [(d,) for d in (1, 4, 1, 4)], _digits,
                              by=0) == 1414
    assert client.events == [(kind, i) for i in range(4) for kind in ("result", "release")]


def test_embedded_cluster_runs_work_with_its_limits_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the per-run scratch folder goes
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    cfg = EngineParams(engine="dask", workers=2, memory_limit="256MiB", start_timeout_s=60)
    before = _children(os.getpid())
    with engine.session(cfg) as client:
        assert client.submit(sum, [1, 2, 3]).result(timeout=60) == 6
        # the one block executor on Dask: results (and a fold) in call order, common kwargs
        calls = [(d,) for d in (3, 1, 4, 1, 5)]
        assert engine.run_blocks(client, _shifted, calls, by=10) == [13, 11, 14, 11, 15]
        assert engine.fold_blocks(client, _shifted, calls, _digits, by=0) == 31415
        workers = client.scheduler_info()["workers"].values()
        assert len(workers) == 2
        assert {w["memory_limit"] for w in workers} == {256 * 2**20}
        assert {w["nthreads"] for w in workers} == {1}
        assert len(list(tmp_path.iterdir())) == 1  # the run's scratch folder
        workers = set(client.run(os.getpid).values())
        assert len(workers) == 2 and workers <= _children(os.getpid()) - before
    time.sleep(0.5)
    assert not [pid for pid in workers if _alive(pid)], "worker processes outlived the session"
    assert list(tmp_path.iterdir()) == []  # scratch folder removed


def test_an_error_inside_the_session_still_stops_the_cluster():
    cfg = EngineParams(engine="dask", workers=1, memory_limit="256MiB")
    with pytest.raises(RuntimeError, match="stage failed"):
        with engine.session(cfg) as client:
            workers = set(client.run(os.getpid).values())
            raise RuntimeError("stage failed")
    time.sleep(0.5)
    assert workers and not [pid for pid in workers if _alive(pid)]


def _die():
    os._exit(3)


def test_a_task_whose_workers_die_is_one_line_naming_the_limit():
    import dask

    cfg = EngineParams(engine="dask", workers=1, memory_limit="256MiB")
    # no retry: the first worker death fails the task (Dask retries 3 times by default)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with pytest.raises(engine.EngineError) as err:
            with engine.session(cfg) as client:
                client.submit(_die, pure=False).result()
    message = str(err.value)
    assert "\n" not in message and message.startswith("cluster: Dask task _die died on 1 worker")
    assert "cluster.memory_limit=256MiB" in message and "partition.num_parts" in message


def test_the_embedded_cluster_serves_nothing_on_the_dashboard_port():
    """dashboard_address=None still started the scheduler's HTTP routes on 8787 ("Port 8787 is
    already in use" warnings when two stages or a user's own cluster hold it)."""
    import warnings
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 8787))
        holder.listen()
    except OSError:
        pass  # held by someone else already: the warning would come all the same
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with engine.session(EngineParams(engine="dask", workers=1,
                                             memory_limit="256MiB")) as client:
                assert client.submit(sum, [1, 2]).result(timeout=60) == 3
        assert not [w for w in caught if "8787" in str(w.message)]
    finally:
        holder.close()


def test_a_real_cluster_works_in_the_repository_folder_whatever_its_workers_cwd(tmp_path,
                                                                              monkeypatch):
    """Workers started in another folder (``dask worker`` from /) read the stages' relative
    paths against the repository once the session opens."""
    from distributed import LocalCluster
    monkeypatch.chdir(tmp_path)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                      scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                      memory_limit="256MiB") as cluster:
        with engine.session(EngineParams(engine="dask", address=cluster.scheduler_address,
                                         memory_limit="256MiB")) as client:
            client.run(os.chdir, "/")
        with engine.session(EngineParams(engine="dask", address=cluster.scheduler_address,
                                         memory_limit="256MiB")) as client:
            assert set(client.run(os.getcwd).values()) == {str(tmp_path)}
    assert engine.enter_folder(str(tmp_path / "absent")) is False


def test_a_scheduler_without_workers_is_one_line_within_the_wait():
    from distributed import LocalCluster
    with LocalCluster(n_workers=0, processes=True, dashboard_address=None,
                      scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}) as cluster:
        cfg = EngineParams(engine="dask", address=cluster.scheduler_address, start_timeout_s=2)
        started = time.monotonic()
        with pytest.raises(engine.EngineError, match="has no workers after 2 s"):
            with engine.session(cfg):
                pass
        assert time.monotonic() - started < 20


def test_a_killed_stage_takes_its_workers_with_it(tmp_path):
    script = textwrap.dedent("""
        import os, sys, time
        from gnnpipe.runtime import engine
        from gnnpipe.config.schema import EngineParams
        with engine.session(EngineParams(engine="dask", workers=1, memory_limit="256MiB")) as c:
            pids = c.run(os.getpid)
            print(*pids.values(), flush=True)
            time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        worker_pids = [int(p) for p in proc.stdout.readline().split()]
        assert worker_pids and all(_alive(p) for p in worker_pids)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in worker_pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in worker_pids if _alive(p)], "a worker outlived its killed stage"


def test_an_address_that_does_not_answer_is_one_line_within_the_wait():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = EngineParams(engine="dask", address=f"tcp://127.0.0.1:{port}", start_timeout_s=2)
    started = time.monotonic()
    with pytest.raises(engine.EngineError) as err:
        with engine.session(cfg):
            pass
    assert time.monotonic() - started < 20
    message = str(err.value)
    assert message.startswith(f"cluster.address tcp://127.0.0.1:{port}: no Dask scheduler")
    assert "\n" not in message


@pytest.mark.parametrize("text, size", [("1GiB", 2**30), ("512MiB", 512 * 2**20),
                                        ("2GB", 2 * 10**9), ("1.5 GiB", int(1.5 * 2**30)),
                                        ("100000000", 10**8), ("1 gib", 2**30)])
def test_memory_sizes_read_as_dask_reads_them(text, size):
    from dask.utils import parse_bytes
    assert memory_bytes(text) == size == parse_bytes(text)


@pytest.mark.parametrize("limit", ["lots", "1GiBs", "-1GiB", "1MiB", ""])
def test_a_bad_memory_limit_names_the_key(limit):
    with pytest.raises(ParamsError, match=r"cluster.memory_limit=.* at least 64MiB"):
        params_from_dict({"cluster": {"memory_limit": limit}})


def test_the_engine_is_one_of_the_two():
    with pytest.raises(ParamsError, match="cluster.engine"):
        params_from_dict({"cluster": {"engine": "spark"}})
