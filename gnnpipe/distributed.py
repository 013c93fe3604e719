"""DDP plumbing: rank context from torchrun's environment, equal seed shards, reductions.

The train stage re-launches itself under ``torchrun`` when ``train.dist.nproc * train.dist.nnodes > 1``;
each worker then finds its rank here. Seeds are padded so every rank runs the same number of
steps (unequal step counts are the classic DDP hang), and metrics are summed across ranks.
"""

from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


SINGLE = DistContext(rank=0, world_size=1, local_rank=0)
FAULT_RANK_ENV = "GNNPIPE_FAULT_RAISE_ON_RANK"  # tests: this rank raises mid-epoch


def context_from_env() -> DistContext:
    """The worker's rank as torchrun sets it, or ``SINGLE`` outside torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return SINGLE
    return DistContext(rank=int(os.environ["RANK"]), world_size=world,
                       local_rank=int(os.environ.get("LOCAL_RANK", "0")))


def injected_faults() -> list[Callable[[int], None]]:
    """Per-epoch callbacks for ``gnnpipe.loop.LoopOptions``: under torchrun, the rank named by
    ``FAULT_RANK_ENV`` raises after its first epoch's training steps (tests of a failing rank);
    otherwise none."""
    ctx = context_from_env()
    if ctx.world_size == 1 or os.environ.get(FAULT_RANK_ENV) != str(ctx.rank):
        return []

    def fail(epoch: int) -> None:
        raise RuntimeError(f"injected failure on rank {ctx.rank} ({FAULT_RANK_ENV})")

    return [fail]


def init_process_group(ctx: DistContext, timeout_s: float) -> None:
    """gloo on CPU, nccl on GPU; ``timeout_s`` bounds every collective so a lost rank fails."""
    if ctx.world_size == 1 or dist.is_initialized():
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, rank=ctx.rank, world_size=ctx.world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def shard(indices: torch.Tensor, ctx: DistContext, generator: torch.Generator | None = None,
          ) -> torch.Tensor:
    """This rank's share of ``indices`` (M,): ceil(M / world) entries on every rank.

    With a ``generator`` (seeded identically on all ranks) the order is shuffled first. The list
    is padded by repeating its first entries so shares are equal, as DistributedSampler does.
    """
    if generator is not None:
        indices = indices[torch.randperm(indices.numel(), generator=generator)]
    if ctx.world_size == 1:
        return indices
    if indices.numel() == 0:
        raise ValueError("no seeds to split across ranks")
    per_rank = -(-indices.numel() // ctx.world_size)
    padded = indices.repeat(-(-per_rank * ctx.world_size // indices.numel()))
    padded = padded[:per_rank * ctx.world_size]
    return padded[ctx.rank::ctx.world_size]


def all_reduce_sum(values: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Element-wise sum over ranks (a copy; the input is left alone)."""
    out = values.detach().clone().to(torch.float64)
    if ctx.world_size > 1:
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def torchrun_argv(nproc: int, nnodes: int, node_rank: int, rdzv_endpoint: str,
                  stage_argv: list[str]) -> list[str]:
    """The command that runs ``gnnpipe <stage_argv>`` under torchrun.

    One machine: ``--standalone`` (a local rendezvous on a free port). Several: c10d
    rendezvous at ``rdzv_endpoint`` (host:port of node 0), run once per machine.
    """
    launcher = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
    if nnodes == 1:
        launcher.append("--standalone")
    else:
        assert rdzv_endpoint, "config._check_rendezvous: nnodes > 1 needs an endpoint"
        launcher += [f"--nnodes={nnodes}", f"--node-rank={node_rank}", "--rdzv-backend=c10d",
                     f"--rdzv-endpoint={rdzv_endpoint}", "--rdzv-id=gnnpipe-train"]
    return [*launcher, "-m", "gnnpipe", *stage_argv]
