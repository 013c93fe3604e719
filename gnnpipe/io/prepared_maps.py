"""The prepared graph's files written from memory maps (the block-wise prepare,
``gnnpipe.data.prepare_tables``): the graph over the maps goes through the one
writer, ``gnnpipe.io.prepared.write_prepared``, which streams Parquet a row group at a time and
saves graph.pt from tensors over the maps (torch writes their file-backed pages), so no array of
the graph's size lands in anonymous memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from gnnpipe.data.graph import Csr, EdgeType, Graph
from gnnpipe.io.blocks import open_memmap
from gnnpipe.io.prepared import NPY_DTYPES, features_file, read_only_tensor, write_prepared


@dataclass(frozen=True)
class PreparedMaps:
    """A graph as ``.npy`` files: per node type its features (file, rows, width) in the stored
    ``feature_dtype`` (bfloat16 as its uint16 bits; ``external``: each moves into the output as
    its features_<T>.npy), the target's labels int64, per stored edge type (in order) its
    indptr and indices (None: no edges), node times (file, rows) and edge times (None: no
    edges), and the graph's description."""

    x: dict[str, tuple[Path, int, int]]
    y: Path
    target: str
    num_classes: int
    csr: dict[EdgeType, tuple[Path, Path | None]]
    reverse: dict[EdgeType, EdgeType]
    link_edge_type: EdgeType
    node_time: dict[str, tuple[Path, int]]
    edge_time: dict[EdgeType, Path | None]
    feature_dtype: str = "float32"
    external: bool = False
    featureless: tuple[str, ...] = ()  # node types without feature columns (graph.json)
    public_roles: np.ndarray | None = None  # int8 (N_target,): a source's official split


def _mapped(path: Path | None, shape: tuple[int, ...], dtype) -> torch.Tensor:
    """The ``.npy`` map as a tensor; an empty one when nothing was written (no rows)."""
    if path is None or 0 in shape:
        return torch.from_numpy(np.zeros(shape, dtype=dtype))
    return read_only_tensor(open_memmap(path))


def write_prepared_maps(out: Path, maps: PreparedMaps, compression: str = "zstd") -> Graph:
    """The prepared files into ``out`` (``write_prepared``'s bytes for the same graph) from
    ``.npy`` memory maps; the graph over the maps."""
    stored = NPY_DTYPES[maps.feature_dtype]  # bfloat16: its uint16 bits
    x = {}
    for node_type, (file, rows, width) in maps.x.items():
        features = _mapped(file, (rows, width), stored)
        x[node_type] = (features.view(torch.bfloat16) if maps.feature_dtype == "bfloat16"
                        else features)
        if maps.external:  # the scratch file, in place: no copy (the map stays valid)
            os.replace(file, Path(out) / features_file(node_type))
    y = _mapped(maps.y, (maps.x[maps.target][1],), np.int64)
    csr = {}
    for edge_type, (indptr_file, indices_file) in maps.csr.items():
        indptr = read_only_tensor(open_memmap(indptr_file))
        csr[edge_type] = Csr(indptr, _mapped(indices_file, (0,) if indices_file is None else
                                             open_memmap(indices_file).shape, np.int64))
    node_time = {t: _mapped(file, (rows,), np.int64) for t, (file, rows) in maps.node_time.items()}
    edge_time = {e: _mapped(file, (csr[e].num_edges,), np.int64)
                 for e, file in maps.edge_time.items()}
    graph = Graph(x=x, csr=csr, target=maps.target, y=y, num_classes=maps.num_classes,
                  reverse=maps.reverse, link_edge_type=maps.link_edge_type,
                  node_time=node_time, edge_time=edge_time,
                  public_roles=None if maps.public_roles is None
                  else torch.from_numpy(maps.public_roles))
    write_prepared(out, graph, feature_dtype=maps.feature_dtype, compression=compression,
                   features="external" if maps.external else "inline", features_written=True,
                   featureless=maps.featureless)
    return graph


def raw_dtype(column_type: pa.DataType) -> np.dtype:
    """The integer dtype holding a fixed-width column's values bit for bit (a timestamp column:
    ints, floats, dates, timestamps)."""
    return np.dtype(f"<i{column_type.bit_width // 8}")
