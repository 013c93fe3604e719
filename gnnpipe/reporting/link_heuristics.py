"""Structure-only link scores: common neighbours, Adamic-Adar, resource allocation and
preferential attachment.

The classic heuristic baselines of link prediction (Liben-Nowell & Kleinberg 2007; Zhou et al.
2009; Barabasi & Albert 1999), reported beside the GNN so a link verdict can say whether message
passing beats counting shared neighbours or endpoint popularity. For a pair ``(u, v)`` with
common neighbours ``W = N(u) & N(v)``:

  common_neighbours        |W|
  adamic_adar              sum over w in W of 1 / log(deg w)
  resource_allocation      sum over w in W of 1 / deg w
  preferential_attachment  deg u * deg v (with the source fixed per row of negatives, it ranks
                           each candidate by its popularity, deg v)

The first three (``SHARED_NEIGHBOUR``) are zero by construction where no walk of even length
joins the pair: across a bipartite relation (a user and an item have no common neighbour) they
rank nothing, and ``not_applicable`` says so from the train graph, so they are neither scored
nor compared with. Preferential attachment is defined for every relation.

Neighbourhoods are those of the undirected simple graph behind the given CSR (both directions,
no self-loops, no repeated edges: ``gnnpipe.graphops.partition.symmetric_simple``), so a directed
message graph counts a neighbour whichever way its edge points. The caller passes the
**train-phase message graph** only: scores on a graph holding val/test edges would leak them.

Pairs are scored without a per-pair Python loop: each pair enumerates the neighbours of its
lower-degree endpoint and tests them against the other endpoint's by binary search in the sorted
``row * N + column`` keys of the simple graph, in chunks of at most ``budget`` candidate
neighbours (one pair larger than that is a chunk of its own). Time O(sum_pairs min(deg u, deg v)
* log E), memory O(E + budget).
"""

from __future__ import annotations

import numpy as np

from gnnpipe.data.graph import Csr
from gnnpipe.data.edges import contains, row_positions
from gnnpipe.graphops.heuristics import (BUDGET, chunk_bounds, even_walk_labels,
                                         neighbour_weights, simple_keys)
from gnnpipe.graphops.partition import symmetric_simple

SHARED_NEIGHBOUR = ("common_neighbours", "adamic_adar", "resource_allocation")
HEURISTICS = (*SHARED_NEIGHBOUR, "preferential_attachment")
NO_EVEN_WALK = ("no scored pair is joined by a walk of even length in the train graph (a "
                "bipartite relation: its endpoints lie on opposite sides), so no pair has a "
                "common neighbour and these heuristics are 0 for every pair")


def not_applicable(csr: Csr, src: np.ndarray, dst: np.ndarray) -> dict[str, str]:
    """The heuristics that are zero by construction on every pair ``(src[i], dst[i])`` (int64
    (P,) node ids of ``csr``, the train-phase message graph; every positive and negative the
    evaluation scores): name -> why, or {} when each is defined for the relation."""
    labels = even_walk_labels(symmetric_simple(csr))
    if bool((labels[np.asarray(src)] != labels[np.asarray(dst)]).all()):
        return {name: NO_EVEN_WALK for name in SHARED_NEIGHBOUR}
    return {}


def pair_scores(csr: Csr, src: np.ndarray, dst: np.ndarray, budget: int = BUDGET,
                names: tuple[str, ...] = HEURISTICS) -> dict[str, np.ndarray]:
    """Each heuristic of ``names`` (of ``HEURISTICS``) for the pairs ``(src[i], dst[i])``: name
    -> float64 (P,).

    ``src``, ``dst`` int64 (P,) node ids of ``csr`` (the train-phase message graph).
    """
    unknown = [name for name in names if name not in HEURISTICS]
    if unknown:
        raise ValueError(f"pair_scores: unknown heuristic {unknown[0]!r} (known: "
                         f"{', '.join(HEURISTICS)})")
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if src.shape != dst.shape or src.ndim != 1:
        raise ValueError(f"pair_scores: src and dst must be 1-D of one length, got shapes "
                         f"{src.shape} and {dst.shape}")
    simple = symmetric_simple(csr)
    n = simple.num_nodes
    indptr, cols = simple.indptr.numpy(), simple.indices.numpy()
    deg = np.diff(indptr)
    scores = {}
    if "preferential_attachment" in names:  # float64: a product of two 10^5 degrees is exact
        scores["preferential_attachment"] = deg[src].astype(np.float64) * deg[dst]
    shared = [name for name in names if name in SHARED_NEIGHBOUR]
    if not shared:
        return scores
    keys = simple_keys(simple)
    weights = neighbour_weights(deg)
    scores.update({name: np.zeros(src.size) for name in shared})
    # walk the shorter neighbour list, look each neighbour up in the longer one
    walk = np.where(deg[src] <= deg[dst], src, dst)
    other = np.where(deg[src] <= deg[dst], dst, src)
    work = deg[walk]
    for start, stop in chunk_bounds(work, budget):
        counts = work[start:stop]
        pair = np.repeat(np.arange(stop - start), counts)  # chunk-local pair of each candidate
        w = cols[row_positions(indptr, walk[start:stop])]
        hit = contains(keys, other[start:stop][pair] * n + w)  # w is also a neighbour of other
        pair, w = pair[hit], w[hit]
        for name in shared:
            scores[name][start:stop] = np.bincount(pair, weights=weights[name][w],
                                                   minlength=stop - start)
    return {name: scores[name] for name in names}


def heuristic_link_scores(csr: Csr, src: np.ndarray, dst: np.ndarray, neg_dst: np.ndarray,
                          budget: int = BUDGET, names: tuple[str, ...] = HEURISTICS
                          ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The scores by each heuristic of ``names`` of the positives ``(src, dst)`` (P,) and of
    their fixed negatives ``(src[i], neg_dst[i, j])`` (``neg_dst`` int64 (P, K), the split's
    negatives): name -> (pos float64 (P,), neg float64 (P, K)), the inputs of
    ``metrics.link_metrics``."""
    src = np.asarray(src, dtype=np.int64)
    neg_dst = np.asarray(neg_dst, dtype=np.int64)
    if neg_dst.ndim != 2 or neg_dst.shape[0] != src.size:
        raise ValueError(f"heuristic_link_scores: negatives must be (P, K) with P={src.size}, "
                         f"got shape {neg_dst.shape}")
    p, k = neg_dst.shape
    both = pair_scores(csr, np.concatenate([src, np.repeat(src, k)]),
                       np.concatenate([np.asarray(dst, dtype=np.int64), neg_dst.reshape(-1)]),
                       budget, names)
    return {name: (values[:p], values[p:].reshape(p, k)) for name, values in both.items()}
