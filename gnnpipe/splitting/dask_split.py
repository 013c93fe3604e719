"""The node split by blocks (``cluster.engine: dask``, ``split.assign: hash``): the roles and
message graphs ``gnnpipe.splitting.split.split_nodes`` gives with ``hash_seed``, byte for byte,
with no process holding all node ids or all edges.

Block tasks open the prepared graph.pt memory-mapped (a path every worker sees) and read only
their rows; the stage process sums small per-block results. Waves:

1. ``class_counts``: labelled nodes per class (stratified) or in all (random) -> phase counts
   per group (``split.phase_counts``: the local errors);
2. ``key_histogram``: radix selection of the key thresholds of every phase and group
   (gnnpipe/splitting/hash_assign.py), eight rounds;
3. ``write_roles``: each node's phase code (int8, 1 byte per node) into ``roles.npy``;
4. mode inductive: ``restrict_rows`` keeps, per target row block, the edges whose both ends the
   train (val) phase sees, and ``place_rows`` (gnnpipe/data/block_graph.py) lays them into the
   ``indptr`` / ``indices`` memory maps of ``message_<phase>``. Transductive phases share the
   prepared CSR itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gnnpipe.config import NodeSplitParams
from gnnpipe.data.block_graph import place_rows
from gnnpipe.data.graph import EDGE, UNLABELLED, Csr, EdgeType, Graph, edge_type_name
from gnnpipe.io.blocks import create_memmap, open_memmap, open_tensor, save_array, write_rows
from gnnpipe.io.prepared import GRAPH_SCHEMA
from gnnpipe.io.tensors import load_tensors
from gnnpipe.runtime.engine import run_blocks
from gnnpipe.splitting.hash_assign import (UNUSED, node_keys, phase_codes, radix_counts,
                                           summed, thresholds)
from gnnpipe.splitting.split import PHASES, checked_sizes, empty_role, phase_counts

LOCAL = "use cluster.engine: local"
STRATEGIES = ("random", "stratified")
MODES = ("transductive", "inductive")


@dataclass(frozen=True)
class BlockSizes:
    """Targets of the block sizes (tests make them tiny to get many blocks)."""

    rows: int = 1 << 20  # nodes per block
    edges: int = 1 << 22  # stored edges per block


SIZES = BlockSizes()


@dataclass(frozen=True)
class NodeBlocks:
    """What ``split_node_blocks`` wrote into its scratch folder: ``roles`` int8 (N,) phase codes
    (0 train, 1 val, 2 test, 3 unused), per phase the (indptr, indices) ``.npy`` files of its
    message graph (None: the phase passes messages over the prepared graph)."""

    roles: Path
    message: dict[str, tuple[Path, Path] | None]
    blocks: list[tuple[int, int]]  # the row blocks of the tasks

    def message_graphs(self, graph: Graph) -> dict[str, dict[EdgeType, Csr]]:
        """Phase -> ``graph``'s one edge type -> its message graph: the memory-mapped files,
        or the prepared CSR where the phase passes messages over it."""
        (edge_type,) = graph.edge_types
        return {phase: {edge_type: graph.csr[edge_type] if files is None
                        else Csr(*map(open_tensor, files))}
                for phase, files in self.message.items()}


def refuse_unsupported(assign: str, layout: str, node: NodeSplitParams | None) -> None:
    """One line naming the first option the block split does not run: ``split.assign``, the
    prepared graph's ``layout``, and for the node task its ``node`` params (None: link task)."""
    refused = {
        "split.assign": (assign != "hash", assign, "hash"),
        "the prepared graph's layout": (layout != "homogeneous", layout, "homogeneous"),
    }
    if node is not None:
        refused.update({
            "split.node.strategy": (node.strategy not in STRATEGIES, node.strategy,
                                    " | ".join(STRATEGIES)),
            "split.node.mode": (node.mode not in MODES, node.mode, " | ".join(MODES))})
    for key, (refuse, found, allowed) in refused.items():
        if refuse:
            raise ValueError(f"{key}={found} is not split on cluster.engine: dask (allowed: "
                             f"{allowed}); {LOCAL}")


def graph_arrays(graph_file: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The prepared one-type graph's ``indptr`` (N + 1,), ``indices`` (E,) and labels ``y``
    (N,), memory mapped (the stage process checked the file once)."""
    e = edge_type_name(EDGE)
    payload = load_tensors(graph_file, GRAPH_SCHEMA, {f"{e}.indptr": (torch.int64, 1),
                                                      f"{e}.indices": (torch.int64, 1)}, mmap=True)
    return payload[f"{e}.indptr"].numpy(), payload[f"{e}.indices"].numpy(), payload["y"].numpy()


def row_blocks(indptr: np.ndarray, sizes: BlockSizes) -> list[tuple[int, int]]:
    """Consecutive row ranges of at most ``sizes.rows`` rows and about ``sizes.edges`` edges
    (at least one row each)."""
    n = indptr.size - 1
    bounds, lo = [], 0
    while lo < n:
        by_edges = int(np.searchsorted(indptr, indptr[lo] + sizes.edges, side="right")) - 1
        hi = min(n, lo + sizes.rows, max(lo + 1, by_edges))
        bounds.append((lo, hi))
        lo = hi
    return bounds


def _groups(y: np.ndarray, stratified: bool) -> np.ndarray:
    """Group of every node: its class (stratified) or 0 (random); -1: unlabelled, in none."""
    labelled = y != UNLABELLED
    return np.where(labelled, y if stratified else 0, -1)


def class_counts(lo: int, hi: int, graph_file: str, num_classes: int) -> np.ndarray:
    """Labelled nodes per class among rows ``[lo, hi)``: int64 (C,)."""
    y = np.asarray(graph_arrays(graph_file)[2][lo:hi])
    return np.bincount(y[y != UNLABELLED], minlength=num_classes)


def key_histogram(lo: int, hi: int, graph_file: str, seed: int, stratified: bool,
                  wanted: np.ndarray, prefixes: np.ndarray, shift: int, gather: bool):
    """``radix_counts`` of rows ``[lo, hi)``."""
    y = np.asarray(graph_arrays(graph_file)[2][lo:hi])
    keys = node_keys(seed, np.arange(lo, hi))
    return radix_counts(keys, _groups(y, stratified), wanted, prefixes, shift, gather)


def write_roles(lo: int, hi: int, graph_file: str, seed: int, stratified: bool,
                limits: np.ndarray, has: np.ndarray, roles_file: str) -> np.ndarray:
    """Phase codes of rows ``[lo, hi)`` into ``roles_file``; returns nodes per code int64 (4,)."""
    y = np.asarray(graph_arrays(graph_file)[2][lo:hi])
    code = phase_codes(node_keys(seed, np.arange(lo, hi)), _groups(y, stratified), limits, has)
    write_rows(Path(roles_file), lo, code)
    return np.bincount(code, minlength=UNUSED + 1)


def phase_sees(code: np.ndarray, labelled: np.ndarray) -> dict[str, np.ndarray]:
    """bool per node and phase "train" / "val" of mode inductive: its own roles plus every
    unlabelled node (``split.phase_visible``)."""
    return {"train": (code == 0) | ~labelled, "val": (code <= 1) | ~labelled}


def restrict_rows(block: int, lo: int, hi: int, graph_file: str, roles_file: str,
                  folder: str) -> dict[str, int]:
    """Rows ``[lo, hi)`` of the train and val message graphs of mode inductive: the edges both
    of whose ends the phase sees, as ``place_rows`` reads them from ``<folder>/<phase>/``;
    returns the kept edges per phase."""
    indptr, indices, y = graph_arrays(graph_file)
    roles = open_memmap(Path(roles_file))
    ptr = np.asarray(indptr[lo:hi + 1])
    src = np.asarray(indices[ptr[0]:ptr[-1]])
    dst = np.repeat(np.arange(lo, hi), np.diff(ptr))
    ends = np.concatenate([src, dst])
    unique, inverse = np.unique(ends, return_inverse=True)  # each endpoint read once
    sees = phase_sees(np.asarray(roles[unique]), np.asarray(y[unique]) != UNLABELLED)
    kept = {}
    for phase, visible in sees.items():
        both = visible[inverse]
        keep = both[:src.size] & both[src.size:]
        out = Path(folder) / phase / "rows" / f"r{block:06d}"
        save_array(out / "sources.npy", src[keep])
        save_array(out / "ends.npy", np.cumsum(np.bincount(dst[keep] - lo, minlength=hi - lo)))
        kept[phase] = int(keep.sum())
    return kept


def split_node_blocks(client, graph_file: Path, num_nodes: int, num_classes: int,
                      cfg: NodeSplitParams, seed: int, scratch: Path,
                      sizes: BlockSizes | None = None) -> NodeBlocks:
    """Roles and message graphs of the node split (strategies random / stratified, modes
    transductive / inductive) into ``scratch``, on ``client`` (None: in this process)."""
    graph = str(graph_file)
    indptr = graph_arrays(graph)[0]
    blocks = row_blocks(indptr, sizes or SIZES)
    stratified = cfg.strategy == "stratified"
    per_class = sum(run_blocks(client, class_counts, blocks, graph_file=graph,
                               num_classes=num_classes))
    class_sizes = per_class if stratified else np.array([int(per_class.sum())])
    counts = phase_counts(cfg, checked_sizes(cfg, int(per_class.sum()), num_nodes), class_sizes,
                          num_nodes)

    def count(wanted: np.ndarray, prefixes: np.ndarray, shift: int, gather: bool = False):
        return summed(run_blocks(client, key_histogram, blocks, graph_file=graph, seed=seed,
                                 stratified=stratified, wanted=wanted, prefixes=prefixes,
                                 shift=shift, gather=gather), gather)

    limits, has = thresholds(count, counts)
    roles = scratch / "roles.npy"
    create_memmap(roles, (num_nodes,), np.int8)
    taken = sum(run_blocks(client, write_roles, blocks, graph_file=graph, seed=seed,
                           stratified=stratified, limits=limits, has=has, roles_file=str(roles)))
    for code, key in enumerate(PHASES):
        if not taken[code]:
            raise ValueError(empty_role(key))
    message: dict[str, tuple[Path, Path] | None] = {phase: None for phase in PHASES}
    if cfg.mode == "inductive":
        kept = run_blocks(client, restrict_rows, [(i, *b) for i, b in enumerate(blocks)],
                          graph_file=graph, roles_file=str(roles), folder=str(scratch))
        for phase in ("train", "val"):
            message[phase] = place_csr(client, scratch / phase, blocks,
                                       [k[phase] for k in kept], num_nodes)
    return NodeBlocks(roles=roles, message=message, blocks=blocks)


def place_csr(client, folder: Path, blocks: list[tuple[int, int]], kept: list[int],
              num_nodes: int) -> tuple[Path, Path]:
    """The CSR of ``folder``'s row blocks as ``indptr.npy`` / ``indices.npy`` in ``folder``."""
    indptr, indices = folder / "indptr.npy", folder / "indices.npy"
    create_memmap(indptr, (num_nodes + 1,), np.int64)
    create_memmap(indices, (int(sum(kept)),), np.int64)
    offsets = np.concatenate([[0], np.cumsum(kept)[:-1]]).astype(np.int64)
    run_blocks(client, place_rows, [(i, lo, hi, int(offsets[i])) for i, (lo, hi) in
                                    enumerate(blocks)],
               folder=str(folder), indptr_file=str(indptr), indices_file=str(indices))
    return indptr, indices
