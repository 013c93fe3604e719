"""The one batch type of the training loaders (gnnpipe/sampling/batch.py): each adapter names
the loss rows, their targets and weights, and ``Batches`` keeps the loader's own attributes."""

from __future__ import annotations

import torch
from torch_geometric.data import Data, HeteroData

from gnnpipe.sampling import batch as adapt


def _data(**extra) -> Data:
    n = 6
    return Data(x=torch.arange(n, dtype=torch.float).view(n, 1), y=torch.arange(n) * 10,
                edge_index=torch.tensor([[1, 2], [0, 0]]), num_nodes=n, **extra)


def test_seeds_first_keeps_the_first_batch_size_rows_and_the_hop_counts():
    batch = adapt.seeds_first(_data(batch_size=2, num_sampled_nodes=[2, 4],
                                    num_sampled_edges=[2]))
    assert batch.rows == slice(None, 2) and batch.target.tolist() == [0, 10]
    assert batch.num_sampled_nodes == [2, 4] and batch.weight is None


def test_roots_in_both_shadow_layouts_give_the_roots_labels():
    roots = torch.tensor([0, 3])
    first = adapt.roots(_data(root_n_id=roots))
    pyg = adapt.pyg_roots(Data(x=torch.zeros(6, 1), edge_index=torch.empty(2, 0, dtype=torch.long),
                               y=torch.tensor([0, 30]), root_n_id=roots))
    assert first.target.tolist() == pyg.target.tolist() == [0, 30]
    assert torch.equal(first.rows, roots) and first.num_sampled_nodes is None  # no trimming


def test_train_nodes_and_saint_norms():
    mask = torch.tensor([True, False, True, False, False, True])
    cluster = adapt.train_nodes(_data(train_mask=mask))
    assert cluster.target.tolist() == [0, 20, 50] and cluster.weight is None
    saint = adapt.normalized_train_nodes(_data(train_mask=mask, node_norm=torch.arange(6.0),
                                               edge_norm=torch.tensor([0.5, 2.0])))
    assert saint.weight.tolist() == [0.0, 2.0, 5.0] and saint.edge_weight.tolist() == [0.5, 2.0]


def test_pairs_of_homogeneous_and_typed_link_batches():
    data = _data(edge_label_index=torch.tensor([[0, 1], [2, 3]]), edge_label=torch.tensor([1., 0.]))
    batch = adapt.pairs(data)
    assert batch.pairs.tolist() == [[0, 1], [2, 3]] and batch.target.tolist() == [1.0, 0.0]
    hetero = HeteroData()
    hetero["a"].x, hetero["b"].x = torch.zeros(3, 1), torch.zeros(2, 1)
    hetero["a", "to", "b"].edge_index = torch.tensor([[0], [1]])
    hetero["a", "to", "b"].edge_label_index = torch.tensor([[2], [1]])
    hetero["a", "to", "b"].edge_label = torch.tensor([1.0])
    edge_types = (("a", "to", "b"), ("b", "to", "a"))
    typed = adapt.typed_pairs(("a", "b"), edge_types, ("a", "to", "b"))(hetero)
    assert typed.pairs.tolist() == [[2], [4]]  # b's rows follow a's 3 rows
    assert typed.edge_index[("b", "to", "a")].shape == (2, 0)  # every edge type present


def test_batches_convert_and_keep_the_loaders_attributes():
    class Loader:
        skipped, node_sampler = 3, "sampler"

        def __len__(self):
            return 2

        def __iter__(self):
            return iter([_data(batch_size=1), _data(batch_size=2)])

    batches = adapt.Batches(Loader(), adapt.seeds_first)
    assert len(batches) == 2 and batches.skipped == 3 and batches.node_sampler == "sampler"
    assert [b.rows for b in batches] == [slice(None, 1), slice(None, 2)]
    assert not hasattr(adapt.Batches([], adapt.seeds_first), "skipped")
