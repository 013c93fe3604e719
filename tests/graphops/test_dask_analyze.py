"""analyze on cluster.engine: dask (gnnpipe/graphops/dask_analyze.py): the same report and degree
histogram as the local engine for any block size (block tasks in this process), on LocalClusters
of 1, 2 and 4 workers, and from the stage; degree figures from counts equal numpy's."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from gnnpipe.config import AnalyzeParams, NodeSplitParams
from gnnpipe.data.graph import UNLABELLED, Graph, TargetView
from gnnpipe.data.edges import csr_from_edges, normalize_edges
from gnnpipe.graphops import dask_analyze
from gnnpipe.graphops.analyze import analyze_graph, connected_components, degree_stats
from gnnpipe.graphops.dask_analyze import analyze_blocks, min_label_components
from gnnpipe.io.common import role_codes
from gnnpipe.io.csr_blocks import block_graph


class InProcess:
    """A client whose tasks run here, one after another."""

    def map(self, fn, items, pure=False):
        return [fn(item) for item in items]

    def gather(self, results):
        return results


def _graph(seed: int, n: int = 150, m: int = 120, undirected: bool = True) -> TargetView:
    """Random edges (sparse: many components and isolated nodes), 4 classes, a fifth of the
    nodes unlabelled."""
    rng = np.random.default_rng(seed)
    csr, _ = normalize_edges(rng.integers(0, n, m), rng.integers(0, n, m), n,
                             undirected=undirected, dedup=undirected, remove_self_loops=False)
    y = rng.integers(0, 4, n)
    y[rng.random(n) < 0.2] = UNLABELLED
    return Graph.homogeneous(csr=csr, x=torch.zeros(n, 1), y=torch.from_numpy(y),
                             num_classes=4).target_view()


def _blocks(client, graph: TargetView, scratch: Path, *phases) -> tuple[dict, list]:
    """``analyze_blocks`` of ``graph`` written as block files under ``scratch``."""
    with block_graph(graph.csr, scratch, name="analyze-graph") as folder:
        return analyze_blocks(client, folder, graph.y.numpy(), graph.num_classes,
                              AnalyzeParams(), *phases)


def _phases(graph: TargetView):
    from gnnpipe.data.graph import phase_csrs
    from gnnpipe.runtime.rng import make_rng
    from gnnpipe.splitting.split import split_nodes

    labelled = Graph.homogeneous(csr=graph.csr, x=graph.x, y=graph.y.clamp_min(0), num_classes=4)
    split = split_nodes(labelled, NodeSplitParams(mode="inductive"),
                        make_rng(0, "split"))
    return phase_csrs(split.message_graphs), role_codes(split.roles)


@pytest.mark.parametrize("block_rows", [1, 7, 64, 1000])
@pytest.mark.parametrize("seed, undirected", [(0, True), (1, False)])
def test_blocks_give_the_local_report_for_any_block_size(monkeypatch, tmp_path, block_rows,
                                                         seed, undirected):
    monkeypatch.setattr(dask_analyze, "BLOCK_ROWS", block_rows)
    graph = _graph(seed, undirected=undirected)
    phases = _phases(graph)
    want = analyze_graph(graph, AnalyzeParams(), *phases)
    got = _blocks(InProcess(), graph, tmp_path, *phases)
    assert got == want
    assert want[0]["components"]["count"] > 5 and want[0]["degree"]["isolated_nodes"] > 0
    assert list(tmp_path.iterdir()) == []  # block files removed


def test_a_link_split_and_an_edgeless_graph_match_local(tmp_path):
    graph = _graph(2)
    assert _blocks(InProcess(), graph, tmp_path) == analyze_graph(graph, AnalyzeParams())
    empty = csr_from_edges(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 5)
    bare = Graph.homogeneous(csr=empty, x=torch.zeros(5, 1), y=torch.arange(5) % 2,
                             num_classes=2).target_view()
    assert _blocks(InProcess(), bare, tmp_path) == analyze_graph(bare, AnalyzeParams())


def test_components_of_a_long_shuffled_chain_take_few_sweeps(monkeypatch, tmp_path):
    """Roots hook onto roots: a 4000-node path in random id order needs a few dozen sweeps."""
    monkeypatch.setattr(dask_analyze, "BLOCK_ROWS", 500)
    n = 4000
    order = np.random.default_rng(0).permutation(n)
    csr = csr_from_edges(order[:-1], order[1:], n)  # one direction only: weak connectivity
    sweeps = []
    real = dask_analyze.min_label_sweep
    monkeypatch.setattr(dask_analyze, "min_label_sweep",
                        lambda *a, **k: sweeps.append(a[0]) or real(*a, **k))
    with block_graph(csr, tmp_path) as folder:
        labels = min_label_components(InProcess(), folder, n)
    assert (labels == 0).all() and np.array_equal(connected_components(csr), np.zeros(n))
    assert len(sweeps) // 8 < 20, len(sweeps) // 8  # 9 here


def test_degree_figures_from_counts_equal_numpy_on_every_node():
    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(1, 400))
        degrees = (rng.pareto(1.1, n) * rng.integers(1, 20)).astype(np.int64)
        values, nodes = np.unique(degrees, return_counts=True)
        p50, p90, p99 = np.percentile(degrees, [50, 90, 99])
        got = degree_stats(values, nodes)
        assert got == degree_stats(degrees)
        assert (got["median"], got["p90"], got["p99"]) == (round(float(p50), 6),
                                                          round(float(p90), 6),
                                                          round(float(p99), 6)), trial
        assert got["mean"] == round(float(degrees.mean()), 6)


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
    from gnnpipe.graphops.curvature_blocks import edge_curvature_blocks
    from gnnpipe.graphops.partition import symmetric_simple
    from gnnpipe.graphops.reach import edge_curvature
    from tests.graphops.test_curvature_blocks import curvature_graph

    monkeypatch.setattr(dask_analyze, "BLOCK_ROWS", 40)
    graph = _graph(workers, undirected=workers != 2)
    phases = _phases(graph)
    csr = curvature_graph(workers)
    cfg = CurvatureParams(sample_edges=200, most_negative=5)
    want = edge_curvature(symmetric_simple(csr), cfg, np.random.default_rng(workers), 400)
    with _client(cluster, workers) as client:
        assert _blocks(client, graph, tmp_path, *phases) == analyze_graph(
            graph, AnalyzeParams(), *phases), workers
        with block_graph(csr, tmp_path) as folder:
            assert edge_curvature_blocks(client, folder, csr.num_nodes, cfg,
                                         np.random.default_rng(workers), 50, 400) == want
