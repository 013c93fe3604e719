"""A small whole-graph oracle of the node split's message graphs (the library splits by blocks,
gnnpipe/splitting/split.py): tests hand it roles of their own and compare or doctor its graphs."""

from __future__ import annotations

import numpy as np

from gnnpipe.data.edges import csr_from_edges, edge_pairs
from gnnpipe.data.graph import UNLABELLED, Csr, EdgeType, Graph

PHASES = ("train", "val", "test")


def message_graphs(graph: Graph, roles: np.ndarray, mode: str,
                   timestamps: np.ndarray | None = None) -> dict[str, dict[EdgeType, Csr]]:
    """Phase -> edge type -> CSR of ``roles`` (str (N_target,)) in ``mode``; ``timestamps``
    (N_target,) for mode time."""
    if mode == "transductive":
        return {phase: graph.csr for phase in PHASES}
    seen = phase_visible(roles, mode, graph.y.numpy() != UNLABELLED, timestamps)
    return {"train": restrict_to(graph, graph.csr, seen["train"]),
            "val": restrict_to(graph, graph.csr, seen["val"]), "test": graph.csr}


def restrict_to(graph: Graph, csrs: dict[EdgeType, Csr], visible: np.ndarray
                ) -> dict[EdgeType, Csr]:
    """Every edge type without the edges that touch a target node outside ``visible``."""
    out = {}
    for edge_type, csr in csrs.items():
        s, _, d = edge_type
        if graph.target not in (s, d):
            out[edge_type] = csr
            continue
        src, dst = edge_pairs(csr)
        keep = np.ones(src.size, dtype=bool)
        if s == graph.target:
            keep &= visible[src]
        if d == graph.target:
            keep &= visible[dst]
        out[edge_type] = csr_from_edges(src[keep], dst[keep], graph.num_nodes_dict[d],
                                        graph.num_nodes_dict[s])
    return out


def phase_visible(roles: np.ndarray, mode: str, labelled: np.ndarray,
                  timestamps: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """bool (N_target,) per phase train / val: its roles plus the unlabelled carriers (mode
    time: those no later than the phase's cut)."""
    carriers = ~labelled
    is_train, is_val = roles == "train", roles == "val"
    carriers_train = carriers_val = carriers
    if mode == "time":
        t = np.asarray(timestamps)
        carriers_train = carriers & (t <= t[is_train].max())
        carriers_val = carriers & (t <= t[is_train | is_val].max())
    return {"train": is_train | carriers_train, "val": is_train | is_val | carriers_val}
