"""``dataset.source: ogb`` with ``dataset.layout: typed``: an OGB heterogeneous node-property
folder (ogbn-mag) as the ``ogb`` package leaves it on disk, read offline with pyarrow.

Layout (``<root>`` is ``dataset.path`` or ``dataset.path/<dataset.name with - as _>``)::

    <root>/raw/num-node-dict.csv.gz                   header row of node types, one row of counts
    <root>/raw/relations/<src>___<rel>___<dst>/edge.csv.gz   "src,dst" rows, no header
    <root>/raw/node-feat/<type>/node-feat.csv.gz      N_t rows of F_t floats (optional per type)
    <root>/raw/node-feat/<type>/node_year.csv.gz      N_t years (optional): the node times
    <root>/raw/node-label/<type>/node-label.csv.gz    N_t class ids: the target type
    <root>/split/<scheme>/<target>/{train,valid,test}.csv.gz   the official split (optional)

Node types are taken in name order (OGB's own order), relations in folder-name order. Other
files (triplet-type-list, num-edge-list, edge_reltype, nodetype-has-*) are not needed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from gnnpipe.config import DatasetParams
from gnnpipe.sources.base import (RawNodeType, RawRelation, RawGraph, check_no_nulls,
                                  require_file, split_edge_type)
from gnnpipe.sources.ogb import _edges, _features, _public_split, _read, dataset_root, labels
from gnnpipe.data.graph import check_name

COUNTS = "num-node-dict.csv.gz"


def _counts(raw: Path) -> dict[str, int]:
    """Node type -> count from ``num-node-dict.csv.gz`` (node types in name order)."""
    path = raw / COUNTS
    require_file(path, f"an OGB heterogeneous folder has raw/{COUNTS}, "
                       "raw/relations/<src>___<rel>___<dst>/edge.csv.gz, raw/node-feat/, "
                       "raw/node-label/")
    table = _read(path, header=True)
    if table.num_rows != 1:
        raise ValueError(f"{path}: expected one row of node counts (a single graph), found "
                         f"{table.num_rows}")
    counts = {}
    for name in sorted(table.column_names):
        check_name(name, f"{path}: node type")
        value = table.column(name)[0].as_py()
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{path}: node count of {name!r} is {value!r}; expected an "
                             "integer >= 0")
        counts[name] = value
    return counts


def _node_type(raw: Path, node_type: str, n: int) -> RawNodeType:
    folder = raw / "node-feat" / node_type
    x = time = None
    if (folder / "node-feat.csv.gz").is_file():
        x = _features(folder / "node-feat.csv.gz")
        if x.shape[0] != n:
            raise ValueError(f"{folder / 'node-feat.csv.gz'}: {x.shape[0]} rows but "
                             f"{raw / COUNTS} says {n} {node_type} nodes")
    if (folder / "node_year.csv.gz").is_file():
        path = folder / "node_year.csv.gz"
        column = _read(path, {"f0": pa.int64()}).column("f0").combine_chunks()
        check_no_nulls(column, path, "f0", "timestamp")
        if len(column) != n:
            raise ValueError(f"{path}: {len(column)} rows but {raw / COUNTS} says {n} "
                             f"{node_type} nodes")
        time = column
    return RawNodeType(num_nodes=n, x=x, where=str(folder), time=time)


def _relations(raw: Path, counts: dict[str, int]) -> dict[tuple[str, str, str], RawRelation]:
    folder = raw / "relations"
    dirs = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    if not dirs:
        raise ValueError(f"{folder}: no relation folders <src>___<relation>___<dst>/edge.csv.gz")
    relations = {}
    for path in dirs:
        edge_type = split_edge_type(
            path.name, "___", path, "a relation folder is named <src>___<relation>___<dst> "
            "(three underscores)", counts, f"{raw / COUNTS} does not list ({', '.join(counts)})")
        src, dst = _edges(path / "edge.csv.gz", counts[edge_type[0]], counts[edge_type[2]])
        relations[edge_type] = RawRelation(src, dst, str(path / "edge.csv.gz"))
    return relations


def read_typed(cfg: DatasetParams) -> RawGraph:
    root = dataset_root(cfg)
    raw = root / "raw"
    counts = _counts(raw)
    label_dir = raw / "node-label"
    labelled = [t for t in counts if (label_dir / t / "node-label.csv.gz").is_file()]
    target = cfg.typed.target
    if target and target not in counts:
        raise ValueError(f"dataset.typed.target={target!r} is not a node type of "
                         f"{raw / COUNTS} ({', '.join(counts)})")
    if target and target not in labelled and cfg.task == "node":
        raise ValueError(f"{label_dir / target / 'node-label.csv.gz'}: file not found (the "
                         f"labels of the target type {target!r})")
    if not target:
        if len(labelled) > 1:
            raise ValueError(f"{label_dir}: node types {', '.join(labelled)} all have labels; "
                             "set dataset.typed.target")
        if not labelled and cfg.task == "node":
            raise ValueError(f"{label_dir}: no <type>/node-label.csv.gz; node classification "
                             "needs the labels of the target type")
        target = labelled[0] if labelled else next(iter(counts))
    nodes = {t: _node_type(raw, t, n) for t, n in counts.items()}
    y, class_values, n_target = None, None, counts[target]
    if target in labelled:
        y, class_values = labels(label_dir / target / "node-label.csv.gz", n_target,
                                 f"{raw / COUNTS} says {n_target} {target} nodes", cfg.max_classes)
    return RawGraph(
        nodes=nodes, relations=_relations(raw, counts), target=target,
        y=np.zeros(n_target, dtype=np.int64) if y is None else y, where=str(root),
        public_roles=_public_split(root, n_target, target) if y is not None else None,
        labelled=y is not None, class_values=class_values)
