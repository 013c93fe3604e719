"""The DVC pipeline in a scratch copy of the repository: caching re-runs exactly what changed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SMALL = {"num_nodes": 1000, "num_features": 16, "num_classes": 3}


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
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (repo / ".gitignore").write_text("__pycache__/\n")
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost"]
    _run(["git", "init", "-q"], repo)
    _run(git + ["add", "-A"], repo)
    _run(git + ["commit", "-qm", "scratch"], repo)
    return repo


@pytest.fixture(scope="module")
def scratch_repo(tmp_path_factory) -> Path:
    return make_scratch_repo(tmp_path_factory.mktemp("repo"))


def test_repro_then_nothing_then_only_what_a_change_touches(scratch_repo):
    first = _run(["dvc", "repro"], scratch_repo)
    assert _ran(first) == {"prepare", "split", "analyze", "partition", "propagate", "baseline",
                           "train", "predict", "evaluate", "report"}
    assert _ran(_run(["dvc", "repro"], scratch_repo)) == set()
    assert "Data and pipelines are up to date" in _run(["dvc", "status"], scratch_repo)

    metrics = _run(["dvc", "metrics", "show", "--json"], scratch_repo)
    assert '"gnn"' in metrics and '"mlp"' in metrics and "accuracy" in metrics

    params_path = scratch_repo / "params.yaml"
    params = yaml.safe_load(params_path.read_text())
    params["train"]["lr"] = 0.005
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    assert _ran(_run(["dvc", "repro"], scratch_repo)) == {"train", "predict", "evaluate",
                                                          "report"}

    params["predict"]["top_k"] = 2  # the predict section alone: only predict re-runs
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    assert _ran(_run(["dvc", "repro"], scratch_repo)) == {"predict"}

    params["partition"]["num_parts"] = 2
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    # train depends on data/partition (train.sampler cluster, train.dist.shard partition), so it
    # re-runs; with the default full sampler it does not read the partition, its outputs come
    # out byte-identical and DVC rightly skips evaluate.
    assert _ran(_run(["dvc", "repro"], scratch_repo)) == {"partition", "train", "report"}

    params["propagate"]["hops"] = 3
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    ran = _ran(_run(["dvc", "repro"], scratch_repo))
    # evaluate/report follow only if train's outputs changed: sage ignores propagated features,
    # so its predictions come out byte-identical and DVC rightly stops there.
    # predict reads data/propagate (the sign model's hops), so it re-runs too
    assert {"propagate", "train"} <= ran <= {"propagate", "train", "predict", "evaluate",
                                             "report"}


def test_exp_run_with_a_param_override_reruns_train_and_evaluate(scratch_repo):
    _run(["dvc", "repro"], scratch_repo)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost"]
    _run(git + ["add", "-A"], scratch_repo)
    _run(git + ["commit", "-qm", "reproduced"], scratch_repo)
    output = _run(["dvc", "exp", "run", "-S", "baseline.lr=0.02", "-S", "train.model=gcn"],
                  scratch_repo)
    assert _ran(output) == {"baseline", "train", "predict", "evaluate", "report"}
    shown = _run(["dvc", "exp", "show", "--no-pager", "--csv"], scratch_repo)
    assert "gcn" in shown


def test_plots_render(scratch_repo, tmp_path):
    _run(["dvc", "repro"], scratch_repo)
    _run(["dvc", "plots", "show", "-o", str(tmp_path / "plots")], scratch_repo)
    html = (tmp_path / "plots" / "index.html").read_text()
    assert "training_curves" in html and "val_acc" in html
    assert "confusion_test" in html and "degree_hist" in html
