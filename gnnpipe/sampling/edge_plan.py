"""What the neighbor sampler's hops read, fixed when the sampler is built: one ``EdgePlan`` per
edge type (its CSR arrays in the direction it is sampled, weights, time index, and the map back
to the caller's edge ids), and the checks that build the plans from the sampler's arguments.

Node types are positions here (into ``num_nodes``), so ``gnnpipe.sampling.hops`` indexes lists
per call instead of dicts keyed by type names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np
from torch import Tensor
from torch_geometric.sampler.base import NumNeighbors

from gnnpipe.sampling.temporal import TemporalIndex
from gnnpipe.sampling.typed_csr import TypedCsr

EdgeType = tuple[str, str, str]
SAMPLE_DIRECTIONS = ("forward", "backward")


@dataclass(frozen=True)
class EdgePlan:
    """One edge type as the hops sample it: a frontier node ``v`` of node type ``dst`` draws
    among ``indices[indptr[v]:indptr[v + 1]]`` (nodes of type ``src``); positions in these
    arrays are the edge ids the hops report.

    edge_type: the caller's ``(s, r, d)``; sampled as ``(d, r, s)`` when backward (``src`` is
        then ``d``'s position).
    src, dst: node type positions of the drawn nodes and of the frontier.
    indptr (N_dst + 1,), indices (E,): int64.
    weight: (E,) float64 in this order, or None (uniform).
    temporal: the ``TemporalIndex`` of a time-bounded edge type, or None; time: its (E,) times
        in this order (induced edges are bounded by them too).
    edge_map: (E,) the caller's CSR position of each position here (backward over a
        transposed copy), or None when they are the same.
    """

    edge_type: EdgeType
    src: int
    dst: int
    indptr: np.ndarray
    indices: np.ndarray
    weight: Optional[np.ndarray] = None
    temporal: Optional[TemporalIndex] = None
    time: Optional[np.ndarray] = None
    edge_map: Optional[np.ndarray] = None


def edge_plans(typed: TypedCsr, *, backward: bool = False, transposed: bool = False,
               edge_weight: Optional[Mapping[EdgeType, object]] = None,
               node_time: Optional[dict[str, np.ndarray]] = None,
               edge_time: Optional[Mapping[EdgeType, object]] = None) -> list[EdgePlan]:
    """One plan per edge type of ``typed`` (the caller's types and CSR arrays), in order.

    ``backward``: every edge type is sampled over its out-edges (transposed here, unless
    ``transposed`` says ``typed`` already holds them). ``edge_weight`` / ``edge_time``: edge
    type -> (E,) in CSR order; ``node_time``: checked node times (``node_times``), each edge's
    time being its source's. At most one of the two times, and neither when backward.
    """
    weights = {}
    for e, value in (edge_weight or {}).items():
        e = tuple(e)
        if e not in typed.indptr:
            raise ValueError(f"edge_weight names edge type {e!r}, which is not in csr")
        weights[e] = check_weights(value, typed.indices[e].size, f"edge_weight[{e!r}]")
    times = {}
    for e, value in (edge_time or {}).items():
        e = tuple(e)
        if e not in typed.indptr:
            raise ValueError(f"edge_time names edge type {e!r}, which is not in csr")
        times[e] = np.asarray(value.numpy() if isinstance(value, Tensor) else value)
    position = {t: i for i, t in enumerate(typed.num_nodes)}
    plans = []
    for e in typed.edge_types:
        indptr, indices, weight, edge_map = typed.indptr[e], typed.indices[e], weights.get(e), None
        src, dst = position[e[0]], position[e[2]]
        if backward:  # an ``s`` frontier draws ``d`` targets: (d, r, s) over the out-edges
            src, dst = dst, src
            if not transposed:
                indptr, indices, edge_map = transpose_csr(indptr, indices,
                                                          typed.num_nodes[e[0]])
                if weight is not None:
                    weight = weight[edge_map]
        time = times.get(e)
        if node_time is not None and e[0] in node_time:  # a neighbour's time is its edge's time
            time = node_time[e[0]][indices]
        temporal = None if time is None else TemporalIndex(indptr, indices, time)
        plans.append(EdgePlan(e, src, dst, indptr, indices, weight, temporal, time, edge_map))
    return plans


def node_times(node_time: Mapping[str, object], num_nodes: dict[str, int]) -> dict[str, np.ndarray]:
    """``node_time`` (node type -> (N_t,) times; types may be left out) checked against
    ``num_nodes``, as NumPy arrays."""
    times = {}
    for t, value in node_time.items():
        if t not in num_nodes:
            raise ValueError(f"node_time names node type {t!r}, which is not one of: "
                             f"{', '.join(num_nodes)}")
        value = np.asarray(value.numpy() if isinstance(value, Tensor) else value)
        if value.shape != (num_nodes[t],):
            raise ValueError(f"node_time[{t!r}] has shape {value.shape}; expected "
                             f"({num_nodes[t]},), one time per node")
        times[t] = value
    return times


def read_fanouts(num_neighbors, edge_types: list[EdgeType]) -> dict[EdgeType, list[int]]:
    """``num_neighbors`` (a list, a dict edge type -> list, or a PyG ``NumNeighbors``) as edge
    type -> one fan-out per hop, every edge type present, all with the same number of hops."""
    given = num_neighbors.values if isinstance(num_neighbors, NumNeighbors) else num_neighbors
    if not isinstance(num_neighbors, NumNeighbors):
        if isinstance(num_neighbors, Mapping):
            num_neighbors = {tuple(k): list(v) for k, v in num_neighbors.items()}
        elif isinstance(num_neighbors, (list, tuple)):
            num_neighbors = list(num_neighbors)
        else:
            raise ValueError(f"num_neighbors={num_neighbors!r} must be a list, a dict edge type "
                             "-> list, or a NumNeighbors")
        num_neighbors = NumNeighbors(num_neighbors)
    try:  # PyG's own reading: unknown types and missing ones without a default are errors
        values = num_neighbors.get_values(edge_types)
    except ValueError as err:
        raise ValueError(f"num_neighbors: {err}") from None
    out = {e: [int(k) for k in values[e]] for e in edge_types}
    hops = {len(v) for v in out.values()}
    if len(hops) > 1:
        raise ValueError(f"num_neighbors must give every edge type the same number of hops, "
                         f"got {sorted(hops)}")
    if any(k < -1 for v in out.values() for k in v):
        raise ValueError(f"num_neighbors={given} must list one fan-out >= -1 per hop "
                         "(-1 = all neighbours; [] = the seeds alone)")
    return out


def check_modes(sample_direction: str, timed: bool, weighted: bool) -> None:
    """Refuse what PyG refuses: an unknown direction, backward or weighted temporal sampling."""
    if sample_direction not in SAMPLE_DIRECTIONS:
        raise ValueError(f"sample_direction={sample_direction!r} is not valid; expected one "
                         f"of: {', '.join(SAMPLE_DIRECTIONS)}")
    if sample_direction == "backward" and timed:  # PyG's own refusal, same exception
        raise NotImplementedError("Temporal sampling not yet supported for backward sampling")
    if weighted and timed:
        raise ValueError("weighted sampling with edge_time / node_time is not supported "
                         "(pyg-lib refuses biased temporal sampling too)")


def check_weights(edge_weight, num_edges: int, what: str = "edge weights") -> np.ndarray:
    """``edge_weight`` as float64 (E,), or a ValueError: wrong length, NaN/inf or negative."""
    w = np.asarray(edge_weight.numpy() if isinstance(edge_weight, Tensor) else edge_weight,
                   dtype=np.float64)
    if w.shape != (num_edges,):
        raise ValueError(f"{what} have shape {w.shape}; expected one per edge, ({num_edges},)")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"{what} must be finite and >= 0")
    return w


def transpose_csr(indptr: np.ndarray, indices: np.ndarray, num_src: int | None = None):
    """The CSR of the reversed edges: ``indptr`` (num_src + 1,) over sources, ``indices`` (E,)
    their targets, and ``perm`` (E,) the original position of each; rows keep the original
    order (stable), as PyG's ``to_csc(..., to_transpose=True)`` on ``Csr.edge_index()``.
    ``num_src`` defaults to the number of rows (a homogeneous graph)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    n = indptr.size - 1
    num_src = n if num_src is None else int(num_src)
    perm = np.argsort(indices, kind="stable")
    targets = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    out_ptr = np.zeros(num_src + 1, dtype=np.int64)
    np.cumsum(np.bincount(indices, minlength=num_src), out=out_ptr[1:])
    return out_ptr, targets[perm], perm
