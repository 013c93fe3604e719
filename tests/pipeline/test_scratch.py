"""Every stage run gets its own temp folder, removed at exit (also after a failure) and swept
after a kill: nothing is left in the system temp dir, PyG's generated templates included; a
stage killed mid-run (either engine) leaves nothing once another stage has run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

from gnnpipe.io.atomic import STALL_ENV
from gnnpipe.io.temps import HOST, TEMP_NAME, run_scratch

from conftest import run_stages

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


# ------------------------------------------------------------------- a stage killed mid-run
KILLED = {"dataset": {"synthetic": {"num_nodes": 300, "num_features": 4, "num_classes": 3}},
          "propagate": {"hops": 1}, "threads": 1}


def _stalled(work: Path, system_tmp: Path) -> subprocess.Popen:
    """``gnnpipe propagate`` on Dask (one embedded worker), stalled before its meta.json is
    renamed: its staged output and its block scratch are beside data/propagate."""
    (work / "dask.yaml").write_text(yaml.safe_dump(
        {**KILLED, "cluster": {"engine": "dask", "workers": 1}}))
    return subprocess.Popen([sys.executable, "-m", "gnnpipe", "propagate", "--params",
                             "dask.yaml"], cwd=work, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "GNNPIPE_PROGRESS": "0", "TMPDIR": str(system_tmp),
                                 STALL_ENV: "meta.json"})


def test_a_stage_killed_mid_run_leaves_no_scratch_after_the_next_stage(tmp_path, monkeypatch):
    """SIGKILL of a Dask stage process (issue 44: DVC then restored the stage from its run
    cache, so no code of that stage ran again): its worker processes go with it, and the next
    run of another stage (local: the sweep runs before any engine starts) removes its staged
    output and block scratch beside data/ and its run folder in the temp dir; propagate then
    runs clean. (The local engine leaves the same: its block scratch folder stays empty.)"""
    system_tmp = tmp_path / "tmp"
    system_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    work = tmp_path / "work"
    work.mkdir()
    (work / "params.yaml").write_text(yaml.safe_dump(KILLED))
    run_stages(work, ("prepare", "split"))
    proc = _stalled(work, system_tmp)
    try:
        deadline = time.monotonic() + 120
        while not list((work / "data").glob(".propagate.p*.tmp/.meta.json.*")):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "propagate never reached its meta.json"
            time.sleep(0.05)
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.stderr.close()
    left = {TEMP_NAME.match(p.name) for p in (work / "data").iterdir() if p.name[0] == "."}
    assert {m["pid"] for m in left} == {str(proc.pid)}  # nothing but the killed run's
    assert {m["name"] for m in left} >= {"propagate", "propagate-blocks"}  # staged, scratch
    assert len(children) >= 2  # the nanny and its worker
    assert [p.name for p in system_tmp.iterdir() if p.name.startswith(f".gnnpipe-run.p{proc.pid}-")]
    _, alive = psutil.wait_procs(children, timeout=20)
    assert not alive, alive  # a killed stage's Dask processes exit with it
    run_stages(work, ("analyze",))
    assert not [p.name for p in (work / "data").iterdir() if p.name[0] == "."]
    assert [p.name for p in system_tmp.iterdir()] == [f"gnnpipe-locks-{os.getuid()}"]
    run_stages(work, ("propagate",))
    assert not [p.name for p in (work / "data").iterdir() if p.name[0] == "."]
    assert (work / "data" / "propagate" / "meta.json").is_file()
