"""The prepared graph's files written from memory maps (the block-wise prepare,
``gnnpipe.data.dask_prepare`` / ``dask_typed``): the same bytes as
``gnnpipe.io.prepared.write_prepared`` (a typed graph: ``write_typed_prepared``), with no array of
the graph's size in anonymous memory. Parquet goes out a row group at a time
(``gnnpipe.io.blocks.table_stream``); graph.pt is saved from tensors over the maps, so torch
writes their file-backed pages.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from gnnpipe.data.graph import Csr, EdgeType, Graph, edge_type_name
from gnnpipe.io.blocks import ROW_GROUP_ROWS, open_memmap, table_stream
from gnnpipe.io.common import EDGES_SCHEMA, NODES_NO_X_SCHEMA, nodes_schema
from gnnpipe.io.description import write_description
from gnnpipe.io.prepared import FEATURES_FILE, TYPED_GRAPH_SCHEMA, typed_nodes_schema
from gnnpipe.io.tensors import save_tensors


def _tensor(array: np.ndarray) -> torch.Tensor:
    with warnings.catch_warnings():  # a read-only map: torch warns that it is not writable
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def write_prepared_maps(out: Path, x_file: Path, y: np.ndarray, times: np.ndarray | None,
                        indptr: np.ndarray, indices: np.ndarray, num_classes: int, *,
                        feature_dtype: str, compression: str, external: bool) -> None:
    """nodes.parquet, edges.parquet, graph.pt and graph.json into ``out``, the bytes
    ``write_prepared`` writes for the same graph, from ``.npy`` memory maps: ``x_file`` (N, F) in
    the stored dtype (bfloat16 as its uint16 bits; ``external``: moved into ``out`` as
    features.npy), labels ``y`` (N,), optional node ``times`` (N,), ``indptr`` (N + 1,) and
    ``indices`` (E,). Parquet is streamed a row group at a time."""
    dtype = feature_dtype
    stored = open_memmap(x_file)
    n, f = stored.shape
    x = _tensor(stored)
    x = x.view(torch.bfloat16) if dtype == "bfloat16" else x
    meta = {"num_classes": num_classes}
    tensors = {"indptr": _tensor(indptr), "indices": _tensor(indices)}
    half = dtype == "float16"
    value_type = pa.float16() if half else pa.float32()
    schema = NODES_NO_X_SCHEMA if external else nodes_schema(f, value_type)
    with table_stream(out / "nodes.parquet", schema, "gnnpipe.nodes/1", compression) as add:
        for lo in range(0, n, ROW_GROUP_ROWS):
            hi = min(n, lo + ROW_GROUP_ROWS)
            columns = {"node_id": np.arange(lo, hi, dtype=np.int64), "label": y[lo:hi]}
            if not external:
                values = x[lo:hi].numpy() if half or dtype == "float32" else \
                    x[lo:hi].float().numpy()
                columns["x"] = pa.FixedSizeListArray.from_arrays(
                    pa.array(values.reshape(-1), value_type), f)
            add(pa.table(columns))
    if external:
        meta["features"] = {"file": FEATURES_FILE, "dtype": dtype, "shape": [n, f]}
        del x, stored
        os.replace(x_file, out / FEATURES_FILE)  # the scratch file, in place: no copy
        x = torch.zeros(1, 1).expand(n, f)  # graph.json reads only its shape
    else:
        tensors["x"] = x
    _stream_edges(out / "edges.parquet", indptr, indices, "gnnpipe.edges/1", compression)
    tensors["y"] = _tensor(y)
    if times is not None:
        tensors["timestamps"] = _tensor(times)
    save_tensors(out / "graph.pt", "gnnpipe.graph/1", tensors, meta=meta)
    graph = Graph.homogeneous(Csr(tensors["indptr"], tensors["indices"]), x, tensors["y"],
                              num_classes, timestamps=tensors.get("timestamps"))
    write_description(out, graph, features_file=FEATURES_FILE if external else None)


@dataclass(frozen=True)
class TypedMaps:
    """A typed graph as ``.npy`` files: per node type its features (file, rows, width) float32,
    per stored edge type (in order) its indptr and indices (None: no edges), node times
    (file, rows) and edge times (None: no edges) int64, and the graph's description."""

    x: dict[str, tuple[Path, int, int]]
    y: Path
    target: str
    num_classes: int
    csr: dict[EdgeType, tuple[Path, Path | None]]
    node_time: dict[str, tuple[Path, int]]
    edge_time: dict[EdgeType, Path | None]
    reverse: dict[EdgeType, EdgeType]
    link_edge_type: EdgeType


def _mapped(path: Path | None, shape: tuple[int, ...], dtype) -> torch.Tensor:
    """The ``.npy`` map as a tensor; an empty one when nothing was written (no rows)."""
    if path is None or 0 in shape:
        return torch.from_numpy(np.zeros(shape, dtype=dtype))
    return _tensor(open_memmap(path))


def write_typed_maps(out: Path, maps: TypedMaps) -> Graph:
    """graph.json, nodes_<type>.parquet, edges_<type>.parquet and graph.pt into ``out``, the
    bytes ``write_typed_prepared`` writes for the same graph, from ``.npy`` memory maps, Parquet
    a row group at a time; the graph over the maps (for its description)."""
    x = {t: _mapped(file, (rows, width), np.float32) for t, (file, rows, width) in maps.x.items()}
    y = _mapped(maps.y, (maps.x[maps.target][1],), np.int64)
    tensors: dict[str, torch.Tensor] = {"y": y}
    for node_type, features in x.items():
        n, f = features.shape
        labelled = node_type == maps.target
        with table_stream(out / f"nodes_{node_type}.parquet", typed_nodes_schema(f, labelled),
                          "gnnpipe.hetero_nodes/1") as add:
            for lo in range(0, n, ROW_GROUP_ROWS):
                hi = min(n, lo + ROW_GROUP_ROWS)
                columns = {"node_id": np.arange(lo, hi, dtype=np.int64)}
                if labelled:
                    columns["label"] = y[lo:hi].numpy()
                columns["x"] = pa.FixedSizeListArray.from_arrays(
                    pa.array(features[lo:hi].numpy().reshape(-1)), f)
                add(pa.table(columns))
        tensors[f"x.{node_type}"] = features
    csr = {}
    for edge_type, (indptr_file, indices_file) in maps.csr.items():
        name = edge_type_name(edge_type)
        indptr = _tensor(open_memmap(indptr_file))
        indices = _mapped(indices_file, (0,) if indices_file is None else
                          open_memmap(indices_file).shape, np.int64)
        _stream_edges(out / f"edges_{name}.parquet", indptr.numpy(), indices.numpy(),
                      "gnnpipe.hetero_edges/1", "zstd")
        tensors[f"{name}.indptr"], tensors[f"{name}.indices"] = indptr, indices
        csr[edge_type] = Csr(indptr, indices)
    node_time = {t: _mapped(file, (rows,), np.int64) for t, (file, rows) in maps.node_time.items()}
    edge_time = {e: _mapped(file, (csr[e].num_edges,), np.int64)
                 for e, file in maps.edge_time.items()}
    tensors.update({f"time.{t}": v for t, v in node_time.items()})
    tensors.update({f"{edge_type_name(e)}.time": v for e, v in edge_time.items()})
    save_tensors(out / "graph.pt", TYPED_GRAPH_SCHEMA, tensors,
                 meta={"num_classes": maps.num_classes, "target": maps.target})
    graph = Graph(x=x, csr=csr, target=maps.target, y=y, num_classes=maps.num_classes,
                  reverse=maps.reverse, link_edge_type=maps.link_edge_type,
                  node_time=node_time, edge_time=edge_time)
    write_description(out, graph)
    return graph


def _stream_edges(path: Path, indptr: np.ndarray, indices: np.ndarray, name: str,
                  compression: str) -> None:
    """(src, dst) of every stored edge in CSR order, a row group at a time."""
    with table_stream(path, EDGES_SCHEMA, name, compression) as add:
        for lo in range(0, indices.size, ROW_GROUP_ROWS):
            hi = min(indices.size, lo + ROW_GROUP_ROWS)
            targets = np.searchsorted(indptr, np.arange(lo, hi), side="right") - 1
            add(pa.table({"src": indices[lo:hi], "dst": targets}))


def raw_dtype(column_type: pa.DataType) -> np.dtype:
    """The integer dtype holding a fixed-width column's values bit for bit (a timestamp column:
    ints, floats, dates, timestamps)."""
    return np.dtype(f"<i{column_type.bit_width // 8}")


def _from_raw(values: np.ndarray, column_type: pa.DataType) -> pa.Array:
    """The column of ``column_type`` whose values are the bytes of ``values``."""
    data = np.ascontiguousarray(values)
    return pa.Array.from_buffers(column_type, len(data), [None, pa.py_buffer(data)])


def write_edge_attr_maps(out: Path, indptr: np.ndarray, indices: np.ndarray,
                         attrs: dict[str, tuple[np.ndarray, pa.DataType]],
                         compression: str) -> None:
    """edge_attrs.parquet, the bytes ``gnnpipe.io.prepared.write_edge_attrs`` writes: (src, dst)
    of every stored edge in CSR order and each attribute (E,) of ``attrs`` (name -> its values
    as stored bits (``raw_dtype``) or float32, and its column type), a row group at a time."""
    schema = pa.schema([("src", pa.int64()), ("dst", pa.int64())]
                       + [(name, column_type) for name, (_, column_type) in attrs.items()])
    with table_stream(out / "edge_attrs.parquet", schema, "gnnpipe.edge_attrs/1",
                      compression) as add:
        for lo in range(0, indices.size, ROW_GROUP_ROWS):
            hi = min(indices.size, lo + ROW_GROUP_ROWS)
            columns = {"src": indices[lo:hi],
                       "dst": np.searchsorted(indptr, np.arange(lo, hi), side="right") - 1}
            for name, (values, column_type) in attrs.items():
                columns[name] = _from_raw(values[lo:hi], column_type)
            add(pa.table(columns))
