"""``partition.method: lp`` of a CSR held in memory, for tests and benches (the stage partitions
the stored graph by blocks, gnnpipe/graphops/partition_blocks.py): ``lp_partition`` builds the
CSR's block files in a temp folder and runs ``lp_parts`` on them; ``assign_parts`` is the
library's with lp added, seeded as the stage seeds it."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from gnnpipe.config import PartitionParams
from gnnpipe.data.graph import Csr
from gnnpipe.graphops import partition
from gnnpipe.graphops.partition_lp import lp_parts
from gnnpipe.io.blocks import temp_folder
from gnnpipe.io.csr_blocks import build_block_graph
from gnnpipe.runtime.engine import run_blocks
from block_files import save_stored_csr


def lp_partition(csr: Csr, cfg: PartitionParams, seed: int, client=None,
                 scratch: Path | None = None) -> np.ndarray:
    """``lp_parts`` of an in-memory ``csr``: saved as a stored graph in a temp folder under
    ``scratch`` (default: the run's scratch), its block files built there (``build_block_graph``),
    the block tasks on ``client`` (a ``distributed.Client``) or in this process."""
    with temp_folder(scratch, "partition-lp") as folder:
        graph = save_stored_csr(folder / "csr.pt", csr)
        build_block_graph(folder, graph, functools.partial(run_blocks, client), cfg.block_rows)
        return lp_parts(folder, cfg, seed, client)


def assign_parts(csr: Csr, cfg: PartitionParams, rng: np.random.Generator, client=None,
                 scratch: Path | None = None) -> np.ndarray:
    """``gnnpipe.graphops.partition.assign_parts``, method lp included: ``lp_partition`` seeded
    from ``rng`` (as ``partition_blocks.partition_stage`` seeds it), its tasks on ``client``."""
    if cfg.method != "lp":
        return partition.assign_parts(csr, cfg, rng)
    partition.check_num_parts(csr.num_nodes, cfg)
    if cfg.num_parts == 1:
        return np.zeros(csr.num_nodes, dtype=np.int32)
    return lp_partition(csr, cfg, int(rng.integers(0, 2**31 - 1)), client, scratch)
