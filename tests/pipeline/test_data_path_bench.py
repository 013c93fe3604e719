"""bench/data_path.py: its size names, the tables it writes out of core, the grouping of sampled
process peaks into Dask workers, and a tiny run of two stages through the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

# bench/ is a folder of the repository, not part of the installed package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import data_path  # noqa: E402


def test_sizes_by_name_or_nodes_and_edges():
    assert data_path.parse_size("40M") == ("40M", 2_000_000, 40_000_000)
    assert data_path.parse_size("160M") == ("160M", 8_000_000, 160_000_000)
    assert data_path.parse_size("300:4000") == ("300x4000", 300, 4000)
    with pytest.raises(ValueError, match="--sizes: '5M' is not one of"):
        data_path.parse_size("5M")


def test_params_merge_key_by_key():
    base = {"train": {"sampler": "full", "epochs": 200, "neighbor": {"replace": False}}, "seed": 0}
    got = data_path.merged(base, {"train": {"epochs": 1, "neighbor": {"num_neighbors": [10]}}})
    assert got == {"train": {"sampler": "full", "epochs": 1,
                             "neighbor": {"replace": False, "num_neighbors": [10]}}, "seed": 0}
    assert base["train"]["epochs"] == 200  # not modified in place


def test_tables_are_written_by_row_groups_with_known_ids(tmp_path, monkeypatch):
    monkeypatch.setattr(data_path, "GROUP", 64)
    data_path.write_tables(tmp_path, nodes=300, edges=1000, features=8, classes=3)
    nodes, edges = pq.ParquetFile(tmp_path / "nodes.parquet"), pq.ParquetFile(tmp_path / "edges.parquet")
    assert (nodes.metadata.num_row_groups, edges.metadata.num_row_groups) == (5, 16)
    table, pairs = nodes.read(), edges.read()
    ids = table["id"].to_numpy()
    assert len(np.unique(ids)) == 300 and table["x"].type.list_size == 8
    assert set(table["label"].to_numpy()) == {0, 1, 2}
    for end in ("src", "dst"):
        assert np.isin(pairs[end].to_numpy(), ids).all()
    label = dict(zip(ids, table["label"].to_numpy()))
    same = np.mean([label[s] == label[d] for s, d in zip(pairs["src"].to_numpy(),
                                                         pairs["dst"].to_numpy())])
    assert 0.75 < same < 0.92  # 80% drawn inside the class, plus a third of the rest by chance
    assert not list(tmp_path.glob(".*.tmp"))


def test_peaks_are_summed_per_worker_tree():
    # stage 10; worker 11 (with a child 13), worker 12, resource tracker 14, and 15 seen between
    # fork and exec (the stage's command line, its pages): left out
    hwm = {10: 500.0, 11: 300.0, 13: 50.0, 12: 320.0, 14: 20.0, 15: 500.0}
    anon = {10: 200.0, 11: 180.0, 13: 30.0, 12: 190.0, 14: 10.0, 15: 200.0}
    group = {10: 10, 11: 11, 13: 11, 12: 12, 14: 14, 15: 15}
    stage, worker = "python stages/split.py", "python -c from multiprocessing.spawn import spawn_main"
    cmd = {10: stage, 11: worker, 12: worker, 13: "python -c x", 15: stage,
           14: "python -c from multiprocessing.resource_tracker import main;main(5)"}
    got = data_path.summarize(10, hwm, anon, group, cmd)
    assert got["worker_peak_mb"] == [350.0, 320.0] and got["worker_anon_mb"] == [210.0, 190.0]
    assert (got["stage_peak_mb"], got["worker_processes"], got["other_peak_mb"]) == (500.0, 2, 0.0)


def test_a_tiny_run_through_the_cli(tmp_path):
    rows = data_path.main(["--dir", str(tmp_path), "--sizes", "400:3000", "--engines", "local",
                           "--local", "", "--stages", "prepare,split", "--features", "8"])
    assert [(r["stage"], r["exit_code"]) for r in rows] == [("prepare", 0), ("split", 0)]
    assert all(r["stage_peak_mb"] > 0 and r["worker_processes"] == 0 for r in rows)
    assert "audit passed" in rows[-1]["message"]
    assert "| 400x3000 | local | split |" in data_path.markdown(rows)
    assert list(tmp_path.iterdir()) == []  # tables and run removed


def test_the_sampler_sees_a_child_process_tree():
    # the stage holds ~64 MiB, its child ~128 MiB: the child's own peak, not its parent's pages
    code = ("import numpy as np, subprocess, sys; a = np.ones(8 * 2**20); subprocess.run("
            "[sys.executable, '-c', 'import numpy as np, time; b = np.ones(16 * 2**20); "
            "time.sleep(1)'])")
    proc = subprocess.Popen([sys.executable, "-c", code])
    peaks = data_path.TreePeaks(proc.pid, interval=0.05)
    proc.wait()
    got = peaks.stop()
    assert got["worker_processes"] == 0
    assert got["other_peak_mb"] > 128 and got["stage_peak_mb"] > 64

