"""Typed link batches: PyG LinkNeighborLoader semantics on an edge type through
``hetero_link_neighbor_loader`` (ports of PyG's test/loader/test_link_neighbor_loader.py hetero
cases), and ``SupervisionLoader`` on an edge type: leak-free negatives, nothing held out in any
batch, (seed, epoch) determinism, equal DDP shares."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch_geometric.sampler import NegativeSampling

from gnnpipe.config import NeighborParams, params_from_dict
from gnnpipe.training.distributed import DistContext
from gnnpipe.data.synthetic import WRITES
from graph_oracle import REV_WRITES
from gnnpipe.splitting.link_split import negative_weights
from link_oracle import split_links, typed_negative_sampler
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sampling.link import typed_link_loader
from gnnpipe.sampling.loader import hetero_link_neighbor_loader

from test_hetero_data import small_hetero
from test_hetero_neighbor import AP, PP, _hetero


def _global_pairs(batch, e, index):
    return torch.stack([batch[e[0]].n_id[index[0]], batch[e[2]].n_id[index[1]]])


# ----------------------------------------------------------------- PyG ports (LinkLoader)
def test_hetero_link_neighbor_loader_basic_binary():
    """Mirrors PyG test_hetero_link_neighbor_loader_basic (neg_sampling_ratio=1.0): per batch
    2 * batch_size labelled pairs of the edge type, positives first and equal to the input
    edges, labels 1 then 0, every sampled edge a real edge."""
    torch.manual_seed(0)
    data = _hetero(20)
    eli = data[AP].edge_index
    loader = hetero_link_neighbor_loader(data, [-1] * 2, (AP, eli), neg_sampling="binary",
                                         batch_size=20, seed=0)
    assert len(loader) == math.ceil(eli.shape[1] / 20)
    for batch in loader:
        idx = batch[AP].edge_label_index
        b = batch[AP].input_id.numel()
        assert idx.shape == (2, 2 * b)
        assert torch.equal(batch[AP].edge_label, torch.cat([torch.ones(b), torch.zeros(b)]))
        assert torch.equal(_global_pairs(batch, AP, idx[:, :b]), eli[:, batch[AP].input_id])
        for e in data.edge_types:
            row, col = batch[e].edge_index
            full = data[e].edge_index[:, batch[e].e_id]
            assert torch.equal(full[0], batch[e[0]].n_id[row])
            assert torch.equal(full[1], batch[e[2]].n_id[col])


def test_hetero_link_neighbor_loader_keeps_given_labels_without_negatives():
    """Mirrors PyG test_link_neighbor_loader_edge_label (hetero): edge_label passes through."""
    data = _hetero(21)
    eli = data[PP].edge_index[:, :50]
    label = torch.arange(50) % 3
    loader = hetero_link_neighbor_loader(data, [2, 2], (PP, eli), edge_label=label,
                                         batch_size=10, seed=0)
    for batch in loader:
        assert torch.equal(batch[PP].edge_label, label[batch[PP].input_id])
        # one node type: both endpoints index batch['paper']
        idx = batch[PP].edge_label_index
        assert torch.equal(batch["paper"].n_id[idx], eli[:, batch[PP].input_id])
        assert int(idx.max()) < batch["paper"].num_sampled_nodes[0]  # endpoints are the seeds


@pytest.mark.parametrize("amount", [1, 3])
def test_hetero_link_neighbor_loader_triplet(amount):
    """Mirrors PyG test_hetero_link_neighbor_loader_triplet: src_index / dst_pos_index (B,)
    in the endpoint types, dst_neg_index (B,) or (B, amount), no edge_label_index."""
    torch.manual_seed(0)
    data = _hetero(22)
    eli = data[AP].edge_index
    loader = hetero_link_neighbor_loader(data, [3, 2], (AP, eli),
                                         neg_sampling=NegativeSampling("triplet", amount),
                                         batch_size=16, seed=0)
    for batch in loader:
        b = batch[AP].input_id.numel()
        assert "edge_label_index" not in batch[AP]
        src, pos, neg = (batch["author"].src_index, batch["paper"].dst_pos_index,
                         batch["paper"].dst_neg_index)
        assert src.shape == pos.shape == (b,)
        assert neg.shape == ((b,) if amount == 1 else (b, amount))
        assert torch.equal(batch["author"].n_id[src], eli[0, batch[AP].input_id])
        assert torch.equal(batch["paper"].n_id[pos], eli[1, batch[AP].input_id])
        assert int(neg.max()) < batch["paper"].num_sampled_nodes[0]


def test_hetero_link_neighbor_loader_disjoint_trees():
    """Mirrors PyG's disjoint LinkNeighborLoader test: every node carries its pair's tree."""
    data = _hetero(23)
    eli = data[AP].edge_index[:, :30]
    loader = hetero_link_neighbor_loader(data, [2, 2], (AP, eli), batch_size=10, disjoint=True,
                                         seed=0)
    for batch in loader:
        b = batch[AP].input_id.numel()
        assert torch.equal(batch[AP].edge_label_index, torch.arange(b).repeat(2).view(2, -1))
        for t in ("author", "paper"):
            assert batch[t].batch.numel() == batch[t].num_nodes
            assert int(batch[t].batch.max()) < b
        for e in data.edge_types:  # an edge never joins two trees
            row, col = batch[e].edge_index
            assert torch.equal(batch[e[0]].batch[row], batch[e[2]].batch[col])


def test_temporal_hetero_link_neighbor_loader():
    """Mirrors PyG test_temporal_hetero_link_neighbor_loader: with edge_label_time every
    sampled node is no later than its pair's time."""
    data = _hetero(24, time="node")
    eli = data[AP].edge_index
    label_time = torch.from_numpy(np.random.default_rng(0).integers(3, 10, eli.shape[1]))
    loader = hetero_link_neighbor_loader(data, [-1, -1], (AP, eli), time_attr="time",
                                         edge_label_time=label_time, batch_size=8, seed=0)
    seen = 0
    for batch in loader:
        when = label_time[batch[AP].input_id]
        for t in ("author", "paper", "venue"):
            if batch[t].num_nodes:
                assert bool((batch[t].time[batch[t].num_sampled_nodes[0]:] <= when[
                    batch[t].batch[batch[t].num_sampled_nodes[0]:]]).all())
                seen += batch[t].num_nodes
    assert seen > 0


# ------------------------------------------------------------------ SupervisionLoader (typed)
CFG = NeighborParams(num_neighbors=(4, 3))


@pytest.fixture(scope="module")
def typed_link():
    graph = small_hetero()
    cfg = params_from_dict({"split": {"link": {"num_val_negatives": 5, "num_test_negatives": 5,
                                               "disjoint_train_ratio": 0.3}}}).split.link
    split = split_links(graph, cfg, make_rng(0, "split"))
    visible = torch.cat([split.edges["message"], split.edges["train_supervision"]], 1).numpy()
    weights = negative_weights(graph, split.edge_type, "uniform",
                               split.message_graphs["train"][split.edge_type])
    negatives = typed_negative_sampler(graph, split.edge_type, visible[0], visible[1], weights)
    return graph, split, negatives


def _typed_loader(typed_link, cfg=CFG, seed=0, batch_size=32, ctx=DistContext(0, 1, 0),
                  num_workers=0):
    graph, split, negatives = typed_link
    off = graph.offsets()
    e = split.edge_type
    return typed_link_loader(graph.x, split.message_graphs["train"], e,
                             split.edges["train_supervision"], negatives, cfg, seed,
                             batch_size=batch_size, offsets=(off[e[0]], off[e[2]]), ctx=ctx,
                             num_workers=num_workers)


def test_typed_batches_hold_each_supervision_edge_once_then_a_leak_free_negative(typed_link):
    graph, split, _ = typed_link
    e = split.edge_type
    assert e == WRITES
    sup = split.edges["train_supervision"]
    n_dst = graph.num_nodes_dict[e[2]]
    visible = torch.cat([split.edges["message"], sup], 1)
    visible_keys = set((visible[0] * n_dst + visible[1]).tolist())
    loader = _typed_loader(typed_link)
    orders = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        assert len(loader) == -(-sup.shape[1] // 32)
        seen = []
        for batch in loader:
            b = batch[e].edge_label.numel() // 2
            assert torch.equal(batch[e].edge_label, torch.cat([torch.ones(b), torch.zeros(b)]))
            pairs = _global_pairs(batch, e, batch[e].edge_label_index)  # (2, 2b) type-local
            assert torch.equal(pairs[:, :b], sup[:, batch[e].input_id[:b]])  # positives first
            assert torch.equal(batch[e].input_id[b:], batch[e].input_id[:b])
            assert torch.equal(pairs[0, b:], pairs[0, :b])  # a negative keeps its head
            assert not visible_keys & set((pairs[0, b:] * n_dst + pairs[1, b:]).tolist())
            for t in graph.node_types:
                assert torch.equal(batch[t].x, graph.x[t][batch[t].n_id])
            seen.append(batch[e].input_id[:b])
        order = torch.cat(seen)
        assert torch.equal(order.sort().values, torch.arange(sup.shape[1]))  # each edge once
        orders.append(order)
    assert not torch.equal(orders[0], orders[1])  # reshuffled every epoch


@pytest.mark.parametrize("subgraph_type,disjoint", [("directional", False), ("induced", False),
                                                    ("bidirectional", False),
                                                    ("directional", True)])
def test_no_held_out_pair_reaches_any_typed_batch(typed_link, subgraph_type, disjoint):
    """Fan-outs -1 over two epochs: no batch edge of the held-out type or its reverse is a val,
    test or supervision-only pair, and every positive is a supervision edge."""
    graph, split, _ = typed_link
    n_dst = graph.num_nodes_dict["paper"]
    held = torch.cat([split.edges["val"], split.edges["test"]], 1)
    held_keys = set((held[0] * n_dst + held[1]).tolist())
    sup = split.edges["train_supervision"]
    sup_only = set((sup[0] * n_dst + sup[1]).tolist()) - set(
        (split.edges["message"][0] * n_dst + split.edges["message"][1]).tolist())
    assert held_keys and sup_only  # the check has something to find
    cfg = NeighborParams(num_neighbors=(-1, -1), subgraph_type=subgraph_type, disjoint=disjoint)
    loader, sampled = _typed_loader(typed_link, cfg, batch_size=64), 0
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        for batch in loader:
            w = _global_pairs(batch, WRITES, batch[WRITES].edge_index)  # author -> paper
            r = _global_pairs(batch, REV_WRITES, batch[REV_WRITES].edge_index)  # paper -> author
            keys = set((w[0] * n_dst + w[1]).tolist()) | set((r[1] * n_dst + r[0]).tolist())
            assert not keys & held_keys and not keys & sup_only
            b = batch[WRITES].edge_label.numel() // 2
            pos = _global_pairs(batch, WRITES, batch[WRITES].edge_label_index[:, :b])
            assert set((pos[0] * n_dst + pos[1]).tolist()) <= set((sup[0] * n_dst
                                                                   + sup[1]).tolist())
            sampled += len(keys)
    assert sampled > 500


def _snapshot(loader):
    return [(b["paper"].n_id, b[WRITES].edge_index, b[WRITES].edge_label_index,
             b[WRITES].input_id) for b in loader]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for p, q in zip(a, b) for x, y in zip(p, q))


def test_a_typed_epoch_depends_only_on_seed_and_epoch(typed_link):
    walked = _typed_loader(typed_link)
    for epoch in range(2):
        walked.set_epoch(epoch)
        list(walked)
    walked.set_epoch(2)
    fresh = _typed_loader(typed_link)
    fresh.set_epoch(2)
    third = _snapshot(walked)
    assert _same(third, _snapshot(fresh))
    fresh.set_epoch(3)
    assert not _same(third, _snapshot(fresh))
    other = _typed_loader(typed_link, seed=1)
    other.set_epoch(2)
    assert not _same(third, _snapshot(other))


def test_two_ranks_split_each_typed_global_batch_of_one_process(typed_link):
    split = typed_link[1]
    one = _typed_loader(typed_link, batch_size=64)
    ranks = [_typed_loader(typed_link, batch_size=32, ctx=DistContext(r, 2, r)) for r in (0, 1)]
    for loader in (one, *ranks):
        loader.set_epoch(2)

    def pairs(batch):
        g = _global_pairs(batch, WRITES, batch[WRITES].edge_label_index)
        return sorted(zip(batch[WRITES].edge_label.tolist(), g[0].tolist(), g[1].tolist()))

    whole, parts = list(one), [list(loader) for loader in ranks]
    p = split.edges["train_supervision"].shape[1]
    assert len(parts[0]) == len(parts[1]) == math.ceil(math.ceil(p / 2) / 32)
    for g, batch in enumerate(whole[:-1]):  # the last one differs only by the padding
        assert pairs(batch) == sorted(pairs(parts[0][g]) + pairs(parts[1][g])), g


def test_typed_loader_workers_repeat_and_train_on_the_same_pairs(typed_link):
    def epoch(num_workers):
        loader = _typed_loader(typed_link, num_workers=num_workers)
        loader.set_epoch(1)
        torch.manual_seed(7)
        return [(b["paper"].n_id, b[WRITES].edge_index,
                 _global_pairs(b, WRITES, b[WRITES].edge_label_index)) for b in loader]

    first, again, inline = epoch(2), epoch(2), epoch(0)
    assert _same(first, again)
    assert len(first) == len(inline) and all(torch.equal(a[2], b[2])
                                             for a, b in zip(first, inline))


def test_typed_loader_bad_arguments_are_value_errors(typed_link):
    graph, split, negatives = typed_link
    e = split.edge_type
    with pytest.raises(ValueError, match="edge_type"):
        typed_link_loader(graph.x, split.message_graphs["train"], ("paper", "nope", "author"),
                          split.edges["train_supervision"], negatives, CFG, 0, batch_size=4)
    with pytest.raises(ValueError, match="supervision"):
        typed_link_loader(graph.x, split.message_graphs["train"], e,
                          torch.empty(2, 0, dtype=torch.long), negatives, CFG, 0, batch_size=4)
    with pytest.raises(ValueError, match="offsets"):  # targets land outside the paper range
        typed_link_loader(graph.x, split.message_graphs["train"], e,
                          split.edges["train_supervision"], negatives, CFG, 0, batch_size=4,
                          offsets=(graph.offsets()[e[0]], graph.num_nodes))
    x = {t: v for t, v in graph.x.items() if t != "venue"}
    with pytest.raises(ValueError, match="venue"):
        typed_link_loader(x, split.message_graphs["train"], e,
                          split.edges["train_supervision"], negatives, CFG, 0, batch_size=4)


# ------------------------------------------------- optional: against PyG on torch-sparse itself
def _pyg_reference_available() -> bool:
    import torch_geometric.typing as pyg_typing

    return pyg_typing.WITH_TORCH_SPARSE or pyg_typing.WITH_PYG_LIB


@pytest.mark.skipif(not _pyg_reference_available(),
                    reason="PyG's own hetero sampler needs torch-sparse or pyg-lib (the ports "
                           "above check the layout without it)")
@pytest.mark.parametrize("neg", ["binary", "triplet"])
def test_full_fanout_link_batches_equal_pyg_link_neighbor_loader(neg):
    """PyG's LinkNeighborLoader (torch-sparse / pyg-lib) and ours at fan-out -1, the same
    negatives (PyG draws them from torch's RNG, seeded alike): the same labelled pairs in global
    ids, node sets per type and edges per type."""
    from torch_geometric.loader import LinkNeighborLoader

    data = _hetero(25)
    eli = data[AP].edge_index[:, :12]
    torch.manual_seed(3)
    ours = next(iter(hetero_link_neighbor_loader(data, [-1, -1], (AP, eli), neg_sampling=neg,
                                                 batch_size=12, seed=0)))
    torch.manual_seed(3)
    peer = next(iter(LinkNeighborLoader(data, [-1, -1], edge_label_index=(AP, eli),
                                        neg_sampling=neg, batch_size=12)))
    if neg == "binary":
        assert torch.equal(_global_pairs(ours, AP, ours[AP].edge_label_index),
                           _global_pairs(peer, AP, peer[AP].edge_label_index))
        assert torch.equal(ours[AP].edge_label, peer[AP].edge_label)
    else:
        for t, key in (("author", "src_index"), ("paper", "dst_pos_index"),
                       ("paper", "dst_neg_index")):
            assert torch.equal(ours[t].n_id[ours[t][key]], peer[t].n_id[peer[t][key]])
    for t in ("author", "paper", "venue"):
        assert torch.equal(ours[t].n_id.sort().values, peer[t].n_id.sort().values)
    for e in data.edge_types:
        assert torch.equal(ours[e].e_id.sort().values, peer[e].e_id.sort().values)


def test_typed_loaders_edge_lists_are_mapped_scratch_tables_in_a_stage(typed_link, tmp_path):
    """Issue 43 item 1: inside a stage the typed link loader's message edge lists are mapped
    scratch tables (``io.csr_blocks.edge_index_of``), the values of ``csr.edge_index()``; the
    batches are the same."""
    from pathlib import Path

    from gnnpipe.io.temps import scratch_beside

    def mapped(tensor: torch.Tensor) -> bool:
        address = tensor.data_ptr()
        for line in Path("/proc/self/maps").read_text().splitlines():
            fields = line.split(maxsplit=5)
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            if lo <= address < hi:
                return len(fields) == 6 and fields[5].startswith(str(tmp_path))
        return False

    graph, split, _ = typed_link
    want = _typed_loader(typed_link)
    with scratch_beside(tmp_path / "model"):
        got = _typed_loader(typed_link)
    for e, csr in split.message_graphs["train"].items():
        assert mapped(got.data[e].edge_index) and not mapped(want.data[e].edge_index)
        assert torch.equal(got.data[e].edge_index, csr.edge_index())
    torch.manual_seed(0)
    first = [b[WRITES].edge_label_index for b in want]
    torch.manual_seed(0)
    second = [b[WRITES].edge_label_index for b in got]
    assert len(first) == len(second) and all(torch.equal(a, b) for a, b in zip(first, second))
