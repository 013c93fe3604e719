"""HGT-style per-type budget sampling (gnnpipe/sampling/hetero.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import NodeSamplerInput

from gnnpipe.data.graph import Csr
from gnnpipe.sampling.hetero import HeteroBudgetSampler, hgt_loader

SIZES = {"paper": 400, "author": 300, "venue": 6}


def _rel(num_src, num_dst, num_edges, rng):
    return np.stack([rng.integers(0, num_src, num_edges), rng.integers(0, num_dst, num_edges)])


def _hetero(seed=0) -> HeteroData:
    """papers cite papers, authors write papers, papers sit in venues (venues are hubs); reverse
    types hold the flipped edges. ``x[:, 0]`` of every type is the node id."""
    rng = np.random.default_rng(seed)
    data = HeteroData()
    for t, n in SIZES.items():
        data[t].x = torch.arange(n, dtype=torch.float32)[:, None]
    cites = _rel(400, 400, 2000, rng)
    writes = _rel(300, 400, 1200, rng)
    venue = np.stack([np.arange(400), rng.integers(0, 6, 400)])
    for edge_type, pair in [(("paper", "cites", "paper"), cites),
                            (("author", "writes", "paper"), writes),
                            (("paper", "rev_writes", "author"), writes[::-1]),
                            (("paper", "in", "venue"), venue),
                            (("venue", "rev_in", "paper"), venue[::-1])]:
        data[edge_type].edge_index = torch.from_numpy(np.ascontiguousarray(pair))
    return data


def _typed_csr(src, dst, num_dst) -> Csr:
    """Rows = ``dst`` nodes (num_dst + 1 offsets), sources sorted per row."""
    order = np.lexsort((src, dst))
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=num_dst), out=indptr[1:])
    return Csr(torch.from_numpy(indptr), torch.from_numpy(np.asarray(src)[order].copy()))


def _csr_graph(data: HeteroData) -> tuple[dict, dict]:
    num_nodes = {t: data[t].num_nodes for t in data.node_types}
    csr = {}
    for edge_type in data.edge_types:
        src, dst = data[edge_type].edge_index.numpy()
        csr[edge_type] = _typed_csr(src, dst, num_nodes[edge_type[2]])
    return num_nodes, csr


def _sample(sampler, seeds, node_type="paper"):
    return sampler.sample_from_nodes(NodeSamplerInput(
        input_id=None, node=torch.as_tensor(seeds), input_type=node_type))


def test_budgets_are_respected_per_type_and_hop_and_met_where_the_graph_allows():
    data = _hetero()
    budgets = {"paper": [30, 20], "author": [25, 10], "venue": [2, 1]}
    sampler = HeteroBudgetSampler.from_hetero_data(data, budgets, seed=0)
    for trial in range(10):
        seeds = np.random.default_rng(trial).choice(400, 16, replace=False)
        out = _sample(sampler, seeds)
        for t, per_hop in budgets.items():
            counts = out.num_sampled_nodes[t]
            assert counts[0] == (16 if t == "paper" else 0)
            assert all(c <= b for c, b in zip(counts[1:], per_hop))
            assert sum(counts) == out.node[t].numel()
            assert out.node[t].unique().numel() == out.node[t].numel()  # no node twice
        # 16 papers have plenty of cited papers and authors: the budgets are filled
        assert out.num_sampled_nodes["paper"][1:] == [30, 20]
        assert out.num_sampled_nodes["author"][1:] == [25, 10]


def test_every_returned_edge_exists_and_the_subgraph_is_induced():
    data = _hetero(1)
    num_nodes, csr = _csr_graph(data)
    sampler = HeteroBudgetSampler(num_nodes, csr, [40, 40], seed=3)
    out = _sample(sampler, np.arange(0, 400, 25))
    assert set(out.row) == set(csr)
    for edge_type, graph in csr.items():
        src_type, _, dst_type = edge_type
        src, dst = graph.edge_index()
        g_src = out.node[src_type][out.row[edge_type]]
        g_dst = out.node[dst_type][out.col[edge_type]]
        assert torch.equal(g_src, src[out.edge[edge_type]])
        assert torch.equal(g_dst, dst[out.edge[edge_type]])
        # induced: every edge of the graph between sampled nodes is there, once
        inside = (torch.isin(src, out.node[src_type]) & torch.isin(dst, out.node[dst_type]))
        assert sorted(out.edge[edge_type].tolist()) == torch.nonzero(inside).flatten().tolist()


def test_sampled_nodes_are_reached_from_earlier_hops():
    data = _hetero(2)
    num_nodes, csr = _csr_graph(data)
    sampler = HeteroBudgetSampler(num_nodes, csr, [20, 20, 20], seed=0)
    out = _sample(sampler, [5, 17, 230])
    hop_of = {}
    for t in num_nodes:
        bounds = np.cumsum([0] + out.num_sampled_nodes[t])
        for h in range(len(bounds) - 1):
            for v in out.node[t][bounds[h]:bounds[h + 1]].tolist():
                hop_of[(t, v)] = h
    for (t, v), h in hop_of.items():
        if h == 0:
            continue
        # some edge v -> w of some type, with w of type d sampled at an earlier hop
        reached = False
        for (s, _, d), graph in csr.items():
            if s != t:
                continue
            src, dst = graph.edge_index()
            for w in dst[src == v].tolist():
                reached |= hop_of.get((d, w), h) < h
        assert reached, (t, v, h)


def test_a_node_is_drawn_with_probability_proportional_to_its_squared_normalised_degree():
    # seeds s0, s1 of type a; type-b sources u0, u5 -> s0 (in-degree 2: 1/2 each) and
    # u1..u5 -> s1 (in-degree 5: 1/5 each), so u5, a neighbour of both, sums 1/2 + 1/5
    src = np.array([0, 5, 1, 2, 3, 4, 5])
    dst = np.array([0, 0, 1, 1, 1, 1, 1])
    csr = {("b", "to", "a"): _typed_csr(src, dst, 2)}
    sampler = HeteroBudgetSampler({"a": 2, "b": 6}, csr, {"a": [0], "b": [1]}, seed=0)
    budget = np.array([1 / 2, 1 / 5, 1 / 5, 1 / 5, 1 / 5, 1 / 2 + 1 / 5])
    want = budget ** 2 / (budget ** 2).sum()
    draws = np.array([_sample(sampler, [0, 1], "a").node["b"].item() for _ in range(3000)])
    freq = np.bincount(draws, minlength=6) / draws.size
    assert np.allclose(freq, want, atol=0.03)


def test_a_hub_spreads_its_budget_over_max_neighbors_of_its_in_edges():
    # one venue with 200 papers: it adds 1/50 to 50 distinct papers, not 1/200 to all 200
    csr = {("paper", "in", "venue"): Csr(torch.tensor([0, 200]), torch.arange(200))}
    sampler = HeteroBudgetSampler({"venue": 1, "paper": 200}, csr, [10], seed=0)
    budget = {t: (np.empty(0, dtype=np.int64), np.empty(0)) for t in ("venue", "paper")}
    local = {"venue": np.array([0]), "paper": np.full(200, -1)}
    sampler._update_budget(budget, {"venue": np.array([0])}, local, np.random.default_rng(0))
    ids, score = budget["paper"]
    assert ids.size == 50 and np.unique(ids).size == 50 and np.allclose(score, 1 / 50)
    uncapped = HeteroBudgetSampler({"venue": 1, "paper": 200}, csr, [10], max_neighbors=-1)
    budget = {t: (np.empty(0, dtype=np.int64), np.empty(0)) for t in ("venue", "paper")}
    uncapped._update_budget(budget, {"venue": np.array([0])}, local, np.random.default_rng(0))
    assert budget["paper"][0].size == 200 and np.allclose(budget["paper"][1], 1 / 200)


def test_node_loader_gives_hetero_batches_with_the_seeds_first():
    data = _hetero(3)
    # shuffle one edge type's storage order: e_id must still index data's own edges
    perm = torch.randperm(data["author", "writes", "paper"].num_edges,
                          generator=torch.Generator().manual_seed(0))
    data["author", "writes", "paper"].edge_index = data["author", "writes", "paper"].edge_index[
        :, perm]
    train = torch.zeros(400, dtype=torch.bool)
    train[::3] = True
    loader = hgt_loader(data, {"paper": [32, 16], "author": [32, 16], "venue": [4, 4]},
                        ("paper", train), batch_size=24, shuffle=True, seed=0)
    seen = []
    for batch in loader:
        paper = batch["paper"]
        b = paper.batch_size
        # a bool mask gives PyG input ids equal to the node ids
        assert torch.equal(paper.n_id[:b], paper.input_id) and bool(train[paper.n_id[:b]].all())
        for t in SIZES:
            assert torch.equal(batch[t].x[:, 0].long(), batch[t].n_id)
        for edge_type in batch.edge_types:
            s, _, d = edge_type
            ei = batch[edge_type].edge_index
            full = data[edge_type].edge_index[:, batch[edge_type].e_id]
            assert torch.equal(batch[s].n_id[ei[0]], full[0])
            assert torch.equal(batch[d].n_id[ei[1]], full[1])
        seen.append(paper.n_id[:b])
    assert torch.equal(torch.cat(seen).sort().values, torch.nonzero(train).flatten())


def test_same_seed_same_batches_and_epochs_restart_the_stream():
    data = _hetero(4)

    def run(seed, epoch=None):
        sampler = HeteroBudgetSampler.from_hetero_data(data, [16, 16], seed=seed)
        if epoch is not None:
            sampler.set_epoch(epoch)
        return [_sample(sampler, [1, 2, 3]).node["author"] for _ in range(3)]

    assert all(torch.equal(a, b) for a, b in zip(run(0), run(0)))
    assert not all(torch.equal(a, b) for a, b in zip(run(0), run(1)))
    assert not all(torch.equal(a, b) for a, b in zip(run(0, 2), run(5, 2)))
    assert all(torch.equal(a, b) for a, b in zip(run(7, 2), run(7, 2)))


def test_bad_arguments_are_value_errors():
    data = _hetero()
    num_nodes, csr = _csr_graph(data)
    with pytest.raises(ValueError, match="node type 'paperz'"):
        HeteroBudgetSampler(num_nodes, csr, {"paperz": [3]})
    with pytest.raises(ValueError, match="same number"):
        HeteroBudgetSampler(num_nodes, csr, {"paper": [3, 3], "author": [3]})
    with pytest.raises(ValueError, match="rows"):
        HeteroBudgetSampler({**num_nodes, "venue": 7}, csr, [3])
    with pytest.raises(ValueError, match="max_neighbors"):
        HeteroBudgetSampler(num_nodes, csr, [3], max_neighbors=0)
    sampler = HeteroBudgetSampler(num_nodes, csr, [3])
    with pytest.raises(ValueError, match="input node type"):
        _sample(sampler, [0], "journal")
    with pytest.raises(ValueError, match="seed ids"):
        _sample(sampler, [400], "paper")
    with pytest.raises(NotImplementedError):
        NodeLoader(data, node_sampler=sampler, input_nodes="paper").node_sampler \
            .sample_from_edges(None)
