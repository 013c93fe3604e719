"""What tests/training/test_embeddings.py runs on two spawned gloo ranks: the one training loop
(gnnpipe/training/loop.py: DDP wrapper, ``embeddings.optimizer``) on a model with a node table,
each rank stepping on its own rows. Imports no PyG, so a spawned rank starts in about a second."""

from __future__ import annotations

import os

import torch
from torch import nn

from gnnpipe.config import FitParams
from gnnpipe.training import distributed, embeddings, loop
from gnnpipe.training.distributed import SINGLE, DistContext

CFG = FitParams(epochs=3, patience=3, lr=0.05)
NODES, ROWS = 40, {0: [0, 1, 2, 3, 4, 5], 1: [4, 5, 6, 7, 8, 9]}  # rank -> its batch's rows


class TableModel(nn.Module):
    """A table of ``NODES`` rows of width 3 (``NodeInputs``, ``alone``) and a linear map."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1)
        embeddings.attach(self, embeddings.NodeInputs({"node": NODES}, 3, ["node"], alone=True))

    def forward(self, x: torch.Tensor, n_id: torch.Tensor) -> torch.Tensor:
        return self.lin(embeddings.input_rows(self, x, n_id)).squeeze(1)


class RowsTask:
    """``loop.Task`` of squared outputs over ``ranks``' rows (each epoch one step; several ranks
    in one process: the mean of their losses, what DDP's gradient mean equals)."""

    best_key, monitor, counters, examples_per_seed, saves_scaler = "best", "score", (), 1, False

    def __init__(self, ranks: list[int]):
        self.ranks, self.epochs = ranks, 0

    def place(self, device) -> None:
        pass

    def batches(self, epoch: int, seed: int):
        return [None]

    def step(self, model, batch):
        losses = [(model(torch.zeros(6, 0), torch.tensor(ROWS[r])) - r).pow(2).mean()
                  for r in self.ranks]
        return sum(losses) / len(losses), 6

    def counts(self) -> list[float]:
        return []

    def score(self, model) -> dict[str, float]:
        self.epochs += 1  # always better: the best state is the last epoch's
        return {"score": float(self.epochs)}


def train(ranks: list[int], ctx: DistContext = SINGLE) -> dict:
    """The best state (CPU tensors) of ``loop.run`` on ``ranks``' rows under ``ctx``."""
    return loop.run(RowsTask(ranks), TableModel, CFG, seed=3,
                    options=loop.LoopOptions(ctx=ctx)).state["best_state"]


def worker(rank: int, world: int, port: int, queue) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    ctx = DistContext(rank, world, rank)
    distributed.init_process_group(ctx, timeout_s=60)
    state = train([rank], ctx)
    # plain lists: tensors would go by shared memory that dies with the process
    queue.put((rank, {k: v.tolist() for k, v in state.items()}))
    distributed.shutdown()
