"""Model inputs of a typed graph: one ``PhaseInput(x_dict, edge_index_dict)`` per phase."""

from __future__ import annotations

from gnnpipe.data.graph import Csr, EdgeType, Graph
from gnnpipe.io.csr_blocks import edge_index_of
from gnnpipe.training.inference import plan
from gnnpipe.training.train import PhaseInput

PHASES = ("train", "val", "test")


def phase_inputs(graph: Graph, graphs: dict[str, dict[EdgeType, Csr]], cfg=None,
                 phases: tuple[str, ...] = PHASES, world_size: int = 1
                 ) -> dict[str, PhaseInput]:
    """Phase of ``phases`` -> ``PhaseInput(x_dict, edge_index_dict, layerwise)``: the whole
    graph's features and the phase's own typed edges (phases sharing a message graph share the
    tensors). ``cfg`` (TrainParams) picks each graph's evaluation forward (``train.inference``,
    ``gnnpipe.training.inference.plan``, on ``world_size`` DDP ranks); None: full forwards.
    The edges are ``edge_index_of`` tables: in a stage, mapped scratch files (no 16 anonymous
    bytes an edge)."""
    built: dict[int, tuple] = {}
    out = {}
    for phase in phases:
        key = id(graphs[phase])
        if key not in built:
            engine = None
            if cfg is not None:
                # train.embeddings widen the input rows the auto threshold weighs
                dim = getattr(getattr(cfg, "embeddings", None), "dim", 0)
                in_dim = max(int(x.shape[1]) for x in graph.x.values()) + dim
                engine = plan(graphs[phase], graph.num_nodes_dict, in_dim, cfg, world_size)
            built[key] = ({e: edge_index_of(csr) for e, csr in graphs[phase].items()}, engine)
        edges, engine = built[key]
        out[phase] = PhaseInput(graph.x, edges, engine)  # type: ignore[arg-type]
    return out
