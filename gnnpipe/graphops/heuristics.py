"""What the structure-only link heuristics and the hard negatives share: the graph they read
and the small array helpers over it (``chunk_bounds`` and ``rows_of`` serve the partitioner's
shards and the curvature sample too).

Both read the **train-phase message graph** as one undirected simple graph
(``graphops.partition.symmetric_simple``); a typed graph is read whole, every edge type of its
train phase projected onto ``Graph.offsets()`` ids (``train_projection``; the partitioner's
``train_projection`` of the same graph), so a path
``author -> paper -> paper`` counts as a 2-hop path like any other. ``even_walk_labels`` tells
which pairs can have a common neighbour at all (none across the two sides of a bipartite
relation).
"""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.data.graph import TYPED, Csr, EdgeType, layout_of
from gnnpipe.data.edges import homogeneous_csr, row_positions
from gnnpipe.graphops.analyze import connected_components
from gnnpipe.io.csr_blocks import rows_by_edges

BUDGET = 1 << 21  # candidates per chunk: about 8 int64/float64 temporaries of 16 MB each


def train_projection(sizes: list[tuple[str, int]], train: dict[EdgeType, Csr]) -> Csr:
    """The train phase's message graphs (edge type -> CSR) of a split with node types ``sizes``
    (``(type, num_nodes)`` in order) as one square CSR over every node, PyG's
    ``to_homogeneous`` ids; a homogeneous layout's one CSR as it is. What the partitioner
    partitions and the heuristics read."""
    if layout_of([t for t, _ in sizes], list(train)) != TYPED:
        (csr,) = train.values()
        return csr
    return homogeneous_csr(sizes, train)


def chunk_bounds(work: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, stop)`` ranges of items whose ``work`` (int (M,)) sums to at most
    ``budget``, except a single item above it, which is a range of its own: the row blocks of
    a CSR whose rows hold ``work`` edges (``rows_by_edges``)."""
    return rows_by_edges(np.concatenate([[0], np.cumsum(work)]), budget)


def rows_of(indptr, indices, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``ids`` (int64 (m,)) of a CSR held in memory or mapped: each row's length, int64
    (m,), and the rows' columns, row after row (sum of lengths,)."""
    return (np.asarray(indptr[ids + 1]) - np.asarray(indptr[ids]),
            np.asarray(indices[row_positions(indptr, ids)]))


def simple_keys(simple: Csr) -> np.ndarray:
    """Sorted int64 keys ``row * N + column`` of every edge of a simple CSR: (E,)."""
    n = simple.num_nodes
    return simple.targets().numpy() * n + simple.indices.numpy()


def neighbour_weights(degrees: np.ndarray) -> dict[str, np.ndarray]:
    """What a common neighbour ``w`` adds to each heuristic: float64 (N,) per name. A node of
    degree <= 1 cannot be common to two distinct nodes; it weighs 0 rather than dividing by 0."""
    deg = degrees.astype(np.float64)
    aa = np.divide(1.0, np.log(deg, where=deg > 1, out=np.ones_like(deg)),
                   where=deg > 1, out=np.zeros_like(deg))
    ra = np.divide(1.0, deg, where=deg > 0, out=np.zeros_like(deg))
    return {"common_neighbours": np.ones_like(deg), "adamic_adar": aa, "resource_allocation": ra}


def even_walk_labels(simple: Csr) -> np.ndarray:
    """int64 (N,): nodes ``u``, ``v`` of the undirected ``simple`` graph have equal labels iff
    a walk of even length joins them. Components of the bipartite double cover (node ``v`` as
    ``v0`` and ``v1``, each edge ``u - v`` as ``u0 - v1`` and ``u1 - v0``), labelled at ``v0``.

    A common neighbour is a walk of length 2, so a pair of unequal labels has none by
    construction: the two sides of a bipartite graph (users and the items they rated), or two
    components. In a component with an odd cycle every pair has equal labels."""
    n, indptr, cols = simple.num_nodes, simple.indptr, simple.indices
    # row v0 of the cover lists the neighbours' u1 (u + n), row v1 their u0
    cover = Csr(torch.cat([indptr, indptr[1:] + simple.num_edges]), torch.cat([cols + n, cols]))
    return connected_components(cover)[:n]
