"""``dataset.source: ogb``: an OGB node-property folder as the ``ogb`` package leaves it on disk.

Layout (``<root>`` is ``dataset.path``, or ``dataset.path/<dataset.name with - as _>``)::

    <root>/raw/edge.csv.gz          E rows "src,dst", no header (one direction per pair)
    <root>/raw/node-feat.csv.gz     N rows of F floats
    <root>/raw/node-label.csv.gz    N rows, one class id
    <root>/raw/num-node-list.csv.gz one row: N (optional; checked when present)
    <root>/split/<scheme>/{train,valid,test}.csv.gz   node ids, one per row: the official split

Read with pyarrow's CSV reader (no ``ogb`` package, no download); the edge file is streamed in
blocks. The binary layout of ogbn-papers100M (``raw/data.npz``) and multi-task labels
(ogbn-proteins) are rejected with a message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from gnnpipe.config import DatasetParams
from gnnpipe.progress import progress
from gnnpipe.sources.base import (RawGraph, check_finite, check_no_nulls, labels, reason,
                                  roles_from_indices)

CSV_BLOCK_BYTES = 64 << 20
SPLIT_FILES = {"train": "train.csv.gz", "val": "valid.csv.gz", "test": "test.csv.gz"}
HEADERLESS = pacsv.ReadOptions(autogenerate_column_names=True)  # columns f0, f1, ...


def dataset_root(cfg: DatasetParams) -> Path:
    path = Path(cfg.path)
    candidates = [path]
    if cfg.name:
        candidates += [path / cfg.name.replace("-", "_"), path / cfg.name]
    for root in candidates:
        if (root / "raw").is_dir():
            return root
    tried = " or ".join(str(root / "raw") for root in candidates)
    raise ValueError(f"dataset.path={cfg.path!r}: no OGB raw folder ({tried} not found); point "
                     f"dataset.path at the folder holding raw/ and split/")


def _read(path: Path, column_types: dict | None = None) -> pa.Table:
    if not path.is_file():
        raise ValueError(f"{path}: file not found (an OGB node-property folder has "
                         f"raw/edge.csv.gz, raw/node-feat.csv.gz, raw/node-label.csv.gz)")
    options = pacsv.ConvertOptions(column_types=column_types or {})
    try:
        return pacsv.read_csv(path, read_options=HEADERLESS, convert_options=options)
    except (pa.ArrowInvalid, OSError, EOFError) as err:
        raise ValueError(f"{path}: not a readable CSV file ({reason(err)})") from None


def _features(path: Path) -> np.ndarray:
    table = _read(path)
    x = np.empty((table.num_rows, table.num_columns), dtype=np.float32)
    for j, name in enumerate(table.column_names):
        column = table.column(name).combine_chunks()
        check_no_nulls(column, path, name, "feature")
        if not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
            raise ValueError(f"{path}: feature column {name!r} is {column.type}; expected numbers")
        x[:, j] = column.to_numpy()
    check_finite(x, path, table.column_names, "feature")
    return x


def _edge_batches(path: Path) -> Iterator[pa.RecordBatch]:
    if not path.is_file():
        raise ValueError(f"{path}: file not found (the edge list of an OGB node-property folder)")
    options = pacsv.ConvertOptions(column_types={"f0": pa.int64(), "f1": pa.int64()})
    try:
        reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(
            autogenerate_column_names=True, block_size=CSV_BLOCK_BYTES), convert_options=options)
        while True:
            try:
                yield reader.read_next_batch()
            except StopIteration:
                return
    except (pa.ArrowInvalid, OSError, EOFError) as err:
        raise ValueError(f"{path}: not a readable edge list ({reason(err)})") from None


def _edges(path: Path, num_nodes: int, num_dst: int | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """``src``, ``dst`` int64 (E,), checked to lie in ``[0, num_nodes)`` (dst: in
    ``[0, num_dst)`` when given, for a typed relation), read block by block."""
    limits = {"src": num_nodes, "dst": num_nodes if num_dst is None else num_dst}
    ends: dict[str, list[np.ndarray]] = {"src": [], "dst": []}
    row = 0
    bar = progress(None, unit=" rows", unit_scale=True, desc=f"reading {path.name}")
    for batch in _edge_batches(path):
        if batch.num_columns != 2:
            raise ValueError(f"{path}: expected 2 columns (src, dst), found {batch.num_columns}")
        for key, name in (("src", "f0"), ("dst", "f1")):
            column = batch.column(name)
            check_no_nulls(column, path, name, f"edge ({key})", row)
            ids = column.to_numpy()
            bad = (ids < 0) | (ids >= limits[key])
            if bad.any():
                first = int(np.argmax(bad))
                raise ValueError(f"{path}: edge column {name!r} ({key}) has "
                                 f"node id {int(ids[first])} (row {row + first}) outside "
                                 f"[0, {limits[key]})")
            ends[key].append(ids.astype(np.int64, copy=False))
        row += batch.num_rows
        bar.update(batch.num_rows)
    bar.close()
    empty = np.zeros(0, dtype=np.int64)
    return (np.concatenate(ends["src"]) if ends["src"] else empty,
            np.concatenate(ends["dst"]) if ends["dst"] else empty)


def _public_split(root: Path, num_nodes: int, node_type: str = "") -> np.ndarray | None:
    """Official roles int8 (N,) from ``split/<scheme>/[<node_type>/]{train,valid,test}.csv.gz``."""
    split_dir = root / "split"
    if not split_dir.is_dir():
        return None
    schemes = sorted(p for p in split_dir.iterdir() if p.is_dir())
    if len(schemes) != 1:
        raise ValueError(f"{split_dir}: expected one split scheme folder, found "
                         f"{[p.name for p in schemes] or 'none'}")
    index = {}
    for role, name in SPLIT_FILES.items():
        path = schemes[0] / node_type / name
        table = _read(path, {"f0": pa.int64()})
        column = table.column("f0").combine_chunks()
        check_no_nulls(column, path, "f0", "node id")
        index[role] = column.to_numpy()
    return roles_from_indices(num_nodes, index, str(schemes[0] / node_type))


def read(cfg: DatasetParams) -> RawGraph:
    root = dataset_root(cfg)
    raw = root / "raw"
    if (raw / "data.npz").exists():
        raise ValueError(f"{raw}: binary OGB layout (data.npz, as ogbn-papers100M) is not "
                         f"supported; only the csv.gz layout")
    feat_path, label_path = raw / "node-feat.csv.gz", raw / "node-label.csv.gz"
    x = _features(feat_path)
    label_table = _read(label_path)
    if label_table.num_columns != 1:
        raise ValueError(f"{label_path}: {label_table.num_columns} label columns (a multi-task "
                         f"dataset such as ogbn-proteins); node classification needs one")
    y, _ = labels(label_table.column("f0"), label_path, "f0")
    num_nodes = x.shape[0]
    if y.size != num_nodes:
        raise ValueError(f"{label_path}: {y.size} labels but {feat_path} has {num_nodes} rows")
    count_path = raw / "num-node-list.csv.gz"
    if count_path.exists():
        counts = _read(count_path).column("f0").to_pylist()
        if counts != [num_nodes]:
            raise ValueError(f"{count_path}: says {counts} nodes but {feat_path} has "
                             f"{num_nodes} rows (a single graph is expected)")
    src, dst = _edges(raw / "edge.csv.gz", num_nodes)
    return RawGraph(x=x, y=y, src=src, dst=dst, where=str(root),
                    public_roles=_public_split(root, num_nodes))
