"""An in-memory CSR as the block files of gnnpipe/io/csr_blocks.py, written by the one writer
(``build_block_graph``, its tasks in this process) from the CSR saved as a stored graph
(``save_stored_csr``: the stages store theirs through the split and prepare)."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Iterator

from gnnpipe.data.graph import Csr
from gnnpipe.io.blocks import temp_folder
from gnnpipe.io.csr_blocks import StoredGraph, StoredRelation, build_block_graph
from gnnpipe.io.tensors import save_tensors
from gnnpipe.runtime.engine import run_blocks

CSR_SCHEMA = "gnnpipe.block_csr/1"


def save_stored_csr(file: Path, csr: Csr) -> StoredGraph:
    """An in-memory ``csr`` saved to the torch file ``file`` as a one-relation ``StoredGraph``
    over its N nodes, for ``build_block_graph`` (lp of a graph held in memory, tests, benches)."""
    save_tensors(file, CSR_SCHEMA, {"csr.indptr": csr.indptr.long(),
                                    "csr.indices": csr.indices.long()})
    n = csr.num_nodes
    relation = StoredRelation(str(Path(file).resolve()), str(file), CSR_SCHEMA, "csr.", 0, n, 0,
                              n, "node", csr.num_edges)
    return StoredGraph(n, (relation,), False)


def write_blocks(folder: Path, csr: Csr, block_rows: int = 1 << 16) -> None:
    """``csr`` and its transpose as block files in ``folder`` (created), nothing else there."""
    folder.mkdir(parents=True, exist_ok=True)
    graph = save_stored_csr(folder / "csr.pt", csr)
    build_block_graph(folder, graph, functools.partial(run_blocks, None), block_rows)
    (folder / "csr.pt").unlink()


@contextlib.contextmanager
def block_graph(csr: Csr, where: Path | None = None, name: str = "test-blocks") -> Iterator[Path]:
    """A temp folder in ``where`` holding ``csr`` as block files (``write_blocks``)."""
    with temp_folder(where, name) as folder:
        write_blocks(folder, csr)
        yield folder
