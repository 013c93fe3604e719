"""Prepared-graph files: nodes/edges Parquet, graph.pt (CSR, x, y), and the optional
node_ids.parquet / edge_attrs.parquet of user tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from gnnpipe.graph import UNLABELLED, Csr, Graph
from gnnpipe.io.common import CSR_SPEC, EDGES_SCHEMA, FEATURE_DTYPES, SPLIT_ROLES, check_csr, nodes_schema, nodes_schema_like
from gnnpipe.io.parquet import read_table, write_table
from gnnpipe.io.tensors import load_tensors, save_tensors


def write_prepared(out: Path, graph: Graph, *, feature_dtype: str = "float32",
                   compression: str = "zstd") -> None:
    """``nodes.parquet``, ``edges.parquet`` and ``graph.pt`` of ``graph``.

    ``feature_dtype`` rounds x for storage (graph.pt holds it in that dtype; nodes.parquet holds
    float16, or float32 for float32 / the bfloat16-rounded values, which Parquet lacks).
    """
    n, f = graph.x.shape
    x = graph.x.to(FEATURE_DTYPES[feature_dtype])
    half = feature_dtype == "float16"
    values = x.numpy() if half else x.float().numpy()
    value_type = pa.float16() if half else pa.float32()
    nodes = pa.table({
        "node_id": np.arange(n, dtype=np.int64),
        "label": graph.y.numpy(),
        "x": pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), value_type), f),
    })
    write_table(out / "nodes.parquet", nodes, nodes_schema(f, value_type), "gnnpipe.nodes/1",
                compression)
    src, dst = graph.csr.edge_index().numpy()
    write_table(out / "edges.parquet", pa.table({"src": src, "dst": dst}), EDGES_SCHEMA,
                "gnnpipe.edges/1", compression)
    tensors = {"indptr": graph.csr.indptr, "indices": graph.csr.indices, "x": x,
               "y": graph.y}
    if graph.timestamps is not None:  # optional: only graphs whose nodes carry a time
        tensors["timestamps"] = graph.timestamps
    if graph.public_roles is not None:  # optional: the official split of planetoid / ogb
        tensors["public_roles"] = graph.public_roles
    save_tensors(out / "graph.pt", "gnnpipe.graph/1", tensors,
                 meta={"num_classes": graph.num_classes})


def read_graph(prepared: Path, *, mmap: bool = False) -> Graph:
    """The prepared graph from ``graph.pt``, with shapes and ranges checked.

    ``x`` comes back float32 (a copy when it is stored in half precision, else the mmap view).
    """
    path = Path(prepared) / "graph.pt"
    spec = {**CSR_SPEC, "x": (None, 2), "y": (torch.int64, 1)}
    payload = load_tensors(path, "gnnpipe.graph/1", spec, mmap=mmap)
    x, y = payload["x"], payload["y"]
    if x.dtype not in FEATURE_DTYPES.values():
        raise ValueError(f"{path}: tensor 'x' must be torch.float32 (or float16 / bfloat16), "
                         f"found {x.dtype}")
    x = x.float()
    num_classes = payload["meta"].get("num_classes")
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"{path}: meta.num_classes must be an int >= 2, found {num_classes!r}")
    if y.numel() != x.shape[0]:
        raise ValueError(f"{path}: {y.numel()} labels for {x.shape[0]} feature rows")
    if y.numel() and (y.min() < UNLABELLED or y.max() >= num_classes):
        raise ValueError(f"{path}: labels outside [0, {num_classes}) (or -1: unlabelled)")
    csr = check_csr(Csr(payload["indptr"], payload["indices"]), x.shape[0], path)
    timestamps = payload.get("timestamps")
    if timestamps is not None:
        if (not isinstance(timestamps, torch.Tensor) or timestamps.shape != y.shape
                or timestamps.dtype not in (torch.float64, torch.float32, torch.int64)):
            raise ValueError(f"{path}: 'timestamps' must be a float or int64 tensor of shape "
                             f"({y.numel()},), found {getattr(timestamps, 'shape', timestamps)!r}")
        if timestamps.is_floating_point() and not bool(torch.isfinite(timestamps).all()):
            raise ValueError(f"{path}: 'timestamps' contain NaN or inf")
    return Graph(csr=csr, x=x, y=y, num_classes=num_classes, timestamps=timestamps,
                 public_roles=_check_public_roles(payload.get("public_roles"), y.numel(), path))


def _check_public_roles(roles, num_nodes: int, where: Path) -> torch.Tensor | None:
    """The optional official split in ``graph.pt``: int8 (N,) codes into ``SPLIT_ROLES``."""
    if roles is None:
        return None
    if not isinstance(roles, torch.Tensor) or roles.dtype != torch.int8 or roles.shape != (num_nodes,):
        raise ValueError(f"{where}: 'public_roles' must be an int8 tensor of shape ({num_nodes},)")
    if roles.numel() and (roles.min() < 0 or roles.max() >= len(SPLIT_ROLES)):
        raise ValueError(f"{where}: 'public_roles' holds codes outside [0, {len(SPLIT_ROLES)})")
    return roles


def read_node_table(prepared: Path) -> pa.Table:
    return read_table(Path(prepared) / "nodes.parquet", nodes_schema_like, "gnnpipe.nodes/1")


def read_edge_table(prepared: Path) -> pa.Table:
    return read_table(Path(prepared) / "edges.parquet", EDGES_SCHEMA, "gnnpipe.edges/1")


# Optional extras of user tables (dataset.source parquet | csv); absent for the other sources.
def _require(fields: dict[str, pa.DataType], optional: tuple[str, ...]):
    """Expected schema: the fixed ``fields`` plus any of ``optional`` the file has, as found."""
    def expected(found: pa.Schema) -> pa.Schema:
        extra = [(name, found.field(name).type) for name in optional if name in found.names]
        return pa.schema(list(fields.items()) + extra)
    return expected


def write_node_ids(out: Path, original_id: pa.Array, timestamp: pa.Array | None = None,
                   compression: str = "zstd") -> None:
    """``node_ids.parquet``: row ``i`` maps node ``i`` back to the id it has in the user's table.

    ``original_id`` (N,) int or string, ``timestamp`` (N,) optional, both in node order.
    """
    columns = {"node_id": pa.array(np.arange(len(original_id), dtype=np.int64)),
               "original_id": original_id}
    if timestamp is not None:
        columns["timestamp"] = timestamp
    table = pa.table(columns)
    write_table(out / "node_ids.parquet", table, table.schema, "gnnpipe.node_ids/1", compression)


def read_node_ids(prepared: Path) -> pa.Table:
    """``node_id`` int64 (0..N-1), ``original_id`` and, when the input had one, ``timestamp``."""
    path = Path(prepared) / "node_ids.parquet"

    def expected(schema: pa.Schema) -> pa.Schema:  # original_id keeps the user's id type
        id_type = (schema.field("original_id").type if "original_id" in schema.names
                   else pa.string())
        return _require({"node_id": pa.int64(), "original_id": id_type}, ("timestamp",))(schema)

    table = read_table(path, expected, "gnnpipe.node_ids/1")
    ids = table.column("node_id").to_numpy()
    if not np.array_equal(ids, np.arange(ids.size)):
        raise ValueError(f"{path}: node_id must be 0..N-1 in order")
    return table


def write_edge_attrs(out: Path, src: np.ndarray, dst: np.ndarray,
                     attrs: dict[str, pa.Array], compression: str = "zstd") -> None:
    """``edge_attrs.parquet``: ``weight`` / ``timestamp`` per stored edge, rows as edges.parquet."""
    table = pa.table({"src": src, "dst": dst, **attrs})
    write_table(out / "edge_attrs.parquet", table, table.schema, "gnnpipe.edge_attrs/1",
                compression)


def read_edge_attrs(prepared: Path) -> pa.Table:
    return read_table(Path(prepared) / "edge_attrs.parquet",
                      _require({"src": pa.int64(), "dst": pa.int64()}, ("weight", "timestamp")),
                      "gnnpipe.edge_attrs/1")


def write_classes(out: Path, values: pa.Array, compression: str = "zstd") -> None:
    """``classes.parquet``: row ``c`` holds ``code`` c and ``label``, the user's label value of
    class ``c`` (int64 or string, as in the input). Written by prepare for every graph kind."""
    if not (pa.types.is_integer(values.type) or pa.types.is_string(values.type)):
        values = values.cast(pa.string())
    if pa.types.is_integer(values.type):
        values = values.cast(pa.int64())
    table = pa.table({"code": pa.array(np.arange(len(values), dtype=np.int64)), "label": values})
    write_table(Path(out) / "classes.parquet", table, table.schema, "gnnpipe.classes/1",
                compression)


def read_classes(prepared: Path) -> pa.Array:
    """The user's label value of each class code: int64 or string (C,), code order."""
    path = Path(prepared) / "classes.parquet"

    def expected(schema: pa.Schema) -> pa.Schema:
        label_type = schema.field("label").type if "label" in schema.names else pa.string()
        if label_type not in (pa.int64(), pa.string()):
            raise ValueError(f"{path}: column 'label' must be int64 or string, found {label_type}")
        return pa.schema([("code", pa.int64()), ("label", label_type)])

    table = read_table(path, expected, "gnnpipe.classes/1")
    codes = table.column("code").to_numpy()
    if not np.array_equal(codes, np.arange(codes.size)):
        raise ValueError(f"{path}: code must be 0..C-1 in order")
    return table.column("label").combine_chunks()
