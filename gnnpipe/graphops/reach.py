"""Reach and over-squashing diagnostics: how far labels are, and where the graph is a bottleneck.

* ``hops_to_train``: for every node, the number of message-passing layers after which some train
  node's features can first reach it (multi-source BFS along edge direction).
* ``accuracy_by_distance``: GNN and baseline test accuracy binned by that distance, the GNN's
  fall from the nearest to the farthest bin against the baseline's (the difference with a 95%
  interval), and a one-line warning when the GNN's falls clearly more (the GNN loses the
  graph's benefit far from labels: under-reaching or over-squashing).
* ``edge_curvature``: Balanced Forman curvature (Topping et al. 2022, "Understanding
  over-squashing and bottlenecks on graphs via curvature", Definition 1) on a seeded sample of
  undirected edges; strongly negative edges are the bottlenecks that squash messages.

The curvature sample is of the undirected simple graph of a graph in block files
(gnnpipe/io/csr_blocks.py: the in-edge CSR and its transpose), by block tasks
(``runtime.engine.run_blocks``), with no process holding that simple graph. Row ``r`` of the
simple graph is ``r``'s in- and out-neighbours without ``r``, sorted and deduplicated, so
everything the sample needs comes from row reads:

1. ``simple_degrees``: each row's simple degree, per row block (tasks); the stage sums them into
   the simple graph's offsets, int64 (N + 1,), the one per-node array it holds.
2. ``sample_positions`` draws stored positions of the simple graph without replacement; each
   maps to its row by the offsets and to its column by reading the drawn rows
   (``simple_rows``), and ``sample_pairs`` makes the pairs of them.
3. ``sample_chunks`` cuts the sample by work per edge (the ends' rows and the degrees); per
   chunk a task (``chunk_curvature``) reads the rows of its ends and of their neighbours, the
   only rows ``balanced_forman`` expands, into a CSR over every node whose other rows are
   empty (the same operands in the same order as over the whole simple graph, so the same
   bits: tests/graphops/test_curvature.py keeps that whole-graph oracle).

Memory: the stage holds the offsets (8 B / node) and the rows of the sample's ends; a task one
row block's edges, or one chunk's 2-hop rows (about ``chunk_pairs`` of them) and O(N) offsets.

CSR convention (``gnnpipe.data.graph``): row ``v`` lists the sources of the edges into ``v``,
so an edge ``s -> v`` carries a message from ``s`` to ``v``. Every function is vectorised over
nodes or edges, no Python loop per node or edge.
"""

from __future__ import annotations

from pathlib import Path
from statistics import NormalDist

import numpy as np
import torch

from gnnpipe.config.schema import CurvatureParams, ReachParams
from gnnpipe.data.graph import Csr
from gnnpipe.data.edges import contains, sorted_unique
from gnnpipe.graphops.heuristics import chunk_bounds, rows_of
from gnnpipe.io.csr_blocks import (gather_block_rows, gather_in_rows, read_in_rows, row_ranges,
                                   rows_by_edges)
from gnnpipe.runtime.engine import run_blocks

# Distance of a node that no train node reaches within ``max_hops`` layers.
BEYOND = -1
PULL_EDGES = 1 << 22  # edges per row block of a BFS level's pull (4 MiB of flags)


# ------------------------------------------------------------------------------ hops to train
def hops_to_train(csr: Csr, train_mask: np.ndarray, max_hops: int) -> np.ndarray:
    """Hop distance from the nearest train node to every node: int8 (N,) (int32 past 126
    hops), ``BEYOND`` past ``max_hops``.

    Direction: distance ``d`` means a directed path ``t -> ... -> v`` of ``d`` edges from a train
    node ``t``, i.e. after ``d`` layers of message passing on ``csr`` some train node's input has
    reached ``v``; train nodes are at 0. Level-synchronous pull BFS: each level marks every
    unreached node with a source in the frontier, one O(E) gather per level, by row blocks of
    ``PULL_EDGES`` edges (memory: O(N) flags and one block's).
    """
    if max_hops < 0:
        raise ValueError(f"max_hops={max_hops} must be >= 0")
    train_mask = np.asarray(train_mask, dtype=bool)
    indptr, indices = csr.indptr.numpy(), csr.indices.numpy()
    num_nodes = indptr.size - 1
    if train_mask.shape != (num_nodes,):
        raise ValueError(f"train_mask has shape {train_mask.shape}, the graph {num_nodes} nodes")
    dtype = np.int8 if max_hops < np.iinfo(np.int8).max else np.int32
    distance = np.full(num_nodes, BEYOND, dtype=dtype)
    distance[train_mask] = 0
    frontier = train_mask  # read only: each level makes a new one
    has_rows = indptr[1:] > indptr[:-1]
    blocks = rows_by_edges(indptr, PULL_EDGES)
    for hop in range(1, max_hops + 1):
        if not frontier.any():
            break
        pulled = np.zeros(num_nodes, dtype=bool)
        for r0, r1 in blocks:  # bounded temporaries: an O(E) gather per level, by row blocks
            e0, e1 = int(indptr[r0]), int(indptr[r1])
            in_frontier = np.zeros(e1 - e0 + 1, dtype=bool)  # a False past the block's end
            np.take(frontier, indices[e0:e1], out=in_frontier[:-1])  # each edge's source in it?
            # some source of v is; an empty row reads its successor's first edge, masked
            pulled[r0:r1] = np.logical_or.reduceat(in_frontier, indptr[r0:r1] - e0)
        pulled &= has_rows  # in place: the per-node flags stay a few bytes a node
        pulled &= distance == BEYOND
        frontier = pulled
        distance[frontier] = hop
    return distance


# --------------------------------------------------------------------- accuracy by distance
LEVEL = 0.95  # of the interval of the GNN's fall minus the baseline's
_Z = NormalDist().inv_cdf(0.5 + LEVEL / 2)  # 1.96


def _accuracy(correct: np.ndarray) -> float | None:
    return round(float(correct.mean()), 6) if correct.size else None


def accuracy_by_distance(distance: np.ndarray, correct_gnn: np.ndarray,
                         correct_baseline: np.ndarray, num_layers: int,
                         cfg: ReachParams = ReachParams()) -> dict:
    """GNN and baseline accuracy of test nodes binned by hops to the nearest train node, and
    the GNN's fall with distance against the baseline's.

    ``distance`` int (T,) from ``hops_to_train`` (``BEYOND`` or > ``num_layers``: out of the
    GNN's reach), ``correct_gnn`` / ``correct_baseline`` bool (T,), one entry per test node.
    Returns ``{"bins", "comparison", "finding", "warning", "rule"}``: bins ``0 .. num_layers``
    then ``beyond``, each ``{"bin", "hops" (None for beyond), "count", "gnn_accuracy",
    "baseline_accuracy"}`` (accuracies None for an empty bin); ``comparison`` the nearest and
    farthest bins of at least ``cfg.min_count`` nodes (``compare_bins``; None with fewer than
    two); ``finding`` what was measured in words; ``warning`` the finding when it warns, else
    None.
    """
    distance = np.asarray(distance, dtype=np.int64)
    correct_gnn = np.asarray(correct_gnn, dtype=bool)
    correct_baseline = np.asarray(correct_baseline, dtype=bool)
    if not distance.shape == correct_gnn.shape == correct_baseline.shape:
        raise ValueError(f"distance {distance.shape}, correct_gnn {correct_gnn.shape} and "
                         f"correct_baseline {correct_baseline.shape} must have one entry per test node")
    beyond = (distance == BEYOND) | (distance > num_layers)
    codes = np.where(beyond, num_layers + 1, distance)  # bin index: hops, or num_layers + 1
    bins = []
    for code in range(num_layers + 2):  # a handful of bins, not one per node
        members = codes == code
        bins.append({"bin": str(code) if code <= num_layers else f">{num_layers}",
                     "hops": code if code <= num_layers else None,
                     "count": int(members.sum()),
                     "gnn_accuracy": _accuracy(correct_gnn[members]),
                     "baseline_accuracy": _accuracy(correct_baseline[members])})
    populated = [code for code, b in enumerate(bins) if b["count"] >= max(cfg.min_count, 1)]
    rule = {"min_count": cfg.min_count, "min_excess": cfg.min_excess, "level": LEVEL}
    if len(populated) < 2:
        held = ", ".join(f"{b['bin']}: {b['count']}" for b in bins)
        return {"bins": bins, "comparison": None, "warning": None, "rule": rule,
                "finding": (f"fewer than two distance bins hold {cfg.min_count} test nodes "
                            f"(evaluate.reach.min_count; hops: nodes {held}), so no fall with "
                            "distance was measured")}
    near, far = populated[0], populated[-1]
    comparison = compare_bins(correct_gnn, correct_baseline, codes == near, codes == far)
    comparison = {"near": bins[near]["bin"], "far": bins[far]["bin"], **comparison}
    warns = (comparison["gnn_drop"] > 0 and comparison["excess"] >= cfg.min_excess
             and comparison["interval"][0] > 0)
    finding = _finding(bins[near], bins[far], comparison)
    if warns:
        finding += ": far from labels the graph stops helping (under-reaching or over-squashing)"
    else:
        finding += "; " + _no_warning(comparison, cfg)
    return {"bins": bins, "comparison": comparison, "warning": finding if warns else None,
            "finding": finding, "rule": rule}


def compare_bins(correct_gnn: np.ndarray, correct_baseline: np.ndarray, near: np.ndarray,
                 far: np.ndarray) -> dict:
    """Each model's accuracy fall from the ``near`` to the ``far`` test nodes (bool masks (T,))
    and the GNN's fall minus the baseline's, ``excess``, with its ``LEVEL`` interval.

    ``excess`` = mean(d | near) - mean(d | far) with ``d`` = GNN right - baseline right per node
    (in -1, 0, 1: the pairing of the two models on a node cancels what they share); the
    interval is the normal approximation ``excess ± z sqrt(var_near / n_near + var_far /
    n_far)`` (sample variances of ``d``): deterministic, no draw.
    """
    diff = correct_gnn.astype(np.float64) - correct_baseline.astype(np.float64)
    d_near, d_far = diff[near], diff[far]
    gnn_drop = correct_gnn[near].mean() - correct_gnn[far].mean()
    base_drop = correct_baseline[near].mean() - correct_baseline[far].mean()
    excess = d_near.mean() - d_far.mean()
    spread = np.sqrt(sum(d.var(ddof=1) / d.size if d.size > 1 else 0.0 for d in (d_near, d_far)))
    return {"near_count": int(d_near.size), "far_count": int(d_far.size),
            "gnn_drop": round(float(gnn_drop), 6), "baseline_drop": round(float(base_drop), 6),
            "excess": round(float(excess), 6),
            "interval": [round(float(excess - _Z * spread), 6),
                         round(float(excess + _Z * spread), 6)], "level": LEVEL}


def _hops(b: dict) -> str:
    return f"{b['hops']} hop{'' if b['hops'] == 1 else 's'}"


def _change(drop: float) -> str:
    return (f"falls by {drop:.3f}" if drop > 0 else f"rises by {-drop:.3f}" if drop < 0
            else "stays level")


def _finding(near: dict, far: dict, c: dict) -> str:
    """What was measured, in words: each model's change and the excess with its interval, from
    the GNN's side when it falls more, from the baseline's when it falls less."""
    low, high = c["interval"]
    more = (f"{c['excess']:.3f} more for the GNN (95% interval {low:+.3f} to {high:+.3f})"
            if c["excess"] >= 0 else
            f"{-c['excess']:.3f} less for the GNN (95% interval {-high:+.3f} to {-low:+.3f})")
    where = (f"beyond the GNN's reach of {far['bin'][1:]} hops" if far["hops"] is None
             else f"at {_hops(far)}")
    return (f"from the {near['count']} test nodes {_hops(near)} from the nearest train node "
            f"to the {far['count']} {where}, the GNN's test accuracy {_change(c['gnn_drop'])} "
            f"({near['gnn_accuracy']:.3f} -> {far['gnn_accuracy']:.3f}) and the baseline's "
            f"{_change(c['baseline_drop'])} ({near['baseline_accuracy']:.3f} -> "
            f"{far['baseline_accuracy']:.3f}): {more}")


def _no_warning(c: dict, cfg: ReachParams) -> str:
    """Why ``accuracy_by_distance`` did not warn: the first rule its comparison misses."""
    if c["gnn_drop"] <= 0:
        return "the GNN's accuracy does not fall with distance"
    if c["excess"] < cfg.min_excess:
        return (f"the difference is below evaluate.reach.min_excess={cfg.min_excess}, so the "
                "GNN keeps its lead over the baseline far from labels")
    return "the interval reaches 0: too few test nodes in these bins to tell"


# -------------------------------------------------------------------------- edge curvature
# 2-hop pairs expanded at once by a ``chunk_curvature`` task: bounds its working memory
CHUNK_PAIRS = 1 << 20
BLOCK_ROWS = 1 << 16  # rows per simple-degree task


def sample_positions(stored: int, size: int, rng: np.random.Generator
                     ) -> tuple[np.ndarray, bool]:
    """Positions of a stored simple undirected CSR of ``stored`` entries to map to the sample:
    all of them (``exact`` True) when ``2 * size`` reaches ``stored``, else ``2 * size`` drawn
    without replacement in random order: int64 (P,), exact."""
    exact = 2 * size >= stored
    return (np.arange(stored) if exact else rng.choice(stored, size=2 * size, replace=False)), exact


def sample_pairs(rows: np.ndarray, cols: np.ndarray, num_nodes: int, size: int, exact: bool
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The sample ``(u, v)``, ``u < v``, int64 (S,) each, sorted, of the drawn positions' row and
    column (``sample_positions`` order): each pair owns two positions, so the first ``size``
    distinct pairs are a uniform sample."""
    keys = np.minimum(rows, cols) * num_nodes + np.maximum(rows, cols)
    keys = keys[rows != cols]
    if exact:
        keys = sorted_unique(keys)
    else:
        _, first = np.unique(keys, return_index=True)  # first draw of each pair
        keys = np.sort(keys[np.sort(first)[:size]])
    return keys // num_nodes, keys % num_nodes


def _expand(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Neighbour lists of ``nodes`` (Q,) concatenated: (owner index into nodes, neighbour)."""
    counts, neighbours = rows_of(indptr, indices, nodes)
    return np.repeat(np.arange(nodes.size), counts), neighbours


def _four_cycles(indptr, indices, a, b, edge, k, key_a, key_b, near_b):
    """For edges ``a[e] ~ b[e]`` (S,): ``|#sq^a|`` (neighbours ``k`` of ``a``, ``k`` not in
    ``B1(b)``, with some ``w`` in ``S1(k) & S1(b)`` outside ``B1(a)``: a 4-cycle ``a-k-w-b``
    without diagonal) and the largest such ``w`` count of one ``k`` (its part of
    ``gamma_max``), both int64 (S,).

    ``edge``, ``k`` (P,): every pair (e, k in S1(a[e])); ``key_a`` / ``key_b``: sorted
    ``e * N + neighbour`` of ``a`` / ``b``, for membership tests; ``near_b`` bool (N,): in some
    ``S1(b[e])``, a cheap filter before them.
    """
    num_nodes = indptr.size - 1
    cand = (k != b[edge]) & ~contains(key_b, key_a)  # k outside B1(b)
    edge, k = edge[cand], k[cand]
    owner, w = _expand(indptr, indices, k)  # (pairs,): w in S1(k), owner indexes the candidates
    maybe = np.flatnonzero(near_b[w])  # most w of a sparse graph touch no b: skip the searches
    owner, w = owner[maybe], w[maybe]
    e_w = edge[owner]
    key_w = e_w * num_nodes + w
    closes = (w != a[e_w]) & contains(key_b, key_w) & ~contains(key_a, key_w)
    per_k = np.bincount(owner[closes], minlength=k.size)  # 4-cycles a-k-w-b through each k
    sharp = np.bincount(edge, weights=per_k > 0, minlength=a.size).astype(np.int64)
    gamma = np.zeros(a.size, dtype=np.int64)
    np.maximum.at(gamma, edge, per_k)
    return sharp, gamma


def balanced_forman(csr: Csr, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Balanced Forman curvature of the edges ``u[e] ~ v[e]``: float64 (S,).

    ``csr`` must be simple and undirected (both directions stored, no self-loops or repeats;
    ``gnnpipe.graphops.partition.symmetric_simple`` makes one of any CSR). With ``d`` the degrees,
    ``t`` the triangles on the edge, ``s_u`` / ``s_v`` the 4-cycle counts and ``gamma`` the
    largest number of 4-cycles through one node (``_four_cycles``), Definition 1 of Topping et
    al. (2022) reads ``0`` if ``min(d_u, d_v) == 1`` and otherwise
    ``2/d_u + 2/d_v - 2 + 2t/max(d) + t/min(d) + (s_u + s_v) / (gamma * max(d))``,
    the last term 0 without 4-cycles. Work per edge: the degrees of its ends' neighbours.
    """
    indptr, indices = csr.indptr.numpy(), csr.indices.numpy()
    n = indptr.size - 1
    e_u, nbr_u = _expand(indptr, indices, u)
    e_v, nbr_v = _expand(indptr, indices, v)
    key_u, key_v = e_u * n + nbr_u, e_v * n + nbr_v  # sorted: e ascending, rows sorted
    triangles = np.bincount(e_u, weights=contains(key_v, key_u), minlength=u.size)
    near_u, near_v = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    near_u[nbr_u] = True
    near_v[nbr_v] = True
    sharp_u, gamma_u = _four_cycles(indptr, indices, u, v, e_u, nbr_u, key_u, key_v, near_v)
    sharp_v, gamma_v = _four_cycles(indptr, indices, v, u, e_v, nbr_v, key_v, key_u, near_u)
    d_u = (indptr[u + 1] - indptr[u]).astype(np.float64)
    d_v = (indptr[v + 1] - indptr[v]).astype(np.float64)
    d_max, d_min = np.maximum(d_u, d_v), np.minimum(d_u, d_v)
    gamma = np.maximum(gamma_u, gamma_v)
    squares = np.divide(sharp_u + sharp_v, gamma * d_max, out=np.zeros(u.size), where=gamma > 0)
    ric = 2 / d_u + 2 / d_v - 2 + 2 * triangles / d_max + triangles / d_min + squares
    return np.where(d_min > 1, ric, 0.0)


def sample_chunks(csr: Csr, degree: np.ndarray, u: np.ndarray, v: np.ndarray, budget: int
                  ) -> list[slice]:
    """Consecutive slices of the sample whose 2-hop expansion stays within ``budget`` pairs
    (an edge above it alone): ``csr`` holds at least the rows of the ends ``u``, ``v``,
    ``degree`` int64 (N,) every node's degree in the simple graph."""
    indptr, indices = csr.indptr.numpy(), csr.indices.numpy()
    work = np.zeros(u.size, dtype=np.int64)
    for ends in (u, v):  # sum of neighbour degrees per edge end, one batch each
        owner, nbr = _expand(indptr, indices, ends)
        work += np.bincount(owner, weights=degree[nbr], minlength=u.size).astype(np.int64)
    return [slice(lo, hi) for lo, hi in chunk_bounds(work, budget)]


def simple_degrees(start: int, stop: int, folder: str, num_nodes: int
                   ) -> tuple[np.ndarray, bool]:
    """Simple-graph degree of rows ``start..stop`` of the graph in ``folder``, int64
    (stop - start,), and whether those rows' stored in-edges already are their simple rows
    (sorted, distinct, no self-loop, the out-edges the same: an undirected simple graph)."""
    row, neighbour = gather_block_rows(Path(folder), slice(start, stop))
    keep = neighbour != row + start
    keys = sorted_unique(row[keep] * num_nodes + neighbour[keep])
    indptr, sources = read_in_rows(Path(folder), start, stop)
    stored = np.repeat(np.arange(stop - start, dtype=np.int64), np.diff(indptr)) * num_nodes
    return (np.bincount(keys // num_nodes, minlength=stop - start).astype(np.int64),
            bool(np.array_equal(keys, stored + sources)))


def simple_rows(folder: Path, ids: np.ndarray, num_nodes: int, stored: bool = False) -> Csr:
    """The simple graph's rows ``ids`` (int64, sorted, distinct) as a CSR over every node:
    those rows exact (columns sorted), every other row empty. ``stored``: the stored in-edges
    are the simple rows (``simple_degrees``), read as they are."""
    if stored:  # an undirected simple graph: half the reads, no sort
        count, columns = gather_in_rows(Path(folder), ids)
    else:
        owner, neighbour = gather_block_rows(Path(folder), ids)
        keep = neighbour != ids[owner]
        owner, columns = np.divmod(sorted_unique(owner[keep] * num_nodes + neighbour[keep]),
                                   num_nodes)
        count = np.bincount(owner, minlength=ids.size)
    degree = np.zeros(num_nodes, dtype=np.int64)
    degree[ids] = count
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    return Csr(torch.from_numpy(indptr), torch.from_numpy(columns))


def chunk_curvature(edges: np.ndarray, folder: str, num_nodes: int, stored: bool = False
                    ) -> np.ndarray:
    """``balanced_forman`` of the chunk ``edges`` int64 (2, S) (rows u, v) over the simple
    graph, from the rows of its ends and their neighbours (``stored``: ``simple_rows``'s):
    float64 (S,)."""
    u, v = edges
    ends = sorted_unique(np.concatenate([u, v]))  # np.union1d's hash path is far slower
    near = sorted_unique(np.concatenate([ends, simple_rows(Path(folder), ends, num_nodes,
                                                           stored).indices.numpy()]))
    return balanced_forman(simple_rows(Path(folder), near, num_nodes, stored), u, v)


def edge_curvature(client, folder: Path, num_nodes: int, cfg: CurvatureParams,
                   rng: np.random.Generator, block_rows: int = BLOCK_ROWS,
                   chunk_pairs: int = CHUNK_PAIRS) -> dict:
    """Balanced Forman curvature on a seeded sample of ``cfg.sample_edges`` undirected edges of
    the simple graph of the graph in the block files of ``folder`` (``num_nodes`` nodes; module
    doc); ``curvature_report``'s figures. Tasks on ``client`` (None: in this process)."""
    if cfg.sample_edges < 1:
        raise ValueError(f"sample_edges={cfg.sample_edges} must be >= 1")
    found = run_blocks(client, simple_degrees, row_ranges(num_nodes, block_rows),
                       folder=str(folder), num_nodes=num_nodes)
    degree = np.concatenate([np.zeros(0, dtype=np.int64), *(d for d, _ in found)])
    stored = all(same for _, same in found)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    pos, exact = sample_positions(int(indptr[-1]), cfg.sample_edges, rng)
    rows = np.searchsorted(indptr, pos, side="right") - 1  # target of each drawn position
    drawn = simple_rows(folder, sorted_unique(rows), num_nodes, stored)
    cols = drawn.indices.numpy()[drawn.indptr.numpy()[rows] + pos - indptr[rows]]
    del drawn
    u, v = sample_pairs(rows, cols, num_nodes, cfg.sample_edges, exact)
    ends = simple_rows(folder, sorted_unique(np.concatenate([u, v])), num_nodes, stored)
    chunks = sample_chunks(ends, degree, u, v, chunk_pairs)
    del ends
    ric = run_blocks(client, chunk_curvature, [(np.stack([u[c], v[c]]),) for c in chunks],
                     folder=str(folder), num_nodes=num_nodes, stored=stored)
    ric = np.concatenate([np.zeros(0), *ric])
    return curvature_report(u, v, ric, exact, int(indptr[-1]) // 2, cfg)


def curvature_report(u: np.ndarray, v: np.ndarray, ric: np.ndarray, exact: bool,
                     undirected_edges: int, cfg: CurvatureParams) -> dict:
    """The sample's ``{"measure", "sample": {"edges", "undirected_edges", "exact"}, "mean",
    "fraction_negative", "quantiles": {q: value}, "most_negative": [{"u", "v", "curvature"}]}``
    (``u``, ``v``, ``ric`` (S,); most negative first, ties by ``(u, v)``)."""
    order = np.lexsort((v, u, ric))[:cfg.most_negative]
    probs = (0.0, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 1.0)
    values = np.quantile(ric, probs) if ric.size else [None] * len(probs)
    return {
        "measure": "balanced_forman",
        "sample": {"edges": int(u.size), "undirected_edges": int(undirected_edges),
                   "exact": bool(exact)},
        "mean": round(float(ric.mean()), 6) if ric.size else None,
        "fraction_negative": round(float((ric < 0).mean()), 6) if ric.size else None,
        "quantiles": {f"q{round(p * 100):02d}": None if q is None else round(float(q), 6)
                      for p, q in zip(probs, values)},
        "most_negative": [{"u": int(u[i]), "v": int(v[i]), "curvature": round(float(ric[i]), 6)}
                          for i in order],
    }
