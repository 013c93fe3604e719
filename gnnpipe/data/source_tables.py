"""Every source handed to the one prepare as tables: the built-in graphs (``dataset.source:
synthetic``, homogeneous or papers / authors / venues) and the Planetoid / OGB / PyG / OGB-MAG
readers' graphs (validated here first, ``validate_raw``, with the messages that name their
input) written to a scratch folder as the node and edge tables ``gnnpipe.data.prepare_tables``
reads by blocks (a typed graph as typed tables: ``nodes/<type>``, ``edges/<src>__<rel>__<dst>``,
in the source's type order), with the dataset params that read them (node ``i`` is row ``i``;
labels as class codes).

The homogeneous synthetic graph's features and edges are streamed from the generator a block at a
time (``synthetic.generate``'s sinks): its edges straight into the edge table, its features (and
the typed graph's paper features) into a features-only scratch table, then joined to the ids,
labels and timestamps a row group at a time: no process holds all of them. The readers' graphs
are in memory already (as before), like the typed graph's relations and author and venue
features.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gnnpipe.config import DatasetParams, EdgeTableParams, NodeTableParams
from gnnpipe.data.graph import TYPED, UNLABELLED, edge_type_name
from gnnpipe.sources import builtin
from gnnpipe.sources.base import RawGraph

GROUP_ROWS = 1 << 17  # rows per row group of the scratch tables: a block of the prepare
EDGES = pa.schema([("src", pa.int64()), ("dst", pa.int64())])  # an edge table's columns


@dataclasses.dataclass(frozen=True)
class SourceTables:
    """The scratch tables' dataset params (``source: parquet``; their label column holds class
    codes 0..C-1, every one a class), the user's value of each code (C,) for classes.parquet,
    the source's official split (int8 (N,) codes into ``ROLES``, or None),
    for typed tables the source's order of node types and of relation tables (stems), which the
    prepared files keep (the tables' own order is by name), and what messages name instead of
    each scratch edge table."""

    cfg: DatasetParams
    class_values: pa.Array
    public_roles: np.ndarray | None = None
    order: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    # edge table path -> where the source read its rows, for messages (never a scratch path)
    where: dict[str, str] = dataclasses.field(default_factory=dict)


def _list_column(x: np.ndarray) -> pa.Array:
    rows = np.ascontiguousarray(x, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), rows.shape[1])


def _write_nodes(path: Path, num_nodes: int, x_groups, width: int, y: np.ndarray | None,
                 time) -> None:
    """A node table: id, x (the (B, F) list column of each of ``x_groups`` in turn; none when
    ``x_groups`` is None: a featureless type), label (``y``: null when -1; none when None), t
    (``time`` (N,) as read, numpy or Arrow; none when None), a row group at a time."""
    fields = [("id", pa.int64())]
    fields += [("x", pa.list_(pa.float32(), width))] if x_groups is not None else []
    fields += [("label", pa.int64())] if y is not None else []
    if time is not None:
        fields.append(("t", time.type if isinstance(time, pa.Array)
                       else pa.from_numpy_dtype(time.dtype)))
    if x_groups is None:
        x_groups = (range(lo, min(lo + GROUP_ROWS, num_nodes))
                    for lo in range(0, max(num_nodes, 1), GROUP_ROWS))
    lo = 0
    with pq.ParquetWriter(path, pa.schema(fields), compression="none") as writer:
        for x in x_groups:
            hi = lo + len(x)
            columns = {"id": np.arange(lo, hi)}
            if "x" in writer.schema.names:
                columns["x"] = x
            if y is not None:
                columns["label"] = pa.array(y[lo:hi], mask=y[lo:hi] < 0)
            if time is not None:
                columns["t"] = time[lo:hi]
            writer.write_table(pa.table(columns, schema=writer.schema))
            lo = hi


class _Appender:
    """A scratch Parquet table of ``schema``: the columns of each ``add`` (equal lengths)
    appended in row groups of ``GROUP_ROWS``."""

    def __init__(self, path: Path, schema: pa.Schema):
        self.path = path
        self.writer = pq.ParquetWriter(path, schema, compression="none")

    def add(self, **columns) -> None:
        rows = len(next(iter(columns.values())))
        for lo in range(0, rows, GROUP_ROWS):
            group = {name: values[lo:lo + GROUP_ROWS] for name, values in columns.items()}
            self.writer.write_table(pa.table(group, schema=self.writer.schema))

    def close(self) -> None:
        self.writer.close()


class _StreamedFeatures(_Appender):
    """The generator's feature blocks float32 (B, F) appended to one scratch Parquet column
    ``x`` (``write``), read back a row group at a time (``groups``), removed by ``close``."""

    def __init__(self, path: Path, width: int):
        super().__init__(path, pa.schema([("x", pa.list_(pa.float32(), width))]))

    def write(self, block: np.ndarray) -> None:
        self.add(x=_list_column(block))

    def groups(self):
        self.writer.close()
        x_table = pq.ParquetFile(self.path)
        return (x_table.read_row_group(g).column("x") for g in range(x_table.num_row_groups))

    def close(self) -> None:
        self.writer.close()
        self.path.unlink(missing_ok=True)


def _tables_cfg(cfg: DatasetParams, folder: Path, classes: int, node_time: bool = False,
               **typed) -> DatasetParams:
    """The params that read ``folder``'s tables: ``source: parquet``, columns id / x / label /
    t (``node_time``) and src / dst; ``typed``: dataset.typed keys."""
    return dataclasses.replace(
        cfg, source="parquet", path=str(folder),
        nodes=NodeTableParams(id="id", features="x", label="label",
                              timestamp="t" if node_time else ""),
        edges=EdgeTableParams(),
        typed=dataclasses.replace(cfg.typed, **typed), max_classes=max(cfg.max_classes, classes))


def synthetic_tables(cfg: DatasetParams, seed: int, folder: Path) -> SourceTables:
    """``cfg.synthetic``'s graph of ``cfg.layout`` drawn from ``seed`` (``sources.builtin``) into
    ``folder``'s tables; the (paper) features streamed through a features-only scratch table."""
    syn = cfg.synthetic
    folder.mkdir(parents=True, exist_ok=True)
    features = _StreamedFeatures(folder / "x.parquet", syn.num_features)
    try:
        if cfg.layout == TYPED:
            raw = builtin.typed_graph(syn, seed, features.write)
            return raw_tables(raw, cfg, folder, {"paper": (features.groups(), syn.num_features)})
        edges = _Appender(folder / "edges.parquet", EDGES)
        try:
            raw = builtin.homogeneous(syn, seed, features.write,
                                      lambda src, dst: edges.add(src=src, dst=dst))
        finally:
            edges.close()
        y = raw["y"]
        _write_nodes(folder / "nodes.parquet", y.size, features.groups(), syn.num_features, y,
                     raw.get("timestamps"))
    finally:
        features.close()
    codes = pa.array(np.arange(int(y.max()) + 1), pa.int64())
    return SourceTables(_tables_cfg(cfg, folder, len(codes), "timestamps" in raw), codes,
                        where={str(folder / "edges.parquet"): builtin.WHERE})


# ------------------------------------------------------------------------------ validation
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


def validate_raw(raw: RawGraph, homogeneous: bool) -> int:
    """A reader's raw graph checked (labels, edge ids in range, two classes when labelled: each
    reader checked its features); the number of classes (the user's values, present or not; 1
    for an unlabelled link-task graph)."""
    target = raw.nodes[raw.target]
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


def raw_tables(raw: RawGraph, cfg: DatasetParams, folder: Path,
               streamed: dict | None = None) -> SourceTables:
    """A source's graph (Planetoid, OGB, PyG, OGB-MAG, the typed built-in graph: read whole by
    its reader, validated by prepare's checks with their messages) as ``folder``'s tables: a
    homogeneous graph's ``nodes.parquet`` and ``edges.parquet``, a typed graph's
    ``nodes/<type>.parquet`` and ``edges/<src>__<rel>__<dst>.parquet``. A node table holds id;
    x when the type has features (or from ``streamed``: type -> (its list columns, width));
    label on the target, null when -1; t when it has times; an edge table src, dst. A typed
    graph's target and link relation are named in the params, as ``build`` reads them from the
    raw graph."""
    typed = cfg.layout == TYPED
    classes = validate_raw(raw, not typed)
    streamed = streamed or {}
    nodes, edges = (folder / "nodes", folder / "edges") if typed else (folder, folder)
    nodes.mkdir(parents=True, exist_ok=True)
    edges.mkdir(exist_ok=True)
    for node_type, node in raw.nodes.items():
        groups, width = streamed.get(node_type, (None, 0) if node.x is None else (
            (_list_column(node.x[lo:lo + GROUP_ROWS]) for lo in range(0, len(node.x), GROUP_ROWS)),
            node.x.shape[1]))
        _write_nodes(nodes / f"{node_type if typed else 'nodes'}.parquet", node.num_nodes,
                     groups, width, raw.y if node_type == raw.target and raw.labelled else None,
                     node.time)
    where = {}
    for edge_type, rel in raw.relations.items():
        path = edges / f"{edge_type_name(edge_type) if typed else 'edges'}.parquet"
        table = _Appender(path, EDGES)
        table.add(src=rel.src, dst=rel.dst)
        table.close()
        where[str(path)] = rel.where
    link = cfg.typed.link_edge_type or (edge_type_name(raw.link_relation)
                                        if raw.link_relation else "")
    tables_cfg = _tables_cfg(cfg, folder, classes,
                             any(n.time is not None for n in raw.nodes.values()),
                             **({"target": raw.target, "link_edge_type": link} if typed else {}))
    order = (tuple(raw.nodes), tuple(edge_type_name(e) for e in raw.relations)) if typed else None
    return SourceTables(tables_cfg, pa.array(np.arange(classes), pa.int64())
                        if raw.class_values is None else raw.class_values, raw.public_roles,
                        order, where)
