"""ClusterGCN and GraphSAINT samplers: valid induced subgraphs of the train graph, the same
batches from the whole graph and from shards, empty batches skipped and ranks padded, GraphSAINT
norms that match their definition, and training through fit (AMP, compile errors, throughput)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from gnnpipe.training import loop
from gnnpipe.training import train as train_module
from gnnpipe.config import NodeSplitParams, PartitionParams, TrainParams
from gnnpipe.data.graph import Csr
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.training.loop import LoopOptions
from gnnpipe.training.models import build_model
from gnnpipe.graphops.partition import assign_parts
from shard_oracle import build_shard
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sampling import batch as adapt
from gnnpipe.sampling.cluster import ClusterLoader, GraphParts, ShardParts, cluster_schedule
from gnnpipe.sampling.saint import (SaintLoader, SaintSampler, estimate_norm, norm_from_counts,
                                    random_walks)
from gnnpipe.training.distributed import SINGLE
from gnnpipe.training.sharding import (NodeRows, ShardEvaluator, shard_node_ids,
                                       shard_part_counts)
from split_oracle import split_nodes
from gnnpipe.io.common import role_codes
from gnnpipe.training.train import _step, build_inputs, fit, phase_index
from conftest import as_graph

FAST = TrainParams(epochs=40, patience=40, hidden=32)


# ------------------------------------------------------------------------------- helpers
def _edge_set(csr: Csr) -> set[tuple[int, int]]:
    src, dst = csr.edge_index().tolist()
    return set(zip(src, dst))


def _check_induced(batch, csr: Csr, edges: set, roles: np.ndarray, x: torch.Tensor):
    """``batch`` is the subgraph of ``csr`` induced on ``batch.n_id``, with its rows and mask."""
    n_id = batch.n_id
    assert n_id.unique().numel() == n_id.numel() == batch.num_nodes
    assert batch.edge_index.min() >= 0 and batch.edge_index.max() < batch.num_nodes
    src, dst = n_id[batch.edge_index].tolist()
    got = list(zip(src, dst))
    assert len(set(got)) == len(got) and set(got) <= edges  # every edge exists, none twice
    members = set(n_id.tolist())
    induced = {(u, v) for u, v in edges if u in members and v in members}
    assert set(got) == induced  # and every train-graph edge among the nodes is there
    assert torch.equal(batch.x, x[n_id])
    assert batch.train_mask.tolist() == (roles[n_id.numpy()] == "train").tolist()


@pytest.fixture(scope="module")
def setup(request):
    """A 1500-node graph, its transductive split, a 6-part METIS partition and 1-hop shards."""
    from conftest import small_params
    from graph_oracle import prepare

    params = small_params()
    graph = prepare(params.dataset, params.seed)[0].target_view()
    roles = split_nodes(as_graph(graph), NodeSplitParams(), make_rng(0, "split")).roles
    parts = assign_parts(graph.csr, PartitionParams(num_parts=6), make_rng(0, "partition"))
    shards = [build_shard(graph.csr, parts, p, 6, 1) for p in range(6)]
    return graph, roles, parts, shards


def _cluster_loader(graph, roles, parts, ppb, source=None, rank=0, world=1):
    source = source or GraphParts(graph.csr, parts, 6)
    train_per_part = np.bincount(parts[roles == "train"], minlength=6)
    return ClusterLoader(source, NodeRows(graph.x, graph.y), torch.from_numpy(roles == "train"),
                         train_per_part, ppb, rank, world)


# ------------------------------------------------------------------------------- cluster
def test_cluster_batches_are_induced_subgraphs_of_the_parts(setup):
    graph, roles, parts, _ = setup
    edges = _edge_set(graph.csr)
    torch.manual_seed(0)
    batches = list(_cluster_loader(graph, roles, parts, ppb=2))
    assert len(batches) == 3
    seen = []
    for batch in batches:
        _check_induced(batch, graph.csr, edges, roles, graph.x)
        assert set(parts[batch.n_id.numpy()].tolist()) == set(batch.parts.tolist())
        assert batch.n_id.numel() == int(np.isin(parts, batch.parts.numpy()).sum())
        cross = parts[batch.n_id[batch.edge_index[0]].numpy()] != \
            parts[batch.n_id[batch.edge_index[1]].numpy()]
        assert cross.any()  # edges between the batch's parts are restored
        seen += batch.parts.tolist()
    assert sorted(seen) == list(range(6))  # each part once per epoch


def test_parts_are_shuffled_per_epoch_from_torchs_rng(setup):
    graph, roles, parts, _ = setup
    loader = _cluster_loader(graph, roles, parts, ppb=2)
    orders = []
    for seed in (0, 0, 1):
        torch.manual_seed(seed)
        orders.append([b.parts.tolist() for b in loader])
    assert orders[0] == orders[1] and orders[0] != orders[2]


def test_shards_give_the_same_batches_as_the_whole_graph(setup):
    graph, roles, parts, shards = setup
    whole, from_shards = GraphParts(graph.csr, parts, 6), ShardParts(shards)
    for batch_parts in ([0], [3, 1], [5, 2, 4], list(range(6))):
        n_a, e_a, pos, core_a = whole.batch(batch_parts)
        n_b, e_b, _, core_b = from_shards.batch(batch_parts)
        assert np.array_equal(n_a, n_b) and np.array_equal(e_a, e_b), batch_parts
        assert core_a == core_b == n_a.size
        assert torch.equal(graph.csr.edge_index()[:, pos], torch.from_numpy(n_a[e_a]))


def test_shards_without_halo_cannot_restore_edges_between_parts(setup):
    graph, _, parts, _ = setup
    with pytest.raises(ValueError, match=r"needs partition\.halo_hops >= 1"):
        ShardParts([build_shard(graph.csr, parts, 0, 6, 0)])


def test_empty_batches_are_skipped_and_counted_and_ranks_take_equal_steps():
    train_per_part = np.array([5, 0, 0, 3, 0, 7, 2, 0])
    order = np.arange(8)
    batches, skipped = cluster_schedule(train_per_part, 1, 0, 1, order)
    assert batches == [[0], [3], [5], [6]] and skipped == 4
    # two ranks: rank 0 holds parts 0 2 4 6 (2 non-empty), rank 1 parts 1 3 5 7 (2 non-empty)
    ranks = [cluster_schedule(train_per_part, 1, r, 2, order) for r in range(2)]
    assert [len(b) for b, _ in ranks] == [2, 2] and [s for _, s in ranks] == [2, 2]
    # three ranks: rank 0 [0, 3, 6] -> 3 batches; rank 2 [2, 5] -> 1 non-empty, padded to 3
    batches, skipped = cluster_schedule(train_per_part, 1, 2, 3, order)
    assert batches == [[5], [5], [5]] and skipped == 1
    with pytest.raises(ValueError, match=r"rank 1's partition parts \[1, 4, 7\] hold no train"):
        cluster_schedule(train_per_part, 1, 1, 3, order)


def test_a_loader_reports_the_empty_batches_it_skipped(setup):
    graph, roles, parts, _ = setup
    only_part_0 = np.where(parts == 0, roles, "val")  # train nodes only in part 0
    loader = _cluster_loader(graph, only_part_0, parts, ppb=1)
    torch.manual_seed(0)
    batches = list(loader)
    assert [b.parts.tolist() for b in batches] == [[0]] and loader.skipped == 5


def test_all_parts_in_one_batch_is_full_graph_training(setup):
    graph, roles, parts, _ = setup
    cfg = dataclasses.replace(FAST, epochs=1, dropout=0.0)
    inputs = build_inputs(graph.x, message_graphs={p: graph.csr for p in ("train", "val", "test")})
    build = lambda: build_model("sage", graph.x.shape[1], graph.num_classes, cfg)  # noqa: E731
    full = fit(build, inputs, graph.y, role_codes(roles), cfg, 0)
    cluster = fit(build, inputs, graph.y, role_codes(roles), cfg, 0, loader=adapt.Batches(
        _cluster_loader(graph, roles, parts, ppb=6), adapt.train_nodes))
    assert abs(full.history[0]["train_loss"] - cluster.history[0]["train_loss"]) < 1e-5
    assert torch.allclose(full.logits, cluster.logits, atol=1e-4)  # and the same update


def test_shard_evaluation_is_exact_when_the_halo_covers_every_layer(setup):
    graph, roles, parts, _ = setup
    shards = [build_shard(graph.csr, parts, p, 6, 2) for p in range(6)]
    torch.manual_seed(0)
    model = build_model("sage", graph.x.shape[1], graph.num_classes, FAST).eval()
    ids = torch.unique(torch.cat([s.node_id for s in shards[:3]]))
    codes = role_codes(roles)
    evaluator = ShardEvaluator(shards[:3], NodeRows(graph.x[ids], graph.y[ids], ids),
                               torch.from_numpy(codes[ids.numpy()]))
    node_id, logits = evaluator.logits(model)
    with torch.no_grad():
        expected = model(graph.x, graph.csr.edge_index())[node_id]
    assert sorted(node_id.tolist()) == np.flatnonzero(parts < 3).tolist()
    assert torch.allclose(logits, expected, atol=1e-5)
    y, held_roles = evaluator.targets()  # the rank's own labels and roles, in logits order
    assert torch.equal(y, graph.y[node_id]) and np.array_equal(held_roles, codes[node_id.numpy()])


def test_a_shard_rank_holds_only_its_rows_and_gets_the_whole_graphs_batches(setup):
    """train.dist.shard: partition: rows, labels and the train mask of the shards' nodes alone
    (no array of every node) give the batches of the whole graph's rows and mask."""
    graph, roles, parts, shards = setup
    mine = [shards[p] for p in (0, 2, 4)]
    ids = shard_node_ids(mine)
    train = torch.from_numpy(roles == "train")
    per_part = shard_part_counts(mine + [shards[p] for p in (1, 3, 5)], role_codes(roles), 6,
                                 SINGLE)
    assert np.array_equal(per_part, np.bincount(parts[roles == "train"], minlength=6))
    held = ClusterLoader(ShardParts(mine), NodeRows(graph.x[ids], graph.y[ids], ids), train[ids],
                         per_part, 1, 0, 2)
    whole = _cluster_loader(graph, roles, parts, ppb=1, rank=0, world=2)
    for seed in (0, 1):
        torch.manual_seed(seed)
        a = list(held)
        torch.manual_seed(seed)
        for got, want in zip(a, whole, strict=True):
            for key in ("n_id", "x", "y", "train_mask", "edge_index"):
                assert torch.equal(got[key], want[key]), key


def test_shards_that_miss_split_nodes_fail_before_training(setup):
    _, roles, _, shards = setup
    with pytest.raises(ValueError, match="do not cover every split node"):
        shard_part_counts(shards[:5], role_codes(roles), 6, SINGLE)


def test_fit_with_an_evaluator_orders_the_ranks_nodes_by_phase_and_id(setup):
    """No labels or roles of every node: the evaluator's own give the accuracies and fit's
    train, val then test order, ids ascending (as fit without an evaluator writes them)."""
    graph, roles, parts, _ = setup
    shards = [build_shard(graph.csr, parts, p, 6, 2) for p in range(6)]
    ids = shard_node_ids(shards)
    rows = NodeRows(graph.x[ids], graph.y[ids], ids)
    codes = torch.from_numpy(role_codes(roles)[ids.numpy()])
    cfg = dataclasses.replace(FAST, epochs=2)
    build = lambda: build_model("sage", graph.x.shape[1], graph.num_classes, cfg)  # noqa: E731
    loader = adapt.Batches(ClusterLoader(ShardParts(shards), rows, codes == 0,
                                         np.bincount(parts[roles == "train"], minlength=6), 6),
                           adapt.train_nodes)
    evaluator = ShardEvaluator(shards, rows, codes)
    result = fit(build, None, None, None, cfg, 0, loader=loader, evaluator=evaluator)
    order = phase_index(role_codes(roles))
    assert torch.equal(result.node_id, torch.cat([order[p] for p in ("train", "val", "test")]))
    model = build()
    model.load_state_dict(result.state_dict)
    node_id, logits = evaluator.logits(model.eval())
    at = torch.argsort(node_id)
    expected = logits[at[torch.searchsorted(node_id[at], result.node_id)]]
    assert torch.equal(result.logits, expected)
    val = order["val"]
    best = result.history[result.summary["best_epoch"] - 1]["val_acc"]
    assert best == round(float((expected[len(order["train"]):][:len(val)].argmax(1)
                                == graph.y[val]).float().mean()), 6)
    with pytest.raises(ValueError, match="pass y and roles None"):
        fit(build, None, graph.y, role_codes(roles), cfg, 0, loader=loader,
            evaluator=evaluator)


# --------------------------------------------------------------------------------- saint
def test_random_walks_step_along_in_edges():
    csr = csr_from_edges(np.array([1, 2, 0, 3]), np.array([0, 0, 1, 2]), 5)  # 4 has no in-edge
    walks = random_walks(csr.indptr.numpy(), csr.indices.numpy(), np.array([0, 0, 4, 3]), 4,
                         np.random.default_rng(0))
    edges = _edge_set(csr)
    assert walks.shape == (4, 5) and walks[:, 0].tolist() == [0, 0, 4, 3]
    for walk in walks.tolist():
        for here, there in zip(walk, walk[1:]):
            indeg = int(csr.degrees()[here])
            assert (there, here) in edges if indeg else there == here


def test_saint_batches_are_induced_subgraphs_with_their_norms(setup):
    graph, roles, _, _ = setup
    train = torch.from_numpy(np.flatnonzero(roles == "train"))
    sampler = SaintSampler(graph.csr, train, batch_size=64, walk_length=2)
    norm = estimate_norm(sampler, 5, seed=0)
    loader = SaintLoader(sampler, norm, NodeRows(graph.x, graph.y),
                         torch.from_numpy(roles == "train"), num_steps=3)
    edges = _edge_set(graph.csr)
    torch.manual_seed(0)
    batches = list(loader)
    assert len(batches) == 3
    for batch in batches:
        _check_induced(batch, graph.csr, edges, roles, graph.x)
        assert torch.equal(batch.n_id, batch.n_id.sort().values)
        assert torch.equal(graph.csr.edge_index()[:, batch.e_id], batch.n_id[batch.edge_index])
        assert torch.equal(batch.node_norm, norm.node_norm[batch.n_id])
        assert torch.equal(batch.edge_norm, norm.edge_norm[batch.e_id])
        assert batch.train_mask.sum() >= 1  # roots are train nodes


def test_ranks_walk_independent_streams():
    csr = csr_from_edges(np.arange(30), (np.arange(30) + 1) % 30, 30)
    sampler = SaintSampler(csr, torch.arange(30), batch_size=4, walk_length=2)
    norm = norm_from_counts(csr, np.ones(30), np.ones(30), 1, 30)
    rows = NodeRows(torch.zeros(30, 1), torch.zeros(30, dtype=torch.long))
    mask = torch.ones(30, dtype=torch.bool)
    drawn = []
    for rank in (0, 1, 0):
        torch.manual_seed(5)
        loader = SaintLoader(sampler, norm, rows, mask, num_steps=5, rank=rank, world_size=2)
        drawn.append([b.n_id.tolist() for b in loader])
    assert len(drawn[0]) == 3  # ceil(5 / 2) steps on every rank
    assert drawn[0] == drawn[2] and drawn[0] != drawn[1]


def test_norms_from_counts_follow_the_definition():
    # edges (CSR by target): 1->0, 2->0, 0->1; node 2 never sampled, edge 2->0 never sampled
    csr = csr_from_edges(np.array([1, 2, 0]), np.array([0, 0, 1]), 3)
    norm = norm_from_counts(csr, node_count=np.array([8, 4, 0]), edge_count=np.array([2, 0, 2]),
                            num_samples=10, num_loss_nodes=2)
    assert norm.node_norm.tolist() == pytest.approx([10 / (8 * 2), 10 / (4 * 2), 10 / (0.1 * 2)])
    # edge 1->0: C_0 / C_e = 8 / 2; edge 2->0: C_e = 0 with C_0 > 0: clipped to 1e4; 0->1: 4 / 2
    assert norm.edge_norm.tolist() == pytest.approx([4.0, 1e4, 2.0])
    none = norm_from_counts(csr, np.zeros(3), np.zeros(3), 10, 2)
    assert none.edge_norm.tolist() == pytest.approx([0.1, 0.1, 0.1])  # 0 / 0


def _star_with_tail() -> Csr:
    """Undirected: 0 - 1, 0 - 2, 0 - 3, 3 - 4 (both directions stored)."""
    a, b = np.array([0, 0, 0, 3]), np.array([1, 2, 3, 4])
    return csr_from_edges(np.concatenate([a, b]), np.concatenate([b, a]), 5)


def _exact_probabilities(csr: Csr, roots: list[int]):
    """P(node in subgraph), P(edge in subgraph) for one root and a one-step walk, enumerated."""
    indptr, indices = csr.indptr.tolist(), csr.indices.tolist()
    p_node, p_edge = np.zeros(csr.num_nodes), np.zeros(csr.num_edges)
    src, dst = csr.edge_index().tolist()
    for root in roots:
        neighbours = indices[indptr[root]:indptr[root + 1]]
        for step in neighbours:
            chance = 1 / len(roots) / len(neighbours)
            held = {root, step}
            p_node[list(held)] += chance
            p_edge[[e for e in range(csr.num_edges) if src[e] in held and dst[e] in held]] += chance
    return p_node, p_edge


def test_presampled_norms_match_their_definition_on_a_tiny_graph():
    csr = _star_with_tail()
    roots = [0, 3, 4]  # the "train" nodes
    sampler = SaintSampler(csr, torch.tensor(roots), batch_size=1, walk_length=1)
    norm = estimate_norm(sampler, sample_coverage=4000, seed=0)
    p_node, p_edge = _exact_probabilities(csr, roots)
    s = norm.num_samples
    assert norm.node_count.sum() >= 4000 * 5  # coverage reached ...
    assert norm.node_count.sum() - 2 < 4000 * 5  # ... and sampling stopped there
    assert np.allclose(norm.node_count.numpy() / s, p_node, atol=0.01)
    assert np.allclose(norm.edge_count.numpy() / s, p_edge, atol=0.01)
    target = csr.targets().numpy()
    assert np.allclose(norm.edge_norm.numpy(), p_node[target] / p_edge, rtol=0.05)
    assert np.allclose(norm.node_norm.numpy(), 1 / (p_node * len(roots)), rtol=0.05)


def test_node_norm_makes_the_batch_loss_an_unbiased_mean_train_loss():
    csr = _star_with_tail()
    roots = [0, 3, 4]
    sampler = SaintSampler(csr, torch.tensor(roots), batch_size=1, walk_length=1)
    assert_unbiased_loss(sampler, estimate_norm(sampler, sample_coverage=2000, seed=0), roots)


def assert_unbiased_loss(sampler, norm, roots: list[int]):
    """``node_norm``-weighted batch losses average to the mean train loss (tiny star graph)."""
    loss = np.array([1.0, 5.0, 7.0, 2.0, 3.0])  # per-node loss; train nodes: roots
    train = np.isin(np.arange(5), roots)
    rng = np.random.default_rng(1)
    estimates = []
    for _ in range(20000):
        n_id, _, _ = sampler.sample(rng)
        keep = n_id[train[n_id]]
        estimates.append(float((norm.node_norm.numpy()[keep] * loss[keep]).sum()))
    assert np.mean(estimates) == pytest.approx(loss[train].mean(), rel=0.03)


# ------------------------------------------------------------------------------ training
def _fit_with(graph, roles, loader, cfg=FAST, model="sage", **kw):
    cfg = dataclasses.replace(cfg, model=model)
    inputs = build_inputs(graph.x, message_graphs={p: graph.csr for p in ("train", "val", "test")})
    return fit(lambda: build_model(model, graph.x.shape[1], graph.num_classes, cfg), inputs,
               graph.y, role_codes(roles), cfg, 0, loader=loader, **kw)


def _saint_batches(graph, roles, steps=4, batch_size=256):
    return adapt.Batches(_saint_loader(graph, roles, steps, batch_size),
                         adapt.normalized_train_nodes)


def _saint_loader(graph, roles, steps=4, batch_size=256):
    train = torch.from_numpy(np.flatnonzero(roles == "train"))
    sampler = SaintSampler(graph.csr, train, batch_size=batch_size, walk_length=2)
    return SaintLoader(sampler, estimate_norm(sampler, 10, seed=0), NodeRows(graph.x, graph.y),
                       torch.from_numpy(roles == "train"), num_steps=steps)


@pytest.mark.parametrize("sampler", ["cluster", "saint"])
def test_training_with_each_sampler_learns_and_repeats(setup, sampler):
    graph, roles, parts, _ = setup
    make = (lambda: adapt.Batches(_cluster_loader(graph, roles, parts, ppb=2),
                                  adapt.train_nodes)) if sampler == "cluster" else (
        lambda: _saint_batches(graph, roles))
    first = _fit_with(graph, roles, make())
    assert first.summary["best_val_acc"] > 0.75, first.summary  # 3 classes: chance is 1/3
    again = _fit_with(graph, roles, make())
    assert first.history == again.history and torch.equal(first.logits, again.logits)
    row = first.perf_history[0]
    assert row["batches"] == (3 if sampler == "cluster" else 4)
    assert row["seeds_per_s"] > 0 and row["batches_per_s"] > 0
    assert "seconds" not in str(first.history)  # wall clock stays out of the deterministic log


def test_gcn_gets_edge_norm_as_edge_weight_and_sage_gets_none(setup):
    graph, roles, _, _ = setup
    batch = next(iter(_saint_loader(graph, roles, steps=1)))
    seen = {}

    class Spy(nn.Module):
        def __init__(self, supports: bool):
            super().__init__()
            self.supports_edge_weight = supports

        def forward(self, x, edge_index, **kwargs):
            seen[self.supports_edge_weight] = kwargs
            return torch.zeros(x.shape[0], 3)

    _step(Spy(True), None, adapt.normalized_train_nodes(batch), graph.y)
    _step(Spy(False), None, adapt.normalized_train_nodes(batch), graph.y)
    assert torch.equal(seen[True]["edge_weight"], batch.edge_norm) and seen[False] == {}
    logits, target, weight = _step(Spy(False), None, adapt.normalized_train_nodes(batch), graph.y)
    assert torch.equal(weight, batch.node_norm[batch.train_mask])
    assert torch.equal(target, batch.y[batch.train_mask]) and logits.shape[0] == target.numel()


def test_saint_gcn_learns(setup):
    graph, roles, _, _ = setup
    result = _fit_with(graph, roles, _saint_batches(graph, roles), model="gcn")
    assert result.summary["best_val_acc"] > 0.75, result.summary


def test_amp_trains_in_bfloat16_on_cpu(setup, monkeypatch):
    graph, roles, parts, _ = setup
    dtypes = []
    original = train_module._loss

    def spy(logits, target, weight, class_weight=None):
        dtypes.append(logits.dtype)
        return original(logits, target, weight, class_weight)

    monkeypatch.setattr(train_module, "_loss", spy)
    loader = adapt.Batches(_cluster_loader(graph, roles, parts, ppb=2), adapt.train_nodes)
    result = _fit_with(graph, roles, loader, options=LoopOptions(amp=True))
    assert set(dtypes) == {torch.bfloat16}
    assert result.logits.dtype == torch.float32 and result.summary["best_val_acc"] > 0.7


def test_a_failing_compiler_is_one_clear_error(setup, monkeypatch):
    graph, roles, _, _ = setup

    def broken_backend(graph_module, example_inputs):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(loop, "COMPILE_BACKEND", broken_backend)
    cfg = dataclasses.replace(FAST, epochs=1)
    with pytest.raises(ValueError, match=r"train\.compile=true: torch\.compile failed on this "
                       r"machine .*no C\+\+ compiler found.*train\.compile: false"):
        fit(lambda: build_model("mlp", graph.x.shape[1], 3, cfg), build_inputs(graph.x), graph.y,
            role_codes(roles), cfg, 0, options=LoopOptions(compile_model=True))


# --------------------------------------------------------------------------------- dvc
