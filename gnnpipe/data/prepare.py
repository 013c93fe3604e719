"""The prepare stage: a dataset source in, one validated graph and its ``prepare.json`` out.

``prepare_dataset`` is the one entry: the source's raw graph (``gnnpipe.sources.load``) goes
through ``build`` (a homogeneous ``Graph``: one node and one edge type) or ``build_typed``
(typed tables: node and edge types); the built-in typed graph (``dataset.layout: typed`` with the
synthetic source) comes whole from ``gnnpipe.data.synthetic.generate_typed``. Label, public-split
and warning checks are shared.

Edge policies (``dataset.undirected`` / ``dedup`` / ``self_loops``) are applied by one
function, ``gnnpipe.data.graph.normalize_edges``, to a homogeneous graph's edges and to each
relation of a typed graph:

* a relation between two types (``user buys item``) is stored as given and, when undirected,
  also flipped as its reverse ``item rev_buys user`` (the pair of ``Graph.reverse``);
* a relation inside one type (``paper cites paper``, a homogeneous graph's edges) is stored in
  both directions when undirected and is its own reverse, as the built-in ``cites``; self-loops
  apply to it only;
* ``dedup`` merges repeated pairs (unordered pairs for an undirected same-type relation); a
  merged edge keeps its earliest timestamp, then its first row (its weight and time follow).
  Without dedup, copies of one stored edge take their rows by (timestamp, row) in a
  homogeneous graph and as read (then the flipped rows) in a typed one.

A node type without feature columns gets ``dataset.typed.featureless``: ``degree`` = log1p of
its in-degree in each edge type that points into it (one column per such type, in edge-type
order; a type nothing points into gets one column of ones), ``constant`` = one column of ones.
Typed times (``node_time``, ``edge_time``) are int64: integers, dates (days) and timestamps
(their unit) as stored; float columns must hold whole numbers.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import torch

from gnnpipe import sources
from gnnpipe.data import synthetic
from gnnpipe.config import DatasetParams
from gnnpipe.data.graph import (EDGE, HOMOGENEOUS, NODE, ROLES, TYPED, UNLABELLED, EdgeType, Graph,
                                edge_type_name, layout_of, parse_edge_type)
from gnnpipe.data.edges import edge_pairs, normalize_edges
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sources.base import RawGraph, RawTypedGraph, no_edges_warning, time_key


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
    check_classes(labelled, where)
    return int(labelled.max()) + 1


def check_classes(labelled: np.ndarray, where: str) -> None:
    """``labelled`` int64 (L,) class codes >= 0 hold at least two classes, whatever their values."""
    if np.count_nonzero(np.bincount(labelled)) < 2:
        raise ValueError(f"{where}: labels hold a single class; node classification needs >= 2")


@dataclass(frozen=True)
class Prepared:
    """What prepare writes: the graph, ``prepare.json`` and, for user tables, what joins it back.

    ``node_ids`` / ``node_time``: per node type, the user's id (N_t,) and the node table's
    timestamp column (N_t,) as read; a homogeneous graph's one node type is ``None`` (its files
    carry no type suffix). ``edge_attrs``: weight / timestamp (E,) per stored edge of a
    homogeneous graph.
    """

    graph: Graph
    report: dict
    node_ids: dict[str | None, pa.Array] = field(default_factory=dict)
    node_time: dict[str | None, pa.Array] = field(default_factory=dict)
    class_values: pa.Array | None = None  # (C,) the user's label of each code; None: 0..C-1
    edge_attrs: dict[str, pa.Array] = field(default_factory=dict)


def prepare(cfg: DatasetParams, seed: int) -> tuple[Graph, dict]:
    """Load ``cfg.source``, apply the edge policies and return the graph and ``prepare.json``."""
    prepared = prepare_dataset(cfg, seed)
    return prepared.graph, prepared.report


def prepare_dataset(cfg: DatasetParams, seed: int, feature_sink=None) -> Prepared:
    """``prepare`` plus the extras of user tables (original ids, edge weights / timestamps).
    ``feature_sink`` (homogeneous synthetic source): features streamed to it in row blocks,
    ``graph.x`` then maps its file (``sources.load``)."""
    if cfg.source == "synthetic" and cfg.layout == TYPED:
        return build_synthetic_typed(cfg, seed)
    raw = sources.load(cfg, seed, feature_sink)
    return build_typed(raw, cfg) if isinstance(raw, RawTypedGraph) else build(raw, cfg)


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


def build(raw: RawGraph, cfg: DatasetParams) -> Prepared:
    """Validate a source's raw graph and apply ``cfg``'s edge policies."""
    num_classes = validate_arrays(raw.x, raw.y, raw.src, raw.dst, raw.where)
    if raw.class_values is not None:  # classes are the user's values, present or not
        num_classes = len(raw.class_values)
    n = raw.x.shape[0]
    attrs = raw.edge_weight is not None or raw.edge_time is not None
    csr, edge_report = normalize_edges(
        raw.src, raw.dst, n, undirected=cfg.undirected, dedup=cfg.dedup,
        remove_self_loops=cfg.self_loops == "remove", with_rows=attrs,
        order=None if raw.edge_time is None else time_key(raw.edge_time))
    timestamps = raw.timestamps
    if timestamps is None and raw.node_time is not None:
        timestamps = time_key(raw.node_time)  # int64 for ints/dates/times, else float64
    with warnings.catch_warnings():  # a streamed file is mapped read-only: torch warns
        warnings.simplefilter("ignore", UserWarning)
        x = torch.from_numpy(raw.x)
    graph = Graph.homogeneous(
        csr, x, torch.from_numpy(raw.y), num_classes,
        timestamps=None if timestamps is None else torch.from_numpy(timestamps),
        public_roles=None if raw.public_roles is None else torch.from_numpy(raw.public_roles))
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
    _finish_report(report, raw.public_roles, raw.class_names,
                   [raw.edges_where or raw.where] if raw.src.size == 0 else [])
    edge_attrs: dict[str, pa.Array] = {}
    if attrs:  # each stored edge's weight / timestamp from the input row behind it
        rows = pa.array(edge_report.rows)
        if raw.edge_weight is not None:
            edge_attrs["weight"] = raw.edge_weight.take(rows)
        if raw.edge_time is not None:
            edge_attrs["timestamp"] = raw.edge_time.take(rows)
    return Prepared(graph=graph, report=report,
                    node_ids={} if raw.node_ids is None else {None: raw.node_ids},
                    node_time={} if raw.node_time is None else {None: raw.node_time},
                    edge_attrs=edge_attrs, class_values=raw.class_values)


# ------------------------------------------------------------------------------------ typed graphs
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


def build_typed(raw: RawTypedGraph, cfg: DatasetParams) -> Prepared:
    """Validate a typed source's raw graph and apply ``cfg``'s policies (module docstring)."""
    sizes = {t: n.num_nodes for t, n in raw.nodes.items()}
    if layout_of(list(sizes), list(raw.relations)) == HOMOGENEOUS:  # graph.json could not tell
        raise ValueError(f"{raw.relations[EDGE].where}: node type {NODE!r} with relation "
                         f"{edge_type_name(EDGE)!r} alone is how a homogeneous graph is "
                         "described; rename the type or relation, or use dataset.layout: "
                         "homogeneous")
    if sizes[raw.target] == 0:
        raise ValueError(f"{raw.nodes[raw.target].where}: the target node type {raw.target!r} "
                         "has no nodes")
    csr, edge_time, reverse = {}, {}, {}
    input_edges = duplicates = loops = 0
    for edge_type, rel in raw.relations.items():
        s, r, d = edge_type
        same = s == d  # undirected pairs and self-loops exist inside one type only
        time = None if rel.time is None else int_times(rel.time, rel.where)
        csr[edge_type], edges = normalize_edges(
            rel.src, rel.dst, sizes[d], num_src=sizes[s], undirected=same and cfg.undirected,
            dedup=cfg.dedup, remove_self_loops=same and cfg.self_loops == "remove",
            order=time, with_rows=time is not None, copies="as_given")
        input_edges += edges.input_edges
        duplicates += edges.duplicates_removed
        loops += edges.self_loops_removed
        if time is not None:
            edge_time[edge_type] = torch.from_numpy(time[edges.rows])
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
        flip_dst, flip_src = edge_pairs(csr[edge_type])
        csr[rev], flipped = normalize_edges(flip_src, flip_dst, sizes[s], num_src=sizes[d],
                                            undirected=False, dedup=False,
                                            remove_self_loops=False, with_rows=True)
        if time is not None:
            edge_time[rev] = edge_time[edge_type][torch.from_numpy(flipped.rows)]
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
    if raw.labelled and cfg.task == "node":
        check_classes(y[y >= 0], raw.nodes[raw.target].where)
    node_time = {t: torch.from_numpy(int_times(n.time, n.where)) for t, n in raw.nodes.items()
                 if n.time is not None}
    graph = Graph(
        x=x, csr=csr, target=raw.target, y=torch.from_numpy(y), num_classes=num_classes,
        reverse=reverse, link_edge_type=_link_edge_type(cfg, raw, list(csr)),
        node_time=node_time, edge_time=edge_time,
        public_roles=None if raw.public_roles is None else torch.from_numpy(raw.public_roles))
    received = sum((c.degrees() for e, c in csr.items() if e[2] == raw.target),
                   torch.zeros(sizes[raw.target], dtype=torch.int64))
    report = {
        "source": cfg.source, "layout": TYPED, "target": raw.target,
        "nodes": graph.num_nodes, "edges": sum(c.num_edges for c in csr.values()),
        "features": int(x[raw.target].shape[1]), "classes": num_classes,
        "undirected": cfg.undirected, "input_edges": int(input_edges),
        "duplicates_removed": duplicates, "self_loops_removed": loops,
        "isolated_nodes": int((received == 0).sum()),  # target nodes no edge type points into
        "node_types": sizes, "edge_types": {edge_type_name(e): c.num_edges for e, c in csr.items()},
        "link_edge_type": edge_type_name(graph.link_edge_type), "featureless": featureless,
        "node_time": list(node_time), "edge_time": [edge_type_name(e) for e in edge_time],
        "labelled": raw.labelled}
    _finish_report(report, raw.public_roles, raw.class_names,
                   [rel.where for rel in raw.relations.values() if rel.src.size == 0])
    return Prepared(graph=graph, report=report,
                         node_ids={t: n.ids for t, n in raw.nodes.items() if n.ids is not None},
                         node_time={t: n.time for t, n in raw.nodes.items() if n.time is not None},
                         class_values=raw.class_values)


def build_synthetic_typed(cfg: DatasetParams, seed: int) -> Prepared:
    """The built-in typed graph (``gnnpipe.data.synthetic.generate_typed``) and its report."""
    graph, counts = synthetic.generate_typed(cfg, make_rng(seed, "prepare"))
    target = graph.target
    degrees = graph.csr[graph.self_relation()].degrees()
    report = {
        "source": "synthetic", "layout": TYPED, "target": target,
        "nodes": graph.num_nodes, "edges": sum(c.num_edges for c in graph.csr.values()),
        "features": int(graph.x[target].shape[1]), "classes": graph.num_classes,
        "undirected": True,  # cites is stored both ways, other relations with their reverse
        "duplicates_removed": counts["cites_duplicates_removed"]
        + counts["writes_duplicates_removed"],
        "self_loops_removed": counts["cites_self_loops_removed"],
        "isolated_nodes": int((degrees == 0).sum()),  # of the target type, over its relation
        "node_types": graph.num_nodes_dict,
        "edge_types": {edge_type_name(e): c.num_edges for e, c in graph.csr.items()},
        **counts}
    return Prepared(graph=graph, report=report)
