"""Every homogeneous source handed to the one prepare as tables: the built-in graph
(``dataset.source: synthetic``) and the Planetoid / OGB / PyG readers' graphs written to a scratch
folder as the node and edge tables ``gnnpipe.data.prepare_tables`` reads by blocks, with the
dataset params that read them (node ``i`` is row ``i``; labels as class codes). The graphs are
the ones the whole-graph prepare builds (the synthetic one drawn by the same streams in the same
order), so the prepared files are its files, byte for byte.

The synthetic features are streamed from the generator a row block at a time
(``synthetic.BLOCK_VALUES``) into a features-only scratch table, then joined to the ids, labels
and timestamps a row group at a time: no process holds all features. The readers' graphs are
in memory already (as before).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gnnpipe.config import DatasetParams, EdgeTableParams, NodeTableParams
from gnnpipe.data import synthetic
from gnnpipe.data.graph import EDGE, NODE
from gnnpipe.data.prepare import validate_raw
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sources.base import RawGraph

GROUP_ROWS = 1 << 17  # rows per row group of the scratch tables: a block of the prepare


@dataclasses.dataclass(frozen=True)
class SourceTables:
    """The scratch tables' dataset params (``source: parquet``; their label column holds class
    codes), every code (C,) for the block prepare, the user's value of each code (C,) for
    classes.parquet, and the source's official split (int8 (N,) codes into ``ROLES``, or None)."""

    cfg: DatasetParams
    codes: pa.Array
    class_values: pa.Array
    public_roles: np.ndarray | None = None


def _list_column(x: np.ndarray) -> pa.Array:
    rows = np.ascontiguousarray(x, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), rows.shape[1])


class _FeatureTable:
    """The generator's feature blocks float32 (B, F) appended to one Parquet column ``x``."""

    def __init__(self, path: Path, width: int):
        self.schema = pa.schema([("x", pa.list_(pa.float32(), width))])
        self.writer = pq.ParquetWriter(path, self.schema, compression="none")

    def write(self, block: np.ndarray) -> None:
        for lo in range(0, len(block), GROUP_ROWS):
            self.writer.write_table(pa.table({"x": _list_column(block[lo:lo + GROUP_ROWS])},
                                             schema=self.schema))


def _write_tables(folder: Path, x_groups, y: np.ndarray, time: np.ndarray | None,
                  src: np.ndarray, dst: np.ndarray, width: int) -> None:
    """nodes.parquet (id, x: the (B, F) list column of each of ``x_groups`` in turn, label: null
    when -1, t) and edges.parquet (src, dst), a row group of ``GROUP_ROWS`` at a time."""
    fields = [("id", pa.int64()), ("x", pa.list_(pa.float32(), width)), ("label", pa.int64())]
    fields += [("t", pa.float64())] if time is not None else []
    lo = 0
    with pq.ParquetWriter(folder / "nodes.parquet", pa.schema(fields),
                          compression="none") as writer:
        for x in x_groups:
            hi = lo + len(x)
            columns = {"id": np.arange(lo, hi), "x": x,
                       "label": pa.array(y[lo:hi], mask=y[lo:hi] < 0)}
            if time is not None:
                columns["t"] = time[lo:hi]
            writer.write_table(pa.table(columns, schema=writer.schema))
            lo = hi
    edge_schema = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
    with pq.ParquetWriter(folder / "edges.parquet", edge_schema, compression="none") as writer:
        for lo in range(0, max(src.size, 1), GROUP_ROWS):
            writer.write_table(pa.table({"src": src[lo:lo + GROUP_ROWS],
                                         "dst": dst[lo:lo + GROUP_ROWS]}, schema=edge_schema))


def _tables_cfg(cfg: DatasetParams, folder: Path, timed: bool, classes: int) -> DatasetParams:
    return dataclasses.replace(
        cfg, source="parquet", path=str(folder),
        nodes=NodeTableParams(id="id", features="x", label="label",
                              timestamp="t" if timed else ""),
        edges=EdgeTableParams(), max_classes=max(cfg.max_classes, classes))


def synthetic_tables(cfg: DatasetParams, seed: int, folder: Path) -> SourceTables:
    """Draw ``cfg.synthetic``'s homogeneous graph from ``seed``'s prepare stream (labels kept
    by its labels stream, as ``sources.builtin.read``) into ``folder``'s tables; features
    streamed through a features-only scratch table."""
    syn = cfg.synthetic
    folder.mkdir(parents=True, exist_ok=True)
    features = _FeatureTable(folder / "x.parquet", syn.num_features)
    try:
        raw = synthetic.generate(syn, make_rng(seed, "prepare"), features.write)
    finally:
        features.writer.close()
    y = synthetic.keep_labels(raw["y"], syn.label_rate, make_rng(seed, "labels"))
    x_table = pq.ParquetFile(folder / "x.parquet")
    _write_tables(folder, (x_table.read_row_group(g).column("x")
                           for g in range(x_table.num_row_groups)),
                  y, raw.get("timestamps"), raw["src"], raw["dst"], syn.num_features)
    (folder / "x.parquet").unlink()
    codes = pa.array(np.arange(int(y.max()) + 1), pa.int64())
    return SourceTables(_tables_cfg(cfg, folder, "timestamps" in raw, len(codes)), codes, codes)


def raw_tables(raw: RawGraph, cfg: DatasetParams, folder: Path) -> SourceTables:
    """A homogeneous source's graph (Planetoid, OGB, PyG: read whole by its reader, validated by
    prepare's checks with their messages) as ``folder``'s tables."""
    classes = validate_raw(raw, True)
    node, relation = raw.nodes[NODE], raw.relations[EDGE]
    folder.mkdir(parents=True, exist_ok=True)
    x = node.x
    _write_tables(folder, (_list_column(x[lo:lo + GROUP_ROWS])
                           for lo in range(0, len(x), GROUP_ROWS)),
                  raw.y, None, relation.src, relation.dst, x.shape[1])
    codes = pa.array(np.arange(classes), pa.int64())
    return SourceTables(_tables_cfg(cfg, folder, False, classes), codes,
                        codes if raw.class_values is None else raw.class_values,
                        raw.public_roles)
