"""The typed graph both typed samplers read: checked CSR arrays per edge type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from gnnpipe.data.graph import Csr

EdgeType = tuple[str, str, str]


@dataclass(frozen=True)
class TypedCsr:
    """``num_nodes[t]`` per node type (in order), the edge types in order, and per edge type
    ``indptr`` int64 (N_dst + 1,) and ``indices`` int64 (E,) (sources, type-local ids)."""

    num_nodes: dict[str, int]
    edge_types: list[EdgeType]
    indptr: dict[EdgeType, np.ndarray]
    indices: dict[EdgeType, np.ndarray]

    @property
    def node_types(self) -> list[str]:
        return list(self.num_nodes)


def typed_csr_arrays(num_nodes: Mapping[str, int], csr: Mapping[EdgeType, Csr],
                     what: str = "edge type") -> TypedCsr:
    """``csr`` (edge type ``(src, rel, dst)`` -> ``Csr`` with ``num_nodes[dst]`` rows and
    sources in ``[0, num_nodes[src])``) as contiguous int64 arrays; a ValueError naming the
    edge type when it does not fit ``num_nodes``."""
    sizes = {str(t): int(n) for t, n in num_nodes.items()}
    edge_types: list[EdgeType] = []
    indptrs: dict[EdgeType, np.ndarray] = {}
    indices_of: dict[EdgeType, np.ndarray] = {}
    for edge_type, graph in csr.items():
        edge_type = tuple(edge_type)
        if len(edge_type) != 3 or edge_type[0] not in sizes or edge_type[2] not in sizes:
            raise ValueError(f"{what} {edge_type!r} must be (src, rel, dst) with both node types "
                             f"in num_nodes ({', '.join(sizes)})")
        src, _, dst = edge_type
        indptr = np.ascontiguousarray(graph.indptr.numpy(), dtype=np.int64)
        indices = np.ascontiguousarray(graph.indices.numpy(), dtype=np.int64)
        if indptr.size != sizes[dst] + 1:
            raise ValueError(f"csr[{edge_type!r}] has {indptr.size - 1} rows; expected one per "
                             f"{dst!r} node ({sizes[dst]})")
        if indices.size and (indices.min() < 0 or indices.max() >= sizes[src]):
            raise ValueError(f"csr[{edge_type!r}] holds sources outside [0, {sizes[src]}) of "
                             f"node type {src!r}")
        edge_types.append(edge_type)
        indptrs[edge_type], indices_of[edge_type] = indptr, indices
    return TypedCsr(sizes, edge_types, indptrs, indices_of)
