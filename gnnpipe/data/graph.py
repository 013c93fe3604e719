"""The in-memory graph: one ``Graph`` class for every graph, one ``Csr`` per edge type.

A ``Graph`` has node types with features and edge types, PyG's ``(src_type, relation,
dst_type)`` triples, each with a ``Csr``: row ``v`` of an edge type's CSR lists the
``src_type`` sources of the edges that point into node ``v`` of ``dst_type``
(``indices[indptr[v]:indptr[v + 1]]``), i.e. the neighbours ``v`` aggregates from, with node
ids local to each type. An undirected relation inside one type stores both directions (so a row
is also the out-neighbour list) and is its own reverse; a relation between two types has a
separate reverse edge type holding the flipped edges (``author writes paper`` / ``paper
rev_writes author``); ``Graph.reverse`` maps each edge type to its reverse.

A homogeneous graph is the one-node-type, one-edge-type case (``Graph.homogeneous``: node type
``NODE``, edge type ``EDGE``; PyG's ``is_hetero`` false). Algorithms over one relation (analyze,
partition, propagate, ordered splits, the homogeneous samplers) read ``Graph.target_view()``: the
target type over its own relation as one flat record.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from gnnpipe import LazyModule

torch = LazyModule("torch", globals())  # imported on first use: the report starts without it


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


# The label code of a node without a label: it carries messages but is in no split.
UNLABELLED = -1

# Node roles of a split. A node's role is held as an int8 code, its index here (train 0, val 1,
# test 2, unused 3: ``Graph.public_roles``, the split readers, training, evaluation); the names
# appear only in the split's and the predictions' Parquet files, a block of rows at a time.
ROLES = ("train", "val", "test", "unused")
ROLE_CODES = {role: code for code, role in enumerate(ROLES)}

EdgeType = tuple[str, str, str]
# The node type and edge type of a homogeneous graph (``Graph.homogeneous``).
NODE = "node"
EDGE: EdgeType = (NODE, "to", NODE)
# What a graph's types make it (``dataset.layout``), derived from them: which algorithms over one
# relation apply (METIS, propagate, the baseline's blocks); every graph's files are of one layout.
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


def reverse_edge_type(edge_type: EdgeType) -> EdgeType:
    """``(s, rel, d)`` -> ``(d, "rev_" + rel, s)``: the relation ``dataset.undirected`` adds
    beside a relation between two node types."""
    s, rel, d = edge_type
    return d, f"rev_{rel}", s


def parse_edge_type(name: str) -> EdgeType:
    parts = tuple(name.split("__"))
    if len(parts) != 3:
        raise ValueError(f"edge type {name!r} must be 'src__relation__dst'")
    return parts  # type: ignore[return-value]


def layout_of(node_types: list[str], edge_types: list[EdgeType]) -> str:
    """``homogeneous`` for exactly the types of ``Graph.homogeneous`` (node type ``NODE``, edge
    type ``EDGE``), else ``typed``, even for one type of other names (a typed table of one node
    type stays a typed graph to the stages' capability checks)."""
    return HOMOGENEOUS if list(node_types) == [NODE] and list(edge_types) == [EDGE] else TYPED


@dataclass(frozen=True)
class TargetView:
    """The target node type over its own relation, flat: ``csr`` (N + 1,) / (E,), ``x`` (N, F)
    (float32, or as stored), ``y`` int64 (N,) in ``[0, num_classes)`` or ``UNLABELLED``,
    ``timestamps`` (N,) float64 or int64 (when the nodes carry a time), ``public_roles`` int8
    (N,) codes into ``ROLES`` (an official split). What the algorithms over one relation read
    (analyze, partition, propagate, ordered splits, the homogeneous samplers); built by
    ``Graph.target_view`` only."""

    csr: Csr
    x: torch.Tensor
    y: torch.Tensor
    num_classes: int
    timestamps: torch.Tensor | None = None
    public_roles: torch.Tensor | None = None

    @property
    def num_nodes(self) -> int:
        return self.csr.num_nodes


@dataclass(frozen=True)
class Graph:
    """Node types with features ``x[t]`` float32 (N_t, F_t); labels ``y`` int64 (N_target,) on
    ``target`` only (``UNLABELLED`` for a node without one); ``csr[e]`` per edge type ``e``
    (rows = nodes of ``e[2]``)."""

    x: dict[str, torch.Tensor]
    csr: dict[EdgeType, Csr]
    target: str  # the labelled node type (node classification)
    y: torch.Tensor
    num_classes: int
    reverse: dict[EdgeType, EdgeType]  # edge type -> its reverse edge type (itself if symmetric)
    link_edge_type: EdgeType  # the edge type link prediction holds out by default
    # Optional extras (empty for the built-in graphs): node times (N_t,) of the types with a
    # timestamp (int64; a homogeneous graph's may be float64), int64 (E,) edge times in CSR
    # order (the order of ``csr[e].indices``), int8 (N_target,) codes into ``ROLES`` (the
    # dataset's official split: planetoid, ogb, user tables)
    node_time: dict[str, torch.Tensor] = field(default_factory=dict)
    edge_time: dict[EdgeType, torch.Tensor] = field(default_factory=dict)
    public_roles: torch.Tensor | None = None

    @classmethod
    def homogeneous(cls, csr: Csr, x: torch.Tensor, y: torch.Tensor, num_classes: int,
                    timestamps: torch.Tensor | None = None,
                    public_roles: torch.Tensor | None = None) -> "Graph":
        """The graph of one node type ``NODE`` and one edge type ``EDGE`` over ``csr``, with
        ``x`` (N, F), ``y`` (N,), optional node ``timestamps`` (N,) and ``public_roles`` (N,)
        (the tensors as given, no copy). ``EDGE`` is its own reverse: a link split holds out
        unordered node pairs, so an edge and its reverse (or a reciprocal edge) go to one split
        together."""
        return cls(x={NODE: x}, csr={EDGE: csr}, target=NODE, y=y, num_classes=num_classes,
                   reverse={EDGE: EDGE}, link_edge_type=EDGE,
                   node_time={} if timestamps is None else {NODE: timestamps},
                   public_roles=public_roles)

    @property
    def node_types(self) -> tuple[str, ...]:
        return tuple(self.x)

    @property
    def edge_types(self) -> tuple[EdgeType, ...]:
        return tuple(self.csr)

    @property
    def layout(self) -> str:
        """``homogeneous`` (a ``Graph.homogeneous`` graph) or ``typed``, derived from its types
        (``layout_of``): what the stages check capabilities by, not a file format."""
        return layout_of(list(self.x), list(self.csr))

    @property
    def is_homogeneous(self) -> bool:
        """One node type and one edge type (PyG's ``not is_hetero``)."""
        return len(self.x) == 1 and len(self.csr) == 1

    @property
    def num_nodes(self) -> int:
        """Nodes of every type together (PyG's ``HeteroData.num_nodes``)."""
        return sum(int(x.shape[0]) for x in self.x.values())

    @property
    def num_nodes_dict(self) -> dict[str, int]:
        """Node type -> its number of nodes, in type order (PyG's ``num_nodes_dict``)."""
        return {t: int(x.shape[0]) for t, x in self.x.items()}

    def metadata(self) -> tuple[list[str], list[EdgeType]]:
        """PyG's ``HeteroData.metadata()``: node types and edge types, in this graph's order."""
        return list(self.node_types), list(self.edge_types)

    def sizes(self) -> list[tuple[str, int]]:
        """``(node type, num_nodes)`` in order."""
        return list(self.num_nodes_dict.items())

    def offsets(self) -> dict[str, int]:
        """First id of each node type in the homogeneous projection (types in order)."""
        sizes = np.cumsum([0] + [n for _, n in self.sizes()])
        return {t: int(sizes[i]) for i, t in enumerate(self.node_types)}

    def own_relation(self) -> EdgeType | None:
        """The target type's own relation, or None (a user-item graph has none)."""
        for edge_type in self.edge_types:
            if edge_type[0] == edge_type[2] == self.target:
                return edge_type
        return None

    def target_csr(self) -> Csr:
        """The target type's own relation; without one (a user-item graph) a CSR over the
        target nodes with no edges, since no edge joins two target nodes."""
        own = self.own_relation()
        if own is not None:
            return self.csr[own]
        n = self.num_nodes_dict[self.target]
        return Csr(torch.zeros(n + 1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))

    def target_view(self) -> TargetView:
        """The target type alone over its own relation (``target_csr``), with its labels, node
        times and official split, when the graph has them. A homogeneous graph's view is the
        whole graph."""
        return TargetView(csr=self.target_csr(),
                          x=self.x[self.target], y=self.y, num_classes=self.num_classes,
                          timestamps=self.node_time.get(self.target),
                          public_roles=self.public_roles)


def phase_csrs(message_graphs: dict[str, dict[EdgeType, Csr]]) -> dict[str, Csr]:
    """Phase -> the ``EDGE`` CSR: a homogeneous graph's per-phase message graphs as the flat
    ones that training reads (phases sharing a CSR still share it)."""
    return {phase: graphs[EDGE] for phase, graphs in message_graphs.items()}


def type_summary(graph: Graph) -> dict:
    """Per node type: nodes, features, nodes with no in-edge of any type; per edge type: stored
    edges and the in-degree of its target nodes (mean, max). JSON-ready."""
    received = {t: np.zeros(n, dtype=np.int64) for t, n in graph.num_nodes_dict.items()}
    edges = {}
    for edge_type, csr in graph.csr.items():
        degrees = csr.degrees().numpy()
        received[edge_type[2]] += degrees
        edges[edge_type_name(edge_type)] = {
            "edges": csr.num_edges,
            "mean_in_degree": round(float(degrees.mean()), 4) if degrees.size else 0.0,
            "max_in_degree": int(degrees.max(initial=0))}
    nodes = {t: {"nodes": n, "features": int(graph.x[t].shape[1]),
                 "no_in_edges": int((received[t] == 0).sum())}
             for t, n in graph.num_nodes_dict.items()}
    return {"target": graph.target, "node_types": nodes, "edge_types": edges,
            "reverse": {edge_type_name(e): edge_type_name(r) for e, r in graph.reverse.items()}}
