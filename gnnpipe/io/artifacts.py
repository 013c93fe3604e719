"""Readers and writers for every artifact the stages exchange (the only place paths are known).

Layout (``dvc.yaml`` names the folders):
  prepared/  nodes.parquet (node_id, label, x), edges.parquet (src, dst), graph.pt (CSR, x, y)
  split/     nodes.parquet (node_id, split), message_<phase>.pt (CSR), meta.json
  partition/ node_to_part.parquet (node_id, part)
  propagate/ <graph>_hop_<k>.pt (x), meta.json
  model/     predictions.pt (node_id, logits), model.pt (state_dict)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from gnnpipe.graph import Csr, Graph
from gnnpipe.io.atomic import read_json, write_json
from gnnpipe.io.parquet import read_table, write_table
from gnnpipe.io.tensors import load_tensors, save_state_dict, save_tensors

PHASES = ("train", "val", "test")
SPLIT_ROLES = ("train", "val", "test", "unused")

EDGES_SCHEMA = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
SPLIT_SCHEMA = pa.schema([("node_id", pa.int64()), ("split", pa.string())])
PARTS_SCHEMA = pa.schema([("node_id", pa.int64()), ("part", pa.int32())])
CSR_SPEC = {"indptr": (torch.int64, 1), "indices": (torch.int64, 1)}


def nodes_schema(num_features: int) -> pa.Schema:
    return pa.schema([("node_id", pa.int64()), ("label", pa.int64()),
                      ("x", pa.list_(pa.float32(), num_features))])


def _nodes_schema_like(found: pa.Schema) -> pa.Schema:
    x_type = found.field("x").type if "x" in found.names else None
    width = x_type.list_size if isinstance(x_type, pa.FixedSizeListType) else 1
    return nodes_schema(width)


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
def write_prepared(out: Path, graph: Graph) -> None:
    n, f = graph.x.shape
    x = graph.x.numpy()
    nodes = pa.table({
        "node_id": np.arange(n, dtype=np.int64),
        "label": graph.y.numpy(),
        "x": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), f),
    })
    write_table(out / "nodes.parquet", nodes, nodes_schema(f), "gnnpipe.nodes/1")
    src, dst = graph.csr.edge_index().numpy()
    write_table(out / "edges.parquet", pa.table({"src": src, "dst": dst}), EDGES_SCHEMA,
                "gnnpipe.edges/1")
    save_tensors(out / "graph.pt", "gnnpipe.graph/1",
                 {"indptr": graph.csr.indptr, "indices": graph.csr.indices, "x": graph.x,
                  "y": graph.y}, meta={"num_classes": graph.num_classes})


def read_graph(prepared: Path, *, mmap: bool = False) -> Graph:
    """The prepared graph from ``graph.pt``, with shapes and ranges checked."""
    path = Path(prepared) / "graph.pt"
    spec = {**CSR_SPEC, "x": (torch.float32, 2), "y": (torch.int64, 1)}
    payload = load_tensors(path, "gnnpipe.graph/1", spec, mmap=mmap)
    x, y = payload["x"], payload["y"]
    num_classes = payload["meta"].get("num_classes")
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"{path}: meta.num_classes must be an int >= 2, found {num_classes!r}")
    if y.numel() != x.shape[0]:
        raise ValueError(f"{path}: {y.numel()} labels for {x.shape[0]} feature rows")
    if y.numel() and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"{path}: labels outside [0, {num_classes})")
    csr = _check_csr(Csr(payload["indptr"], payload["indices"]), x.shape[0], path)
    return Graph(csr=csr, x=x, y=y, num_classes=num_classes)


def read_node_table(prepared: Path) -> pa.Table:
    return read_table(Path(prepared) / "nodes.parquet", _nodes_schema_like, "gnnpipe.nodes/1")


def read_edge_table(prepared: Path) -> pa.Table:
    return read_table(Path(prepared) / "edges.parquet", EDGES_SCHEMA, "gnnpipe.edges/1")


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


# ---------------------------------------------------------------------------------- partition
def write_partition(out: Path, parts: np.ndarray) -> None:
    table = pa.table({"node_id": np.arange(parts.size, dtype=np.int64), "part": parts})
    write_table(out / "node_to_part.parquet", table, PARTS_SCHEMA, "gnnpipe.node_to_part/1")


def read_partition(partition: Path) -> np.ndarray:
    table = read_table(Path(partition) / "node_to_part.parquet", PARTS_SCHEMA,
                       "gnnpipe.node_to_part/1")
    return table.column("part").to_numpy()


# ---------------------------------------------------------------------------------- propagate
def write_hop(out: Path, graph_name: str, hop: int, x: torch.Tensor) -> None:
    save_tensors(out / f"{graph_name}_hop_{hop}.pt", "gnnpipe.hop/1", {"x": x},
                 meta={"hop": hop, "graph": graph_name})


def write_propagate_meta(out: Path, meta: dict) -> None:
    write_json(out / "meta.json", meta)


def read_propagated(propagate: Path, *, mmap: bool = True) -> dict[str, list[torch.Tensor]]:
    """Phase -> ``[X_0, ..., X_K]`` (each float (N, F), memory-mapped by default).

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


def save_model(out: Path, state_dict: dict, meta: dict) -> None:
    """Weights plus what is needed to rebuild the model; loadable with ``weights_only=True``."""
    save_state_dict(out / "model.pt", "gnnpipe.model/1", state_dict, meta)
