"""PyG's remote backend on gnnpipe: GnnpipeFeatureStore / CsrGraphStore follow PyG's own store
tests (test/data/test_feature_store.py, test_graph_store.py, ported), and gnnpipe's samplers on
``(FeatureStore, GraphStore)`` give the batches they give on the equivalent Data / HeteroData
(PyG's test_custom_neighbor_loader, made exact), with gnnpipe's stores and PyG's testing ones."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData, TensorAttr
from torch_geometric.data.feature_store import AttrView
from torch_geometric.data.graph_store import EdgeAttr, EdgeLayout
from torch_geometric.loader import LinkNeighborLoader, NeighborLoader
from torch_geometric.testing import MyFeatureStore, MyGraphStore
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor, to_torch_csr_tensor

from gnnpipe import io
from gnnpipe.data.graph import Csr, Graph
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.io.prepared import write_prepared
from gnnpipe.sampling import CsrNeighborSampler, HeteroNeighborSampler
from gnnpipe.sampling.store import CsrGraphStore, GnnpipeFeatureStore, open_prepared


def random_csr(n=60, e=400, seed=0, num_src=None) -> Csr:
    rng = np.random.default_rng(seed)
    num_src = n if num_src is None else num_src
    return csr_from_edges(rng.integers(0, num_src, e), rng.integers(0, n, e), n)


def features(n, f=4, offset=0) -> torch.Tensor:
    """Row i = (offset + i) in every column: a wrong gather shows."""
    return (torch.arange(n, dtype=torch.float32) + offset)[:, None].repeat(1, f)


# -------------------------------------------------------------- FeatureStore (PyG's test)
def test_feature_store_follows_pygs_feature_store_test():
    store = GnnpipeFeatureStore()
    tensor = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    group_name, attr_name, index = "A", "feat", torch.tensor([0, 1, 2])
    attr = TensorAttr(group_name, attr_name, index)
    store.put_tensor(tensor, attr)
    assert torch.equal(store.get_tensor(attr), tensor)
    assert torch.equal(store.get_tensor(group_name, attr_name, index=torch.tensor([0, 2])),
                       tensor[torch.tensor([0, 2])])
    assert store.update_tensor(tensor + 1, attr)
    assert torch.equal(store.get_tensor(attr), tensor + 1)
    assert store.get_tensor_size(group_name, attr_name) == (3, 3)
    assert store.remove_tensor(attr)
    assert not store.remove_tensor(attr)
    assert store.get_tensor_size(group_name, attr_name) is None
    with pytest.raises(KeyError):
        store.get_tensor(attr)
    view = store.view(group_name=group_name)
    view.attr_name = attr_name
    view["index"] = index
    assert view == AttrView(store, TensorAttr(group_name, attr_name, index))
    store[group_name, attr_name, index] = tensor
    assert torch.equal(store[group_name, attr_name, index], tensor)
    assert torch.equal(store[group_name, attr_name, None], tensor)
    assert torch.equal(store[group_name, attr_name, :], tensor)
    assert torch.equal(store[group_name][attr_name][:], tensor)
    assert torch.equal(store[group_name].feat[:], tensor)
    assert torch.equal(store.view().A.feat[:], tensor)
    store[group_name, None, None] = tensor
    assert isinstance(store[group_name], AttrView)
    assert torch.equal(store[group_name](), tensor)
    del store[group_name, attr_name, index]
    with pytest.raises(KeyError):
        _ = store[group_name, attr_name, index]
    del store[group_name]
    with pytest.raises(KeyError):
        _ = store[group_name]()


def test_feature_store_rows_by_node_id():
    """A put with an index stores the rows of those ids; a get returns the ids asked, in
    order; an id without a row is a KeyError (as MyFeatureStore, which returns fewer rows)."""
    store = GnnpipeFeatureStore()
    x = features(5)
    ids = torch.tensor([7, 3, 9, 0, 4])
    store.put_tensor(x, group_name="t", attr_name="x", index=ids)
    assert torch.equal(store.get_tensor("t", "x", index=torch.tensor([9, 7, 7])),
                       x[[2, 0, 0]])
    assert torch.equal(store.get_tensor("t", "x", index=torch.tensor([0, 4])), x[[3, 4]])
    assert torch.equal(store.get_tensor("t", "x", index=3), x[1])
    assert store.get_tensor_size("t", "x", index=torch.tensor([9, 7, 7])) == (3, 4)
    with pytest.raises(KeyError, match="node id 5"):
        store.get_tensor("t", "x", index=torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="repeats node ids"):
        store.put_tensor(x, group_name="t", attr_name="y", index=torch.tensor([1, 1, 2, 3, 4]))
    assert [(a.group_name, a.attr_name) for a in store.get_all_tensor_attrs()] == [("t", "x")]


# ---------------------------------------------------------------- GraphStore (PyG's test)
def test_graph_store_follows_pygs_graph_store_test():
    store = CsrGraphStore()
    coo = torch.tensor([0, 1]), torch.tensor([1, 2])
    csr = torch.tensor([0, 1, 2]), torch.tensor([1, 2])
    csc = torch.tensor([0, 1]), torch.tensor([0, 0, 1, 2])
    store["edge_type", "coo"] = coo
    store["edge_type", "csr"] = csr
    store["edge_type", "csc"] = csc
    for layout, value in (("coo", coo), ("csr", csr), ("csc", csc)):
        assert all(torch.equal(a, b) for a, b in zip(store["edge_type", layout], value))
    assert len(store.get_all_edge_attrs()) == 3
    del store["edge_type", "coo"]
    with pytest.raises(KeyError):
        store["edge_type", "coo"]
    with pytest.raises(KeyError):
        store["edge_type_2", "coo"]
    with pytest.raises(ValueError, match="pointer"):
        store.put_edge_index((torch.tensor([0, 1]), torch.tensor([0, 3])), "e", "csc")


def test_graph_store_conversion_follows_pygs_test():
    store = CsrGraphStore()
    g = torch.Generator().manual_seed(0)
    edge_index = torch.unique(torch.randint(100, (2, 300), generator=g), dim=1)
    adj = to_torch_coo_tensor(edge_index, size=(100, 100))
    coo = (adj.indices()[0], adj.indices()[1])
    adj = to_torch_csr_tensor(edge_index, size=(100, 100))
    csr = (adj.crow_indices(), adj.col_indices())
    adj = to_torch_csc_tensor(edge_index, size=(100, 100))
    csc = (adj.row_indices(), adj.ccol_indices())
    store.put_edge_index(coo, ("v", "1", "v"), "coo", size=(100, 100))
    store.put_edge_index(csr, ("v", "2", "v"), "csr", size=(100, 100))
    store.put_edge_index(csc, ("v", "3", "v"), "csc", size=(100, 100))
    row_dict, col_dict, perm_dict = store.coo()
    assert len(row_dict) == 3 and all(p is None for p in perm_dict.values())
    for row, col in zip(row_dict.values(), col_dict.values()):
        assert torch.equal(row.sort()[0], coo[0].sort()[0])
        assert torch.equal(col.sort()[0], coo[1].sort()[0])
    row_dict, col_dict, _ = store.csr()
    assert all(torch.equal(row, csr[0]) for row in row_dict.values())
    row_dict, col_dict, _ = store.csc()
    assert all(torch.equal(col, csc[1]) for col in col_dict.values())
    key = EdgeAttr(("v", "1", "v"), EdgeLayout.CSR, is_sorted=False, size=(100, 100))
    with pytest.raises(KeyError):
        store[key]
    store.csr([("v", "1", "v")], store=True)
    assert torch.equal(store[key][0], csr[0])


def test_graph_store_of_a_csr_is_its_csc_without_a_copy():
    csr = random_csr()
    store = CsrGraphStore.from_csr(csr)
    row, colptr, perm = store.csc()
    assert row is csr.indices and colptr is csr.indptr and perm is None
    (attr,) = store.get_all_edge_attrs()
    assert attr.edge_type is None and attr.layout == EdgeLayout.CSC and attr.size == (60, 60)
    rowptr, col, perm = store.csr()  # PyG's conversion: the same edges, by source
    assert torch.equal(torch.stack([csr.indices[perm], col]), csr.edge_index()[:, perm])


# ------------------------------------------------------------------------------- mmap
def _mapped_file(tensor: torch.Tensor) -> str | None:
    """The file whose memory map holds ``tensor``'s first byte (Linux /proc/self/maps)."""
    ptr = tensor.data_ptr()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            if lo <= ptr < hi:
                return fields[5] if len(fields) > 5 else None
    return None


def test_get_of_k_rows_reads_those_rows_from_the_memory_map(tmp_path):
    csr = random_csr(n=300, e=1500)
    x = torch.randn(300, 16)
    io.write_prepared(tmp_path, Graph.homogeneous(csr, x, torch.randint(0, 3, (300,)), 3))
    fs, gs = open_prepared(tmp_path)
    stored = fs.get_tensor(None, "x", None)
    assert _mapped_file(stored) == str(tmp_path / "graph.pt")  # the file, not a copy
    ids = torch.tensor([299, 5, 17, 5])
    rows = fs.get_tensor(None, "x", index=ids)
    assert torch.equal(rows, x[ids])
    assert rows.shape == (4, 16) and rows.untyped_storage().nbytes() == 4 * 16 * 4
    assert _mapped_file(rows) != str(tmp_path / "graph.pt")  # fresh memory, k rows only
    assert torch.equal(gs.csc()[1], csr.indptr)


def test_open_prepared_typed_graph_is_memory_mapped(tmp_path):
    graph = _hetero_graph()
    write_prepared(tmp_path, graph)
    fs, gs = open_prepared(tmp_path)
    assert _mapped_file(fs.get_tensor("author", "x", None)) == str(tmp_path / "graph.pt")
    assert torch.equal(fs.get_tensor("author", "x", index=torch.tensor([3, 1])),
                       graph.x["author"][[3, 1]])
    assert [a.edge_type for a in gs.get_all_edge_attrs()] == list(graph.csr)


# ------------------------------------------------------------------ homogeneous parity
def _pyg_stores(data: Data, layout: str):
    """PyG's testing stores holding ``data`` (edges in ``layout``, COO as given)."""
    fs, gs = MyFeatureStore(), MyGraphStore()
    fs.put_tensor(data.x, group_name=None, attr_name="x", index=None)
    fs.put_tensor(data.y, group_name=None, attr_name="y", index=None)
    n = data.num_nodes
    if layout == "coo":
        gs.put_edge_index((data.edge_index[0], data.edge_index[1]), edge_type=None,
                          layout="coo", size=(n, n))
    else:  # csr: edge ids are then the CSR positions; data must be in that order
        rowptr = torch.zeros(n + 1, dtype=torch.long)  # duplicates kept (to_torch_csr merges)
        rowptr[1:] = torch.cumsum(torch.bincount(data.edge_index[0], minlength=n), 0)
        gs.put_edge_index((rowptr, data.edge_index[1]), edge_type=None, layout="csr",
                          size=(n, n))
    return fs, gs


def _homogeneous(kind: str):
    """(data, stores): the same graph as a Data and as a pair of stores."""
    csr = random_csr()
    x, y = features(60), torch.arange(60) % 3
    if kind == "gnnpipe":
        data = Data(x=x, y=y, edge_index=csr.edge_index(), num_nodes=60)
        return data, (GnnpipeFeatureStore.from_graph(Graph.homogeneous(csr, x, y, 3).target_view()),
                      CsrGraphStore.from_csr(csr))
    edge_index = csr.edge_index()[:, torch.randperm(csr.num_edges,
                                                    generator=torch.Generator().manual_seed(1))]
    if kind == "pyg-csr":  # stored edge order = the CSR of the sources
        edge_index = edge_index[:, torch.argsort(edge_index[0] * 60 + edge_index[1])]
    data = Data(x=x, y=y, edge_index=edge_index, num_nodes=60)
    return data, _pyg_stores(data, kind.split("-")[1])


def assert_same_batch(a, b):
    assert torch.equal(a.n_id, b.n_id)
    assert torch.equal(a.edge_index, b.edge_index)
    assert torch.equal(a.e_id, b.e_id)
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    assert list(a.num_sampled_nodes) == list(b.num_sampled_nodes)
    assert a.get("num_sampled_edges") == b.get("num_sampled_edges")  # None when induced
    assert a.get("batch_size") == b.get("batch_size")  # node batches only
    assert torch.equal(a.input_id, b.input_id)
    assert ("batch" in a) == ("batch" in b)
    if "batch" in a:
        assert torch.equal(a.batch, b.batch)


OPTIONS = [dict(), dict(replace=True, disjoint=True), dict(sample_direction="backward"),
           dict(subgraph_type="induced")]


# not compared: PyG's stores holding CSR with backward sampling (PyG's to_csc re-sorts the
# already sorted sources with an unstable sort, so its Data path orders out-edges differently)
CASES = [(kind, options) for kind in ("gnnpipe", "pyg-coo", "pyg-csr") for options in OPTIONS
         if not (kind == "pyg-csr" and options.get("sample_direction") == "backward")]


@pytest.mark.parametrize("kind,options", CASES,
                         ids=lambda v: v if isinstance(v, str) else
                         "-".join(map(str, v.values())) or "default")
def test_neighbor_loader_on_stores_equals_data(kind, options):
    data, stores = _homogeneous(kind)
    seeds = torch.arange(0, 60, 3)

    def loader(graph, structure):
        sampler = CsrNeighborSampler(structure, [4, 3], seed=7, backend="gnnpipe", **options)
        return NeighborLoader(graph, [4, 3], input_nodes=seeds, batch_size=8,
                              neighbor_sampler=sampler)

    # gnnpipe's own path samples the Csr and gathers from the Data (neighbor_loader): PyG's
    # to_csc re-sorts an already sorted edge_index with an unstable sort
    reference = random_csr() if kind == "gnnpipe" else data
    batches = list(zip(loader(data, reference), loader(stores, stores), strict=True))
    assert len(batches) == 3
    for a, b in batches:
        assert_same_batch(a, b)
        assert b.e_id.numel() > 0
        assert torch.equal(b.x[:, 0].long(), b.n_id)  # features are node ids: gathered right
        src, dst = data.edge_index[:, b.e_id]  # e_id = the stored / user's edge order
        assert torch.equal(torch.stack([b.n_id[b.edge_index[0]], b.n_id[b.edge_index[1]]]),
                           torch.stack([src, dst]))


def test_stores_refuse_weight_attr_as_pyg():
    _, stores = _homogeneous("gnnpipe")
    with pytest.raises(NotImplementedError, match="weight_attr"):
        CsrNeighborSampler(stores, [2], weight_attr="w")
    with pytest.raises(ValueError, match="typed edges"):
        CsrNeighborSampler((stores[0], CsrGraphStore.from_typed(
            {"a": 60}, {("a", "r", "a"): random_csr()})), [2])
    with pytest.raises(ValueError, match="FeatureStore, GraphStore"):
        CsrNeighborSampler((stores[0], stores[0]), [2])


def test_weights_on_stores_follow_the_stored_edge_order():
    data, stores = _homogeneous("pyg-coo")
    w = torch.rand(data.num_edges, generator=torch.Generator().manual_seed(2))
    w[w < 0.5] = 0.0  # given in the stored (COO) order
    on_data = CsrNeighborSampler(data, [1], edge_weight=w, seed=1, backend="gnnpipe")
    on_stores = CsrNeighborSampler(stores, [1], edge_weight=w, seed=1, backend="gnnpipe")
    assert np.array_equal(on_data.edge_weight, on_stores.edge_weight)
    batch = next(iter(NeighborLoader(stores, [1], input_nodes=torch.arange(60),
                                     batch_size=60, neighbor_sampler=on_stores)))
    dst = data.edge_index[1]
    positive = torch.bincount(dst[w > 0], minlength=60)  # in-edges with weight > 0
    assert ((positive[dst] > 0) & (w == 0)).any()  # zero-weight edges that must lose
    drawn = batch.e_id
    assert drawn.numel() == int((torch.bincount(dst, minlength=60) > 0).sum())
    assert ((w[drawn] > 0) | (positive[dst[drawn]] == 0)).all()


def test_link_neighbor_loader_on_stores_equals_data():
    data, stores = _homogeneous("pyg-coo")
    label_index = data.edge_index[:, :24]
    label = torch.arange(24).float()

    def loader(graph, index):
        sampler = CsrNeighborSampler(graph, [3, 2], seed=3, backend="gnnpipe")
        return LinkNeighborLoader(graph, [3, 2], edge_label_index=index, edge_label=label,
                                  batch_size=10, neighbor_sampler=sampler)

    for a, b in zip(loader(data, label_index), loader(stores, (None, label_index)), strict=True):
        assert_same_batch(a, b)
        assert torch.equal(a.edge_label_index, b.edge_label_index)
        assert torch.equal(a.edge_label, b.edge_label)


# ------------------------------------------------------------------------ typed parity
def _hetero_graph() -> Graph:
    sizes = {"paper": 40, "author": 25}
    csr = {("author", "writes", "paper"): random_csr(40, 120, 1, num_src=25),
           ("paper", "cites", "paper"): random_csr(40, 160, 2),
           ("paper", "rev_writes", "author"): random_csr(25, 120, 3, num_src=40)}
    x = {t: features(n, 3, offset=1000 * i) for i, (t, n) in enumerate(sizes.items())}
    return Graph(x=x, csr=csr, target="paper", y=torch.arange(40) % 3, num_classes=3,
                       reverse={}, link_edge_type=("author", "writes", "paper"))


def _typed(kind: str):
    graph = _hetero_graph()
    data = HeteroData()
    for t, x in graph.x.items():
        data[t].x = x
    data["paper"].y = graph.y
    fs = GnnpipeFeatureStore.from_hetero(graph) if kind == "gnnpipe" else MyFeatureStore()
    gs = CsrGraphStore.from_hetero(graph) if kind == "gnnpipe" else MyGraphStore()
    if kind == "pyg":
        for t, x in graph.x.items():
            fs.put_tensor(x, group_name=t, attr_name="x", index=None)
        fs.put_tensor(graph.y, group_name="paper", attr_name="y", index=None)
    g = torch.Generator().manual_seed(4)
    for e, csr in graph.csr.items():
        edge_index = csr.edge_index()
        if kind == "pyg":  # COO in a shuffled order, as PyG's test_custom_hetero_neighbor_loader
            edge_index = edge_index[:, torch.randperm(csr.num_edges, generator=g)]
            size = (graph.num_nodes_dict[e[0]], graph.num_nodes_dict[e[2]])
            gs.put_edge_index((edge_index[0], edge_index[1]), edge_type=e, layout="coo",
                              size=size)
        data[e].edge_index = edge_index
    return data, (fs, gs)


@pytest.mark.parametrize("kind", ["gnnpipe", "pyg"])
@pytest.mark.parametrize("options", [dict(), dict(disjoint=True, replace=True),
                                     dict(sample_direction="backward")],
                         ids=["default", "disjoint", "backward"])
def test_hetero_neighbor_loader_on_stores_equals_hetero_data(kind, options):
    data, stores = _typed(kind)

    def loader(graph, sampler):
        return NeighborLoader(graph, [3, 2], input_nodes=("paper", torch.arange(0, 40, 2)),
                              batch_size=8, neighbor_sampler=sampler)

    if kind == "gnnpipe":  # gnnpipe's path: the typed Csr (PyG's to_hetero_csc re-sorts
        graph = _hetero_graph()  # the sorted edge_index with an unstable sort)
        on_data = HeteroNeighborSampler(graph.num_nodes_dict,
                                        graph.csr, [3, 2], seed=5, **options)
    else:
        on_data = HeteroNeighborSampler.from_hetero_data(data, [3, 2], seed=5, **options)
    on_stores = HeteroNeighborSampler.from_stores(stores, [3, 2], seed=5, **options)
    assert on_stores.num_nodes == on_data.num_nodes
    for a, b in zip(loader(data, on_data), loader(stores, on_stores), strict=True):
        assert a["paper"].batch_size == b["paper"].batch_size
        assert torch.equal(a["paper"].y, b["paper"].y)
        for t in data.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id)
            assert torch.equal(a[t].x, b[t].x)
            assert list(a[t].num_sampled_nodes) == list(b[t].num_sampled_nodes)
        for e in data.edge_types:
            assert torch.equal(a[e].edge_index, b[e].edge_index)
            assert torch.equal(a[e].e_id, b[e].e_id)
            assert list(a[e].num_sampled_edges) == list(b[e].num_sampled_edges)
        assert sum(b[e].e_id.numel() for e in data.edge_types) > 0


def test_hetero_link_neighbor_loader_on_stores_equals_hetero_data():
    data, stores = _typed("pyg")
    edge_type = ("author", "writes", "paper")
    label_index = data[edge_type].edge_index[:, :20]

    def loader(graph, sampler, index):
        return LinkNeighborLoader(graph, [2, 2], edge_label_index=index, batch_size=8,
                                  neighbor_sampler=sampler)

    a_loader = loader(data, HeteroNeighborSampler.from_hetero_data(data, [2, 2], seed=2),
                      (edge_type, label_index))
    b_loader = loader(stores, HeteroNeighborSampler.from_stores(stores, [2, 2], seed=2),
                      (edge_type, label_index))
    for a, b in zip(a_loader, b_loader, strict=True):
        assert torch.equal(a[edge_type].edge_label_index, b[edge_type].edge_label_index)
        for t in data.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id) and torch.equal(a[t].x, b[t].x)
        for e in data.edge_types:
            assert torch.equal(a[e].e_id, b[e].e_id)


# ------------------------------------------------------------- PyG-named drop-in loaders
def test_pyg_named_neighbor_loaders_build_gnnpipes_sampler_for_data_and_stores():
    """One changed import line: NeighborLoader / LinkNeighborLoader from pyg_loaders sample with
    gnnpipe's samplers on Data, HeteroData and both kinds of stores, seeded by torch's RNG."""
    from gnnpipe.sampling import pyg_loaders

    data, stores = _homogeneous("pyg-coo")
    runs = []
    for graph in (data, stores):
        torch.manual_seed(0)
        loader = pyg_loaders.NeighborLoader(graph, [4, 3], input_nodes=torch.arange(0, 60, 3),
                                            batch_size=8)
        assert type(loader.node_sampler) is CsrNeighborSampler
        runs.append(list(loader))
    for a, b in zip(*runs, strict=True):
        assert_same_batch(a, b)
    runs = []
    pairs = data.edge_index[:, :12]
    for graph, index in ((data, pairs), (stores, (None, pairs))):
        torch.manual_seed(1)
        runs.append(list(pyg_loaders.LinkNeighborLoader(graph, [2, 2], edge_label_index=index,
                                                        batch_size=5)))
    for a, b in zip(*runs, strict=True):
        assert_same_batch(a, b)
        assert torch.equal(a.edge_label_index, b.edge_label_index)
    typed, typed_stores = _typed("pyg")
    runs = []
    for graph in (typed, typed_stores):
        torch.manual_seed(2)
        loader = pyg_loaders.NeighborLoader(graph, [3, 2], batch_size=8,
                                            input_nodes=("paper", torch.arange(20)))
        assert type(loader.node_sampler) is HeteroNeighborSampler
        runs.append(list(loader))
    for a, b in zip(*runs, strict=True):
        for t in typed.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id) and torch.equal(a[t].x, b[t].x)
        for e in typed.edge_types:
            assert torch.equal(a[e].e_id, b[e].e_id)
    with pytest.raises(NotImplementedError, match="weight_attr"):
        pyg_loaders.NeighborLoader(typed_stores, [2], input_nodes=("paper", None),
                                   weight_attr="w")


def test_pyg_named_neighbor_loader_reads_time_attr_as_pyg():
    from gnnpipe.sampling import pyg_loaders

    data, _ = _homogeneous("pyg-coo")
    data.time = torch.arange(60) % 7  # node-level: a neighbour no later than its seed
    loader = pyg_loaders.NeighborLoader(data, [-1, -1], input_nodes=torch.arange(60),
                                        time_attr="time", batch_size=20)
    assert loader.node_sampler.is_temporal and loader.node_sampler.disjoint
    for batch in loader:
        assert (batch.time <= batch.time[batch.batch]).all()
        assert (batch.time < batch.time[batch.batch]).any() and batch.num_edges > 0
