"""What the typed loaders (gnnpipe/sampling/builders.py: ``hgt``, typed ``neighbor`` and
``link_neighbor``) draw from: the train graph as a PyG ``HeteroData`` and the temporal options of
``train.temporal.by`` (node times per type, or edge times re-aligned to the train graph)."""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import HeteroData

from gnnpipe.data.graph import Csr, EdgeType, Graph
from gnnpipe.io.csr_blocks import edge_index_of


def hetero_data(graph: Graph, train_graph: dict[EdgeType, Csr]) -> HeteroData:
    """Features of every type, target labels, and the train graph's edges in CSR order (the
    samplers' edge ids as they are), ``edge_index_of`` tables: in a stage, mapped scratch files
    (the loaders read only their shapes and per-batch rows)."""
    data = HeteroData()
    for node_type, x in graph.x.items():
        data[node_type].x = x
    data[graph.target].y = graph.y
    for edge_type, csr in train_graph.items():
        data[edge_type].edge_index = edge_index_of(csr)
    return data


def align_typed_edge_times(full: Csr, edge_time: np.ndarray, sub: Csr, num_src: int
                           ) -> np.ndarray:
    """Times (E_sub,) of the edges of ``sub`` (a phase's CSR of one edge type) from
    ``edge_time`` (E_full,) of the prepared CSR ``full``; rows = destination nodes, columns in
    ``[0, num_src)``. Matched by (destination, source), the k-th copy of a repeated edge taking
    the k-th copy's time; an edge of ``sub`` missing from ``full`` is a ValueError."""
    edge_time = np.asarray(edge_time)
    if edge_time.shape != (full.num_edges,):
        raise ValueError(f"{edge_time.size} edge times for {full.num_edges} edges of the "
                         "prepared graph; re-run the prepare stage")
    full_key = full.targets().numpy() * num_src + full.indices.numpy()  # (E,) grouped by row
    sub_key = sub.targets().numpy() * num_src + sub.indices.numpy()
    order = np.argsort(full_key, kind="stable")  # columns need not be sorted within a row
    sorted_key = full_key[order]
    sub_order = np.argsort(sub_key, kind="stable")
    sub_sorted = sub_key[sub_order]
    copy = np.arange(sub_sorted.size) - np.searchsorted(sub_sorted, sub_sorted, side="left")
    pos = np.searchsorted(sorted_key, sub_sorted, side="left") + copy
    ok = pos < sorted_key.size
    ok[ok] = sorted_key[pos[ok]] == sub_sorted[ok]
    if not ok.all():
        raise ValueError("the train message graph holds typed edges the prepared graph lacks; "
                         "re-run the split stage")
    out = np.empty(sub_key.size, dtype=edge_time.dtype)
    out[sub_order] = edge_time[order[pos]]
    return out


def typed_temporal(by: str, strategy: str, graph: Graph,
                   train_graph: dict[EdgeType, Csr], seeds: np.ndarray) -> dict:
    """Keyword arguments of ``HeteroNeighborSampler`` and the loader's ``input_time`` for
    ``train.temporal.by`` none | node | edge: seed times are the target type's node times
    (``graph.node_time``, absent before the typed tables carry times), edge times
    (``graph.edge_time``, prepared CSR order) are re-aligned to ``train_graph``."""
    if by == "none":
        return {}
    node_time = getattr(graph, "node_time", None) or {}
    if graph.target not in node_time:
        raise ValueError(f"train.temporal.by={by!r} takes each seed's time from the "
                         f"{graph.target!r} node times, and the prepared typed graph has none: "
                         "give that node table a time column")
    times = {t: np.asarray(v) for t, v in node_time.items()}
    out = {"temporal_strategy": strategy,
           "input_time": torch.from_numpy(np.ascontiguousarray(times[graph.target][seeds]))}
    if by == "node":
        out["node_time"] = times
        return out
    edge_time = getattr(graph, "edge_time", None) or {}
    if not edge_time:
        raise ValueError("train.temporal.by='edge' needs edge times, and the prepared typed "
                         "graph has none: give the edge tables a time column")
    out["edge_time"] = {e: align_typed_edge_times(graph.csr[e], np.asarray(t), train_graph[e],
                                                  graph.num_nodes_dict[e[0]])
                        for e, t in edge_time.items() if e in train_graph}
    return out
