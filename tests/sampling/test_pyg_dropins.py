"""gnnpipe's PyG drop-ins (gnnpipe.sampling.pyg_loaders and the samplers they build) take what
PyG's take: ``SubgraphType`` members, ``HGTLoader`` with PyG's batch layout, ``time_attr`` on
``(FeatureStore, GraphStore)``, ``BidirectionalNeighborSampler`` on stores; what they refuse
(``adj_t`` instead of ``edge_index``, typed stores in the bidirectional sampler) is a
NotImplementedError. Graphs are tiny and features equal node ids, so a wrong gather shows."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import NodeSamplerInput
from torch_geometric.sampler.base import SubgraphType
from torch_geometric.testing import MyFeatureStore, MyGraphStore

from gnnpipe.sampling.bidirectional import BidirectionalNeighborSampler
from gnnpipe.sampling.neighbor import CsrNeighborSampler, HeteroNeighborSampler
from gnnpipe.sampling.pyg_loaders import (ClusterData, GraphSAINTNodeSampler, HGTLoader,
                                          NeighborLoader, ShaDowKHopSampler,
                                          neighbor_sampler_for)
from gnnpipe.sampling.subgraph import subgraph_type_name

N, E = 30, 150


def random_edges(num_src, num_dst, num_edges, seed) -> torch.Tensor:
    """(2, E) edges in no particular order (so every CSC needs a permutation)."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(np.stack([rng.integers(0, num_src, num_edges),
                                      rng.integers(0, num_dst, num_edges)]))


def homogeneous() -> tuple[Data, tuple]:
    """The same graph as a Data and as PyG's testing stores (COO as given), with a node-level
    ``time`` and an edge-level ``etime``."""
    edge_index = random_edges(N, N, E, seed=0)
    data = Data(x=torch.arange(N, dtype=torch.float)[:, None], edge_index=edge_index,
                time=torch.arange(N) % 5, etime=torch.arange(E) % 7, num_nodes=N)
    fs, gs = MyFeatureStore(), MyGraphStore()
    for name in ("x", "time", "etime"):
        fs.put_tensor(data[name], group_name=None, attr_name=name, index=None)
    gs.put_edge_index((edge_index[0], edge_index[1]), edge_type=None, layout="coo", size=(N, N))
    return data, (fs, gs)


def typed() -> tuple[HeteroData, tuple]:
    """paper (20) / author (30) as a HeteroData and as stores; ``x`` = node id (+100 for
    authors), node-level ``time`` per type, edge-level ``etime`` per edge type."""
    data = HeteroData()
    data["paper"].x = torch.arange(20, dtype=torch.float)
    data["author"].x = torch.arange(100, 130, dtype=torch.float)
    data["paper"].time = torch.arange(20) % 4
    data["author"].time = torch.arange(30) % 3
    sizes = {("paper", "cites", "paper"): (20, 20, 80), ("author", "writes", "paper"): (30, 20, 60),
             ("paper", "rev_writes", "author"): (20, 30, 60)}
    for i, (e, (s, d, m)) in enumerate(sizes.items()):
        data[e].edge_index = random_edges(s, d, m, seed=i)
        data[e].edge_attr = torch.arange(m)
        data[e].etime = torch.arange(m) % 5
    fs, gs = MyFeatureStore(), MyGraphStore()
    for t in data.node_types:
        fs.put_tensor(data[t].x, group_name=t, attr_name="x", index=None)
        fs.put_tensor(data[t].time, group_name=t, attr_name="time", index=None)
    for e in data.edge_types:
        edge_index = data[e].edge_index
        gs.put_edge_index((edge_index[0], edge_index[1]), edge_type=e, layout="coo",
                          size=(data[e[0]].num_nodes, data[e[2]].num_nodes))
    return data, (fs, gs)


def seeded(graph, num_neighbors, **kwargs):
    """``neighbor_sampler_for`` drawing its stream from torch's RNG at seed 0."""
    torch.manual_seed(0)
    return neighbor_sampler_for(graph, num_neighbors, **kwargs)


def assert_same_output(a, b):
    for key in ("node", "row", "col", "edge", "batch"):
        x, y = getattr(a, key), getattr(b, key)
        if isinstance(x, dict):
            assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x), key
        else:
            assert (x is None and y is None) or torch.equal(x, y), key


# -------------------------------------------------------------------------- SubgraphType
def test_subgraph_type_member_or_name():
    for member in SubgraphType:
        assert subgraph_type_name(member) == subgraph_type_name(member.value) == member.value
    with pytest.raises(ValueError, match="subgraph_type='sideways' is not valid"):
        subgraph_type_name("sideways")


@pytest.mark.parametrize("member", list(SubgraphType))
def test_samplers_and_loaders_take_a_subgraph_type_member(member):
    data, _ = homogeneous()
    hetero, _ = typed()
    assert CsrNeighborSampler(data, [2], subgraph_type=member).subgraph_type == member.value
    assert HeteroNeighborSampler.from_hetero_data(
        hetero, [2], subgraph_type=member).subgraph_type == member.value
    batches = []
    for subgraph_type in (member, member.value):
        torch.manual_seed(0)
        batches.append(list(NeighborLoader(data, [3, 2], batch_size=10,
                                           subgraph_type=subgraph_type)))
    for a, b in zip(*batches, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.x[:, 0].long(), a.n_id)
    if member != SubgraphType.induced:  # PyG's bidirectional sampler: directional hops only
        sampler = BidirectionalNeighborSampler(data, [2], subgraph_type=member, seed=0)
        assert sampler.subgraph_type == member.value


# ------------------------------------------------------------------------------- HGTLoader
def test_hgt_loader_batches_have_pygs_layout():
    data, _ = typed()
    torch.manual_seed(0)
    loader = HGTLoader(data, num_samples=[4, 4], input_nodes="paper", batch_size=6)
    assert str(loader) == "HGTLoader()" and len(loader) == 4
    for batch in loader:
        assert set(batch["paper"].keys()) == {"x", "n_id", "input_id", "batch_size", "time"}
        assert set(batch["author"].keys()) == {"x", "n_id", "time"}  # no num_sampled_nodes
        seeds = batch["paper"].batch_size
        assert torch.equal(batch["paper"].n_id[:seeds], batch["paper"].input_id)
        assert torch.equal(batch["paper"].x.long(), batch["paper"].n_id)
        assert torch.equal(batch["author"].x.long(), batch["author"].n_id + 100)
        for e in data.edge_types:
            assert set(batch[e].keys()) == {"edge_index", "edge_attr", "e_id", "etime"}
            assert torch.equal(batch[e].edge_attr, batch[e].e_id)  # edge_attr = edge id
            src, dst = batch[e.__getitem__(0)].n_id, batch[e[2]].n_id
            row, col = batch[e].edge_index
            assert torch.equal(data[e].edge_index[:, batch[e].e_id],
                               torch.stack([src[row], dst[col]]))


def test_hgt_loader_takes_budgets_per_type_and_refuses_stores():
    data, stores = typed()
    loader = HGTLoader(data, {"paper": [3], "author": [0]}, ("paper", torch.arange(5)),
                       batch_size=5)
    batch = next(iter(loader))
    assert batch["author"].num_nodes == 0 and batch["paper"].num_nodes <= 5 + 3
    for graph in (stores, Data(edge_index=random_edges(4, 4, 6, seed=0), num_nodes=4)):
        with pytest.raises(NotImplementedError, match="HGTLoader does not support"):
            HGTLoader(graph, [2], "paper")


# ---------------------------------------------------------------------- time_attr on stores
@pytest.mark.parametrize("time_attr", ["time", "etime"])  # node-level / edge-level (PyG: by name)
def test_time_attr_on_homogeneous_stores_samples_as_on_data(time_attr):
    data, stores = homogeneous()
    inputs = NodeSamplerInput(input_id=None, node=torch.arange(0, N, 3),
                              time=torch.arange(0, N, 3) % 5)
    on_data, on_stores = (seeded(graph, [3, 3], time_attr=time_attr) for graph in (data, stores))
    assert on_stores.is_temporal and on_stores.disjoint
    out = on_stores.sample_from_nodes(inputs)
    assert_same_output(on_data.sample_from_nodes(inputs), out)
    if time_attr == "etime":  # every sampled edge is no later than its tree's seed
        e_id = on_stores.edge_permutation[out.edge]  # CSC position -> stored edge id
        assert (data.etime[e_id] <= inputs.time[out.batch[out.col]]).all()
    assert out.edge.numel() > 0


@pytest.mark.parametrize("time_attr", ["time", "etime"])
def test_time_attr_on_typed_stores_samples_as_on_hetero_data(time_attr):
    data, (fs, gs) = typed()
    if time_attr == "etime":  # edge-level: tensors grouped by edge type, in the stored order
        for e in data.edge_types:
            fs.put_tensor(data[e].etime, group_name=e, attr_name="etime", index=None)
    inputs = NodeSamplerInput(input_id=None, node=torch.arange(10), time=torch.arange(10) % 4,
                              input_type="paper")
    on_data, on_stores = (seeded(graph, [3, 3], time_attr=time_attr)
                          for graph in (data, (fs, gs)))
    assert on_stores.is_temporal and on_stores.disjoint
    assert_same_output(on_data.sample_from_nodes(inputs), on_stores.sample_from_nodes(inputs))


def test_time_attr_missing_from_stores_is_a_value_error():
    _, stores = homogeneous()
    with pytest.raises(ValueError, match="time_attr='when'.* 0 tensors"):
        neighbor_sampler_for(stores, [2], time_attr="when")
    _, typed_stores = typed()
    with pytest.raises(ValueError, match="time_attr='when' names no tensor"):
        neighbor_sampler_for(typed_stores, [2], time_attr="when")
    with pytest.raises(NotImplementedError, match="backward"):  # PyG's refusal
        neighbor_sampler_for(stores, [2], time_attr="time", sample_direction="backward")


# --------------------------------------------------------- BidirectionalNeighborSampler, stores
def test_bidirectional_sampler_on_stores_samples_as_on_data():
    data, stores = homogeneous()
    inputs = NodeSamplerInput(input_id=None, node=torch.tensor([0, 7, 13]))
    on_data = BidirectionalNeighborSampler(data, [2, 2], seed=3)
    on_stores = BidirectionalNeighborSampler(stores, [2, 2], seed=3)
    assert torch.equal(on_data.edge_permutation, on_stores.edge_permutation)
    out = on_stores.sample_from_nodes(inputs)
    assert_same_output(on_data.sample_from_nodes(inputs), out)
    assert out.edge.numel() > 0


def test_bidirectional_sampler_refuses_typed_stores_and_weights_on_stores():
    _, stores = homogeneous()
    with pytest.raises(NotImplementedError, match="weight_attr"):
        BidirectionalNeighborSampler(stores, [2], weight_attr="w")
    _, typed_stores = typed()
    with pytest.raises(NotImplementedError, match="heterogeneous"):
        BidirectionalNeighborSampler(typed_stores, [2])


# ------------------------------------------------------------------- sample_direction, adj_t
def test_neighbor_sampler_for_samples_backward_on_data_and_stores():
    data, stores = homogeneous()
    inputs = NodeSamplerInput(input_id=None, node=torch.tensor([4]))
    outs = []
    for graph in (data, stores):
        sampler = neighbor_sampler_for(graph, [-1], sample_direction="backward")
        assert sampler.sample_direction == "backward"
        outs.append(sampler.sample_from_nodes(inputs))
    assert_same_output(*outs)
    out = outs[0]  # the seed's out-edges: the seed is the source of every sampled edge
    assert torch.equal(out.node[out.row], torch.full_like(out.row, 4))
    assert out.row.numel() == int((data.edge_index[0] == 4).sum())


@pytest.mark.parametrize("make, unless", [
    (lambda d: ShaDowKHopSampler(d, depth=1, num_neighbors=2), ""),
    (lambda d: GraphSAINTNodeSampler(d, batch_size=2), ""),
    (lambda d: ClusterData(d, num_parts=2), ""),
    (lambda d: NeighborLoader(d, [2]), " unless adj_t is a torch-sparse SparseTensor"),
], ids=["shadow", "saint", "cluster", "neighbor"])
def test_adj_t_instead_of_edge_index_is_refused(make, unless):
    edge_index = random_edges(6, 6, 10, seed=0)
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(10), (6, 6),
                                    check_invariants=True)  # the torch-sparse-free kind
    with pytest.raises(NotImplementedError, match=f"adj_t \\(Tensor\\) .*drop-in{unless}; "):
        make(Data(x=torch.zeros(6, 1), adj_t=adj_t, num_nodes=6))

    if unless:  # a typed graph: per edge type
        data = HeteroData()
        data["v"].num_nodes = 6
        data["v", "to", "v"].adj_t = adj_t
        with pytest.raises(NotImplementedError, match=r"\('v', 'to', 'v'\) on a graph with adj_t"):
            make(data)
