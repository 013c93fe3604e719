"""DDP plumbing: rank context from torchrun's environment, equal seed shards, reductions.

The train and predict stages re-launch themselves under torchrun's agent
(``gnnpipe/training/torchrun.py``) when ``train.dist.nproc * train.dist.nnodes > 1``
(``run_under_torchrun``); each worker then finds its rank here. Every wait is bounded: the
rendezvous by ``train.dist.rdzv_timeout_s`` (torch's own join / store timeouts, and a hard deadline
here that stops the agent), forming the process group and every collective by
``train.dist.timeout_s``; the agent and its workers die with the process that started them
(``die_with_parent``). Seeds are padded so every rank runs the same number of steps (unequal step
counts are the classic DDP hang), and metrics are summed across ranks.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.distributed as dist

from gnnpipe.io.tensors import rows_table


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
STATUS_ENV = "GNNPIPE_LAUNCH_STATUS"  # folder shared by the launcher, its agent and workers
PARENT_ENV = "GNNPIPE_LAUNCH_PARENT"  # pid the agent (or a worker) must die with
# Python + torch start-up of the agent and of the workers on top of train.dist.rdzv_timeout_s
# (16-17 s each measured at load 8 on the 2-core box); past it the launcher stops the agent.
START_GRACE_S = 120.0
CPP_LOG_ENV = "GNNPIPE_TORCH_CPP_LOG_LEVEL"  # the user's TORCH_CPP_LOG_LEVEL, for the workers
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@contextlib.contextmanager
def stage_ranks(args, params, what: str, num_workers: int = 0,
                device: torch.device | None = None) -> Iterator[DistContext | None]:
    """Where a train / predict stage runs: yields this rank's context with its process group
    formed (``SINGLE`` for one process), or None in the process that launched the ranks under
    torchrun and saw them finish (``run_under_torchrun``).

    The launching process first checks the machine (gnnpipe/training/capacity.py: refuses ranks x
    ``num_workers`` loader workers that cannot fit, warns on more processes than cores). Errors
    of torch.distributed on a rank become one line (``one_line_errors``). ``device`` (this
    rank's ``train.device``, gnnpipe/training/device.py; None: the CPU) picks the backend.
    """
    from gnnpipe.training import capacity

    cfg = params.train.dist
    ctx = context_from_env()
    if ctx.world_size == 1:
        for warning in capacity.check_launch(args.prepared, cfg, num_workers):
            print(f"gnnpipe {args.stage}: warning: {warning}", file=sys.stderr)
        if cfg.world_size > 1:
            run_under_torchrun(params, args.argv, what)
            yield None
            return
    init_process_group(ctx, cfg.timeout_s, device)
    try:
        with one_line_errors(ctx, cfg.timeout_s):
            yield ctx
    finally:
        shutdown()


def context_from_env() -> DistContext:
    """The worker's rank as torchrun sets it, or ``SINGLE`` outside torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return SINGLE
    return DistContext(rank=int(os.environ["RANK"]), world_size=world,
                       local_rank=int(os.environ.get("LOCAL_RANK", "0")))


def injected_faults() -> list[Callable[[int], None]]:
    """Per-epoch callbacks for ``gnnpipe.training.loop.LoopOptions``: under torchrun, the rank named
    by
    ``FAULT_RANK_ENV`` raises after its first epoch's training steps (tests of a failing rank);
    otherwise none."""
    ctx = context_from_env()
    if ctx.world_size == 1 or os.environ.get(FAULT_RANK_ENV) != str(ctx.rank):
        return []

    def fail(epoch: int) -> None:
        raise RuntimeError(f"injected failure on rank {ctx.rank} ({FAULT_RANK_ENV})")

    return [fail]


def backend_for(device: torch.device | None) -> str:
    """gloo when the rank trains on the CPU; on CUDA nccl for the gradients (CUDA tensors) and
    gloo for the CPU tensors the loop reduces (loss sums, metrics) and for object collectives."""
    return "cpu:gloo,cuda:nccl" if device is not None and device.type == "cuda" else "gloo"


def init_process_group(ctx: DistContext, timeout_s: float,
                       device: torch.device | None = None) -> None:
    """``backend_for(device)``; ``timeout_s`` bounds forming the group and every collective, so
    a lost rank fails. A torchrun worker first ties its life to its agent's and tells the
    launcher it started (the rendezvous is over)."""
    if ctx.world_size == 1 or dist.is_initialized():
        return
    if os.environ.get(PARENT_ENV):
        die_with_parent(int(os.environ[PARENT_ENV]))
    if os.environ.get(STATUS_ENV):
        (Path(os.environ[STATUS_ENV]) / f"started.{ctx.rank}").touch()
    backend = backend_for(device)
    if device is not None and device.type == "cuda":
        torch.cuda.set_device(device)  # nccl's communicator binds to the current device
    with one_line_errors(ctx, timeout_s):
        dist.init_process_group(backend, rank=ctx.rank, world_size=ctx.world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))


@contextlib.contextmanager
def one_line_errors(ctx: DistContext, timeout_s: float) -> Iterator[None]:
    """Turns errors raised inside torch.distributed on this rank (a peer gone, a store or
    collective that timed out: gloo raises plain RuntimeErrors) into a one-line ``ValueError``;
    with ``GNNPIPE_DEBUG`` they pass unchanged, and errors of other code always do."""
    try:
        yield
    except RuntimeError as err:
        if ctx.world_size == 1 or os.environ.get("GNNPIPE_DEBUG") or not _raised_by_torch(err):
            raise
        # gloo prefixes its messages with the C++ source location: "[.../pair.cc:553] ..."
        message = re.sub(r"^\[[^\]]*\]\s*", "", first_line(err))
        raise ValueError(f"rank {ctx.rank}: {message} (a peer failed or did not answer within "
                         f"train.dist.timeout_s={timeout_s:g})") from None


def _raised_by_torch(err: RuntimeError) -> bool:
    frames = traceback.extract_tb(err.__traceback__)
    return isinstance(err, dist.DistError) or bool(frames) and \
        f"torch{os.sep}distributed{os.sep}" in frames[-1].filename


def first_line(err: BaseException) -> str:
    """The first non-blank line of an error's message (torch's run on with C++ frames)."""
    return next((line.strip() for line in str(err).splitlines() if line.strip()),
                type(err).__name__)[:300]


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> None:
    """Linux: this process gets ``sig`` when its parent exits (``PR_SET_PDEATHSIG``); if
    ``parent_pid`` is already gone (it died before we got here) the signal is sent now."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)


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


def share_rows(count: int, ctx: DistContext) -> slice:
    """This rank's rows of a table of ``count`` rows scored in shares (the val / test positives
    and their fixed negatives): consecutive blocks of ceil(count / world), the last ones
    shorter (or empty), so ``gather_rows`` puts them back in order with no index."""
    per = -(-count // ctx.world_size)
    lo = min(count, ctx.rank * per)
    return slice(lo, min(count, lo + per))


def gather_rows(share: torch.Tensor, count: int, ctx: DistContext, *, to_all: bool = False
                ) -> torch.Tensor | None:
    """Every rank's ``share`` (rows ``share_rows(count, ctx)`` of a (count, ...) CPU tensor)
    concatenated in rank order: (count, ...) on rank 0, None on the others (``to_all``: on
    every rank). One process: ``share`` itself. Rank 0's whole table (the val / test scores a
    link fit writes) is received into a mapped scratch file beside the stage's outputs where
    the stage set one (``rows_table``), not into anonymous memory."""
    if ctx.world_size == 1 or count == 0:  # nothing to send: no rank enters a collective
        return share if ctx.world_size == 1 or to_all or ctx.is_main else None
    per = -(-count // ctx.world_size)
    padded = share.new_zeros((per, *share.shape[1:]))  # gloo gathers equal shapes
    padded[:share.shape[0]] = share
    if not (to_all or ctx.is_main):
        dist.gather(padded, None, dst=0)
        return None
    # to_all: small per-epoch figures, in memory; rank 0's gather: the whole table, mapped
    out = (share.new_empty if to_all else partial(rows_table, share))(
        (per * ctx.world_size, *share.shape[1:]))
    blocks = list(out.split(per))  # contiguous views: received in place
    if to_all:
        dist.all_gather(blocks, padded)
    else:
        dist.gather(padded, blocks, dst=0)
    return out[:count]


def torchrun_argv(nproc: int, nnodes: int, node_rank: int, rdzv_endpoint: str,
                  stage_argv: list[str], rdzv_timeout_s: float = 300.0) -> list[str]:
    """The command that runs ``gnnpipe <stage_argv>`` under torchrun's agent
    (gnnpipe/training/torchrun.py takes torchrun's arguments).

    One machine: ``--standalone`` (a local rendezvous on a free port). Several: c10d
    rendezvous at ``rdzv_endpoint`` (host:port of node 0, which hosts the store), run once per
    machine. ``rdzv_timeout_s`` bounds joining (``join_timeout``) and reaching the store
    (``read_timeout``); no restarts: a failed worker ends the job.
    """
    seconds = max(1, int(-(-rdzv_timeout_s // 1)))  # torch takes whole seconds
    conf = f"join_timeout={seconds},read_timeout={seconds}"
    launcher = [sys.executable, "-m", "gnnpipe.training.torchrun", f"--nproc-per-node={nproc}",
                "--max-restarts=0"]
    if nnodes == 1:
        launcher.append("--standalone")
    else:
        assert rdzv_endpoint, "config._check_rendezvous: nnodes > 1 needs an endpoint"
        # machine 0 hosts the store: torch's guess from the host name would have a machine
        # given 127.0.0.1 or its own name host a store of its own and wait for nobody
        conf += f",is_host={'true' if node_rank == 0 else 'false'}"
        stage = stage_argv[0] if stage_argv else "stage"
        launcher += [f"--nnodes={nnodes}", f"--node-rank={node_rank}", "--rdzv-backend=c10d",
                     f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id=gnnpipe-{stage}"]
    return [*launcher, f"--rdzv-conf={conf}", "-m", "gnnpipe", *stage_argv]


def run_under_torchrun(params, stage_argv: list[str], what: str,
                       grace_s: float = START_GRACE_S, argv: list[str] | None = None) -> None:
    """Runs ``gnnpipe <stage_argv>`` on ``params.train.dist``'s ranks and waits for them.

    Raises a one-line ``ValueError`` when the job fails: a rendezvous that did not complete
    within ``train.dist.rdzv_timeout_s`` (a machine that never joined, an endpoint nobody
    answers at), a worker that exited non-zero (its own error is printed above), or no worker
    started within ``rdzv_timeout_s + grace_s`` (then the agent's process group is killed here:
    the hard bound, whatever torch does). The agent and its workers die with this process.
    ``argv`` replaces the agent command (tests).
    """
    cfg = params.train.dist
    argv = argv or torchrun_argv(cfg.nproc, cfg.nnodes, cfg.node_rank, cfg.rdzv_endpoint,
                                 stage_argv, cfg.rdzv_timeout_s)
    status = Path(tempfile.mkdtemp(prefix="gnnpipe-launch-"))
    env = {**os.environ, STATUS_ENV: str(status), PARENT_ENV: str(os.getpid())}
    if not os.environ.get("GNNPIPE_DEBUG"):  # c10d logs each connect retry of the agent's store
        env.update({"TORCH_CPP_LOG_LEVEL": "FATAL",
                    CPP_LOG_ENV: os.environ.get("TORCH_CPP_LOG_LEVEL", "")})
    deadline = time.monotonic() + cfg.rdzv_timeout_s + grace_s
    agent = subprocess.Popen(argv, env=env, start_new_session=True)
    try:
        code = _wait_for_agent(agent, status, deadline)
        if code is None:
            raise ValueError(
                f"distributed {what}: no worker started within train.dist.rdzv_timeout_s="
                f"{cfg.rdzv_timeout_s:g} + {grace_s:g} s; stopped torchrun (check that every one "
                f"of train.dist.nnodes={cfg.nnodes} machines runs with its own "
                "train.dist.node_rank)")
        if code != 0:
            raise ValueError(f"distributed {what} failed: {_agent_failure(status, code, cfg)}")
    finally:
        _stop(agent)
        shutil.rmtree(status, ignore_errors=True)


def _wait_for_agent(agent: subprocess.Popen, status: Path, deadline: float) -> int | None:
    """The agent's exit code, or None when no worker started before ``deadline``."""
    while True:
        try:
            return agent.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline and not any(status.glob("started.*")):
                return None


def _stop(agent: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM to the agent's process group (the agent stops its workers), SIGKILL after
    ``grace_s``; workers left over die with their agent (``die_with_parent``)."""
    if agent.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, sig)
        try:
            agent.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _agent_failure(status: Path, code: int, cfg) -> str:
    """One line on why the agent exited with ``code``, from the report it left in ``status``."""
    try:
        report = json.loads((status / "error.json").read_text())
    except (OSError, ValueError):
        return f"torchrun exited with code {code}"
    kind, detail = report.get("kind"), report.get("detail", "")
    where = (f"train.dist.rdzv_endpoint={cfg.rdzv_endpoint}" if cfg.nnodes > 1
             else "the local rendezvous")
    if kind == "rdzv_timeout":
        return (f"the rendezvous at {where} did not complete within train.dist.rdzv_timeout_s="
                f"{cfg.rdzv_timeout_s:g}: not all train.dist.nnodes={cfg.nnodes} machines "
                "joined (run the stage on every machine, each with its own train.dist.node_rank)")
    if kind == "rdzv_connect" and cfg.nnodes > 1 and cfg.node_rank == 0:
        return (f"this machine (train.dist.node_rank=0) could not host the rendezvous store at "
                f"{where} ({detail}); is the port in use?")
    if kind == "rdzv_connect":
        return (f"cannot reach {where} within train.dist.rdzv_timeout_s={cfg.rdzv_timeout_s:g} "
                f"({detail}); machine 0 (train.dist.node_rank=0) hosts it and must be running")
    if kind == "worker":
        return f"{detail} (its error is printed above)"
    return detail or f"torchrun exited with code {code}"
