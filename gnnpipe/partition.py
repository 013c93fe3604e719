"""Node partitioning of a phase's message graph (METIS via pymetis, or random for comparison)."""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.config import PartitionParams
from gnnpipe.graph import Csr, csr_from_edges


def _symmetric_simple(csr: Csr) -> Csr:
    """METIS needs an undirected graph without self-loops or repeated edges."""
    src, dst = csr.edge_index().numpy()
    keep = src != dst
    keys = np.unique(np.concatenate([src[keep] * csr.num_nodes + dst[keep],
                                     dst[keep] * csr.num_nodes + src[keep]]))
    return csr_from_edges(keys // csr.num_nodes, keys % csr.num_nodes, csr.num_nodes)


def assign_parts(csr: Csr, cfg: PartitionParams, rng: np.random.Generator) -> np.ndarray:
    """Part id for every node: int32, shape (N,), values in ``[0, num_parts)``."""
    n = csr.num_nodes
    if cfg.num_parts > n:
        raise ValueError(f"partition.num_parts={cfg.num_parts} exceeds the graph's {n} nodes")
    if cfg.num_parts == 1:
        return np.zeros(n, dtype=np.int32)
    if cfg.method == "random":
        return rng.integers(0, cfg.num_parts, size=n).astype(np.int32)
    import pymetis  # imported here: only the metis method needs it

    simple = _symmetric_simple(csr)
    options = pymetis.Options(seed=int(rng.integers(0, 2**31 - 1)))
    _, membership = pymetis.part_graph(cfg.num_parts, xadj=simple.indptr.numpy(),
                                       adjncy=simple.indices.numpy(), options=options)
    return np.asarray(membership, dtype=np.int32)


def partition_report(csr: Csr, parts: np.ndarray, num_parts: int) -> dict:
    """Edge cut (fraction of stored edges between parts) and balance (max part / mean part)."""
    parts_t = torch.from_numpy(parts.astype(np.int64))
    src, dst = csr.indices, csr.targets()
    cut = int((parts_t[src] != parts_t[dst]).sum())
    sizes = np.bincount(parts, minlength=num_parts)
    return {
        "num_parts": num_parts,
        "edge_cut": cut,
        "edge_cut_fraction": round(cut / max(csr.num_edges, 1), 6),
        "balance": round(float(sizes.max() / sizes.mean()), 6),
        "part_sizes": sizes.tolist(),
    }
