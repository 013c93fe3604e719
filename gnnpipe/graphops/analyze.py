"""Graph diagnostics: how much the structure can help before any model is trained.

Homophily measures (``y`` the labels, an edge ``j -> i`` is row ``i`` of the CSR listing ``j``;
undirected graphs store both directions, so every sum below runs over ordered pairs):

* **edge homophily** (Zhu et al. 2020): ``h_edge = |{j -> i : y_i = y_j}| / |E|``.
* **node homophily** (Pei et al. 2020): mean over nodes with at least one neighbour of the
  fraction of neighbours sharing the node's label.
* **class-insensitive edge homophily** (Lim et al. 2021):
  ``h_ci = 1 / (C - 1) * sum_k max(0, h_k - n_k / N)``, ``h_k`` the fraction of same-class
  neighbours over all edges into class-``k`` nodes and ``n_k / N`` the class's share of nodes.
  It is 0 when each class links to the others at chance rate, whatever the class sizes.
* **adjusted homophily** (Platonov et al. 2023):
  ``h_adj = (h_edge - sum_k p_k q_k) / (1 - sum_k p_k q_k)``, ``p_k`` (``q_k``) the fraction of
  edges whose source (target) is in class ``k``; for an undirected graph ``p_k = q_k`` is the
  class's share of the degree sum, as in the paper. 0 = labels of linked nodes as independent
  as the degrees allow, 1 = perfectly homophilous, negative = heterophilous. This is the one the
  low-homophily warning looks at, since unlike ``h_edge`` it does not depend on the number or
  balance of classes.

Unlabelled nodes (``y == UNLABELLED``) have no class: every measure above runs over the edges
whose two endpoints are labelled, ``N`` and the class counts are of the labelled nodes, and node
homophily averages over labelled nodes with at least one labelled neighbour.

The report comes from block tasks (``analyze_blocks``) over the graph in block files
(gnnpipe/io/csr_blocks.py), on either engine (``runtime.engine.run_blocks``: in the stage
process or on Dask workers): each task returns its rows' integer ``RowCounts``, which add up to
the same figures for any block size or worker count; components by min-label sweeps.

Over-smoothing measures of embeddings are in ``gnnpipe.graphops.smoothing``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from gnnpipe.config import AnalyzeParams
from gnnpipe.data.graph import ROLE_CODES, UNLABELLED, Csr
from gnnpipe.io.common import PHASES
from gnnpipe.io.csr_blocks import (StoredGraph, gather_block_rows, gather_labels,
                                   num_block_nodes, read_in_rows, remove_labels, row_ranges,
                                   save_node_array, stored_rows)
from gnnpipe.io.mapped_rows import gather_npy
from gnnpipe.runtime.engine import run_blocks

BLOCK_ROWS = 1 << 16  # rows per block task
INT32_NODES = 2**31 - 1  # component labels are int32 up to here


def _ratio(num: float, den: float) -> float | None:
    return None if den == 0 else float(num / den)


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


# -------------------------------------------------------------------------------- homophily
@dataclass(frozen=True)
class RowCounts:
    """Integer sums over some rows (target nodes) of a CSR and their in-edges, additive over
    disjoint row sets (``add_counts``), from which every homophily and degree figure follows
    exactly: a block task counts one block of rows.

    Over the edges between two labelled nodes, per class k, int64 (C,): ``class_deg`` /
    ``class_same`` the edges / same-label edges into class k (summed: all those edges / the
    same-label ones), ``source_class`` the edges from class k; ``homophily_degree`` the
    distinct in-degrees d > 0 of labelled rows, with ``homophily_nodes`` (rows of that degree)
    and ``homophily_same`` (their same-label in-edges), int64 (m,). Over every row:
    ``class_nodes`` labelled rows per class (C,), ``degree`` the distinct in-degrees (all
    edges) with ``degree_nodes`` how many rows have each, int64 (m',)."""

    class_deg: np.ndarray
    class_same: np.ndarray
    source_class: np.ndarray
    homophily_degree: np.ndarray
    homophily_nodes: np.ndarray
    homophily_same: np.ndarray
    class_nodes: np.ndarray
    degree: np.ndarray
    degree_nodes: np.ndarray


def _keyed_sums(keys: np.ndarray, *columns: np.ndarray) -> tuple[np.ndarray, ...]:
    """Distinct ``keys`` (sorted) and each column summed per key, int64."""
    distinct, where = np.unique(keys, return_inverse=True)
    return (distinct.astype(np.int64), *(np.bincount(where, weights=c, minlength=distinct.size)
                                         .astype(np.int64) for c in columns))


def row_counts(indptr: np.ndarray, y_row: np.ndarray, y_src: np.ndarray, num_classes: int
               ) -> RowCounts:
    """``RowCounts`` of B rows of a CSR: ``indptr`` int64 (B + 1,) (any base) of those rows,
    ``y_row`` int (B,) their labels and ``y_src`` int (E_b,) the labels of their in-edges'
    sources, in stored order (``UNLABELLED`` for none)."""
    b = indptr.size - 1
    degree = np.diff(np.asarray(indptr, dtype=np.int64))
    local = np.repeat(np.arange(b), degree)  # (E_b,) row of every edge
    y_row = np.asarray(y_row, dtype=np.int64)
    y_src = np.asarray(y_src, dtype=np.int64)
    both = (y_src != UNLABELLED) & (y_row[local] != UNLABELLED)
    local, y_src = local[both], y_src[both]
    same = y_src == y_row[local]
    kept = np.bincount(local, minlength=b)  # (B,) labelled in-edges of a row
    same_in = np.bincount(local, weights=same, minlength=b).astype(np.int64)
    labelled = y_row != UNLABELLED
    y_lab, c = y_row[labelled], num_classes
    has = kept > 0  # only labelled rows keep an edge
    h_degree, h_nodes, h_same = _keyed_sums(kept[has], np.ones(int(has.sum())), same_in[has])
    d_values, d_nodes = _keyed_sums(degree, np.ones(b))
    return RowCounts(
        class_deg=np.bincount(y_lab, weights=kept[labelled], minlength=c).astype(np.int64),
        class_same=np.bincount(y_lab, weights=same_in[labelled], minlength=c).astype(np.int64),
        source_class=np.bincount(y_src, minlength=c), homophily_degree=h_degree,
        homophily_nodes=h_nodes, homophily_same=h_same, class_nodes=np.bincount(y_lab, minlength=c),
        degree=d_values, degree_nodes=d_nodes)


def add_counts(parts: list[RowCounts]) -> RowCounts:
    """The ``RowCounts`` of the union of disjoint row sets (integer sums: order-free)."""
    first = parts[0]
    total = {f: sum(getattr(p, f) for p in parts)
             for f in ("class_deg", "class_same", "source_class", "class_nodes")}
    h = _keyed_sums(*(np.concatenate([getattr(p, f) for p in parts]) for f in (
        "homophily_degree", "homophily_nodes", "homophily_same")))
    d = _keyed_sums(*(np.concatenate([getattr(p, f) for p in parts])
                      for f in ("degree", "degree_nodes")))
    return replace(first, **total, homophily_degree=h[0], homophily_nodes=h[1],
                   homophily_same=h[2], degree=d[0], degree_nodes=d[1])


def homophily_of(counts: RowCounts, num_classes: int) -> dict:
    """Edge, node, class-insensitive and adjusted homophily plus ``h_k`` per class (module doc)
    from integer counts. Node homophily sums ``same / d`` per distinct degree ``d`` exactly
    (``math.fsum``), so it does not depend on how the rows were cut into blocks."""
    n, num_edges = int(counts.class_nodes.sum()), int(counts.class_deg.sum())
    node_h = _ratio(math.fsum((counts.homophily_same / counts.homophily_degree).tolist()),
                    int(counts.homophily_nodes.sum()))
    class_deg, class_same = counts.class_deg, counts.class_same
    h_k = np.divide(class_same, class_deg, out=np.zeros(num_classes), where=class_deg > 0)
    share = counts.class_nodes / max(n, 1)
    class_insensitive = float(np.clip(h_k - share, 0.0, None).sum() / (num_classes - 1))

    edge_h = _ratio(int(class_same.sum()), num_edges)
    adjusted = None
    if num_edges:
        p = counts.source_class / num_edges
        q = class_deg / num_edges  # edges into class k
        chance = float(p @ q)
        adjusted = _ratio(edge_h - chance, 1.0 - chance)  # None if all edges sit in one class
    return {
        "edge": _round(edge_h),
        "node": _round(node_h),
        "class_insensitive": _round(class_insensitive) if num_edges else None,
        "adjusted": _round(adjusted),
        "per_class": [round(float(v), 6) for v in h_k],
    }


# ---------------------------------------------------------------------------------- degrees
def degree_histogram(degrees: np.ndarray, nodes: np.ndarray | None = None) -> list[dict]:
    """Log2 bins for ``dvc plots``: bin 0 holds degree 0, bin b >= 1 degrees [2^(b-1), 2^b - 1].

    One row per bin up to the largest degree (empty bins kept so the x axis has no gaps).
    ``nodes``: how many nodes have each of ``degrees`` (default: one each).
    """
    degrees = np.asarray(degrees, dtype=np.int64)
    bins = np.frexp(degrees.astype(np.float64))[1]  # exponent e with d = m * 2^e, m in [0.5, 1)
    counts = np.bincount(bins, weights=nodes, minlength=1).astype(np.int64)
    rows = []
    for b, count in enumerate(counts.tolist()):  # one row per bin (~log2 max degree), not per node
        low, high = (0, 0) if b == 0 else (1 << (b - 1), (1 << b) - 1)
        rows.append({"log2_bin": b, "bin": str(low) if low == high else f"{low}-{high}",
                     "degree_low": low, "degree_high": high, "nodes": count})
    return rows


def _percentiles(values: np.ndarray, nodes: np.ndarray, q: list[float]) -> np.ndarray:
    """``np.percentile`` (method linear) of the degrees that ``values`` (sorted, distinct)
    repeated ``nodes`` times make, without making them: numpy's own index and interpolation
    arithmetic (``tests/graphops/test_analyze.py`` checks it against numpy)."""
    n = int(nodes.sum())
    virtual = (n - 1) * (np.asarray(q, dtype=np.float64) / 100)
    previous = np.floor(virtual)
    following = previous + 1
    previous[virtual >= n - 1] = following[virtual >= n - 1] = n - 1
    gamma = virtual - previous
    ends = np.cumsum(nodes)  # the sorted degree at rank r: the value whose run covers r
    a = values[np.searchsorted(ends, previous.astype(np.int64), side="right")]
    b = values[np.searchsorted(ends, following.astype(np.int64), side="right")]
    diff = b - a
    return np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)


def degree_stats(degrees: np.ndarray, nodes: np.ndarray | None = None) -> dict:
    """Degree figures of ``degrees`` (int (N,)), or of distinct sorted ``degrees`` held by
    ``nodes`` nodes each (the two give the same figures)."""
    values = np.asarray(degrees, dtype=np.int64)
    if nodes is None:
        values, nodes = np.unique(values, return_counts=True)
    nodes = np.asarray(nodes, dtype=np.int64)
    n = int(nodes.sum())
    p50, p90, p99 = _percentiles(values, nodes, [50, 90, 99]) if n else (0, 0, 0)
    isolated = int(nodes[values == 0].sum())
    return {
        "min": int(values[nodes > 0].min(initial=0)), "max": int(values[nodes > 0].max(initial=0)),
        "mean": round(int(values @ nodes) / n, 6) if n else 0.0,
        "median": round(float(p50), 6), "p90": round(float(p90), 6), "p99": round(float(p99), 6),
        "isolated_nodes": isolated,
        "isolated_fraction": round(isolated / max(n, 1), 6),
    }


# ------------------------------------------------------------------------------- components
# Components: one algorithm (``least_member_labels``), its sweeps over edges held in memory
# (``connected_components``) or by block tasks over the graph in block files
# (gnnpipe/io/csr_blocks.py: the in-edge CSR and its transpose, ``min_label_components``, whose
# stage holds the labels, int32 (N,), int64 past 2**31 - 1 nodes).
def least_member_labels(labels: np.ndarray, sweep) -> np.ndarray:
    """Every node's weakly connected component as its least member (N,), from ``labels`` =
    ``arange(N)`` and ``sweep(labels, step)``: (N,) the least label among every node and its in-
    and out-neighbours (over edges in memory, ``connected_components``, or by block tasks).
    Each round hooks every tree's root onto the least root next to it (a smaller id: no cycles
    form), then pointer jumping takes every node to its new root."""
    step = 0
    while labels.size:
        least = sweep(labels, step)
        hooks = least < labels
        if not hooks.any():  # every edge lies inside one tree
            break
        parent = labels.copy()
        np.minimum.at(parent, labels[hooks], least[hooks])
        grand = parent[parent]
        while not np.array_equal(grand, parent):  # pointer jumping: every node to its root
            parent, grand = grand, grand[grand]
        labels, step = parent, step + 1
    return labels


def connected_components(csr: Csr) -> np.ndarray:
    """Weakly connected component of every node of an in-memory ``csr``: int64 (N,), labelled
    by its least member (``least_member_labels``, each sweep over the edges that still join
    two trees)."""
    src, dst = csr.indices.numpy(), csr.targets().numpy()

    def sweep(labels: np.ndarray, step: int) -> np.ndarray:
        nonlocal src, dst
        keep = labels[src] != labels[dst]  # an edge inside one tree never matters again
        src, dst = src[keep], dst[keep]
        least = labels.copy()
        np.minimum.at(least, dst, labels[src])
        np.minimum.at(least, src, labels[dst])
        return least

    return least_member_labels(np.arange(csr.num_nodes, dtype=np.int64), sweep)


def min_label_sweep(block: tuple[int, int], folder: str, step: int) -> np.ndarray:
    """The least label among every row of ``block = (start, stop)`` and its in- and
    out-neighbours, from ``labels_<step>``: (stop - start,), the labels' dtype."""
    start, stop = block
    row, neighbour = gather_block_rows(Path(folder), slice(start, stop))
    new = gather_labels(Path(folder), step, slice(start, stop))
    np.minimum.at(new, row, gather_labels(Path(folder), step, neighbour))
    return new


def min_label_components(client, folder: Path, n: int, block_rows: int = BLOCK_ROWS
                         ) -> np.ndarray:
    """Every node's component, as its least member: int32 (N,) (int64 past 2**31 - 1 nodes),
    from sweeps by blocks of ``block_rows`` rows on ``client`` (None: in this process)."""
    calls = [(b,) for b in row_ranges(n, block_rows)]

    def sweep(labels: np.ndarray, step: int) -> np.ndarray:
        save_node_array(folder, f"labels_{step}", labels)  # the tasks read it by rows
        least = run_blocks(client, min_label_sweep, calls, folder=str(folder), step=step)
        remove_labels(folder, step)
        return np.concatenate(least)

    return least_member_labels(np.arange(n, dtype=np.int32 if n <= INT32_NODES else np.int64),
                               sweep)


def component_stats(labels: np.ndarray) -> dict:
    """Count, largest and singletons of the components that ``labels`` (N,) name by any
    non-negative ids (the least member, or 0..C-1)."""
    sizes = np.bincount(labels) if labels.size else np.zeros(0, dtype=np.int64)
    sizes = sizes[sizes > 0]  # ids no component takes
    largest = int(sizes.max(initial=0))
    return {"count": int(sizes.size), "largest": largest,
            "largest_fraction": round(largest / max(labels.size, 1), 6),
            "singletons": int((sizes == 1).sum())}


# ------------------------------------------------------------------------------ the report
def label_coverage(y: np.ndarray, edges_between_labelled: int) -> dict:
    """Labelled / unlabelled nodes, and the stored edges between two labelled nodes (those the
    homophily measures run over: ``RowCounts.class_deg`` summed)."""
    labelled = np.asarray(y) != UNLABELLED
    total = int(labelled.sum())
    return {"labelled": total, "unlabelled": int(labelled.size - total),
            "labelled_fraction": round(total / max(labelled.size, 1), 6),
            "edges_between_labelled": int(edges_between_labelled)}


def label_distribution(y: np.ndarray, num_classes: int) -> dict:
    """Nodes per class, over the labelled nodes."""
    y = np.asarray(y, dtype=np.int64)
    counts = np.bincount(y[y != UNLABELLED], minlength=num_classes)
    total = max(int(counts.sum()), 1)
    return {"count": counts.tolist(), "fraction": [round(c / total, 6) for c in counts.tolist()],
            "majority_fraction": round(int(counts.max(initial=0)) / total, 6)}


def phase_sizes(message_graphs: dict[str, Csr], roles: np.ndarray) -> dict:
    """Per phase: its message graph's size and how many of the phase's own nodes (``roles`` int8
    (N,) role codes, ``ROLE_CODES``) are isolated in it (from the graphs' offsets alone)."""
    out = {}
    for phase in PHASES:
        csr = message_graphs[phase]
        nodes = roles == ROLE_CODES[phase]
        isolated = int((csr.degrees().numpy()[nodes] == 0).sum())
        out[phase] = {"edges": csr.num_edges, "nodes": int(nodes.sum()),
                      "isolated_nodes": isolated,
                      "isolated_fraction": round(isolated / max(int(nodes.sum()), 1), 6)}
    return out


def graph_report(num_nodes: int, y: np.ndarray, num_classes: int, counts: RowCounts,
                 components: dict, phases: dict | None, cfg: AnalyzeParams
                 ) -> tuple[dict, list[dict]]:
    """``(report, degree_histogram_rows)`` from the counts over every row of the graph, its
    ``component_stats`` and the per-phase figures (None: none)."""
    h = homophily_of(counts, num_classes)
    num_edges = int(counts.degree @ counts.degree_nodes)
    report = {
        "nodes": num_nodes,
        "edges": num_edges,  # stored, directed (both directions when undirected)
        "classes": num_classes,
        "homophily": h,
        "degree": degree_stats(counts.degree, counts.degree_nodes),
        "components": components,
        "labels": label_distribution(y, num_classes),
        "label_coverage": label_coverage(y, int(counts.class_deg.sum())),
    }
    if phases is not None:
        report["phases"] = phases
    warnings = []
    low = h["adjusted"] is not None and h["adjusted"] < cfg.low_homophily
    if h["edge"] is None and num_edges:
        warnings.append(
            f"no edge joins two labelled nodes ({report['label_coverage']['labelled']} of "
            f"{num_nodes} nodes are labelled): homophily cannot be measured")
    elif h["edge"] is None:
        warnings.append("the graph has no edges: a GNN can only match the MLP")
    elif low:
        warnings.append(
            f"low homophily: adjusted homophily {h['adjusted']:.3f} is below "
            f"analyze.low_homophily={cfg.low_homophily} (edge homophily {h['edge']:.3f} over "
            f"{num_classes} classes); neighbours mostly carry other labels, so GCN-style "
            "models that average over neighbours may lose to the structure-free MLP")
    if report["degree"]["isolated_fraction"] > cfg.max_isolated_fraction:
        warnings.append(
            f"{report['degree']['isolated_fraction']:.1%} of nodes have no neighbours (above "
            f"analyze.max_isolated_fraction={cfg.max_isolated_fraction}); for them a GNN is an MLP")
    report["low_homophily"] = bool(low)
    report["warnings"] = warnings
    return report, degree_histogram(counts.degree, counts.degree_nodes)


# ------------------------------------------------------------------------ by blocks of rows
def count_block(block: tuple[int, int], folder: str, labels: str, num_classes: int,
                graph: StoredGraph | None = None) -> RowCounts:
    """``RowCounts`` of rows ``block = (start, stop)`` of the graph in ``folder`` (or of the
    stored ``graph``, read where it lies), with the node array ``<labels>.npy`` of ``folder`` as
    the labels."""
    start, stop = block
    if graph is None:
        indptr, indices = read_in_rows(Path(folder), start, stop)
    else:
        degree, indices = stored_rows(graph, start, stop)
        indptr = np.concatenate([[0], np.cumsum(degree)])
    y = Path(folder) / f"{labels}.npy"
    return row_counts(indptr, gather_npy(y, slice(start, stop)), gather_npy(y, indices),
                      num_classes)


def block_counts(client, folder: Path, n: int, labels: str, num_classes: int,
                 block_rows: int = BLOCK_ROWS, graph: StoredGraph | None = None) -> RowCounts:
    """``RowCounts`` of every row of the graph in ``folder`` (or of ``graph``), added over
    block tasks (integer sums: the same for any block size, engine or worker count)."""
    parts = run_blocks(client, count_block, [(b,) for b in row_ranges(n, block_rows)],
                       folder=str(folder), labels=labels, num_classes=num_classes, graph=graph)
    empty = np.zeros(0, dtype=np.int64)
    return add_counts(parts) if parts else row_counts(np.zeros(1, dtype=np.int64), empty, empty,
                                                      num_classes)


def analyze_blocks(client, folder: Path, y: np.ndarray, num_classes: int, cfg: AnalyzeParams,
                   message_graphs: dict[str, Csr] | None = None,
                   roles: np.ndarray | None = None, train: StoredGraph | None = None,
                   block_rows: int = BLOCK_ROWS) -> tuple[dict, list[dict]]:
    """``(report, degree_histogram_rows)`` for ``metrics/graph.json`` and its plot, of the graph
    in the block files of ``folder`` (``y`` int64 (N,) its labels), by block tasks of
    ``block_rows`` rows on ``client`` (None: in this process).

    ``message_graphs`` (their offsets), ``roles`` (int8 role codes (N,)) and ``train`` (the
    train phase's stored graph, read by rows where it lies) add per-phase figures when given.
    The report's ``warnings`` list says in words what a user should worry about (low homophily
    above all).
    """
    n, c = num_block_nodes(folder), num_classes
    save_node_array(folder, "y", y)
    counts = block_counts(client, folder, n, "y", c, block_rows)
    components = min_label_components(client, folder, n, block_rows)
    phases = None
    if message_graphs is not None and roles is not None and train is not None:
        # the homophily the model can exploit with the labels it may see: only train's
        save_node_array(folder, "y_train", np.where(roles == ROLE_CODES["train"], y, UNLABELLED))
        train_counts = block_counts(client, folder, n, "y_train", c, block_rows, train)
        phases = {**phase_sizes(message_graphs, roles),
                  "train_label_homophily": homophily_of(train_counts, c)["edge"]}
    return graph_report(n, y, c, counts, component_stats(components), phases, cfg)
