"""A killed train stage resumes to identical results; DDP matches one process and fails fast."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
import yaml

from gnnpipe.cli import main
from gnnpipe.io.atomic import FAULT_ENV
from gnnpipe.training.distributed import FAULT_RANK_ENV

from conftest import run_stages

PARAMS = {
    "dataset": {"synthetic": {"num_nodes": 1200, "num_features": 16, "num_classes": 3}},
    "train": {"epochs": 30, "patience": 30, "hidden": 16, "checkpoint": {"every": 5}},
}


def _gnnpipe(args: list[str], cwd: Path, timeout: float = 300, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnpipe", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "GNNPIPE_PROGRESS": "0", **env})


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("upstream")
    (folder / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    run_stages(folder, ("prepare", "split", "propagate"))
    return folder


def _here(args: list[str], cwd: Path, capfd, **env) -> subprocess.CompletedProcess:
    """``gnnpipe <args>`` in this process (no interpreter start for the stage; its ranks are
    still torchrun's processes), with stdout / stderr of it and of every process it started."""
    capfd.readouterr()  # only this run's output
    with contextlib.chdir(cwd), mock.patch.dict(os.environ, env):
        code = main(args)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)


def _train_args(upstream: Path, out: str, train: dict) -> list[str]:
    params = {**PARAMS, "train": {**PARAMS["train"], **train}}
    (upstream / f"{out}.yaml").write_text(yaml.safe_dump(params))
    return ["train", "--params", f"{out}.yaml", "--out", f"data/{out}",
            "--metrics", f"{out}/train.json", "--history", f"{out}/history.csv",
            "--perf", f"{out}/perf.json", "--checkpoint", f"{out}/checkpoint.pt"]


def _train(upstream: Path, out: str, train: dict, **env) -> subprocess.CompletedProcess:
    """The train stage in a process of its own (one that must die: a fault kills it)."""
    return _gnnpipe(_train_args(upstream, out, train), upstream, **env)


def _train_here(upstream: Path, out: str, train: dict, capfd, **env,
                ) -> subprocess.CompletedProcess:
    return _here(_train_args(upstream, out, train), upstream, capfd, **env)


@pytest.fixture(scope="module")
def killed(upstream) -> Path:
    """A run (out ``resumed``) SIGKILLed writing its epoch-15 checkpoint: a copy of the epoch-10
    checkpoint it left (resuming removes the original)."""
    killed = _train(upstream, "resumed", {}, **{FAULT_ENV: "checkpoint.pt@3"})
    assert killed.returncode == -signal.SIGKILL  # died writing the epoch-15 checkpoint
    assert (upstream / "resumed/checkpoint.pt").exists()  # the epoch-10 one survived
    return Path(shutil.copy(upstream / "resumed/checkpoint.pt", upstream / "epoch10.pt"))


@pytest.mark.usefixtures("killed")
def test_killed_run_resumes_to_identical_results(upstream, capfd):
    assert _train_here(upstream, "whole", {}, capfd).returncode == 0
    resumed = _train_here(upstream, "resumed", {}, capfd)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from resumed/checkpoint.pt (epoch 10)" in resumed.stdout
    for name in ("train.json", "history.csv"):
        assert (upstream / "resumed" / name).read_text() == (upstream / "whole" / name).read_text()
    assert (upstream / "data/resumed/predictions.pt").read_bytes() == \
        (upstream / "data/whole/predictions.pt").read_bytes()
    assert not (upstream / "resumed/checkpoint.pt").exists()  # cleared once outputs exist


def test_checkpoint_of_other_params_is_not_resumed(upstream, killed, capfd):
    """The killed run's checkpoint (the test above resumes it) at the checkpoint path of a run
    whose lr changed: that run starts over."""
    (upstream / "changed").mkdir()
    shutil.copy(killed, upstream / "changed/checkpoint.pt")
    rerun = _train_here(upstream, "changed", {"lr": 0.02}, capfd)
    assert rerun.returncode == 0 and "resuming" not in rerun.stdout


def test_a_failing_rank_fails_the_job_promptly(upstream, capfd):
    started = time.monotonic()
    failed = _train_here(upstream, "failing", {"dist": {"nproc": 2}, "checkpoint": {"every": 0}},
                         capfd, **{FAULT_RANK_ENV: "1"})
    assert failed.returncode == 1
    assert "injected failure on rank 1" in failed.stderr
    # the agent reports the failed rank in the stage's one line, without a traceback of its own
    last = failed.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"gnnpipe train: error: distributed training failed: rank [01] (exited "
                        r"with code 1|was killed by SIG[A-Z]+) \(its error is printed above\)",
                        last), failed.stderr[-2000:]
    assert "torch/distributed/elastic" not in failed.stderr
    assert time.monotonic() - started < 120
    assert not (upstream / "data/failing").exists()


# no dropout: two ranks that split the train seeds step exactly as one process with all of them
EXACT = {"dropout": 0.0, "epochs": 8, "checkpoint": {"every": 0}}


@pytest.fixture(scope="module")
def two_machines(upstream) -> list[Path]:
    """The two checkouts of one ``EXACT`` run on nnodes=2 on one box: node 0 hosts the
    rendezvous store, node 1 connects to it. Each "machine" has its own checkout, as real ones
    do (one checkout has one writer of data/nodes: the second would be refused by the stage's
    output lock)."""
    port = _free_port()
    machines = [upstream, upstream.parent / "machine1"]
    shutil.copytree(upstream, machines[1])
    argv = []
    for rank, checkout in enumerate(machines):
        params = {**PARAMS, "train": {**PARAMS["train"], **EXACT, "dist": {
            "nnodes": 2, "node_rank": rank, "rdzv_endpoint": f"127.0.0.1:{port}",
            "rdzv_timeout_s": 120}}}
        (checkout / f"node{rank}.yaml").write_text(yaml.safe_dump(params))
        argv.append(["train", "--params", f"node{rank}.yaml", "--out", "data/nodes", "--metrics",
                     "nodes/train.json", "--history", "nodes/history.csv", "--perf",
                     "nodes/perf.json", "--checkpoint", "nodes/checkpoint.pt"])
    # machine 1's stage in a process of its own, machine 0's in this one: two launchers at once
    node1 = subprocess.Popen([sys.executable, "-m", "gnnpipe", *argv[1]], cwd=machines[1],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "GNNPIPE_PROGRESS": "0"})
    try:
        with contextlib.chdir(machines[0]):
            node0 = main(argv[0])  # its output shows in the report of a failed setup
        _, node1_err = node1.communicate(timeout=400)
    finally:
        node1.kill()  # only if the setup failed first; its agent dies with it
        node1.wait()
    assert [node0, node1.returncode] == [0, 0], node1_err[-2000:]
    return machines


def test_two_machines_meet_at_a_loopback_endpoint(two_machines):
    """Both machines' stages succeed (``two_machines``) as one job of two ranks."""
    # c10d rendezvous gives global rank 0 to either machine (not by node_rank): rank 0 writes
    written = [m for m in two_machines if (m / "nodes/perf.json").exists()]
    assert len(written) == 1, written
    assert json.loads((written[0] / "nodes/perf.json").read_text())["world_size"] == 2
    assert len((written[0] / "nodes/history.csv").read_text().splitlines()) == 9


def test_two_gloo_processes_match_one_process(upstream, two_machines, capfd):
    """The two gloo ranks of the two-machine run (``two_machines``) against one process."""
    assert _train_here(upstream, "one", EXACT, capfd).returncode == 0
    (written,) = [m for m in two_machines if (m / "nodes/perf.json").exists()]
    one_rows = (upstream / "one/history.csv").read_text().splitlines()[1:]
    two_rows = (written / "nodes/history.csv").read_text().splitlines()[1:]
    assert len(one_rows) == len(two_rows) == 8
    for a, b in zip(one_rows, two_rows):
        losses = float(a.split(",")[1]), float(b.split(",")[1])
        assert abs(losses[0] - losses[1]) < 1e-4, (a, b)
    assert json.loads((written / "nodes/perf.json").read_text())["world_size"] == 2


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_uneven_seed_counts_do_not_hang(tmp_path, capfd):
    """721 train seeds over 2 ranks: shares are padded to 361 each, so no rank waits forever."""
    params = {**PARAMS, "split": {"node": {"train": 721, "val": 200, "test": 200}},
              "train": {**PARAMS["train"], "epochs": 3, "dist": {"nproc": 2},
                        "checkpoint": {"every": 0}, "sampler": "neighbor", "batch_size": 100}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    run_stages(tmp_path, ("prepare", "split", "propagate"))
    done = _here(["train"], tmp_path, capfd)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len((tmp_path / "metrics/train_history.csv").read_text().splitlines()) == 4


def test_two_ranks_with_partition_shards_load_only_their_own_parts(upstream, capfd):
    import torch

    run_stages(upstream, ("partition",))  # default: 8 parts, 1-hop halo
    cluster = {"sampler": "cluster", "epochs": 6, "checkpoint": {"every": 0}}
    two = _train_here(upstream, "sharded", {**cluster, "dist": {"shard": "partition", "nproc": 2}},
                      capfd)
    assert two.returncode == 0, two.stderr[-2000:]
    perf = json.loads((upstream / "sharded/perf.json").read_text())
    ranks = {r["rank"]: r for r in perf["ranks"]}
    assert perf["world_size"] == 2 and perf["shard"] == "partition"
    assert ranks[0]["parts"] == [0, 2, 4, 6] and ranks[1]["parts"] == [1, 3, 5, 7]
    # each rank holds its own parts' nodes plus their halo: fewer than the 1200 nodes
    assert all(0 < r["nodes_held"] < 1200 and r["peak_rss_mb"] > 0 for r in ranks.values())
    metrics = json.loads((upstream / "sharded/train.json").read_text())
    assert metrics["sampler"] == "cluster" and metrics["shard_eval_exact"] is False
    assert metrics["best_val_acc"] > 0.6  # 3 classes: chance is 1/3
    logits = torch.load(upstream / "data/sharded/predictions.pt", weights_only=True)
    assert logits["node_id"].numel() == 1200  # rank 0 gathered every rank's nodes
    assert not torch.isnan(logits["logits"]).any()
