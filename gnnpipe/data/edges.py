"""Edge arrays to CSR and back: the edge policies (``normalize_edges``), CSR construction,
membership and row-position lookups, and the per-edge-type conversions of a ``Graph``'s CSRs.

Convention (``gnnpipe.data.graph.Csr``): row ``v`` lists the sources of the edges into ``v``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gnnpipe.data.graph import Csr, EdgeType


@dataclass(frozen=True)
class EdgeReport:
    """What the edge policies did. Counts are input rows, except ``output_edges`` (stored, directed).

    ``rows`` (``normalize_edges(..., with_rows=True)``): int64 (output_edges,), the input row
    behind each stored edge in CSR order (``csr.edge_index()``), for edge weights and times.
    """

    input_edges: int
    self_loops_removed: int
    duplicates_removed: int  # for undirected graphs (u, v) and (v, u) count as the same edge
    output_edges: int
    rows: np.ndarray | None = None


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` for 1-D ints via sort + neighbour mask (numpy 2.x's hash path is ~20x slower)."""
    ordered = np.sort(values)
    if ordered.size == 0:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def _csr_order(src: np.ndarray, dst: np.ndarray, num_dst: int, num_src: int
               ) -> tuple[Csr, np.ndarray]:
    """CSR (rows = ``dst``) of every edge and the stable order int64 (E,) that sorts the
    input edges into it (by dst, then src; copies of one edge keep their input order)."""
    order = np.argsort(dst * max(num_src, 1) + src, kind="stable")  # 3x faster than lexsort
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=num_dst), out=indptr[1:])
    return Csr(torch.from_numpy(indptr), torch.from_numpy(src[order])), order


def contains(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """bool (len(keys),): which ``keys`` occur in ``sorted_keys`` (ascending int64)."""
    if sorted_keys.size == 0:
        return np.zeros(keys.shape, dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.size - 1)
    return sorted_keys[pos] == keys


def row_positions(indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions in a CSR's ``indices`` of every edge of ``rows``, row after row: int64 (sum of
    their degrees,)."""
    starts = indptr[rows]
    counts = indptr[rows + 1] - starts
    first = np.cumsum(counts) - counts  # where each row's run begins in the output
    return np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(starts - first, counts)


def csr_from_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int,
                   num_src: int | None = None) -> Csr:
    """CSR (rows = ``dst``, (num_nodes + 1,) indptr) from edge arrays (E,), keeping every edge;
    columns sorted per row. ``dst`` in ``[0, num_nodes)``, ``src`` in ``[0, num_src)`` (default
    ``num_nodes``; another count for an edge type between two node types)."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    return _csr_order(src, dst, num_nodes, num_nodes if num_src is None else num_src)[0]


def normalize_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, *, undirected: bool,
                    dedup: bool, remove_self_loops: bool, num_src: int | None = None,
                    order: np.ndarray | None = None, with_rows: bool = False
                    ) -> tuple[Csr, EdgeReport]:
    """Apply a graph's edge policies to its input rows and build the CSR: the one place both
    graph kinds (a homogeneous graph, each relation of a typed one) do it.

    ``src`` int (E,) in ``[0, num_src)`` (default ``num_nodes``), ``dst`` int (E,) in
    ``[0, num_nodes)``, already checked. ``remove_self_loops`` drops rows with ``src == dst``;
    ``dedup`` keeps one row per pair (unordered when ``undirected``): the one with the
    smallest ``order`` (E,) (e.g. a timestamp), then the first; ``undirected`` stores both
    directions of every kept row (a self-loop once; needs ``num_src == num_nodes``).

    ``with_rows``: ``report.rows`` is the input row behind each stored edge. Copies of one
    stored edge (no dedup) take their rows by (``order``, row), both directions of an
    undirected row alike.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    num_src = num_nodes if num_src is None else num_src
    assert not undirected or num_src == num_nodes, "undirected pairs need one node set"
    input_edges = int(src.size)
    rows = np.arange(input_edges, dtype=np.int64) if with_rows else None
    loops_removed = 0
    if remove_self_loops:
        keep = src != dst
        loops_removed = input_edges - int(np.count_nonzero(keep))
        if loops_removed:
            src, dst = src[keep], dst[keep]
            rows = None if rows is None else rows[keep]
    if undirected:  # key of the unordered pair
        keys = np.minimum(src, dst) * num_nodes + np.maximum(src, dst)
    else:
        keys = src * num_nodes + dst
    if rows is None:  # the stored edges alone: sorted pair keys are enough
        unique_keys = sorted_unique(keys) if dedup else keys
        dups_removed = int(keys.size - unique_keys.size)
        src, dst = unique_keys // num_nodes, unique_keys % num_nodes
    else:
        if dedup and keys.size:  # the earliest row of each pair (lexsort is stable: then first)
            by_key = (np.argsort(keys, kind="stable") if order is None
                      else np.lexsort((order[rows], keys)))
            first = np.ones(by_key.size, dtype=bool)
            np.not_equal(keys[by_key[1:]], keys[by_key[:-1]], out=first[1:])
            kept = np.sort(by_key[first])
            dups_removed = int(keys.size - kept.size)
        else:
            kept = np.arange(keys.size)
            dups_removed = 0
            if order is not None:
                kept = kept[np.argsort(order[rows], kind="stable")]
        src, dst, rows = src[kept], dst[kept], rows[kept]
    if undirected:
        proper = src != dst
        if rows is not None:  # both directions of a row side by side
            both = np.stack([np.ones_like(proper), proper], axis=1).ravel()
            src, dst = (np.stack([src, dst], axis=1).ravel()[both],
                        np.stack([dst, src], axis=1).ravel()[both])
            rows = np.repeat(rows, 2)[both]
        else:
            src, dst = np.concatenate([src, dst[proper]]), np.concatenate([dst, src[proper]])
    csr, stored = _csr_order(src, dst, num_nodes, num_src)
    report = EdgeReport(input_edges=input_edges, self_loops_removed=loops_removed,
                        duplicates_removed=dups_removed, output_edges=csr.num_edges,
                        rows=None if rows is None else rows[stored])
    return csr, report



def edge_pairs(csr: Csr) -> tuple[np.ndarray, np.ndarray]:
    """``src``, ``dst`` int64 (E,) of every stored edge of one edge type."""
    return csr.indices.numpy(), csr.targets().numpy()



def homogeneous_csr(sizes: list[tuple[str, int]], csrs: dict[EdgeType, Csr]) -> Csr:
    """Every edge of ``csrs`` in one CSR over all nodes: node ``v`` of the i-th type of
    ``sizes`` (``(type, num_nodes)`` in order) at id ``sum(sizes[:i]) + v``, PyG's
    ``to_homogeneous`` order. (total + 1,) indptr."""
    starts = np.cumsum([0] + [n for _, n in sizes])
    offsets = {t: int(starts[i]) for i, (t, _) in enumerate(sizes)}
    src, dst = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    for (s, _, d), csr in csrs.items():
        a, b = edge_pairs(csr)
        src.append(a + offsets[s])
        dst.append(b + offsets[d])
    total = int(starts[-1])
    return csr_from_edges(np.concatenate(src), np.concatenate(dst), total)



def edge_index_dict(csrs: dict[EdgeType, Csr]) -> dict[EdgeType, torch.Tensor]:
    """PyG ``edge_index_dict``: edge type -> int64 (2, E) (row 0 sources, row 1 targets)."""
    return {edge_type: csr.edge_index() for edge_type, csr in csrs.items()}



def sub_edge_time(full: Csr, time: torch.Tensor, sub: Csr, num_src: int) -> torch.Tensor:
    """Times int64 (E_sub,) of ``sub``'s edges in its CSR order, for ``sub`` a subset of the
    edges of ``full`` (a phase's message graph of one edge type) and ``time`` int64 (E_full,)
    ``full``'s edge times (``Graph.edge_time``). The k-th copy of a repeated pair takes
    the k-th copy's time (phases keep all copies of a pair or none)."""
    n = max(num_src, 1)
    full_src, full_dst = edge_pairs(full)
    sub_src, sub_dst = edge_pairs(sub)
    full_keys, sub_keys = full_dst * n + full_src, sub_dst * n + sub_src  # both ascending
    rank = np.arange(sub_keys.size) - np.searchsorted(sub_keys, sub_keys, side="left")
    pos = np.searchsorted(full_keys, sub_keys, side="left") + rank
    if pos.size and (pos.max() >= full_keys.size or not (full_keys[pos] == sub_keys).all()):
        raise ValueError("sub_edge_time: the message graph has edges that the full graph "
                         "does not; re-run the split stage")
    return time[torch.from_numpy(pos)]
