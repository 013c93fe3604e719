"""Sharing through an S3 remote, for real (docs/sharing.md): moto's S3 server on 127.0.0.1,
started and stopped here with bounded waits, behind ``dvc push`` / ``dvc pull`` into a fresh
clone, ``dvc exp push`` / ``dvc exp pull`` through a bare Git remote, and ``dvc artifacts get`` /
``dvc get`` of the trained model.

The scratch pipeline is the repository's dvc.yaml cut to the stages train needs (prepare, split,
partition, propagate, train) on a 300-node graph: what is tested is the sharing, and every stage
costs an interpreter start with torch. Credentials are dummies, in the environment or in
``.dvc/config.local`` (``--local``), never in a tracked file (checked).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch
import yaml

from test_pipeline import GIT, make_scratch_repo

from gnnpipe.cli import main

pytest.importorskip("dvc_s3", reason="the s3 extra (dvc-s3) is not installed")
pytest.importorskip("moto.server", reason="moto[s3] with flask (the test extra) is not installed")
boto3 = pytest.importorskip("boto3")

BIN = Path(sys.executable).parent
BUCKET = "gnnpipe-share"
REMOTE = "s3store"
KEY, SECRET = "gnnpipe-dummy-key", "gnnpipe-dummy-secret"  # moto takes any pair
CREDENTIALS = {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET}
KEEP = ("prepare", "split", "partition", "propagate", "train")  # what train needs
OUTS = ("data/prepared", "data/split", "data/features", "data/partition", "data/propagate",
        "data/model", "metrics/perf")
ARTIFACT, TAG = "gnn-model", "gnn-model@v1.0.0"
SERVER_WAIT_S = 20


def _env(cwd: Path, credentials: bool = True) -> dict:
    """The stages' environment, with no AWS setting of this machine (profiles, endpoints) and,
    with ``credentials``, the dummy keys."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    nowhere = str(cwd.parent / "no-aws-files")
    env.update(PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(cwd),
               GNNPIPE_PROGRESS="0", DVC_NO_ANALYTICS="1", DVC_NO_UPDATE_CHECK="1",
               AWS_SHARED_CREDENTIALS_FILE=nowhere, AWS_CONFIG_FILE=nowhere,
               AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
    return {**env, **CREDENTIALS} if credentials else env


def _run(cmd: list[str], cwd: Path, credentials: bool = True) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=_env(cwd, credentials), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _ran(output: str) -> set[str]:
    return set(re.findall(r"Running stage '([\w-]+)'", output))


def _digests(repo: Path) -> dict[str, str]:
    """sha256 of every file of the DVC-tracked outs, by path relative to ``repo``."""
    return {p.relative_to(repo).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for root in OUTS for p in sorted((repo / root).rglob("*")) if p.is_file()}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_up(endpoint: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_WAIT_S
    while True:
        try:
            with urllib.request.urlopen(endpoint, timeout=1):
                return
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            tail = (log.read_text().strip().splitlines() or ["(no output)"])[-1]
            pytest.fail(f"moto S3 server on {endpoint} not up in {SERVER_WAIT_S} s: {tail}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """The endpoint URL of a moto S3 server holding one empty bucket; stopped at the end
    (terminate, then kill after 10 s)."""
    endpoint = f"http://127.0.0.1:{_free_port()}"
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                   "-p", endpoint.rsplit(":", 1)[1]],
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_until_up(endpoint, server, log)
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=KEY,
                     aws_secret_access_key=SECRET).create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def _objects(endpoint: str) -> int:
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=KEY, aws_secret_access_key=SECRET)
    return sum(page.get("KeyCount", 0)
               for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET))


@pytest.fixture(scope="module")
def origin(tmp_path_factory, s3) -> dict:
    """A scratch pipeline that ran up to train, committed, with the S3 remote as its default
    (url committed, endpoint in config.local) and a bare Git remote ``origin`` holding its
    branch. The tests run in file order and build on its state."""
    top = tmp_path_factory.mktemp("share")
    repo = make_scratch_repo(top / "origin", epochs=5, patience=5, num_nodes=300)
    dvc_yaml = yaml.safe_load((repo / "dvc.yaml").read_text())
    dvc_yaml["stages"] = {k: v for k, v in dvc_yaml["stages"].items() if k in KEEP}
    (repo / "dvc.yaml").write_text(yaml.safe_dump(dvc_yaml, sort_keys=False))
    _run(["dvc", "remote", "add", "--default", REMOTE, f"s3://{BUCKET}/cache"], repo)
    _run(["dvc", "remote", "modify", "--local", REMOTE, "endpointurl", s3], repo)
    # the stages in this process, then their lock: what is tested here is sharing what a run
    # wrote (tests/e2e/test_pipeline.py tests DVC's own runs), and 5 torch start-ups cost ~20 s
    with contextlib.chdir(repo):  # each stage as dvc.yaml calls it, its resources file too
        for stage in KEEP:
            assert main([stage, "--resources", f"metrics/perf/stages/{stage}.json"]) == 0, stage
    _run(["dvc", "commit", "--force"], repo)
    assert "Data and pipelines are up to date" in _run(["dvc", "status"], repo)
    _run(GIT + ["add", "-A"], repo)
    _run(GIT + ["commit", "-qm", "pipeline ran"], repo)
    bare = top / "origin.git"
    _run(["git", "init", "-q", "--bare", str(bare)], top)
    _run(["git", "remote", "add", "origin", str(bare)], repo)
    _run(["git", "push", "-q", "origin", "HEAD"], repo)
    return {"repo": repo, "bare": bare, "endpoint": s3, "base": _digests(repo)}


def _clone(origin: dict, where: Path, credentials_in_config: bool = False) -> Path:
    """A fresh clone of the bare remote, pointed at the S3 server as a user would (--local)."""
    subprocess.run(["git", "clone", "-q", str(origin["bare"]), str(where)], check=True,
                   timeout=60)
    _run(["dvc", "remote", "modify", "--local", REMOTE, "endpointurl", origin["endpoint"]], where)
    if credentials_in_config:
        _run(["dvc", "remote", "modify", "--local", REMOTE, "access_key_id", KEY], where)
        _run(["dvc", "remote", "modify", "--local", REMOTE, "secret_access_key", SECRET], where)
    return where


def test_push_to_s3_then_pull_into_a_fresh_clone_reruns_nothing(origin, tmp_path):
    repo = origin["repo"]
    assert _objects(origin["endpoint"]) == 0
    _run(["dvc", "push"], repo)
    assert _objects(origin["endpoint"]) > 0
    # the url is shared, the endpoint and the keys are not: neither is in a tracked file
    tracked = _run(["git", "ls-files"], repo).split()
    assert ".dvc/config" in tracked and ".dvc/config.local" not in tracked
    for secret in (origin["endpoint"], KEY, SECRET):
        grep = subprocess.run(["git", "grep", "-F", "-q", secret], cwd=repo, timeout=60)
        assert grep.returncode == 1, f"{secret} is in a tracked file"

    # the clone's keys in its config.local, none in its environment
    clone = _clone(origin, tmp_path / "clone", credentials_in_config=True)
    assert not (clone / "data/model").exists()
    _run(["dvc", "pull"], clone, credentials=False)
    assert _digests(clone) == origin["base"] and "data/model/model.pt" in origin["base"]
    assert "Data and pipelines are up to date" in _run(["dvc", "status"], clone, False)
    assert _ran(_run(["dvc", "repro"], clone, credentials=False)) == set()


def test_exp_push_then_exp_pull_and_apply_in_a_fresh_clone_reruns_nothing(origin, tmp_path):
    repo = origin["repo"]
    assert _ran(_run(["dvc", "exp", "run", "-n", "lr-02", "-S", "train.lr=0.02"], repo)) \
        == {"train"}
    trained = _digests(repo)
    metrics = (repo / "metrics/train.json").read_bytes()
    assert trained["data/model/model.pt"] != origin["base"]["data/model/model.pt"]
    _run(["dvc", "exp", "push", "origin", "lr-02"], repo)

    clone = _clone(origin, tmp_path / "clone")
    _run(["dvc", "exp", "pull", "origin", "lr-02"], clone)
    assert "lr-02" in _run(["dvc", "exp", "list"], clone)
    _run(["dvc", "exp", "apply", "lr-02"], clone)
    assert yaml.safe_load((clone / "params.yaml").read_text())["train"]["lr"] == 0.02
    assert (clone / "metrics/train.json").read_bytes() == metrics
    assert _digests(clone) == trained  # the experiment's data came with it, nothing re-ran
    assert "Data and pipelines are up to date" in _run(["dvc", "status"], clone)
    assert _ran(_run(["dvc", "repro"], clone)) == set()


def test_the_model_artifact_comes_from_the_s3_remote_and_loads_weights_only(origin, tmp_path):
    """From the bare remote, which holds no DVC cache: the bytes can only come from S3. The
    tag (GTO's name@version) marks the commit before the experiment, so a model from the
    workspace or the experiment would differ."""
    repo, bare = origin["repo"], str(origin["bare"])
    # annotated: GTO (which `dvc artifacts get` reads versions with) drops lightweight tags
    _run(GIT + ["tag", "-a", TAG, "-m", "gnn-model v1.0.0", "HEAD"], repo)
    _run(["git", "push", "-q", "origin", TAG], repo)
    endpoint = f"endpointurl={origin['endpoint']}"
    fetched = tmp_path / "fetched"
    fetched.mkdir()
    _run(["dvc", "artifacts", "get", bare, ARTIFACT, "-o", "model.pt", "--remote-config",
          endpoint], fetched)
    _run(["dvc", "get", bare, "data/model/model.pt", "-o", "by-path.pt", "--remote-config",
          endpoint], fetched)
    digest = origin["base"]["data/model/model.pt"]
    for name in ("model.pt", "by-path.pt"):
        assert hashlib.sha256((fetched / name).read_bytes()).hexdigest() == digest, name
    payload = torch.load(fetched / "model.pt", map_location="cpu", weights_only=True)
    assert payload["schema"] == "gnnpipe.model/2"  # self-contained: what a new graph needs
    assert payload["meta"]["model"] == "sage" and payload["meta"]["num_classes"] == 3
    assert len(payload["inference"]["classes"]) == 3 and payload["inference"]["features"]
    assert payload["state_dict"] and all(isinstance(t, torch.Tensor)
                                         for t in payload["state_dict"].values())
