"""``dataset.source: parquet | csv``: the user's node and edge tables under ``dataset.path``.

A homogeneous graph is the one-type case: one node table and one edge table (``read``). With
``dataset.layout: typed`` (``read_typed``) there is one table per node type and one per
relation::

    nodes/<type>.parquet             one row per node: id, features, label (target), timestamp
    edges/<src>__<rel>__<dst>.parquet  one row per edge: src (ids of <src>), dst (ids of <dst>)

(``.csv`` / ``.csv.gz`` for ``source: csv``; a folder ``<type>.parquet/`` of parts works too;
``dataset.nodes.file`` / ``dataset.edges.file`` rename the two folders.) The column options
(``dataset.nodes.*``, ``dataset.edges.*``) apply to every table; in a typed node table the
feature, label and timestamp columns are optional (featureless, unlabelled, untimed types). The
node table with the label column is the target (``dataset.typed.target`` picks one when several
have it).

A node table (one row per node: id, features, label, optional timestamp) is read whole, since
its features end up in memory anyway. An edge table is streamed: Parquet row groups or CSV blocks
of ``EDGE_BATCH_ROWS`` rows, read as Arrow columns (never through Python objects), its ids mapped
to ``0..N-1`` chunk by chunk. Node ``i`` (of a type) is row ``i`` of its node table; the original
ids are kept for ``node_ids_<type>.parquet``.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gnnpipe.config import DatasetParams, EdgeTableParams
from gnnpipe.data.ids import blanks_as_nulls, to_id_type
from gnnpipe.runtime.progress import progress
from gnnpipe.sources.base import (RawGraph, RawNodeType, RawRelation,
                                  check_finite, check_no_nulls, check_timestamps, combine,
                                  feature_columns, features, is_numeric, label_codes,
                                  require_file, split_edge_type)
from gnnpipe.sources.formats import CsvTables, ParquetTables
from gnnpipe.data.graph import check_name

SUFFIXES = {"parquet": (".parquet",), "csv": (".csv", ".csv.gz", ".csv.bz2")}


# ---------------------------------------------------------------------------------------- ids
def node_ids(column: pa.Array | pa.ChunkedArray, path: Path, name: str) -> pa.Array:
    """The id column: integers or strings, no nulls, no repeats."""
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


# --------------------------------------------------------------------------------------- read
def table_folder(cfg: DatasetParams) -> Path:
    """``dataset.path``, the folder of the node and edge tables; else one line naming it."""
    if not Path(cfg.path).is_dir():
        raise ValueError(f"dataset.path={cfg.path!r} is not a folder; dataset.source="
                         f"{cfg.source} reads the node and edge tables (dataset.nodes.file, "
                         f"dataset.edges.file) from a folder")
    return Path(cfg.path)


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
    class_names = ([str(v) for v in class_values.to_pylist()]
                   if pa.types.is_string(class_values.type) else None)
    ids = nodes.ids

    lookup = (IdLookup(ids), nodes_path)
    check_table_path(edges_path, "edges", cfg)
    src, dst, weight, edge_time = read_edges(tables, edges_path, cfg.edges,
                                             {"src": lookup, "dst": lookup}, cfg.nodes.id)
    return RawGraph.homogeneous(nodes.x, y, src, dst, str(root), ids=ids, time=nodes.time,
                                edge_weight=weight, edge_time=edge_time,
                                edges_where=str(edges_path), class_names=class_names,
                                class_values=class_values)


def read_nodes(tables, path: Path, cfg: DatasetParams, *, typed: bool
               ) -> tuple[RawNodeType, pa.ChunkedArray | None]:
    """One node table: its nodes (ids, features, time) and its label column, parsed by the
    caller (None without one). ``typed``: only the id column is required; a table without the
    feature / label / timestamp columns is featureless (``x`` None) / unlabelled / untimed."""
    spec = cfg.nodes
    columns = node_table_columns(tables.schema(path), cfg, path, typed=typed)
    wanted = [spec.id] + ([columns.label] if columns.label else []) + columns.features \
        + ([columns.timestamp] if columns.timestamp else [])
    table = tables.read(path, list(dict.fromkeys(wanted)), ids=(spec.id,))
    ids = node_ids(table.column(spec.id), path, spec.id)
    x = features(table, columns.features, columns.is_list, path) if columns.features else None
    time = (check_timestamps(table.column(spec.timestamp), path, spec.timestamp)
            if columns.timestamp else None)
    label = table.column(spec.label) if columns.label else None
    return RawNodeType(num_nodes=len(ids), x=x, where=str(path), ids=ids, time=time), label


@dataclass(frozen=True)
class NodeColumns:
    """The columns a node table is read with: ``label`` / ``timestamp`` ("" when the table has
    none), ``features`` (none: featureless), ``is_list`` (one list column)."""

    label: str
    timestamp: str
    features: list[str]
    is_list: bool


def node_table_columns(schema: pa.Schema, cfg: DatasetParams, path: Path, *, typed: bool
                       ) -> NodeColumns:
    """The columns of a node table of ``schema`` (``read_nodes``; the block-wise prepare reads
    the same ones), else one line naming the missing column's key."""
    spec = cfg.nodes
    named = {"id": spec.id, "label": spec.label, "timestamp": spec.timestamp}
    for key, name in named.items():
        if name and name not in schema.names and (key == "id" or not typed):
            raise ValueError(f"{path}: missing column {name!r} (dataset.nodes.{key}); "
                             f"columns: {', '.join(schema.names)}")
    has = {key: bool(name) and name in schema.names for key, name in named.items()}
    feature_names, is_list = [], False
    if not typed or _has_features(schema, spec.features, set(named.values())):
        feature_names, is_list = feature_columns(schema, spec.features, set(named.values()),
                                                 path, "dataset.nodes.features")
    return NodeColumns(label=spec.label if has["label"] else "",
                       timestamp=spec.timestamp if has["timestamp"] else "",
                       features=feature_names, is_list=is_list)


def _has_features(schema: pa.Schema, spec: str, exclude: set[str]) -> bool:
    """Whether any part of ``dataset.nodes.features`` names a column of this table."""
    if spec in schema.names:
        return True
    return any(fnmatch.fnmatchcase(c, part.strip()) and c not in exclude
               for part in spec.split(",") for c in schema.names)


def check_table_path(path: Path, table: str, cfg: DatasetParams) -> None:
    """The node or edge table exists and is a file (a Parquet table may be a folder of parts),
    else one line naming its key."""
    if not path.exists() or (path.is_dir() and cfg.source != "parquet"):
        require_file(path, f"dataset.{table}.file; dataset.source={cfg.source} reads the node "
                           f"and edge tables from dataset.path={cfg.path!r}")


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
    batches, total = tables.batches(path, list(key_of),
                                    {k: lookups[k][0].type for k in ("src", "dst")}, key_of)
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


# -------------------------------------------------------------------------------- typed
def table_entries(folder: Path, fmt: str) -> dict[str, Path]:
    """Stem -> path of every table in ``folder`` (files, or parquet folders of parts), by name."""
    found: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        suffix = next((s for s in SUFFIXES[fmt] if path.name.endswith(s)), None)
        if suffix is None or path.name.startswith("."):
            continue
        if path.is_dir() and fmt != "parquet":  # only Parquet tables may be folders of parts
            raise ValueError(f"{path} is a directory; expected a file (a table of "
                             f"{folder.name}/ with dataset.source={fmt})")
        stem = path.name[:-len(suffix)]
        if stem in found:
            raise ValueError(f"{path}: table {stem!r} given twice (also {found[stem]})")
        found[stem] = path
    return found


def typed_target(cfg: DatasetParams, labelled: list[str], paths: dict[str, Path],
                 nodes_dir: Path) -> str | None:
    """The labelled node type (``dataset.typed.target`` or the one table with the label)."""
    wanted, label = cfg.typed.target, cfg.nodes.label
    if wanted:
        if wanted not in paths:
            raise ValueError(f"dataset.typed.target={wanted!r} has no node table in {nodes_dir} "
                             f"(node types: {', '.join(paths)})")
        if wanted not in labelled and cfg.task == "node":
            raise ValueError(f"{paths[wanted]}: missing label column {label!r} "
                             f"(dataset.nodes.label) in the table of the target node type "
                             f"{wanted!r}")
        return wanted
    if len(labelled) > 1:
        raise ValueError(f"{nodes_dir}: node tables {', '.join(labelled)} all have the label "
                         f"column {label!r}; set dataset.typed.target to the labelled type")
    if labelled:
        return labelled[0]
    if cfg.task == "node":
        raise ValueError(f"{nodes_dir}: no node table has the label column {label!r} "
                         f"(dataset.nodes.label); node classification needs it on the target "
                         f"type (node types: {', '.join(paths)})")
    return None


@dataclass(frozen=True)
class TypedTables:
    """Where a typed graph's tables are: the reader of ``dataset.source``, the two folders and
    each node type's table (name order)."""

    tables: object  # ParquetTables | CsvTables
    nodes_dir: Path
    edges_dir: Path
    paths: dict[str, Path]


def typed_tables(cfg: DatasetParams) -> TypedTables:
    """The node tables of ``dataset.layout: typed``, else one line (no folder, no tables, a bad
    type name)."""
    root = Path(cfg.path)
    fmt = cfg.source
    if not root.is_dir():
        raise ValueError(f"dataset.path={cfg.path!r} is not a folder; dataset.layout=typed reads "
                         f"nodes/<type>.{fmt} and edges/<src>__<rel>__<dst>.{fmt} from a folder")
    tables = ParquetTables() if fmt == "parquet" else CsvTables()
    nodes_dir, edges_dir = root / (cfg.nodes.file or "nodes"), root / (cfg.edges.file or "edges")
    paths = table_entries(nodes_dir, fmt) if nodes_dir.is_dir() else {}
    if not paths:
        raise ValueError(f"{nodes_dir}: no node tables; dataset.layout=typed needs one "
                         f"<type>{SUFFIXES[fmt][0]} per node type in this folder")
    for node_type, path in paths.items():
        check_name(node_type, f"{path}: node type")
    return TypedTables(tables, nodes_dir, edges_dir, paths)


def edge_tables(typed: TypedTables, fmt: str) -> dict[str, Path]:
    """Stem -> path of every relation's table, else one line."""
    edge_paths = table_entries(typed.edges_dir, fmt) if typed.edges_dir.is_dir() else {}
    if not edge_paths:
        raise ValueError(f"{typed.edges_dir}: no edge tables; dataset.layout=typed needs one "
                         f"<src>__<relation>__<dst>{SUFFIXES[fmt][0]} per relation here")
    return edge_paths


def relation_of(stem: str, path: Path, typed: TypedTables) -> tuple[str, str, str]:
    """The edge type a relation's table name gives, else one line."""
    return split_edge_type(
        stem, "__", path, "an edge table is named <src>__<relation>__<dst> (node types and "
        "a relation joined by double underscores)", typed.paths,
        f"has no node table in {typed.nodes_dir} (node types: {', '.join(typed.paths)})")


def read_typed(cfg: DatasetParams) -> RawGraph:
    """``dataset.layout: typed``: one node table per type, one edge table per relation."""
    typed = typed_tables(cfg)
    tables, paths = typed.tables, typed.paths
    nodes, label_columns = {}, {}
    for node_type, path in paths.items():
        nodes[node_type], label = read_nodes(tables, path, cfg, typed=True)
        if label is not None:
            label_columns[node_type] = label
    target = typed_target(cfg, list(label_columns), paths, typed.nodes_dir)
    class_names = class_values = y = None
    if target in label_columns:
        y, class_values = label_codes(label_columns[target], paths[target], cfg.nodes.label,
                                      cfg.nodes.unlabeled_values, cfg.max_classes)
        if pa.types.is_string(class_values.type):
            class_names = [str(v) for v in class_values.to_pylist()]
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
        relations[edge_type] = RawRelation(src=src, dst=dst, where=str(path), time=time)
    n_target = nodes[target].num_nodes
    return RawGraph(nodes=nodes, relations=relations, target=target,
                    y=np.zeros(n_target, dtype=np.int64) if y is None else y,
                    where=str(Path(cfg.path)), class_names=class_names,
                    class_values=class_values, labelled=y is not None)
