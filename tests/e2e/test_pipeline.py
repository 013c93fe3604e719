"""The DVC pipeline in a scratch copy of the repository: caching re-runs exactly what changed."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SMALL = {"num_nodes": 1000, "num_features": 16, "num_classes": 3}
GIT = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost"]


def _run(cmd: list[str], cwd: Path) -> str:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(cwd),
               GNNPIPE_PROGRESS="0", DVC_NO_ANALYTICS="1")
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _ran(output: str) -> set[str]:
    return set(re.findall(r"Running stage '([\w-]+)'", output))


def make_scratch_repo(repo: Path, task: str = "node", epochs: int = 30, patience: int = 10,
                      num_nodes: int = SMALL["num_nodes"]) -> Path:
    """A committed copy of the pipeline in ``repo`` with a small graph and short training."""
    for name in ("dvc.yaml", "stages", "gnnpipe", ".dvc/config", ".dvcignore", "data/raw",
                 "data/pairs"):
        source = REPO / name
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["dataset"]["task"] = task
    params["dataset"]["synthetic"].update(SMALL, num_nodes=num_nodes)
    for section in ("train", "baseline"):
        params[section].update(epochs=epochs, patience=patience, hidden=16)
    params["partition"]["num_parts"] = 4
    # the MLP alone: baseline.models auto's gbdt is the baseline stage's own tests' business
    # (tests/training/test_baseline_auto.py), and DVC's caching does not depend on it
    params["baseline"]["models"] = ["mlp"]
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (repo / ".gitignore").write_text("__pycache__/\n")
    _run(["git", "init", "-q"], repo)
    _run(GIT + ["add", "-A"], repo)
    _run(GIT + ["commit", "-qm", "scratch"], repo)
    return repo


@pytest.fixture(scope="module")
def scratch_repo(tmp_path_factory) -> Path:
    """One scratch pipeline for this module's tests, which run in file order and build on each
    other's state (each full `dvc repro` costs a minute of interpreter start-ups on 2 cores)."""
    return make_scratch_repo(tmp_path_factory.mktemp("repo"))


def _edit_params(repo: Path, **sections) -> None:
    path = repo / "params.yaml"
    params = yaml.safe_load(path.read_text())
    for section, values in sections.items():
        params[section].update(values)
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def _files(repo: Path) -> dict[str, str]:
    """sha256 of every file of ``repo`` but Git's, DVC's and bytecode, by relative path."""
    return {p.relative_to(repo).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in repo.rglob("*") if p.is_file()
            and not {".git", ".dvc", "__pycache__"} & set(p.relative_to(repo).parts)}


def _declared_outs(stage: dict) -> list[str]:
    """The paths of a dvc.yaml stage's outs, metrics and plots."""
    entries = [e for key in ("outs", "metrics", "plots") for e in stage.get(key, [])]
    return [e if isinstance(e, str) else next(iter(e)) for e in entries]


def _run_every_stage_here(repo: Path) -> None:
    """Each stage of dvc.yaml in file (DAG) order, its ``cmd``'s script and arguments run in
    this process (no interpreter start with torch per stage; what DVC's first run records comes
    from ``dvc commit``). A stage must change no file outside its declared outs: that is what
    would make DVC's next ``dvc repro`` re-run an earlier stage."""
    stages = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        argv = shlex.split(stage["cmd"])
        assert argv[0] == "python" and argv[1] == f"stages/{name}.py", stage["cmd"]
        before = _files(repo)
        with contextlib.chdir(repo), mock.patch.object(sys, "argv", argv[1:]), \
                pytest.raises(SystemExit) as done:
            runpy.run_path(argv[1], run_name="__main__")
        assert done.value.code == 0, f"{stage['cmd']} failed"
        after = _files(repo)
        outs = _declared_outs(stage)
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        assert changed and all(any(k == o or k.startswith(f"{o}/") for o in outs)
                               for k in changed), (name, sorted(changed))


def test_repro_then_nothing_then_only_what_a_change_touches(scratch_repo):
    # the first run of every stage, as dvc.yaml calls it (the re-runs below go through DVC)
    _run_every_stage_here(scratch_repo)
    _run(["dvc", "commit", "--force"], scratch_repo)
    assert _ran(_run(["dvc", "repro"], scratch_repo)) == set()
    assert "Data and pipelines are up to date" in _run(["dvc", "status"], scratch_repo)

    # one DVC metrics file, the headline
    metrics = json.loads(_run(["dvc", "metrics", "show", "--json"], scratch_repo))
    headline = metrics[""]["data"]["metrics/summary.json"]["data"]
    assert set(metrics[""]["data"]) == {"metrics/summary.json"}
    assert headline["metric"] == "test_accuracy" and headline["verdict"] == "helps"

    # an experiment with overrides re-runs the model stages and what reads them, nothing above
    _run(GIT + ["add", "-A"], scratch_repo)
    _run(GIT + ["commit", "-qm", "reproduced"], scratch_repo)
    output = _run(["dvc", "exp", "run", "-S", "baseline.lr=0.02", "-S", "train.model=gcn"],
                  scratch_repo)
    assert _ran(output) == {"baseline", "train", "predict", "evaluate", "report"}
    shown = _run(["dvc", "exp", "show", "--no-pager", "--csv"], scratch_repo)
    assert "gcn" in shown
    # the experiment's params and outputs are in the workspace: the edits below build on them
    assert yaml.safe_load((scratch_repo / "params.yaml").read_text())["train"]["model"] == "gcn"

    _edit_params(scratch_repo, predict={"top_k": 2})  # the predict section alone: predict only
    assert _ran(_run(["dvc", "repro"], scratch_repo)) == {"predict"}
    # which upstream outputs a stage reads: dvc.yaml's deps, generated from the stage table
    # (test_architecture: test_dvc_yaml_is_generated_from_the_stage_table); DVC follows them


def test_push_then_pull_into_a_fresh_clone_restores_everything(scratch_repo, tmp_path):
    store = tmp_path / "store"
    _run(["dvc", "remote", "modify", "--local", "gnnpipe-store", "url", str(store)], scratch_repo)
    # the test above left every stage up to date (its last step is a dvc repro)
    _run(GIT + ["add", "-A"], scratch_repo)
    _run(GIT + ["commit", "-qm", "pipeline ran"], scratch_repo)
    _run(["dvc", "push"], scratch_repo)

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(scratch_repo), str(clone)], check=True)
    assert not (clone / "data/prepared").exists()
    _run(["dvc", "remote", "modify", "--local", "gnnpipe-store", "url", str(store)], clone)
    _run(["dvc", "pull"], clone)
    for folder in ("prepared", "split", "partition", "propagate", "baseline", "model"):
        assert (clone / "data" / folder).is_dir(), folder
    assert (clone / "data/model/predictions.pt").read_bytes() == \
        (scratch_repo / "data/model/predictions.pt").read_bytes()
    status = _run(["dvc", "status"], clone)
    assert "Data and pipelines are up to date" in status
    assert "Running stage" not in _run(["dvc", "repro"], clone)


def test_plots_render(scratch_repo, tmp_path):
    _run(["dvc", "plots", "show", "-o", str(tmp_path / "plots")], scratch_repo)
    html = (tmp_path / "plots" / "index.html").read_text()
    assert "training_curves" in html and "val_acc" in html
    assert "confusion_test" in html and "degree_hist" in html


def test_dvc_repro_recovers_after_a_stage_is_killed(scratch_repo):
    """Last in the file: it leaves the stages below train stale (up to train, as a user would
    re-run the stage that died). The change is train.sampler=cluster: only train re-runs (the
    partition is already there), and the resumed run is a cluster-sampler run."""
    from gnnpipe.io.atomic import FAULT_ENV

    _edit_params(scratch_repo, train={"sampler": "cluster"})
    # train dies before publishing its predictions, after its last epoch's checkpoint (DVC
    # removed the previous outputs first): the rerun resumes with no epoch left to train
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(scratch_repo), GNNPIPE_PROGRESS="0", **{FAULT_ENV: "predictions.pt"})
    done = subprocess.run(["dvc", "repro", "train"], cwd=scratch_repo, capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode != 0 and "Running stage 'train'" in done.stdout + done.stderr
    assert not (scratch_repo / "data/model/predictions.pt").exists()
    assert _ran(_run(["dvc", "repro", "train"], scratch_repo)) == {"train"}
    assert not list((scratch_repo / "data").glob("**/*.tmp"))  # the killed writer's temps swept
    assert "Data and pipelines are up to date" in _run(["dvc", "status", "train"], scratch_repo)
    metrics = json.loads((scratch_repo / "metrics/train.json").read_text())
    assert metrics["sampler"] == "cluster" and metrics["best_val_acc"] > 0.5
    throughput = (scratch_repo / "metrics/perf/train_history.csv").read_text().splitlines()
    # resumed from its last epoch: no epoch trained here, the header alone (rows per epoch:
    # tests/sampling/test_shadow.py, tests/training/test_link_train.py)
    assert throughput == [throughput[0]] and throughput[0].split(",")[:2] == ["epoch",
                                                                              "train_seconds"]
