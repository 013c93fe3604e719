"""Temporal neighbour sampling (gnnpipe/sampling/temporal.py through CsrNeighborSampler)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import NodeSamplerInput

from gnnpipe import cli
from gnnpipe.config import ParamsError, params_from_dict
from gnnpipe.data.graph import EDGE, Csr
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.sampling import CsrNeighborSampler
from graph_oracle import restrict
from gnnpipe.sampling.temporal import TemporalIndex, align_edge_times, temporal_options


def _graph(num_nodes=150, num_edges=2400, seed=0, int_times=False):
    """A random directed multigraph (repeated edges kept) with one time per edge (CSR order)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, num_nodes, (2, num_edges))
    csr = csr_from_edges(src, dst, num_nodes)
    times = rng.integers(0, 50, num_edges) if int_times else rng.random(num_edges)
    return csr, times


def _sample(sampler, seeds, seed_time):
    return sampler.sample_from_nodes(NodeSamplerInput(
        input_id=None, node=torch.as_tensor(seeds), time=torch.as_tensor(seed_time)))


def _check_edges_exist(csr: Csr, out):
    """Every sampled edge is the CSR edge ``out.edge`` points at, in global ids."""
    src, dst = csr.edge_index()
    assert torch.equal(out.node[out.row], src[out.edge])
    assert torch.equal(out.node[out.col], dst[out.edge])


@pytest.mark.parametrize("strategy,replace,subgraph_type", [
    ("uniform", False, "directional"), ("uniform", True, "directional"),
    ("last", False, "directional"), ("uniform", False, "induced"),
    ("uniform", False, "bidirectional")])
def test_no_sampled_edge_is_later_than_its_seed_over_many_batches(strategy, replace,
                                                                  subgraph_type):
    csr, times = _graph(int_times=strategy == "last")
    sampler = CsrNeighborSampler(csr, [6, 4], edge_time=times, temporal_strategy=strategy,
                                 replace=replace, subgraph_type=subgraph_type, seed=1)
    rng = np.random.default_rng(2)
    edge_time = torch.as_tensor(times)
    sampled = 0
    for _ in range(40):
        seeds = rng.integers(0, csr.num_nodes, 24)
        seed_time = rng.uniform(times.min(), times.max(), 24)
        out = _sample(sampler, seeds, seed_time)
        tree = out.batch[out.col]  # the seed whose tree holds each edge
        assert bool((out.batch[out.row] == tree).all())  # trees stay disjoint
        assert bool((edge_time[out.edge] <= torch.as_tensor(seed_time)[tree]).all())
        if subgraph_type != "bidirectional":  # the reversed copies point the other way
            _check_edges_exist(csr, out)
        sampled += out.edge.numel()
    assert sampled > 1000  # the constraint filtered, it did not empty the batches


def test_full_fanout_takes_exactly_the_allowed_in_edges_of_every_hop():
    csr, times = _graph(num_edges=900)
    sampler = CsrNeighborSampler(csr, [-1, -1], edge_time=times, seed=0)
    src, dst = csr.edge_index().numpy()
    for seed, t in [(3, 0.5), (10, 0.2), (77, 0.9)]:
        out = _sample(sampler, [seed], [t])
        got = np.sort(out.edge.numpy())
        # brute force: breadth-first over in-edges with time <= t, each node expanded once
        want, frontier, seen = [], {seed}, {seed}
        for _ in range(2):
            hop = np.flatnonzero(np.isin(dst, list(frontier)) & (times <= t))
            want.extend(hop)
            frontier = set(src[hop]) - seen
            seen |= frontier
        assert np.array_equal(got, np.sort(want))


def test_uniform_strategy_draws_every_allowed_edge_equally_often_and_no_other():
    # one target with 8 in-edges at times 0..7; seed time 4.5 allows the 5 earliest
    csr = csr_from_edges(np.arange(1, 9), np.zeros(8, dtype=np.int64), 9)
    times = np.arange(8, dtype=np.float64)
    sampler = CsrNeighborSampler(csr, [2], edge_time=times, seed=0)
    counts = np.zeros(8)
    for _ in range(2000):
        out = _sample(sampler, [0], [4.5])
        assert out.edge.numel() == 2 and out.edge[0] != out.edge[1]  # without replacement
        counts[out.edge.numpy()] += 1
    assert counts[5:].sum() == 0
    assert np.allclose(counts[:5] / 2000, 2 / 5, atol=0.05)


def test_last_strategy_picks_the_most_recent_allowed_edges():
    csr, times = _graph(num_edges=1500, seed=3)
    sampler = CsrNeighborSampler(csr, [3], edge_time=times, temporal_strategy="last", seed=0)
    dst = csr.targets().numpy()
    rng = np.random.default_rng(4)
    seeds = rng.choice(csr.num_nodes, 40, replace=False)
    seed_time = rng.uniform(0.2, 1.0, 40)
    out = _sample(sampler, seeds, seed_time)
    for i, (v, t) in enumerate(zip(seeds, seed_time)):
        allowed = np.flatnonzero((dst == v) & (times <= t))
        want = np.sort(times[allowed])[::-1][:3]  # the 3 latest allowed times
        got = np.sort(times[out.edge.numpy()[out.col.numpy() == i]])[::-1]
        assert np.array_equal(got, want)
    again = _sample(sampler, seeds, seed_time)
    assert torch.equal(out.edge, again.edge)  # 'last' draws nothing at random


def test_node_time_limits_the_neighbours_and_defaults_the_seed_times():
    csr, _ = _graph(seed=5)
    node_time = np.random.default_rng(6).random(csr.num_nodes)
    sampler = CsrNeighborSampler(csr, [5, 5], node_time=node_time, seed=0)
    seeds = torch.arange(0, csr.num_nodes, 3)
    out = sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds))  # no times
    tree = out.batch[out.row]
    limit = torch.as_tensor(node_time)[seeds][tree]
    assert bool((torch.as_tensor(node_time)[out.node[out.row]] <= limit).all())
    assert out.edge.numel() > 100


def test_node_loader_passes_input_time_and_data_edge_times_follow_edge_index_order():
    csr, times = _graph(num_edges=1200, seed=7)
    src, dst = csr.edge_index()
    shuffle = torch.randperm(src.numel(), generator=torch.Generator().manual_seed(0))
    data = Data(edge_index=torch.stack([src, dst])[:, shuffle], num_nodes=csr.num_nodes,
                x=torch.arange(csr.num_nodes, dtype=torch.float32)[:, None])
    edge_time = torch.as_tensor(times)[shuffle]  # in data.edge_index order
    sampler = CsrNeighborSampler(data, [4, 4], edge_time=edge_time, seed=0)
    seeds = torch.arange(60)
    seed_time = torch.rand(60, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    loader = NodeLoader(data, node_sampler=sampler, input_nodes=seeds, input_time=seed_time,
                        batch_size=20)
    for batch in loader:
        assert torch.equal(batch.seed_time, seed_time[batch.input_id])
        assert torch.equal(batch.x[:batch.batch_size, 0].long(), batch.n_id[:batch.batch_size])
        tree = batch.batch[batch.edge_index[1]]
        assert bool((edge_time[batch.e_id] <= batch.seed_time[tree]).all())
        assert torch.equal(batch.n_id[batch.edge_index[0]], data.edge_index[0, batch.e_id])


def test_temporal_index_counts_the_allowed_prefix_of_each_row():
    csr, times = _graph(num_edges=500, int_times=True, seed=8)
    index = TemporalIndex(csr.indptr.numpy(), csr.indices.numpy(), times)
    rows = np.arange(csr.num_nodes)
    start = csr.indptr.numpy()[:-1]
    dst = csr.targets().numpy()
    for t in (-1, 0, 17, 49, 60):
        got = index.allowed(rows, start, index.bound(np.full(rows.size, t)))
        want = np.bincount(dst[times <= t], minlength=csr.num_nodes)
        assert np.array_equal(got, want)
    # rows keep their span; inside each row time ascends; perm maps back to the CSR
    assert np.array_equal(index.indices, csr.indices.numpy()[index.perm])
    assert np.array_equal(dst[index.perm], dst)
    assert np.array_equal(index.time, times[index.perm])


def test_align_edge_times_follows_a_restricted_message_graph():
    csr, times = _graph(num_edges=1000, seed=9)  # a multigraph: repeated (src, dst) pairs
    keep = torch.from_numpy(np.random.default_rng(0).random(csr.num_nodes) < 0.6)
    sub = restrict(csr, keep)
    got = align_edge_times(csr, times, sub)
    keep_edge = (keep[csr.indices] & keep[csr.targets()]).numpy()
    assert np.array_equal(got, times[keep_edge])  # restrict keeps the CSR order
    assert align_edge_times(csr, times, csr) is times
    other = csr_from_edges(np.array([0]), np.array([1]), csr.num_nodes)
    if not bool(((csr.indices == 0) & (csr.targets() == 1)).any()):
        with pytest.raises(ValueError, match="lacks"):
            align_edge_times(csr, times, other)


def test_bad_temporal_arguments_are_value_errors():
    csr, times = _graph(num_edges=300)
    with pytest.raises(ValueError, match="one time per edge"):
        CsrNeighborSampler(csr, [2], edge_time=times[:-1])
    with pytest.raises(ValueError, match="temporal_strategy"):
        CsrNeighborSampler(csr, [2], edge_time=times, temporal_strategy="first")
    with pytest.raises(ValueError, match="not both"):
        CsrNeighborSampler(csr, [2], edge_time=times, node_time=np.zeros(csr.num_nodes))
    with pytest.raises(ValueError, match="pyg-lib"):
        CsrNeighborSampler(csr, [2], edge_time=times, backend="pyg-lib")
    with pytest.raises(ValueError, match="NaN"):
        CsrNeighborSampler(csr, [2], edge_time=np.full(times.size, np.nan))
    temporal = CsrNeighborSampler(csr, [2], edge_time=times)
    assert temporal.disjoint and temporal.backend == "gnnpipe"
    with pytest.raises(ValueError, match="needs a time per seed"):
        temporal.sample_from_nodes(NodeSamplerInput(input_id=None, node=torch.arange(3)))
    plain = CsrNeighborSampler(csr, [2], backend="gnnpipe")
    with pytest.raises(ValueError, match="no edge_time or node_time"):
        _sample(plain, [0, 1], [0.5, 0.5])


# ------------------------------------------------------------------------ the train stage
def _stage_params(tmp_path, train: dict, dataset: dict | None = None) -> None:
    base = {"dataset": {"synthetic": {"num_nodes": 500, "num_features": 8, "num_classes": 3,
                                      "timestamps": True}},
            "train": {"sampler": "neighbor", "neighbor": {"num_neighbors": [4, 4]}, "epochs": 2,
                      "patience": 2, "hidden": 8, "batch_size": 128, "checkpoint": {"every": 0},
                      **train}}
    if dataset is not None:
        base["dataset"] = dataset
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(base))


def _user_tables(folder, with_edge_time: bool) -> dict:
    """A parquet dataset: node times 0..N-1 ("t"), edge times ("when") in the same unit."""
    rng = np.random.default_rng(0)
    n, e = 300, 2400
    y = rng.integers(0, 3, n)
    x = rng.normal(size=(n, 4)) + y[:, None]
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": np.arange(n), "x": pa.array(x.tolist()), "label": y,
                             "t": np.arange(n, dtype=np.int64)}), folder / "nodes.parquet")
    edges = {"src": rng.integers(0, n, e), "dst": rng.integers(0, n, e)}
    if with_edge_time:
        edges["when"] = rng.integers(0, n, e)
    pq.write_table(pa.table(edges), folder / "edges.parquet")
    return {"source": "parquet", "path": str(folder),
            "nodes": {"timestamp": "t"}, "edges": {"timestamp": "when" if with_edge_time else ""}}


def test_train_stage_samples_by_node_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data/raw").mkdir(parents=True)
    _stage_params(tmp_path, {"temporal": {"by": "node", "strategy": "last"}})
    for stage in ("prepare", "split", "propagate", "train"):
        assert cli.main([stage]) == 0, stage
    assert json.loads((tmp_path / "metrics/train.json").read_text())["epochs_run"] == 2


def test_train_stage_samples_by_edge_time_of_the_train_graph(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dataset = _user_tables(tmp_path / "raw", with_edge_time=True)
    _stage_params(tmp_path, {"temporal": {"by": "edge"}}, dataset)
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    params["split"] = {"node": {"strategy": "time", "mode": "inductive"}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    for stage in ("prepare", "split", "propagate", "train"):
        assert cli.main([stage]) == 0, stage
    # the options the stage builds: edge times realigned to the (smaller) train graph
    from gnnpipe import io

    graph = io.read_graph(tmp_path / "data/prepared").target_view()
    train_csr = io.read_typed_message_graphs(tmp_path / "data/split")[1]["train"][EDGE]
    assert train_csr.num_edges < graph.csr.num_edges
    table = io.read_edge_attrs(tmp_path / "data/prepared", EDGE)
    full_time = table.column("timestamp").to_numpy()
    options = temporal_options("edge", "uniform", np.arange(5), train_csr, graph.timestamps,
                               graph.csr, full_time)
    keys = graph.csr.targets() * graph.num_nodes + graph.csr.indices
    time_of = dict(zip(keys.tolist(), full_time.tolist()))  # dedup: one time per directed edge
    train_keys = train_csr.targets() * graph.num_nodes + train_csr.indices
    assert options["edge_time"].tolist() == [time_of[k] for k in train_keys.tolist()]
    assert options["input_time"].tolist() == graph.timestamps[:5].tolist()


def test_missing_timestamps_are_named_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    dataset = _user_tables(tmp_path / "raw", with_edge_time=False)
    _stage_params(tmp_path, {"temporal": {"by": "edge"}}, dataset)
    for stage in ("prepare", "split", "propagate"):
        assert cli.main([stage]) == 0, stage
    assert cli.main(["train"]) == 1
    assert "dataset.edges.timestamp" in capsys.readouterr().err
    csr, _ = _graph(num_edges=100)
    with pytest.raises(ValueError, match="dataset.nodes.timestamp"):
        temporal_options("node", "uniform", np.arange(3), csr, None)
    with pytest.raises(ParamsError, match="train.temporal.by='node' with train.sampler='full'"):
        params_from_dict({"train": {"temporal": {"by": "node"}}})
