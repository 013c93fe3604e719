"""Partition files: node_to_part.parquet, one part_<k>.pt shard (part + halo) each, meta.json."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from gnnpipe.data.graph import Csr
from gnnpipe.io.atomic import read_json, write_json
from gnnpipe.io.common import CSR_SPEC, PARTS_SCHEMA, check_csr
from gnnpipe.io.parquet import read_table, write_table
from gnnpipe.io.tensors import load_tensors, save_tensors
from gnnpipe.graphops.part_shard import PartShard


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
    csr = check_csr(Csr(payload["indptr"], payload["indices"]), size, path)
    return PartShard(part=part, num_parts=num_parts, num_nodes=num_nodes, node_id=node_id,
                     ring_ptr=ring_ptr, csr=csr, degree=degree)
