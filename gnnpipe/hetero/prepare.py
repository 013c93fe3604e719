"""A typed source's raw tables in, one validated ``HeteroGraph`` and its report out.

Edge policies, per relation (``dataset.undirected`` / ``dedup`` / ``self_loops``):

* a relation between two types (``user buys item``) is stored as given and, when undirected,
  also flipped as its reverse ``item rev_buys user`` (the pair of ``HeteroGraph.reverse``);
* a relation inside one type (``paper cites paper``) is stored in both directions when
  undirected and is its own reverse, as the built-in ``cites``; self-loops apply to it only;
* ``dedup`` merges repeated pairs (unordered pairs for an undirected same-type relation); a
  merged edge keeps its earliest timestamp, then its first row.

A node type without feature columns gets ``dataset.typed.featureless``: ``degree`` = log1p of
its in-degree in each edge type that points into it (one column per such type, in edge-type
order; a type nothing points into gets one column of ones), ``constant`` = one column of ones.
Times (``node_time``, ``edge_time``) are int64: integers, dates (days) and timestamps (their
unit) as stored; float columns must hold whole numbers.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from gnnpipe.config import DatasetParams
from gnnpipe.graph import ROLES
from gnnpipe.sources.base import RawRelation, RawTypedGraph, no_edges_warning, time_key
from gnnpipe.typed_graph import (EdgeType, HeteroGraph, edge_type_name, parse_edge_type,
                                 typed_csr)

READERS = {"parquet": "typed_tables", "csv": "typed_tables", "ogb": "ogb_mag"}


@dataclass(frozen=True)
class TypedPrepared:
    """What prepare writes for typed tables: the graph, ``prepare.json`` and, for user tables,
    the user's ids (N_t,) and node timestamps (N_t,) as read, per node type."""

    graph: HeteroGraph
    report: dict
    node_ids: dict[str, pa.Array] = field(default_factory=dict)
    node_time: dict[str, pa.Array] = field(default_factory=dict)
    class_values: pa.Array | None = None  # (C,) the user's label of each code; None: 0..C-1


def load_typed(cfg: DatasetParams) -> RawTypedGraph:
    """The raw typed graph of ``cfg.source`` (tables or an OGB heterogeneous folder)."""
    if cfg.path == DatasetParams.path and not Path(cfg.path).exists():
        raise ValueError(f"dataset.layout=typed needs dataset.path: the folder of the typed "
                         f"tables (dataset.source={cfg.source})")
    module = importlib.import_module(f"gnnpipe.sources.{READERS[cfg.source]}")
    return module.read(cfg)


def prepare_typed_dataset(cfg: DatasetParams) -> TypedPrepared:
    return build_typed(load_typed(cfg), cfg)


def int_times(column: pa.Array, where: str) -> np.ndarray:
    """A timestamp column as int64 (N,); a float column must hold whole numbers."""
    values = time_key(column)
    if values.dtype != np.int64:
        frac = values != np.round(values)
        if frac.any():
            row = int(np.argmax(frac))
            raise ValueError(f"{where}: timestamp {values[row]} (row {row}) is not a whole "
                             "number; typed graphs store int64 times (use integers, dates or "
                             "timestamps)")
        values = values.astype(np.int64)
    return values


@dataclass(frozen=True)
class _Edges:
    src: np.ndarray  # int64 (E,)
    dst: np.ndarray
    time: np.ndarray | None  # int64 (E,)
    duplicates: int
    loops: int


def normalize_relation(rel: RawRelation, same_type: bool, num_dst: int, cfg: DatasetParams
                       ) -> _Edges:
    """One relation's rows after the self-loop and dedup policies; an undirected same-type
    relation comes back with both directions (a kept self-loop once)."""
    src, dst = rel.src, rel.dst
    time = None if rel.time is None else int_times(rel.time, rel.where)
    rows = np.arange(src.size, dtype=np.int64)
    loops = 0
    if same_type and cfg.self_loops == "remove":
        keep = src != dst
        loops = int(src.size - keep.sum())
        rows = rows[keep]
    undirected_pairs = same_type and cfg.undirected
    s, d = src[rows], dst[rows]
    keys = (np.minimum(s, d) * num_dst + np.maximum(s, d)) if undirected_pairs else s * num_dst + d
    duplicates = 0
    if cfg.dedup and keys.size:
        # earliest time, then first row, of each pair
        order = np.lexsort((rows, keys) if time is None else (rows, time[rows], keys))
        first = np.ones(order.size, dtype=bool)
        first[1:] = keys[order[1:]] != keys[order[:-1]]
        duplicates = int(order.size - first.sum())
        rows = np.sort(rows[order[first]])
    s, d = src[rows], dst[rows]
    t = None if time is None else time[rows]
    if undirected_pairs:
        proper = s != d
        s, d = np.concatenate([s, d[proper]]), np.concatenate([d, s[proper]])
        t = None if t is None else np.concatenate([t, t[proper]])
    return _Edges(s, d, t, duplicates, loops)


def csr_in_order(src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int,
                 time: np.ndarray | None):
    """``typed_csr`` of the edges and their times int64 (E,) in the CSR's order (or None)."""
    order = np.argsort(dst * max(num_src, 1) + src, kind="stable")  # typed_csr's own order
    csr = typed_csr(src[order], dst[order], num_src, num_dst)
    return csr, None if time is None else torch.from_numpy(time[order].copy())


def _featureless(graph_csr: dict, node_type: str, n: int, mode: str) -> np.ndarray:
    """Default features float32 (N, k) of a type without feature columns (module docstring)."""
    incoming = [e for e in graph_csr if e[2] == node_type]
    if mode == "constant" or not incoming:
        return np.ones((n, 1), dtype=np.float32)
    degrees = np.stack([graph_csr[e].degrees().numpy() for e in incoming], axis=1)
    return np.log1p(degrees).astype(np.float32)


def _link_edge_type(cfg: DatasetParams, raw: RawTypedGraph, edge_types: list[EdgeType]
                    ) -> EdgeType:
    wanted = cfg.typed.link_edge_type
    if wanted:
        try:
            edge_type = parse_edge_type(wanted)
        except ValueError:
            edge_type = None
        if edge_type not in edge_types:
            raise ValueError(f"dataset.typed.link_edge_type={wanted!r} is not an edge type of "
                             f"the graph ({', '.join(edge_type_name(e) for e in edge_types)})")
        return edge_type
    touching = [e for e in raw.relations if raw.target in (e[0], e[2])]
    return (touching or list(raw.relations))[0]


def build_typed(raw: RawTypedGraph, cfg: DatasetParams) -> TypedPrepared:
    """Validate a typed source's raw graph and apply ``cfg``'s policies (module docstring)."""
    sizes = {t: n.num_nodes for t, n in raw.nodes.items()}
    if sizes[raw.target] == 0:
        raise ValueError(f"{raw.nodes[raw.target].where}: the target node type {raw.target!r} "
                         "has no nodes")
    csr, edge_time, reverse = {}, {}, {}
    input_edges = duplicates = loops = 0
    for edge_type, rel in raw.relations.items():
        s, r, d = edge_type
        same = s == d
        edges = normalize_relation(rel, same, sizes[d], cfg)
        input_edges += rel.src.size
        duplicates += edges.duplicates
        loops += edges.loops
        csr[edge_type], t = csr_in_order(edges.src, edges.dst, sizes[s], sizes[d], edges.time)
        if t is not None:
            edge_time[edge_type] = t
        if not cfg.undirected:
            continue
        if same:
            reverse[edge_type] = edge_type
            continue
        rev = (d, f"rev_{r}", s)
        if rev in raw.relations:
            raise ValueError(f"{rel.where}: dataset.undirected=true adds its reverse "
                             f"{edge_type_name(rev)}, but {raw.relations[rev].where} already "
                             "has that name; rename one table or set dataset.undirected: false")
        csr[rev], t = csr_in_order(edges.dst, edges.src, sizes[d], sizes[s], edges.time)
        if t is not None:
            edge_time[rev] = t
        reverse[edge_type], reverse[rev] = rev, edge_type

    x, featureless = {}, {}
    for node_type, node in raw.nodes.items():
        if node.x is None:
            featureless[node_type] = cfg.typed.featureless
            x[node_type] = torch.from_numpy(_featureless(csr, node_type, node.num_nodes,
                                                         cfg.typed.featureless))
        else:
            x[node_type] = torch.from_numpy(node.x)
    y = raw.y
    num_classes = (len(raw.class_values) if raw.class_values is not None
                   else int(y.max()) + 1 if raw.labelled else 1)
    if raw.labelled and cfg.task == "node" and np.count_nonzero(np.bincount(y[y >= 0])) < 2:
        raise ValueError(f"{raw.nodes[raw.target].where}: labels hold a single class; node "
                         "classification needs >= 2")
    node_time = {t: torch.from_numpy(int_times(n.time, n.where)) for t, n in raw.nodes.items()
                 if n.time is not None}
    graph = HeteroGraph(
        x=x, csr=csr, target=raw.target, y=torch.from_numpy(y), num_classes=num_classes,
        reverse=reverse, link_edge_type=_link_edge_type(cfg, raw, list(csr)),
        node_time=node_time, edge_time=edge_time,
        public_roles=None if raw.public_roles is None else torch.from_numpy(raw.public_roles))
    received = sum((c.degrees() for e, c in csr.items() if e[2] == raw.target),
                   torch.zeros(sizes[raw.target], dtype=torch.int64))
    report = {
        "source": cfg.source, "layout": "typed", "hetero": True, "target": raw.target,
        "nodes": graph.total_nodes, "edges": sum(c.num_edges for c in csr.values()),
        "features": int(x[raw.target].shape[1]), "classes": num_classes,
        "undirected": cfg.undirected, "input_edges": int(input_edges),
        "duplicates_removed": duplicates, "self_loops_removed": loops,
        "isolated_nodes": int((received == 0).sum()),  # target nodes no edge type points into
        "node_types": sizes, "edge_types": {edge_type_name(e): c.num_edges for e, c in csr.items()},
        "link_edge_type": edge_type_name(graph.link_edge_type), "featureless": featureless,
        "node_time": list(node_time), "edge_time": [edge_type_name(e) for e in edge_time],
        "labelled": raw.labelled}
    if raw.public_roles is not None:
        report["public_split"] = {role: int((raw.public_roles == code).sum())
                                  for code, role in enumerate(ROLES)}
    if raw.class_names is not None:
        report["class_names"] = raw.class_names
    empty = [no_edges_warning(rel.where) for rel in raw.relations.values() if rel.src.size == 0]
    if empty:  # the command prints them too
        report["warnings"] = empty
    return TypedPrepared(graph=graph, report=report,
                         node_ids={t: n.ids for t, n in raw.nodes.items() if n.ids is not None},
                         node_time={t: n.time for t, n in raw.nodes.items() if n.time is not None},
                         class_values=raw.class_values)
