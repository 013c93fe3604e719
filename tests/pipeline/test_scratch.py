"""Every stage run gets its own temp folder, removed at exit (also after a failure) and swept
after a kill: nothing is left in the system temp dir, PyG's generated templates included."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from gnnpipe.io.temps import HOST, run_scratch

PARAMS = {"dataset": {"synthetic": {"num_nodes": 400, "num_features": 8, "num_classes": 3}},
          "train": {"model": "gcn", "epochs": 1}, "threads": 1}


def _stage(stage: str, cwd: Path, system_tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnpipe", stage], cwd=cwd, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "GNNPIPE_PROGRESS": "0", "TMPDIR": str(system_tmp)})


def test_stages_leave_nothing_in_the_temp_dir(tmp_path):
    system_tmp = tmp_path / "tmp"
    system_tmp.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    for stage in ("prepare", "split", "train"):
        done = _stage(stage, work, system_tmp)
        assert done.returncode == 0, done.stderr
        # only the per-user lock folder, shared by every run, stays (gnnpipe/io/lock.py)
        assert [p.name for p in system_tmp.iterdir()] == [f"gnnpipe-locks-{os.getuid()}"], stage
    assert (work / "data/model").exists()


def test_pyg_templates_land_in_the_run_folder_which_goes_at_exit(tmp_path, monkeypatch):
    """In process: a conv built inside the run writes its template under the run's folder."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    script = ("from gnnpipe.io.temps import run_scratch\n"
              "with run_scratch() as folder:\n"
              "    import torch_geometric.nn as nn\n"  # torch's import writes caches too
              "    nn.SAGEConv(4, 4)\n"
              "    print(folder, *sorted(p.name for p in folder.iterdir()))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(tmp_path)}, timeout=120)
    assert done.returncode == 0, done.stderr
    folder, *files = done.stdout.split()
    assert Path(folder).parent == tmp_path
    assert any("propagate" in name for name in files), files  # PyG wrote it where we said
    assert list(tmp_path.iterdir()) == []


def test_a_failed_run_removes_its_folder_and_restores_tmpdir(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    try:
        with run_scratch() as folder:
            (folder / "partial.bin").write_bytes(b"x")
            assert os.environ["TMPDIR"] == str(folder) == tempfile.gettempdir()
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert os.environ["TMPDIR"] == str(tmp_path)
    assert tempfile.gettempdir() == str(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_killed_runs_folder_is_swept_and_a_live_one_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    killed = tmp_path / f".gnnpipe-run.p{dead}-{HOST}.abcd1234.tmp"
    killed.mkdir()
    (killed / "torch_geometric.nn.conv.x_propagate_1.py").write_text("")
    live = tmp_path / f".gnnpipe-run.p{os.getppid()}-{HOST}.efgh5678.tmp"
    live.mkdir()
    other = tmp_path / "someone-elses.txt"
    other.write_text("keep")
    with run_scratch():
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])
