"""The prepared graph's files written from memory maps (the block-wise prepare,
``gnnpipe.data.dask_prepare``): the same bytes as ``gnnpipe.io.prepared.write_prepared``, with no
array of the graph's size in anonymous memory. Parquet goes out a row group at a time
(``gnnpipe.io.blocks.table_stream``); graph.pt is saved from tensors over the maps, so torch
writes their file-backed pages.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from gnnpipe.data.graph import Csr, Graph
from gnnpipe.io.blocks import ROW_GROUP_ROWS, open_memmap, table_stream
from gnnpipe.io.common import EDGES_SCHEMA, NODES_NO_X_SCHEMA, nodes_schema
from gnnpipe.io.description import write_description
from gnnpipe.io.prepared import FEATURES_FILE
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
    with table_stream(out / "edges.parquet", EDGES_SCHEMA, "gnnpipe.edges/1",
                      compression) as add:
        for lo in range(0, indices.size, ROW_GROUP_ROWS):
            hi = min(indices.size, lo + ROW_GROUP_ROWS)
            targets = np.searchsorted(indptr, np.arange(lo, hi), side="right") - 1
            add(pa.table({"src": indices[lo:hi], "dst": targets}))
    tensors["y"] = _tensor(y)
    if times is not None:
        tensors["timestamps"] = _tensor(times)
    save_tensors(out / "graph.pt", "gnnpipe.graph/1", tensors, meta=meta)
    graph = Graph.homogeneous(Csr(tensors["indptr"], tensors["indices"]), x, tensors["y"],
                              num_classes, timestamps=tensors.get("timestamps"))
    write_description(out, graph, features_file=FEATURES_FILE if external else None)
