"""``dataset.source: ogb``: an OGB node-property folder as the ``ogb`` package leaves it on disk.

Layout (``<root>`` is ``dataset.path``, or ``dataset.path/<dataset.name with - as _>``)::

    <root>/raw/edge.csv.gz          E rows "src,dst", no header (one direction per pair)
    <root>/raw/node-feat.csv.gz     N rows of F floats
    <root>/raw/node-label.csv.gz    N rows, one class id
    <root>/raw/num-node-list.csv.gz one row: N (optional; checked when present)
    <root>/split/<scheme>/{train,valid,test}.csv.gz   node ids, one per row: the official split

or the binary layout of the large datasets (ogbn-papers100M), read when ``raw/data.npz`` exists::

    <root>/raw/data.npz         edge_index (2, E) ints, node_feat (N, F) numbers (float16 in
                                papers100M), num_nodes_list [N]; num_edges_list [E] checked when
                                present; other node_* / edge_* arrays (node_year, ...) ignored
    <root>/raw/node-label.npz   node_label (N, 1) or (N,) float class ids, NaN = unlabelled
    <root>/split/...            as above

Read with pyarrow's CSV reader and ``zipfile`` (no ``ogb`` package, no download, never
unpickling). The csv edge file is streamed in blocks. The .npz members (stored or deflated
alike) are streamed through ``zipfile`` in blocks of ``NPZ_BLOCK_ROWS`` rows straight into
preallocated arrays: node_feat is cast to float32 block by block (one float32 copy, never a
second full copy in the file's dtype), edge_index lands in one int64 (2, E) array whose rows are
``src`` / ``dst``, and the finiteness / id-range checks also run per block. Labels (N values)
are read whole: NaN -> unlabelled (-1); the other class ids go through ``label_codes`` (dense
codes, the original values kept for classes.parquet). Multi-task labels (ogbn-proteins: more
than one label column) are rejected with a message.
"""

from __future__ import annotations

from pathlib import Path
import zipfile
import zlib
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from gnnpipe.config import DatasetParams
from gnnpipe.runtime.progress import progress
from gnnpipe.sources.base import (RawGraph, check_finite, check_no_nulls, label_codes,
                                  reason, require_file, roles_from_indices)
from gnnpipe.sources.formats import CSV_BLOCK_BYTES

SPLIT_FILES = {"train": "train.csv.gz", "val": "valid.csv.gz", "test": "test.csv.gz"}
HEADERLESS = pacsv.ReadOptions(autogenerate_column_names=True)  # columns f0, f1, ...
# Rows (nodes, or edges of edge_index) per block when streaming an .npz member: a block of
# papers100M features (128 float32) is 32 MB, small next to the N-row result.
NPZ_BLOCK_ROWS = 1 << 16
NPZ_REQUIRED = ("edge_index", "node_feat", "num_nodes_list")


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


def _read(path: Path, column_types: dict | None = None, header: bool = False) -> pa.Table:
    """A CSV file whole: without a ``header`` row, columns f0, f1, ..."""
    require_file(path, "an OGB node-property folder has raw/edge.csv.gz, raw/node-feat.csv.gz, "
                       "raw/node-label.csv.gz")
    options = pacsv.ConvertOptions(column_types=column_types or {})
    try:
        return pacsv.read_csv(path, read_options=None if header else HEADERLESS,
                              convert_options=options)
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
    require_file(path, "the edge list of an OGB node-property folder")
    options = pacsv.ConvertOptions(column_types={"f0": pa.int64(), "f1": pa.int64()})
    try:
        yield from pacsv.open_csv(path, read_options=pacsv.ReadOptions(
            autogenerate_column_names=True, block_size=CSV_BLOCK_BYTES), convert_options=options)
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
    empty = np.zeros(0, dtype=np.int64)  # an empty file: no blocks
    return np.concatenate([empty, *ends["src"]]), np.concatenate([empty, *ends["dst"]])


def labels(path: Path, num_nodes: int, counted: str, max_classes: int
           ) -> tuple[np.ndarray, pa.Array]:
    """Class codes int64 (N,) and class values (C,) of a headerless label file of one column
    and ``num_nodes`` rows (``counted``: where that count comes from, for the message)."""
    table = _read(path)
    if table.num_columns != 1:
        raise ValueError(f"{path}: {table.num_columns} label columns (a multi-task dataset such "
                         f"as ogbn-proteins); node classification needs one")
    y, class_values = label_codes(table.column("f0"), path, "f0", max_classes=max_classes)
    if y.size != num_nodes:
        raise ValueError(f"{path}: {y.size} labels but {counted}")
    return y, class_values


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


# ------------------------------------------------------------------------- binary (.npz) layout
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError)


class _Npz:
    """An .npz archive (a zip of .npy members, stored or deflated) read member by member,
    each streamed in blocks; never unpickles (object arrays are refused)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.zip = zipfile.ZipFile(path)
            names = self.zip.namelist()
        except _ZIP_ERRORS as err:
            raise ValueError(f"{path}: not a readable .npz file (a zip archive of .npy "
                             f"arrays: {reason(err)})") from None
        self.members = {name[:-4]: name for name in names if name.endswith(".npy")}

    def __enter__(self) -> "_Npz":
        return self

    def __exit__(self, *exc) -> None:
        self.zip.close()

    def require(self, keys: tuple[str, ...]) -> None:
        missing = [k for k in keys if k not in self.members]
        if missing:
            raise ValueError(f"{self.path}: missing array{'s' * (len(missing) > 1)} "
                             f"{', '.join(missing)}; found: "
                             f"{', '.join(sorted(self.members)) or 'none'}")

    @contextmanager
    def _open(self, key: str):
        """The member's stream after its .npy header, with (shape, dtype, fortran_order)."""
        where = f"{self.path}: array {key!r}"
        try:
            with self.zip.open(self.members[key]) as fp:
                try:
                    version = np.lib.format.read_magic(fp)
                    if version == (1, 0):
                        header = np.lib.format.read_array_header_1_0(fp)
                    elif version == (2, 0):
                        header = np.lib.format.read_array_header_2_0(fp)
                    else:
                        raise ValueError(f"npy format version {version} is not supported")
                except ValueError as err:
                    raise ValueError(f"{where} has no readable .npy header ({reason(err)})"
                                     ) from None
                shape, fortran, dtype = header
                if dtype.hasobject or dtype.kind not in "biuf":
                    raise ValueError(f"{where} holds {dtype}; expected numbers")
                yield fp, tuple(shape), dtype, fortran
        except _ZIP_ERRORS as err:
            raise ValueError(f"{where} is not readable, the file looks corrupted "
                             f"({reason(err)})") from None

    def header(self, key: str) -> tuple[tuple[int, ...], np.dtype]:
        with self._open(key) as (_, shape, dtype, _):
            return shape, dtype

    def read_into(self, key: str, out: np.ndarray, row_items: int) -> None:
        """Stream member ``key`` into ``out`` (preallocated with the member's shape), cast to
        ``out.dtype`` block by block; ``row_items``: items of one row (a block holds
        ``NPZ_BLOCK_ROWS`` of them)."""
        with self._open(key) as (fp, shape, dtype, fortran):
            assert shape == out.shape, (shape, out.shape)
            # a Fortran-order member holds the C-order bytes of the transpose
            target = out.T if fortran else out
            flat = target.reshape(-1) if target.flags.c_contiguous else target.flat
            step = max(1, NPZ_BLOCK_ROWS * row_items)
            done, total = 0, out.size
            while done < total:
                count = min(step, total - done)
                buf = fp.read(count * dtype.itemsize)
                if len(buf) != count * dtype.itemsize:
                    got = done + len(buf) // dtype.itemsize
                    raise ValueError(f"{self.path}: array {key!r} is truncated ({got} of "
                                     f"{total} values)")
                flat[done:done + count] = np.frombuffer(buf, dtype=dtype, count=count)
                done += count
            if fp.read(1):  # reading to the end also makes zipfile check the CRC
                raise ValueError(f"{self.path}: array {key!r} has more data than its shape "
                                 f"{shape} holds")

    def read(self, key: str, dtype: np.dtype | None = None) -> np.ndarray:
        shape, stored = self.header(key)
        out = np.empty(shape, dtype=dtype or stored)
        self.read_into(key, out, int(np.prod(shape[1:], dtype=np.int64)) if shape else 1)
        return out


def _binary_graph(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``x`` float32 (N, F) and ``edge_index`` int64 (2, E) from ``raw/data.npz``, checked."""
    with _Npz(path) as npz:
        npz.require(NPZ_REQUIRED)
        counts = npz.read("num_nodes_list")
        if counts.dtype.kind not in "iu" or counts.shape != (1,):
            raise ValueError(f"{path}: num_nodes_list is {counts.dtype} {list(counts.shape)} "
                             f"{counts.reshape(-1)[:5].tolist()}; expected one integer "
                             f"(a single graph)")
        num_nodes = int(counts[0])
        shape, dtype = npz.header("node_feat")
        if len(shape) != 2 or shape[0] != num_nodes:
            raise ValueError(f"{path}: node_feat has shape {shape} but num_nodes_list says "
                             f"{num_nodes} nodes; expected ({num_nodes}, F)")
        edge_shape, edge_dtype = npz.header("edge_index")
        if len(edge_shape) != 2 or edge_shape[0] != 2:
            raise ValueError(f"{path}: edge_index has shape {edge_shape}; expected (2, E)")
        if edge_dtype.kind not in "iu":
            raise ValueError(f"{path}: edge_index holds {edge_dtype}; expected integer node ids")
        num_edges = edge_shape[1]
        if "num_edges_list" in npz.members:
            listed = npz.read("num_edges_list").reshape(-1).tolist()
            if listed != [num_edges]:
                raise ValueError(f"{path}: num_edges_list says {listed[:5]} but edge_index "
                                 f"has {num_edges} edges (a single graph is expected)")
        x = np.empty(shape, dtype=np.float32)
        npz.read_into("node_feat", x, max(shape[1], 1))
        names = [f"node_feat[:, {j}]" for j in range(shape[1])]
        for start in range(0, num_nodes, NPZ_BLOCK_ROWS):  # per block: no (N, F) bool mask
            check_finite(x[start:start + NPZ_BLOCK_ROWS], path, names, "feature", start)
        edge_index = np.empty(edge_shape, dtype=np.int64)
        npz.read_into("edge_index", edge_index, 2)
    for start in range(0, num_edges, NPZ_BLOCK_ROWS):
        block = edge_index[:, start:start + NPZ_BLOCK_ROWS]
        bad = (block < 0) | (block >= num_nodes)
        if bad.any():
            row = int(np.argmax(bad.any(axis=1)))
            col = int(np.argmax(bad[row]))
            raise ValueError(f"{path}: edge_index row {row} ({('src', 'dst')[row]}) has node "
                             f"id {int(block[row, col])} (edge {start + col}) outside "
                             f"[0, {num_nodes})")
    return x, edge_index


def _binary_labels(path: Path, num_nodes: int, max_classes: int
                   ) -> tuple[np.ndarray, pa.Array]:
    """Codes int64 (N,) (-1 where ``node_label`` is NaN) and the class values (C,) int64."""
    require_file(path, "the binary OGB layout keeps the labels there, next to data.npz")
    with _Npz(path) as npz:
        npz.require(("node_label",))
        shape, dtype = npz.header("node_label")
        if len(shape) == 2 and shape[1] > 1:
            raise ValueError(f"{path}: node_label has {shape[1]} columns: multi-task labels "
                             f"(as ogbn-proteins) are not supported; node classification "
                             f"needs one")
        if len(shape) not in (1, 2) or shape[0] != num_nodes or 0 in shape:
            raise ValueError(f"{path}: node_label has shape {shape}; expected ({num_nodes}, 1) "
                             f"for the {num_nodes} nodes of data.npz")
        if dtype.kind not in "iuf":
            raise ValueError(f"{path}: node_label holds {dtype}; expected class ids")
        # float16 widened: Arrow and the integer check work on float32 / float64
        values = npz.read("node_label", np.result_type(dtype, np.float32)
                          if dtype.kind == "f" else np.int64).reshape(-1)
    negative = values < 0  # NaN compares False: stays "unlabelled"
    if negative.any():
        row = int(np.argmax(negative))
        raise ValueError(f"{path}: node_label has negative class {values[row]} (row {row}); "
                         f"OGB marks unlabelled nodes with NaN")
    return label_codes(pa.array(values), path, "node_label", (), max_classes)


def read(cfg: DatasetParams) -> RawGraph:
    root = dataset_root(cfg)
    raw = root / "raw"
    if (raw / "data.npz").exists():  # the binary layout: raw/data.npz + raw/node-label.npz
        x, (src, dst) = _binary_graph(raw / "data.npz")
        y, class_values = _binary_labels(raw / "node-label.npz", x.shape[0], cfg.max_classes)
        return RawGraph.homogeneous(x, y, src, dst, str(root),
                                    public_roles=_public_split(root, x.shape[0]),
                                    class_values=class_values)
    feat_path, label_path = raw / "node-feat.csv.gz", raw / "node-label.csv.gz"
    if not feat_path.exists() and (raw / "node-feat").is_dir():  # per-type folders: ogbn-mag
        raise ValueError(f"{root}: a typed OGB dataset (raw/node-feat/<type>/, like ogbn-mag); "
                         "set dataset.layout: typed")
    x = _features(feat_path)
    num_nodes = x.shape[0]
    y, class_values = labels(label_path, num_nodes, f"{feat_path} has {num_nodes} rows",
                             cfg.max_classes)
    count_path = raw / "num-node-list.csv.gz"
    if count_path.exists():
        counts = _read(count_path).column("f0").to_pylist()
        if counts != [num_nodes]:
            raise ValueError(f"{count_path}: says {counts} nodes but {feat_path} has "
                             f"{num_nodes} rows (a single graph is expected)")
    src, dst = _edges(raw / "edge.csv.gz", num_nodes)
    return RawGraph.homogeneous(x, y, src, dst, str(root),
                                public_roles=_public_split(root, num_nodes),
                                class_values=class_values)
