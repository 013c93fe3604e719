"""Feature rows of some nodes of a prepared graph (x in graph.pt or features_<T>.npy), without
taking the whole file in: the one gather path of features larger than memory.

Pages of a memory-mapped file that a process has touched count in its resident set until they
are unmapped, so gathering scattered rows through one long-lived map would leave most of ``x``
resident (in every DDP rank of ``train.dist.shard: partition``, in every epoch of neighbor
training). ``FeatureSource`` reads the rows asked for with ``pread`` from the file behind the
map instead, so the resident set holds the copied rows alone (the OS page cache holds the file).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from gnnpipe.data.graph import UNLABELLED
from gnnpipe.io.mapped_rows import pread_into
from gnnpipe.io.prepared import GRAPH_SCHEMA, stored_features
from gnnpipe.io.tensors import load_tensors


@dataclass(frozen=True)
class GraphRows:
    num_nodes: int
    num_classes: int
    x: torch.Tensor  # float32 (L, F): rows of the requested nodes, in their order
    y: torch.Tensor  # int64 (L,): their labels (-1: unlabelled)


def open_node_source(prepared: Path) -> tuple[FeatureSource, torch.Tensor, int]:
    """The target type's stored features (x in graph.pt or features_<T>.npy) as a
    ``FeatureSource``, every node's label int64 (N,) (a view of the memory-mapped file, no
    copy: -1 unlabelled) and the number of classes, checked; the CSR is not read.
    ``gnnpipe.sampling.store.read_node_rows`` gathers a shard's rows and their labels through
    it, the baseline stage its blocks."""
    path = Path(prepared) / "graph.pt"
    payload = load_tensors(path, GRAPH_SCHEMA, {"y": (torch.int64, 1)}, mmap=True)
    source = FeatureSource(stored_features(path, payload, payload["meta"].get("target"),
                                           mmap=True), mapped=True)
    num_classes = payload["meta"].get("num_classes")
    y = payload["y"]
    del payload
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"{path}: meta.num_classes must be an int >= 2, found {num_classes!r}")
    if y.numel() != source.shape[0] or (y.numel() and (y.min() < UNLABELLED
                                                       or y.max() >= num_classes)):
        raise ValueError(f"{path}: y must hold {source.shape[0]} labels in [0, {num_classes}) "
                         "or -1 (unlabelled)")
    return source, y, num_classes


# A mapped feature matrix this small is indexed on the map: a pread per row costs more than the
# gather, and all of it resident is negligible (the default 20k-node graph's is 5 MiB)
DIRECT_BYTES = 8 << 20


def _mapped_file(tensor: torch.Tensor) -> tuple[str, int] | None:
    """(path, byte offset of the first element) of the file a memory-mapped tensor maps, from
    /proc/self/maps; None where that is not known (no procfs, anonymous memory)."""
    ptr = tensor.data_ptr()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                lo, hi = (int(v, 16) for v in parts[0].split("-"))
                if lo <= ptr < hi:
                    path = parts[5].strip() if len(parts) == 6 else ""
                    if path.startswith("/") and os.path.isfile(path):
                        return path, int(parts[2], 16) + ptr - lo
                    return None
    except OSError:
        return None
    return None


class FeatureSource:
    """The stored feature matrix of a prepared graph (N, F), memory-mapped, in its stored dtype
    (float32 / float16 / bfloat16), read only through copies of the rows asked for.

    ``rows(ids)`` reads ``x[ids]`` (B, F) with one ``pread`` per row from the file the map is
    of (found in /proc/self/maps), so the rows land in the returned tensor and nothing of the
    file enters the process's resident set (the OS page cache holds it). Not through the map
    with its pages dropped as it goes (``gnnpipe.io.mapped_rows``' sparse rows): a scattered
    fault maps about 200 KiB of neighbouring pages per 4 KiB row here (the kernel's
    fault-around): out-of-core neighbor training ran at 0.39x a long-lived map's seeds/s that
    way, 0.78x by pread (docs/benchmarks/2026-12-04-out-of-core.md). ``mapped`` False (a tensor
    in memory), a map whose file is not known (no procfs) and a mapped matrix of at most
    ``direct_bytes`` are indexed directly: one ``pread`` per row cost the default 20k-node
    graph's neighbor batches a third of their time, and all of it resident is small.
    """

    def __init__(self, x: torch.Tensor, *, mapped: bool, direct_bytes: int = DIRECT_BYTES):
        self.x, self.mapped = x, mapped
        self._fd, self._offset = None, 0
        large = x.numel() * x.element_size() > direct_bytes
        where = _mapped_file(x) if mapped and large and x.is_contiguous() else None
        if where is not None:
            self._fd, self._offset = os.open(where[0], os.O_RDONLY), where[1]
        self.direct = self._fd is None

    def __del__(self):
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)

    def __getstate__(self):  # a worker started by spawn maps and opens the file anew
        raise TypeError("FeatureSource holds an open file; DataLoader workers must fork")

    @property
    def shape(self) -> torch.Size:
        return self.x.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.x.dtype

    def rows(self, index) -> torch.Tensor:
        """``x[index]`` (B, F) in the stored dtype, a copy: ``index`` int64 (B,) or a slice (a
        slice of step 1 from the file: one ``pread`` for all its rows)."""
        if isinstance(index, slice):
            lo, hi, step = index.indices(self.x.shape[0])
            if step == 1 and not self.direct:  # the rows' bytes, in place
                out = torch.empty(max(0, hi - lo), self.x.shape[1], dtype=self.x.dtype)
                pread_into(self._fd, out.view(torch.uint8).numpy(),
                           self._offset + lo * self.x.shape[1] * self.x.element_size())
                return out
            index = torch.arange(lo, hi, step)
        if self.direct:
            return self.x.index_select(0, index)
        if index.numel() and (index.min() < 0 or index.max() >= self.x.shape[0]):
            raise IndexError(f"feature rows outside [0, {self.x.shape[0]})")
        out = torch.empty(index.numel(), self.x.shape[1], dtype=self.x.dtype)
        buf = out.view(torch.uint8).numpy()  # (B, row bytes): the rows' bytes, written in place
        row_bytes = buf.shape[1] if buf.ndim == 2 else 0
        for i, pos in enumerate((index * row_bytes + self._offset).tolist()):
            if os.preadv(self._fd, [buf[i]], pos) != row_bytes:
                raise ValueError(f"feature file: short read of row {int(index[i])}")
        return out
