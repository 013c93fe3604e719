"""Typed neighbor sampling (gnnpipe/sampling/neighbor.py) against PyG's NeighborLoader
semantics on HeteroData.

The references are PyG's own tests (test/loader/test_neighbor_loader.py; each test names the
one it mirrors) and ``_reference``, a per-node Python loop of pyg-lib's heterogeneous kernel
(hop by hop, edge type by edge type, frontier node by frontier node, row in CSR order), which
fan-out -1 makes deterministic, so the sampler must match it exactly, order included.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.loader import NodeLoader
from torch_geometric.nn import GraphConv, SAGEConv, to_hetero
from torch_geometric.sampler import NodeSamplerInput
from torch_geometric.sampler.base import NumNeighbors
from torch_geometric.utils import trim_to_layer

from gnnpipe.sampling.loader import hetero_neighbor_loader
from gnnpipe.sampling.neighbor import HeteroNeighborSampler

SIZES = {"paper": 60, "author": 40, "venue": 4}
PP, AP, PA = ("paper", "cites", "paper"), ("author", "writes", "paper"), ("paper",
                                                                         "rev_writes", "author")
PV, VP = ("paper", "in", "venue"), ("venue", "rev_in", "paper")


def _hetero(seed: int = 0, time: str | None = None) -> HeteroData:
    """Papers cite papers, authors write papers, papers sit in venues (hubs), reverse types
    flipped; ``x[:, 0]`` is the node id; edge_attr = a global edge number (unique per type).
    ``time='node'`` adds ``time`` per node, ``'edge'`` per edge."""
    rng = np.random.default_rng(seed)
    data = HeteroData()
    for t, n in SIZES.items():
        data[t].x = torch.arange(n, dtype=torch.float32)[:, None]
        if time == "node":
            data[t].time = torch.from_numpy(rng.integers(0, 10, n))
    cites = np.stack([rng.integers(0, 60, 300), rng.integers(0, 60, 300)])
    writes = np.stack([rng.integers(0, 40, 150), rng.integers(0, 60, 150)])
    venue = np.stack([np.arange(60), rng.integers(0, 4, 60)])
    offset = 0
    for edge_type, pair in [(PP, cites), (AP, writes), (PA, writes[::-1]), (PV, venue),
                            (VP, venue[::-1])]:
        data[edge_type].edge_index = torch.from_numpy(np.ascontiguousarray(pair))
        m = pair.shape[1]
        data[edge_type].edge_attr = torch.arange(offset, offset + m)
        if time == "edge":
            data[edge_type].time = torch.from_numpy(rng.integers(0, 10, m))
        offset += m
    return data


def _sampler(data, num_neighbors, **kw) -> HeteroNeighborSampler:
    return HeteroNeighborSampler.from_hetero_data(data, num_neighbors, **kw)


def _sample(sampler, seeds, node_type="paper", time=None):
    return sampler.sample_from_nodes(NodeSamplerInput(
        input_id=None, node=torch.as_tensor(seeds), input_type=node_type,
        time=None if time is None else torch.as_tensor(time)))


def _reference(sampler: HeteroNeighborSampler, seed_type, seeds, hops, disjoint=False,
               seed_time=None):
    """pyg-lib's heterogeneous kernel with fan-out -1, one node at a time (rows in time order
    when timed, as PyG's ``to_hetero_csc`` sorts them).

    Returns node[t] (list of global ids, in local-id order), batch[t], and per edge type the
    list of (local src, local dst, CSR position) in output order.
    """
    node = {t: [] for t in sampler.node_types}
    batch = {t: [] for t in sampler.node_types}
    seen = {t: {} for t in sampler.node_types}
    for i, s in enumerate(seeds):
        key = (i if disjoint else 0, int(s))
        seen[seed_type].setdefault(key, len(node[seed_type]))
        node[seed_type].append(int(s))
        batch[seed_type].append(i)
    edges = {e: [] for e in sampler.edge_types}
    begin = dict.fromkeys(sampler.node_types, 0)
    end = {t: len(node[t]) for t in sampler.node_types}
    for _ in range(hops):
        for e in sampler.edge_types:
            src, _, dst = e
            indptr, indices = sampler.indptr[e], sampler.indices[e]
            time = sampler.plans[sampler.edge_types.index(e)].time
            for v_local in range(begin[dst], end[dst]):
                v, tree = node[dst][v_local], batch[dst][v_local]
                row = range(indptr[v], indptr[v + 1])
                if time is not None:  # PyG sorts every row by time for temporal sampling
                    row = sorted(row, key=lambda p: (time[p], p))
                for p in row:
                    if time is not None and time[p] > seed_time[tree]:
                        continue
                    u = int(indices[p])
                    key = (tree if disjoint else 0, u)
                    if key not in seen[src]:
                        seen[src][key] = len(node[src])
                        node[src].append(u)
                        batch[src].append(tree)
                    edges[e].append((seen[src][key], v_local, p))
        begin = end
        end = {t: len(node[t]) for t in sampler.node_types}
    return node, batch, edges


def _edges_of(out, e):
    return list(zip(out.row[e].tolist(), out.col[e].tolist(), out.edge[e].tolist()))


# ------------------------------------------------------------------ PyG test ports (loader)
def test_hetero_neighbor_loader_basic():
    """Mirrors PyG test_hetero_neighbor_loader_basic (directional): types, sizes, attribute
    ranges, every sampled edge a real edge of its type, no isolated sampled node."""
    data = _hetero()
    loader = hetero_neighbor_loader(data, [5] * 2, ("paper", None), batch_size=20, seed=0)
    assert len(loader) == 3
    offsets = {PP: 0, AP: 300, PA: 450, PV: 600, VP: 660}
    for batch in loader:
        assert isinstance(batch, HeteroData)
        assert set(batch.node_types) == set(SIZES)
        assert batch["paper"].batch_size == 20
        assert set(batch.edge_types) == set(data.edge_types)
        for t, n in SIZES.items():
            ids = batch[t].x[:, 0].long()
            assert torch.equal(ids, batch[t].n_id) and (ids.numel() == 0 or ids.max() < n)
        for e in data.edge_types:
            row, col = batch[e].edge_index
            assert row.numel() == 0 or row.max() < batch[e[0]].num_nodes
            assert col.numel() == 0 or col.max() < batch[e[2]].num_nodes
            attr = batch[e].edge_attr
            m = data[e].num_edges
            assert attr.numel() == 0 or (attr.min() >= offsets[e] and attr.max() < offsets[e] + m)
            # the edge (global src, global dst) with that attribute exists in data
            full = data[e].edge_index[:, attr - offsets[e]]
            assert torch.equal(full[0], batch[e[0]].n_id[row])
            assert torch.equal(full[1], batch[e[2]].n_id[col])
        for t in SIZES:  # every non-seed node is the source of some sampled edge
            n_seed = batch[t].batch_size if t == "paper" else 0
            hit = torch.zeros(batch[t].num_nodes, dtype=torch.bool)
            for e in data.edge_types:
                if e[0] == t:
                    hit[batch[e].edge_index[0]] = True
            assert bool(hit[n_seed:].all())


def test_hetero_neighbor_loader_on_synthetic_matches_the_full_graph_model():
    """Mirrors PyG test_hetero_neighbor_loader_on_cora (Cora is not available offline: the
    typed synthetic graph instead): with fan-outs [-1, -1] a 2-layer to_hetero GNN gives the
    seeds the same output on the batch as on the full graph."""
    torch.manual_seed(0)
    data = _hetero(1)
    for e in data.edge_types:
        data[e].edge_weight = torch.rand(data[e].num_edges)
    for t in SIZES:
        data[t].x = torch.randn(SIZES[t], 8)

    class GNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GraphConv((-1, -1), 16)
            self.conv2 = GraphConv((-1, -1), 4)

        def forward(self, x, edge_index, edge_weight):
            x = self.conv1(x, edge_index, edge_weight).relu()
            return self.conv2(x, edge_index, edge_weight)

    model = to_hetero(GNN(), data.metadata(), aggr="sum")
    split = torch.tensor([5, 6, 7, 30])
    loader = hetero_neighbor_loader(data, [-1, -1], ("paper", split), batch_size=4, seed=0)
    batch = next(iter(loader))
    with torch.no_grad():
        full = model(data.x_dict, data.edge_index_dict, data.edge_weight_dict)["paper"][split]
        part = model(batch.x_dict, batch.edge_index_dict, batch.edge_weight_dict)["paper"][:4]
    assert torch.allclose(full, part, atol=1e-5)


@pytest.mark.parametrize("time", ["node", "edge"])
def test_temporal_hetero_neighbor_loader(time):
    """Mirrors PyG test_temporal_hetero_neighbor_loader_on_cora: batch_size 1, every sampled
    paper is no later than the seed (node time); edge time: every sampled edge no later."""
    data = _hetero(2, time=time)
    if time == "node":
        loader = hetero_neighbor_loader(data, [-1, -1], "paper", time_attr="time", batch_size=1,
                                        seed=0)
        for batch in loader:
            seed_time = batch["paper"].time[0]
            for t in SIZES:
                assert bool((batch[t].time <= seed_time).all())
    else:
        input_time = torch.from_numpy(np.random.default_rng(0).integers(0, 10, 60))
        loader = hetero_neighbor_loader(data, [-1, -1], "paper", time_attr="time", batch_size=1,
                                        input_time=input_time, seed=0)
        seen = 0
        for i, batch in enumerate(loader):
            for e in data.edge_types:
                assert bool((batch[e].time <= input_time[i]).all())
                seen += batch[e].num_edges
        assert seen > 0


# ------------------------------------------------------------- exactness (fan-out -1)
@pytest.mark.parametrize("disjoint", [False, True])
def test_full_fanout_matches_the_reference_kernel_exactly(disjoint):
    data = _hetero(3)
    sampler = _sampler(data, [-1, -1], disjoint=disjoint, seed=0)
    seeds = [3, 17, 3, 42]  # a repeated seed keeps both copies
    out = _sample(sampler, seeds)
    node, batch, edges = _reference(sampler, "paper", seeds, 2, disjoint=disjoint)
    for t in SIZES:
        assert out.node[t].tolist() == node[t]
        if disjoint:
            assert out.batch[t].tolist() == batch[t]
    for e in data.edge_types:
        assert _edges_of(out, e) == edges[e]
    assert out.num_sampled_nodes["paper"][0] == 4


def test_every_sampled_edge_is_an_edge_of_its_csr():
    sampler = _sampler(_hetero(4), [4, 3], seed=1)
    out = _sample(sampler, np.arange(0, 60, 3))
    for e in sampler.edge_types:
        src, _, dst = e
        pos = out.edge[e].numpy()
        u = out.node[src].numpy()[out.row[e].numpy()]
        v = out.node[dst].numpy()[out.col[e].numpy()]
        assert np.array_equal(sampler.indices[e][pos], u)  # the source at that CSR position
        indptr = sampler.indptr[e]
        assert bool(((indptr[v] <= pos) & (pos < indptr[v + 1])).all())  # ... in v's row


@pytest.mark.parametrize("replace", [False, True])
def test_fanouts_per_edge_type_and_hop(replace):
    """Each frontier node of hop h draws min(deg, k) (without replacement, distinct edges) or
    exactly k (with replacement) in-edges of every edge type."""
    fan = {PP: [3, 2], AP: [2, 1], PA: [1, 2], PV: [1, 1], VP: [4, 0]}
    sampler = _sampler(_hetero(5), fan, replace=replace, seed=2)
    out = _sample(sampler, np.arange(10))
    hop_nodes = {t: np.cumsum([0] + out.num_sampled_nodes[t]) for t in SIZES}
    for e in sampler.edge_types:
        src, _, dst = e
        deg = np.diff(sampler.indptr[e])
        cut = np.cumsum([0] + out.num_sampled_edges[e])
        for h, k in enumerate(fan[e]):
            lo, hi = hop_nodes[dst][h], hop_nodes[dst][h + 1]
            col = out.col[e][cut[h]:cut[h + 1]].numpy()
            pos = out.edge[e][cut[h]:cut[h + 1]].numpy()
            counts = np.bincount(col - lo, minlength=hi - lo) if col.size else np.zeros(hi - lo)
            assert col.size == 0 or (col.min() >= lo and col.max() < hi)
            d = deg[out.node[dst][lo:hi].numpy()]
            want = np.where(d > 0, k, 0) if replace else np.minimum(d, k)
            assert np.array_equal(counts, want)
            if not replace:
                assert np.unique(pos).size == pos.size


def test_num_sampled_counts_add_up_and_seeds_come_first():
    out = _sample(_sampler(_hetero(6), [3, 3], seed=0), [9, 8, 7])
    assert out.node["paper"][:3].tolist() == [9, 8, 7]
    for t in SIZES:
        assert len(out.num_sampled_nodes[t]) == 3
        assert sum(out.num_sampled_nodes[t]) == out.node[t].numel()
        assert np.unique(out.node[t].numpy()).size == out.node[t].numel()  # shared: deduped
    assert out.num_sampled_nodes["author"][0] == 0
    for e in out.row:
        assert len(out.num_sampled_edges[e]) == 2
        assert sum(out.num_sampled_edges[e]) == out.row[e].numel()


def test_trim_to_layer_gives_the_untrimmed_seed_output():
    """Mirrors PyG test_trim_to_layer (hetero) / NeighborLoader's num_sampled_* contract."""
    torch.manual_seed(0)
    data = _hetero(7)
    for t in SIZES:
        data[t].x = torch.randn(SIZES[t], 8)
    loader = hetero_neighbor_loader(data, [4, 3, 2], ("paper", torch.arange(12)),
                                    batch_size=6, seed=0)
    convs = torch.nn.ModuleList([
        torch.nn.ModuleDict({"__".join(e): SAGEConv((-1, -1), 8) for e in data.edge_types})
        for _ in range(3)])

    def run(batch, trim):
        x, edge_index = batch.x_dict, batch.edge_index_dict
        for i, layer in enumerate(convs):
            if trim:
                x, edge_index, _ = trim_to_layer(i, batch.num_sampled_nodes_dict,
                                                 batch.num_sampled_edges_dict, x, edge_index)
            out = {t: torch.zeros(v.shape[0], 8) for t, v in x.items()}
            for e, ei in edge_index.items():
                out[e[2]] = out[e[2]] + layer["__".join(e)]((x[e[0]], x[e[2]]), ei)
            x = out
        return x["paper"][:batch["paper"].batch_size]

    with torch.no_grad():
        for batch in loader:
            _ = run(batch, False)  # materialize lazy modules
            assert torch.allclose(run(batch, False), run(batch, True), atol=1e-5)


# ------------------------------------------------------------ disjoint / induced / bidirectional
def test_disjoint_trees_are_what_each_seed_samples_alone():
    """Mirrors PyG's disjoint NeighborLoader tests: tree i == sampling from seed i alone."""
    data = _hetero(8)
    sampler = _sampler(data, [-1, -1], disjoint=True, seed=0)
    seeds = [4, 11, 4]
    out = _sample(sampler, seeds)
    for i, s in enumerate(seeds):
        alone = _sample(_sampler(data, [-1, -1], seed=0), [s])
        for t in SIZES:
            mine = out.node[t][out.batch[t] == i]
            assert mine.tolist() == alone.node[t].tolist()
        for e in data.edge_types:
            keep = out.batch[e[2]][out.col[e]] == i
            assert bool((out.batch[e[0]][out.row[e][keep]] == i).all())  # edges stay in tree
            assert sorted(out.edge[e][keep].tolist()) == sorted(alone.edge[e].tolist())


@pytest.mark.parametrize("disjoint", [False, True])
def test_induced_keeps_every_edge_among_the_sampled_nodes(disjoint):
    """Mirrors PyG test_hetero_neighbor_loader_basic with subgraph_type='induced'."""
    data = _hetero(9)
    sampler = _sampler(data, [2, 2], subgraph_type="induced", disjoint=disjoint, seed=3)
    out = _sample(sampler, [0, 1, 2, 3])
    assert out.num_sampled_edges is None
    for e in data.edge_types:
        src, _, dst = e
        ei = data[e].edge_index.numpy()
        if disjoint:
            want = []  # a multiset: the random graph has repeated edges
            for tree in range(4):
                s_ids = out.node[src][out.batch[src] == tree].numpy()
                d_ids = out.node[dst][out.batch[dst] == tree].numpy()
                m = np.isin(ei[0], s_ids) & np.isin(ei[1], d_ids)
                want += [(tree, int(a), int(b)) for a, b in zip(ei[0][m], ei[1][m])]
            got = [(int(out.batch[dst][c]), int(out.node[src][r]), int(out.node[dst][c]))
                   for r, c in zip(out.row[e], out.col[e])]
        else:
            m = np.isin(ei[0], out.node[src].numpy()) & np.isin(ei[1], out.node[dst].numpy())
            want = sorted(zip(ei[0][m].tolist(), ei[1][m].tolist()))
            got = sorted(zip(out.node[src][out.row[e]].tolist(),
                             out.node[dst][out.col[e]].tolist()))
        assert sorted(got) == sorted(want) and want


def test_bidirectional_mirrors_each_edge_type_in_its_reverse():
    sampler = _sampler(_hetero(10), [3, 2], subgraph_type="bidirectional", seed=0)
    out = _sample(sampler, [0, 5, 9])
    for e, rev in [(AP, PA), (PV, VP)]:
        fwd = set(zip(out.row[e].tolist(), out.col[e].tolist()))
        back = set(zip(out.col[rev].tolist(), out.row[rev].tolist()))
        assert fwd == back and fwd
    pp = set(zip(out.row[PP].tolist(), out.col[PP].tolist()))
    assert pp == {(c, r) for r, c in pp}  # a self-relation is made symmetric


# ----------------------------------------------------------------------------------- temporal
@pytest.mark.parametrize("time", ["node", "edge"])
def test_temporal_full_fanout_matches_the_time_bounded_reference(time):
    data = _hetero(11, time=time)
    sampler = _sampler(data, [-1, -1], time_attr="time", seed=0)
    assert sampler.disjoint  # temporal is always disjoint, as PyG
    seeds = [1, 2, 3, 30]
    seed_time = np.array([3, 9, 0, 5])
    out = _sample(sampler, seeds, time=seed_time)
    node, batch, edges = _reference(sampler, "paper", seeds, 2, disjoint=True,
                                    seed_time=seed_time)
    for t in SIZES:
        assert out.node[t].tolist() == node[t] and out.batch[t].tolist() == batch[t]
    for e in data.edge_types:
        assert _edges_of(out, e) == edges[e]
    # the bound is <=, not <: some edge at exactly the seed's time is drawn
    if time == "edge":
        ties = [(e, p) for e in data.edge_types for (_, c, p) in edges[e]
                if sampler.plans[sampler.edge_types.index(e)].time[p] == seed_time[batch[e[2]][c]]]
        assert ties


def test_temporal_induced_edges_are_no_later_than_their_tree_seed():
    data = _hetero(18, time="edge")
    sampler = _sampler(data, [3, 3], time_attr="time", subgraph_type="induced", seed=0)
    seed_time = np.array([2, 5, 8, 9])
    out = _sample(sampler, [0, 1, 2, 3], time=seed_time)
    kept = 0
    for e in data.edge_types:
        tree = out.batch[e[2]][out.col[e]].numpy()
        assert np.array_equal(tree, out.batch[e[0]][out.row[e]].numpy())
        assert (sampler.plans[sampler.edge_types.index(e)].time[out.edge[e].numpy()] <= seed_time[tree]).all()
        kept += tree.size
    assert kept > 0


def test_node_time_defaults_the_seed_times_and_bounds_the_neighbours():
    data = _hetero(12, time="node")
    sampler = _sampler(data, [5, 5], time_attr="time", seed=0)
    seeds = np.arange(20)
    out = _sample(sampler, seeds)  # no input time: the seeds' own times
    seed_time = data["paper"].time[seeds]
    for t in SIZES:
        assert bool((data[t].time[out.node[t]] <= seed_time[out.batch[t]]).all())


# -------------------------------------------------------------------- streams and arguments
def test_seeded_runs_repeat_and_set_epoch_restarts_the_stream():
    data = _hetero(13)

    def edges(sampler):
        out = _sample(sampler, np.arange(20))
        return {e: v.tolist() for e, v in out.edge.items()}

    a, b = _sampler(data, [2, 2], seed=5), _sampler(data, [2, 2], seed=5)
    assert edges(a) == edges(b)
    a.set_epoch(3)
    first = edges(a)
    edges(a)
    a.set_epoch(3)
    assert edges(a) == first
    a.set_epoch(4)
    assert edges(a) != first


def test_loader_workers_draw_their_own_streams_reproducibly():
    data = _hetero(14)
    hub = int(torch.bincount(data[PP].edge_index[1]).argmax())

    def run():
        torch.manual_seed(0)
        loader = hetero_neighbor_loader(data, [2], ("paper", torch.full((8,), hub)),
                                        batch_size=1, num_workers=2, seed=0)
        return [tuple(sorted(b[PP].e_id.tolist())) for b in loader]

    first = run()
    assert first == run()
    assert first[0] != first[1]  # batches 0 and 1 come from different workers


def test_dict_fanouts_follow_pyg_num_neighbors():
    data = _hetero(15)
    with pytest.raises(ValueError, match="num_neighbors"):
        _sampler(data, {PP: [2, 2]})  # missing edge types need a default, as in PyG
    with pytest.raises(ValueError, match="num_neighbors"):
        _sampler(data, {("paper", "nope", "paper"): [1]} | {e: [1] for e in data.edge_types})
    with pytest.raises(ValueError, match="num_neighbors"):
        _sampler(data, {PP: [2, 2], AP: [1], PA: [1, 1], PV: [1, 1], VP: [1, 1]})
    sampler = _sampler(data, NumNeighbors({PP: [2, 2]}, default=[0, 0]), seed=0)
    out = _sample(sampler, [0, 1, 2])
    assert out.node["author"].numel() == 0 and out.node["venue"].numel() == 0
    assert out.row[PP].numel() > 0 and all(out.row[e].numel() == 0 for e in (AP, PA, PV, VP))


def test_bad_arguments_are_value_errors():
    data = _hetero(16)
    with pytest.raises(ValueError, match="subgraph_type"):
        _sampler(data, [1], subgraph_type="nope")
    with pytest.raises(ValueError, match="num_neighbors"):
        _sampler(data, [-2])
    with pytest.raises(ValueError, match="temporal_strategy"):
        _sampler(data, [1], temporal_strategy="nope")
    sampler = _sampler(data, [1], seed=0)
    with pytest.raises(ValueError, match="seed node ids"):
        _sample(sampler, [60])
    with pytest.raises(ValueError, match="node type"):
        _sample(sampler, [0], node_type="nope")
    with pytest.raises(ValueError, match="seed times"):
        _sample(sampler, [0], time=[1])
    with pytest.raises(ValueError, match="time_attr"):
        _sampler(data, [1], time_attr="nope")
    timed = _sampler(_hetero(16, time="edge"), [1], time_attr="time")
    with pytest.raises(ValueError, match="time per seed"):
        _sample(timed, [0])


def test_node_loader_e_id_follows_the_data_edge_order():
    """``edge`` is a CSR position; through edge_permutation the batch's e_id is the index into
    data[e].edge_index, as with PyG's sampler."""
    data = _hetero(17)
    sampler = _sampler(data, [3, 3], seed=0)
    loader = NodeLoader(data, node_sampler=sampler, input_nodes=("paper", torch.arange(10)),
                        batch_size=10)
    batch = next(iter(loader))
    for e in data.edge_types:
        assert torch.equal(batch[e].edge_attr, data[e].edge_attr[batch[e].e_id])


# ------------------------------------------------- optional: against PyG on torch-sparse itself
def _pyg_reference_available() -> bool:
    import torch_geometric.typing as pyg_typing

    return pyg_typing.WITH_TORCH_SPARSE or pyg_typing.WITH_PYG_LIB


needs_peer = pytest.mark.skipif(not _pyg_reference_available(),
                                reason="PyG's own hetero sampler needs torch-sparse or pyg-lib "
                                       "(the pyg-lib kernel reference above always runs)")


@needs_peer
@pytest.mark.parametrize("subgraph_type", ["directional", "induced"])
def test_full_fanout_equals_pyg_neighbor_loader(subgraph_type):
    """PyG's NeighborLoader on HeteroData (torch-sparse / pyg-lib) and ours at fan-out -1:
    the same seeds first, the same node set per type and the same edges (e_id) per type."""
    from torch_geometric.loader import NeighborLoader

    data = _hetero(30)
    seeds = torch.tensor([2, 9, 33])
    ours = next(iter(hetero_neighbor_loader(data, [-1, -1], ("paper", seeds), batch_size=3,
                                            subgraph_type=subgraph_type, seed=0)))
    peer = next(iter(NeighborLoader(data, [-1, -1], input_nodes=("paper", seeds), batch_size=3,
                                    subgraph_type=subgraph_type)))
    assert torch.equal(ours["paper"].n_id[:3], peer["paper"].n_id[:3])
    for t in SIZES:
        assert torch.equal(ours[t].n_id.sort().values, peer[t].n_id.sort().values)
    for e in data.edge_types:
        assert torch.equal(ours[e].e_id.sort().values, peer[e].e_id.sort().values)
        # the same (global src, global dst) per edge id, whatever the local numbering
        for batch in (ours, peer):
            row, col = batch[e].edge_index
            order = batch[e].e_id.argsort()
            assert torch.equal(data[e].edge_index[:, batch[e].e_id[order]],
                               torch.stack([batch[e[0]].n_id[row], batch[e[2]].n_id[col]])[
                                   :, order])


@needs_peer
def test_fanout_batch_sizes_match_pyg_neighbor_loader_on_average():
    """With fan-outs the draws differ, but nodes and edges per type per batch agree on average
    (each frontier node keeps min(deg, k) in-edges on both sides)."""
    from torch_geometric.loader import NeighborLoader

    data = _hetero(31)
    seeds = torch.arange(60).repeat(5)
    ours = hetero_neighbor_loader(data, [3, 2], ("paper", seeds), batch_size=10, seed=0)
    peer = NeighborLoader(data, [3, 2], input_nodes=("paper", seeds), batch_size=10)
    for key in list(SIZES) + data.edge_types:
        a = np.mean([b[key].num_nodes if key in SIZES else b[key].num_edges for b in ours])
        b = np.mean([b[key].num_nodes if key in SIZES else b[key].num_edges for b in peer])
        assert abs(a - b) <= 0.1 * max(a, b) + 1, (key, a, b)
