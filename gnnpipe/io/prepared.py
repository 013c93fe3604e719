"""Prepared-graph files: a homogeneous graph's nodes/edges Parquet, graph.pt (CSR, x, y),
graph.json (its description, gnnpipe/io/description.py) and the optional node_ids.parquet /
edge_attrs.parquet of user tables; a typed graph's per-type files (``write_typed_prepared``;
layout in gnnpipe/io/typed.py, whose ``read_graph`` reads either layout). ``write_prepared``
and ``write_node_ids`` take either layout."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from gnnpipe.data.graph import HOMOGENEOUS, UNLABELLED, Csr, Graph, edge_type_name
from gnnpipe.io.common import (CSR_SPEC, EDGES_SCHEMA, FEATURE_DTYPES, NODES_NO_X_SCHEMA, SPLIT_ROLES,
                               check_csr, nodes_schema, nodes_schema_like)
from gnnpipe.io.description import DESCRIPTION, read_description, write_description
from gnnpipe.io.parquet import read_table, write_table
from gnnpipe.io.tensors import load_tensors, save_tensors


FEATURES_FILE = "features.npy"
# dataset.storage.features: auto keeps x in graph.pt below this many stored bytes
AUTO_EXTERNAL_BYTES = 1 << 30
# numpy has no bfloat16: the external file holds its bits as uint16, graph.pt's meta names it
_NPY_DTYPES = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2"), "bfloat16": np.dtype("<u2")}


def external_features(mode: str, num_nodes: int, num_features: int, feature_dtype: str) -> bool:
    """Whether ``dataset.storage.features`` (inline | external | auto) puts x in features.npy."""
    if mode == "auto":
        nbytes = num_nodes * num_features * FEATURE_DTYPES[feature_dtype].itemsize
        return nbytes >= AUTO_EXTERNAL_BYTES
    return mode == "external"


class FeatureFileWriter:
    """``features.npy`` (N, F) in the stored dtype, written in row blocks as they come, so no
    more than one block of features is ever in memory. ``write`` takes float32 (B, F) rows in
    node order; ``close`` checks that all N rows came."""

    def __init__(self, out: Path, num_nodes: int, num_features: int, feature_dtype: str,
                 where: str):
        self.path = Path(out) / FEATURES_FILE
        self.shape, self.feature_dtype, self.where = (num_nodes, num_features), feature_dtype, where
        self.written = 0
        self._file = open(self.path, "wb")
        np.lib.format.write_array_header_1_0(self._file, {
            "descr": np.lib.format.dtype_to_descr(_NPY_DTYPES[feature_dtype]),
            "fortran_order": False, "shape": self.shape})

    def write(self, block: np.ndarray) -> None:
        if block.ndim != 2 or block.shape[1] != self.shape[1]:
            raise ValueError(f"{self.where}: feature block of shape {block.shape}, expected "
                             f"(rows, {self.shape[1]})")
        bad = ~np.isfinite(block).all(axis=1)
        if bad.any():
            raise ValueError(f"{self.where}: features contain NaN or inf in {int(bad.sum())} rows "
                             f"(first: node {self.written + int(np.argmax(bad))})")
        self._file.write(stored_bytes(torch.from_numpy(np.ascontiguousarray(block)),
                                      self.feature_dtype))
        self.written += block.shape[0]

    def close(self) -> np.ndarray:
        """The file as written, memory-mapped read-only (N, F) (bfloat16: its uint16 bits)."""
        self._file.close()
        if self.written != self.shape[0]:
            raise ValueError(f"{self.where}: {self.written} feature rows written, expected "
                             f"{self.shape[0]}")
        return np.load(self.path, mmap_mode="r", allow_pickle=False)


def stored_bytes(x: torch.Tensor, feature_dtype: str) -> bytes:
    """Rows ``x`` (B, F) rounded to the stored dtype, as the bytes features.npy holds."""
    stored = x.to(FEATURE_DTYPES[feature_dtype]).contiguous()
    if feature_dtype == "bfloat16":
        stored = stored.view(torch.int16)
    return stored.numpy().tobytes()


def write_prepared(out: Path, graph: Graph, *, feature_dtype: str = "float32",
                   compression: str = "zstd", features: str = "inline",
                   features_written: bool = False, block_rows: int = 65_536) -> None:
    """``nodes.parquet``, ``edges.parquet``, ``graph.pt`` and ``graph.json`` of a homogeneous
    ``graph`` (a typed one: ``write_typed_prepared``'s per-type files, float32, inline).

    ``feature_dtype`` rounds x for storage (graph.pt holds it in that dtype; nodes.parquet holds
    float16, or float32 for float32 / the bfloat16-rounded values, which Parquet lacks).
    ``features`` (``dataset.storage.features``): ``inline`` keeps x in graph.pt and
    nodes.parquet; ``external`` (or ``auto`` at >= 1 GiB of stored features) writes it once, to
    ``features.npy`` in row blocks of ``block_rows``, and graph.pt's meta points to it
    (nodes.parquet then holds node_id and label only). ``features_written``: a ``FeatureFileWriter``
    already wrote features.npy into ``out`` (streamed by prepare); ``x`` is then not read.
    """
    if graph.layout != HOMOGENEOUS:
        return write_typed_prepared(out, graph)
    view = graph.target_view()  # the one type's tensors
    n, f = view.x.shape
    meta = {"num_classes": view.num_classes}
    tensors = {"indptr": view.csr.indptr, "indices": view.csr.indices}
    columns = {"node_id": np.arange(n, dtype=np.int64), "label": view.y.numpy()}
    if external_features(features, n, f, feature_dtype):
        if not features_written:
            writer = FeatureFileWriter(out, n, f, feature_dtype, str(Path(out) / FEATURES_FILE))
            for lo in range(0, n, block_rows):
                writer.write(view.x[lo:lo + block_rows].float().numpy())
            writer.close()
        meta["features"] = {"file": FEATURES_FILE, "dtype": feature_dtype, "shape": [n, f]}
        write_table(out / "nodes.parquet", pa.table(columns), NODES_NO_X_SCHEMA,
                    "gnnpipe.nodes/1", compression)
    else:
        x = view.x.to(FEATURE_DTYPES[feature_dtype])
        half = feature_dtype == "float16"
        values = x.numpy() if half else x.float().numpy()
        value_type = pa.float16() if half else pa.float32()
        columns["x"] = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), value_type), f)
        write_table(out / "nodes.parquet", pa.table(columns), nodes_schema(f, value_type),
                    "gnnpipe.nodes/1", compression)
        tensors["x"] = x
    src, dst = view.csr.edge_index().numpy()
    write_table(out / "edges.parquet", pa.table({"src": src, "dst": dst}), EDGES_SCHEMA,
                "gnnpipe.edges/1", compression)
    tensors["y"] = view.y
    if view.timestamps is not None:  # optional: only graphs whose nodes carry a time
        tensors["timestamps"] = view.timestamps
    if view.public_roles is not None:  # optional: the official split of planetoid / ogb
        tensors["public_roles"] = view.public_roles
    save_tensors(out / "graph.pt", "gnnpipe.graph/1", tensors, meta=meta)
    write_description(out, graph, features_file=meta.get("features", {}).get("file"))


TYPED_GRAPH_SCHEMA = "gnnpipe.hetero_graph/1"


def typed_nodes_schema(width: int, labelled: bool) -> pa.Schema:
    """``nodes_<type>.parquet``: node_id, label (the target type only), x float32 (F,)."""
    fields = [("node_id", pa.int64())] + ([("label", pa.int64())] if labelled else [])
    return pa.schema(fields + [("x", pa.list_(pa.float32(), width))])


def write_typed_prepared(out: Path, graph: Graph) -> None:
    """The typed layout (gnnpipe/io/typed.py): graph.json, one Parquet table per node type and
    per edge type, and graph.pt."""
    out = Path(out)
    tensors: dict[str, torch.Tensor] = {"y": graph.y}
    for node_type, x in graph.x.items():
        n, f = x.shape
        labelled = node_type == graph.target
        columns = {"node_id": np.arange(n, dtype=np.int64)}
        if labelled:
            columns["label"] = graph.y.numpy()
        columns["x"] = pa.FixedSizeListArray.from_arrays(pa.array(x.numpy().reshape(-1)), f)
        write_table(out / f"nodes_{node_type}.parquet", pa.table(columns),
                    typed_nodes_schema(f, labelled), "gnnpipe.hetero_nodes/1")
        tensors[f"x.{node_type}"] = x
    for edge_type, csr in graph.csr.items():
        name = edge_type_name(edge_type)
        src, dst = csr.edge_index().numpy()
        write_table(out / f"edges_{name}.parquet", pa.table({"src": src, "dst": dst}),
                    EDGES_SCHEMA, "gnnpipe.hetero_edges/1")
        tensors[f"{name}.indptr"], tensors[f"{name}.indices"] = csr.indptr, csr.indices
    # typed user tables only: the built-in graph's files stay byte-identical
    tensors.update({f"time.{t}": v for t, v in graph.node_time.items()})
    tensors.update({f"{edge_type_name(e)}.time": v for e, v in graph.edge_time.items()})
    if graph.public_roles is not None:
        tensors["public_roles"] = graph.public_roles
    save_tensors(out / "graph.pt", TYPED_GRAPH_SCHEMA, tensors,
                 meta={"num_classes": graph.num_classes, "target": graph.target})
    write_description(out, graph)


def stored_features(path: Path, payload: dict, *, mmap: bool) -> torch.Tensor:
    """x (N, F) of ``graph.pt`` in its stored dtype: the tensor in it, or the features.npy its
    meta names (memory-mapped with ``mmap``), schema, shape and dtype checked."""
    entry = payload["meta"].get("features")
    if entry is None:
        x = payload.get("x")
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{path}: missing tensor 'x' of the 'gnnpipe.graph/1' schema")
        if not x.is_floating_point():
            raise ValueError(f"{path}: tensor 'x' must be floating point, found {x.dtype}")
        if x.dim() != 2:
            raise ValueError(f"{path}: tensor 'x' must have 2 dims, found shape {tuple(x.shape)}")
    else:
        if (not isinstance(entry, dict) or entry.get("file") != FEATURES_FILE
                or entry.get("dtype") not in _NPY_DTYPES or not isinstance(entry.get("shape"), list)):
            raise ValueError(f"{path}: meta.features must name {FEATURES_FILE}, a feature dtype "
                             f"and a shape, found {entry!r}")
        file = path.parent / FEATURES_FILE
        if not file.exists():
            raise ValueError(f"{file}: file not found; graph.pt keeps its features there, re-run "
                             "the prepare stage")
        try:
            array = np.load(file, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:  # numpy's "not a .npy file" is a ValueError
            raise ValueError(f"{file}: not a readable .npy feature file "
                             f"({str(err).strip()[:200] or type(err).__name__})") from None
        if array.dtype != _NPY_DTYPES[entry["dtype"]] or list(array.shape) != entry["shape"]:
            raise ValueError(f"{file}: holds {array.dtype} {list(array.shape)}, graph.pt says "
                             f"{entry['dtype']} {entry['shape']}")
        with warnings.catch_warnings():  # a read-only map: torch warns that it is not writable
            warnings.simplefilter("ignore", UserWarning)
            x = torch.from_numpy(array)
        x = x.view(torch.bfloat16) if entry["dtype"] == "bfloat16" else x
    if x.dtype not in FEATURE_DTYPES.values():
        raise ValueError(f"{path}: tensor 'x' must be torch.float32 (or float16 / bfloat16), "
                         f"found {x.dtype}")
    return x


def read_homogeneous(prepared: Path, *, mmap: bool = False, stored_x: bool = False) -> Graph:
    """The homogeneous layout's graph from ``graph.pt`` (and features.npy where it keeps x
    there), with shapes and ranges checked, against graph.json too (``gnnpipe.io.read_graph``
    reads either layout).

    ``x`` comes back float32 (a copy when it is stored in half precision, else the mmap view);
    ``stored_x``: in its stored dtype, never copied (with ``mmap``, the memory-mapped file).
    """
    path = Path(prepared) / "graph.pt"
    spec = {**CSR_SPEC, "y": (torch.int64, 1)}
    payload = load_tensors(path, "gnnpipe.graph/1", spec, mmap=mmap)
    x, y = stored_features(path, payload, mmap=mmap), payload["y"]
    if not stored_x:
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
    roles = _check_public_roles(payload.get("public_roles"), y.numel(), path)
    graph = Graph.homogeneous(csr, x, y, num_classes, timestamps=timestamps, public_roles=roles)
    _check_description(prepared, graph, payload["meta"].get("features"))
    return graph


def _check_description(prepared: Path, graph: Graph, features: dict | None) -> None:
    """graph.json must describe the homogeneous ``graph``: types, shape, classes and
    the optional tensors of graph.pt (``features``: graph.pt's meta entry for features.npy)."""
    meta = read_description(prepared)
    path = Path(prepared) / DESCRIPTION
    if meta["layout"] != HOMOGENEOUS:
        raise ValueError(f"{path}: describes a typed graph, but graph.pt holds a homogeneous "
                         "one; re-run the prepare stage")
    expected = {"node_types": [[t, n, int(graph.x[t].shape[1])]
                               for t, n in graph.num_nodes_dict.items()],
                "num_classes": graph.num_classes, "node_time": list(graph.node_time),
                "public_roles": graph.public_roles is not None,
                "features": None if features is None else features["file"]}
    found = {"node_types": meta["node_types"], "num_classes": meta["num_classes"],
             "node_time": meta.get("node_time", []), "public_roles": bool(meta.get("public_roles")),
             "features": meta.get("features")}
    for key, value in expected.items():
        if found[key] != value:
            raise ValueError(f"{path}: {key} is {found[key]!r}, graph.pt holds {value!r}; "
                             "re-run the prepare stage")


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
                   compression: str = "zstd", node_type: str | None = None) -> None:
    """``node_ids.parquet`` (``node_ids_<node_type>.parquet`` for a type of a typed graph): row
    ``i`` maps node ``i`` back to the id it has in the user's table.

    ``original_id`` (N,) int or string, ``timestamp`` (N,) optional (the node table's column as
    read), both in node order.
    """
    columns = {"node_id": pa.array(np.arange(len(original_id), dtype=np.int64)),
               "original_id": original_id}
    if timestamp is not None:
        columns["timestamp"] = timestamp
    table = pa.table(columns)
    name = "node_ids.parquet" if node_type is None else f"node_ids_{node_type}.parquet"
    write_table(Path(out) / name, table, table.schema, "gnnpipe.node_ids/1", compression)


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
