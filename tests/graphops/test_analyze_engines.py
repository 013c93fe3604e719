"""analyze's block tasks on LocalClusters of 1, 2 and 4 workers: the stage on Dask writes the bytes
the stage on local writes (both by blocks), bad input gets the same one-line errors, and the
report and curvature sample on each cluster size equal the whole-graph oracles
(tests/graphops/test_analyze.py, tests/graphops/test_curvature.py)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from gnnpipe.config import AnalyzeParams
from block_files import block_graph
from tests.graphops.test_analyze import (_graph, blocks_report, node_phases, whole_graph_report,
                                        with_train)


# ---------------------------------------------------------------------- on LocalClusters
@pytest.fixture(scope="module")
def cluster():
    """One LocalCluster of 4 workers for the module (a start costs seconds), scaled down."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=4, threads_per_worker=1, processes=True, memory_limit="512MiB",
                      dashboard_address=None, silence_logs=logging.ERROR) as local:
        yield local


def _client(cluster, workers: int):
    from distributed import Client

    cluster.scale(workers)
    client = Client(cluster, set_as_default=False)
    deadline = time.monotonic() + 60
    while len(client.scheduler_info()["workers"]) != workers:
        assert time.monotonic() < deadline, "the cluster did not scale"
        time.sleep(0.1)
    return client


@pytest.mark.parametrize("layout", ["homogeneous", "typed"])
def test_the_stage_on_dask_writes_the_local_metrics(cluster, tmp_path, monkeypatch, layout):
    """Either layout: the block files come from the prepared relation's stored rows."""
    from gnnpipe.cli import main

    _client(cluster, 4).close()  # the cluster as started: the smaller ones' test comes last
    monkeypatch.chdir(tmp_path)
    params = {"dataset": {"layout": layout, "synthetic": {"num_nodes": 300, "num_features": 4,
                                                          "num_classes": 3}},
              "split": {"node": {"mode": "inductive"}},
              "analyze": {"curvature": {"sample_edges": 60}}}  # a drawn sample, not every edge
    Path("params.yaml").write_text(yaml.safe_dump(params))
    assert main(["prepare"]) == 0 and main(["split"]) == 0 and main(["analyze"]) == 0
    outputs = [Path("metrics/graph.json"), Path("metrics/degree_hist.csv")]
    local = [p.read_bytes() for p in outputs]
    params["cluster"] = {"engine": "dask", "address": cluster.scheduler_address}
    Path("params.yaml").write_text(yaml.safe_dump(params))
    assert main(["analyze"]) == 0
    assert [p.read_bytes() for p in outputs] == local
    assert not [p for p in Path("metrics").iterdir() if p.name.startswith(".")]


def _bad_input_line(capsys, engine: dict) -> str:
    from gnnpipe.cli import main

    params = yaml.safe_load(Path("params.yaml").read_text())
    Path("params.yaml").write_text(yaml.safe_dump({**params, "cluster": engine}))
    assert main(["analyze"]) == 1 and main(["propagate"]) == 1
    return capsys.readouterr().err


def test_bad_input_gets_the_local_one_line_errors(cluster, tmp_path, monkeypatch, capsys):
    """A torn message graph: analyze and propagate on dask fail with the local engine's lines."""
    from gnnpipe.cli import main

    monkeypatch.chdir(tmp_path)
    params = {"dataset": {"synthetic": {"num_nodes": 120, "num_features": 4, "num_classes": 3}}}
    Path("params.yaml").write_text(yaml.safe_dump(params))
    assert main(["prepare"]) == 0 and main(["split"]) == 0
    torn = Path("data/split/message_train.pt")
    torn.write_bytes(torn.read_bytes()[:100])
    capsys.readouterr()
    local = _bad_input_line(capsys, {"engine": "local"})
    assert local.count("\n") == 2 and "message_train.pt" in local, local
    assert _bad_input_line(capsys, {"engine": "dask", "address": cluster.scheduler_address}) \
        == local


@pytest.mark.parametrize("workers", [4, 2, 1])
def test_clusters_of_4_2_and_1_workers_give_the_local_report_and_curvature_sample(
        cluster, monkeypatch, tmp_path, workers):
    """Largest cluster first, each size once (a worker started again costs seconds): the
    analyze report, and the curvature sample, of the local engine."""
    from gnnpipe.config.schema import CurvatureParams
    from gnnpipe.graphops.analyze import analyze_blocks
    from gnnpipe.graphops.partition import symmetric_simple
    from gnnpipe.graphops.reach import edge_curvature
    from tests.graphops.test_curvature import curvature_graph, whole_graph_curvature

    graph = _graph(workers, undirected=workers != 2)
    phases = node_phases(graph)
    csr = curvature_graph(workers)
    cfg = CurvatureParams(sample_edges=200, most_negative=5)
    want = whole_graph_curvature(symmetric_simple(csr), cfg, np.random.default_rng(workers), 400)
    with _client(cluster, workers) as client:
        with block_graph(graph.csr, tmp_path) as folder:
            got = analyze_blocks(client, folder, graph.y.numpy(), graph.num_classes,
                                 AnalyzeParams(), *with_train(folder, *phases), block_rows=40)
        assert got == whole_graph_report(graph, AnalyzeParams(), *phases), workers
        assert got == blocks_report(graph, AnalyzeParams(), *phases, block_rows=33)
        with block_graph(csr, tmp_path) as folder:
            assert edge_curvature(client, folder, csr.num_nodes, cfg,
                                  np.random.default_rng(workers), 50, 400) == want
