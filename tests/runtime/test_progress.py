"""Progress off a terminal: whole lines at most every LINE_EVERY_S (and the last state), a
heartbeat for stretches no loop reports, silence with GNNPIPE_PROGRESS=0."""

from __future__ import annotations

import contextlib
import time

import yaml

from gnnpipe.runtime import progress as prog
from gnnpipe.cli import main


def test_off_a_terminal_a_loop_prints_whole_lines_with_its_figures(capsys, monkeypatch):
    monkeypatch.setenv("GNNPIPE_PROGRESS", "1")
    monkeypatch.setattr(prog, "LINE_EVERY_S", 0.0)
    bar = prog.progress(range(3), desc="epochs", unit="ep")
    for step in bar:
        bar.set_postfix(loss=f"{1.0 / (step + 1):.4f}")
    lines = capsys.readouterr().err.splitlines()
    assert "\r" not in "".join(lines)
    assert lines[0].startswith("epochs: 0/3 ep [")
    assert lines[-1].startswith("epochs: 3/3 ep [") and "loss=0.3333" in lines[-1]


def test_the_interval_holds_lines_back_but_not_the_last_one(capsys, monkeypatch):
    monkeypatch.setenv("GNNPIPE_PROGRESS", "1")
    bar = prog.progress(None, total=1000, desc="reading x.parquet", unit=" rows")
    for _ in range(100):
        bar.update(10)
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2  # the start, then nothing for LINE_EVERY_S, then the final count
    assert lines[-1].startswith("reading x.parquet: 1000/1000  rows")


def test_progress_zero_silences_lines_and_heartbeat(capsys, monkeypatch):
    monkeypatch.setenv("GNNPIPE_PROGRESS", "0")
    for _ in prog.progress(range(3), desc="epochs"):
        pass
    with prog.heartbeat("gnnpipe x", every_s=0.05):
        time.sleep(0.3)
    assert capsys.readouterr().err == ""


def test_heartbeat_speaks_only_when_nothing_else_did(capsys, monkeypatch):
    monkeypatch.setenv("GNNPIPE_PROGRESS", "1")
    with prog.heartbeat("gnnpipe split", every_s=0.2):
        time.sleep(1.3)
    beats = capsys.readouterr().err.splitlines()
    assert 3 <= len(beats) <= 7 and all(b.startswith("gnnpipe split: running, 0:0")
                                        for b in beats)
    with prog.heartbeat("gnnpipe split", every_s=0.4):
        for _ in range(10):  # a loop printing every 0.1 s keeps the heartbeat quiet
            prog._last_line[0] = time.monotonic()
            time.sleep(0.1)
    assert capsys.readouterr().err == ""


def test_train_off_a_terminal_reports_epochs_with_loss_val_and_rate(tmp_path, capsys,
                                                                     monkeypatch):
    params = {"dataset": {"synthetic": {"num_nodes": 400, "num_features": 8, "num_classes": 3}},
              "train": {"model": "gcn", "epochs": 3}, "baseline": {"epochs": 2}, "threads": 1}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setattr(prog, "LINE_EVERY_S", 0.0)
    with contextlib.chdir(tmp_path):
        assert main(["prepare"]) == 0 and main(["split"]) == 0
        capsys.readouterr()
        monkeypatch.setenv("GNNPIPE_PROGRESS", "1")
        assert main(["train"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("epochs")]
    assert lines[-1].startswith("epochs: 3/3 ep [")
    for figure in ("loss=", "val_acc=", "seeds_s="):
        assert figure in lines[-1], lines[-1]
