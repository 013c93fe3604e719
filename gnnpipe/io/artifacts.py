"""Readers and writers for every artifact the stages exchange (the only place paths are known).

Layout (``dvc.yaml`` names the folders):
  prepared/  nodes.parquet (node_id, label, x), edges.parquet (src, dst), graph.pt (CSR, x, y,
             optional public_roles), for user tables also node_ids.parquet (node_id, original_id)
             and edge_attrs.parquet (src, dst, weight / timestamp)
  split/     nodes.parquet (node_id, split), message_<phase>.pt (CSR), meta.json; link task
             also edges_<role>.parquet (src, dst), negatives_<phase>.parquet (positive, src, dst)
  partition/ node_to_part.parquet (node_id, part), part_<k>.pt (shard + halo), meta.json
  propagate/ <graph>_hop_<k>.pt (x), meta.json
  model/     predictions.pt (node_id, logits; link task: val/test positive and negative scores),
             model.pt (state_dict)
"""

from __future__ import annotations

import contextlib
import os
import struct
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import torch

from gnnpipe.graph import Csr, Graph
from gnnpipe.io.atomic import atomic_path, read_json, write_json
from gnnpipe.io.parquet import read_table, write_table
from gnnpipe.io.tensors import load_tensors, save_payload, save_state_dict, save_tensors

if TYPE_CHECKING:  # imported where used, so only stages reading shards depend on partition.py
    from gnnpipe.partition import PartShard

PHASES = ("train", "val", "test")
SPLIT_ROLES = ("train", "val", "test", "unused")

EDGES_SCHEMA = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
SPLIT_SCHEMA = pa.schema([("node_id", pa.int64()), ("split", pa.string())])
PARTS_SCHEMA = pa.schema([("node_id", pa.int64()), ("part", pa.int32())])
CSR_SPEC = {"indptr": (torch.int64, 1), "indices": (torch.int64, 1)}


# graph.pt may hold x in these (dataset.storage.feature_dtype); read_graph returns float32
FEATURE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def nodes_schema(num_features: int, value_type: pa.DataType = pa.float32()) -> pa.Schema:
    return pa.schema([("node_id", pa.int64()), ("label", pa.int64()),
                      ("x", pa.list_(value_type, num_features))])


def _nodes_schema_like(found: pa.Schema) -> pa.Schema:
    x_type = found.field("x").type if "x" in found.names else None
    if not isinstance(x_type, pa.FixedSizeListType):
        return nodes_schema(1)
    half = x_type.value_type == pa.float16()  # dataset.storage.feature_dtype: float16
    return nodes_schema(x_type.list_size, pa.float16() if half else pa.float32())


def _check_csr(csr: Csr, num_nodes: int, where: Path) -> Csr:
    indptr, indices = csr.indptr, csr.indices
    if indptr.numel() != num_nodes + 1:
        raise ValueError(f"{where}: indptr has {indptr.numel()} entries, expected {num_nodes + 1}")
    if indptr[0] != 0 or indptr[-1] != indices.numel() or bool((indptr[1:] < indptr[:-1]).any()):
        raise ValueError(f"{where}: indptr is not a valid CSR offset array")
    if indices.numel() and (indices.min() < 0 or indices.max() >= num_nodes):
        raise ValueError(f"{where}: indices hold node ids outside [0, {num_nodes})")
    return csr


# ----------------------------------------------------------------------------------- prepared
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
    if y.numel() and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"{path}: labels outside [0, {num_classes})")
    csr = _check_csr(Csr(payload["indptr"], payload["indices"]), x.shape[0], path)
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
    return read_table(Path(prepared) / "nodes.parquet", _nodes_schema_like, "gnnpipe.nodes/1")


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


# -------------------------------------------------------------------------------------- split
def write_split(out: Path, roles: np.ndarray, message_graphs: dict[str, Csr], meta: dict) -> None:
    """``roles`` str (N,) in SPLIT_ROLES; ``message_graphs`` one CSR per phase, shared by identity."""
    table = pa.table({"node_id": np.arange(roles.size, dtype=np.int64), "split": roles})
    write_table(out / "nodes.parquet", table, SPLIT_SCHEMA, "gnnpipe.split_nodes/1")
    files: dict[str, str] = {}
    written: dict[int, str] = {}
    for phase in PHASES:  # a graph shared by several phases is stored once
        csr = message_graphs[phase]
        if id(csr) not in written:
            written[id(csr)] = f"message_{phase}.pt"
            save_tensors(out / written[id(csr)], "gnnpipe.csr/1",
                         {"indptr": csr.indptr, "indices": csr.indices})
        files[phase] = written[id(csr)]
    write_json(out / "meta.json", {**meta, "message_graph": files})


def read_split_roles(split: Path) -> np.ndarray:
    """Role of every node: str array (N,)."""
    path = Path(split) / "nodes.parquet"
    table = read_table(path, SPLIT_SCHEMA, "gnnpipe.split_nodes/1")
    roles = np.asarray(table.column("split").to_numpy(zero_copy_only=False), dtype=object)
    ids = table.column("node_id").to_numpy()
    if not np.array_equal(ids, np.arange(ids.size)):
        raise ValueError(f"{path}: node_id must be 0..N-1 in order")
    unknown = set(np.unique(roles)) - set(SPLIT_ROLES)
    if unknown:
        raise ValueError(f"{path}: column 'split' has unknown roles {sorted(unknown)}; "
                         f"allowed: {', '.join(SPLIT_ROLES)}")
    return roles.astype(str)


def read_split_meta(split: Path) -> dict:
    meta = read_json(Path(split) / "meta.json")
    files = meta.get("message_graph")
    if not isinstance(files, dict) or set(files) != set(PHASES):
        raise ValueError(f"{Path(split) / 'meta.json'}: 'message_graph' must map each of "
                         f"{', '.join(PHASES)} to a file")
    return meta


def read_message_graphs(split: Path, num_nodes: int) -> dict[str, Csr]:
    """Message graph per phase; phases that share a file share one ``Csr`` object."""
    files = read_split_meta(split)["message_graph"]
    loaded: dict[str, Csr] = {}
    for name in sorted(set(files.values())):
        path = Path(split) / name
        payload = load_tensors(path, "gnnpipe.csr/1", CSR_SPEC)
        loaded[name] = _check_csr(Csr(payload["indptr"], payload["indices"]), num_nodes, path)
    return {phase: loaded[files[phase]] for phase in PHASES}


# --------------------------------------------------------------------------------- link split
# split/ for dataset.task link, beside the files above (nodes.parquet then has every node
# "unused": no node carries a label role): edges_<role>.parquet (src, dst) positives per role,
# negatives_<phase>.parquet (positive, src, dst) K fixed negatives per val/test positive.
LINK_EDGE_ROLES = ("message", "train_supervision", "val", "test")
LINK_EVAL_PHASES = ("val", "test")
NEGATIVES_SCHEMA = pa.schema([("positive", pa.int64()), ("src", pa.int64()), ("dst", pa.int64())])


def write_link_split(out: Path, edges: dict[str, torch.Tensor], negatives: dict[str, torch.Tensor],
                     message_graphs: dict[str, Csr], num_nodes: int, meta: dict) -> None:
    """``edges`` role -> int64 (2, E); ``negatives`` phase -> int64 (P, K) targets of the heads
    ``edges[phase][0]``; message graphs and meta.json exactly as for node splits."""
    write_split(out, np.full(num_nodes, "unused", dtype=object), message_graphs,
                {**meta, "task": "link",
                 "num_negatives": {p: int(negatives[p].shape[1]) for p in LINK_EVAL_PHASES}})
    write_link_tables(out, edges, negatives)


def write_link_tables(out: Path, edges: dict[str, torch.Tensor],
                      negatives: dict[str, torch.Tensor]) -> None:
    """``edges_<role>.parquet`` and ``negatives_<phase>.parquet`` (homogeneous and typed splits)."""
    for role in LINK_EDGE_ROLES:
        src, dst = edges[role].numpy()
        write_table(out / f"edges_{role}.parquet", pa.table({"src": src, "dst": dst}),
                    EDGES_SCHEMA, "gnnpipe.split_edges/1")
    for phase in LINK_EVAL_PHASES:
        targets = negatives[phase]
        positives, per = targets.shape
        heads = edges[phase][0]
        table = pa.table({"positive": np.repeat(np.arange(positives, dtype=np.int64), per),
                          "src": np.repeat(heads.numpy(), per),
                          "dst": targets.reshape(-1).numpy()})
        write_table(out / f"negatives_{phase}.parquet", table, NEGATIVES_SCHEMA,
                    "gnnpipe.negatives/1")


def read_link_edges(split: Path, num_nodes: int) -> dict[str, torch.Tensor]:
    """Positive edges per role: int64 (2, E_role), node ids checked against ``num_nodes``."""
    meta = read_split_meta(split)
    if meta.get("task") != "link":
        raise ValueError(f"{Path(split) / 'meta.json'}: task is {meta.get('task')!r}, not 'link'; "
                         "re-run the split stage with dataset.task: link")
    out = {}
    for role in LINK_EDGE_ROLES:
        path = Path(split) / f"edges_{role}.parquet"
        table = read_table(path, EDGES_SCHEMA, "gnnpipe.split_edges/1")
        pair = np.stack([table.column("src").to_numpy(), table.column("dst").to_numpy()])
        if pair.size and (pair.min() < 0 or pair.max() >= num_nodes):
            raise ValueError(f"{path}: node ids outside [0, {num_nodes})")
        out[role] = torch.from_numpy(pair.astype(np.int64))
    return out


def read_link_negatives(split: Path, edges: dict[str, torch.Tensor],
                        num_nodes: int) -> dict[str, torch.Tensor]:
    """Fixed negatives per val/test positive: int64 (P, K), row i pairs with ``edges[phase][:, i]``."""
    per = read_split_meta(split).get("num_negatives", {})
    out = {}
    for phase in LINK_EVAL_PHASES:
        path = Path(split) / f"negatives_{phase}.parquet"
        table = read_table(path, NEGATIVES_SCHEMA, "gnnpipe.negatives/1")
        k, heads = per.get(phase), edges[phase][0].numpy()
        if not isinstance(k, int) or k < 1 or table.num_rows != heads.size * k:
            raise ValueError(f"{path}: {table.num_rows} rows do not make {k!r} negatives for each "
                             f"of the {heads.size} {phase} positives")
        positive = table.column("positive").to_numpy()
        src, dst = table.column("src").to_numpy(), table.column("dst").to_numpy()
        if (not np.array_equal(positive, np.repeat(np.arange(heads.size), k))
                or not np.array_equal(src, np.repeat(heads, k))):
            raise ValueError(f"{path}: rows must be grouped by positive, each with that "
                             f"positive's source as src")
        if dst.size and (dst.min() < 0 or dst.max() >= num_nodes):
            raise ValueError(f"{path}: node ids outside [0, {num_nodes})")
        out[phase] = torch.from_numpy(dst.astype(np.int64).reshape(heads.size, k))
    return out


# ---------------------------------------------------------------------------------- partition
# partition/ node_to_part.parquet, part_<k>.pt (one PartShard each), meta.json
SHARD_SPEC = {**CSR_SPEC, "node_id": (torch.int64, 1), "ring_ptr": (torch.int64, 1),
              "degree": (torch.int64, 1)}


def write_partition(out: Path, parts: np.ndarray) -> None:
    table = pa.table({"node_id": np.arange(parts.size, dtype=np.int64), "part": parts})
    write_table(out / "node_to_part.parquet", table, PARTS_SCHEMA, "gnnpipe.node_to_part/1")


def read_partition(partition: Path) -> np.ndarray:
    table = read_table(Path(partition) / "node_to_part.parquet", PARTS_SCHEMA,
                       "gnnpipe.node_to_part/1")
    return table.column("part").to_numpy()


def write_partition_shard(out: Path, shard: PartShard) -> None:
    save_tensors(out / f"part_{shard.part}.pt", "gnnpipe.part_shard/1",
                 {"indptr": shard.csr.indptr, "indices": shard.csr.indices,
                  "node_id": shard.node_id, "ring_ptr": shard.ring_ptr, "degree": shard.degree},
                 meta={"part": shard.part, "num_parts": shard.num_parts,
                       "num_nodes": shard.num_nodes})


def write_partition_meta(out: Path, meta: dict) -> None:
    """``meta.json``: num_parts, halo_hops, num_nodes and how the parts were made."""
    write_json(out / "meta.json", meta)


def read_partition_meta(partition: Path) -> dict:
    path = Path(partition) / "meta.json"
    meta = read_json(path)
    for key in ("num_parts", "halo_hops", "num_nodes"):
        if not isinstance(meta.get(key), int) or meta[key] < 0:
            raise ValueError(f"{path}: {key!r} must be a non-negative int, found {meta.get(key)!r}")
    return meta


def read_partition_shard(partition: Path, part: int) -> PartShard:
    """Shard ``part`` alone (``part_<part>.pt``; no other shard is opened), validated."""
    from gnnpipe.partition import PartShard

    meta = read_partition_meta(partition)
    num_parts, num_nodes = meta["num_parts"], meta["num_nodes"]
    if not 0 <= part < num_parts:
        raise ValueError(f"{partition}: no part {part}; the partition has parts 0..{num_parts - 1}")
    path = Path(partition) / f"part_{part}.pt"
    payload = load_tensors(path, "gnnpipe.part_shard/1", SHARD_SPEC)
    found = payload["meta"]
    if (found.get("part"), found.get("num_parts"), found.get("num_nodes")) != (part, num_parts,
                                                                               num_nodes):
        raise ValueError(f"{path}: shard meta {found} disagrees with meta.json "
                         f"(part {part} of {num_parts}, {num_nodes} nodes)")
    node_id, ring_ptr, degree = payload["node_id"], payload["ring_ptr"], payload["degree"]
    size = node_id.numel()
    if (ring_ptr.numel() != meta["halo_hops"] + 2 or ring_ptr[0] != 0 or ring_ptr[-1] != size
            or bool((ring_ptr[1:] < ring_ptr[:-1]).any())):
        raise ValueError(f"{path}: ring_ptr must rise from 0 to {size} in "
                         f"{meta['halo_hops'] + 2} entries")
    if size and (node_id.min() < 0 or node_id.max() >= num_nodes
                 or torch.unique(node_id).numel() != size):
        raise ValueError(f"{path}: node_id must hold distinct ids in [0, {num_nodes})")
    if degree.numel() != size:
        raise ValueError(f"{path}: degree has {degree.numel()} entries for {size} nodes")
    csr = _check_csr(Csr(payload["indptr"], payload["indices"]), size, path)
    return PartShard(part=part, num_parts=num_parts, num_nodes=num_nodes, node_id=node_id,
                     ring_ptr=ring_ptr, csr=csr, degree=degree)


# ---------------------------------------------------------------------------------- propagate
# propagate/ <graph>_hop_<k>.pt ({"x": (N, F) float32 or bfloat16}), meta.json
def write_hop(out: Path, graph_name: str, hop: int, x: torch.Tensor) -> None:
    save_tensors(out / f"{graph_name}_hop_{hop}.pt", "gnnpipe.hop/1", {"x": x},
                 meta={"hop": hop, "graph": graph_name})


def _storage_offset(path: Path, nbytes: int) -> int:
    """Byte offset of the single tensor storage in a torch zip file (stored uncompressed)."""
    with zipfile.ZipFile(path) as archive:
        records = [i for i in archive.infolist() if "/data/" in i.filename
                   and not i.filename.endswith(".pkl")]
    assert len(records) == 1 and records[0].compress_type == zipfile.ZIP_STORED, records
    assert records[0].file_size == nbytes, (records[0].file_size, nbytes)
    with open(path, "rb") as handle:  # local header: 30 fixed bytes, then name and extra field
        handle.seek(records[0].header_offset)
        header = handle.read(30)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return records[0].header_offset + 30 + name_len + extra_len


class HopWriter:
    """One hop file written row block by row block, so the hop is never whole in memory.

    The torch file is laid out first with its storage bytes left empty
    (``torch.serialization.skip_data``); each block then lands at its offset with ``os.pwrite``
    (page cache, not this process's memory). ``finish`` renames the temp file into place and
    returns the hop memory-mapped; ``read_into`` reads it back into a buffer for the next hop.
    The result loads with ``torch.load(weights_only=True)``, with or without ``mmap=True``, like
    any file from ``write_hop``.
    """

    def __init__(self, out: Path, graph_name: str, hop: int, shape: tuple[int, int],
                 dtype: torch.dtype):
        self.path = Path(out) / f"{graph_name}_hop_{hop}.pt"
        self.shape, self.dtype = shape, dtype
        self._stack = contextlib.ExitStack()
        self._tmp = self._stack.enter_context(atomic_path(self.path))
        self._buffer = None
        self._fd = None
        skeleton = {"schema": "gnnpipe.hop/1", "meta": {"hop": hop, "graph": graph_name}}
        if not hasattr(torch.serialization, "skip_data"):  # torch < 2.6: buffer, save at the end
            self._buffer = torch.empty(shape, dtype=dtype)
            self._skeleton = skeleton
            return
        empty = torch.empty(shape, dtype=dtype)  # never touched: no memory is committed
        # through a file object: given a path, torch names the archive after the (random) temp file
        with open(self._tmp, "wb") as handle, torch.serialization.skip_data():
            torch.save({**skeleton, "x": empty}, handle)
        self._row_bytes = shape[1] * empty.element_size()
        self._offset = _storage_offset(self._tmp, shape[0] * self._row_bytes)
        self._fd = os.open(self._tmp, os.O_WRONLY)

    def write(self, start: int, block: torch.Tensor) -> None:
        """Rows ``start : start + len(block)`` of the hop (cast to the file's dtype)."""
        block = block.to(self.dtype).contiguous()
        if self._buffer is not None:
            self._buffer[start:start + block.shape[0]] = block
            return
        data = memoryview(block.view(torch.uint8).numpy()).cast("B")
        offset = self._offset + start * self._row_bytes
        while data:  # pwrite may write less than asked
            written = os.pwrite(self._fd, data, offset)
            data, offset = data[written:], offset + written

    def finish(self) -> torch.Tensor:
        """Close, rename into place and return the hop, memory-mapped (N, F)."""
        if self._buffer is not None:
            with open(self._tmp, "wb") as handle:
                torch.save({**self._skeleton, "x": self._buffer}, handle)
            self._buffer = None
            self._row_bytes = self.shape[1] * torch.empty(0, dtype=self.dtype).element_size()
            self._offset = _storage_offset(self._tmp, self.shape[0] * self._row_bytes)
        else:
            os.close(self._fd)
            self._fd = None
        self._stack.close()  # atomic_path: fsync, then rename onto self.path
        return load_tensors(self.path, "gnnpipe.hop/1", {"x": (None, 2)}, mmap=True)["x"]

    def read_into(self, out: torch.Tensor, chunk_bytes: int = 32 << 20) -> None:
        """Fill ``out`` (float32 (N, F), contiguous) with the finished hop.

        Read with plain reads, not a mapping: the page cache the bytes pass through is not
        counted in this process's memory, so holding ``out`` costs one hop, not two.
        """
        rows = max(1, chunk_bytes // self._row_bytes)
        direct = self.dtype == torch.float32
        staging = None if direct else torch.empty((rows, self.shape[1]), dtype=self.dtype)
        with open(self.path, "rb", buffering=0) as handle:
            for start in range(0, self.shape[0], rows):
                stop = min(start + rows, self.shape[0])
                target = out[start:stop] if direct else staging[:stop - start]
                view = memoryview(target.view(torch.uint8).numpy()).cast("B")
                handle.seek(self._offset + start * self._row_bytes)
                while view:  # readinto may return fewer bytes than asked
                    got = handle.readinto(view)
                    if not got:
                        raise ValueError(f"{self.path}: ends early while reading hop rows back")
                    view = view[got:]
                if not direct:
                    out[start:stop].copy_(target)

    def discard(self) -> None:
        """Drop the half-written file (the target path is left as it was)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._stack.__exit__(RuntimeError, RuntimeError("discarded"), None)


def hop_writers(out: Path, graph_name: str):
    """A ``sink`` for ``gnnpipe.propagate.propagate``: hop k streams to ``<graph>_hop_<k>.pt``."""
    return lambda hop, shape, dtype: HopWriter(out, graph_name, hop, shape, dtype)


def write_propagate_meta(out: Path, meta: dict) -> None:
    write_json(out / "meta.json", meta)


def read_propagated(propagate: Path, *, mmap: bool = True) -> dict[str, list[torch.Tensor]]:
    """Phase -> ``[X_0, ..., X_K]`` (each float32 or bfloat16 (N, F), memory-mapped by default).

    Phases that share a message graph share the same tensor objects.
    """
    meta_path = Path(propagate) / "meta.json"
    meta = read_json(meta_path)
    if not isinstance(meta.get("phase_graph"), dict) or set(meta["phase_graph"]) != set(PHASES):
        raise ValueError(f"{meta_path}: 'phase_graph' must map each of {', '.join(PHASES)}")
    hops = int(meta["hops"])
    loaded: dict[str, list[torch.Tensor]] = {}
    for graph_name in sorted(set(meta["phase_graph"].values())):
        loaded[graph_name] = [
            load_tensors(Path(propagate) / f"{graph_name}_hop_{hop}.pt", "gnnpipe.hop/1",
                         {"x": (None, 2)}, mmap=mmap)["x"]
            for hop in range(hops + 1)]
    return {phase: loaded[meta["phase_graph"][phase]] for phase in PHASES}


# ---------------------------------------------------------------------------- model/predictions
def write_predictions(out: Path, node_id: torch.Tensor, logits: torch.Tensor) -> None:
    save_tensors(out / "predictions.pt", "gnnpipe.predictions/1",
                 {"node_id": node_id, "logits": logits})


def read_predictions(model_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """``node_id`` int64 (M,), ``logits`` float32 (M, C)."""
    path = Path(model_dir) / "predictions.pt"
    payload = load_tensors(path, "gnnpipe.predictions/1",
                           {"node_id": (torch.int64, 1), "logits": (torch.float32, 2)})
    if payload["node_id"].numel() != payload["logits"].shape[0]:
        raise ValueError(f"{path}: node_id and logits disagree in length")
    return payload["node_id"], payload["logits"]


def write_link_predictions(out: Path, scores: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
    """``scores`` phase ("val", "test") -> (positives float (P,), fixed negatives float (P, K))."""
    tensors = {}
    for phase in LINK_EVAL_PHASES:
        tensors[f"{phase}_pos"], tensors[f"{phase}_neg"] = scores[phase]
    save_tensors(out / "predictions.pt", "gnnpipe.link_predictions/1", tensors)


def read_link_predictions(model_dir: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Phase -> (positive scores float32 (P,), negative scores float32 (P, K))."""
    path = Path(model_dir) / "predictions.pt"
    spec = {}
    for phase in LINK_EVAL_PHASES:
        spec[f"{phase}_pos"], spec[f"{phase}_neg"] = (torch.float32, 1), (torch.float32, 2)
    payload = load_tensors(path, "gnnpipe.link_predictions/1", spec)
    out = {}
    for phase in LINK_EVAL_PHASES:
        pos, neg = payload[f"{phase}_pos"], payload[f"{phase}_neg"]
        if neg.shape[0] != pos.numel():
            raise ValueError(f"{path}: {phase} has {pos.numel()} positive scores but "
                             f"{neg.shape[0]} rows of negative scores")
        out[phase] = (pos, neg)
    return out


def save_model(out: Path, state_dict: dict, meta: dict) -> None:
    """Weights plus what is needed to rebuild the model; loadable with ``weights_only=True``."""
    save_state_dict(out / "model.pt", "gnnpipe.model/1", state_dict, meta)


# --------------------------------------------------------------------------------- checkpoint
def input_fingerprint(params_section: dict, seed: int, inputs: list[Path]) -> str:
    """Identity of a training run: its params, seed and input files (size and mtime).

    A checkpoint is resumed only under the same fingerprint, so changed params or re-made
    upstream artifacts start a fresh run instead of continuing a different one.
    """
    import hashlib
    import json

    files = []
    for root in inputs:
        for path in sorted(Path(root).rglob("*")) if Path(root).is_dir() else [Path(root)]:
            if path.is_file():
                stat = path.stat()
                files.append([str(path), stat.st_size, stat.st_mtime_ns])
    blob = json.dumps({"params": params_section, "seed": seed, "files": files}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def write_checkpoint(path: Path, payload: dict, fingerprint: str) -> None:
    """``payload``: tensors and plain containers only, so it loads with weights_only=True."""
    save_payload(path, {"schema": "gnnpipe.checkpoint/1", "meta": {"fingerprint": fingerprint},
                        **payload})


def read_checkpoint(path: Path, fingerprint: str) -> dict | None:
    """The checkpoint at ``path`` if it belongs to this run, else None (also when absent)."""
    if not Path(path).exists():
        return None
    payload = load_tensors(path, "gnnpipe.checkpoint/1", {})
    if payload["meta"].get("fingerprint") != fingerprint:
        return None
    return payload
