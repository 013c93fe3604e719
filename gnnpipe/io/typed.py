"""Every prepared graph and split read as a ``Graph``, whatever its layout.

The readers take either layout: a homogeneous graph's files (gnnpipe/io/prepared.py,
gnnpipe/io/splits.py) come back as its ``Graph.homogeneous`` graph (node type ``NODE``, edge
type ``EDGE``), message graphs as ``{phase: {EDGE: csr}}``. The files keep the layout of the
graph's types (``gnnpipe.data.graph.layout_of``); only the readers are one.

Typed layout (``T`` a node type, ``E`` an edge type named ``src__relation__dst``):
  prepared/  (written by gnnpipe/io/prepared.py ``write_typed_prepared``)
             graph.json (gnnpipe/io/description.py: node types with sizes and widths, edge
             types in order, target type, classes, reverse edge types, default link edge type;
             written for every graph), nodes_<T>.parquet (node_id, x; the target type also label),
             edges_<E>.parquet (src, dst; type-local ids), graph.pt (schema
             ``gnnpipe.hetero_graph/1``: ``x.<T>``,
             ``y``, ``<E>.indptr``, ``<E>.indices``; a homogeneous reader refuses it by its tag;
             typed user tables add ``time.<T>``, ``<E>.time`` (CSR order) and ``public_roles``,
             listed in graph.json as node_time / edge_time / public_roles), and
             node_ids_<T>.parquet (node_id, original_id[, timestamp]) for user ids
  split/     (written by gnnpipe/io/splits.py ``write_split``)
             meta.json (node and edge types, task, message_graph: phase -> file), message_<phase>.pt
             (``gnnpipe.hetero_csr/1``: one CSR per edge type), node task: nodes_<target>.parquet
             (node_id, split); link task: edges_<role>.parquet and negatives_<phase>.parquet of
             the held-out edge type (src of its source type, dst of its target type; the same
             files for both layouts)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from gnnpipe.data.graph import HOMOGENEOUS, Csr, EdgeType, Graph, edge_type_name, parse_edge_type
from gnnpipe.io.common import EDGES_SCHEMA, PHASES, SPLIT_ROLES, SPLIT_SCHEMA
from gnnpipe.io.description import DESCRIPTION, read_description
from gnnpipe.io.parquet import read_table
from gnnpipe.io.prepared import (TYPED_GRAPH_SCHEMA, read_edge_table, read_homogeneous,
                                 read_node_ids, read_node_table, typed_nodes_schema)
from gnnpipe.io.splits import (LINK_EDGE_ROLES, LINK_EVAL_PHASES, TYPED_CSR_SCHEMA,
                               read_message_graphs, read_negatives_table, read_split_meta,
                               read_split_roles)
from gnnpipe.io.tensors import load_tensors

__all__ = ["read_graph", "read_typed_node_ids", "read_typed_node_table",
           "read_typed_edge_table", "read_typed_message_graphs", "read_typed_roles",
           "read_typed_link_split"]


# ----------------------------------------------------------------------------------- prepared
def _described(prepared: Path, node_type: str) -> dict:
    """graph.json (``read_description``), with ``node_type`` one of its node types."""
    meta = read_description(prepared)
    if node_type not in meta["sizes"]:
        raise ValueError(f"{prepared}: no node type {node_type!r}")
    return meta


def read_typed_node_ids(prepared: Path, node_type: str) -> pa.Table:
    """``node_ids_<type>.parquet`` (homogeneous layout: ``node_ids.parquet``): node_id (0..N_t-1
    in order), original_id, [timestamp]."""
    meta = _described(prepared, node_type)
    if meta["layout"] == HOMOGENEOUS:
        return read_node_ids(prepared)
    sizes = meta["sizes"]
    path = Path(prepared) / f"node_ids_{node_type}.parquet"

    def expected(schema: pa.Schema) -> pa.Schema:  # original_id keeps the user's id type
        if "node_id" not in schema.names or "original_id" not in schema.names:
            raise ValueError(f"{path}: needs columns node_id and original_id")
        return schema

    table = read_table(path, expected, "gnnpipe.node_ids/1")
    if not np.array_equal(table.column("node_id").to_numpy(), np.arange(sizes[node_type])):
        raise ValueError(f"{path}: node_id must be 0..{sizes[node_type] - 1} in order")
    return table


def read_graph(prepared: Path, *, mmap: bool = False, stored_x: bool = False) -> Graph:
    """The prepared graph, either layout: a homogeneous layout's ``read_homogeneous`` (``x``
    float32, or as stored with ``stored_x``), else the typed ``graph.pt`` (``x`` float32),
    shapes and ids checked against graph.json (``mmap``: tensors are views of the
    memory-mapped file)."""
    meta = read_description(prepared)
    if meta["layout"] == HOMOGENEOUS:
        return read_homogeneous(prepared, mmap=mmap, stored_x=stored_x)
    path = Path(prepared) / "graph.pt"
    sizes = meta["sizes"]
    spec = {"y": (torch.int64, 1), **{f"x.{t}": (torch.float32, 2) for t in sizes}}
    for name in meta["edge_types"]:
        spec[f"{name}.indptr"], spec[f"{name}.indices"] = (torch.int64, 1), (torch.int64, 1)
    timed_types, timed_edges = meta.get("node_time", []), meta.get("edge_time", [])
    spec.update({f"time.{t}": (torch.int64, 1) for t in timed_types})
    spec.update({f"{name}.time": (torch.int64, 1) for name in timed_edges})
    if meta.get("public_roles"):
        spec["public_roles"] = (torch.int8, 1)
    payload = load_tensors(path, TYPED_GRAPH_SCHEMA, spec, mmap=mmap)
    x = {}
    for entry in meta["node_types"]:
        t, n, f = entry
        if tuple(payload[f"x.{t}"].shape) != (n, f):
            raise ValueError(f"{path}: 'x.{t}' has shape {tuple(payload[f'x.{t}'].shape)}, "
                             f"{DESCRIPTION} says ({n}, {f})")
        x[t] = payload[f"x.{t}"]
    y, num_classes, target = payload["y"], meta["num_classes"], meta["target"]
    if y.numel() != sizes[target] or (y.numel() and (y.min() < -1 or y.max() >= num_classes)):
        raise ValueError(f"{path}: 'y' must hold {sizes[target]} labels in [0, {num_classes})")
    csr = {}
    for edge_type in meta["edge_type_list"]:
        name = edge_type_name(edge_type)
        csr[edge_type] = _check_typed_csr(
            Csr(payload[f"{name}.indptr"], payload[f"{name}.indices"]), edge_type, sizes,
            f"{path} ({name})")
    reverse = {parse_edge_type(k): parse_edge_type(v) for k, v in meta["reverse"].items()}
    node_time = {}
    for t in timed_types:
        if payload[f"time.{t}"].numel() != sizes[t]:
            raise ValueError(f"{path}: 'time.{t}' has {payload[f'time.{t}'].numel()} entries "
                             f"for {sizes[t]} {t} nodes")
        node_time[t] = payload[f"time.{t}"]
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
                                      or public_roles.max() >= len(SPLIT_ROLES)))):
        raise ValueError(f"{path}: 'public_roles' must hold {sizes[target]} codes in "
                         f"[0, {len(SPLIT_ROLES)})")
    return Graph(x=x, csr=csr, target=target, y=y, num_classes=num_classes,
                       reverse=reverse, link_edge_type=parse_edge_type(meta["link_edge_type"]),
                       node_time=node_time, edge_time=edge_time, public_roles=public_roles)


def _check_typed_csr(csr: Csr, edge_type: EdgeType, sizes: dict[str, int], where) -> Csr:
    """Rows = ``sizes[dst]`` nodes, indices ids of ``src`` nodes."""
    indptr, indices = csr.indptr, csr.indices
    if indptr.numel() != sizes[edge_type[2]] + 1:
        raise ValueError(f"{where}: indptr has {indptr.numel()} entries, expected "
                         f"{sizes[edge_type[2]] + 1}")
    if indptr[0] != 0 or indptr[-1] != indices.numel() or bool((indptr[1:] < indptr[:-1]).any()):
        raise ValueError(f"{where}: indptr is not a valid CSR offset array")
    if indices.numel() and (indices.min() < 0 or indices.max() >= sizes[edge_type[0]]):
        raise ValueError(f"{where}: indices hold {edge_type[0]} ids outside "
                         f"[0, {sizes[edge_type[0]]})")
    return csr


def read_typed_node_table(prepared: Path, node_type: str) -> pa.Table:
    """``nodes_<type>.parquet``: node_id (0..N-1 in order), label (target type only), x
    (homogeneous layout: ``read_node_table``'s ``nodes.parquet``)."""
    meta = _described(prepared, node_type)
    if meta["layout"] == HOMOGENEOUS:
        return read_node_table(prepared)
    width = {entry[0]: entry[2] for entry in meta["node_types"]}[node_type]
    path = Path(prepared) / f"nodes_{node_type}.parquet"
    table = read_table(path, typed_nodes_schema(width, node_type == meta["target"]),
                       "gnnpipe.hetero_nodes/1")
    if not np.array_equal(table.column("node_id").to_numpy(), np.arange(meta["sizes"][node_type])):
        raise ValueError(f"{path}: node_id must be 0..{meta['sizes'][node_type] - 1} in order")
    return table


def read_typed_edge_table(prepared: Path, edge_type: EdgeType) -> pa.Table:
    """``edges_<src__rel__dst>.parquet``: src, dst (type-local ids, checked against sizes;
    homogeneous layout: ``read_edge_table``'s ``edges.parquet``)."""
    meta = read_description(prepared)
    if edge_type not in meta["edge_type_list"]:
        raise ValueError(f"{prepared}: no edge type {edge_type_name(edge_type)!r}")
    if meta["layout"] == HOMOGENEOUS:
        return read_edge_table(prepared)
    sizes = meta["sizes"]
    path = Path(prepared) / f"edges_{edge_type_name(edge_type)}.parquet"
    table = read_table(path, EDGES_SCHEMA, "gnnpipe.hetero_edges/1")
    for column, node_type in (("src", edge_type[0]), ("dst", edge_type[2])):
        ids = table.column(column).to_numpy()
        if ids.size and (ids.min() < 0 or ids.max() >= sizes[node_type]):
            raise ValueError(f"{path}: column {column!r} holds {node_type} ids outside "
                             f"[0, {sizes[node_type]})")
    return table


# -------------------------------------------------------------------------------------- split
def read_typed_message_graphs(split: Path, graph: Graph | None = None
                              ) -> tuple[list[tuple[str, int]], dict[str, dict[EdgeType, Csr]]]:
    """Node types ``(type, num_nodes)`` in order, and phase -> edge type -> CSR (phases sharing
    a file share one dict; homogeneous layout: ``{EDGE: csr}``). ``graph``, when given, must
    have the same types and sizes."""
    meta = read_split_meta(split)
    where = Path(split) / "meta.json"
    sizes, edge_types = meta["sizes"], meta["edge_type_list"]
    if graph is not None and (sizes != graph.sizes() or edge_types != list(graph.edge_types)):
        raise ValueError(f"{where}: the split is of another graph (node or edge types differ "
                         "from data/prepared); re-run the split stage")
    if meta["layout"] == HOMOGENEOUS:
        (edge_type,) = edge_types
        csrs = read_message_graphs(split, sizes[0][1])
        shared = {id(csr): {edge_type: csr} for csr in csrs.values()}  # one dict per file
        return sizes, {phase: shared[id(csr)] for phase, csr in csrs.items()}
    files, counts = meta["message_graph"], dict(sizes)
    loaded = {}
    for name in sorted(set(files.values())):
        path = Path(split) / name
        spec = {}
        for edge_type in edge_types:
            e = edge_type_name(edge_type)
            spec[f"{e}.indptr"], spec[f"{e}.indices"] = (torch.int64, 1), (torch.int64, 1)
        payload = load_tensors(path, TYPED_CSR_SCHEMA, spec)
        loaded[name] = {e: _check_typed_csr(Csr(payload[f"{edge_type_name(e)}.indptr"],
                                                payload[f"{edge_type_name(e)}.indices"]),
                                            e, counts, f"{path} ({edge_type_name(e)})")
                        for e in edge_types}
    return sizes, {phase: loaded[files[phase]] for phase in PHASES}


def read_typed_roles(split: Path, graph: Graph) -> np.ndarray:
    """Role of every node of the target type: str (N_target,) (homogeneous layout:
    ``read_split_roles``)."""
    if graph.layout == HOMOGENEOUS:
        roles = read_split_roles(split)
        if roles.size != graph.num_nodes_dict[graph.target]:
            raise ValueError(f"{split}: {roles.size} split roles for "
                             f"{graph.num_nodes_dict[graph.target]} nodes; re-run the split stage")
        return roles
    path = Path(split) / f"nodes_{graph.target}.parquet"
    table = read_table(path, SPLIT_SCHEMA, "gnnpipe.split_nodes/1")
    roles = np.asarray(table.column("split").to_numpy(zero_copy_only=False), dtype=object)
    if not np.array_equal(table.column("node_id").to_numpy(),
                          np.arange(graph.num_nodes_dict[graph.target])):
        raise ValueError(f"{path}: node_id must be 0..{graph.num_nodes_dict[graph.target] - 1} in "
                         "order; re-run the split stage")
    unknown = set(np.unique(roles)) - set(SPLIT_ROLES)
    if unknown:
        raise ValueError(f"{path}: column 'split' has unknown roles {sorted(unknown)}")
    return roles.astype(str)


def read_typed_link_split(split: Path, graph: Graph
                          ) -> tuple[EdgeType, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The held-out edge type (homogeneous layout: ``EDGE``), its positives per role
    (type-local int64 (2, E)) and the fixed negatives per val/test phase (int64 (P, K) ids of
    its dst type); both layouts keep these in the same files."""
    meta = read_split_meta(split)
    if meta.get("task") != "link":
        raise ValueError(f"{Path(split) / 'meta.json'}: task is {meta.get('task')!r}, not "
                         "'link'; re-run the split stage with dataset.task: link")
    edge_type = parse_edge_type(meta["edge_type"])
    n_src, n_dst = graph.num_nodes_dict[edge_type[0]], graph.num_nodes_dict[edge_type[2]]
    edges = {}
    for role in LINK_EDGE_ROLES:
        path = Path(split) / f"edges_{role}.parquet"
        table = read_table(path, EDGES_SCHEMA, "gnnpipe.split_edges/1")
        pair = np.stack([table.column("src").to_numpy(), table.column("dst").to_numpy()])
        if pair.size and (pair[0].min() < 0 or pair[0].max() >= n_src or pair[1].min() < 0
                          or pair[1].max() >= n_dst):
            raise ValueError(f"{path}: ids outside the sizes of {edge_type_name(edge_type)}")
        edges[role] = torch.from_numpy(pair.astype(np.int64))
    negatives = {phase: read_negatives_table(Path(split) / f"negatives_{phase}.parquet",
                                             meta.get("num_negatives", {}).get(phase),
                                             edges[phase][0].numpy(), n_dst, phase)
                 for phase in LINK_EVAL_PHASES}
    return edge_type, edges, negatives
