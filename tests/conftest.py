"""Shared fixtures: tiny graphs whose features equal node ids, and small synthetic params."""

from __future__ import annotations

import os

# Tiny graphs gain nothing from intra-op threads and lose a lot to contention on 2 cores; the
# stages the tests start as subprocesses inherit this too.
os.environ.setdefault("OMP_NUM_THREADS", "1")


import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from gnnpipe.config import Params, params_from_dict
from gnnpipe.data.graph import Graph, TargetView
from graph_oracle import normalize_edges, prepare


@pytest.fixture(autouse=True)
def _quiet_progress(monkeypatch):
    monkeypatch.setenv("GNNPIPE_PROGRESS", "0")


def make_tiny_graph(num_nodes: int = 12, num_classes: int = 3) -> TargetView:
    """A ring plus chords, as the flat view the single-relation code reads; ``x[:, 0] == node
    id`` so a wrong gather is visible."""
    ring = np.arange(num_nodes)
    src = np.concatenate([ring, ring[::3]])
    dst = np.concatenate([(ring + 1) % num_nodes, (ring[::3] + 5) % num_nodes])
    csr, _ = normalize_edges(src, dst, num_nodes, undirected=True, dedup=True,
                             remove_self_loops=True)
    x = torch.stack([torch.arange(num_nodes, dtype=torch.float32),
                     torch.ones(num_nodes)], dim=1)
    y = torch.arange(num_nodes) % num_classes
    return Graph.homogeneous(csr, x, y, num_classes).target_view()


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test: on a shared 2-core machine two threads contend and run
    ~10x slower (files opt in with ``pytestmark = pytest.mark.usefixtures(...)``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def as_graph(view: TargetView) -> Graph:
    """The homogeneous ``Graph`` whose view is ``view`` (the fixtures give views): what the
    split, audit and writers take."""
    return Graph.homogeneous(view.csr, view.x, view.y, view.num_classes,
                             timestamps=view.timestamps, public_roles=view.public_roles)


@pytest.fixture
def tiny_graph() -> TargetView:
    return make_tiny_graph()


def small_params(**synthetic) -> Params:
    """Default params with a small synthetic graph (fast enough for unit tests)."""
    base = {"num_nodes": 1500, "num_features": 16, "avg_degree": 8.0, "num_classes": 3}
    base.update(synthetic)
    return params_from_dict({"dataset": {"synthetic": base}})


@pytest.fixture
def small_graph() -> TargetView:
    params = small_params()
    return prepare(params.dataset, params.seed)[0].target_view()


@pytest.fixture(scope="module")
def dask_cluster():
    """One LocalCluster of 4 workers per test module (a start costs seconds), scaled down with
    ``scale_cluster``."""
    import logging

    from distributed import LocalCluster

    with LocalCluster(n_workers=4, threads_per_worker=1, processes=True, memory_limit="512MiB",
                      dashboard_address=None, silence_logs=logging.ERROR) as local:
        yield local


def scale_cluster(cluster, workers: int) -> None:
    """``cluster`` with exactly ``workers`` workers (waits at most a minute)."""
    import time

    from distributed import Client

    cluster.scale(workers)
    with Client(cluster, set_as_default=False) as client:
        deadline = time.monotonic() + 60
        while len(client.scheduler_info()["workers"]) != workers:
            assert time.monotonic() < deadline, "the cluster did not scale"
            time.sleep(0.1)


def run_stages(folder, stages) -> None:
    """``gnnpipe <stage>`` for each of ``stages`` in ``folder``, in this process: fixtures that
    only need upstream artifacts skip a torch-importing interpreter start per stage."""
    import contextlib

    from gnnpipe.cli import main

    with contextlib.chdir(folder):
        for stage in stages:
            assert main([stage]) == 0, f"gnnpipe {stage} failed in {folder}"


# The files that spend minutes in dvc / torchrun subprocesses (tests/e2e/ and a few unit files),
# longest first, by file name wherever they live: `make test` hands whole files to two xdist
# workers (--dist loadfile) in collection order, and one of these last would leave a worker idle
# while the other finishes it.
SLOW_FILES = ("test_pipeline.py", "test_train_resume_ddp.py", "test_ddp_machines.py",
              "test_hetero_train.py",
              "test_publish.py", "test_reproducibility.py", "test_share_s3.py",
              "test_dist_bounds.py",
              "test_dask_prepare.py", "test_analyze_engines.py", "test_report.py",
              "test_sources.py",
              "test_node_blocks.py", "test_dask_propagate.py", "test_curvature.py",
              "test_faults.py", "test_link_train.py", "test_cluster_saint.py",
              "test_link_neighbor.py", "test_tls.py", "test_device.py", "test_engine.py")


def pytest_collection_modifyitems(items) -> None:
    order = {name: rank for rank, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: order.get(item.path.name, len(SLOW_FILES)))  # stable: file order kept


def pytest_configure(config) -> None:
    # pytest-xdist >= 3.6 hands out --dist loadfile's files by test count, most first, unless
    # told not to: the few-test, minutes-long SLOW_FILES would then start last
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
