"""Node partitioning of a phase's message graph, and per-part shards with their halo.

Methods: ``metis`` (min-cut k-way through pymetis, torch-sparse or pyg-lib), ``lp`` (balanced
label propagation by blocks of rows, partition_lp.py: no process holds the graph), ``random`` and
``bfs`` (contiguous chunks of a breadth-first order) as cheap baselines. A shard holds one
part's nodes plus their k-hop in-neighbourhood (the halo) as a local CSR, so a ClusterGCN batch
or a distributed rank loads one file and never the whole graph.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch

from gnnpipe.config import PartitionParams
from gnnpipe.data.graph import TYPED, Csr, EdgeType, layout_of
from gnnpipe.data.edges import row_positions, sorted_unique
from gnnpipe.graphops.rings import Rings
from gnnpipe.io.partitions import shard_writer

INSTALL_HINT = {  # what an explicit partition.backend needs
    "pyg_lib": ("pyg-lib (not on PyPI: pip install pyg-lib -f "
                "https://data.pyg.org/whl/torch-<version>+cpu.html)"),
    # Debian's libmetis has 32-bit idx_t, which torch-sparse cannot compile against
    "torch_sparse": ("torch-sparse built with a 64-bit-idx_t METIS "
                     "(bash bench/build_peers.sh VENV does it)"),
}


# ------------------------------------------------------------------------------- graph prep
def projection_meta(sizes: list[tuple[str, int]], edge_types: list[EdgeType]) -> dict:
    """What data/partition's meta.json adds about ``heuristics.train_projection``: a typed split's type
    offsets ``[type, first id, num_nodes]``; nothing for a homogeneous layout."""
    if layout_of([t for t, _ in sizes], edge_types) != TYPED:
        return {}
    starts = np.cumsum([0] + [n for _, n in sizes]).tolist()
    return {"projection": "to_homogeneous",
            "node_types": [[t, starts[i], n] for i, (t, n) in enumerate(sizes)]}


def _sort(values: np.ndarray) -> np.ndarray:
    """Ascending copy; torch's sort is ~1.6x numpy's on large int64 arrays here."""
    return torch.sort(torch.from_numpy(values)).values.numpy()


def symmetric_simple(csr: Csr, with_counts: bool = False) -> Csr | tuple[Csr, np.ndarray]:
    """The undirected simple graph METIS needs: both directions, no self-loops, no repeats.

    With ``with_counts`` also the int64 (E',) number of stored directed edges (either direction,
    repeats included) each symmetric edge stands for.
    """
    n = csr.num_nodes
    dst = csr.targets().numpy()
    src = csr.indices.numpy()
    keep = src != dst
    loops = not keep.all()
    if loops:
        src, dst = src[keep], dst[keep]
    forward = dst * n + src  # row * n + column: CSR order when columns are sorted in each row
    backward = _sort(src * n + dst)
    if (not loops and np.array_equal(forward, backward)
            and bool((forward[1:] > forward[:-1]).all())):
        # already symmetric and simple (an undirected, deduplicated dataset): use it as it is
        return (csr, np.full(csr.num_edges, 2, dtype=np.int64)) if with_counts else csr
    both = _sort(np.concatenate([forward, backward]))
    first = np.ones(both.size, dtype=bool)  # the first of each run of equal keys
    first[1:] = both[1:] != both[:-1]
    keys, counts = both[first], np.diff(np.append(np.flatnonzero(first), both.size))
    rows = keys // n  # sorted keys are already CSR order (rows, then columns)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    simple = Csr(torch.from_numpy(indptr), torch.from_numpy(keys - rows * n))
    return (simple, counts.astype(np.int64)) if with_counts else simple


def _node_weights(csr: Csr, cfg: PartitionParams) -> np.ndarray | None:
    """int64 (N,) METIS vertex weights, or None for unit weights."""
    if cfg.node_weight == "degree":
        return (csr.degrees().numpy() + 1).astype(np.int64)  # +1: isolated nodes still count
    return None


# ---------------------------------------------------------------------------------- backends
def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _torch_sparse_has_metis() -> bool:
    """torch-sparse built with WITH_METIS=0 imports fine and fails only when called."""
    try:
        importlib.import_module("torch_sparse")
        ring = torch.tensor([0, 1, 2]), torch.tensor([1, 0])
        torch.ops.torch_sparse.partition2(ring[0], ring[1], None, None, 2, False)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not usable", auto falls back
        return False


def resolve_backend(cfg: PartitionParams) -> str:
    """The METIS implementation ``cfg.backend`` means here; "none" for non-METIS methods.

    ``auto`` prefers pyg-lib, then torch-sparse (if compiled with METIS), then pymetis. An
    explicit backend that is not installed raises a ValueError naming what to install.
    """
    if cfg.method != "metis":
        return "none"
    if cfg.backend == "auto":
        if _importable("pyg_lib"):
            return "pyg_lib"
        if _importable("torch_sparse") and _torch_sparse_has_metis():
            return "torch_sparse"
        return "pymetis"
    if cfg.backend in INSTALL_HINT and not _importable(cfg.backend):
        raise ValueError(f"partition.backend={cfg.backend!r} needs {INSTALL_HINT[cfg.backend]}; "
                         "it is not installed here. Use partition.backend: pymetis (or auto)")
    if cfg.backend == "torch_sparse" and not _torch_sparse_has_metis():
        raise ValueError("partition.backend='torch_sparse': the installed torch-sparse was built "
                         f"without METIS; reinstall {INSTALL_HINT['torch_sparse']} or use "
                         "partition.backend: pymetis")
    return cfg.backend


def _metis(csr: Csr, cfg: PartitionParams, backend: str, seed: int) -> np.ndarray:
    if cfg.edge_weight == "multiplicity":
        simple, edge_w = symmetric_simple(csr, with_counts=True)
    else:
        simple, edge_w = symmetric_simple(csr), None
    node_w = _node_weights(csr, cfg)
    if backend == "pymetis":
        import pymetis  # a dependency; imported here so random/bfs runs never load it

        options = pymetis.Options(seed=seed, ufactor=max(1, round(cfg.imbalance * 1000)))
        xadj, adjncy = simple.indptr.numpy(), simple.indices.numpy()
        kwargs = {"vweights": node_w, "eweights": edge_w, "options": options, "recursive": False}
        _, membership = pymetis.part_graph(cfg.num_parts, pymetis.CSRAdjacency(xadj, adjncy),
                                           **kwargs)
        return np.asarray(membership, dtype=np.int32)
    node_t = None if node_w is None else torch.from_numpy(node_w)
    edge_t = None if edge_w is None else torch.from_numpy(edge_w)
    if backend == "pyg_lib":
        pyg_lib = importlib.import_module("pyg_lib")
        cluster = pyg_lib.partition.metis(simple.indptr, simple.indices, cfg.num_parts,
                                          node_weight=node_t, edge_weight=edge_t, recursive=False)
    else:  # torch_sparse
        importlib.import_module("torch_sparse")
        cluster = torch.ops.torch_sparse.partition2(simple.indptr, simple.indices, edge_t, node_t,
                                                    cfg.num_parts, False)
    return cluster.numpy().astype(np.int32)


# ------------------------------------------------------------------------------- fallbacks
def bfs_order(csr: Csr, rng: np.random.Generator) -> np.ndarray:
    """Every node once, int64 (N,), in breadth-first order over the symmetric graph.

    Starts from a random node and restarts at the next unvisited node of a random permutation
    when a component is exhausted; isolated nodes come last. Vectorized per BFS level.
    """
    simple = symmetric_simple(csr)
    indptr, indices = simple.indptr.numpy(), simple.indices.numpy()
    n = simple.num_nodes
    visited = np.diff(indptr) == 0  # isolated nodes are appended at the end
    isolated = np.flatnonzero(visited)
    starts = rng.permutation(n)
    pointer, chunks, frontier = 0, [], np.empty(0, dtype=np.int64)
    remaining = n - isolated.size
    while remaining:
        if frontier.size == 0:  # next component: scan the permutation in windows, not per node
            while True:
                window = starts[pointer:pointer + 4096]
                free = np.flatnonzero(~visited[window])
                if free.size:
                    pointer += int(free[0])
                    break
                pointer += window.size
            frontier = starts[pointer:pointer + 1].astype(np.int64)
            visited[frontier] = True
        chunks.append(frontier)
        remaining -= frontier.size
        reached = indices[row_positions(indptr, frontier)]
        frontier = sorted_unique(reached[~visited[reached]])
        visited[frontier] = True
    chunks.append(isolated.astype(np.int64))
    return np.concatenate(chunks)


def _chunk_order(order: np.ndarray, weights: np.ndarray | None, num_parts: int) -> np.ndarray:
    """Cut ``order`` into ``num_parts`` contiguous runs of (nearly) equal total weight."""
    n = order.size
    w = np.ones(n, dtype=np.float64) if weights is None else weights[order].astype(np.float64)
    before = np.cumsum(w) - w  # weight of the nodes ahead of each node in the order
    part_in_order = np.minimum((before * num_parts / w.sum()).astype(np.int64), num_parts - 1)
    parts = np.empty(n, dtype=np.int32)
    parts[order] = part_in_order
    return parts


# --------------------------------------------------------------------------------- assign
def check_num_parts(num_nodes: int, cfg: PartitionParams) -> str:
    """Refuses more parts than nodes; returns ``resolve_backend(cfg)`` (which raises for a
    missing explicit backend even when ``num_parts`` is 1)."""
    if cfg.num_parts > num_nodes:
        raise ValueError(f"partition.num_parts={cfg.num_parts} exceeds the graph's {num_nodes} "
                         "nodes")
    return resolve_backend(cfg)


def assign_parts(csr: Csr, cfg: PartitionParams, rng: np.random.Generator) -> np.ndarray:
    """Part id for every node of the whole ``csr`` (metis, random, bfs; lp goes by blocks,
    gnnpipe/graphops/partition_blocks.py): int32, shape (N,), values in ``[0, num_parts)``."""
    n = csr.num_nodes
    backend = check_num_parts(n, cfg)
    if cfg.method == "lp":
        raise ValueError("partition.method=lp partitions the stored graph by blocks "
                         "(partition_blocks.partition_stage), not a CSR in memory")
    if cfg.num_parts == 1:
        return np.zeros(n, dtype=np.int32)
    if cfg.method == "random":
        return rng.integers(0, cfg.num_parts, size=n).astype(np.int32)
    if cfg.method == "bfs":
        return _chunk_order(bfs_order(csr, rng), _node_weights(csr, cfg), cfg.num_parts)
    return _metis(csr, cfg, backend, int(rng.integers(0, 2**31 - 1)))


def parts_report(cut: int, num_edges: int, parts: np.ndarray, num_parts: int) -> dict:
    """Edge cut (``cut`` of the ``num_edges`` stored edges lie between parts: their fraction)
    and balance (max part / mean part) of ``parts`` int32 (N,)."""
    sizes = np.bincount(parts, minlength=num_parts)
    return {
        "num_parts": num_parts,
        "edge_cut": cut,
        "edge_cut_fraction": round(cut / max(num_edges, 1), 6),
        "balance": round(float(sizes.max() / sizes.mean()), 6),
        "part_sizes": sizes.tolist(),
    }


# ---------------------------------------------------------------------------------- shards
RowReader = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


SHARD_ROWS = 1 << 16  # rows read at once: a shard task holds its rings' bitmaps plus one read


def shard_rings(rows: RowReader, owned: np.ndarray, halo_hops: int) -> Rings:
    """The node rings of a shard: ``owned`` (bool (N,), the part's nodes; used as scratch
    after), then the nodes 1, 2, ..., ``halo_hops`` in-hops away, every row read through
    ``rows`` ``SHARD_ROWS`` at a time."""
    rings = Rings(owned.size)
    rings.add(owned)
    reached = owned
    for _ in range(halo_hops):
        reached[:] = False
        for chunk in rings.ring(len(rings) - 1, SHARD_ROWS):  # sources feeding the frontier
            reached[rows(chunk)[1]] = True
        rings.add(reached)  # less the nodes of earlier rings
    return rings


def shard_rows(rows: RowReader, rings: Rings
               ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """The shard's rows in local order ``SHARD_ROWS`` at a time: per chunk the rows' global ids,
    whole-graph in-degree and induced in-edge count int64 (m,) each, and the induced edges'
    local sources, row after row, columns ascending in each row (rows are grouped, so sorting
    each chunk alone gives the order of one sort of all edges)."""
    size = int(rings.ptr[-1])
    for chunk in rings.nodes(SHARD_ROWS):
        row_degree, sources = rows(chunk)
        inside, cols = rings.local(sources)
        rows_here = np.repeat(np.arange(row_degree.size), row_degree)[inside]
        # one int64 key: faster than lexsort
        kept = cols[torch.argsort(torch.from_numpy(rows_here * size + cols)).numpy()]
        yield chunk, row_degree, np.bincount(rows_here, minlength=row_degree.size), kept


def write_shard(rows: RowReader, owned: np.ndarray, out: Path, part: int, num_parts: int,
                num_nodes: int, halo_hops: int) -> dict:
    """The shard of ``part`` (its ``owned`` nodes, bool (N,), used as scratch; their
    ``halo_hops``-hop in-neighbours; the induced edges) into ``out`` (``part_<part>/``), written
    as its rows are read through ``rows`` (a reader of the block files): a
    task holds the rings' bitmaps and one read, never the shard's edges. Returns its sizes
    (owned, halo, edges) for ``halo_report``."""
    rings = shard_rings(rows, owned, halo_hops)
    with shard_writer(out, part, num_parts, num_nodes, rings.ptr) as writer:
        for chunk in shard_rows(rows, rings):
            writer.add(*chunk)
    return writer.summary


def halo_report(summaries: list[dict]) -> dict:
    """Per-part halo sizes and edges plus the halo / owned ratio over all parts."""
    owned = sum(s["owned"] for s in summaries)
    halo = sum(s["halo"] for s in summaries)
    return {"halo_sizes": [s["halo"] for s in summaries],
            "shard_edges": [s["edges"] for s in summaries],
            "halo_fraction": round(halo / max(owned, 1), 6)}


def rank_parts(num_parts: int, rank: int, world_size: int) -> list[int]:
    """Parts a rank owns when ``num_parts`` are dealt round-robin over ``world_size`` ranks."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside [0, {world_size})")
    if num_parts < world_size:
        raise ValueError(f"partition.num_parts={num_parts} is below the {world_size} ranks; "
                         "every rank needs at least one part")
    return list(range(rank, num_parts, world_size))
