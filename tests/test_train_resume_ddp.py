"""A killed train stage resumes to identical results; DDP matches one process and fails fast."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gnnpipe.io.atomic import FAULT_ENV
from gnnpipe.train import FAULT_RANK_ENV

PARAMS = {
    "dataset": {"synthetic": {"num_nodes": 1200, "num_features": 16, "num_classes": 3}},
    "train": {"epochs": 30, "patience": 30, "hidden": 16, "checkpoint_every": 5},
}


def _gnnpipe(args: list[str], cwd: Path, timeout: float = 300, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnpipe", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "GNNPIPE_PROGRESS": "0", **env})


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("upstream")
    (folder / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    for stage in ("prepare", "split", "propagate"):
        assert _gnnpipe([stage], folder).returncode == 0, stage
    return folder


def _train(upstream: Path, out: str, train: dict, **env) -> subprocess.CompletedProcess:
    params = {**PARAMS, "train": {**PARAMS["train"], **train}}
    (upstream / f"{out}.yaml").write_text(yaml.safe_dump(params))
    return _gnnpipe(["train", "--params", f"{out}.yaml", "--out", f"data/{out}",
                     "--metrics", f"{out}/train.json", "--history", f"{out}/history.csv",
                     "--perf", f"{out}/perf.json", "--checkpoint", f"{out}/checkpoint.pt"],
                    upstream, **env)


def test_killed_run_resumes_to_identical_results(upstream):
    assert _train(upstream, "whole", {}).returncode == 0
    killed = _train(upstream, "resumed", {}, **{FAULT_ENV: "checkpoint.pt@3"})
    assert killed.returncode == -signal.SIGKILL  # died writing the epoch-15 checkpoint
    assert (upstream / "resumed/checkpoint.pt").exists()  # the epoch-10 one survived
    resumed = _train(upstream, "resumed", {})
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from resumed/checkpoint.pt (epoch 10)" in resumed.stdout
    for name in ("train.json", "history.csv"):
        assert (upstream / "resumed" / name).read_text() == (upstream / "whole" / name).read_text()
    assert (upstream / "data/resumed/predictions.pt").read_bytes() == \
        (upstream / "data/whole/predictions.pt").read_bytes()
    assert not (upstream / "resumed/checkpoint.pt").exists()  # cleared once outputs exist


def test_checkpoint_of_other_params_is_not_resumed(upstream):
    killed = _train(upstream, "changed", {}, **{FAULT_ENV: "checkpoint.pt@2"})
    assert killed.returncode == -signal.SIGKILL
    rerun = _train(upstream, "changed", {"lr": 0.02})
    assert rerun.returncode == 0 and "resuming" not in rerun.stdout


def test_two_gloo_processes_match_one_process(upstream):
    common = {"dropout": 0.0, "epochs": 8, "checkpoint_every": 0}
    assert _train(upstream, "one", common).returncode == 0
    two = _train(upstream, "two", {**common, "nproc": 2})
    assert two.returncode == 0, two.stderr[-2000:]
    one_rows = (upstream / "one/history.csv").read_text().splitlines()[1:]
    two_rows = (upstream / "two/history.csv").read_text().splitlines()[1:]
    assert len(one_rows) == len(two_rows) == 8
    for a, b in zip(one_rows, two_rows):
        losses = float(a.split(",")[1]), float(b.split(",")[1])
        assert abs(losses[0] - losses[1]) < 1e-4, (a, b)
    assert json.loads((upstream / "two/perf.json").read_text())["world_size"] == 2


def test_a_failing_rank_fails_the_job_promptly(upstream):
    started = time.monotonic()
    failed = _train(upstream, "failing", {"nproc": 2, "checkpoint_every": 0}, timeout=180,
                    **{FAULT_RANK_ENV: "1"})
    assert failed.returncode == 1
    assert "injected failure on rank 1" in failed.stderr
    assert "distributed training failed (torchrun exit code" in failed.stderr
    assert time.monotonic() - started < 120
    assert not (upstream / "data/failing").exists()


def test_uneven_seed_counts_do_not_hang(tmp_path):
    """721 train seeds over 2 ranks: shares are padded to 361 each, so no rank waits forever."""
    params = {**PARAMS, "split": {"node": {"train": 721, "val": 200, "test": 200}},
              "train": {**PARAMS["train"], "epochs": 3, "nproc": 2, "checkpoint_every": 0,
                        "sampler": "neighbor", "batch_size": 100}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    for stage in ("prepare", "split", "propagate"):
        assert _gnnpipe([stage], tmp_path).returncode == 0, stage
    done = _gnnpipe(["train"], tmp_path, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len((tmp_path / "metrics/train_history.csv").read_text().splitlines()) == 4
