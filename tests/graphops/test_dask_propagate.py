"""propagate's block tasks on cluster.engine: dask (gnnpipe/graphops/propagate.py): hop files byte
for byte as the same tasks write them in this process, on LocalClusters of 1, 2 and 4 workers and
any block size; tasks reading files in gather chunks; a failed task leaves no hop file; the stage
end to end; the row files."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from gnnpipe import io
from gnnpipe.config import PropagateParams
from graph_oracle import normalize_edges
from gnnpipe.graphops import propagate as module
from gnnpipe.graphops.propagate import propagate

N, F = 300, 5


@pytest.fixture(scope="module")
def cluster():
    """One LocalCluster of 4 workers for the module (a start costs seconds), scaled down."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=4, threads_per_worker=1, processes=True, memory_limit="512MiB",
                      dashboard_address=None, silence_logs=logging.ERROR) as local:
        yield local


@pytest.fixture()
def client_of(cluster):
    from distributed import Client

    clients = []

    def make(workers: int):
        cluster.scale(workers)
        client = Client(cluster, set_as_default=False)
        clients.append(client)
        deadline = time.monotonic() + 60
        while len(client.scheduler_info()["workers"]) != workers:
            assert time.monotonic() < deadline, "the cluster did not scale"
            time.sleep(0.1)
        return client

    yield make
    for client in clients:
        client.close()


def _graph(seed: int = 0, directed_loops: bool = False):
    """A random graph with isolated nodes (none of their edges kept) and, optionally, directed
    edges with self-loops."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, N, 1500), rng.integers(0, N, 1500)
    keep = ~(np.isin(src, [3, 4, 5]) | np.isin(dst, [3, 4, 5]))
    csr, _ = normalize_edges(src[keep], dst[keep], N, undirected=not directed_loops, dedup=True,
                             remove_self_loops=not directed_loops)
    x = torch.from_numpy(rng.standard_normal((N, F)).astype(np.float32))
    x[:, 0] = torch.arange(N, dtype=torch.float32)  # features equal node ids
    return csr, x


def _local_files(tmp: Path, csr, x, cfg) -> dict[str, bytes]:
    out = tmp / "local"
    out.mkdir()
    io.write_hop(out, "g", 0, x.to(getattr(torch, cfg.dtype)))
    for _ in propagate(csr, x, cfg, sink=partial(io.HopWriter, out, "g")):
        pass
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _dask_files(tmp: Path, client, csr, x, cfg, name: str) -> dict[str, bytes]:
    """The stage's call on dask: X_0 read from hop 0 (float32) or a scratch copy (bfloat16)."""
    out, scratch = tmp / name, tmp / f"{name}-scratch"
    out.mkdir()
    dtype = getattr(torch, cfg.dtype)
    io.write_hop(out, "g", 0, x.to(dtype))
    stored = io.hop_rows(out, "g", 0, tuple(x.shape), dtype) if cfg.dtype == "float32" else None
    peaks = []
    for _ in propagate(csr, x, cfg, client=client, sink=partial(io.HopWriter, out, "g"),
                       scratch=scratch, stored_x0=stored, peaks=peaks):
        pass
    assert len(peaks) == (cfg.hops + 1) * -(-N // cfg.block_rows)  # A_hat, then every hop
    assert all(p > 0 for p in peaks)
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.mark.parametrize("norm, self_loops, dtype, directed", [
    ("rw", True, "float32", True), ("ppr", True, "bfloat16", False),
    ("sym", False, "bfloat16", True), ("ppr", False, "float32", False)])
def test_any_block_size_gives_the_local_bytes(tmp_path, client_of, monkeypatch, norm,
                                              self_loops, dtype, directed):
    """Task blocks of 7, 300 and 1000 rows, and gather chunks of a few rows inside a task."""
    client = client_of(4)  # the cluster as started: the 2- and 1-worker tests come last
    csr, x = _graph(1, directed_loops=directed)
    want = _local_files(tmp_path, csr, x, PropagateParams(hops=2, norm=norm, alpha=0.2,
                                                          self_loops=self_loops, dtype=dtype))
    for block_rows in (7, 300, 1000):
        cfg = PropagateParams(hops=2, norm=norm, alpha=0.2, self_loops=self_loops, dtype=dtype,
                              block_rows=block_rows)
        assert _dask_files(tmp_path, client, csr, x, cfg, f"b{block_rows}") == want, block_rows


def test_tasks_reading_files_in_gather_chunks_give_the_same_rows(tmp_path, monkeypatch):
    """The workers' inputs (files; X_0 a scratch copy under bfloat16), the tasks run here in two
    blocks, with a gather budget of 20 non-zeros' rows: the bytes of the in-memory run."""
    csr, x = _graph(2)
    dtype = "bfloat16"
    cfg = PropagateParams(hops=2, norm="ppr", dtype=dtype, block_rows=N)
    want = _local_files(tmp_path, csr, x, cfg)
    out, folder = tmp_path / "chunks", tmp_path / "in"
    out.mkdir()
    io.write_hop(out, "g", 0, x.to(getattr(torch, dtype)))
    nnz = csr.num_edges + N
    adjacency = module._adjacency_files(folder, csr, cfg, nnz)
    x0 = module._x0_file(folder, x, 64)
    monkeypatch.setattr(module, "GATHER_BYTES", 4 * F * 20)
    for start, stop in ((100, N), (0, 100)):
        module.adjacency_block(start, stop, adjacency=adjacency, cfg=cfg)
    previous = x0
    for hop in (1, 2):
        writer = io.HopWriter(out, "g", hop, (N, F), getattr(torch, dtype))
        task = module.HopTask(adjacency, previous, x0, writer.rows(), cfg, "aten")
        for start, stop in ((0, 100), (100, N)):
            module.hop_block(start, stop, task=task)
        writer.finish()
        previous = writer.finished_rows()
    assert {p.name: p.read_bytes() for p in sorted(out.iterdir())} == want


def test_row_files_read_and_write_rows_in_either_dtype(tmp_path):
    x = torch.randn(9, 4)
    for dtype in (torch.float32, torch.bfloat16):
        writer = io.HopWriter(tmp_path, f"r{dtype}", 1, (9, 4), dtype)
        rows = writer.rows()
        rows.write(3, x[3:9])
        rows.write(0, x[0:3])
        hop = writer.finish()
        assert torch.equal(hop, x.to(dtype))
        back = io.hop_rows(tmp_path, f"r{dtype}", 1, (9, 4), dtype)
        assert torch.equal(back.read(np.array([7, 2])), x.to(dtype)[[7, 2]].float())
        assert torch.equal(back.read(slice(1, 4)), x.to(dtype)[1:4].float())


def test_the_stage_on_dask_writes_the_local_files(tmp_path, cluster, client_of, monkeypatch):
    """prepare, split, then propagate on either engine (ppr, bfloat16, inductive message graphs):
    the same folder, byte for byte; no scratch folder left behind; worker peak RSS reported."""
    import json

    from gnnpipe.cli import main

    client_of(4)  # the cluster as started: the 2- and 1-worker tests come last
    monkeypatch.chdir(tmp_path)
    params = {"dataset": {"synthetic": {"num_nodes": 400, "num_features": 6, "num_classes": 3}},
              "split": {"node": {"mode": "inductive"}},
              "propagate": {"hops": 2, "norm": "ppr", "alpha": 0.15, "dtype": "bfloat16",
                            "block_rows": 70}}
    Path("params.yaml").write_text(yaml.safe_dump(params))
    assert main(["prepare"]) == 0 and main(["split"]) == 0 and main(["propagate"]) == 0
    out = Path("data/propagate")
    local = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())}
    params["cluster"] = {"engine": "dask", "address": cluster.scheduler_address}
    Path("params.yaml").write_text(yaml.safe_dump(params))
    assert main(["propagate"]) == 0
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.iterdir())} == local
    assert not [p for p in Path("data").iterdir() if p.name.startswith(".")]
    perf = json.loads(Path("metrics/perf/propagate.json").read_text())
    assert perf["worker_peak_rss_mb"] > 50 and len(perf["hop_seconds"]) == 6
    _killed_stage_leaves_the_output_and_no_worker(tmp_path, params, local,
                                                  cluster.scheduler_address)


def _killed_stage_leaves_the_output_and_no_worker(folder: Path, params: dict, want: dict,
                                                  address: str):
    """The stage (embedded LocalCluster) killed as it renames its last hop file: the previous
    output intact, no process of its session left (its workers died with it), and the next run
    (in this process, on the module's cluster: no second start) recovers and sweeps its temp
    folders."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys

    import psutil

    from gnnpipe.cli import main
    from gnnpipe.io.atomic import FAULT_ENV

    params["cluster"] = {"engine": "dask", "workers": 1, "memory_limit": "512MiB"}
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    run = subprocess.Popen([sys.executable, "-m", "gnnpipe", "propagate"], cwd=folder,
                           start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL,
                           env={**os.environ, "GNNPIPE_PROGRESS": "0",
                                FAULT_ENV: "message_test_hop_2.pt"})
    assert run.wait(timeout=300) == -signal.SIGKILL
    deadline = time.monotonic() + 30
    while [p for p in psutil.process_iter() if _session(p) == run.pid]:
        assert time.monotonic() < deadline, "a worker outlived the killed stage"
        time.sleep(0.2)
    out = folder / "data/propagate"
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.iterdir())} == want
    params["cluster"] = {"engine": "dask", "address": address}
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    # the recovery is the stage's, not a fresh interpreter's: no torch import in a subprocess
    with contextlib.chdir(folder):
        assert main(["propagate"]) == 0
    assert not [p for p in (folder / "data").iterdir() if p.name.startswith(".")]


def _session(process) -> int | None:
    import os

    try:
        return os.getsid(process.pid)
    except OSError:
        return None


@pytest.mark.parametrize("workers", [4, 2, 1])
def test_hop_files_match_the_local_engine_on_4_2_and_1_workers(tmp_path, client_of, workers):
    client = client_of(workers)
    csr, x = _graph(workers)
    cfg = PropagateParams(hops=3, norm="sym", block_rows=64, kernel="aten")
    want = _local_files(tmp_path, csr, x, cfg)
    assert _dask_files(tmp_path, client, csr, x, cfg, "dask") == want
    assert len(want) == 4


def test_a_failed_task_leaves_no_hop_file(tmp_path, client_of):
    client = client_of(1)
    csr, x = _graph(3)
    out = tmp_path / "out"
    out.mkdir()
    io.write_hop(out, "g", 0, x)
    x0 = io.hop_rows(out, "g", 0, (N, F), torch.float32)
    cfg = PropagateParams(hops=2, block_rows=50)
    bad = dataclasses.replace(x0, path=str(out / "missing.pt"))  # every task fails to read it
    with pytest.raises(FileNotFoundError):
        for _ in propagate(csr, x, cfg, client=client, sink=partial(io.HopWriter, out, "g"),
                           scratch=tmp_path / "scratch", stored_x0=bad):
            pass
    assert sorted(p.name for p in out.iterdir()) == ["g_hop_0.pt"]  # no half-written hop
