"""The tests' whole-graph prepare: a source's graph read whole and built in memory, the oracle
the block prepare (gnnpipe/data/prepare_tables.py, the library's one prepare) is checked against,
and the maker of the in-memory ``Prepared`` graphs many tests start from.

``prepare_dataset(cfg, seed)``: ``load`` (the built-in graphs drawn by the library's own streams,
``gnnpipe.sources.builtin``; the user's tables read whole here; any other source by its library
reader) then ``build``, which validates the raw graph and applies the edge policies, labels and
times with ``normalize_edges`` (below), as the block prepare does:

* a relation between two types is stored as given and, when undirected, also flipped as its
  reverse ``rev_<rel>``; a relation inside one type is stored in both directions when undirected
  and is its own reverse (a homogeneous graph's is, directed or not); self-loops apply to it only;
* ``dedup`` merges repeated pairs; a merged edge keeps its earliest timestamp, then its first
  row (its weight and time follow); without dedup, copies take their rows by (timestamp, row).

A featureless node type gets ``dataset.typed.featureless`` (``degree``: log1p of its in-degree
per incoming edge type; ``constant``: ones). A homogeneous graph keeps node times as sortable
numbers and edge columns as read; a typed graph stores int64 times (floats must be whole).
``prepare_whole(params, out)`` writes such a graph's prepared files, as the prepare stage does.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from gnnpipe import io, sources
from gnnpipe.config import DatasetParams, EdgeTableParams
from gnnpipe.data.edges import csr_from_edges, edge_pairs, sorted_unique
from gnnpipe.data.graph import (EDGE, HOMOGENEOUS, NODE, ROLES, TYPED, UNLABELLED, Csr,
                                EdgeType, Graph, edge_type_name, layout_of, reverse_edge_type)
from gnnpipe.data.ids import blanks_as_nulls, to_id_type
from gnnpipe.data.prepare_tables import link_edge_type, reverse_taken
from gnnpipe.data.source_tables import check_classes, check_edge_ids, check_labels, validate_raw
from gnnpipe.runtime.progress import progress
from gnnpipe.sources import builtin
from gnnpipe.sources.base import (RawGraph, RawNodeType, RawRelation, check_finite,
                                  check_no_nulls, combine, first_null, is_numeric,
                                  is_timestamp_type, label_codes, no_edges_warning, time_key)
from gnnpipe.sources.base import int_times as int64_times
from gnnpipe.data.synthetic import PUBLISHED_IN, WRITES
from gnnpipe.sources.formats import CsvTables, ParquetTables
from gnnpipe.data.table_blocks import node_columns, node_spec
from gnnpipe.sources.tables import (check_table_path, edge_tables, relation_of, table_folder,
                                    table_layout, typed_target)
from prepared_oracle import write_edge_attrs, write_node_ids
from table_oracle import batches as table_batches, read_table

# the reverses prepare adds to the built-in typed graph with dataset.undirected
REV_WRITES, REV_PUBLISHED_IN = reverse_edge_type(WRITES), reverse_edge_type(PUBLISHED_IN)


# ---------------------------------------------------------------------------- the edge policies
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


def normalize_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, *, undirected: bool,
                    dedup: bool, remove_self_loops: bool, num_src: int | None = None,
                    order: np.ndarray | None = None, with_rows: bool = False
                    ) -> tuple[Csr, EdgeReport]:
    """Apply a graph's edge policies to its input rows and build the CSR, whole (the block
    prepare's rule, gnnpipe/data/block_graph.py): both graph kinds (a homogeneous graph, each
    relation of a typed one).

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
    csr = csr_from_edges(src, dst, num_nodes, num_src)
    if rows is not None:  # into csr_from_edges's order: by dst, then src, copies as they came
        rows = rows[np.argsort(dst * max(num_src, 1) + src, kind="stable")]
    report = EdgeReport(input_edges=input_edges, self_loops_removed=loops_removed,
                        duplicates_removed=dups_removed, output_edges=csr.num_edges, rows=rows)
    return csr, report


# ------------------------------------------------------------------------------------ the load
@dataclass(frozen=True)
class TableNodeType(RawNodeType):
    """A node type read from the user's table: ``ids`` (N,) its ids as read."""

    ids: pa.Array | None = None


@dataclass(frozen=True)
class TableRelation(RawRelation):
    """A relation read from the user's table (or a test's): its ``time`` / ``weight`` (E,)
    columns as read (Arrow)."""

    time: pa.Array | None = None
    weight: pa.Array | None = None


def prepare(cfg: DatasetParams, seed: int) -> tuple[Graph, dict]:
    """``cfg.source``'s graph built whole: the graph and ``prepare.json``."""
    prepared = prepare_dataset(cfg, seed)
    return prepared.graph, prepared.report


def prepare_dataset(cfg: DatasetParams, seed: int) -> "Prepared":
    """``prepare`` plus the extras of user tables (original ids, edge weights / timestamps)."""
    return build(load(cfg, seed), cfg)


def load(cfg: DatasetParams, seed: int) -> RawGraph:
    """The raw graph of ``cfg.source``: the built-in graph of ``cfg.layout`` (the library's
    streams, ``builtin.homogeneous`` / ``builtin.typed_graph``), the user's tables read whole
    (``read`` / ``read_typed``), or a library reader's graph (``sources.load``)."""
    if cfg.source == "synthetic":
        if cfg.layout == TYPED:
            return builtin.typed_graph(cfg.synthetic, seed)
        raw = builtin.homogeneous(cfg.synthetic, seed)
        time = raw.get("timestamps")
        return raw_homogeneous(raw["x"], raw["y"], raw["src"], raw["dst"], builtin.WHERE,
                               time=None if time is None else pa.array(time))
    if cfg.source in ("parquet", "csv"):
        return read_typed(cfg) if cfg.layout == TYPED else read(cfg)
    return sources.load(cfg)


# ------------------------------------------------------------------------------------ the build
@dataclass(frozen=True)
class Prepared:
    """The graph, ``prepare.json`` and, for user tables, what joins it back: ``node_ids`` /
    ``node_time`` per node type (N_t,) as read; ``edge_attrs`` per edge type, weight /
    timestamp (E,) as read in CSR order; ``featureless``: the types without feature columns."""

    graph: Graph
    report: dict
    node_ids: dict[str, pa.Array] = field(default_factory=dict)
    node_time: dict[str, pa.Array] = field(default_factory=dict)
    class_values: pa.Array | None = None  # (C,) the user's label of each code; None: 0..C-1
    edge_attrs: dict[EdgeType, dict[str, pa.Array]] = field(default_factory=dict)
    featureless: tuple[str, ...] = ()


def check_features(x: np.ndarray, where: str) -> None:
    """``x`` float (N, F) is 2-D and finite (as every library reader checks its features)."""
    if x.ndim != 2:
        raise ValueError(f"{where}: features must be a 2-D (nodes, features) array, got shape "
                         f"{x.shape}")
    bad_rows = ~np.isfinite(x).all(axis=1)
    if bad_rows.any():
        raise ValueError(f"{where}: features contain NaN or inf in {int(bad_rows.sum())} rows "
                         f"(first: node {int(np.argmax(bad_rows))})")


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


def int_times(column: pa.Array, where: str) -> np.ndarray:
    """A timestamp column as int64 (N,); a float column must hold whole numbers."""
    return int64_times(time_key(column), where)


def _featureless(graph_csr: dict, node_type: str, n: int, mode: str) -> np.ndarray:
    """Default features float32 (N, k) of a type without feature columns (module docstring)."""
    incoming = [e for e in graph_csr if e[2] == node_type]
    if mode == "constant" or not incoming:
        return np.ones((n, 1), dtype=np.float32)
    degrees = np.stack([graph_csr[e].degrees().numpy() for e in incoming], axis=1)
    return np.log1p(degrees).astype(np.float32)


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
                    node_ids={t: n.ids for t, n in raw.nodes.items()
                              if getattr(n, "ids", None) is not None},
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
        if not isinstance(rel, TableRelation):  # a library source's: no edge columns
            rel = TableRelation(rel.src, rel.dst, rel.where)
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
    strings = raw.class_values is not None and pa.types.is_string(raw.class_values.type)
    return _finish_report(report, raw.public_roles,
                          [str(v) for v in raw.class_values.to_pylist()] if strings else None,
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


# ------------------------------------------------------------- the whole-table readers
class IdLookup:
    """The user's node ids -> ``0..N-1`` (the row of the node table); -1 for an unknown id.

    Integer ids spanning at most ``TABLE_SPAN`` times N go through a dense table (one gather per
    edge end, ~10x faster than a binary search on random queries); wider ids through a sorted
    copy and ``searchsorted``; string ids through Arrow's hash lookup.
    """

    TABLE_SPAN = 16

    def __init__(self, ids: pa.Array):
        self.type = ids.type
        self.n = len(ids)
        self._strings = None if pa.types.is_integer(ids.type) else ids
        self._table = self._sorted = None
        if self._strings is None and self.n:
            values = ids.to_numpy().astype(np.int64)
            self._low = int(values.min())
            span = int(values.max()) - self._low + 1
            if span <= self.TABLE_SPAN * self.n:
                self._table = np.full(span, -1, dtype=np.int64 if self.n >= 2**31 else np.int32)
                self._table[values - self._low] = np.arange(self.n)
            else:
                self._order = np.argsort(values, kind="stable")
                self._sorted = values[self._order]

    def __call__(self, column: pa.Array) -> np.ndarray:
        """int64 (len(column),); ``column`` has no nulls."""
        if self._strings is not None:
            return pc.index_in(column, value_set=self._strings).fill_null(-1).to_numpy() \
                .astype(np.int64)
        values = column.to_numpy().astype(np.int64)
        if self.n == 0:
            return np.full(values.size, -1, dtype=np.int64)
        if self._table is not None:
            offset = values - self._low
            inside = (offset >= 0) & (offset < self._table.size)
            out = np.full(values.size, -1, dtype=np.int64)
            out[inside] = self._table[offset[inside]]
            return out
        pos = np.minimum(np.searchsorted(self._sorted, values), self.n - 1)
        return np.where(self._sorted[pos] == values, self._order[pos], -1)


def _as_id_type(column: pa.Array, id_type: pa.DataType, path: Path, name: str
                ) -> tuple[pa.Array, np.ndarray | None]:
    """The column as the node ids' type and its rows that name no node (text that is not a
    canonical integer, against integer ids); ``gnnpipe.data.ids.to_id_type``."""
    try:
        return to_id_type(column, id_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise ValueError(f"{path}: edge column {name!r} is {column.type} but the node ids are "
                         f"{id_type}") from None


def read(cfg: DatasetParams) -> RawGraph:
    root = table_folder(cfg)
    fmt = cfg.source
    tables = ParquetTables() if fmt == "parquet" else CsvTables()
    nodes_path = root / (cfg.nodes.file or f"nodes.{fmt}")
    edges_path = root / (cfg.edges.file or f"edges.{fmt}")
    check_table_path(nodes_path, "nodes", cfg)
    nodes, label = read_nodes(tables, nodes_path, cfg, typed=False)
    y, class_values = label_codes(label, nodes_path, cfg.nodes.label, cfg.nodes.unlabeled_values,
                                  cfg.max_classes)
    ids = nodes.ids

    lookup = (IdLookup(ids), nodes_path)
    check_table_path(edges_path, "edges", cfg)
    src, dst, weight, edge_time = read_edges(tables, edges_path, cfg.edges,
                                             {"src": lookup, "dst": lookup}, cfg.nodes.id)
    return raw_homogeneous(nodes.x, y, src, dst, str(root), ids=ids, time=nodes.time,
                           edge_weight=weight, edge_time=edge_time, edges_where=str(edges_path),
                           class_values=class_values)


def raw_homogeneous(x: np.ndarray, y: np.ndarray, src: np.ndarray, dst: np.ndarray, where: str,
                    *, ids: pa.Array | None = None, time: pa.Array | None = None,
                    edge_time: pa.Array | None = None, edge_weight: pa.Array | None = None,
                    edges_where: str | None = None, **fields) -> RawGraph:
    """``RawGraph.homogeneous`` with the columns a table reader adds: node ``ids`` / ``time``
    (N,) and ``edge_time`` / ``edge_weight`` (E,) as read, the edges' file ``edges_where``
    (default ``where``); ``fields``: the ``RawGraph``'s own (``class_values``...)."""
    raw = RawGraph.homogeneous(x, y, src, dst, where)
    node = TableNodeType(num_nodes=len(x), x=x, where=where, ids=ids, time=time)
    edges = TableRelation(src, dst, edges_where or where, time=edge_time, weight=edge_weight)
    return replace(raw, nodes={NODE: node}, relations={EDGE: edges}, **fields)


def check_timestamps(column: pa.Array, file: Path | str, name: str, offset: int = 0) -> pa.Array:
    """A timestamp column: ints, floats, dates or timestamps, no nulls, no NaN (the block
    prepare's ``gnnpipe.data.table_blocks._times``, on a whole column)."""
    column = combine(column)
    dtype = column.type
    if not is_timestamp_type(dtype):
        raise ValueError(f"{file}: timestamp column {name!r} is {dtype}; expected integers, "
                         f"floats, dates or timestamps")
    check_no_nulls(column, file, name, "timestamp", offset)
    if pa.types.is_floating(dtype):
        check_finite(column.to_numpy(), file, [name], "timestamp", offset)
    return column


def node_ids(column: pa.Array | pa.ChunkedArray, path: Path, name: str) -> pa.Array:
    """The id column: integers or strings, no nulls, no repeats (the block prepare's checks,
    ``gnnpipe.data.table_blocks.scan_nodes`` and ``block_ids.join_bucket``, on a whole column)."""
    column = combine(column)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    check_no_nulls(column, path, name, "id")
    if not (pa.types.is_integer(column.type) or pa.types.is_string(column.type)
            or pa.types.is_large_string(column.type)):
        raise ValueError(f"{path}: id column {name!r} is {column.type}; expected integer or "
                         f"string ids")
    distinct = pc.count_distinct(column).as_py()
    if distinct != len(column):
        counts = pc.value_counts(column)
        repeated = counts.filter(pc.greater(counts.field("counts"), 1))
        raise ValueError(f"{path}: id column {name!r} has repeated ids (first: "
                         f"{repeated[0]['values'].as_py()!r}, {len(column) - distinct} extra rows)")
    return column


def read_nodes(tables, path: Path, cfg: DatasetParams, *, typed: bool
               ) -> tuple[RawNodeType, pa.ChunkedArray | None]:
    """One node table: its nodes (ids, features, time) and its label column, parsed by the
    caller (None without one). ``typed``: only the id column is required; a table without the
    feature / label / timestamp columns is featureless (``x`` None) / unlabelled / untimed."""
    spec = cfg.nodes
    columns = node_spec(tables.schema(path), cfg, path, typed=typed)
    table = read_table(tables, path, node_columns(columns), ids=(spec.id,))
    ids = node_ids(table.column(spec.id), path, spec.id)
    x = features(table, columns.features, columns.is_list, path) if columns.features else None
    time = (check_timestamps(table.column(spec.timestamp), path, spec.timestamp)
            if columns.timestamp else None)
    label = table.column(spec.label) if columns.label else None
    return TableNodeType(num_nodes=len(ids), x=x, where=str(path), ids=ids, time=time), label


def read_edges(tables, path: Path, spec: EdgeTableParams,
               lookups: dict[str, tuple[IdLookup, Path]], id_name: str, *,
               timestamp: bool = True
               ) -> tuple[np.ndarray, np.ndarray, pa.Array | None, pa.Array | None]:
    """Stream the edge table: ``src``/``dst`` int64 (E,) in ``[0, N_src)`` / ``[0, N_dst)``,
    optional weight / time. ``lookups``: "src" / "dst" -> (the ids of that end's node table, its
    path); ``timestamp`` False skips ``spec.timestamp`` (a typed table without that column)."""
    key_of = {spec.src: "src", spec.dst: "dst"}
    for key in ("weight", "timestamp"):
        if getattr(spec, key) and (key != "timestamp" or timestamp):
            key_of[getattr(spec, key)] = key
    batches, total = table_batches(tables, path, list(key_of), key_of)
    ends: dict[str, list[np.ndarray]] = {"src": [], "dst": []}
    weights: list[pa.Array] = []
    times: list[pa.Array] = []
    row = 0  # file row of the chunk's first row, for messages
    bar = progress(None, total=total, unit=" rows", unit_scale=True, desc=f"reading {path.name}")
    try:
        for batch in batches:
            for key in ("src", "dst"):
                name = getattr(spec, key)
                lookup, nodes_path = lookups[key]
                given = combine(batch.column(name))
                column, foreign = _as_id_type(given, lookup.type, path, name)
                check_no_nulls(column, path, name, "edge", row)
                ids = lookup(column)
                if foreign is not None:
                    ids[foreign] = -1
                unknown = ids < 0
                if unknown.any():  # blank text cells are missing ids, named as nulls
                    check_no_nulls(blanks_as_nulls(given), path, name, "edge", row)
                    first = int(np.argmax(unknown))
                    raise ValueError(f"{path}: edge column {name!r} has node id "
                                     f"{given[first].as_py()!r} (row {row + first}) that is not "
                                     f"in the id column {id_name!r} of {nodes_path}")
                ends[key].append(ids)
            if spec.weight:
                weights.append(_weights(batch.column(spec.weight), path, spec.weight, row))
            if spec.timestamp and timestamp:
                times.append(check_timestamps(batch.column(spec.timestamp), path,
                                              spec.timestamp, row))
            row += batch.num_rows
            bar.update(batch.num_rows)
    finally:
        bar.close()
    empty = np.zeros(0, dtype=np.int64)
    src = np.concatenate(ends["src"]) if ends["src"] else empty
    dst = np.concatenate(ends["dst"]) if ends["dst"] else empty
    return (src, dst, pa.concat_arrays(weights) if weights else None,
            pa.concat_arrays(times) if times else None)


def _weights(column: pa.Array, path: Path, name: str, offset: int) -> pa.Array:
    if not is_numeric(column.type):
        raise ValueError(f"{path}: weight column {name!r} is {column.type}; expected numbers")
    check_no_nulls(column, path, name, "weight", offset)
    values = column.to_numpy(zero_copy_only=False).astype(np.float32)
    check_finite(values, path, [name], "weight", offset)
    return pa.array(values)


def read_typed(cfg: DatasetParams) -> RawGraph:
    """``dataset.layout: typed``: one node table per type, one edge table per relation."""
    typed = table_layout(cfg)
    tables, paths = typed.tables, typed.paths
    nodes, label_columns = {}, {}
    for node_type, path in paths.items():
        nodes[node_type], label = read_nodes(tables, path, cfg, typed=True)
        if label is not None:
            label_columns[node_type] = label
    target = typed_target(cfg, list(label_columns), paths, typed.nodes_dir)
    class_values = y = None
    if target in label_columns:
        y, class_values = label_codes(label_columns[target], paths[target], cfg.nodes.label,
                                      cfg.nodes.unlabeled_values, cfg.max_classes)
    else:  # link task without labels: the first type stands as target, one dummy class
        target = target or next(iter(nodes))
    del label_columns

    edge_paths = edge_tables(typed, cfg.source)
    lookups = {t: (IdLookup(n.ids), paths[t]) for t, n in nodes.items()}
    relations = {}
    for stem, path in edge_paths.items():
        edge_type = relation_of(stem, path, typed)
        timed = bool(cfg.edges.timestamp) and cfg.edges.timestamp in tables.schema(path).names
        src, dst, _, time = read_edges(tables, path, cfg.edges,
                                       {"src": lookups[edge_type[0]], "dst": lookups[edge_type[2]]},
                                       cfg.nodes.id, timestamp=timed)
        relations[edge_type] = TableRelation(src=src, dst=dst, where=str(path), time=time)
    n_target = nodes[target].num_nodes
    return RawGraph(nodes=nodes, relations=relations, target=target,
                    y=np.zeros(n_target, dtype=np.int64) if y is None else y,
                    where=str(Path(cfg.path)), class_values=class_values,
                    labelled=y is not None)


def features(table: pa.Table, names: list[str], is_list: bool, file: Path | str) -> np.ndarray:
    """Node features float32 (N, F) from one list column or several scalar columns."""
    if is_list:
        name = names[0]
        column = combine(table.column(name))
        check_no_nulls(column, file, name, "feature")
        lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
        if lengths.size and lengths.min() != lengths.max():
            bad = int(np.argmax(lengths != lengths[0]))
            raise ValueError(f"{file}: feature column {name!r} has lists of different lengths "
                             f"({lengths[0]} in row 0, {lengths[bad]} in row {bad})")
        flat = column.flatten()
        if not is_numeric(flat.type):
            raise ValueError(f"{file}: feature column {name!r} holds {flat.type}; expected numbers")
        if flat.null_count:
            row = first_null(flat) // max(int(lengths[0]), 1)
            raise ValueError(f"{file}: feature column {name!r} has null entries (first: row {row})")
        width = int(lengths[0]) if lengths.size else 0
        x = flat.to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(column), width)
    else:
        x = np.empty((table.num_rows, len(names)), dtype=np.float32)
        for j, name in enumerate(names):
            column = combine(table.column(name))
            check_no_nulls(column, file, name, "feature")
            x[:, j] = column.to_numpy(zero_copy_only=False)
    check_finite(x, file, names, "feature")
    return x


# --------------------------------------------------------------------------- the files
def prepare_whole(params, out: Path) -> dict:
    """The graph of ``params.dataset`` whole in this process (``prepare_dataset``), its files
    into ``out`` as the prepare stage writes them; ``prepare.json``."""
    dataset = params.dataset
    storage = dataset.storage
    prepared = prepare_dataset(dataset, params.seed)
    graph, report = prepared.graph, prepared.report
    io.write_prepared(out, graph, feature_dtype=storage.feature_dtype,
                      compression=storage.compression, features=storage.features,
                      featureless=prepared.featureless)
    for node_type, ids in prepared.node_ids.items():
        write_node_ids(out, node_type, ids, prepared.node_time.get(node_type),
                       storage.compression)
    if graph.layout == HOMOGENEOUS and EDGE in prepared.edge_attrs:  # typed: in graph.pt
        src, dst = graph.csr[EDGE].edge_index().numpy()
        write_edge_attrs(out, EDGE, src, dst, prepared.edge_attrs[EDGE], storage.compression)
    classes = (pa.array(np.arange(graph.num_classes, dtype=np.int64))
               if prepared.class_values is None else prepared.class_values)
    io.write_classes(out, classes, storage.compression)
    labelled, total = int((graph.y >= 0).sum()), int(graph.y.numel())
    report["labelled_nodes"] = labelled
    report["label_coverage"] = {"labelled": labelled, "unlabelled": total - labelled,
                                "labelled_fraction": round(labelled / max(total, 1), 6)}
    return report


# ------------------------------------------------------------------------- edge-set checks
def edge_keys(csr: Csr) -> torch.Tensor:
    """One int64 per directed edge of ``csr``, ``src * N + dst``, sorted ascending; for set tests."""
    return torch.sort(csr.indices * csr.num_nodes + csr.targets()).values


def restrict(csr: Csr, keep_nodes: torch.Tensor) -> Csr:
    """``csr`` with the same node ids and only the edges whose both endpoints have ``keep_nodes``
    (bool (N,)) set."""
    keep_edge = keep_nodes[csr.indices] & keep_nodes[csr.targets()]
    indptr = torch.zeros(csr.num_nodes + 1, dtype=torch.int64)
    counts = torch.bincount(csr.targets()[keep_edge], minlength=csr.num_nodes)
    indptr[1:] = torch.cumsum(counts, 0)
    return Csr(indptr, csr.indices[keep_edge].clone())
