"""``dataset.layout: typed`` with ``dataset.source: parquet | csv``: one table per node type and
one per relation, under ``dataset.path``::

    nodes/<type>.parquet             one row per node: id, features, label (target), timestamp
    edges/<src>__<rel>__<dst>.parquet  one row per edge: src (ids of <src>), dst (ids of <dst>)

(``.csv`` / ``.csv.gz`` for ``source: csv``; a folder ``<type>.parquet/`` of parts works too;
``dataset.nodes.file`` / ``dataset.edges.file`` rename the two folders.) The column options of
the homogeneous tables (``dataset.nodes.*``, ``dataset.edges.*``) apply to every table. Ids of
each type (int or string, any order) map to ``0..N_t-1`` in row order; a node table without the
feature columns is featureless, one without the timestamp column has no times. The node table
with the label column is the target (``dataset.typed.target`` picks one when several have it).
Node tables are read whole, edge tables streamed (``gnnpipe.sources.tables.read_edges``).
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import numpy as np
import pyarrow as pa

from gnnpipe.config import DatasetParams
from gnnpipe.sources.base import (RawNodeType, RawRelation, RawTypedGraph, check_timestamps,
                                  feature_columns, features, label_codes)
from gnnpipe.sources.tables import CsvTables, IdLookup, ParquetTables, node_ids, read_edges
from gnnpipe.typed_graph import check_name

SUFFIXES = {"parquet": (".parquet",), "csv": (".csv", ".csv.gz", ".csv.bz2")}


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


def _has_features(schema: pa.Schema, spec: str, exclude: set[str]) -> bool:
    """Whether any part of ``dataset.nodes.features`` names a column of this table."""
    if spec in schema.names:
        return True
    return any(fnmatch.fnmatchcase(c, part.strip()) and c not in exclude
               for part in spec.split(",") for c in schema.names)


def _read_nodes(tables, path: Path, cfg: DatasetParams
                ) -> tuple[RawNodeType, pa.ChunkedArray | None]:
    """One node table: its node type (ids, features or None, time) and its label column (None
    without one; parsed only for the target)."""
    spec = cfg.nodes
    schema = tables.schema(path)
    if spec.id not in schema.names:
        raise ValueError(f"{path}: missing column {spec.id!r} (dataset.nodes.id); columns: "
                         f"{', '.join(schema.names)}")
    has_label = spec.label in schema.names
    has_time = bool(spec.timestamp) and spec.timestamp in schema.names
    named = {spec.id, spec.label, spec.timestamp}
    feature_names, is_list = ([], False)
    if _has_features(schema, spec.features, named):
        feature_names, is_list = feature_columns(schema, spec.features, named, path,
                                                 "dataset.nodes.features")
    wanted = [spec.id] + ([spec.label] if has_label else []) + feature_names \
        + ([spec.timestamp] if has_time else [])
    table = tables.read(path, list(dict.fromkeys(wanted)), ids=(spec.id,))
    ids = node_ids(table.column(spec.id), path, spec.id)
    x = features(table, feature_names, is_list, path) if feature_names else None
    time = check_timestamps(table.column(spec.timestamp), path, spec.timestamp) \
        if has_time else None
    label = table.column(spec.label) if has_label else None
    return RawNodeType(num_nodes=len(ids), x=x, where=str(path), ids=ids, time=time), label


def _target(cfg: DatasetParams, labelled: list[str], paths: dict[str, Path],
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


def _edge_type(path: Path, stem: str, paths: dict[str, Path], nodes_dir: Path
               ) -> tuple[str, str, str]:
    parts = stem.split("__")
    if len(parts) != 3:
        raise ValueError(f"{path}: an edge table is named <src>__<relation>__<dst> (node types "
                         f"and a relation joined by double underscores), not {stem!r}")
    for part, what in zip(parts, ("source node type", "relation", "target node type")):
        check_name(part, f"{path}: {what}")
    for node_type in (parts[0], parts[2]):
        if node_type not in paths:
            raise ValueError(f"{path}: names node type {node_type!r}, which has no node table "
                             f"in {nodes_dir} (node types: {', '.join(paths)})")
    return parts[0], parts[1], parts[2]


def read(cfg: DatasetParams) -> RawTypedGraph:
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

    nodes, label_columns = {}, {}
    for node_type, path in paths.items():
        nodes[node_type], label = _read_nodes(tables, path, cfg)
        if label is not None:
            label_columns[node_type] = label
    target = _target(cfg, list(label_columns), paths, nodes_dir)
    class_names = class_values = y = None
    if target in label_columns:
        y, class_values = label_codes(label_columns[target], paths[target], cfg.nodes.label,
                                      cfg.nodes.unlabeled_values, cfg.max_classes)
        if pa.types.is_string(class_values.type):
            class_names = [str(v) for v in class_values.to_pylist()]
    else:  # link task without labels: the first type stands as target, one dummy class
        target = target or next(iter(nodes))
    del label_columns

    edge_paths = table_entries(edges_dir, fmt) if edges_dir.is_dir() else {}
    if not edge_paths:
        raise ValueError(f"{edges_dir}: no edge tables; dataset.layout=typed needs one "
                         f"<src>__<relation>__<dst>{SUFFIXES[fmt][0]} per relation here")
    lookups = {t: (IdLookup(n.ids), paths[t]) for t, n in nodes.items()}
    relations = {}
    for stem, path in edge_paths.items():
        edge_type = _edge_type(path, stem, paths, nodes_dir)
        timed = bool(cfg.edges.timestamp) and cfg.edges.timestamp in tables.schema(path).names
        src, dst, _, time = read_edges(tables, path, cfg.edges,
                                       {"src": lookups[edge_type[0]], "dst": lookups[edge_type[2]]},
                                       cfg.nodes.id, timestamp=timed)
        relations[edge_type] = RawRelation(src=src, dst=dst, where=str(path), time=time)
    n_target = nodes[target].num_nodes
    return RawTypedGraph(nodes=nodes, relations=relations, target=target,
                         y=np.zeros(n_target, dtype=np.int64) if y is None else y,
                         where=str(root), class_names=class_names, class_values=class_values,
                         labelled=y is not None)
