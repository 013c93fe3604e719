"""In-memory graph: CSR structure plus node features and labels.

Convention: row ``v`` of a ``Csr`` lists the *sources* of the edges that point into ``v``
(``indices[indptr[v]:indptr[v + 1]]``), i.e. the neighbours ``v`` aggregates from. For an
undirected graph both directions are stored, so this is also the out-neighbour list.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Csr:
    """Compressed sparse rows: ``indptr`` int64 (N + 1,), ``indices`` int64 (E,), rows sorted."""

    indptr: torch.Tensor
    indices: torch.Tensor

    @property
    def num_nodes(self) -> int:
        return self.indptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.indices.numel()

    def degrees(self) -> torch.Tensor:
        """In-degree of every node: int64 (N,)."""
        return self.indptr[1:] - self.indptr[:-1]

    def targets(self) -> torch.Tensor:
        """Target (row) node of every stored edge: int64 (E,)."""
        return torch.repeat_interleave(torch.arange(self.num_nodes), self.degrees())

    def edge_index(self) -> torch.Tensor:
        """PyG ``edge_index`` (2, E): row 0 = source, row 1 = target."""
        return torch.stack([self.indices, self.targets()])

    def edge_keys(self) -> torch.Tensor:
        """One int64 per directed edge, ``src * N + dst``, sorted ascending; for set tests."""
        keys = self.indices * self.num_nodes + self.targets()
        return torch.sort(keys).values

    def restrict(self, keep_nodes: torch.Tensor) -> "Csr":
        """Same node ids, only edges whose both endpoints have ``keep_nodes`` (bool (N,)) set."""
        keep_edge = keep_nodes[self.indices] & keep_nodes[self.targets()]
        targets = self.targets()[keep_edge]
        indptr = torch.zeros(self.num_nodes + 1, dtype=torch.int64)
        indptr[1:] = torch.cumsum(torch.bincount(targets, minlength=self.num_nodes), 0)
        return Csr(indptr, self.indices[keep_edge].clone())


# The label code of a node without a label: it carries messages but is in no split.
UNLABELLED = -1

# Node roles of a split; ``Graph.public_roles`` stores indices into this tuple.
ROLES = ("train", "val", "test", "unused")


@dataclass(frozen=True)
class Graph:
    """A node-attributed graph: ``x`` float32 (N, F), ``y`` int64 (N,) in ``[0, num_classes)``,
    or ``UNLABELLED`` (-1) for a node without a label.

    ``timestamps`` (N,) float64 or int64, optional: when each node appeared (time-based splits).
    """

    csr: Csr
    x: torch.Tensor
    y: torch.Tensor
    num_classes: int
    timestamps: torch.Tensor | None = None
    # int8 (N,), optional: the dataset's official split as codes into ROLES (planetoid, ogb)
    public_roles: torch.Tensor | None = None

    @property
    def num_nodes(self) -> int:
        return self.csr.num_nodes


@dataclass(frozen=True)
class EdgeReport:
    """What the edge policies did. Counts are input rows, except ``output_edges`` (stored, directed)."""

    input_edges: int
    self_loops_removed: int
    duplicates_removed: int  # for undirected graphs (u, v) and (v, u) count as the same edge
    output_edges: int


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` for 1-D ints via sort + neighbour mask (numpy 2.x's hash path is ~20x slower)."""
    ordered = np.sort(values)
    if ordered.size == 0:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def csr_from_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> Csr:
    """CSR (rows = ``dst``) from edge arrays (E,), keeping every edge; columns sorted per row."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    order = np.argsort(dst * num_nodes + src, kind="stable")  # by dst, then src; 3x lexsort
    counts = np.bincount(dst, minlength=num_nodes)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return Csr(torch.from_numpy(indptr), torch.from_numpy(src[order].copy()))


def normalize_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, *, undirected: bool,
                    dedup: bool, remove_self_loops: bool) -> tuple[Csr, EdgeReport]:
    """Apply the dataset's edge policies and build the CSR.

    ``src``/``dst`` are int arrays (E,) of node ids already checked to lie in ``[0, num_nodes)``.
    Undirected graphs store both directions of every edge (a kept self-loop once).
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    input_edges = int(src.size)
    loops = src == dst
    loops_removed = int(loops.sum()) if remove_self_loops else 0
    if remove_self_loops:
        src, dst = src[~loops], dst[~loops]
    if undirected:  # key of the unordered pair
        keys = np.minimum(src, dst) * num_nodes + np.maximum(src, dst)
    else:
        keys = src * num_nodes + dst
    unique_keys = sorted_unique(keys) if dedup else keys
    dups_removed = int(keys.size - unique_keys.size)
    first, second = unique_keys // num_nodes, unique_keys % num_nodes
    if undirected:
        proper = first != second
        src = np.concatenate([first, second[proper]])
        dst = np.concatenate([second, first[proper]])
    else:
        src, dst = first, second
    csr = csr_from_edges(src, dst, num_nodes)
    report = EdgeReport(input_edges=input_edges, self_loops_removed=loops_removed,
                        duplicates_removed=dups_removed, output_edges=csr.num_edges)
    return csr, report
