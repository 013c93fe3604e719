"""Model inputs of a typed graph: one ``PhaseInput(x_dict, edge_index_dict)`` per phase."""

from __future__ import annotations

from gnnpipe.graph import Csr
from gnnpipe.typed_graph import EdgeType, HeteroGraph
from gnnpipe.train import PhaseInput

PHASES = ("train", "val", "test")


def phase_inputs(graph: HeteroGraph, graphs: dict[str, dict[EdgeType, Csr]]
                 ) -> dict[str, PhaseInput]:
    """Phase -> ``PhaseInput(x_dict, edge_index_dict)``: the whole graph's features and the
    phase's own typed edges (phases sharing a message graph share the tensors)."""
    built: dict[int, dict] = {}
    out = {}
    for phase in PHASES:
        key = id(graphs[phase])
        if key not in built:
            built[key] = {e: csr.edge_index() for e, csr in graphs[phase].items()}
        out[phase] = PhaseInput(graph.x, built[key])  # type: ignore[arg-type]
    return out
