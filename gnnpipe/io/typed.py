"""Every prepared graph and split read back as a ``Graph``: one layout for every graph.

Files are named from the graph's types (``T`` a node type, ``E`` an edge type named
``src__relation__dst``); a homogeneous graph is the one-type case (node type ``node``, edge type
``node__to__node``: nodes_node.parquet, edges_node__to__node.parquet, ...). The layout
(homogeneous | typed, ``gnnpipe.data.graph.layout_of``) is derived from the types for the
stages' capability checks; the files do not depend on it.

  prepared/  (written by gnnpipe/io/prepared.py ``write_prepared``)
             graph.json (gnnpipe/io/description.py: node types with sizes and widths, edge
             types in order, target type, classes, reverse edge types, default link edge type,
             the optional tensors), nodes_<T>.parquet (node_id, x; the target type also label;
             no x where features_<T>.npy keeps it), edges_<E>.parquet (src, dst; type-local ids),
             graph.pt (schema ``gnnpipe.graph/2``: ``x.<T>`` (float32, float16 or bfloat16;
             or meta ``features.<T>`` naming features_<T>.npy, its dtype and shape), ``y``,
             ``<E>.indptr``, ``<E>.indices``, and when present ``time.<T>``, ``<E>.time``
             (CSR order), ``public_roles``; meta num_classes, target), and for user tables
             node_ids_<T>.parquet (node_id, original_id[, timestamp]), edge_attrs_<E>.parquet
             (src, dst[, weight][, timestamp]; one-type graphs), classes.parquet
  split/     (written by gnnpipe/io/splits.py ``write_split``)
             meta.json (task, target, node and edge types, message_graph: phase -> file),
             message_<phase>.pt (``gnnpipe.message_graph/1``: ``<E>.indptr``, ``<E>.indices``
             per edge type; phases sharing a graph share a file), nodes_<target>.parquet
             (node_id, split; the link task: every node unused); link task:
             edges_<role>.parquet and negatives_<phase>.parquet of the held-out edge type (src
             of its source type, dst of its target type)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from gnnpipe.data.graph import (ROLES, UNLABELLED, Csr, EdgeType, Graph, edge_type_name,
                                parse_edge_type)
from gnnpipe.io.common import PHASES, SPLIT_SCHEMA, check_csr, reading, role_codes
from gnnpipe.io.description import DESCRIPTION, read_description
from gnnpipe.io.parquet import read_batches, read_table
from gnnpipe.io.prepared import (GRAPH_SCHEMA, node_ids_file, nodes_file, require_columns,
                                 stored_features)
from gnnpipe.io.splits import (LINK_EDGE_ROLES, LINK_EVAL_PHASES, MESSAGE_SCHEMA, read_link_edges,
                               read_link_meta, read_link_negatives, read_split_meta)
from gnnpipe.io.tensors import load_tensors

__all__ = ["read_graph", "node_id_type", "read_typed_node_ids", "read_typed_message_graphs",
           "read_typed_role_codes", "read_typed_link_split"]

# a node time: int64 (typed tables, seconds), or float (a homogeneous source's own times)
TIME_DTYPES = (torch.int64, torch.float64, torch.float32)


# ----------------------------------------------------------------------------------- prepared
def node_id_type(prepared: Path, node_type: str) -> pa.DataType:
    """The user's id type (``original_id``) of ``node_ids_<T>.parquet``, from the file's schema
    alone: no column is read (the ids are 16 B a node)."""
    path = Path(prepared) / node_ids_file(node_type)
    with reading(path, "Parquet file"):
        schema = pq.read_schema(path)
    if "original_id" not in schema.names:
        raise ValueError(f"{path}: no column 'original_id'; re-run the prepare stage")
    return schema.field("original_id").type


def read_typed_node_ids(prepared: Path, node_type: str) -> pa.Table:
    """``node_ids_<T>.parquet``: node_id int64 (0..N_t-1 in order), original_id (the user's id
    type) and, when the input had one, timestamp."""
    sizes = read_description(prepared)["sizes"]
    if node_type not in sizes:
        raise ValueError(f"{prepared}: no node type {node_type!r}")
    path = Path(prepared) / node_ids_file(node_type)

    def expected(schema: pa.Schema) -> pa.Schema:  # original_id keeps the user's id type
        id_type = (schema.field("original_id").type if "original_id" in schema.names
                   else pa.string())
        return require_columns({"node_id": pa.int64(), "original_id": id_type},
                               ("timestamp",))(schema)

    table = read_table(path, expected, "gnnpipe.node_ids/1")
    if not np.array_equal(table.column("node_id").to_numpy(), np.arange(sizes[node_type])):
        raise ValueError(f"{path}: node_id must be 0..{sizes[node_type] - 1} in order")
    return table


def read_graph(prepared: Path, *, mmap: bool = False, stored_x: bool = False) -> Graph:
    """The prepared graph, shapes, ids and ranges checked against graph.json. ``x`` comes back
    float32 (a copy of a type stored in half precision, else the tensor or map itself);
    ``stored_x``: in its stored dtype, never copied. ``mmap``: tensors are views of the
    memory-mapped graph.pt (and of the features_<T>.npy maps)."""
    meta = read_description(prepared)
    path = Path(prepared) / "graph.pt"
    sizes = meta["sizes"]
    spec = {"y": (torch.int64, 1), **{f"{name}.{part}": (torch.int64, 1) for name in
                                      meta["edge_types"] for part in ("indptr", "indices")}}
    timed_types, timed_edges = meta.get("node_time", []), meta.get("edge_time", [])
    spec.update({f"{name}.time": (torch.int64, 1) for name in timed_edges})
    if meta.get("public_roles"):
        spec["public_roles"] = (torch.int8, 1)
    payload = load_tensors(path, GRAPH_SCHEMA, spec, mmap=mmap)
    stored_meta = payload["meta"]
    found = {"num_classes": stored_meta.get("num_classes"), "target": stored_meta.get("target"),
             "features": sorted(stored_meta.get("features", {}))}
    described = {"num_classes": meta["num_classes"], "target": meta["target"],
                 "features": sorted(meta.get("features", []))}
    for key, value in described.items():
        if found[key] != value:
            raise ValueError(f"{path}: meta {key} is {found[key]!r}, {DESCRIPTION} says "
                             f"{value!r}; re-run the prepare stage")
    x = {}
    for t, n, f in meta["node_types"]:
        stored = stored_features(path, payload, t, mmap=mmap)
        if tuple(stored.shape) != (n, f):
            raise ValueError(f"{path}: 'x.{t}' has shape {tuple(stored.shape)}, {DESCRIPTION} "
                             f"says ({n}, {f})")
        x[t] = stored if stored_x else stored.float()
    y, num_classes, target = payload["y"], meta["num_classes"], meta["target"]
    if y.numel() != sizes[target]:
        raise ValueError(f"{path}: {y.numel()} labels for {sizes[target]} {target} nodes")
    if y.numel() and (y.min() < UNLABELLED or y.max() >= num_classes):
        raise ValueError(f"{path}: labels outside [0, {num_classes}) (or -1: unlabelled)")
    csr = {}
    for edge_type in meta["edge_type_list"]:
        name = edge_type_name(edge_type)
        csr[edge_type] = check_csr(Csr(payload[f"{name}.indptr"], payload[f"{name}.indices"]),
                                   sizes[edge_type[2]], f"{path} ({name})",
                                   sizes[edge_type[0]], edge_type[0])
    reverse = {parse_edge_type(k): parse_edge_type(v) for k, v in meta["reverse"].items()}
    node_time = {t: _check_times(payload.get(f"time.{t}"), sizes[t], path, t)
                 for t in timed_types}
    edge_time = {}
    for name in timed_edges:
        edge_type = parse_edge_type(name)
        if payload[f"{name}.time"].numel() != csr[edge_type].num_edges:
            raise ValueError(f"{path}: '{name}.time' has {payload[f'{name}.time'].numel()} "
                             f"entries for {csr[edge_type].num_edges} edges")
        edge_time[edge_type] = payload[f"{name}.time"]
    public_roles = payload.get("public_roles") if meta.get("public_roles") else None
    if public_roles is not None and (public_roles.numel() != sizes[target] or (
            public_roles.numel() and (public_roles.min() < 0
                                      or public_roles.max() >= len(ROLES)))):
        raise ValueError(f"{path}: 'public_roles' must hold {sizes[target]} codes in "
                         f"[0, {len(ROLES)})")
    return Graph(x=x, csr=csr, target=target, y=y, num_classes=num_classes,
                 reverse=reverse, link_edge_type=parse_edge_type(meta["link_edge_type"]),
                 node_time=node_time, edge_time=edge_time, public_roles=public_roles)


def _check_times(times, num_nodes: int, path: Path, node_type: str) -> torch.Tensor:
    """A node type's times ``time.<T>``: int64 or float (N_t,), finite."""
    name = f"time.{node_type}"
    if not isinstance(times, torch.Tensor) or times.dtype not in TIME_DTYPES or times.dim() != 1:
        raise ValueError(f"{path}: {name!r} must be a float or int64 tensor of one dim, found "
                         f"{getattr(times, 'dtype', times)!r}")
    if times.numel() != num_nodes:
        raise ValueError(f"{path}: {name!r} has {times.numel()} entries for {num_nodes} "
                         f"{node_type} nodes")
    if times.is_floating_point() and not bool(torch.isfinite(times).all()):
        raise ValueError(f"{path}: {name!r} contains NaN or inf")
    return times


# -------------------------------------------------------------------------------------- split
def read_typed_message_graphs(split: Path, graph: Graph | None = None, *, mmap: bool = False
                              ) -> tuple[list[tuple[str, int]], dict[str, dict[EdgeType, Csr]]]:
    """Node types ``(type, num_nodes)`` in order, and phase -> edge type -> CSR (phases sharing
    a file share one dict). ``graph``, when given, must have the same types and sizes;
    ``mmap``: the CSRs are views of the memory-mapped files."""
    meta = read_split_meta(split)
    where = Path(split) / "meta.json"
    sizes, edge_types = meta["sizes"], meta["edge_type_list"]
    if graph is not None and (sizes != graph.sizes() or edge_types != list(graph.edge_types)):
        raise ValueError(f"{where}: the split is of another graph (node or edge types differ "
                         "from data/prepared); re-run the split stage")
    files, counts = meta["message_graph"], dict(sizes)
    loaded = {}
    spec = {f"{edge_type_name(e)}.{part}": (torch.int64, 1) for e in edge_types
            for part in ("indptr", "indices")}
    for name in sorted(set(files.values())):
        path = Path(split) / name
        payload = load_tensors(path, MESSAGE_SCHEMA, spec, mmap=mmap)
        loaded[name] = {e: check_csr(Csr(payload[f"{edge_type_name(e)}.indptr"],
                                         payload[f"{edge_type_name(e)}.indices"]), counts[e[2]],
                                     f"{path} ({edge_type_name(e)})", counts[e[0]], e[0])
                        for e in edge_types}
    return sizes, {phase: loaded[files[phase]] for phase in PHASES}


def read_typed_role_codes(split: Path, graph: Graph | None = None) -> np.ndarray:
    """The role of every node of the split's target type as int8 codes (N_target,), the index
    into ``ROLES`` (``gnnpipe.data.graph.ROLE_CODES``), from ``nodes_<target>.parquet``: 1 byte
    a node where ``<U6`` names would take 24. ``graph``, when given, must have that many target
    nodes."""
    meta = read_split_meta(split)
    target = meta["target"]
    num_nodes = dict(meta["sizes"])[target]
    if graph is not None and (graph.target, graph.num_nodes_dict[graph.target]) != (target,
                                                                                    num_nodes):
        raise ValueError(f"{split}: {num_nodes} split roles of {target!r} nodes for "
                         f"{graph.num_nodes_dict[graph.target]} {graph.target!r} nodes; re-run "
                         "the split stage")
    path = Path(split) / nodes_file(target)
    codes, start = np.empty(num_nodes, dtype=np.int8), 0
    # a batch of rows at a time: the table's ids and names never sit in memory whole
    for batch in read_batches(path, SPLIT_SCHEMA, "gnnpipe.split_nodes/1"):
        stop = start + batch.num_rows
        if stop > num_nodes or not np.array_equal(batch.column("node_id").to_numpy(),
                                                  np.arange(start, stop)):
            break
        codes[start:stop] = role_codes(batch.column("split"), f"{path}: column 'split'")
        start = stop
    else:
        if start == num_nodes:
            return codes
    raise ValueError(f"{path}: node_id must be 0..{num_nodes - 1} in order; re-run the split "
                     "stage")


def read_typed_link_split(split: Path, graph: Graph, rows: Callable[[int], slice] | None = None,
                          roles: tuple[str, ...] = LINK_EDGE_ROLES
                          ) -> tuple[EdgeType, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The held-out edge type, its positives per role of ``roles`` (type-local int64 (2, E);
    ``read_link_edges``: mapped scratch tables in a stage; training reads
    ``TRAINING_LINK_ROLES``, the message edges streamed instead) and the fixed negatives per
    val/test phase (int64 (P, K) ids of its dst type; ``rows(P)``: only the rows of those
    positives, ``gnnpipe.io.splits.read_link_negatives``)."""
    edge_type = parse_edge_type(read_link_meta(split)["edge_type"])
    n_dst = graph.num_nodes_dict[edge_type[2]]
    edges = read_link_edges(split, graph.num_nodes_dict[edge_type[0]], n_dst, roles)
    shares = None if rows is None else {p: rows(edges[p].shape[1]) for p in LINK_EVAL_PHASES}
    return edge_type, edges, read_link_negatives(split, edges, n_dst, shares)
