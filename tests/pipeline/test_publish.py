"""A stage publishes all its outputs or none, names the file in one line when the disk, the OS or
a reader library fails, leaves no temps behind a killed writer, runs once per output, and dies
with the process that started it."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from gnnpipe.cli import main
from gnnpipe.io import atomic, lock
from gnnpipe.io.atomic import (ENOSPC_ENV, FAULT_ENV, PUBLISH_FAULT_ENV, STALL_ENV, atomic_dir,
                               atomic_path, publishing)
from gnnpipe.io.temps import HOST, remove_stale_temps

PARAMS = {"dataset": {"synthetic": {"num_nodes": 600, "num_features": 8, "num_classes": 3}}}
PERF = ["--resources", "metrics/perf/stages/prepare.json"]
OUTPUTS = ("data/prepared", "metrics/prepare.json", "metrics/perf/stages/prepare.json")


def _digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` (temps included) -> sha256: any change or leftover shows."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != "params.yaml"}


def _temps(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob(".*") if p.suffix in (".tmp", ".old")]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def _stage(args: list[str], cwd: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnpipe", *args], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "GNNPIPE_PROGRESS": "0", **env},
                          timeout=300)


@pytest.fixture(autouse=True)
def _own_lock_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("GNNPIPE_LOCK_DIR", str(tmp_path_factory.mktemp("locks")))


@pytest.fixture
def published(tmp_path, monkeypatch) -> Path:
    """A folder where prepare ran once (seed 0); params.yaml now asks for another graph."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    assert main(["prepare", *PERF]) == 0
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({**PARAMS, "seed": 1}))
    monkeypatch.setattr(atomic, "_writes", {})
    return tmp_path


def _started(pattern: str, root: Path, proc: subprocess.Popen, timeout: float = 120) -> int:
    """Wait until a temp matching ``pattern`` appears under ``root`` (the stage stalls there);
    returns the writer pid from its name."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in root.rglob(".*.tmp"):
            match = re.match(pattern, path.name)
            if match:
                return int(match["pid"])
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError(f"no {pattern} under {root} after {timeout}s")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # a zombie has exited; its reaper may be slow


def _marked(mark: str) -> list[int]:
    """Pids whose environment holds ``mark`` (a stage and everything it started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "environ").read_bytes() and not _gone(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# ------------------------------------------------------------------------ one line per error
def _corrupt_pages(folder: Path) -> Path:
    """User tables whose edge file has a data page overwritten; its footer is intact."""
    folder.mkdir()
    n, rng = 200, np.random.default_rng(0)
    pq.write_table(pa.table({"id": np.arange(n), "label": np.arange(n) % 3,
                             "x": pa.array(rng.random((n, 3)).tolist(), pa.list_(pa.float32()))}),
                   folder / "nodes.parquet")
    edges = folder / "edges.parquet"
    pq.write_table(pa.table({"src": rng.integers(0, n, 5000), "dst": rng.integers(0, n, 5000)}),
                   edges, compression="none", row_group_size=1000)
    page = pq.ParquetFile(edges).metadata.row_group(2).column(0).data_page_offset
    data = bytearray(edges.read_bytes())
    data[page:page + 64] = b"\xff" * 64
    edges.write_bytes(bytes(data))
    pq.ParquetFile(edges)  # the footer still reads: the damage shows only when pages are read
    return folder


@pytest.mark.parametrize("debug", [False, True])
def test_corrupted_parquet_pages_give_one_line_naming_the_file(tmp_path, monkeypatch, capsys,
                                                               debug):
    monkeypatch.chdir(tmp_path)
    _corrupt_pages(tmp_path / "raw")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(
        {"dataset": {"source": "parquet", "path": "raw"}}))
    if debug:
        monkeypatch.setenv("GNNPIPE_DEBUG", "1")
    before = _digest(tmp_path)
    assert main(["prepare", *PERF]) == 1
    if debug:  # the traceback, then the same one line
        err = capsys.readouterr().err.strip()
        assert "Traceback" in err
        last = err.splitlines()[-1]
    else:
        last = _one_line(capsys)
    assert last.startswith("gnnpipe prepare: error: raw/edges.parquet: not a readable Parquet file")
    assert _digest(tmp_path) == before  # nothing written, no temps


def test_an_os_error_anywhere_is_one_line_naming_the_file(published, monkeypatch, capsys):
    """The last-resort catch: an OSError the stage did not expect (here from the graph writer)."""
    import gnnpipe.io.prepared as prepared_io

    def broken(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "data/prepared/graph.pt")

    monkeypatch.setattr(prepared_io, "save_tensors", broken)
    before = _digest(published)
    assert main(["prepare", *PERF]) == 1
    assert _one_line(capsys) == "gnnpipe prepare: error: data/prepared/graph.pt: Permission denied"
    assert _digest(published) == before


# --------------------------------------------------------------------------- all or nothing
@pytest.mark.parametrize("in_the_way, message", [
    ("metrics/prepare.json/", r"metrics/prepare.json: is a folder; expected a file"),
    ("metrics/perf", r"metrics/perf/stages/prepare.json: cannot be written: metrics/perf is a "
                     r"file, not a folder"),
])
def test_an_unwritable_metrics_path_keeps_the_previous_outputs(published, capsys, in_the_way,
                                                               message):
    target = published / in_the_way.rstrip("/")
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    if in_the_way.endswith("/"):
        (target / "keep").mkdir(parents=True)  # a folder where the metrics file goes
    else:
        target.write_text("in the way\n")
    before = _digest(published)
    assert main(["prepare", *PERF]) == 1
    assert re.match(f"gnnpipe prepare: error: {message}", _one_line(capsys))
    assert _digest(published) == before  # data/prepared was NOT swapped in


@pytest.mark.parametrize("env, spec", [
    (ENOSPC_ENV, "graph.pt"),            # while writing the output folder
    (ENOSPC_ENV, "prepare.json"),        # metrics, after data/prepared is complete
    (ENOSPC_ENV, "prepare.json@2"),      # the perf record, the last write
    (PUBLISH_FAULT_ENV, "prepare.json"),    # renaming: data/prepared is in place, rolled back
    (PUBLISH_FAULT_ENV, "prepare.json@2"),  # renaming the last file: two rolled back
])
def test_a_full_disk_publishes_nothing(published, monkeypatch, capsys, env, spec):
    before = _digest(published)
    monkeypatch.setenv(env, spec)
    assert main(["prepare", *PERF]) == 1
    assert re.fullmatch(r"gnnpipe prepare: error: \S+: No space left on device",
                        _one_line(capsys))
    assert _digest(published) == before  # the old outputs, file for file, and no temps
    monkeypatch.delenv(env)
    assert main(["prepare", *PERF]) == 0
    after = _digest(published)
    assert all(after[k] != before[k] for k in ("metrics/prepare.json", "data/prepared/graph.pt"))


def test_a_real_full_disk_publishes_nothing(tmp_path):
    """A small tmpfs (in a user and mount namespace), filled after the first prepare to within
    64 KiB: the second prepare (its block scratch and outputs) meets a real ENOSPC."""
    if not shutil.which("unshare") or subprocess.run(
            ["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare -rm (user and mount namespaces)")
    work = tmp_path / "disk"
    work.mkdir()
    params = {"dataset": {"synthetic": {"num_nodes": 2000, "num_features": 32}}}
    # the driver imports no module of ours (this one loads torch: seconds): the helpers' source
    helpers = inspect.getsource(_digest) + inspect.getsource(_temps)
    driver = "import hashlib\nfrom pathlib import Path\n" + helpers + textwrap.dedent(f"""
        import json, os, subprocess, sys
        work = Path({str(work)!r})
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(work)]).returncode:
            print(json.dumps({{"skip": "mount -t tmpfs refused"}})); sys.exit()
        os.chdir(work)
        run = lambda: subprocess.run([sys.executable, "-m", "gnnpipe", "prepare", {PERF!r}[0],
                                      {PERF!r}[1]], capture_output=True, text=True)
        Path("params.yaml").write_text({yaml.safe_dump(params)!r})
        first = run()
        free = os.statvfs(work).f_bavail * os.statvfs(work).f_frsize
        Path("filler").write_bytes(bytes(max(free - (64 << 10), 0)))
        before = _digest(work)
        Path("params.yaml").write_text({yaml.safe_dump({**params, "seed": 1})!r})
        second = run()
        print(json.dumps({{"first": first.returncode, "first_err": first.stderr,
                          "second": second.returncode, "err": second.stderr,
                          "same": _digest(work) == before, "temps": _temps(work)}}))
    """)
    done = subprocess.run(["unshare", "-rm", sys.executable, "-c", driver], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "GNNPIPE_PROGRESS": "0"})
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    assert result["first"] == 0, result["first_err"]
    assert result["second"] == 1
    err = result["err"].strip()
    assert "\n" not in err and re.fullmatch(
        r"gnnpipe prepare: error: data/\.?prepared\S*: .*No space left on device.*", err), err
    assert result["same"] and result["temps"] == []


def test_publishing_renames_in_order_and_rolls_back(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "old.txt").write_text("old a")
    (tmp_path / "b.json").write_text("old b")
    monkeypatch.setenv(PUBLISH_FAULT_ENV, "c.json")
    with pytest.raises(OSError, match="No space left"):
        with publishing():
            with atomic_dir(tmp_path / "a") as out:
                with atomic_path(out / "new.txt") as tmp:  # inside the folder: in place at once
                    tmp.write_text("new a")
                assert (out / "new.txt").read_text() == "new a"
            with atomic_path(tmp_path / "b.json") as tmp:
                tmp.write_text("new b")
            assert (tmp_path / "b.json").read_text() == "old b"  # staged, not yet published
            with atomic_path(tmp_path / "c.json") as tmp:
                tmp.write_text("new c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b.json"]
    assert (tmp_path / "a" / "old.txt").read_text() == "old a"
    assert (tmp_path / "b.json").read_text() == "old b"
    monkeypatch.delenv(PUBLISH_FAULT_ENV)
    with publishing():
        with atomic_path(tmp_path / "c.json") as tmp:
            tmp.write_text("new c")
        with atomic_path(tmp_path / "d.json", now=True) as tmp:  # a checkpoint: at once
            tmp.write_text("d")
        assert (tmp_path / "d.json").exists() and not (tmp_path / "c.json").exists()
    assert (tmp_path / "c.json").read_text() == "new c"


# ------------------------------------------------------------------------- leftover temps
def test_a_killed_writers_temps_are_removed_by_the_next_stage(published):
    killed = _stage(["prepare", *PERF], published, **{FAULT_ENV: "prepare.json"})
    assert killed.returncode == -signal.SIGKILL
    left = _temps(published)
    assert any(t.startswith("data/.prepared.p") for t in left)  # staged, never published
    assert any(t.startswith("metrics/.prepare.json.p") for t in left)
    mine = published / "data" / f".prepared.p{os.getpid()}-{HOST}.abcd1234.tmp"
    remote = published / "data" / ".prepared.p1-00000000.abcd1234.tmp"
    for live in (mine, remote):  # a running writer's temp, another machine's: never touched
        live.mkdir()
    assert main(["split"]) == 0  # any stage that runs clears what dead writers left
    assert sorted(_temps(published)) == sorted(str(p.relative_to(published))
                                               for p in (mine, remote))


def test_remove_stale_temps_spares_other_names(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    names = [f".graph.pt.p{dead}-{HOST}.k2j4h5g6.tmp", ".prepared.x7y8z9w0.old",
             ".keep.tmp", "notes.tmp", f".graph.pt.p{os.getpid()}-{HOST}.k2j4h5g6.tmp"]
    for name in names:
        (tmp_path / "sub" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "sub" / name).write_text("x")
    removed = remove_stale_temps([], [tmp_path])
    assert sorted(p.name for p in removed) == sorted(names[:2])
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == sorted(names[2:])


# ------------------------------------------------------------------------ one writer, alive
def test_a_second_writer_of_the_same_outputs_is_refused(published, capsys, monkeypatch):
    # the second writer waits lock.WAIT_S for a dying holder before it is refused: this one
    # never lets go, so any wait gives the same refusal
    monkeypatch.setattr(lock, "WAIT_S", 0.5)
    first = subprocess.Popen([sys.executable, "-m", "gnnpipe", "prepare", *PERF], cwd=published,
                             env={**os.environ, STALL_ENV: "prepare.json"},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        pid = _started(r"\.prepare\.json\.p(?P<pid>\d+)-", published / "metrics", first)
        before = _digest(published)
        assert main(["prepare", *PERF]) == 1
        assert re.fullmatch(rf"gnnpipe prepare: error: data/prepared is being written by gnnpipe "
                            rf"prepare \(pid {pid}, in \S+\); wait for it to finish or stop it "
                            r"\(one writer per output\)", _one_line(capsys))
        assert _digest(published) == before  # the first writer's temps are left alone too
    finally:
        first.kill()
        first.wait()
    assert main(["prepare", *PERF]) == 0  # the lock went with the killed holder
    assert _temps(published) == []


@pytest.mark.parametrize("launch", ["exec", "shell"])
def test_a_stage_exits_when_its_parent_is_killed(published, launch):
    """dvc runs a stage through ``$SHELL -c``: bash execs it, dash keeps a shell in between."""
    mark = f"GNNPIPE_TEST_MARK={uuid.uuid4().hex}"
    stage = [sys.executable, "-m", "gnnpipe", "prepare", *PERF]
    command = stage if launch == "exec" else ["/bin/sh", "-c", " ".join(stage)]
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])", *command],
        cwd=published, env={**os.environ, STALL_ENV: "prepare.json", mark.split("=")[0]:
                            mark.split("=")[1]})
    try:
        pid = _started(r"\.prepare\.json\.p(?P<pid>\d+)-", published / "metrics", launcher)
        launcher.send_signal(signal.SIGKILL)  # as `kill -9 <dvc pid>`
        launcher.wait()
        deadline = time.monotonic() + 20  # prctl: at once; behind a shell: the 1 s watcher
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(pid), "the stage outlived its parent"
    finally:
        for left in _marked(mark):
            os.kill(left, signal.SIGKILL)
    assert main(["prepare", *PERF]) == 0 and _temps(published) == []


def test_killing_the_launcher_of_a_ddp_stage_stops_every_rank(published):
    """The stage dies with its parent, torchrun with the stage, the ranks with torchrun."""
    assert main(["split"]) == 0
    params = {**PARAMS, "train": {"epochs": 2, "hidden": 8, "dist": {"nproc": 2},
                                  "checkpoint": {"every": 0}}}
    (published / "params.yaml").write_text(yaml.safe_dump(params))
    key, value = "GNNPIPE_TEST_MARK", uuid.uuid4().hex
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
         sys.executable, "-m", "gnnpipe", "train"], cwd=published,
        env={**os.environ, STALL_ENV: "train.json", key: value},  # rank 0 stalls, outputs staged
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _started(r"\.train\.json\.p(?P<pid>\d+)-", published / "metrics", launcher, timeout=240)
        assert len(_marked(f"{key}={value}")) >= 4  # launcher, stage, torchrun, 2 ranks
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + 60
        while _marked(f"{key}={value}") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _marked(f"{key}={value}") == [], "a rank outlived the killed launcher"
    finally:
        for left in _marked(f"{key}={value}"):
            os.kill(left, signal.SIGKILL)
    assert not (published / "data/model").exists()  # nothing published by the killed run
