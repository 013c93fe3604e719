"""prepare on ``cluster.engine: dask``: the user's node and edge tables (``dataset.source: parquet |
csv``, homogeneous layout; typed tables: ``gnnpipe.data.dask_typed``, which reuses these steps) to
the same prepared files as the local path, byte for byte, with no process holding all edges or all
features.

The work runs on a ``distributed.Client`` (``client=None``: the same block functions in this
process, as the tests call them), in waves whose results are small summaries:

1. node blocks (Parquet row groups; CSV converted to scratch Parquet parts, streaming): ids,
   features and labels checked with global rows, features written to ``x.npy``, label sets
   returned (``gnnpipe.data.table_blocks``);
2. node (id, row) pairs and edge (id, row, end) triples scattered to hash buckets (one routed
   scratch file per block); each bucket joined (repeated and unknown ids found there) to dense
   ids (``gnnpipe.data.block_ids``); edge weights / timestamps checked and stored per input row;
3. label codes from the union of the blocks' label sets (sorted: the local rule) to ``y.npy``;
4. edge blocks routed to row blocks of targets (one routed file per edge block), each sorted and
   deduplicated, placed into ``indptr.npy`` / ``indices.npy`` at offsets summed from the blocks'
   edge counts, with each stored edge's attributes from the input row ``normalize_edges`` keeps
   (``gnnpipe.data.block_graph``);
5. this process streams the prepared files (gnnpipe/io/typed.py: nodes_node.parquet, ...,
   node_ids_node.parquet, edge_attrs_node__to__node.parquet)
   a row group at a time and saves graph.pt from tensors over those memory maps
   (``gnnpipe.io.prepared_maps``).

A failed check anywhere comes back as a finding; the one the local reader meets first is raised
with its message. Options the block path does not read yet are refused (``refuse_unsupported``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gnnpipe.config import DatasetParams
from gnnpipe.data.block_graph import (Policy, Route, build_rows, duplicates_removed, place_rows,
                                      route_edges)
from gnnpipe.data.graph import EDGE, NODE
from gnnpipe.data.block_ids import join_bucket, scatter_edges, scatter_nodes
from gnnpipe.data.table_blocks import (Block, Finding, NodeSpec, csv_blocks, edge_attrs,
                                       label_codes_block, make_features_file,
                                       node_columns, node_id_column, parquet_blocks, raise_first,
                                       read_block, scan_nodes, time_dtype)
from gnnpipe.runtime.engine import run_blocks
from gnnpipe.io.blocks import create_memmap, open_memmap, table_stream
from gnnpipe.io.prepared import external_features, node_ids_file
from gnnpipe.io.prepared_maps import (PreparedMaps, raw_dtype, write_edge_attr_maps,
                                      write_prepared_maps)
from gnnpipe.sources.base import is_timestamp_type, label_codes, no_edges_warning
from gnnpipe.sources.formats import CSV_BLOCK_BYTES, CsvTables, ParquetTables
from gnnpipe.sources.tables import check_table_path, node_table_columns, table_folder

LOCAL = "use cluster.engine: local"


@dataclass(frozen=True)
class BlockSizes:
    """Targets of the block sizes (tests make them tiny to get many blocks)."""

    bucket_rows: int = 1 << 22  # node ids + edge ends per join bucket
    row_block_edges: int = 1 << 22  # stored edges per CSR row block
    csv_block_bytes: int = CSV_BLOCK_BYTES  # edge CSV blocks (node CSV: pyarrow's 1 MiB default)


SIZES = BlockSizes()


@dataclass(frozen=True)
class BlockPrepared:
    """What ``prepare_blocks`` wrote besides its files: ``prepare.json`` so far, the user's
    label of each class code (C,), and the labelled / total node counts."""

    report: dict
    class_values: pa.Array
    labelled: int
    total: int


def refuse_unsupported(cfg: DatasetParams) -> None:
    """One line naming the first option the block path does not read yet."""
    if cfg.source not in ("parquet", "csv"):
        raise ValueError(f"dataset.source={cfg.source} is not prepared on cluster.engine: dask "
                         f"yet (the user's parquet / csv tables are); {LOCAL}")


def _fail(findings: list[Finding], edge_blocks: list[Block], names: tuple[str, str],
          id_name: str, nodes_path: Path) -> None:
    """Raise the finding the local reader meets first, if any."""
    def unknown(finding: Finding) -> ValueError:
        side, row = finding.args[0], finding.first
        block = next(b for b in edge_blocks if b.start <= row < b.start + b.rows)
        return unknown_id(block, row, names[side], id_name, nodes_path)

    raise_first(findings, unknown)


def unknown_id(block: Block, row: int, name: str, id_name: str, nodes_path: Path) -> ValueError:
    """The local reader's line for the id in edge column ``name`` at row ``row`` of the table
    (in ``block``) that names no node of ``nodes_path``."""
    value = read_block(block, [name]).column(name)[row - block.start].as_py()
    return ValueError(f"{block.where}: edge column {name!r} has node id {value!r} (row {row}) "
                      f"that is not in the id column {id_name!r} of {nodes_path}")


def node_spec(cfg: DatasetParams, path: Path, tables, *, typed: bool) -> NodeSpec:
    """The columns a node table is read with (``sources.tables.node_table_columns``); a typed
    table's label is read by the caller's choice, its features stay float32."""
    columns = node_table_columns(tables.schema(path), cfg, path, typed=typed)
    return NodeSpec(id=cfg.nodes.id, label=columns.label, features=tuple(columns.features),
                    is_list=columns.is_list, width=0, text_ids=cfg.source == "csv",
                    unlabeled=cfg.nodes.unlabeled_values,
                    feature_dtype="float32" if typed else cfg.storage.feature_dtype,
                    timestamp=columns.timestamp, whole_times=typed)


def list_width(blocks: list[Block], spec: NodeSpec) -> int:
    """The length of row 0's feature list (the local reader's reference; 0 when null)."""
    first = next((b for b in blocks if b.rows), None)
    if first is None or not spec.is_list:
        return len(spec.features)
    cell = read_block(first, [spec.features[0]]).column(0)[0]
    return len(cell) if cell.is_valid else 0


def edge_table_blocks(cfg: DatasetParams, path: Path, key_of: dict[str, str], folder: Path,
                      sizes: BlockSizes) -> list[Block]:
    """An edge table's blocks with the columns of ``key_of`` (column -> ``dataset.edges`` key;
    src and dst first); a CSV table converted into ``folder``."""
    if cfg.source == "parquet":
        return parquet_blocks(path, list(key_of), key_of)
    names = CsvTables().schema(path).names
    for name, key in key_of.items():
        if name not in names:
            raise ValueError(f"{path}: missing column {name!r} (dataset.edges.{key}); "
                             f"columns: {', '.join(names)}")
    return csv_blocks(path, list(key_of), {cfg.edges.src: pa.string(),
                                           cfg.edges.dst: pa.string()},
                      folder, sizes.csv_block_bytes, edges=True)


def _edge_blocks(cfg: DatasetParams, path: Path, scratch: Path, sizes: BlockSizes
                 ) -> list[Block]:
    spec = cfg.edges
    check_table_path(path, "edges", cfg)
    key_of = {spec.src: "src", spec.dst: "dst"}
    for key in ("weight", "timestamp"):
        if getattr(spec, key):
            key_of[getattr(spec, key)] = key
    return edge_table_blocks(cfg, path, key_of, scratch / "csv-edges", sizes)


def id_type_of(cfg: DatasetParams, blocks: list[Block], spec: NodeSpec, canonical: bool
               ) -> pa.DataType:
    """The node table's id type: CSV ids are int64 when every one is a canonical integer."""
    if cfg.source == "csv":
        return pa.int64() if canonical else pa.string()
    if not blocks:
        return pa.string()
    id_type = read_block(blocks[0], [spec.id]).schema.field(spec.id).type
    return id_type.value_type if pa.types.is_dictionary(id_type) else id_type


def label_classes(scans, where: str, spec: NodeSpec, total: int, max_classes: int) -> pa.Array:
    """The sorted union of the blocks' labels, checked as ``label_codes`` checks a whole column
    (its own messages, from a column of the same counts)."""
    labelled = sum(s.labelled for s in scans)
    found = [s.classes for s in scans if s.classes is not None and len(s.classes)]
    label_type = next((s.label_type for s in scans if s.label_type is not None), pa.int64())
    classes = (pc.unique(pa.concat_arrays(found)).sort() if found
               else pa.array([], label_type))
    if total and (labelled == 0 or len(classes) > max_classes or len(classes) < 2):
        column = pa.concat_arrays([classes, pa.array([classes[0].as_py()] * (labelled - 1)
                                                     if len(classes) == 1 else [], label_type),
                                   pa.nulls(total - max(labelled, len(classes)), label_type)])
        label_codes(column, where, spec.label, (), max_classes)
    return classes


@dataclass(frozen=True)
class _Tables:
    """The two tables as blocks: the node table's spec and path, the edge column names."""

    nodes_path: Path
    edges_path: Path
    spec: NodeSpec
    blocks: list[Block]
    edge_blocks: list[Block]
    names: tuple[str, str]

    def fail(self, findings: list[Finding]) -> None:
        _fail(findings, self.edge_blocks, self.names, self.spec.id, self.nodes_path)


def prepare_blocks(client, cfg: DatasetParams, out: Path, scratch: Path,
                   sizes: BlockSizes | None = None) -> BlockPrepared:
    """Read, check and build the user's tables by blocks on ``client``; write the prepared files
    of the one-type graph (node ids and edge attributes too) into ``out``.
    ``scratch``: a folder every worker sees, on ``out``'s filesystem."""
    refuse_unsupported(cfg)
    sizes = sizes or SIZES
    root = table_folder(cfg)
    fmt = cfg.source
    nodes_path = root / (cfg.nodes.file or f"nodes.{fmt}")
    check_table_path(nodes_path, "nodes", cfg)
    spec = node_spec(cfg, nodes_path, ParquetTables() if fmt == "parquet" else CsvTables(),
                     typed=False)
    blocks = (parquet_blocks(nodes_path, node_columns(spec)) if fmt == "parquet" else
              csv_blocks(nodes_path, node_columns(spec), {spec.id: pa.string()},
                         scratch / "csv-nodes", 1 << 20))
    spec = NodeSpec(**{**spec.__dict__, "width": list_width(blocks, spec)})
    n, f = sum(b.rows for b in blocks), (spec.width if spec.is_list else len(spec.features))
    x_file, time_file = scratch / "x.npy", scratch / "time.npy"
    if n:
        make_features_file(x_file, n, f, spec.feature_dtype)
        if spec.timestamp:
            create_memmap(time_file, (n,), time_dtype(
                read_block(blocks[0], [spec.timestamp]).schema.field(0).type))

    # 1. node blocks: ids, features (to x.npy), times, label sets; an id error stops here
    scans = run_blocks(client, scan_nodes, [(b,) for b in blocks], spec=spec,
                       x_file=str(x_file), time_file=str(time_file))
    findings = [finding for scan in scans for finding in scan.findings]
    tables = _Tables(nodes_path, root / (cfg.edges.file or f"edges.{fmt}"), spec, blocks, [],
                     (cfg.edges.src, cfg.edges.dst))
    tables.fail([f for f in findings if f.key < (2,)])
    id_type = id_type_of(cfg, blocks, spec, all(s.canonical for s in scans))
    try:
        edge_blocks = _edge_blocks(cfg, tables.edges_path, scratch, sizes)
    except ValueError as err:  # the local reader opens the edges after every node check
        edge_blocks, findings = [], findings + [Finding((6, (-1,)), 0, "text", (str(err),))]
    tables = _Tables(**{**tables.__dict__, "edge_blocks": edge_blocks})

    # 2. ids to dense ids, then every remaining check in the local reader's order
    ids = scratch / "ids"
    findings += _join(client, tables, id_type, n, ids, sizes)
    attrs, found = _edge_attrs(client, cfg, edge_blocks, scratch)
    findings += found
    tables.fail([f for f in findings if f.key < (5,)])
    classes = label_classes(scans, str(nodes_path), spec, n, cfg.max_classes)
    tables.fail(findings)
    if n == 0:
        raise ValueError(f"{root}: the graph has no nodes")

    # 3. label codes
    y_file = scratch / "y.npy"
    create_memmap(y_file, (n,), np.int64)
    run_blocks(client, label_codes_block, [(b,) for b in blocks], spec=spec, classes=classes,
               y_file=str(y_file))

    # 4. the CSR, row block by row block; 5. the files
    report = _build_csr(client, cfg, edge_blocks, n, ids, attrs, scratch, sizes)
    num_edges = report["edges"]
    indptr = open_memmap(scratch / "indptr.npy")
    indices = (open_memmap(scratch / "indices.npy") if num_edges
               else np.zeros(0, dtype=np.int64))
    external = external_features(cfg.storage.features, n, f, spec.feature_dtype)
    indices_file = scratch / "indices.npy" if num_edges else None
    write_prepared_maps(out, PreparedMaps(
        x={NODE: (x_file, n, f)}, y=y_file, target=NODE, num_classes=len(classes),
        csr={EDGE: (scratch / "indptr.npy", indices_file)}, reverse={EDGE: EDGE},
        link_edge_type=EDGE, node_time={NODE: (time_file, n)} if spec.timestamp else {},
        edge_time={}, feature_dtype=spec.feature_dtype, external=external),
        cfg.storage.compression)
    write_node_ids(out, NODE, blocks, spec, id_type, cfg.storage.compression)
    if attrs.columns:
        write_edge_attr_maps(out, EDGE, indptr, indices, {
            name: (open_memmap(scratch / f"{name}-stored.npy") if num_edges else
                   np.zeros(0, raw_dtype(column_type)), column_type)
            for name, (_, column_type) in attrs.columns.items()}, cfg.storage.compression)
    report = {"source": cfg.source, "nodes": n, "features": f, "classes": len(classes),
              "undirected": cfg.undirected, **report, "mean_degree": round(num_edges / n, 4)}
    if pa.types.is_string(classes.type):
        report["class_names"] = [str(v) for v in classes.to_pylist()]
    if report["input_edges"] == 0:
        report["warnings"] = [no_edges_warning(str(tables.edges_path))]
    return BlockPrepared(report, classes, sum(s.labelled for s in scans), n)


def _join(client, tables: _Tables, id_type: pa.DataType, n: int, ids: Path,
          sizes: BlockSizes) -> list[Finding]:
    """Scatter the node (id, row) pairs and edge (id, row, end) triples to hash buckets under
    ``ids`` and join each bucket (dense ends per edge block routed to ``ids/mapped``); findings."""
    rows_in = sum(b.rows for b in tables.edge_blocks)
    buckets = max(1, math.ceil((n + 2 * rows_in) / sizes.bucket_rows))
    run_blocks(client, scatter_nodes, [(b,) for b in tables.blocks], spec=tables.spec,
               id_type=id_type, buckets=buckets, folder=str(ids / "nodes"))
    findings = [found for block in run_blocks(
        client, scatter_edges, [(b,) for b in tables.edge_blocks], names=tables.names,
        id_types=(id_type, id_type), buckets=(buckets, buckets),
        folders=(str(ids / "edges"), str(ids / "edges"))) for found in block]
    starts = np.array([b.start for b in tables.edge_blocks], dtype=np.int64)
    for found in run_blocks(client, join_bucket, [(k, f"b{k:06d}") for k in range(buckets)],
                            folder=str(ids), id_type=id_type, edge_starts=starts,
                            edge_batches=[b.batch for b in tables.edge_blocks],
                            where=(str(tables.nodes_path), tables.spec.id),
                            mapped=str(ids / "mapped")):
        findings += found
    return findings


@dataclass(frozen=True)
class _Attrs:
    """The edge attributes per input row: name (weight / timestamp) -> its ``.npy`` file
    (float32, or a timestamp's bits) and column type; ``order``: the timestamps' ``time_key``
    file (None without)."""

    columns: dict[str, tuple[Path, pa.DataType]]
    order: Path | None


def _edge_attrs(client, cfg: DatasetParams, edge_blocks: list[Block], scratch: Path
                ) -> tuple[_Attrs, list[Finding]]:
    """The edge blocks' weight / timestamp columns checked and stored per input row."""
    spec = cfg.edges
    rows = sum(b.rows for b in edge_blocks)
    if not (spec.weight or spec.timestamp) or not rows:  # no rows: the local path keeps none
        return _Attrs({}, None), []
    columns, order = {}, None
    if spec.weight:
        columns["weight"] = (scratch / "weight.npy", pa.float32())
        create_memmap(columns["weight"][0], (rows,), np.float32)
    if spec.timestamp:
        time_type = read_block(edge_blocks[0], [spec.timestamp]).schema.field(0).type
        columns["timestamp"] = (scratch / "timestamp.npy", time_type)
        order = scratch / "order.npy"
        if is_timestamp_type(time_type):  # else every block finds the type
            create_memmap(columns["timestamp"][0], (rows,), raw_dtype(time_type))
            create_memmap(order, (rows,), time_dtype(time_type))
    found = run_blocks(client, edge_attrs, [(b,) for b in edge_blocks], weight=spec.weight,
                       timestamp=spec.timestamp,
                       weight_file=str(scratch / "weight.npy"),
                       raw_file=str(scratch / "timestamp.npy"), order_file=str(order or ""))
    return _Attrs(columns, order), [f for block in found for f in block]


def _build_csr(client, cfg: DatasetParams, edge_blocks: list[Block], n: int, ids: Path,
               attrs: _Attrs, scratch: Path, sizes: BlockSizes) -> dict:
    """The edge policies and the CSR into ``scratch``'s indptr.npy / indices.npy (no
    indices.npy without edges), each stored edge's attributes into ``<name>-stored.npy``;
    the edge counts and degree summaries of ``prepare.json``."""
    policy = Policy(cfg.undirected, cfg.dedup, cfg.self_loops == "remove")
    rows_in = sum(b.rows for b in edge_blocks)
    row_blocks = max(1, math.ceil(rows_in * (2 if cfg.undirected else 1)
                                  / sizes.row_block_edges))
    per_block = max(1, math.ceil(n / row_blocks))
    bounds = [(r, r * per_block, min(n, (r + 1) * per_block)) for r in range(row_blocks)
              if r * per_block < n]
    route = Route(str(ids), per_block, len(bounds))
    routed = run_blocks(client, route_edges,
                        [(i, b.start, b.rows, b.start) for i, b in enumerate(edge_blocks)],
                        mapped=str(ids / "mapped"), policy=policy, routes=(route,),
                        total_rows=rows_in, with_rows=bool(attrs.columns))
    built = run_blocks(client, build_rows, bounds, num_src=n, folder=str(ids), dedup=cfg.dedup,
                       total_rows=rows_in, order_file=str(attrs.order or ""),
                       with_rows=bool(attrs.columns))
    offsets = np.concatenate([[0], np.cumsum([r.edges for r in built])]).astype(np.int64)
    num_edges = int(offsets[-1])
    indptr_file, indices_file = scratch / "indptr.npy", scratch / "indices.npy"
    create_memmap(indptr_file, (n + 1,), np.int64)
    gathers = []
    if num_edges:
        create_memmap(indices_file, (num_edges,), np.int64)
        for name, (values, column_type) in attrs.columns.items():
            stored = scratch / f"{name}-stored.npy"
            create_memmap(stored, (num_edges,), open_memmap(values).dtype)
            gathers.append((str(values), str(stored)))
    run_blocks(client, place_rows, [(*bound, int(offsets[i])) for i, bound in enumerate(bounds)],
               folder=str(ids), indptr_file=str(indptr_file), indices_file=str(indices_file),
               gathers=tuple(gathers))

    input_edges = sum(r.input_edges for r in routed)
    loops = sum(r.loops_removed for r in routed)
    duplicates = duplicates_removed(input_edges, loops, built, cfg.undirected) if cfg.dedup else 0
    return {"input_edges": input_edges, "self_loops_removed": loops,
            "duplicates_removed": duplicates, "edges": num_edges,
            "isolated_nodes": sum(r.isolated for r in built),
            "max_degree": max(r.max_degree for r in built)}


def write_node_ids(out: Path, node_type: str, blocks: list[Block], spec: NodeSpec,
                   id_type: pa.DataType, compression: str) -> None:
    """node_ids_<node_type>.parquet in ``out``: node ``i``, its id in the user's table and its
    timestamp cell as read (with ``dataset.nodes.timestamp``), a block at a time."""
    fields = [("node_id", pa.int64()), ("original_id", id_type)]
    if spec.timestamp:
        fields.append(("timestamp", read_block(blocks[0], [spec.timestamp]).schema.field(0).type))
    with table_stream(Path(out) / node_ids_file(node_type), pa.schema(fields),
                      "gnnpipe.node_ids/1", compression) as add:
        for block in blocks:
            columns = {"node_id": np.arange(block.start, block.start + block.rows),
                       "original_id": node_id_column(block, spec, id_type)}
            if spec.timestamp:
                columns["timestamp"] = read_block(block, [spec.timestamp]).column(0)
            add(pa.table(columns))
