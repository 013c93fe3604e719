"""Multi-node misconfiguration ends in one line within a bounded time, with nothing left running;
a launch whose memory floor does not fit the machine is refused (gnnpipe/training/capacity.py)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from unittest import mock

import pytest
import yaml

from gnnpipe.cli import main
from gnnpipe.training import capacity, distributed
from gnnpipe.training.capacity import MiB
from gnnpipe.config import params_from_dict

RDZV_TIMEOUT_S = 1  # the least the config takes: the bound is the same code at any value
# the stage, the agent and (never here) workers each import torch: 16-17 s apiece at load 8
STARTUP_S = 90


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stage_folder(tmp_path: Path, dist: dict, graph_bytes: int = 0) -> Path:
    """A folder where ``gnnpipe train`` gets as far as launching: params, a split meta.json and,
    with ``graph_bytes``, a graph.pt of that size (only its size is read before the launch)."""
    (tmp_path / "data/split").mkdir(parents=True)
    (tmp_path / "data/split/meta.json").write_text(json.dumps({  # a one-type node split's meta
        "task": "node", "target": "node", "node_types": [["node", 10]],
        "edge_types": ["node__to__node"],
        "message_graph": {phase: "message_train.pt" for phase in ("train", "val", "test")}}))
    if graph_bytes:
        (tmp_path / "data/prepared").mkdir(parents=True)
        (tmp_path / "data/prepared/graph.pt").write_bytes(b"\0" * graph_bytes)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"train": {"dist": dist}}))
    return tmp_path


# what a process of its own hides by default (the filters Python starts with), as warnings
QUIET_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def _train_here(folder: Path, capfd, caplog, **env) -> tuple[subprocess.CompletedProcess, float]:
    """``gnnpipe train`` in ``folder`` with the stage in this process (its torchrun agent is
    still a process): no interpreter start. stderr holds what a stage process would print
    there: its own and the agent's output, then the warnings and log records that pytest would
    otherwise keep."""
    capfd.readouterr()  # only this run's output
    caplog.clear()
    started = time.monotonic()
    with contextlib.chdir(folder), mock.patch.dict(os.environ, env), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["train"])
    seconds = time.monotonic() - started
    out, err = capfd.readouterr()
    err += "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
                   for w in caught if not issubclass(w.category, QUIET_WARNINGS))
    err += "".join(f"{r.getMessage()}\n" for r in caplog.records if r.levelno >= logging.WARNING)
    return subprocess.CompletedProcess(["train"], code, out, err), seconds


def _running(marker: str) -> list[str]:
    """Processes whose command line holds ``marker`` (a port unique to the test)."""
    ps = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True)
    return [line for line in ps.stdout.splitlines() if marker in line and "ps -eww" not in line]


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


# ------------------------------------------------------------------------------ rendezvous
# machine 0 hosts the store and waits for a machine 1 that never comes (the launch of
# test_check_resources_false_launches_anyway)
HOST_WAITS = ("the rendezvous at train.dist.rdzv_endpoint={endpoint} did not complete within "
              "train.dist.rdzv_timeout_s={timeout}: not all train.dist.nnodes=2 machines joined")


def test_a_rendezvous_that_cannot_complete_fails_within_the_bound(tmp_path, capfd, caplog):
    """Machine 1 connects to machine 0's store; nothing listens on that loopback port (machine
    0's side: test_check_resources_false_launches_anyway)."""
    endpoint = f"127.0.0.1:{_free_port()}"
    folder = _stage_folder(tmp_path, {"nnodes": 2, "node_rank": 1, "rdzv_endpoint": endpoint,
                                      "rdzv_timeout_s": RDZV_TIMEOUT_S})
    done, seconds = _train_here(folder, capfd, caplog)
    assert done.returncode == 1
    line = _one_line(done.stderr)  # no traceback, no c10d log lines
    assert line.startswith(f"gnnpipe train: error: distributed training failed: cannot reach "
                           f"train.dist.rdzv_endpoint={endpoint} within train.dist.rdzv_timeout_s="
                           f"{RDZV_TIMEOUT_S} (The client socket has timed out"), line
    assert seconds < RDZV_TIMEOUT_S + STARTUP_S
    assert _running(endpoint) == []


def test_the_agent_dies_with_the_stage_process(tmp_path):
    """SIGKILL the stage while its agent waits at the rendezvous: the agent follows it."""
    endpoint = f"127.0.0.1:{_free_port()}"
    folder = _stage_folder(tmp_path, {"nnodes": 2, "node_rank": 0, "rdzv_endpoint": endpoint,
                                      "rdzv_timeout_s": 600})
    stage = subprocess.Popen([sys.executable, "-m", "gnnpipe", "train"], cwd=folder,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + STARTUP_S
        while not _running(f"--rdzv-endpoint={endpoint}") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _running(f"--rdzv-endpoint={endpoint}"), "the agent never started"
    finally:
        stage.kill()
        stage.wait()
    deadline = time.monotonic() + 30
    while _running(endpoint) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _running(endpoint) == []


AGENT_WITH_CHILD = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)  # {marker}"])
time.sleep(300)  # {marker}
"""


def test_the_hard_deadline_stops_an_agent_that_never_starts_workers():
    """Whatever torch does, no worker within rdzv_timeout_s + grace ends the launch: the
    agent's process group is killed and the error is one line."""
    marker = f"gnnpipe-test-hang-{os.getpid()}"
    params = params_from_dict({"train": {"dist": {"nproc": 2, "rdzv_timeout_s": 1}}})
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"^distributed training: no worker started within "
                                         r"train.dist.rdzv_timeout_s=1 \+ 2 s; stopped torchrun"):
        distributed.run_under_torchrun(params, ["train"], "training", grace_s=2, argv=[
            sys.executable, "-c", AGENT_WITH_CHILD.format(marker=marker)])
    assert time.monotonic() - started < 20
    time.sleep(0.5)
    assert _running(marker) == []


def test_torchrun_argv_bounds_the_rendezvous_and_names_the_store_host():
    multi = distributed.torchrun_argv(2, 3, 1, "node0:29400", ["predict"], rdzv_timeout_s=7.5)
    assert multi[1:3] == ["-m", "gnnpipe.training.torchrun"] and "--max-restarts=0" in multi
    assert "--rdzv-conf=join_timeout=8,read_timeout=8,is_host=false" in multi
    assert "--rdzv-id=gnnpipe-predict" in multi
    host = distributed.torchrun_argv(2, 3, 0, "node0:29400", ["train"], rdzv_timeout_s=30)
    assert "--rdzv-conf=join_timeout=30,read_timeout=30,is_host=true" in host


def test_config_rejects_a_node_rank_out_of_range():
    with pytest.raises(ValueError, match=r"train.dist.node_rank=5 is out of range for "
                                         r"train.dist.nnodes=2; expected 0 .. 1"):
        params_from_dict({"train": {"dist": {"nnodes": 2, "node_rank": 5,
                                             "rdzv_endpoint": "h:1"}}})
    with pytest.raises(ValueError, match="train.dist.rdzv_timeout_s=0.5 is out of range"):
        params_from_dict({"train": {"dist": {"rdzv_timeout_s": 0.5}}})


# -------------------------------------------------------------------------------- capacity
def _fake_machine(tmp_path: Path, available_kb: int, cgroup: dict[str, str] | None = None,
                  ) -> tuple[Path, Path]:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal:       99999999 kB\nMemFree:  1 kB\n"
                       f"MemAvailable:   {available_kb} kB\nBuffers:  0 kB\n")
    root = tmp_path / "cgroup"
    for name, text in (cgroup or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return meminfo, root


def test_estimate_counts_ranks_workers_and_the_graph_once():
    est = capacity.estimate(graph_bytes=1000 * MiB, nproc=4, nnodes=1, num_workers=2,
                            sharded=False)
    assert est.workers == 8 and est.graph_bytes == 1000 * MiB
    assert est.total_bytes == (1000 * MiB + capacity.LIBRARY_BYTES + 4 * capacity.RANK_BYTES
                               + 8 * capacity.WORKER_BYTES)
    sharded = capacity.estimate(1000 * MiB, nproc=4, nnodes=2, num_workers=0, sharded=True)
    assert sharded.graph_bytes == 500 * MiB  # this machine's share of the parts


def test_available_memory_is_the_lesser_of_meminfo_and_the_cgroup(tmp_path):
    meminfo, root = _fake_machine(tmp_path, 8 * 2**20)  # 8 GiB
    assert capacity.machine(meminfo, root).available_bytes == 8 * 2**30
    meminfo, root = _fake_machine(tmp_path, 8 * 2**20, {"memory.max": f"{3 * 2**30}\n",
                                                        "memory.current": f"{2**30}\n",
                                                        "cpu.max": "150000 100000\n"})
    box = capacity.machine(meminfo, root)
    assert box.available_bytes == 2 * 2**30 and box.source.endswith("memory.max")
    assert box.cores == min(2, len(os.sched_getaffinity(0)))  # 1.5 cores of quota -> 2
    (root / "memory.max").write_text("max\n")  # unlimited: MemAvailable again
    assert capacity.machine(meminfo, root).source == "MemAvailable"


def test_cgroup_v1_limit_counts(tmp_path):
    meminfo, root = _fake_machine(tmp_path, 8 * 2**20, {
        "memory/memory.limit_in_bytes": str(2**30), "memory/memory.usage_in_bytes": "0"})
    assert capacity.machine(meminfo, root).available_bytes == 2**30


def test_check_refuses_what_cannot_fit_in_one_line_naming_the_keys():
    est = capacity.estimate(100 * MiB, nproc=64, nnodes=1, num_workers=0, sharded=False)
    box = capacity.Machine(available_bytes=8 * 2**30, source="MemAvailable", cores=64)
    with pytest.raises(ValueError) as err:
        capacity.check(est, box, num_workers=0)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("64 ranks (train.dist.nproc=64) need at least 16.7 GiB")
    assert "more than the 8.0 GiB available (MemAvailable)" in message
    assert "train.dist.check_resources: false" in message
    fits = capacity.Machine(available_bytes=17 * 2**30, source="MemAvailable", cores=64)
    assert capacity.check(est, fits, num_workers=0) == []


def test_more_processes_than_cores_is_one_warning():
    est = capacity.estimate(0, nproc=2, nnodes=1, num_workers=3, sharded=False)
    box = capacity.Machine(available_bytes=2**40, source="MemAvailable", cores=4)
    assert capacity.check(est, box, num_workers=3) == [
        "2 ranks (train.dist.nproc=2) + 6 DataLoader workers (train.num_workers=3) = 8 "
        "processes on 4 cores; they will share cores (slower, not wrong)"]


def test_the_stage_refuses_64_ranks_when_memory_is_short(tmp_path, capfd, caplog):
    meminfo, _ = _fake_machine(tmp_path, 2 * 2**20)  # 2 GiB available
    folder = _stage_folder(tmp_path / "stage", {"nproc": 64}, graph_bytes=4096)
    done, _ = _train_here(folder, capfd, caplog, **{capacity.MEMINFO_ENV: str(meminfo)})
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert line.startswith("gnnpipe train: error: 64 ranks (train.dist.nproc=64) need at least "
                           "16.6 GiB"), line
    assert "more than the 2.0 GiB available (MemAvailable)" in line


def test_check_resources_false_launches_anyway(tmp_path, capfd, caplog):
    """The override skips the refusal: the launch goes on (to a rendezvous nobody else joins,
    so no rank ever starts), and that rendezvous fails within its bound in one line."""
    meminfo, _ = _fake_machine(tmp_path, 2 * 2**20)
    endpoint = f"127.0.0.1:{_free_port()}"
    folder = _stage_folder(tmp_path / "stage", {
        "nproc": 64, "nnodes": 2, "rdzv_endpoint": endpoint, "rdzv_timeout_s": RDZV_TIMEOUT_S,
        "check_resources": False}, graph_bytes=4096)
    done, seconds = _train_here(folder, capfd, caplog, **{capacity.MEMINFO_ENV: str(meminfo)})
    assert done.returncode == 1
    line = _one_line(done.stderr)  # no traceback, no c10d log lines
    assert line.startswith("gnnpipe train: error: distributed training failed: " +
                           HOST_WAITS.format(endpoint=endpoint, timeout=RDZV_TIMEOUT_S)), line
    assert seconds < RDZV_TIMEOUT_S + STARTUP_S
    assert _running(endpoint) == []


# ---------------------------------------------------------------------- errors on a rank
def _raise_inside_torch_distributed(message: str) -> None:
    """Raises ``RuntimeError(message)`` from a frame whose file lies under torch/distributed,
    as gloo's collectives do."""
    code = compile(f"raise RuntimeError({message!r})",
                   os.path.join("site-packages", "torch", "distributed", "c10d.py"), "exec")
    exec(code)


def test_a_collective_error_on_a_rank_becomes_one_line():
    ctx = distributed.DistContext(rank=1, world_size=2, local_rank=1)
    with pytest.raises(ValueError) as err:
        with distributed.one_line_errors(ctx, timeout_s=7):
            _raise_inside_torch_distributed(
                "[/__w/pytorch/third_party/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
                "waiting 7000ms for recv operation to complete\nException raised from ...")
    assert str(err.value) == ("rank 1: Timed out waiting 7000ms for recv operation to complete "
                              "(a peer failed or did not answer within train.dist.timeout_s=7)")


def test_other_errors_on_a_rank_keep_their_traceback():
    ctx = distributed.DistContext(rank=1, world_size=2, local_rank=1)
    with pytest.raises(RuntimeError, match="a bug of ours"):
        with distributed.one_line_errors(ctx, timeout_s=7):
            raise RuntimeError("a bug of ours")
    with pytest.raises(RuntimeError, match="Timed out"):  # one process: nothing to blame
        with distributed.one_line_errors(distributed.SINGLE, timeout_s=7):
            _raise_inside_torch_distributed("Timed out")


def test_a_failed_rank_exits_even_when_teardown_would_block(tmp_path):
    """A torchrun rank whose stage fails must be gone at once (the agent stops the job only when
    it exits); a non-daemon thread that never ends stands in for a teardown that blocks (e.g.
    on a process group whose peers sit in a collective): without the exit it never returns."""
    script = ("import sys, threading\n"
              "threading.Thread(target=threading.Event().wait).start()\n"
              "from gnnpipe.cli import main\n"
              "sys.exit(main(['analyze', '--params', 'missing.yaml']))\n")
    env = dict(os.environ, LOCAL_RANK="1", GNNPIPE_PROGRESS="0")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=STARTUP_S)
    assert done.returncode == 1
    assert done.stderr.strip() == "gnnpipe analyze: error: params: file missing.yaml not found"
