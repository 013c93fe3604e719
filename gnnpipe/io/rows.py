"""Feature rows of some nodes from ``prepared/graph.pt``, without taking the whole file in.

``train.dist.shard: partition`` gives each DDP rank only its shards' nodes. Pages of a memory-mapped
file that a process has touched count in its resident set until the mapping goes, so gathering
scattered rows through one long-lived map would leave most of ``x`` resident in every rank.
Here each block of rows gets a fresh map that is dropped once its rows are copied out, so the
resident set holds one block's pages plus the copied rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from gnnpipe.io.tensors import load_tensors

GRAPH_SPEC = {"x": (torch.float32, 2), "y": (torch.int64, 1)}


@dataclass(frozen=True)
class GraphRows:
    num_nodes: int
    num_classes: int
    x: torch.Tensor  # float32 (L, F): rows of the requested nodes, in their order
    y: torch.Tensor  # int64 (N,): every node's label (8 bytes a node; evaluation needs them)


def read_node_rows(prepared: Path, node_ids: torch.Tensor, block_rows: int = 65_536) -> GraphRows:
    """Rows ``x[node_ids]`` of ``graph.pt`` (``node_ids`` int64 (L,), ascending) and all labels."""
    path = Path(prepared) / "graph.pt"
    payload = load_tensors(path, "gnnpipe.graph/1", GRAPH_SPEC, mmap=True)
    num_nodes, num_features = payload["x"].shape
    num_classes = payload["meta"].get("num_classes")
    y = payload["y"].clone()
    del payload
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"{path}: meta.num_classes must be an int >= 2, found {num_classes!r}")
    if y.numel() != num_nodes or (y.numel() and (y.min() < 0 or y.max() >= num_classes)):
        raise ValueError(f"{path}: y must hold {num_nodes} labels in [0, {num_classes})")
    if node_ids.numel() and (node_ids.min() < 0 or node_ids.max() >= num_nodes
                             or bool((node_ids[1:] <= node_ids[:-1]).any())):
        raise ValueError(f"{path}: node ids must be distinct, ascending and in [0, {num_nodes})")
    x = torch.empty(node_ids.numel(), num_features, dtype=torch.float32)
    cuts = torch.searchsorted(node_ids, torch.arange(0, num_nodes + block_rows, block_rows))
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        if lo == hi:
            continue
        block = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        x[lo:hi] = block["x"][node_ids[lo:hi]]
        del block  # unmaps the file: this block's pages leave the resident set
    return GraphRows(num_nodes=num_nodes, num_classes=num_classes, x=x, y=y)
