"""Feature rows of some nodes of a prepared graph (x in graph.pt or features.npy), without
taking the whole file in: the one gather path of features larger than memory.

Pages of a memory-mapped file that a process has touched count in its resident set until they
are unmapped or dropped, so gathering scattered rows through one long-lived map would leave most
of ``x`` resident (in every DDP rank of ``train.dist.shard: partition``, in every epoch of
neighbor training). ``FeatureSource`` copies the rows asked for out of the map and drops the
map's pages (``madvise(MADV_DONTNEED)``; they stay in the OS page cache) once a budget of
gathered bytes is reached, so the resident set holds that budget plus the copied rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from gnnpipe.io.tensors import load_tensors


@dataclass(frozen=True)
class GraphRows:
    num_nodes: int
    num_classes: int
    x: torch.Tensor  # float32 (L, F): rows of the requested nodes, in their order
    y: torch.Tensor  # int64 (N,): every node's label (8 bytes a node; evaluation needs them)


def read_node_rows(prepared: Path, node_ids: torch.Tensor, block_rows: int = 65_536) -> GraphRows:
    """Rows ``x[node_ids]`` (float32, whatever the stored dtype; x in graph.pt or features.npy)
    of a prepared graph (``node_ids`` int64 (L,), ascending) and all labels."""
    from gnnpipe.io.prepared import _stored_x

    path = Path(prepared) / "graph.pt"
    payload = load_tensors(path, "gnnpipe.graph/1", {"y": (torch.int64, 1)}, mmap=True)
    # pages dropped after every block: one block of the file resident at a time
    source = FeatureSource(_stored_x(path, payload, mmap=True), mapped=True, release_bytes=0)
    num_nodes, num_features = source.shape
    num_classes = payload["meta"].get("num_classes")
    y = payload["y"].clone()
    del payload
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"{path}: meta.num_classes must be an int >= 2, found {num_classes!r}")
    if y.numel() != num_nodes or (y.numel() and (y.min() < 0 or y.max() >= num_classes)):
        raise ValueError(f"{path}: y must hold {num_nodes} labels in [0, {num_classes})")
    if node_ids.numel() and (node_ids.min() < 0 or node_ids.max() >= num_nodes
                             or bool((node_ids[1:] <= node_ids[:-1]).any())):
        raise ValueError(f"{path}: node ids must be distinct, ascending and in [0, {num_nodes})")
    x = torch.empty(node_ids.numel(), num_features, dtype=torch.float32)
    cuts = torch.searchsorted(node_ids, torch.arange(0, num_nodes + block_rows, block_rows))
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        if lo < hi:
            x[lo:hi] = source.rows(node_ids[lo:hi])
    return GraphRows(num_nodes=num_nodes, num_classes=num_classes, x=x, y=y)


# Linux madvise advice that drops a range's pages from this process's page tables; a read-only
# file mapping refaults them from the page cache on the next touch (no data is lost).
_MADV_DONTNEED = 4
# Bytes of rows gathered through one map before its pages are dropped (bounds the resident set)
RELEASE_BYTES = 256 << 20


def _madvise_dontneed(tensor: torch.Tensor) -> bool:
    """Drop the resident pages of ``tensor``'s memory-mapped storage; False where unsupported."""
    import ctypes
    import mmap
    import sys

    if not sys.platform.startswith("linux") or tensor.numel() == 0:
        return False
    page = mmap.PAGESIZE
    start = tensor.data_ptr() // page * page
    stop = -(-(tensor.data_ptr() + tensor.numel() * tensor.element_size()) // page) * page
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(stop - start), _MADV_DONTNEED) == 0


class FeatureSource:
    """The stored feature matrix of a prepared graph (N, F), memory-mapped, in its stored dtype
    (float32 / float16 / bfloat16), read only through copies of the rows asked for.

    ``rows(ids)`` copies ``x[ids]`` (B, F) out of the map; once ``release_bytes`` of rows have
    been gathered the map's pages are dropped from the resident set (``madvise``), so training
    on features larger than memory holds a bounded window of them, not every page it touched.
    ``mapped`` False (a tensor in memory) never drops pages.
    """

    def __init__(self, x: torch.Tensor, *, mapped: bool, release_bytes: int = RELEASE_BYTES):
        self.x = x
        self.mapped = mapped
        self.release_bytes = release_bytes
        self._gathered = 0

    @property
    def shape(self) -> torch.Size:
        return self.x.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.x.dtype

    def rows(self, index) -> torch.Tensor:
        """``x[index]`` (B, F) in the stored dtype, a copy: ``index`` int64 (B,) or a slice."""
        # a copy either way: a view would keep the map's pages alive
        out = self.x[index].clone() if isinstance(index, slice) else self.x.index_select(0, index)
        self._touched(out)
        return out

    def _touched(self, out: torch.Tensor) -> None:
        # a row narrower than a page still makes its page resident: count at least a page
        import mmap

        self._gathered += out.shape[0] * max(out.shape[1] * out.element_size(), mmap.PAGESIZE)
        if self.mapped and self._gathered >= self.release_bytes:
            self.release()

    def release(self) -> None:
        """Drop every resident page of the map (they stay in the OS page cache)."""
        self._gathered = 0
        if self.mapped:
            _madvise_dontneed(self.x)
