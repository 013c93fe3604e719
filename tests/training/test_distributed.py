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


def _worker(rank: int, world: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    ctx = DistContext(rank, world, rank)
    distributed.init_process_group(ctx, timeout_s=60)
    total = distributed.all_reduce_sum(torch.tensor([rank + 1.0, 2.0]), ctx)
    queue.put((rank, total.tolist()))
    distributed.shutdown()


def test_all_reduce_sums_across_two_gloo_processes():
    queue = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(_worker, args=(2, _free_port(), queue), nprocs=2, start_method="spawn")
    results = dict(queue.get() for _ in range(2))
    assert results == {0: [3.0, 4.0], 1: [3.0, 4.0]}
