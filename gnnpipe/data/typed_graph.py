"""In-memory heterogeneous graph: features per node type, one CSR per edge type.

An edge type is PyG's ``(src_type, relation, dst_type)`` triple. Its CSR has one row per node of
``dst_type`` listing the ``src_type`` sources that point into it (the same convention as
``gnnpipe.data.graph.Csr``: rows are the nodes that aggregate), with node ids local to each type.
Reverse edge types (``author writes paper`` / ``paper rev_writes author``) are separate edge
types holding the flipped edges; ``reverse`` maps each edge type to its reverse (a symmetric
relation such as ``paper cites paper``, stored in both directions, is its own reverse).

A homogeneous ``Graph`` is the one-node-type, one-edge-type case (``one_type``): the split and
the audit are written once, for this type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import torch

from gnnpipe.data.graph import Csr, Graph, csr_from_edges

EdgeType = tuple[str, str, str]
# The node type and edge type of a homogeneous graph seen as a typed one (``one_type``).
NODE = "node"
EDGE: EdgeType = (NODE, "to", NODE)
# The two layouts of prepared files (``dataset.layout``): derived from a graph's types.
HOMOGENEOUS, TYPED = "homogeneous", "typed"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def check_name(name: str, what: str) -> str:
    """A node type or relation name usable in file names (no ``__``: it separates the parts)."""
    if not _NAME.match(name) or "__" in name:
        raise ValueError(f"{what} {name!r} must be lower-case letters, digits and single "
                         "underscores, starting with a letter")
    return name


def edge_type_name(edge_type: EdgeType) -> str:
    """``("author", "writes", "paper")`` -> ``"author__writes__paper"`` (file names, JSON keys)."""
    return "__".join(edge_type)


def parse_edge_type(name: str) -> EdgeType:
    parts = tuple(name.split("__"))
    if len(parts) != 3:
        raise ValueError(f"edge type {name!r} must be 'src__relation__dst'")
    return parts  # type: ignore[return-value]


def layout_of(node_types: list[str], edge_types: list[EdgeType]) -> str:
    """``homogeneous`` for exactly the types of ``one_type`` (node type ``NODE``, edge type
    ``EDGE``), else ``typed``, even for one type of other names (a typed table of one node type
    keeps its typed files)."""
    return HOMOGENEOUS if list(node_types) == [NODE] and list(edge_types) == [EDGE] else TYPED


def edge_pairs(csr: Csr) -> tuple[np.ndarray, np.ndarray]:
    """``src``, ``dst`` int64 (E,) of every stored edge of one edge type."""
    return csr.indices.numpy(), csr.targets().numpy()


@dataclass(frozen=True)
class HeteroGraph:
    """Node types with features ``x[t]`` float32 (N_t, F_t); labels ``y`` int64 (N_target,) on
    ``target`` only; ``csr[e]`` per edge type ``e`` (rows = nodes of ``e[2]``)."""

    x: dict[str, torch.Tensor]
    csr: dict[EdgeType, Csr]
    target: str  # the labelled node type (node classification)
    y: torch.Tensor
    num_classes: int
    reverse: dict[EdgeType, EdgeType]  # edge type -> its reverse edge type (itself if symmetric)
    link_edge_type: EdgeType  # the edge type link prediction holds out by default
    # Optional extras of typed user tables (empty for the built-in graph): int64 (N_t,) node
    # times of the types with a timestamp column, int64 (E,) edge times in CSR order (the order
    # of ``csr[e].indices``), int8 (N_target,) codes into ``gnnpipe.data.graph.ROLES`` (official
    # split)
    node_time: dict[str, torch.Tensor] = field(default_factory=dict)
    edge_time: dict[EdgeType, torch.Tensor] = field(default_factory=dict)
    public_roles: torch.Tensor | None = None

    @property
    def node_types(self) -> tuple[str, ...]:
        return tuple(self.x)

    @property
    def edge_types(self) -> tuple[EdgeType, ...]:
        return tuple(self.csr)

    @property
    def layout(self) -> str:
        """``homogeneous`` (a ``one_type`` graph) or ``typed``: the layout of its files."""
        return layout_of(list(self.x), list(self.csr))

    @property
    def is_homogeneous(self) -> bool:
        """One node type and one edge type (PyG's ``not is_hetero``): a ``Graph`` as typed."""
        return len(self.x) == 1 and len(self.csr) == 1

    def num_nodes(self, node_type: str) -> int:
        return int(self.x[node_type].shape[0])

    def metadata(self) -> tuple[list[str], list[EdgeType]]:
        """PyG's ``HeteroData.metadata()``: node types and edge types, in this graph's order."""
        return list(self.node_types), list(self.edge_types)

    def sizes(self) -> list[tuple[str, int]]:
        """``(node type, num_nodes)`` in order."""
        return [(t, self.num_nodes(t)) for t in self.node_types]

    def offsets(self) -> dict[str, int]:
        """First id of each node type in the homogeneous projection (types in order)."""
        sizes = np.cumsum([0] + [self.num_nodes(t) for t in self.node_types])
        return {t: int(sizes[i]) for i, t in enumerate(self.node_types)}

    @property
    def total_nodes(self) -> int:
        return sum(self.num_nodes(t) for t in self.node_types)

    def own_relation(self) -> EdgeType | None:
        """The target type's own relation, or None (a user-item graph has none)."""
        for edge_type in self.edge_types:
            if edge_type[0] == edge_type[2] == self.target:
                return edge_type
        return None

    def self_relation(self) -> EdgeType:
        """The target type's own relation (``paper cites paper``): what ``analyze`` measures."""
        for edge_type in self.edge_types:
            if edge_type[0] == edge_type[2] == self.target:
                return edge_type
        raise ValueError(f"the heterogeneous graph has no edge type from {self.target!r} to "
                         f"{self.target!r}; graph diagnostics need one")

    def target_csr(self) -> Csr:
        """The target type's own relation; without one (a user-item graph) a CSR over the
        target nodes with no edges, since no edge joins two target nodes."""
        own = self.own_relation()
        if own is not None:
            return self.csr[own]
        n = self.num_nodes(self.target)
        return Csr(torch.zeros(n + 1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))

    def target_graph(self, csr: Csr | None = None) -> Graph:
        """The target type alone over its own relation (``target_csr``), as a homogeneous
        ``Graph`` (with the target's node times and official split, when the graph has them)."""
        return Graph(csr=self.target_csr() if csr is None else csr,
                     x=self.x[self.target], y=self.y, num_classes=self.num_classes,
                     timestamps=self.node_time.get(self.target), public_roles=self.public_roles)


def one_type(graph: Graph) -> HeteroGraph:
    """``graph`` as the typed graph of one node type ``NODE`` and one edge type ``EDGE``, the
    same tensors (no copy). ``EDGE`` is its own reverse: a link split holds out unordered node
    pairs, so an edge and its reverse (or a reciprocal edge) go to one split together."""
    return HeteroGraph(x={NODE: graph.x}, csr={EDGE: graph.csr}, target=NODE, y=graph.y,
                       num_classes=graph.num_classes, reverse={EDGE: EDGE}, link_edge_type=EDGE,
                       node_time={} if graph.timestamps is None else {NODE: graph.timestamps},
                       public_roles=graph.public_roles)


def phase_csrs(message_graphs: dict[str, dict[EdgeType, Csr]]) -> dict[str, Csr]:
    """Phase -> the ``EDGE`` CSR: a ``one_type`` graph's per-phase message graphs as the
    homogeneous ones that training reads (phases sharing a CSR still share it)."""
    return {phase: graphs[EDGE] for phase, graphs in message_graphs.items()}


def homogeneous_csr(sizes: list[tuple[str, int]], csrs: dict[EdgeType, Csr]) -> Csr:
    """Every edge of ``csrs`` in one CSR over all nodes: node ``v`` of the i-th type of
    ``sizes`` (``(type, num_nodes)`` in order) at id ``sum(sizes[:i]) + v``, PyG's
    ``to_homogeneous`` order. (total + 1,) indptr."""
    starts = np.cumsum([0] + [n for _, n in sizes])
    offsets = {t: int(starts[i]) for i, (t, _) in enumerate(sizes)}
    src, dst = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    for (s, _, d), csr in csrs.items():
        a, b = edge_pairs(csr)
        src.append(a + offsets[s])
        dst.append(b + offsets[d])
    total = int(starts[-1])
    return csr_from_edges(np.concatenate(src), np.concatenate(dst), total)


def type_summary(graph: HeteroGraph) -> dict:
    """Per node type: nodes, features, nodes with no in-edge of any type; per edge type: stored
    edges and the in-degree of its target nodes (mean, max). JSON-ready."""
    received = {t: np.zeros(graph.num_nodes(t), dtype=np.int64) for t in graph.node_types}
    edges = {}
    for edge_type, csr in graph.csr.items():
        degrees = csr.degrees().numpy()
        received[edge_type[2]] += degrees
        edges[edge_type_name(edge_type)] = {
            "edges": csr.num_edges,
            "mean_in_degree": round(float(degrees.mean()), 4) if degrees.size else 0.0,
            "max_in_degree": int(degrees.max(initial=0))}
    nodes = {t: {"nodes": graph.num_nodes(t), "features": int(graph.x[t].shape[1]),
                 "no_in_edges": int((received[t] == 0).sum())} for t in graph.node_types}
    return {"target": graph.target, "node_types": nodes, "edge_types": edges,
            "reverse": {edge_type_name(e): edge_type_name(r) for e, r in graph.reverse.items()}}


def edge_index_dict(csrs: dict[EdgeType, Csr]) -> dict[EdgeType, torch.Tensor]:
    """PyG ``edge_index_dict``: edge type -> int64 (2, E) (row 0 sources, row 1 targets)."""
    return {edge_type: csr.edge_index() for edge_type, csr in csrs.items()}


def sub_edge_time(full: Csr, time: torch.Tensor, sub: Csr, num_src: int) -> torch.Tensor:
    """Times int64 (E_sub,) of ``sub``'s edges in its CSR order, for ``sub`` a subset of the
    edges of ``full`` (a phase's message graph of one edge type) and ``time`` int64 (E_full,)
    ``full``'s edge times (``HeteroGraph.edge_time``). The k-th copy of a repeated pair takes
    the k-th copy's time (phases keep all copies of a pair or none)."""
    n = max(num_src, 1)
    full_src, full_dst = edge_pairs(full)
    sub_src, sub_dst = edge_pairs(sub)
    full_keys, sub_keys = full_dst * n + full_src, sub_dst * n + sub_src  # both ascending
    rank = np.arange(sub_keys.size) - np.searchsorted(sub_keys, sub_keys, side="left")
    pos = np.searchsorted(full_keys, sub_keys, side="left") + rank
    if pos.size and (pos.max() >= full_keys.size or not (full_keys[pos] == sub_keys).all()):
        raise ValueError("sub_edge_time: the message graph has edges that the full graph "
                         "does not; re-run the split stage")
    return time[torch.from_numpy(pos)]
