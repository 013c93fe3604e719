"""The prepare stage: a dataset source in, one validated graph and its ``prepare.json`` out.

``prepare_dataset`` is the one entry: every source's raw graph (``gnnpipe.sources.load``: node
types and relations, one of each for a homogeneous source; the built-in graphs too,
gnnpipe/sources/builtin.py) goes through ``build``, which validates it and applies the edge
policies, labels and times.

Edge policies (``dataset.undirected`` / ``dedup`` / ``self_loops``) are applied by one
function, ``gnnpipe.data.edges.normalize_edges``, to each relation:

* a relation between two types (``user buys item``) is stored as given and, when undirected,
  also flipped as its reverse ``item rev_buys user`` (the pair of ``Graph.reverse``);
* a relation inside one type (``paper cites paper``, a homogeneous graph's edges) is stored in
  both directions when undirected and is its own reverse, as the built-in ``cites`` (a
  homogeneous graph's is, directed or not: its link split holds out unordered pairs);
  self-loops apply to it only;
* ``dedup`` merges repeated pairs (unordered pairs for an undirected same-type relation); a
  merged edge keeps its earliest timestamp, then its first row (its weight and time follow).
  Without dedup, copies of one stored edge take their rows by (timestamp, row).

A node type without feature columns gets ``dataset.typed.featureless``: ``degree`` = log1p of
its in-degree in each edge type that points into it (one column per such type, in edge-type
order; a type nothing points into gets one column of ones), ``constant`` = one column of ones.
graph.json lists such types under ``featureless`` (``train.embeddings.types: featureless``).
Times: a homogeneous graph keeps its node times as sorted numbers (int64 for integers, dates
and timestamps, else float64) and its edge columns as read (``edge_attrs``); a typed graph
stores int64 node and edge times (float columns must hold whole numbers).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import torch

from gnnpipe import sources
from gnnpipe.config import DatasetParams
from gnnpipe.data.graph import (EDGE, HOMOGENEOUS, NODE, ROLES, TYPED, UNLABELLED, Csr, EdgeType,
                                Graph, edge_type_name, layout_of, parse_edge_type,
                                reverse_edge_type)
from gnnpipe.data.edges import edge_pairs, normalize_edges
from gnnpipe.sources.base import (RawGraph, fractional_time, no_edges_warning, not_whole_time,
                                  time_key)


# ------------------------------------------------------------------------------------ validation
def check_features(x: np.ndarray, where: str) -> None:
    """``x`` float (N, F) is 2-D and finite (a streamed ``np.memmap`` was checked block by
    block as it was written)."""
    if x.ndim != 2:
        raise ValueError(f"{where}: features must be a 2-D (nodes, features) array, got shape "
                         f"{x.shape}")
    bad_rows = np.zeros(0, bool) if isinstance(x, np.memmap) else ~np.isfinite(x).all(axis=1)
    if bad_rows.any():
        raise ValueError(f"{where}: features contain NaN or inf in {int(bad_rows.sum())} rows "
                         f"(first: node {int(np.argmax(bad_rows))})")


def check_labels(y: np.ndarray, n: int, where: str) -> None:
    """``y`` (n,) integer codes, ``UNLABELLED`` (-1) or more."""
    if y.shape != (n,):
        raise ValueError(f"{where}: labels have shape {y.shape} but there are {n} feature rows")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"{where}: labels must be integers, got {y.dtype}")
    if y.size and y.min() < UNLABELLED:
        raise ValueError(f"{where}: label column has negative value {int(y.min())}")


def check_edge_ids(src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int,
                   where: str) -> None:
    """``src`` / ``dst`` 1-D integer (E,) in ``[0, num_src)`` / ``[0, num_dst)``."""
    if src.shape != dst.shape or src.ndim != 1:
        raise ValueError(f"{where}: edge src and dst must be 1-D of equal length, got "
                         f"{src.shape} and {dst.shape}")
    for name, ids, n in (("src", src, num_src), ("dst", dst, num_dst)):
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"{where}: edge column {name!r} must hold integer node ids, got "
                             f"{ids.dtype}")
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad = ids[(ids < 0) | (ids >= n)][0]
            raise ValueError(f"{where}: edge column {name!r} has node id {int(bad)} outside "
                             f"[0, {n}) ({n} nodes)")


def check_classes(labelled: np.ndarray, where: str) -> None:
    """``labelled`` int64 (L,) class codes >= 0 hold at least two classes, whatever their values."""
    if labelled.size == 0:
        raise ValueError(f"{where}: no node has a label; node classification needs labels")
    if np.count_nonzero(np.bincount(labelled)) < 2:
        raise ValueError(f"{where}: labels hold a single class; node classification needs >= 2")


def validate_arrays(x: np.ndarray, y: np.ndarray, src: np.ndarray, dst: np.ndarray,
                    where: str) -> int:
    """The checks of ``build`` on one type's raw arrays; return the number of classes.

    ``x`` (N, F) float, ``y`` (N,) int in ``[0, C)`` or -1 (unlabelled), ``src``/``dst`` (M,)
    int in ``[0, N)``. Raises ``ValueError`` naming ``where`` (the source) and the offending
    column.
    """
    check_features(x, where)
    n = x.shape[0]
    if n == 0:
        raise ValueError(f"{where}: the graph has no nodes")
    check_labels(y, n, where)
    check_edge_ids(src, dst, n, n, where)
    check_classes(y[y != UNLABELLED], where)
    return int(y.max()) + 1


def validate_raw(raw: RawGraph, homogeneous: bool) -> int:
    """``validate_arrays`` over every node type and relation; the number of classes (the
    user's values, present or not; 1 for an unlabelled link-task graph)."""
    target = raw.nodes[raw.target]
    for node in raw.nodes.values():
        if node.x is not None:
            check_features(node.x, node.where)
    if target.num_nodes == 0:
        raise ValueError(f"{target.where}: the graph has no nodes" if homogeneous else
                         f"{target.where}: the target node type {raw.target!r} has no nodes")
    check_labels(raw.y, target.num_nodes, target.where)
    for (s, _, d), rel in raw.relations.items():
        check_edge_ids(rel.src, rel.dst, raw.nodes[s].num_nodes, raw.nodes[d].num_nodes,
                       rel.where)
    if raw.labelled:
        check_classes(raw.y[raw.y != UNLABELLED], target.where)
    if raw.class_values is not None:  # classes are the user's values, present or not
        return len(raw.class_values)
    return int(raw.y.max()) + 1 if raw.labelled else 1


def int_times(column: pa.Array, where: str) -> np.ndarray:
    """A timestamp column as int64 (N,); a float column must hold whole numbers."""
    values = time_key(column)
    row = fractional_time(values)
    if row is not None:
        raise ValueError(not_whole_time(where, values[row], row))
    return values.astype(np.int64, copy=False)


# ------------------------------------------------------------------------------------ the build
@dataclass(frozen=True)
class Prepared:
    """What prepare writes: the graph, ``prepare.json`` and, for user tables, what joins it back.

    ``node_ids`` / ``node_time``: per node type, the user's id (N_t,) and the node table's
    timestamp column (N_t,) as read. ``edge_attrs``: per edge type, the weight / timestamp
    column (E,) as read, one row per stored edge in CSR order (a homogeneous graph's go to
    ``edge_attrs_node__to__node.parquet``). ``featureless``: the node types without feature
    columns (their x is ``dataset.typed.featureless``'s), in node-type order, for graph.json.
    """

    graph: Graph
    report: dict
    node_ids: dict[str, pa.Array] = field(default_factory=dict)
    node_time: dict[str, pa.Array] = field(default_factory=dict)
    class_values: pa.Array | None = None  # (C,) the user's label of each code; None: 0..C-1
    edge_attrs: dict[EdgeType, dict[str, pa.Array]] = field(default_factory=dict)
    featureless: tuple[str, ...] = ()


def prepare(cfg: DatasetParams, seed: int) -> tuple[Graph, dict]:
    """Load ``cfg.source``, apply the edge policies and return the graph and ``prepare.json``."""
    prepared = prepare_dataset(cfg, seed)
    return prepared.graph, prepared.report


def prepare_dataset(cfg: DatasetParams, seed: int, feature_sink=None) -> Prepared:
    """``prepare`` plus the extras of user tables (original ids, edge weights / timestamps).
    ``feature_sink`` (homogeneous synthetic source): features streamed to it in row blocks,
    ``graph.x`` then maps its file (``sources.load``)."""
    return build(sources.load(cfg, seed, feature_sink), cfg)


def _featureless(graph_csr: dict, node_type: str, n: int, mode: str) -> np.ndarray:
    """Default features float32 (N, k) of a type without feature columns (module docstring)."""
    incoming = [e for e in graph_csr if e[2] == node_type]
    if mode == "constant" or not incoming:
        return np.ones((n, 1), dtype=np.float32)
    degrees = np.stack([graph_csr[e].degrees().numpy() for e in incoming], axis=1)
    return np.log1p(degrees).astype(np.float32)


def link_edge_type(cfg: DatasetParams, relations: list[EdgeType], edge_types: list[EdgeType],
                   target: str) -> EdgeType:
    """``dataset.typed.link_edge_type`` (one of ``edge_types``, the stored ones), or the first of
    the given ``relations`` touching the ``target`` type (else the first relation): the one
    rule of both prepare paths (this module's ``build`` and gnnpipe/data/prepare_tables.py)."""
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
    touching = [e for e in relations if target in (e[0], e[2])]
    return (touching or relations)[0]


def build(raw: RawGraph, cfg: DatasetParams) -> Prepared:
    """Validate a source's raw graph and apply ``cfg``'s policies (module docstring)."""
    homogeneous = layout_of(list(raw.nodes), list(raw.relations)) == HOMOGENEOUS
    if homogeneous and cfg.layout == TYPED:  # graph.json could not tell the two apart
        raise ValueError(f"{raw.relations[EDGE].where}: node type {NODE!r} with relation "
                         f"{edge_type_name(EDGE)!r} alone is how a homogeneous graph is "
                         "described; rename the type or relation, or use dataset.layout: "
                         "homogeneous")
    num_classes = validate_raw(raw, homogeneous)
    edges = _edges(raw, cfg, homogeneous)
    x, featureless = _features(raw, edges.csr, cfg.typed.featureless)
    # typed files store int64 times; a homogeneous graph's node times stay sortable numbers
    node_time = {t: torch.from_numpy(time_key(n.time) if homogeneous
                                     else int_times(n.time, n.where))
                 for t, n in raw.nodes.items() if n.time is not None}
    y = torch.from_numpy(raw.y)
    public_roles = None if raw.public_roles is None else torch.from_numpy(raw.public_roles)
    if homogeneous:
        graph = Graph.homogeneous(edges.csr[EDGE], x[NODE], y, num_classes,
                                  timestamps=node_time.get(NODE), public_roles=public_roles)
    else:
        graph = Graph(x=x, csr=edges.csr, target=raw.target, y=y, num_classes=num_classes,
                      reverse=edges.reverse,
                      link_edge_type=link_edge_type(
                          cfg, [raw.link_relation] if raw.link_relation else list(raw.relations),
                          list(edges.csr), raw.target),
                      node_time=node_time, edge_time=edges.time, public_roles=public_roles)
    return Prepared(graph=graph, report=_report(graph, cfg, edges.counts, raw, featureless),
                    node_ids={t: n.ids for t, n in raw.nodes.items() if n.ids is not None},
                    node_time={t: n.time for t, n in raw.nodes.items() if n.time is not None},
                    class_values=raw.class_values, edge_attrs=edges.attrs,
                    featureless=tuple(t for t in graph.node_types if t in featureless))


@dataclass(frozen=True)
class _Edges:
    """Every edge type's CSR (the reverses added), its ``attrs`` (weight / timestamp as read,
    per stored edge), its int64 ``time`` per stored edge (typed), ``reverse``, and the
    ``counts`` over all relations: input rows, self-loops and duplicates removed."""

    csr: dict[EdgeType, Csr]
    attrs: dict[EdgeType, dict[str, pa.Array]]
    time: dict[EdgeType, torch.Tensor]
    reverse: dict[EdgeType, EdgeType]
    counts: tuple[int, int, int]


def _edges(raw: RawGraph, cfg: DatasetParams, homogeneous: bool) -> _Edges:
    """The edge policies applied to every relation, and the reverse of each relation between
    two types when ``dataset.undirected`` (module docstring)."""
    sizes = {t: n.num_nodes for t, n in raw.nodes.items()}
    csr, attrs, edge_time, reverse = {}, {}, {}, {}
    counts = np.zeros(3, dtype=np.int64)
    for edge_type, rel in raw.relations.items():
        s, _, d = edge_type
        same = s == d  # undirected pairs and self-loops exist inside one type only
        # typed files store int64 times; a homogeneous graph's edge times stay as read
        time = (None if rel.time is None else time_key(rel.time) if homogeneous
                else int_times(rel.time, rel.where))
        csr[edge_type], kept = normalize_edges(
            rel.src, rel.dst, sizes[d], num_src=sizes[s], undirected=same and cfg.undirected,
            dedup=cfg.dedup, remove_self_loops=same and cfg.self_loops == "remove",
            order=time, with_rows=time is not None or rel.weight is not None)
        counts += (kept.input_edges, kept.self_loops_removed, kept.duplicates_removed)
        if kept.rows is not None:  # each stored edge's weight / timestamp from its input row
            rows = pa.array(kept.rows)
            attrs[edge_type] = {name: column.take(rows) for name, column
                                in (("weight", rel.weight), ("timestamp", rel.time))
                                if column is not None}
        if time is not None and not homogeneous:
            edge_time[edge_type] = torch.from_numpy(time[kept.rows])
        if not cfg.undirected:
            continue
        if same:
            reverse[edge_type] = edge_type
            continue
        rev = reverse_edge_type(edge_type)
        if rev in raw.relations:
            raise ValueError(reverse_taken(rel.where, rev, raw.relations[rev].where))
        flip_dst, flip_src = edge_pairs(csr[edge_type])
        csr[rev], flipped = normalize_edges(flip_src, flip_dst, sizes[s], num_src=sizes[d],
                                            undirected=False, dedup=False,
                                            remove_self_loops=False, with_rows=True)
        if time is not None:
            edge_time[rev] = edge_time[edge_type][torch.from_numpy(flipped.rows)]
        reverse[edge_type], reverse[rev] = rev, edge_type
    return _Edges(csr, attrs, edge_time, reverse, tuple(int(c) for c in counts))


def reverse_taken(where, rev: EdgeType, other) -> str:
    """The one line for a relation whose added reverse ``rev`` is a given table's name too
    (``where``, ``other``: the two tables), on both prepare paths."""
    return (f"{where}: dataset.undirected=true adds its reverse {edge_type_name(rev)}, but "
            f"{other} already has that name; rename one table or set dataset.undirected: false")


def _features(raw: RawGraph, csr: dict[EdgeType, Csr], mode: str
              ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``x`` per node type (the source's, or ``mode``'s default for a featureless type) and
    the featureless types' mode."""
    x, featureless = {}, {}
    with warnings.catch_warnings():  # a streamed feature file is mapped read-only: torch warns
        warnings.simplefilter("ignore", UserWarning)
        for node_type, node in raw.nodes.items():
            if node.x is None:
                featureless[node_type] = mode
                x[node_type] = torch.from_numpy(_featureless(csr, node_type, node.num_nodes, mode))
            else:
                x[node_type] = torch.from_numpy(node.x)
    return x, featureless


def _report(graph: Graph, cfg: DatasetParams, counts: tuple[int, int, int], raw: RawGraph,
            featureless: dict[str, str]) -> dict:
    """``prepare.json``: the counts every graph has, then its layout's own keys (degrees of a
    homogeneous graph; the types of a typed one), then ``_finish_report``'s optional keys."""
    received = sum((c.degrees() for e, c in graph.csr.items() if e[2] == graph.target),
                   torch.zeros(graph.num_nodes_dict[graph.target], dtype=torch.int64))
    input_edges, loops, duplicates = counts
    report = {
        "source": cfg.source, "nodes": graph.num_nodes,
        "edges": sum(c.num_edges for c in graph.csr.values()),
        "features": int(graph.x[graph.target].shape[1]), "classes": graph.num_classes,
        "undirected": cfg.undirected, "input_edges": input_edges,
        "duplicates_removed": duplicates, "self_loops_removed": loops,
        "isolated_nodes": int((received == 0).sum())}  # target nodes no edge type points into
    if graph.layout == HOMOGENEOUS:
        report.update(max_degree=int(received.max()),
                      mean_degree=round(float(received.double().mean()), 4))
    else:
        report.update({
            "layout": TYPED, "target": graph.target, "node_types": graph.num_nodes_dict,
            "edge_types": {edge_type_name(e): c.num_edges for e, c in graph.csr.items()},
            "link_edge_type": edge_type_name(graph.link_edge_type), "featureless": featureless,
            "node_time": list(graph.node_time),
            "edge_time": [edge_type_name(e) for e in graph.edge_time],
            "labelled": raw.labelled})
    return _finish_report(report, raw.public_roles, raw.class_names,
                          [rel.where for rel in raw.relations.values() if rel.src.size == 0])


def _finish_report(report: dict, public_roles: np.ndarray | None,
                   class_names: list[str] | None, empty: list[str]) -> dict:
    """The optional keys every graph kind adds last: the official split's counts, the class
    names, and a warning per input without edge rows (``empty``: where each was read)."""
    if public_roles is not None:  # keys only where they apply: synthetic output unchanged
        report["public_split"] = {role: int((public_roles == code).sum())
                                  for code, role in enumerate(ROLES)}
    if class_names is not None:
        report["class_names"] = class_names
    if empty:  # legal, almost always a mistake: the command prints them too
        report["warnings"] = [no_edges_warning(where) for where in empty]
    return report
