"""DDP plumbing: equal shards that cover every seed, sums across real gloo processes."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from gnnpipe.training import distributed
from gnnpipe.config import ParamsError, params_from_dict
from gnnpipe.training.distributed import DistContext


@pytest.mark.parametrize("num_seeds, world", [(10, 2), (11, 2), (7, 3), (1, 4), (100, 8)])
def test_shards_are_equal_and_cover_every_seed(num_seeds, world):
    seeds = torch.arange(100, 100 + num_seeds)
    shares = [distributed.shard(seeds, DistContext(rank, world, rank)) for rank in range(world)]
    assert len({s.numel() for s in shares}) == 1  # equal step counts: no rank waits forever
    assert shares[0].numel() == -(-num_seeds // world)
    assert set(torch.cat(shares).tolist()) == set(seeds.tolist())


def test_shuffled_shards_agree_across_ranks_for_one_seed():
    seeds = torch.arange(50)
    shares = [distributed.shard(seeds, DistContext(r, 2, r), torch.Generator().manual_seed(3))
              for r in range(2)]
    assert sorted(torch.cat(shares).tolist()) == list(range(50))  # a partition, no overlap
    assert not torch.equal(shares[0], seeds[0::2])


def test_single_process_shard_is_identity():
    seeds = torch.arange(5)
    assert torch.equal(distributed.shard(seeds, distributed.SINGLE), seeds)


def test_torchrun_argv():
    single = distributed.torchrun_argv(2, 1, 0, "", ["train", "--params", "p.yaml"])
    assert "--standalone" in single and "--nproc-per-node=2" in single
    assert single[-4:] == ["gnnpipe", "train", "--params", "p.yaml"]
    multi = distributed.torchrun_argv(4, 2, 1, "node0:29400", ["train"])
    assert "--rdzv-endpoint=node0:29400" in multi and "--node-rank=1" in multi
    with pytest.raises(ParamsError, match="train.dist.nnodes=2 needs train.dist.rdzv_endpoint"):
        params_from_dict({"train": {"dist": {"nnodes": 2}}})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _shard_setup():
    """A 300-node graph, 6 bfs parts with 1-hop shards, split roles as int8 codes and a model."""
    import numpy as np

    from gnnpipe.config import PartitionParams, TrainParams
    from gnnpipe.data.edges import csr_from_edges
    from gnnpipe.graphops.partition import assign_parts
    from shard_oracle import build_shard
    from gnnpipe.runtime.rng import make_rng
    from gnnpipe.training.models import build_model

    gen = np.random.default_rng(0)
    n = 300
    src, dst = gen.integers(0, n, (2, 1200))
    csr = csr_from_edges(src, dst, n)
    x, y = torch.randn(n, 5, generator=torch.Generator().manual_seed(0)), torch.arange(n) % 3
    roles = gen.integers(0, 4, n).astype(np.int8)  # train, val, test, unused codes
    parts = assign_parts(csr, PartitionParams(num_parts=6, method="bfs"), make_rng(0, "p"))
    shards = [build_shard(csr, parts, p, 6, 1) for p in range(6)]
    torch.manual_seed(0)
    model = build_model("sage", 5, 3, TrainParams(hidden=8)).eval()
    return x, y, roles, parts, shards, model


def _evaluator(shards, x, y, roles):
    from gnnpipe.training.sharding import NodeRows, ShardEvaluator, shard_node_ids

    ids = shard_node_ids(shards)  # the rank's rows: no array of every node below
    return ShardEvaluator(shards, NodeRows(x[ids], y[ids], ids), torch.from_numpy(roles[ids]))


def _shard_worker(rank: int, world: int, port: int, queue) -> None:
    from gnnpipe.graphops.partition import rank_parts
    from gnnpipe.training.sharding import shard_part_counts
    from gnnpipe.training.train import _evaluator_outputs

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    ctx = DistContext(rank, world, rank)
    distributed.init_process_group(ctx, timeout_s=60)
    total = distributed.all_reduce_sum(torch.tensor([rank + 1.0, 2.0]), ctx)
    x, y, roles, _, shards, model = _shard_setup()
    mine = [shards[p] for p in rank_parts(6, rank, world)]
    counts = shard_part_counts(mine, roles, 6, ctx)
    with torch.no_grad():
        node_id, logits = _evaluator_outputs(model, _evaluator(mine, x, y, roles), ctx)
    # plain lists: torch tensors would go by shared memory that dies with the process
    queue.put((rank, total.tolist(), counts.tolist(), node_id.tolist(), logits.tolist()))
    distributed.shutdown()


@pytest.fixture(scope="module")
def two_ranks() -> dict[int, tuple]:
    """rank -> (all-reduced sum, part counts, node ids, logits) of two spawned gloo ranks (one
    start of two interpreters serves every test below)."""
    queue = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(_shard_worker, args=(2, _free_port(), queue), nprocs=2,
                       start_method="spawn")
    return {rank: rest for rank, *rest in (queue.get() for _ in range(2))}


def test_all_reduce_sums_across_two_gloo_processes(two_ranks):
    assert {rank: out[0] for rank, out in two_ranks.items()} == {0: [3.0, 4.0], 1: [3.0, 4.0]}


def test_shard_ranks_agree_on_part_counts_and_rank_0_gathers_every_split_node(two_ranks):
    """train.dist.shard: partition on two gloo ranks, each holding half the shards: both count
    every part's train nodes, and rank 0 gets each split node's logits once, train, val then
    test, ids ascending, as one process holding every shard computes them."""
    import numpy as np

    from gnnpipe.training.train import phase_index

    results = {rank: out[1:] for rank, out in two_ranks.items()}
    x, y, roles, parts, shards, model = _shard_setup()
    expected = np.bincount(parts[roles == 0], minlength=6).tolist()
    assert results[0][0] == results[1][0] == expected
    order = phase_index(roles)
    node_id, logits = torch.tensor(results[0][1]), torch.tensor(results[0][2])
    assert torch.equal(node_id, torch.cat([order[p] for p in ("train", "val", "test")]))
    assert results[1][1] == []  # only rank 0 keeps the outputs
    with torch.no_grad():
        held, whole = _evaluator(shards, x, y, roles).logits(model)
    at = torch.argsort(held)
    torch.testing.assert_close(logits, whole[at[torch.searchsorted(held[at], node_id)]])
