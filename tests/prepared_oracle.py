"""Prepared files written or read whole, the tests' side of the library's streamed ones
(gnnpipe/io/prepared.py, gnnpipe/data/prepare_tables.py): the per-type tables read back and
checked (``read_typed_node_table``, ``read_typed_edge_table``: no stage reads them, graph.pt
holds their values), and the user-table extras of an in-memory graph (``write_node_ids``,
``write_edge_attrs``: the bytes the block prepare streams); also the predict stage's embeddings
read as one array (``embedding_matrix``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from gnnpipe.data.graph import EdgeType, edge_type_name
from gnnpipe.io.common import EDGES_SCHEMA
from gnnpipe.io.description import read_description
from gnnpipe.io.parquet import read_table, write_table
from gnnpipe.io.prepared import (EDGES_SCHEMA_NAME, NODES_SCHEMA_NAME, edge_attrs_file,
                                 edges_file, node_ids_file, nodes_file, nodes_schema)


def read_typed_node_table(prepared: Path, node_type: str) -> pa.Table:
    """``nodes_<T>.parquet``: node_id (0..N-1 in order), label (target type only), x (F,)
    float32 or float16 (none where features_<T>.npy keeps it)."""
    meta = read_description(prepared)
    if node_type not in meta["sizes"]:
        raise ValueError(f"{prepared}: no node type {node_type!r}")
    width = (None if node_type in meta.get("features", []) else
             {entry[0]: entry[2] for entry in meta["node_types"]}[node_type])
    path = Path(prepared) / nodes_file(node_type)

    def expected(found: pa.Schema) -> pa.Schema:  # x float16 with storage.feature_dtype float16
        x_type = found.field("x").type if "x" in found.names else None
        half = isinstance(x_type, pa.FixedSizeListType) and x_type.value_type == pa.float16()
        return nodes_schema(width, node_type == meta["target"],
                            pa.float16() if half else pa.float32())

    table = read_table(path, expected, NODES_SCHEMA_NAME)
    if not np.array_equal(table.column("node_id").to_numpy(), np.arange(meta["sizes"][node_type])):
        raise ValueError(f"{path}: node_id must be 0..{meta['sizes'][node_type] - 1} in order")
    return table


def read_typed_edge_table(prepared: Path, edge_type: EdgeType) -> pa.Table:
    """``edges_<src__rel__dst>.parquet``: src, dst (type-local ids, checked against sizes)."""
    meta = read_description(prepared)
    if edge_type not in meta["edge_type_list"]:
        raise ValueError(f"{prepared}: no edge type {edge_type_name(edge_type)!r}")
    sizes = meta["sizes"]
    path = Path(prepared) / edges_file(edge_type)
    table = read_table(path, EDGES_SCHEMA, EDGES_SCHEMA_NAME)
    for column, node_type in (("src", edge_type[0]), ("dst", edge_type[2])):
        ids = table.column(column).to_numpy()
        if ids.size and (ids.min() < 0 or ids.max() >= sizes[node_type]):
            raise ValueError(f"{path}: column {column!r} holds {node_type} ids outside "
                             f"[0, {sizes[node_type]})")
    return table


def write_node_ids(out: Path, node_type: str, original_id: pa.Array,
                   timestamp: pa.Array | None = None, compression: str = "zstd") -> None:
    """``node_ids_<node_type>.parquet``: row ``i`` maps node ``i`` of that type back to the id it
    has in the user's table.

    ``original_id`` (N,) int or string, ``timestamp`` (N,) optional (the node table's column as
    read), both in node order.
    """
    columns = {"node_id": pa.array(np.arange(len(original_id), dtype=np.int64)),
               "original_id": original_id}
    if timestamp is not None:
        columns["timestamp"] = timestamp
    table = pa.table(columns)
    write_table(Path(out) / node_ids_file(node_type), table, table.schema, "gnnpipe.node_ids/1",
                compression)


def write_edge_attrs(out: Path, edge_type: EdgeType, src: np.ndarray, dst: np.ndarray,
                     attrs: dict[str, pa.Array], compression: str = "zstd") -> None:
    """``edge_attrs_<E>.parquet``: ``weight`` / ``timestamp`` per stored edge of ``edge_type``,
    rows as its edges table."""
    table = pa.table({"src": src, "dst": dst, **attrs})
    write_table(Path(out) / edge_attrs_file(edge_type), table, table.schema,
                "gnnpipe.edge_attrs/1", compression)


def embedding_matrix(table: pa.Table) -> np.ndarray:
    """The ``embedding`` column as one (N, H) array (float32 or float16)."""
    column = table.column("embedding").combine_chunks()
    return column.flatten().to_numpy().reshape(len(column), column.type.list_size)
