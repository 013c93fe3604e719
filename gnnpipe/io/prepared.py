"""The prepared graph's files, one layout for every graph (gnnpipe/io/typed.py documents it
and reads it back): per node type ``T`` nodes_<T>.parquet (and features_<T>.npy where
``dataset.storage.features`` keeps x outside graph.pt), per edge type ``E`` edges_<E>.parquet,
graph.pt (schema ``GRAPH_SCHEMA``), graph.json (gnnpipe/io/description.py) and, for user tables,
node_ids_<T>.parquet, edge_attrs_<E>.parquet and classes.parquet. A homogeneous graph is the
one-type case: nodes_node.parquet, edges_node__to__node.parquet."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa

from gnnpipe import LazyModule
from gnnpipe.data.graph import EdgeType, Graph, edge_type_name
from gnnpipe.io.blocks import ROW_GROUP_ROWS, table_stream
from gnnpipe.io.common import EDGES_SCHEMA, FEATURE_DTYPES
from gnnpipe.io.description import write_description
from gnnpipe.io.parquet import read_table, write_table
from gnnpipe.io.tensors import check_tensors, error_reason, save_tensors

torch = LazyModule("torch", globals())  # imported on first use: the report reads classes alone

GRAPH_SCHEMA = "gnnpipe.graph/2"
NODES_SCHEMA_NAME = "gnnpipe.nodes/2"
EDGES_SCHEMA_NAME = "gnnpipe.edges/1"
# dataset.storage.features: auto keeps x in graph.pt below this many stored bytes
AUTO_EXTERNAL_BYTES = 1 << 30
# numpy has no bfloat16: the external file holds its bits as uint16, graph.pt's meta names it
NPY_DTYPES = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2"), "bfloat16": np.dtype("<u2")}


# the one naming rule of the per-type files
def nodes_file(node_type: str) -> str:
    return f"nodes_{node_type}.parquet"


def edges_file(edge_type: EdgeType) -> str:
    return f"edges_{edge_type_name(edge_type)}.parquet"


def features_file(node_type: str) -> str:
    return f"features_{node_type}.npy"


def node_ids_file(node_type: str) -> str:
    return f"node_ids_{node_type}.parquet"


def edge_attrs_file(edge_type: EdgeType) -> str:
    return f"edge_attrs_{edge_type_name(edge_type)}.parquet"


def nodes_schema(width: int | None, labelled: bool,
                 value_type: pa.DataType = pa.float32()) -> pa.Schema:
    """``nodes_<T>.parquet``: node_id, label (the target type only), x (F,) float32 or float16
    (``width`` None: x is kept in features_<T>.npy)."""
    fields = [("node_id", pa.int64())] + ([("label", pa.int64())] if labelled else [])
    return pa.schema(fields + ([] if width is None else [("x", pa.list_(value_type, width))]))


def external_features(mode: str, num_nodes: int, num_features: int, feature_dtype: str) -> bool:
    """Whether ``dataset.storage.features`` (inline | external | auto) puts a type's x in its
    features_<T>.npy."""
    if mode == "auto":
        nbytes = num_nodes * num_features * FEATURE_DTYPES[feature_dtype].itemsize
        return nbytes >= AUTO_EXTERNAL_BYTES
    return mode == "external"


def write_prepared(out: Path, graph: Graph, *, feature_dtype: str = "float32",
                   compression: str = "zstd", features: str = "inline",
                   features_written: bool = False, block_rows: int = 65_536,
                   featureless: tuple[str, ...] = ()) -> None:
    """The prepared files of ``graph`` (any number of types) into ``out``, Parquet a row group
    at a time (tensors over memory maps are never copied whole: the block-wise prepare hands
    its maps here, gnnpipe/io/prepared_maps.py).

    ``feature_dtype`` rounds x for storage (graph.pt holds it in that dtype; nodes_<T>.parquet
    holds float16, or float32 for float32 / the bfloat16-rounded values, which Parquet lacks).
    ``features`` (``dataset.storage.features``): ``inline`` keeps a type's x in graph.pt and its
    nodes table; ``external`` (or ``auto`` at >= 1 GiB of a type's stored features) writes it
    once, to features_<T>.npy in row blocks of ``block_rows``, and graph.pt's meta points to it
    (the nodes table then holds node_id and label only). ``features_written``: those files are
    already in ``out`` (streamed by prepare, moved by the block-wise one); ``x`` is not read.
    ``featureless``: the types without feature columns, for graph.json.
    """
    out = Path(out)
    tensors: dict[str, torch.Tensor] = {}
    external: dict[str, dict] = {}
    for node_type, x in graph.x.items():
        n, f = x.shape
        y = graph.y if node_type == graph.target else None
        if external_features(features, n, f, feature_dtype):
            if not features_written:
                _write_features(out / features_file(node_type), x, feature_dtype, block_rows)
            external[node_type] = {"file": features_file(node_type), "dtype": feature_dtype,
                                   "shape": [n, f]}
        else:
            tensors[f"x.{node_type}"] = x.to(FEATURE_DTYPES[feature_dtype])
        _stream_nodes(out / nodes_file(node_type), n, y, tensors.get(f"x.{node_type}"),
                      feature_dtype, compression)
    tensors["y"] = graph.y
    for edge_type, csr in graph.csr.items():
        name = edge_type_name(edge_type)
        stream_edges(out / edges_file(edge_type), EDGES_SCHEMA_NAME, csr.indptr.numpy(),
                     csr.indices.numpy(), {}, compression)
        tensors[f"{name}.indptr"], tensors[f"{name}.indices"] = csr.indptr, csr.indices
    # the optional tensors: only graphs whose nodes / edges carry a time, official splits
    tensors.update({f"time.{t}": v for t, v in graph.node_time.items()})
    tensors.update({f"{edge_type_name(e)}.time": v for e, v in graph.edge_time.items()})
    if graph.public_roles is not None:
        tensors["public_roles"] = graph.public_roles
    meta = {"num_classes": graph.num_classes, "target": graph.target}
    if external:
        meta["features"] = external
    save_tensors(out / "graph.pt", GRAPH_SCHEMA, tensors, meta=meta)
    write_description(out, graph, external=list(external), featureless=featureless)


def _write_features(path: Path, x: torch.Tensor, feature_dtype: str, block_rows: int) -> None:
    """``features_<T>.npy``: ``x`` (N, F) rounded to the stored dtype (bfloat16: its bits), in
    row blocks of ``block_rows``, so no more than one block of it is ever in memory."""
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {
            "descr": np.lib.format.dtype_to_descr(NPY_DTYPES[feature_dtype]),
            "fortran_order": False, "shape": tuple(x.shape)})
        for lo in range(0, x.shape[0], block_rows):
            block = x[lo:lo + block_rows].float()
            bad = ~torch.isfinite(block).all(dim=1)
            if bad.any():
                raise ValueError(f"{path}: features contain NaN or inf in {int(bad.sum())} rows "
                                 f"(first: node {lo + int(bad.int().argmax())})")
            stored = block.to(FEATURE_DTYPES[feature_dtype])
            handle.write((stored.view(torch.int16) if feature_dtype == "bfloat16"
                          else stored).numpy().tobytes())


def _stream_nodes(path: Path, n: int, y: torch.Tensor | None, x: torch.Tensor | None,
                  feature_dtype: str, compression: str) -> None:
    """``nodes_<T>.parquet``: node_id, label (``y`` given: the target type), x (``x`` (N, F)
    in the stored dtype; None: kept in features_<T>.npy), a row group at a time."""
    half = feature_dtype == "float16"
    value_type = pa.float16() if half else pa.float32()
    schema = nodes_schema(None if x is None else int(x.shape[1]), y is not None, value_type)
    with table_stream(path, schema, NODES_SCHEMA_NAME, compression) as add:
        for lo in range(0, n, ROW_GROUP_ROWS):
            hi = min(n, lo + ROW_GROUP_ROWS)
            columns = {"node_id": np.arange(lo, hi, dtype=np.int64)}
            if y is not None:
                columns["label"] = y[lo:hi].numpy()
            if x is not None:  # bfloat16: its float32 values (Parquet has no bfloat16)
                values = x[lo:hi] if half or feature_dtype == "float32" else x[lo:hi].float()
                columns["x"] = pa.FixedSizeListArray.from_arrays(
                    pa.array(values.numpy().reshape(-1), value_type), int(x.shape[1]))
            add(pa.table(columns))


def stream_edges(path: Path, name: str, indptr: np.ndarray, indices: np.ndarray,
                 attrs: dict[str, tuple[np.ndarray, pa.DataType]], compression: str) -> None:
    """``edges_<E>.parquet`` (``name``: its schema tag) or ``edge_attrs_<E>.parquet``: (src,
    dst) of every stored edge in CSR order and each attribute (E,) of ``attrs`` (name -> its
    values as stored bits (``prepared_maps.raw_dtype``) or float32, and its column type), a
    row group at a time."""
    schema = pa.schema([*EDGES_SCHEMA, *((column, kind) for column, (_, kind) in attrs.items())])
    with table_stream(path, schema, name, compression) as add:
        for lo in range(0, indices.size, ROW_GROUP_ROWS):
            hi = min(indices.size, lo + ROW_GROUP_ROWS)
            columns = {"src": indices[lo:hi],
                       "dst": np.searchsorted(indptr, np.arange(lo, hi), side="right") - 1}
            for column, (values, column_type) in attrs.items():  # the column of those bytes
                columns[column] = pa.Array.from_buffers(column_type, hi - lo, [
                    None, pa.py_buffer(np.ascontiguousarray(values[lo:hi]))])
            add(pa.table(columns))


def read_only_tensor(array: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` of a read-only memory map, without torch's not-writable warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def stored_features(path: Path, payload: dict, node_type: str, *, mmap: bool) -> torch.Tensor:
    """x (N, F) of ``node_type`` in ``graph.pt``, in its stored dtype: the tensor ``x.<T>`` in
    it, or the features_<T>.npy its meta names (memory-mapped with ``mmap``), schema, shape and
    dtype checked."""
    entry = payload["meta"].get("features", {}).get(node_type)
    name = f"x.{node_type}"
    if entry is None:
        check_tensors(path, payload, {name: (None, 2)})
        x = payload[name]
    else:
        file_name = features_file(node_type)
        if (not isinstance(entry, dict) or entry.get("file") != file_name
                or entry.get("dtype") not in NPY_DTYPES
                or not isinstance(entry.get("shape"), list)):
            raise ValueError(f"{path}: meta.features.{node_type} must name {file_name}, a "
                             f"feature dtype and a shape, found {entry!r}")
        file = path.parent / file_name
        if not file.exists():
            raise ValueError(f"{file}: file not found; graph.pt keeps its features there, re-run "
                             "the prepare stage")
        try:
            array = np.load(file, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:  # numpy's "not a .npy file" is a ValueError
            raise ValueError(f"{file}: not a readable .npy feature file ({error_reason(err)})"
                             ) from None
        if array.dtype != NPY_DTYPES[entry["dtype"]] or list(array.shape) != entry["shape"]:
            raise ValueError(f"{file}: holds {array.dtype} {list(array.shape)}, graph.pt says "
                             f"{entry['dtype']} {entry['shape']}")
        x = read_only_tensor(array)
        x = x.view(torch.bfloat16) if entry["dtype"] == "bfloat16" else x
    if x.dtype not in FEATURE_DTYPES.values():
        raise ValueError(f"{path}: tensor {name!r} must be torch.float32 (or float16 / "
                         f"bfloat16), found {x.dtype}")
    return x


# Optional extras of user tables (dataset.source parquet | csv); absent for the other sources.
def require_columns(fields: dict[str, pa.DataType], optional: tuple[str, ...]):
    """Expected schema: the fixed ``fields`` plus any of ``optional`` the file has, as found."""
    def expected(found: pa.Schema) -> pa.Schema:
        extra = [(name, found.field(name).type) for name in optional if name in found.names]
        return pa.schema(list(fields.items()) + extra)
    return expected


def read_edge_attrs(prepared: Path, edge_type: EdgeType) -> pa.Table:
    """``edge_attrs_<E>.parquet``: src, dst int64 and the optional weight / timestamp."""
    return read_table(Path(prepared) / edge_attrs_file(edge_type),
                      require_columns({"src": pa.int64(), "dst": pa.int64()},
                                      ("weight", "timestamp")),
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
