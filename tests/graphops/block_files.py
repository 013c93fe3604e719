"""An in-memory CSR as the block files of gnnpipe/io/csr_blocks.py, written by the one writer
(``build_block_graph``, its tasks in this process) from the CSR saved as a stored graph."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Iterator

from gnnpipe.data.graph import Csr
from gnnpipe.io.blocks import temp_folder
from gnnpipe.io.csr_blocks import build_block_graph, save_stored_csr
from gnnpipe.runtime.engine import run_blocks


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
