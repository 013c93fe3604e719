"""Neighbor sampling: PyG-standard batches, exactness at fan-out -1, fan-out, modes, training."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from conftest import as_graph
from torch_geometric.data import Data
from torch_geometric.loader import LinkLoader, NodeLoader
from torch_geometric.nn.models import GCN, GraphSAGE
from torch_geometric.sampler import NegativeSampling, NodeSamplerInput

import gnnpipe.sampling as sampling
from gnnpipe.sampling import hops
from gnnpipe.config import (NeighborParams, NodeSplitParams, ParamsError, TrainParams,
                            params_from_dict)
from gnnpipe.data.graph import Csr, phase_csrs
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.training.models import build_model
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sampling import CsrNeighborSampler, neighbor_loader, pick_edges, resolve_backend
from gnnpipe.sampling.builders import neighbor_batches
from graph_oracle import edge_keys, restrict
from split_oracle import split_nodes
from gnnpipe.io.common import role_codes
from gnnpipe.training.train import build_inputs, fit

MODES = [("directional", False), ("bidirectional", False), ("induced", False),
         ("directional", True), ("induced", True)]


def _random_directed_graph(num_nodes=200, num_edges=1600, seed=0) -> Csr:
    """Skewed in-degrees (some nodes far above any fan-out used here), no duplicate edges."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_nodes, num_edges)
    dst = (rng.pareto(1.5, num_edges) * 10).astype(np.int64) % num_nodes
    keys = np.unique(src * num_nodes + dst)
    src, dst = keys // num_nodes, keys % num_nodes
    keep = src != dst
    return csr_from_edges(src[keep], dst[keep], num_nodes)


def _data(csr: Csr, num_features=1) -> Data:
    """Features = node id in column 0, so a wrong gather shows."""
    n = csr.num_nodes
    x = torch.cat([torch.arange(n, dtype=torch.float32)[:, None],
                   torch.randn(n, num_features - 1, generator=torch.Generator().manual_seed(0))], 1)
    return Data(x=x, y=torch.arange(n) % 3, edge_index=csr.edge_index(), num_nodes=n)


def _batches(csr, num_neighbors, batch_size=16, seeds=None, **kw):
    sampler = CsrNeighborSampler(csr, num_neighbors, seed=kw.pop("seed", 0), **kw)
    seeds = torch.arange(csr.num_nodes) if seeds is None else seeds
    return list(NodeLoader(_data(csr), node_sampler=sampler, input_nodes=seeds,
                           batch_size=batch_size))


def _neighbors(csr: Csr, v: int) -> set[int]:
    return set(csr.indices[csr.indptr[v]:csr.indptr[v + 1]].tolist())


# ------------------------------------------------------------------------- standard batches
def test_seeds_come_first_and_features_are_gathered_by_node_id(tiny_graph):
    data = Data(x=tiny_graph.x, y=tiny_graph.y, edge_index=tiny_graph.csr.edge_index())
    sampler = CsrNeighborSampler(tiny_graph.csr, [2, 2], seed=0)
    seeds = torch.tensor([7, 3, 11, 0, 5])
    loader = NodeLoader(data, node_sampler=sampler, input_nodes=seeds, batch_size=3)
    batches = list(loader)
    assert [b.batch_size for b in batches] == [3, 2]
    assert torch.equal(torch.cat([b.n_id[:b.batch_size] for b in batches]), seeds)
    for batch in batches:
        assert torch.equal(batch.x[:, 0].long(), batch.n_id)
        assert torch.equal(batch.y, tiny_graph.y[batch.n_id])
        assert batch.n_id.unique().numel() == batch.num_nodes  # shared mode: each node once
        assert 0 <= batch.edge_index.min() and batch.edge_index.max() < batch.num_nodes
        assert batch.num_sampled_nodes[0] == batch.batch_size
        assert sum(batch.num_sampled_nodes) == batch.num_nodes
        assert sum(batch.num_sampled_edges) == batch.num_edges


def test_edges_point_from_sampled_neighbour_into_target_on_a_directed_graph():
    csr = _random_directed_graph()
    src_of, dst_of = csr.edge_index()
    for batch in _batches(csr, [3, 2]):
        row, col = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
        assert torch.equal(src_of[batch.e_id], row)  # e_id names the original edge ...
        assert torch.equal(dst_of[batch.e_id], col)  # ... and its direction: source -> target
        first = batch.num_sampled_edges[0]
        assert (batch.edge_index[1, :first] < batch.batch_size).all()  # hop 1 feeds the seeds


def test_new_nodes_get_local_ids_in_order_of_first_appearance():
    """pyg-lib's order: a node drawn twice in one hop keeps the slot of its first draw, and a
    repeated seed is its first copy."""
    # in-edges: of 0 from 2 and 3, of 1 from 0 and 2, of 3 from 4
    csr = csr_from_edges(np.array([2, 3, 0, 2, 4]), np.array([0, 0, 1, 1, 3]), 5)
    for subgraph_type in ("directional", "induced"):
        sampler = CsrNeighborSampler(csr, [-1, -1], subgraph_type=subgraph_type, seed=0)
        out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([0, 1])))
        assert out.node.tolist() == [0, 1, 2, 3, 4]  # slots 2, 3, 2: not [0, 1, 3, 2, 4]
        assert out.num_sampled_nodes == [2, 2, 1]
        out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([0, 1, 0])))
        into_1 = out.row[out.col == 1]
        assert out.node[into_1].tolist() == [0, 2] and into_1.tolist() == [0, 3]


def test_sampler_built_from_pyg_data_reports_its_edge_permutation():
    csr = _random_directed_graph()
    edge_index = csr.edge_index()
    shuffled = edge_index[:, torch.randperm(edge_index.shape[1],
                                            generator=torch.Generator().manual_seed(1))]
    data = Data(x=torch.arange(csr.num_nodes, dtype=torch.float32)[:, None],
                edge_index=shuffled, num_nodes=csr.num_nodes)
    sampler = CsrNeighborSampler(data, [4, 4], seed=0)
    assert sampler.edge_permutation is not None
    for batch in NodeLoader(data, node_sampler=sampler, input_nodes=torch.arange(40),
                            batch_size=20):
        assert torch.equal(shuffled[:, batch.e_id], batch.n_id[batch.edge_index])


# ------------------------------------------------------------------------------- exactness
def _full_and_sampled(model, csr, num_neighbors, subgraph_type="directional", disjoint=False):
    data = _data(csr, num_features=8)
    model.eval()
    with torch.no_grad():
        full = model(data.x, data.edge_index)
        sampler = CsrNeighborSampler(csr, num_neighbors, subgraph_type=subgraph_type,
                                     disjoint=disjoint, seed=0)
        loader = NodeLoader(data, node_sampler=sampler, input_nodes=torch.arange(csr.num_nodes),
                            batch_size=37)
        for batch in loader:
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            yield full[batch.n_id[:batch.batch_size]], out


@pytest.mark.parametrize("subgraph_type,disjoint", MODES)
def test_full_fanout_gives_full_graph_sage_outputs_at_the_seeds(subgraph_type, disjoint):
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, num_layers=2, out_channels=4)
    pairs = list(_full_and_sampled(model, _undirected(), [-1, -1], subgraph_type, disjoint))
    assert len(pairs) == 7
    for full, sampled in pairs:
        torch.testing.assert_close(sampled, full, atol=1e-5, rtol=1e-5)


def test_full_fanout_gives_full_graph_gcn_outputs_with_one_extra_hop():
    """GCN normalises by the source's degree too, so the sources of layer 1 (hop-2 nodes) need
    their own in-edges: 2 layers are exact with 3 hops at fan-out -1."""
    torch.manual_seed(0)
    model = GCN(8, 16, num_layers=2, out_channels=4)
    for full, sampled in _full_and_sampled(model, _undirected(), [-1, -1, -1]):
        torch.testing.assert_close(sampled, full, atol=1e-5, rtol=1e-5)
    # ... and the check has teeth: one hop short, some seed differs
    short = list(_full_and_sampled(model, _undirected(), [-1, -1]))
    assert max(float((s - f).abs().max()) for f, s in short) > 1e-3


def test_small_fanout_is_not_the_full_graph_output():
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, num_layers=2, out_channels=4)
    pairs = list(_full_and_sampled(model, _undirected(), [1, 1]))
    assert max(float((s - f).abs().max()) for f, s in pairs) > 1e-3


def _undirected(num_nodes=250, seed=0) -> Csr:
    csr = _random_directed_graph(num_nodes, 6 * num_nodes, seed)
    src, dst = csr.edge_index().numpy()
    keys = np.unique(np.concatenate([src * num_nodes + dst, dst * num_nodes + src]))
    return csr_from_edges(keys // num_nodes, keys % num_nodes, num_nodes)


# ------------------------------------------------------------------------------ fan-out, replace
def test_fanout_is_respected_per_hop_and_met_where_the_degree_allows():
    csr = _random_directed_graph()
    deg = csr.degrees()
    fanout = [3, 2]
    binds = [0, 0]
    for batch in _batches(csr, fanout):
        start, frontier_start = 0, 0
        for hop, k in enumerate(fanout):
            stop = start + batch.num_sampled_edges[hop]
            frontier = batch.num_sampled_nodes[hop]
            targets = batch.edge_index[1, start:stop] - frontier_start
            assert ((targets >= 0) & (targets < frontier)).all()  # edges of this hop's frontier
            got = torch.bincount(targets, minlength=frontier)
            want = deg[batch.n_id[frontier_start:frontier_start + frontier]].clamp(max=k)
            assert torch.equal(got, want)  # never more than k, all of them when deg <= k
            binds[hop] += int((want < deg[batch.n_id[frontier_start:][:frontier]]).sum())
            start, frontier_start = stop, frontier_start + frontier
    assert min(binds) > 20, binds  # the fan-out actually cut neighbourhoods at both hops


def test_without_replacement_no_edge_twice_with_replacement_exactly_k_draws():
    csr = _random_directed_graph()
    deg = csr.degrees()
    for batch in _batches(csr, [5, 5]):
        assert batch.e_id.unique().numel() == batch.e_id.numel()
    repeated = 0
    for batch in _batches(csr, [5, 5], replace=True):
        seeds_in = torch.bincount(batch.edge_index[1, :batch.num_sampled_edges[0]],
                                  minlength=batch.batch_size)
        assert torch.equal(seeds_in, torch.where(deg[batch.n_id[:batch.batch_size]] > 0, 5, 0))
        repeated += batch.e_id.numel() - batch.e_id.unique().numel()
        assert batch.n_id.unique().numel() == batch.num_nodes  # nodes still deduplicated
    assert repeated > 0


@pytest.mark.parametrize("replace", [False, True])
def test_every_neighbour_is_equally_likely(replace):
    rng = np.random.default_rng(0)
    deg, k, draws = 12, 4, 6000
    pos, owner = pick_edges(np.zeros(draws, dtype=np.int64), np.full(draws, deg), k, replace, rng)
    assert pos.size == draws * k and np.array_equal(owner, np.repeat(np.arange(draws), k))
    if not replace:  # k distinct offsets per row
        rows = np.sort(pos.reshape(draws, k), axis=1)
        assert (np.diff(rows, axis=1) > 0).all()
    freq = np.bincount(pos, minlength=deg) / (draws * k)
    assert np.abs(freq - 1 / deg).max() < 0.01, freq


def test_same_seed_same_batches_other_seed_other_batches():
    csr = _random_directed_graph()

    def run(seed):
        return [(b.n_id, b.edge_index, b.e_id) for b in _batches(csr, [3, 2], seed=seed)]

    first, again, other = run(5), run(5), run(6)
    assert all(torch.equal(a, b) for x, y in zip(first, again) for a, b in zip(x, y))
    assert not all(torch.equal(x[0], y[0]) for x, y in zip(first, other))


def test_generator_seed_and_global_seed_are_reproducible():
    csr = _random_directed_graph()
    inputs = NodeSamplerInput(None, torch.arange(20))
    a, b = (CsrNeighborSampler(csr, [3], seed=torch.Generator().manual_seed(3))
            .sample_from_nodes(inputs) for _ in range(2))
    assert torch.equal(a.node, b.node) and torch.equal(a.edge, b.edge)
    torch.manual_seed(9)
    c = CsrNeighborSampler(csr, [3]).sample_from_nodes(inputs)
    torch.manual_seed(9)
    d = CsrNeighborSampler(csr, [3]).sample_from_nodes(inputs)
    assert torch.equal(c.edge, d.edge)


def test_loader_workers_draw_their_own_streams_reproducibly():
    csr = _random_directed_graph()
    hub = int(torch.argmax(csr.degrees()))  # many in-edges: two draws of 2 rarely coincide

    def run():
        torch.manual_seed(0)
        sampler = CsrNeighborSampler(csr, [2], seed=0)
        loader = NodeLoader(_data(csr), node_sampler=sampler, input_nodes=torch.full((8,), hub),
                            batch_size=1, num_workers=2)
        return [tuple(sorted(b.e_id.tolist())) for b in loader]

    first = run()
    assert first == run()
    assert first[0] != first[1]  # batches 0 and 1 come from different workers


def test_loader_workers_sample_epoch_e_the_same_whether_or_not_epochs_before_ran():
    """Resume exactness with num_workers > 0: workers must not carry a stream across epochs."""
    csr = _random_directed_graph()
    cfg = NeighborParams(num_neighbors=(2,))
    x, y = torch.zeros(csr.num_nodes, 1), torch.zeros(csr.num_nodes, dtype=torch.long)

    def epoch(loader, e):
        loader.node_sampler.set_epoch(e)
        torch.manual_seed(100 + e)  # what fit does: each epoch reseeds torch's RNG
        return [tuple(b.e_id.tolist()) for b in loader]

    seeds = torch.arange(16)
    straight = neighbor_loader(x, y, csr, seeds, cfg, seed=0, batch_size=4, num_workers=2)
    first, second = epoch(straight, 1), epoch(straight, 2)
    resumed = neighbor_loader(x, y, csr, seeds, cfg, seed=0, batch_size=4, num_workers=2)
    assert epoch(resumed, 2) == second and first != second


# ---------------------------------------------------------------------------- subgraph modes
def test_induced_subgraph_holds_every_edge_among_the_sampled_nodes_once():
    csr = _random_directed_graph()
    for batch in _batches(csr, [3, 2], subgraph_type="induced"):
        keep = torch.zeros(csr.num_nodes, dtype=torch.bool)
        keep[batch.n_id] = True
        expected = edge_keys(restrict(csr, keep))
        got = batch.n_id[batch.edge_index]
        keys = torch.sort(got[0] * csr.num_nodes + got[1]).values
        assert torch.equal(keys, expected)
        assert "num_sampled_edges" not in batch  # edges are not per hop in induced mode


def test_bidirectional_subgraph_adds_the_reverse_of_every_sampled_edge():
    csr = _undirected()
    directional = _batches(csr, [3, 2], seed=4)
    both = _batches(csr, [3, 2], seed=4, subgraph_type="bidirectional")
    for one, two in zip(directional, both):
        assert torch.equal(one.n_id, two.n_id)
        fwd = set(map(tuple, one.n_id[one.edge_index].t().tolist()))
        got = set(map(tuple, two.n_id[two.edge_index].t().tolist()))
        assert got == fwd | {(b, a) for a, b in fwd}
        assert two.edge_index.shape[1] == len(got)  # coalesced: no edge twice


def test_disjoint_trees_stay_separate_and_each_is_the_seed_neighbourhood():
    csr = _undirected()
    seeds = torch.tensor([3, 3, 17, 42])  # a repeated seed gets its own tree
    sampler = CsrNeighborSampler(csr, [-1, -1], disjoint=True, seed=0)
    loader = NodeLoader(_data(csr), node_sampler=sampler, input_nodes=seeds, batch_size=4)
    batch = next(iter(loader))
    assert torch.equal(batch.n_id[:4], seeds) and torch.equal(batch.batch[:4], torch.arange(4))
    assert torch.equal(batch.batch[batch.edge_index[0]], batch.batch[batch.edge_index[1]])
    for tree, seed in enumerate(seeds.tolist()):
        nodes = batch.n_id[batch.batch == tree].tolist()
        assert len(nodes) == len(set(nodes))  # deduplicated within the tree
        hop1 = _neighbors(csr, seed)
        two_hop = {seed} | hop1 | set().union(*(_neighbors(csr, v) for v in hop1))
        assert set(nodes) == two_hop  # the tree holds its own seed's neighbourhood, nothing else


def test_link_loader_uses_both_endpoints_as_seeds_and_adds_negatives():
    csr = _undirected()
    pairs = csr.edge_index()[:, :30]
    sampler = CsrNeighborSampler(csr, [3, 2], seed=0)
    torch.manual_seed(0)  # negatives come from PyG's NegativeSampling on torch's global RNG
    loader = LinkLoader(_data(csr), link_sampler=sampler, edge_label_index=pairs,
                        neg_sampling=NegativeSampling("binary", amount=1), batch_size=10)
    for batch in loader:
        label_pairs = batch.n_id[batch.edge_label_index]
        assert torch.equal(label_pairs[:, :10], pairs[:, batch.input_id])
        assert torch.equal(batch.edge_label, torch.cat([torch.ones(10), torch.zeros(10)]))
        assert torch.equal(batch.x[:, 0].long(), batch.n_id)


def test_scratch_map_is_clean_after_each_batch_even_an_interrupted_one(monkeypatch):
    csr = _random_directed_graph()
    sampler = CsrNeighborSampler(csr, [3, 2], seed=0)
    inputs = NodeSamplerInput(None, torch.arange(30))
    expected = sampler.sample_from_nodes(inputs)
    assert (sampler.typed.hops._maps[0] == -1).all()
    real, calls = hops.pick_edges, []

    def failing(*args):
        calls.append(1)
        if len(calls) == 2:  # the map already holds hop 1's ids
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(hops, "pick_edges", failing)
    with pytest.raises(KeyboardInterrupt):
        sampler.sample_from_nodes(inputs)
    assert (sampler.typed.hops._maps[0] == -1).all()
    monkeypatch.setattr(hops, "pick_edges", real)
    sampler.typed._rng = np.random.default_rng(sampler.seed)
    again = sampler.sample_from_nodes(inputs)
    assert torch.equal(again.node, expected.node) and torch.equal(again.row, expected.row)


# ------------------------------------------------------------------------------ input errors
def test_bad_sampler_arguments_are_value_errors(tiny_graph):
    with pytest.raises(ValueError, match=r"num_neighbors=\[2, -3\] must list one fan-out >= -1"):
        CsrNeighborSampler(tiny_graph.csr, [2, -3])
    with pytest.raises(ValueError, match="subgraph_type='both' is not valid"):
        CsrNeighborSampler(tiny_graph.csr, [2], subgraph_type="both")
    sampler = CsrNeighborSampler(tiny_graph.csr, [2])
    with pytest.raises(ValueError, match=r"seed node ids must lie in \[0, 12\)"):
        sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([3, 12])))
    with pytest.raises(ValueError, match=r"seed node ids must lie in \[0, 12\)"):
        sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([3, -1])))


def test_backend_is_gnnpipe_without_pyg_lib_and_pyg_lib_when_importable(monkeypatch, tiny_graph):
    if sampling.pyg_lib_available():
        pytest.fail("this test assumes pyg-lib is absent, as in the project's environment")
    assert resolve_backend("auto") == "gnnpipe"
    with pytest.raises(ValueError, match="backend='pyg-lib' needs the pyg-lib package"):
        resolve_backend("pyg-lib")
    with pytest.raises(ValueError, match="backend='fast' is not valid"):
        resolve_backend("fast")
    import torch_geometric.typing

    monkeypatch.setattr(torch_geometric.typing, "WITH_PYG_LIB", True)
    assert resolve_backend("auto") == "pyg-lib"
    assert resolve_backend("auto", "induced") == "gnnpipe"  # pyg-lib has no induced subgraphs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler = CsrNeighborSampler(tiny_graph.csr, [4, 2], replace=True, disjoint=True)
    from torch_geometric.sampler import NeighborSampler

    assert sampler.backend == "pyg-lib" and isinstance(sampler._pyg, NeighborSampler)
    assert sampler._pyg.num_neighbors.values == [4, 2] and sampler._pyg.replace
    assert sampler._pyg.disjoint and sampler._pyg.perm is None  # edge ids = CSR positions
    assert torch.equal(sampler._pyg.colptr, tiny_graph.csr.indptr)


# ------------------------------------------------------------------------------------ config
def test_num_neighbors_is_a_list_of_fanouts_in_params():
    cfg = params_from_dict({"train": {"sampler": "neighbor", "neighbor": {
        "num_neighbors": [25, -1], "subgraph_type": "induced"}}}).train.neighbor
    assert cfg.num_neighbors == (25, -1) and cfg.subgraph_type == "induced"
    with pytest.raises(ParamsError, match=r"train.neighbor.num_neighbors\[1\]=-2 is out of range"):
        params_from_dict({"train": {"neighbor": {"num_neighbors": [5, -2]}}})
    with pytest.raises(ParamsError, match=r"train.neighbor.num_neighbors\[0\]='a' is not valid"):
        params_from_dict({"train": {"neighbor": {"num_neighbors": ["a", 2]}}})
    with pytest.raises(ParamsError, match="train.neighbor.num_neighbors=5 is not valid; "
                                          "expected a non-empty list of int"):
        params_from_dict({"train": {"neighbor": {"num_neighbors": 5}}})
    with pytest.raises(ParamsError, match=r"train.neighbor.num_neighbors=\[15, 10\] has 2 hops "
                                          "but train.num_layers=3"):
        params_from_dict({"train": {"sampler": "neighbor", "num_layers": 3}})


# ---------------------------------------------------------------------------------- training
FAST = TrainParams(epochs=12, patience=10, hidden=32, sampler="neighbor", batch_size=256,
                   neighbor=NeighborParams(num_neighbors=(5, 5)))


def _fit_sampled(graph, roles, graphs, cfg=FAST, seed=0):
    inputs = build_inputs(graph.x, message_graphs=graphs)
    seeds = torch.from_numpy(np.flatnonzero(roles == "train"))
    loader = neighbor_batches(graph.x, graph.y, graphs["train"], seeds, cfg.neighbor, seed + 1,
                              batch_size=cfg.batch_size, edge_index=inputs["train"].edge_index)
    return fit(lambda: build_model("sage", graph.x.shape[1], graph.num_classes, cfg), inputs,
               graph.y, role_codes(roles), cfg, seed, loader=loader), loader


def test_sampled_training_learns_and_repeats(small_graph):
    roles = split_nodes(as_graph(small_graph), NodeSplitParams(), make_rng(0, "split")).roles
    graphs = {p: small_graph.csr for p in ("train", "val", "test")}
    learned, loader = _fit_sampled(small_graph, roles, graphs)
    assert len(loader) == int(np.ceil((roles == "train").sum() / 256))
    assert learned.summary["best_val_acc"] > 0.8, learned.summary
    short = dataclasses.replace(FAST, epochs=2)
    first, again = (_fit_sampled(small_graph, roles, graphs, short)[0] for _ in range(2))
    assert torch.equal(first.logits, again.logits) and first.history == again.history
    other = _fit_sampled(small_graph, roles, graphs, short, seed=1)[0]
    assert not torch.equal(first.logits, other.logits)


def test_sampled_training_sees_only_the_train_phase_graph(small_graph):
    node_split = split_nodes(as_graph(small_graph), NodeSplitParams(mode="inductive"),
                             make_rng(0, "split"))
    roles, graphs = node_split.roles, phase_csrs(node_split.message_graphs)
    seeds = torch.from_numpy(np.flatnonzero(roles == "train"))
    train_keys = set(edge_keys(graphs["train"]).tolist())
    n = small_graph.num_nodes
    loader = neighbor_loader(small_graph.x, small_graph.y, graphs["train"], seeds, FAST.neighbor, 0,
                             batch_size=FAST.batch_size)
    for batch in loader:
        assert set(roles[batch.n_id.numpy()]) == {"train"}
        keys = batch.n_id[batch.edge_index[0]] * n + batch.n_id[batch.edge_index[1]]
        assert set(keys.tolist()) <= train_keys
    poisoned_x = small_graph.x.clone()
    poisoned_x[torch.from_numpy(roles != "train")] = 1e3
    clean, _ = _fit_sampled(small_graph, roles, graphs, dataclasses.replace(FAST, epochs=3))
    poisoned, _ = _fit_sampled(dataclasses.replace(small_graph, x=poisoned_x), roles, graphs,
                               dataclasses.replace(FAST, epochs=3))
    def trained(result):  # val_acc may differ: the val phase does see val features
        return [(h["train_loss"], h["train_acc"]) for h in result.history]

    assert trained(clean) == trained(poisoned)
