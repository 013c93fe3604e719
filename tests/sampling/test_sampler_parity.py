"""PyG loader parity of the neighbor samplers: weight_attr, sample_direction='backward',
BidirectionalNeighborSampler and num_neighbors=[] (cases ported from PyG's
test/loader/test_neighbor_loader.py, test_link_neighbor_loader.py and
test/sampler/test_sampler_neighbor_sampler.py, which need pyg-lib there)."""

from itertools import permutations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import LinkLoader, NodeLoader
from torch_geometric.sampler import NodeSamplerInput

from gnnpipe.data.graph import EDGE, Csr
from gnnpipe.sampling import HeteroNeighborSampler, hetero_link_neighbor_loader
from gnnpipe.sampling import hetero_neighbor_loader
from gnnpipe.sampling.bidirectional import BidirectionalNeighborSampler
from gnnpipe.sampling.neighbor import CsrNeighborSampler
from gnnpipe.sampling.pick import pick_weighted

WEIGHTS = np.array([1.0, 2.0, 3.0, 4.0, 0.0, 10.0])  # one row's in-edge weights


def inclusion(w: np.ndarray, k: int) -> np.ndarray:
    """P(edge i among k draws without replacement, each proportional to the weights left)."""
    p = np.zeros(w.size)
    for order in permutations(np.flatnonzero(w > 0), k):
        prob, left = 1.0, w.sum()
        for i in order:
            prob *= w[i] / left
            left -= w[i]
        p[list(order)] += prob
    return p


def random_graph(n=40, e=300, seed=0) -> Data:
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(n, (2, e), generator=g)
    return Data(edge_index=edge_index, num_nodes=n, w=torch.rand(e, generator=g))


# ---------------------------------------------------------------------------------- weighted
def test_weighted_without_replacement_follows_successive_sampling():
    rows = 20000  # identical rows drawn at once: counts per edge ~ Binomial(rows, p)
    deg = np.full(rows, WEIGHTS.size)
    start = np.arange(rows) * WEIGHTS.size
    weight = np.tile(WEIGHTS, rows)
    pos, owner = pick_weighted(start, deg, 2, False, weight, np.random.default_rng(0))
    assert np.array_equal(owner, np.repeat(np.arange(rows), 2))
    assert (pos[0::2] != pos[1::2]).all()  # two distinct edges per row
    seen = np.bincount(pos % WEIGHTS.size, minlength=WEIGHTS.size) / rows
    expect = inclusion(WEIGHTS, 2)
    sigma = np.sqrt(expect * (1 - expect) / rows) + 1e-12
    assert (np.abs(seen - expect) < 5 * sigma).all(), (seen, expect)
    assert seen[4] == 0  # weight 0 is never drawn while 5 positive edges remain
    uniform = np.full(WEIGHTS.size, 2 / WEIGHTS.size)  # what ignoring the weights would give
    assert (np.abs(seen - uniform) > 10 * sigma).sum() >= 4


def test_weighted_with_replacement_is_multinomial():
    rows = 20000
    start = np.arange(rows) * WEIGHTS.size
    pos, _ = pick_weighted(start, np.full(rows, WEIGHTS.size), 3, True, np.tile(WEIGHTS, rows),
                           np.random.default_rng(1))
    seen = np.bincount(pos % WEIGHTS.size, minlength=WEIGHTS.size) / pos.size
    expect = WEIGHTS / WEIGHTS.sum()
    assert (np.abs(seen - expect) < 5 * np.sqrt(expect * (1 - expect) / pos.size) + 1e-12).all()


def test_weighted_zero_weights_fill_only_when_needed():
    w = np.array([0.0, 5.0, 0.0, 0.0])  # one positive edge, k = 2: it plus one zero edge
    pos, _ = pick_weighted(np.zeros(3000, dtype=np.int64), np.full(3000, 4), 2, False,
                           w, np.random.default_rng(2))
    pairs = pos.reshape(-1, 2)
    assert (pairs == 1).any(axis=1).all()
    other = pairs[pairs != 1]
    assert set(np.bincount(other, minlength=4)[[0, 2, 3]] > 800) == {True}  # uniform fill


def test_weighted_replace_refuses_all_zero_rows():
    with pytest.raises(ValueError, match="all zero"):
        pick_weighted(np.array([0]), np.array([2]), 1, True, np.zeros(2),
                      np.random.default_rng(0))


def test_weighted_loader_pyg_example():
    """PyG's test_weighted_homo_neighbor_loader / test_weighted_hetero_neighbor_loader."""
    edge_index = torch.tensor([[1, 3, 0, 4], [2, 2, 1, 3]])
    weight = torch.tensor([0.0, 1.0, 0.0, 1.0])
    data = Data(num_nodes=5, edge_index=edge_index, edge_weight=weight)
    hetero = HeteroData()
    hetero["paper"].num_nodes = 5
    hetero["paper", "to", "paper"].edge_index = edge_index
    hetero["paper", "to", "paper"].edge_weight = weight
    for seed in range(10):
        sampler = CsrNeighborSampler(data, [1, 1], weight_attr="edge_weight", seed=seed)
        batch = next(iter(NodeLoader(data, node_sampler=sampler, input_nodes=torch.tensor([2]))))
        assert batch.n_id.tolist() == [2, 3, 4]
        assert batch.n_id[batch.edge_index].tolist() == [[3, 4], [2, 3]]
        assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
        batch = next(iter(hetero_neighbor_loader(hetero, [1, 1], ("paper", torch.tensor([2])),
                                                 weight_attr="edge_weight", seed=seed)))
        assert batch["paper"].n_id.tolist() == [2, 3, 4]
        store = batch["paper", "paper"]
        assert batch["paper"].n_id[store.edge_index].tolist() == [[3, 4], [2, 3]]


def test_weighted_sampler_weights_follow_edge_index_order():
    """Weights given in shuffled edge_index order reach the right CSR edges: every target
    draws 1 of its 3 in-edges, the heavy one (weight 1000) almost always."""
    n = 300
    tgt = np.repeat(np.arange(n), 3)
    src = (tgt + np.tile([1, 2, 3], n)) % n
    heavy = np.tile([False, True, False], n)
    shuffle = np.random.default_rng(0).permutation(tgt.size)
    data = Data(edge_index=torch.from_numpy(np.stack([src, tgt])[:, shuffle]), num_nodes=n,
                w=torch.from_numpy(np.where(heavy, 1000.0, 1.0)[shuffle]))
    sampler = CsrNeighborSampler(data, [1], weight_attr="w", seed=0)
    batch = next(iter(NodeLoader(data, node_sampler=sampler, input_nodes=torch.arange(n),
                                 batch_size=n)))
    assert batch.e_id.numel() == n
    assert data.w[batch.e_id].eq(1000).float().mean() > 0.98


def test_weighted_all_neighbours_is_exact():
    """Fan-out -1 (and deg <= k) take every in-edge, weights or not, zero weights too."""
    data = random_graph()
    data.w[::3] = 0
    seeds = NodeSamplerInput(None, torch.arange(0, 40, 3))
    plain = CsrNeighborSampler(data, [-1, 50], seed=0).sample_from_nodes(seeds)
    weighted = CsrNeighborSampler(data, [-1, 50], weight_attr="w", seed=5).sample_from_nodes(seeds)
    for key in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(plain, key), getattr(weighted, key))


def test_weighted_refusals():
    data = random_graph()
    with pytest.raises(ValueError, match="finite and >= 0"):
        CsrNeighborSampler(data, [2], edge_weight=-data.w)
    with pytest.raises(ValueError, match="one per edge"):
        CsrNeighborSampler(data, [2], edge_weight=data.w[:5])
    with pytest.raises(ValueError, match="not an attribute"):
        CsrNeighborSampler(data, [2], weight_attr="nope")
    with pytest.raises(ValueError, match="temporal"):
        CsrNeighborSampler(data, [2], weight_attr="w", edge_time=torch.arange(300))


# ---------------------------------------------------------------------------------- backward
def reversed_data(data: Data) -> Data:
    return Data(edge_index=data.edge_index.flip(0), num_nodes=data.num_nodes, w=data.w)


@pytest.mark.parametrize("fanout,disjoint,weighted", [([-1, -1], False, False),
                                                       ([3, 2], False, False),
                                                       ([3, 2], True, False),
                                                       ([2, 2], False, True)])
def test_backward_is_forward_on_the_reversed_graph(fanout, disjoint, weighted):
    """PyG's test_homogeneous_neighbor_sampler_backwards: same nodes and edge ids, row and col
    swapped; with the same stream even the random draws agree."""
    data = random_graph()
    kw = dict(disjoint=disjoint, seed=3, weight_attr="w" if weighted else None)
    seeds = NodeSamplerInput(None, torch.tensor([0, 5, 9, 5]))
    back = CsrNeighborSampler(data, fanout, sample_direction="backward", **kw)
    fwd = CsrNeighborSampler(reversed_data(data), fanout, **kw)
    out_b, out_f = back.sample_from_nodes(seeds), fwd.sample_from_nodes(seeds)
    assert torch.equal(out_b.node, out_f.node)
    assert torch.equal(out_b.row, out_f.col) and torch.equal(out_b.col, out_f.row)
    assert torch.equal(back.perm[out_b.edge], fwd.perm[out_f.edge])
    assert out_b.num_sampled_edges == out_f.num_sampled_edges
    if not disjoint:
        assert out_b.num_sampled_edges[0] > 0


def test_backward_loader_edges_point_away_from_seeds():
    data = random_graph(seed=1)
    sampler = CsrNeighborSampler(data, [4, 3], sample_direction="backward", seed=0)
    for batch in NodeLoader(data, node_sampler=sampler, input_nodes=torch.arange(40),
                            batch_size=8):
        assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id])
        first = batch.num_sampled_edges[0]
        assert (batch.edge_index[0, :first] < batch.batch_size).all()  # hop 1: out of a seed


def hop_sets(node, counts):
    """The set of nodes first reached at each hop."""
    return [set(part.tolist()) for part in torch.split(node, list(counts))]


def test_backward_on_csr_matches_data():
    """A Csr and a Data of the same graph sample the same out-neighbourhoods at fan-out -1
    (PyG's to_csc sorts rows unstably, so only the order inside a hop may differ)."""
    data = random_graph(seed=2)
    order = torch.argsort(data.edge_index[1] * 40 + data.edge_index[0])
    ei = data.edge_index[:, order]  # CSR order: by target, then source
    csr = Csr(torch.ops.aten._convert_indices_from_coo_to_csr(ei[1], 40), ei[0].contiguous())
    seeds = NodeSamplerInput(None, torch.tensor([1, 2, 3]))
    on_csr = CsrNeighborSampler(csr, [-1, -1], sample_direction="backward").sample_from_nodes(seeds)
    sampler = CsrNeighborSampler(data, [-1, -1], sample_direction="backward", seed=0)
    on_data = sampler.sample_from_nodes(seeds)
    assert hop_sets(on_csr.node, on_csr.num_sampled_nodes) == hop_sets(
        on_data.node, on_data.num_sampled_nodes)
    assert sorted(order[on_csr.edge].tolist()) == sorted(sampler.perm[on_data.edge].tolist())
    assert torch.equal(on_csr.node[on_csr.row], ei[0, on_csr.edge])  # row = the edge's source


def small_hetero() -> HeteroData:
    g = torch.Generator().manual_seed(0)
    data = HeteroData()
    data["paper"].num_nodes, data["author"].num_nodes = 30, 20
    for e, (n_src, n_dst, m) in {("paper", "cites", "paper"): (30, 30, 120),
                                 ("author", "writes", "paper"): (20, 30, 80),
                                 ("paper", "rev", "author"): (30, 20, 80)}.items():
        src, dst = torch.randint(n_src, (m,), generator=g), torch.randint(n_dst, (m,), generator=g)
        order = torch.argsort(dst * 100 + src)  # sorted by (dst, src): see the test below
        data[e].edge_index = torch.stack([src, dst])[:, order]
    return data


def flip(data: HeteroData) -> HeteroData:
    out = HeteroData()
    for t in data.node_types:
        out[t].num_nodes = data[t].num_nodes
    for (s, r, d) in data.edge_types:
        out[d, r, s].edge_index = data[s, r, d].edge_index.flip(0)
    return out


def test_hetero_backward_is_forward_on_the_reversed_graph():
    """PyG's test_heterogeneous_neighbor_sampler_backwards (edge types reversed), at fan-out -1:
    the same nodes per hop and the same edges, row and col swapped."""
    data = small_hetero()
    seeds = NodeSamplerInput(None, torch.tensor([0, 4, 7]), input_type="paper")
    back = HeteroNeighborSampler.from_hetero_data(data, [-1, -1], sample_direction="backward")
    fwd = HeteroNeighborSampler.from_hetero_data(flip(data), [-1, -1])
    # the caller's edge types (what a link loader checks its edge type against), not the
    # reversed ones it samples
    assert back.edge_types == data.edge_types and list(back.num_neighbors) == data.edge_types
    out_b, out_f = back.sample_from_nodes(seeds), fwd.sample_from_nodes(seeds)
    for t in data.node_types:
        assert hop_sets(out_b.node[t], out_b.num_sampled_nodes[t]) == hop_sets(
            out_f.node[t], out_f.num_sampled_nodes[t])
    for (s, r, d) in data.edge_types:
        rev = (d, r, s)
        assert out_b.num_sampled_edges[s, r, d] == out_f.num_sampled_edges[rev]
        got = torch.stack([out_b.node[s][out_b.row[s, r, d]], out_b.node[d][out_b.col[s, r, d]],
                           back.perm[s, r, d][out_b.edge[s, r, d]]])
        want = torch.stack([out_f.node[s][out_f.col[rev]], out_f.node[d][out_f.row[rev]],
                            fwd.perm[rev][out_f.edge[rev]]])
        assert sorted(got.t().tolist()) == sorted(want.t().tolist())
        assert torch.equal(got[:2], data[s, r, d].edge_index[:, got[2]])
    assert sum(v.numel() for v in out_b.edge.values()) > 0


def test_hetero_backward_loader_and_refusal():
    data = small_hetero()
    loader = hetero_neighbor_loader(data, {("paper", "cites", "paper"): [3],
                                           ("author", "writes", "paper"): [0],
                                           ("paper", "rev", "author"): [2]},
                                    ("paper", torch.arange(30)), batch_size=10,
                                    sample_direction="backward", seed=0)
    for batch in loader:
        assert batch["author", "writes", "paper"].edge_index.numel() == 0  # its fan-out is 0
        for e in data.edge_types:
            s, _, d = e
            local = batch[e].edge_index
            glob = torch.stack([batch[s].n_id[local[0]], batch[d].n_id[local[1]]])
            assert torch.equal(glob, data[e].edge_index[:, batch[e].e_id])
        assert batch["author"].num_nodes > 0  # reached along paper -> author out-edges
    data["paper"].time = torch.arange(30)
    with pytest.raises(NotImplementedError, match="backward"):
        HeteroNeighborSampler.from_hetero_data(data, [1], sample_direction="backward",
                                               time_attr="time")
    with pytest.raises(NotImplementedError, match="backward"):
        CsrNeighborSampler(random_graph(), [1], sample_direction="backward",
                           node_time=np.arange(40))


def test_hetero_weighted_types_without_weights_are_uniform():
    data = small_hetero()
    data["paper", "cites", "paper"].w = torch.zeros(120)
    data["paper", "cites", "paper"].w[::2] = 1.0
    sampler = HeteroNeighborSampler.from_hetero_data(data, [1], weight_attr="w", seed=0)
    out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.arange(30), input_type="paper"))
    e = ("paper", "cites", "paper")
    ids = sampler.perm[e][out.edge[e]]
    # a paper with a positive-weight in-edge never draws a zero-weight one
    has_positive = torch.zeros(30, dtype=torch.bool)
    has_positive[data[e].edge_index[1, ::2]] = True
    dst = data[e].edge_index[1, ids]
    assert (data[e].w[ids][has_positive[dst]] == 1).all()
    assert out.edge["author", "writes", "paper"].numel() > 0


# ---------------------------------------------------------------------------------- zero hops
@pytest.mark.parametrize("disjoint", [False, True])
def test_zero_hops_is_the_seeds_alone(disjoint):
    data = random_graph()
    data.x = torch.arange(40).float().view(-1, 1)
    sampler = CsrNeighborSampler(data, [], disjoint=disjoint, seed=0)
    batch = next(iter(NodeLoader(data, node_sampler=sampler, input_nodes=torch.arange(8, 13),
                                 batch_size=5)))
    assert batch.n_id.tolist() == [8, 9, 10, 11, 12]
    assert torch.equal(batch.x[:, 0].long(), batch.n_id)
    assert batch.edge_index.shape == (2, 0) and batch.e_id.numel() == 0
    assert list(batch.num_sampled_nodes) == [5] and list(batch.num_sampled_edges) == []
    if disjoint:
        assert batch.batch.tolist() == [0, 1, 2, 3, 4]


def test_zero_hops_output_is_a_copy_of_the_seeds():
    sampler = CsrNeighborSampler(random_graph(), [], seed=0)
    seeds = torch.tensor([8, 9, 9, 12])
    out = sampler.sample_from_nodes(NodeSamplerInput(None, seeds))
    seeds += 1  # the caller's tensor: the batch must not change with it
    assert out.node.tolist() == [8, 9, 9, 12] and out.row.numel() == 0
    assert out.num_sampled_nodes == [4] and out.num_sampled_edges == []


def test_zero_hops_link_loaders():
    """PyG's test_homo_link_neighbor_loader_no_edges / test_hetero_..._no_edges."""
    g = torch.Generator().manual_seed(0)
    eli = torch.randint(100, (2, 100), generator=g)
    data = Data(num_nodes=100)
    loader = LinkLoader(data, link_sampler=CsrNeighborSampler(data, [], seed=0),
                        edge_label_index=eli, batch_size=20)
    for batch in loader:
        assert batch.input_id.numel() == 20 and batch.edge_label_index.size(1) == 20
        assert batch.num_nodes == batch.edge_label_index.unique().numel()
    hetero = HeteroData(paper=dict(num_nodes=100))
    loader = hetero_link_neighbor_loader(hetero, [], (("paper", "to", "paper"), eli),
                                         batch_size=20, seed=0)
    for batch in loader:
        store = batch["paper", "to", "paper"]
        assert store.input_id.numel() == 20 and store.edge_label_index.size(1) == 20
        assert batch["paper"].num_nodes == store.edge_label_index.unique().numel()
    # with edge types present, [] still samples none of them
    batch = next(iter(hetero_neighbor_loader(small_hetero(), [], ("paper", torch.arange(4)),
                                             batch_size=4)))
    assert batch["paper"].n_id.tolist() == [0, 1, 2, 3] and batch["author"].num_nodes == 0


# ------------------------------------------------------------------------------ bidirectional
def alice_graph() -> Data:
    """PyG's sample graph: Alice 0 -> Bob 1, Alice 0 -> Carol 2, Carol 2 -> Dave 3."""
    return Data(edge_index=torch.tensor([[0, 0, 2], [1, 2, 3]]), x=torch.arange(4).view(-1, 1))


def test_bidirectional_pyg_expected_outputs():
    """PyG's test_bidirectional_neighbor_sampler, outputs copied from it."""
    out = BidirectionalNeighborSampler(alice_graph(), [1], seed=0).sample_from_nodes(
        NodeSamplerInput(None, torch.tensor([2])))
    assert out.node.tolist() == [2, 0, 3]
    assert out.row.tolist() == [1, 0] and out.col.tolist() == [0, 2]
    assert out.edge.tolist() == [1, 2]
    assert out.num_sampled_nodes == [1, 1, 0, 1] and out.num_sampled_edges == [1, 1]
    seeds = NodeSamplerInput(None, torch.tensor([1, 3]))
    out = BidirectionalNeighborSampler(alice_graph(), [2] * 4, seed=0).sample_from_nodes(seeds)
    assert out.node.tolist() == [1, 3, 0, 2]
    assert out.row.tolist() == [2, 3, 2] and out.col.tolist() == [0, 1, 3]
    assert out.edge.tolist() == [0, 2, 1]
    assert out.num_sampled_nodes == [2, 2] + [0] * 14
    assert out.num_sampled_edges == [2, 0, 1, 0, 0, 0, 0, 0]
    out = BidirectionalNeighborSampler(alice_graph(), [2] * 4, disjoint=True,
                                       seed=0).sample_from_nodes(seeds)
    assert out.node.tolist() == [1, 3, 0, 2, 0, 2, 1, 3]
    assert out.row.tolist() == [2, 3, 4, 2, 4, 5] and out.col.tolist() == [0, 1, 3, 5, 6, 7]
    assert out.edge.tolist() == [0, 2, 1, 1, 0, 2]
    assert out.batch.tolist() == [0, 1, 0, 1, 1, 0, 1, 0]
    assert out.num_sampled_nodes == [2, 2, 0, 0, 0, 1, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0]
    assert out.num_sampled_edges == [2, 0, 1, 1, 0, 2, 0, 0]


def test_bidirectional_loader_reaches_the_undirected_ball():
    """At fan-out -1 the nodes are the seeds' undirected h-hop ball, every sampled edge is a
    real edge with its e_id (also for an unsorted edge_index), and each edge appears once."""
    data = random_graph(n=30, e=45, seed=4)
    sampler = BidirectionalNeighborSampler(data, [-1, -1], seed=0)
    batch = next(iter(NodeLoader(data, node_sampler=sampler, input_nodes=torch.tensor([0, 1]),
                                 batch_size=2)))
    ball = {0, 1}
    for _ in range(2):
        edges = data.edge_index.t().tolist()
        ball = ball | {v for u, v in edges if u in ball} | {u for u, v in edges if v in ball}
    assert set(batch.n_id.tolist()) == ball and batch.n_id.numel() == len(ball)
    assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id])
    assert batch.e_id.unique().numel() == batch.e_id.numel()


def test_bidirectional_refusals():
    with pytest.raises(RuntimeError, match="edge delimited"):
        BidirectionalNeighborSampler(alice_graph(), {("a", "b", "c"): [1]})
    with pytest.raises(NotImplementedError, match="heterogeneous"):
        BidirectionalNeighborSampler(small_hetero(), [1])
    with pytest.raises(NotImplementedError, match="temporal"):
        BidirectionalNeighborSampler(alice_graph(), [1], time_attr="x")


# ------------------------------------------------------------------------- loaders and workers
def test_link_loader_weighted_and_backward():
    """LinkNeighborLoader's path (LinkLoader + edge_sample): edges are real, e_id maps back."""
    data = random_graph(seed=5)
    eli = data.edge_index[:, :40]
    for opts in ({"weight_attr": "w"}, {"sample_direction": "backward"},
                 {"weight_attr": "w", "replace": True, "disjoint": True}):
        sampler = CsrNeighborSampler(data, [3, 2], seed=0, **opts)
        loader = LinkLoader(data, link_sampler=sampler, edge_label_index=eli, batch_size=10)
        for batch in loader:
            assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id])
            assert torch.equal(batch.n_id[batch.edge_label_index], eli[:, batch.input_id])


def test_new_modes_survive_pickling():
    """DataLoader workers get a pickled copy of the sampler: it must sample the same."""
    import pickle

    data = random_graph(seed=6)
    seeds = NodeSamplerInput(None, torch.arange(6))
    for sampler in (CsrNeighborSampler(data, [3, 2], weight_attr="w", seed=1),
                    CsrNeighborSampler(data, [3, 2], sample_direction="backward", seed=1),
                    HeteroNeighborSampler.from_hetero_data(small_hetero(), [2],
                                                           sample_direction="backward", seed=1)):
        copy = pickle.loads(pickle.dumps(sampler))
        if isinstance(sampler, HeteroNeighborSampler):
            seeds = NodeSamplerInput(None, torch.arange(6), input_type="paper")
        a, b = sampler.sample_from_nodes(seeds), copy.sample_from_nodes(seeds)
        assert str(a.node) == str(b.node) and str(a.edge) == str(b.edge)


def test_hetero_zero_hops_disjoint_and_weighted_replace():
    data = small_hetero()
    out = HeteroNeighborSampler.from_hetero_data(data, [], disjoint=True).sample_from_nodes(
        NodeSamplerInput(None, torch.tensor([3, 1]), input_type="paper"))
    assert out.node["paper"].tolist() == [3, 1] and out.batch["paper"].tolist() == [0, 1]
    assert all(v.numel() == 0 for v in out.edge.values())
    for e in data.edge_types:
        data[e].w = torch.ones(data[e].edge_index.size(1))
    data["paper", "cites", "paper"].w[1::2] = 0.0  # odd edges can never be drawn with replace
    sampler = HeteroNeighborSampler.from_hetero_data(data, [4], weight_attr="w", replace=True,
                                                     seed=0)
    e = ("paper", "cites", "paper")
    positive = torch.zeros(30, dtype=torch.bool)
    positive[data[e].edge_index[1, 0::2]] = True
    out = sampler.sample_from_nodes(NodeSamplerInput(None, torch.nonzero(positive).view(-1),
                                                     input_type="paper"))
    ids = sampler.perm[e][out.edge[e]]
    assert ids.numel() == 4 * int(positive.sum()) and (ids % 2 == 0).all()


# ------------------------------------------------------------------- GraphSAINTEdgeSampler
def pyg_edge_prob(data: Data) -> torch.Tensor:
    """PyG 2.8's GraphSAINTEdgeSampler._sample_nodes weights, line by line on torch (its
    SparseTensor adj: row = sources, col = targets; colcount = in-degree, rowcount = out)."""
    row, col = data.edge_index
    colcount = torch.bincount(col, minlength=data.num_nodes).float()
    rowcount = torch.bincount(row, minlength=data.num_nodes).float()
    deg_in = 1. / colcount
    deg_out = 1. / rowcount
    return (1. / deg_in[row]) + (1. / deg_out[col]) + 1e-10


def test_graphsaint_edge_sampler_draws_edges_as_pygs_code():
    """The drop-in draws edge u -> v ~ in_deg(u) + out_deg(v) (PyG inverts its degrees twice),
    not the paper's 1/out_deg(u) + 1/in_deg(v) that train.saint.sampler=edge keeps."""
    from gnnpipe.sampling.pyg_loaders import GraphSAINTEdgeSampler

    src, dst = [0, 0, 0, 1, 3, 4, 2], [1, 2, 3, 2, 2, 0, 4]  # no reciprocal pairs
    data = Data(edge_index=torch.tensor([src, dst]), num_nodes=5)
    expect = pyg_edge_prob(data).double().numpy()
    # in_deg(u) + out_deg(v): 0->1 1+1, 0->2 1+1, 0->3 1+1, 1->2 1+1, 3->2 1+1, 4->0 1+3, 2->4 3+1
    assert expect.round(6).tolist() == [2, 2, 2, 2, 2, 4, 4]
    paper = (1 / np.bincount(src, minlength=5)[src] + 1 / np.bincount(dst, minlength=5)[dst])
    loader = GraphSAINTEdgeSampler(data, batch_size=1, log=False)
    torch.manual_seed(0)
    drawn = []
    for _ in range(4000):
        n_id, _, e_id = loader[0]
        assert e_id.numel() == 1 and n_id.numel() == 2  # one edge, both its endpoints
        drawn.append(int(e_id[0]))
    seen = np.bincount(drawn, minlength=7) / len(drawn)
    # sigma <= 0.0066 per edge; the paper's rule is 0.044 off on edge 0 -> 2
    assert np.allclose(seen, expect / expect.sum(), atol=0.025), seen
    assert not np.allclose(seen, paper / paper.sum(), atol=0.025)
    # an edge whose source has no in-edge and whose target no out-edge: PyG's 1e-10
    lone = Data(edge_index=torch.tensor([[0, 1], [2, 2]]), num_nodes=3)
    assert GraphSAINTEdgeSampler(lone, batch_size=1, log=False).subgraphs.prob.tolist() == \
        pytest.approx(pyg_edge_prob(lone).double().tolist(), abs=0, rel=1e-6)


# ------------------------------------------------------ train.neighbor.weighted (pipeline)
def _weighted_setup(tmp_path, weighted: bool, with_weights: bool = True):
    """A prepared graph with edge_attrs_node__to__node.parquet weights, the train graph without the edges
    into nodes 0..9, and the neighbor loader's source as the train stage reads it."""
    from types import SimpleNamespace

    import pyarrow as pa

    from gnnpipe import io
    from gnnpipe.training.loader_sources import node_source
    from gnnpipe.config import params_from_dict
    from gnnpipe.training.distributed import SINGLE
    from gnnpipe.data.graph import Graph
    from gnnpipe.data.edges import csr_from_edges
    from gnnpipe.sampling.builders import build
    from prepared_oracle import write_edge_attrs

    rng = np.random.default_rng(3)
    n = 50
    key = np.unique(rng.integers(0, n, 600) * n + rng.integers(0, n, 600))  # no duplicates
    csr = csr_from_edges(key // n, key % n, n)
    src, dst = csr.edge_index().numpy()
    weight = rng.random(csr.num_edges)
    weight[rng.random(csr.num_edges) < 0.5] = 0.0
    io.write_prepared(tmp_path, Graph.homogeneous(csr, torch.zeros(n, 2),
                                                  torch.zeros(n, dtype=torch.long), 2))
    if with_weights:
        write_edge_attrs(tmp_path, EDGE, src, dst, {"weight": pa.array(weight)})
    keep = dst >= 10
    train = csr_from_edges(src[keep], dst[keep], n)
    params = params_from_dict({
        "dataset": {"source": "csv", "edges": {"weight": "w"}},
        "train": {"sampler": "neighbor", "batch_size": n,
                  "neighbor": {"weighted": weighted, "num_neighbors": [1, 1]}}})
    roles = np.zeros(n, dtype=np.int8)  # role codes: every node a train node
    inputs = SimpleNamespace(  # gnnpipe.training.model_inputs.ModelInputs of a homogeneous graph
        graph=Graph.homogeneous(csr, torch.zeros(n, 2), torch.zeros(n, dtype=torch.long), 2),
        message_graphs={"train": train},
        phases={"train": SimpleNamespace(edge_index=train.edge_index())}, target=None)
    source = node_source(SimpleNamespace(prepared=tmp_path), params.train, SINGLE, inputs, roles)
    loader = build(source, params.train, params.seed, SINGLE).loader.loader
    by_key = dict(zip((src * n + dst).tolist(), weight.tolist()))
    t_src, t_dst = train.edge_index().numpy()
    return loader, train, np.array([by_key[k] for k in (t_src * n + t_dst).tolist()])


def test_weighted_neighbor_param_feeds_the_edge_table_weights(tmp_path):
    loader, train, expect = _weighted_setup(tmp_path, weighted=True)
    sampler = loader.node_sampler
    assert np.array_equal(sampler.edge_weight, expect)  # re-aligned to the train graph
    dst = train.targets()
    positive = torch.bincount(dst[torch.from_numpy(expect > 0)], minlength=50)
    assert ((positive[dst] > 0) & torch.from_numpy(expect == 0)).any()  # edges that must lose
    torch.manual_seed(0)
    for batch in loader:
        hop1 = batch.e_id[:batch.num_sampled_edges[0]]  # one in-edge drawn per seed
        assert ((torch.from_numpy(expect)[hop1] > 0) | (positive[dst[hop1]] == 0)).all()


def test_weighted_neighbor_param_defaults_off_and_needs_the_weights(tmp_path):
    loader, _, _ = _weighted_setup(tmp_path, weighted=False)
    assert loader.node_sampler.edge_weight is None  # the default sampler, as before
    with pytest.raises(ValueError, match="holds no edge weights; set dataset.edges.weight"):
        _weighted_setup(tmp_path / "none", weighted=True, with_weights=False)


def test_weighted_neighbor_param_is_refused_where_it_cannot_apply():
    from gnnpipe.config import ParamsError, params_from_dict

    base = {"dataset": {"source": "csv", "edges": {"weight": "w"}}}
    for train in ({"sampler": "shadow"}, {"sampler": "neighbor", "temporal": {"by": "node"}}):
        with pytest.raises(ParamsError, match="train.neighbor.weighted=true draws in-edges"):
            params_from_dict({**base, "train": {**train, "neighbor": {"weighted": True}}})
