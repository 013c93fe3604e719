"""Induced subgraphs of a CSR graph: every stored edge among a chosen node set, in local ids.

Shared by the ClusterGCN and GraphSAINT samplers, whose batches are induced subgraphs (of a
union of parts, of the nodes a set of random walks visited); ``with_inter_edges`` keeps the
edges from outside the node set too (ClusterGCN's ``keep_inter_cluster_edges``).
``subgraph_type_name`` reads the kind of subgraph the neighbor samplers build from PyG's
``SubgraphType`` (member or name).
"""

from __future__ import annotations

import numpy as np
from torch_geometric.sampler.base import SubgraphType

from gnnpipe.data.edges import sorted_unique
from gnnpipe.sampling.pick import pick_edges


def subgraph_type_name(subgraph_type: SubgraphType | str) -> str:
    """``directional`` | ``bidirectional`` | ``induced`` from a PyG ``SubgraphType`` member or its
    name (PyG's samplers take either); anything else is a ValueError."""
    name = subgraph_type.value if isinstance(subgraph_type, SubgraphType) else subgraph_type
    names = [member.value for member in SubgraphType]
    if name not in names:
        raise ValueError(f"subgraph_type={subgraph_type!r} is not valid; expected one of: "
                         f"{', '.join(names)}")
    return name


def sort_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> np.ndarray:
    """Order of local edges (E,) by (target, source): one canonical edge order per node set, so
    batches built from the whole graph or from partition shards come out identical."""
    return np.argsort(dst * num_nodes + src, kind="stable")


def induced_edges(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray,
                  local: np.ndarray, *, ordered: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Edges of the subgraph induced on ``nodes`` (B,), distinct global ids.

    ``indptr`` (N + 1,) / ``indices`` (E,) int64 are a ``Csr`` (row ``v`` = sources of the edges
    into ``v``). Returns ``edge_index`` int64 (2, E') in local ids (a node's position in
    ``nodes``; row 0 source, row 1 target), sorted by (target, source) unless ``ordered`` is
    False (then grouped by target only: enough for counting), and ``e_id`` int64 (E',), the CSR
    position of each edge (its column in ``Csr.edge_index()``). ``local`` is an int64 (N,)
    scratch map holding -1 everywhere; it is left that way.
    """
    b = nodes.size
    local[nodes] = np.arange(b)
    try:
        start = indptr[nodes]
        pos, dst = pick_edges(start, indptr[nodes + 1] - start, -1, False, None)  # every in-edge
        src = local[indices[pos]]  # (E,) local source, -1 outside the node set
    finally:
        local[nodes] = -1
    keep = src >= 0
    src, dst, pos = src[keep], dst[keep], pos[keep]
    if ordered:  # rows come in node order; sources in whatever order the CSR row holds them
        order = sort_edges(src, dst, b)
        src, dst, pos = src[order], dst[order], pos[order]
    return np.stack([src, dst]), pos


def with_inter_edges(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray,
                     local: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every in-edge of ``nodes`` (B,), also those from outside the set.

    Returns ``n_id`` int64 (B + H,): ``nodes`` then the H outside sources, ascending;
    ``edge_index`` int64 (2, E') local, sorted by (target, source), every target among the first
    B; ``e_id`` int64 (E',) CSR positions. ``indptr`` / ``indices`` / ``local`` as
    ``induced_edges``.
    """
    start = indptr[nodes]
    pos, dst = pick_edges(start, indptr[nodes + 1] - start, -1, False, None)  # every in-edge
    sources = indices[pos]  # (E',) global
    outside = np.empty(0, dtype=np.int64)
    local[nodes] = np.arange(nodes.size)
    try:
        outside = sorted_unique(sources[local[sources] < 0])
        local[outside] = np.arange(nodes.size, nodes.size + outside.size)
        src = local[sources]
    finally:
        local[nodes] = local[outside] = -1
    n_id = np.concatenate([nodes, outside])
    order = sort_edges(src, dst, n_id.size)
    return n_id, np.stack([src[order], dst[order]]), pos[order]
