"""train.sampler link_neighbor: LinkNeighborLoader-style batches of supervision edges with leak-free
negatives, exact at fan-out -1, nothing held out in any batch, (seed, epoch) determinism, resume,
ranks that split the global batch, and the stage under torchrun and `dvc exp run`."""

from __future__ import annotations

import copy
import dataclasses
import math
import os

import numpy as np
import pytest
import torch
from conftest import as_graph, small_params

from gnnpipe.config import (LinkSplitParams, NeighborParams, ParamsError, TrainParams,
                            params_from_dict, replace)
from gnnpipe.training.distributed import DistContext, share_rows
from link_oracle import edge_keys_both_directions, split_links, training_sampler
from gnnpipe.training.link_train import fit_link
from gnnpipe.training.loop import Checkpointing, LoopOptions
from gnnpipe.reporting.metrics import link_metrics
from gnnpipe.training.models import build_model
from graph_oracle import edge_keys, prepare
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sampling import batch as adapt
from gnnpipe.sampling.link import link_neighbor_loader
from gnnpipe.training.train import build_inputs
from gnnpipe.data.graph import phase_csrs


CFG = TrainParams(sampler="link_neighbor", batch_size=64, hidden=16, epochs=4, patience=4,
                  neighbor=NeighborParams(num_neighbors=(-1, -1)))
MODES = [("directional", False), ("bidirectional", False), ("induced", False),
         ("directional", True), ("induced", True)]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def link_data():
    """A 600-node graph whose split holds supervision-only edges (disjoint_train_ratio 0.3)."""
    params = small_params(num_nodes=600)
    graph = prepare(params.dataset, params.seed)[0].target_view()
    link = split_links(as_graph(graph), LinkSplitParams(disjoint_train_ratio=0.3),
                       make_rng(0, "split"))
    visible = torch.cat([link.edges["message"], link.edges["train_supervision"]], 1).numpy()
    return graph, link, training_sampler(visible[0], visible[1], graph.num_nodes)


def _loader(link_data, cfg=CFG, seed=0, ctx=DistContext(0, 1, 0)):
    graph, link, negatives = link_data
    return link_neighbor_loader(graph.x, phase_csrs(link.message_graphs)["train"],
                                link.edges["train_supervision"], negatives, cfg.neighbor, seed,
                                batch_size=cfg.batch_size, num_workers=cfg.num_workers, ctx=ctx)


def _keys(src: torch.Tensor, dst: torch.Tensor, n: int) -> set[int]:
    return set((src * n + dst).tolist())


# ------------------------------------------------------------------------------ the batches
def test_batches_hold_each_supervision_edge_once_then_its_negative_in_local_ids(link_data):
    graph, link, _ = link_data
    sup, n = link.edges["train_supervision"], graph.num_nodes
    visible = set(edge_keys_both_directions(
        *torch.cat([link.edges["message"], sup], 1).numpy(), n).tolist())
    loader = _loader(link_data, replace(CFG, neighbor={"num_neighbors": (4, 3)}))
    orders = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        assert len(loader) == -(-sup.shape[1] // 64)
        seen = []
        for batch in loader:
            b = batch.edge_label.numel() // 2
            assert torch.equal(batch.edge_label, torch.cat([torch.ones(b), torch.zeros(b)]))
            pairs = batch.n_id[batch.edge_label_index]  # (2, 2b) global
            assert torch.equal(pairs[:, :b], sup[:, batch.input_id[:b]])  # positives first
            assert torch.equal(batch.input_id[b:], batch.input_id[:b])
            assert torch.equal(pairs[0, b:], pairs[0, :b])  # a negative keeps its head
            # the pair endpoints are the seeds: local ids below the hop-0 count
            assert int(batch.edge_label_index.max()) < batch.num_sampled_nodes[0]
            assert int(batch.edge_index.max()) < batch.num_nodes
            assert torch.equal(batch.x, graph.x[batch.n_id])
            negative_keys = (pairs[0, b:] * n + pairs[1, b:]).tolist()
            assert not visible & set(negative_keys)  # never an edge training may see
            assert bool((pairs[0, b:] != pairs[1, b:]).all())
            seen.append(batch.input_id[:b])
        order = torch.cat(seen)
        assert torch.equal(order.sort().values, torch.arange(sup.shape[1]))  # each edge once
        orders.append(order)
    assert not torch.equal(orders[0], orders[1])  # reshuffled every epoch


@pytest.mark.parametrize("subgraph_type,disjoint", MODES)
def test_no_held_out_edge_reaches_any_batch(link_data, subgraph_type, disjoint):
    """All fan-outs -1 (every reachable edge) over two epochs: the message edges of every batch
    are train-phase message edges, none of them a val, test or supervision-only pair in either
    direction, and every positive is a supervision edge."""
    graph, link, _ = link_data
    n = graph.num_nodes
    message = set(edge_keys(phase_csrs(link.message_graphs)["train"]).tolist())
    sup = link.edges["train_supervision"]
    held = np.concatenate([link.edges["val"], link.edges["test"]], 1)
    held_keys = set(edge_keys_both_directions(held[0], held[1], n).tolist())
    supervision_only = set(edge_keys_both_directions(*sup.numpy(), n).tolist()) - set(
        edge_keys_both_directions(*link.edges["message"].numpy(), n).tolist())
    assert held_keys and supervision_only  # the check has something to find
    assert not (held_keys | supervision_only) & message
    cfg = replace(CFG, neighbor={"subgraph_type": subgraph_type, "disjoint": disjoint,
                                 "num_neighbors": (-1, -1)})
    loader, sampled = _loader(link_data, cfg), 0
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        for batch in loader:
            keys = _keys(batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]], n)
            assert keys <= message
            assert not keys & held_keys and not keys & supervision_only
            b = batch.edge_label.numel() // 2
            pos = batch.n_id[batch.edge_label_index[:, :b]]
            assert _keys(pos[0], pos[1], n) <= _keys(sup[0], sup[1], n)
            sampled += len(keys)
    assert sampled > 1000


@pytest.mark.parametrize("subgraph_type,disjoint", MODES)
def test_full_fanout_embeddings_at_the_pairs_equal_the_full_graph_forward(link_data,
                                                                          subgraph_type, disjoint):
    graph, link, _ = link_data
    cfg = replace(CFG, neighbor={"subgraph_type": subgraph_type, "disjoint": disjoint})
    torch.manual_seed(0)
    model = build_model("sage", graph.x.shape[1], cfg.hidden, cfg).eval()
    edge_index = phase_csrs(link.message_graphs)["train"].edge_index()
    with torch.no_grad():
        full = model(graph.x, edge_index)  # (N, H) on the whole train-phase graph
        batches = list(_loader(link_data, cfg))
        for batch in batches:
            z = model(batch.x, batch.edge_index)
            torch.testing.assert_close(z[batch.edge_label_index],
                                       full[batch.n_id[batch.edge_label_index]],
                                       atol=1e-5, rtol=1e-5)
        # ... and the check has teeth: with small fan-outs some endpoint differs
        short = _loader(link_data, replace(cfg, neighbor={"num_neighbors": (2, 1)}))
        gap = max(float((model(b.x, b.edge_index)[b.edge_label_index]
                         - full[b.n_id[b.edge_label_index]]).abs().max()) for b in short)
    assert len(batches) == math.ceil(link.edges["train_supervision"].shape[1] / 64) > 5
    assert gap > 1e-3


def _snapshot(loader) -> list[tuple[torch.Tensor, ...]]:
    return [(b.n_id, b.edge_index, b.edge_label_index, b.input_id) for b in loader]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for p, q in zip(a, b) for x, y in zip(p, q))


def test_an_epoch_depends_only_on_seed_and_epoch(link_data):
    """So a resumed run draws what an uninterrupted one would: epoch 3 of a loader that went
    through epochs 0-2 equals epoch 3 of a fresh one (fan-outs 5, 3: the sampler draws too)."""
    cfg = replace(CFG, neighbor={"num_neighbors": (5, 3)})
    walked = _loader(link_data, cfg)
    for epoch in range(3):
        walked.set_epoch(epoch)
        list(walked)
    walked.set_epoch(3)
    fresh = _loader(link_data, cfg)
    fresh.set_epoch(3)
    third = _snapshot(walked)
    assert _same(third, _snapshot(fresh))
    fresh.set_epoch(4)
    assert not _same(third, _snapshot(fresh))
    other = _loader(link_data, cfg, seed=1)
    other.set_epoch(3)
    assert not _same(third, _snapshot(other))


def test_loader_workers_repeat_and_train_on_the_same_pairs(link_data):
    """Two workers (not persistent: each epoch's workers get that epoch's order and negatives):
    an epoch repeats for a fixed torch seed, with the pairs of the in-process loader; only the
    neighbour draws differ (each worker has its own stream)."""
    cfg = replace(CFG, neighbor={"num_neighbors": (5, 3)})

    def epoch(num_workers):
        loader = _loader(link_data, dataclasses.replace(cfg, num_workers=num_workers))
        loader.set_epoch(1)
        torch.manual_seed(7)  # the workers' base seed
        return [(b.n_id, b.edge_index, b.n_id[b.edge_label_index]) for b in loader]

    first, again, inline = epoch(2), epoch(2), epoch(0)
    assert _same(first, again)
    assert all(torch.equal(a[2], b[2]) for a, b in zip(first, inline)) and len(first) == len(inline)


def test_two_ranks_split_each_global_batch_of_one_process(link_data):
    """Step g of 2 ranks with batch_size 32 = step g of 1 process with batch_size 64: the same
    positives with the same negatives; both ranks take the same number of steps (padded)."""
    link = link_data[1]
    one = _loader(link_data, dataclasses.replace(CFG, batch_size=64))
    ranks = [_loader(link_data, dataclasses.replace(CFG, batch_size=32), ctx=DistContext(r, 2, r))
             for r in (0, 1)]
    for loader in (one, *ranks):
        loader.set_epoch(2)

    def pairs(batch):  # (label, head, target) of each labelled pair, global ids, sorted
        g = batch.n_id[batch.edge_label_index]
        return sorted(zip(batch.edge_label.tolist(), g[0].tolist(), g[1].tolist()))

    whole, parts = list(one), [list(loader) for loader in ranks]
    p = link.edges["train_supervision"].shape[1]
    assert len(parts[0]) == len(parts[1]) == math.ceil(math.ceil(p / 2) / 32)
    for g, batch in enumerate(whole[:-1]):  # the last one differs only by the padding
        assert pairs(batch) == sorted(pairs(parts[0][g]) + pairs(parts[1][g])), g


# ------------------------------------------------------------------------------- training
def _fit(link_data, model="sage", cfg=CFG, seed=0, loader=True, checkpointing=None):
    graph, link, negatives = link_data
    cfg = dataclasses.replace(cfg, model=model)
    inputs = build_inputs(graph.x, message_graphs=phase_csrs(link.message_graphs))
    batches = _loader(link_data, cfg, seed=seed + 1) if loader else None
    return fit_link(lambda: build_model(model, graph.x.shape[1], cfg.hidden, cfg), inputs,
                    link.edges, link.negatives, negatives, cfg, seed,
                    loader=batches and adapt.Batches(batches, adapt.pairs),
                    options=LoopOptions(checkpointing=checkpointing))


def test_mini_batch_link_training_learns_and_repeats(link_data):
    """The sampled sage encoder beats the structure-free MLP trained on the same batches."""
    # hidden 32: at 16 the margin hangs on the draw (+0.04..+0.10 over seeds 0-2), at 32 it is
    # +0.10 for each
    cfg = replace(CFG, neighbor={"num_neighbors": (10, 5)}, epochs=15, patience=15, hidden=32)
    gnn, mlp = _fit(link_data, cfg=cfg), _fit(link_data, "mlp", cfg=cfg)
    auc = {name: link_metrics(*(s.numpy() for s in result.scores["test"]), (10,))["roc_auc"]
           for name, result in (("gnn", gnn), ("mlp", mlp))}
    assert auc["gnn"] > 0.6 and auc["gnn"] > auc["mlp"] + 0.05, auc
    assert gnn.perf_history[0]["batches"] == math.ceil(
        link_data[1].edges["train_supervision"].shape[1] / 64)
    short = dataclasses.replace(cfg, epochs=2)
    first, again, other = _fit(link_data, cfg=short), _fit(link_data, cfg=short), _fit(
        link_data, cfg=short, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(first.scores["test"], again.scores["test"]))
    assert first.history == again.history
    assert not torch.equal(first.scores["test"][0], other.scores["test"][0])


@pytest.mark.parametrize("loader", [True, False], ids=["link_neighbor", "full"])
def test_resumed_link_training_ends_where_an_uninterrupted_run_does(link_data, loader):
    cfg = replace(CFG, neighbor={"num_neighbors": (5, 3)}, epochs=5, patience=5)
    saved: list[dict] = []
    whole = _fit(link_data, cfg=cfg, loader=loader, checkpointing=Checkpointing(
        every=1, save=lambda payload: saved.append(copy.deepcopy(payload))))
    assert [s["epoch"] for s in saved] == [1, 2, 3, 4, 5]
    resumed = _fit(link_data, cfg=cfg, loader=loader, checkpointing=Checkpointing(
        every=0, save=lambda payload: None, resume_from=saved[1]))  # killed after epoch 2
    assert resumed.history == whole.history and resumed.summary == whole.summary
    for phase in ("val", "test"):
        assert all(torch.equal(a, b) for a, b in zip(resumed.scores[phase], whole.scores[phase]))


# --------------------------------------------------------------------------------- params
@pytest.mark.parametrize("raw, message", [
    ({"train": {"sampler": "link_neighbor"}},
     r"train.sampler='link_neighbor' samples around supervision edges and needs "
     r"dataset.task=link \(found 'node'\)"),
    ({"dataset": {"task": "link"}, "train": {"sampler": "neighbor"}},
     r"train.sampler='neighbor' .*for dataset.task=link use train.sampler=link_neighbor"),
    ({"dataset": {"task": "link"}, "train": {"sampler": "link_neighbor", "neighbor": {"num_neighbors": [5]}}},
     r"train.neighbor.num_neighbors=\[5\] has 1 hops but train.num_layers=2"),
])
def test_sampler_and_task_must_agree(raw, message):
    with pytest.raises(ParamsError, match=message):
        params_from_dict(raw)
    assert params_from_dict({"dataset": {"task": "link"},
                             "train": {"sampler": "link_neighbor"}}).train.sampler == "link_neighbor"


# --------------------------------------------------------------------------- DDP and DVC
DDP_CFG = dataclasses.replace(CFG, dropout=0.0, epochs=3, patience=3)


def _ddp_fit(batch_size: int, ctx: DistContext):
    """Link training of the 600-node split at fan-out -1, as rank ``ctx`` of its world."""
    params = small_params(num_nodes=600)
    graph = prepare(params.dataset, params.seed)[0].target_view()
    link = split_links(as_graph(graph), LinkSplitParams(), make_rng(0, "split"))
    sup = link.edges["train_supervision"]
    # an even number of supervision edges: the 2 ranks' shares need no padding, so their last
    # batches are equal halves of the one process's last batch too
    link.edges["train_supervision"] = sup[:, :sup.shape[1] // 2 * 2]
    visible = torch.cat([link.edges["message"], sup], 1).numpy()
    data = (graph, link, training_sampler(visible[0], visible[1], graph.num_nodes))
    cfg = dataclasses.replace(DDP_CFG, batch_size=batch_size)
    inputs = build_inputs(graph.x, message_graphs=phase_csrs(link.message_graphs))
    # each rank scores its share of the val / test positives: it holds only their negatives
    negatives = {p: n[share_rows(link.edges[p].shape[1], ctx)] for p, n in link.negatives.items()}
    return fit_link(lambda: build_model("sage", graph.x.shape[1], cfg.hidden, cfg), inputs,
                    link.edges, negatives, data[2], cfg, 0,
                    loader=adapt.Batches(_loader(data, cfg, seed=1, ctx=ctx), adapt.pairs),
                    options=LoopOptions(ctx=ctx))


def _ddp_worker(rank: int, port: int, batch_size: int, queue) -> None:
    from gnnpipe.training import distributed

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    ctx = DistContext(rank, 2, rank)
    distributed.init_process_group(ctx, timeout_s=120)
    try:
        result = _ddp_fit(batch_size, ctx)
        # small items only: a pipe holds ~64 KB and the parent reads after the workers exit
        scores = result.scores["test"][0].tolist() if result.scores else None  # rank 0's
        queue.put((rank, result.history, scores))
    finally:
        distributed.shutdown()


def test_two_gloo_processes_match_one_process_on_the_same_global_batches():
    """At fan-out -1 a rank's subgraph gives exact embeddings and 2 ranks x batch_size B cover
    the pairs of 1 process x 2B, so DDP's averaged gradient is the one-process gradient: the
    losses, val MRR and test scores agree."""
    import socket

    import torch.multiprocessing as mp

    one = _ddp_fit(64, DistContext(0, 1, 0))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(_ddp_worker, args=(port, 32, queue), nprocs=2, start_method="spawn")
    ranks = dict((rank, (history, scores)) for rank, history, scores in
                 (queue.get() for _ in range(2)))
    assert ranks[0][0] == ranks[1][0]  # every rank logs the same reduced numbers
    assert len(ranks[0][0]) == len(one.history) == 3
    for a, b in zip(one.history, ranks[0][0]):
        assert abs(a["train_loss"] - b["train_loss"]) < 1e-4, (a, b)
        assert abs(a["val_mrr"] - b["val_mrr"]) < 1e-3, (a, b)
    torch.testing.assert_close(torch.tensor(ranks[0][1]), one.scores["test"][0],
                               atol=1e-3, rtol=1e-3)
