"""gnnpipe/io/temps.py ``scratch_or_memory``: a mapped scratch table inside a stage, memory
outside one, of any rank; its io users (``io.csr_blocks.edge_index_of``, ``io.tensors.rows_table``)
give the same values either way."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from gnnpipe.data.edges import csr_from_edges
from gnnpipe.io.csr_blocks import edge_index_of
from gnnpipe.io.temps import scratch_beside, scratch_or_memory
from gnnpipe.io.tensors import rows_table


def _mapped_file(tensor: torch.Tensor) -> str | None:
    """The file whose mapping holds ``tensor``'s first byte (/proc/self/maps), None for
    anonymous memory (a scratch table's file is unlinked: ``... (deleted)``)."""
    address = tensor.data_ptr()
    for line in open("/proc/self/maps"):
        fields = line.split(maxsplit=5)
        lo, hi = (int(v, 16) for v in fields[0].split("-"))
        if lo <= address < hi:
            return fields[5].strip() if len(fields) == 6 and fields[5].startswith("/") else None
    return None


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="procfs")


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (0, 6)])
def test_scratch_or_memory_has_the_shape_asked_and_maps_only_inside_a_stage(tmp_path, shape):
    outside = scratch_or_memory(shape, np.int64)
    assert outside.shape == shape and outside.dtype == np.int64 and outside.flags.writeable
    assert _mapped_file(torch.from_numpy(outside)) is None
    with scratch_beside(tmp_path / "out"):
        inside = scratch_or_memory(shape, np.float32)
    assert inside.shape == shape and inside.dtype == np.float32
    inside[...] = np.arange(inside.size, dtype=np.float32).reshape(shape)  # writable after exit
    assert (_mapped_file(torch.from_numpy(inside)) is not None) == (inside.size > 0)


def test_edge_index_and_rows_tables_hold_the_same_values_in_a_stage_or_not(tmp_path):
    gen = torch.Generator().manual_seed(1)
    src, dst = torch.randint(0, 40, (2, 300), generator=gen).numpy()
    csr = csr_from_edges(src, dst, 40)
    like = torch.zeros(0, dtype=torch.float16)
    with scratch_beside(tmp_path / "out"):
        mapped, table = edge_index_of(csr), rows_table(like, (6, 2, 3))
    assert _mapped_file(mapped) is not None and _mapped_file(table) is not None
    for got in (mapped, edge_index_of(csr)):
        assert got.dtype == torch.int64 and torch.equal(got, csr.edge_index())
    assert table.shape == (6, 2, 3) and table.dtype == torch.float16
    assert rows_table(torch.zeros(0, dtype=torch.bfloat16), (2, 3)).dtype == torch.bfloat16
