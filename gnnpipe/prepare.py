"""The prepare stage: a dataset source in, one validated ``Graph`` and a report out."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import torch

from gnnpipe import sources
from gnnpipe.config import DatasetParams
from gnnpipe.graph import ROLES, UNLABELLED, Csr, Graph, normalize_edges
from gnnpipe.sources.base import RawGraph, no_edges_warning, time_key


def validate_arrays(x: np.ndarray, y: np.ndarray, src: np.ndarray, dst: np.ndarray,
                    where: str) -> int:
    """Check raw arrays before they become a graph; return the number of classes.

    ``x`` (N, F) float, ``y`` (N,) int in ``[0, C)`` or -1 (unlabelled), ``src``/``dst`` (M,)
    int in ``[0, N)``.
    Raises ``ValueError`` naming ``where`` (the source) and the offending column.
    """
    if x.ndim != 2:
        raise ValueError(f"{where}: features must be a 2-D (nodes, features) array, got shape {x.shape}")
    n = x.shape[0]
    if n == 0:
        raise ValueError(f"{where}: the graph has no nodes")
    if y.shape != (n,):
        raise ValueError(f"{where}: labels have shape {y.shape} but there are {n} feature rows")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"{where}: labels must be integers, got {y.dtype}")
    if y.min() < UNLABELLED:
        raise ValueError(f"{where}: label column has negative value {int(y.min())}")
    # a streamed feature file (np.memmap) had each block checked as it was written
    bad_rows = np.zeros(0, bool) if isinstance(x, np.memmap) else ~np.isfinite(x).all(axis=1)
    if bad_rows.any():
        raise ValueError(f"{where}: features contain NaN or inf in {int(bad_rows.sum())} rows "
                         f"(first: node {int(np.argmax(bad_rows))})")
    if src.shape != dst.shape or src.ndim != 1:
        raise ValueError(f"{where}: edge src and dst must be 1-D of equal length, got "
                         f"{src.shape} and {dst.shape}")
    for name, ids in (("src", src), ("dst", dst)):
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"{where}: edge column {name!r} must hold integer node ids, got "
                             f"{ids.dtype}")
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad = ids[(ids < 0) | (ids >= n)][0]
            raise ValueError(f"{where}: edge column {name!r} has node id {int(bad)} outside "
                             f"[0, {n}) ({n} nodes)")
    labelled = y[y != UNLABELLED]
    if labelled.size == 0:
        raise ValueError(f"{where}: no node has a label; node classification needs labels")
    num_classes = int(labelled.max()) + 1
    if np.count_nonzero(np.bincount(labelled)) < 2:  # all labels equal, whatever their value
        raise ValueError(f"{where}: labels hold a single class; node classification needs >= 2")
    return num_classes


@dataclass(frozen=True)
class Prepared:
    """What prepare writes: the graph, its report and, for user tables, what joins it back."""

    graph: Graph
    report: dict
    node_ids: pa.Array | None = None  # (N,) the user's id of node i (parquet / csv sources)
    node_time: pa.Array | None = None  # (N,) the node table's timestamp column, as read
    class_values: pa.Array | None = None  # (C,) the user's label of each code; None: 0..C-1
    edge_attrs: dict[str, pa.Array] = field(default_factory=dict)  # (E,) per stored edge


def prepare(cfg: DatasetParams, seed: int) -> tuple[Graph, dict]:
    """Load ``cfg.source``, apply the edge policies and return the graph and ``prepare.json``."""
    prepared = prepare_dataset(cfg, seed)
    return prepared.graph, prepared.report


def prepare_dataset(cfg: DatasetParams, seed: int, feature_sink=None) -> Prepared:
    """``prepare`` plus the extras of user tables (original ids, edge weights / timestamps).
    ``feature_sink`` (synthetic source): features streamed to it in row blocks, ``graph.x``
    then maps its file (``sources.load``)."""
    return build(sources.load(cfg, seed, feature_sink), cfg)


def build(raw: RawGraph, cfg: DatasetParams) -> Prepared:
    """Validate a source's raw graph and apply ``cfg``'s edge policies."""
    num_classes = validate_arrays(raw.x, raw.y, raw.src, raw.dst, raw.where)
    if raw.class_values is not None:  # classes are the user's values, present or not
        num_classes = len(raw.class_values)
    n = raw.x.shape[0]
    csr, edge_report = normalize_edges(raw.src, raw.dst, n, undirected=cfg.undirected,
                                       dedup=cfg.dedup,
                                       remove_self_loops=cfg.self_loops == "remove")
    timestamps = raw.timestamps
    if timestamps is None and raw.node_time is not None:
        timestamps = time_key(raw.node_time)  # int64 for ints/dates/times, else float64
    with warnings.catch_warnings():  # a streamed file is mapped read-only: torch warns
        warnings.simplefilter("ignore", UserWarning)
        x = torch.from_numpy(raw.x)
    graph = Graph(csr=csr, x=x, y=torch.from_numpy(raw.y),
                  num_classes=num_classes,
                  timestamps=None if timestamps is None else torch.from_numpy(timestamps),
                  public_roles=None if raw.public_roles is None
                  else torch.from_numpy(raw.public_roles))
    degrees = csr.degrees()
    report = {
        "source": cfg.source,
        "nodes": n,
        "features": int(raw.x.shape[1]),
        "classes": num_classes,
        "undirected": cfg.undirected,
        "input_edges": edge_report.input_edges,
        "self_loops_removed": edge_report.self_loops_removed,
        "duplicates_removed": edge_report.duplicates_removed,
        "edges": edge_report.output_edges,
        "isolated_nodes": int((degrees == 0).sum()),
        "max_degree": int(degrees.max()),
        "mean_degree": round(float(degrees.double().mean()), 4),
    }
    if raw.public_roles is not None:  # keys only where they apply: synthetic output unchanged
        report["public_split"] = {role: int((raw.public_roles == code).sum())
                                  for code, role in enumerate(ROLES)}
    if raw.class_names is not None:
        report["class_names"] = raw.class_names
    if raw.src.size == 0:  # legal, almost always a mistake: the command prints it too
        report["warnings"] = [no_edges_warning(raw.edges_where or raw.where)]
    edge_attrs: dict[str, pa.Array] = {}
    if raw.edge_weight is not None or raw.edge_time is not None:
        rows = pa.array(stored_edge_rows(
            raw.src, raw.dst, csr, undirected=cfg.undirected,
            remove_self_loops=cfg.self_loops == "remove",
            order=None if raw.edge_time is None else time_key(raw.edge_time)))
        if raw.edge_weight is not None:
            edge_attrs["weight"] = raw.edge_weight.take(rows)
        if raw.edge_time is not None:
            edge_attrs["timestamp"] = raw.edge_time.take(rows)
    return Prepared(graph=graph, report=report, node_ids=raw.node_ids, node_time=raw.node_time,
                    edge_attrs=edge_attrs, class_values=raw.class_values)


def _pair_keys(src: np.ndarray, dst: np.ndarray, n: int, undirected: bool) -> np.ndarray:
    if undirected:
        return np.minimum(src, dst) * n + np.maximum(src, dst)
    return src * n + dst


def stored_edge_rows(src: np.ndarray, dst: np.ndarray, csr: Csr, *, undirected: bool,
                     remove_self_loops: bool, order: np.ndarray | None = None) -> np.ndarray:
    """The input row behind every stored edge: int64 (E_stored,), in ``csr.edge_index()`` order.

    ``src``/``dst`` (E_in,) are the input rows given to ``normalize_edges``. Rows that dedup
    merged are represented by the earliest one (smallest ``order``, e.g. a timestamp, then file
    order); without dedup the k-th copy of an edge takes the k-th row of that edge. Both
    directions of an undirected edge come from the same row.
    """
    n = csr.num_nodes
    rows = np.arange(src.size, dtype=np.int64)
    if remove_self_loops:
        keep = src != dst
        rows, src, dst = rows[keep], src[keep], dst[keep]
        order = None if order is None else order[keep]
    keys = _pair_keys(src, dst, n, undirected)
    by_key = np.lexsort((rows, keys) if order is None else (rows, order, keys))
    sorted_keys = keys[by_key]
    # rank of each stored edge among identical (src, dst) copies: 0 unless dedup is off
    e_src, e_dst = csr.edge_index().numpy()
    directed = e_src * n + e_dst
    d_order = np.argsort(directed, kind="stable")
    d_sorted = directed[d_order]
    rank = np.empty(directed.size, dtype=np.int64)
    rank[d_order] = np.arange(directed.size) - np.searchsorted(d_sorted, d_sorted, side="left")
    wanted = _pair_keys(e_src, e_dst, n, undirected)
    pos = np.searchsorted(sorted_keys, wanted, side="left") + rank
    assert pos.size == 0 or (pos.max() < sorted_keys.size and (sorted_keys[pos] == wanted).all())
    return rows[by_key[pos]]
