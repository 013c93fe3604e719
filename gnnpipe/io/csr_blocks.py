"""A graph as memory-mappable .npy files, read one block of rows at a time (partition lp, analyze).

A folder holds ``indptr.npy`` int64 (N + 1,) and ``indices.npy`` (E,) of the in-edge CSR,
``out_indptr.npy`` / ``out_indices.npy`` of its transpose (the out-edges), and per-node arrays
such as ``labels_<t>.npy`` int32 (N,). A block task reads only its rows' slices of the edge
arrays and the labels it needs (``gnnpipe.io.mapped_rows.gather_npy``), so no process needs the
whole graph; on a cluster the folder lies on a path every worker sees. ``build_block_graph`` is
the one writer: its tasks copy row blocks of a stored graph (``stored_message_graph``,
``stored_prepared_relation``: CSR files, memory-mapped) and route every edge to the row block
of its source, whose task writes that block of the transpose.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from gnnpipe.data.graph import HOMOGENEOUS, Csr, edge_type_name
from gnnpipe.io.common import check_csr
from gnnpipe.io.description import read_description
from gnnpipe.io.blocks import create_memmap, load_routed, save_array, save_routed, write_rows
from gnnpipe.io.mapped_rows import gather_npy, npy_layout
from gnnpipe.io.prepared import GRAPH_SCHEMA
from gnnpipe.io.splits import MESSAGE_SCHEMA, read_split_meta
from gnnpipe.io.temps import scratch_or_memory
from gnnpipe.io.tensors import load_tensors


EDGE_LIST_ROWS = 1 << 16  # target rows whose edges ``edge_index_of`` fills at a time


def edge_index_of(csr: Csr) -> torch.Tensor:
    """``csr.edge_index()`` (2, E) int64 (row 0 sources, row 1 targets), the same values, in a
    mapped scratch table beside the stage's outputs when there is one (``scratch_or_memory``):
    an edge list costs no 16 bytes an edge of anonymous memory. Targets are filled
    ``EDGE_LIST_ROWS`` rows at a time."""
    out = torch.from_numpy(scratch_or_memory((2, csr.num_edges), np.int64))
    out[0] = csr.indices
    indptr = csr.indptr
    for a in range(0, csr.num_nodes, EDGE_LIST_ROWS):
        b = min(a + EDGE_LIST_ROWS, csr.num_nodes)
        counts = indptr[a + 1:b + 1] - indptr[a:b]
        out[1, int(indptr[a]):int(indptr[b])] = torch.repeat_interleave(torch.arange(a, b),
                                                                         counts)
    return out


def row_ranges(num_rows: int, rows: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, stop)`` ranges of ``rows`` rows (the last one shorter)."""
    return [(lo, min(num_rows, lo + rows)) for lo in range(0, num_rows, rows)]


def rows_by_edges(indptr: np.ndarray, edges: int, rows: int | None = None
                  ) -> list[tuple[int, int]]:
    """Consecutive ``(start, stop)`` row ranges of a CSR's ``indptr`` (N + 1,) covering every row,
    each with about ``edges`` edges (at most, unless one row alone has more) and at most ``rows``
    rows (None: no row cap); one row at least."""
    n = indptr.size - 1
    rows = n if rows is None else rows
    bounds, lo = [], 0
    while lo < n:
        by_edges = int(np.searchsorted(indptr, indptr[lo] + edges, side="right")) - 1
        hi = min(n, lo + rows, max(lo + 1, by_edges))
        bounds.append((lo, hi))
        lo = hi
    return bounds


def num_block_nodes(folder: Path) -> int:
    return int(npy_layout(Path(folder) / "indptr.npy")[0][0] - 1)


def read_in_rows(folder: Path, start: int, stop: int, prefix: str = ""
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start..stop`` of the stored CSR: offsets int64 (B + 1,) (base ``indptr[start]``)
    and the sources of their in-edges (E_b,) (``prefix`` "out_": of the transpose)."""
    indptr = gather_npy(Path(folder) / f"{prefix}indptr.npy", slice(start, stop + 1))
    return indptr, gather_npy(Path(folder) / f"{prefix}indices.npy", slice(indptr[0], indptr[-1]))


def save_node_array(folder: Path, name: str, values: np.ndarray) -> None:
    """A per-node array (N,) beside the graph, ``<name>.npy`` (read by ``gather_npy``)."""
    save_array(Path(folder) / f"{name}.npy", values)


def write_labels(folder: Path, step: int, labels: np.ndarray) -> None:
    save_node_array(folder, f"labels_{step}", labels.astype(np.int32, copy=False))


def gather_labels(folder: Path, step: int, rows: np.ndarray | slice) -> np.ndarray:
    """``labels_<step>[rows]`` (a copy), by ``gather_npy``."""
    return gather_npy(Path(folder) / f"labels_{step}.npy", rows)


def remove_labels(folder: Path, step: int) -> None:
    (Path(folder) / f"labels_{step}.npy").unlink(missing_ok=True)


# ------------------------------------------------------------- from the split's stored graph
@dataclass(frozen=True)
class StoredRelation:
    """One stored CSR of a phase's message graph: tensors ``<prefix>indptr`` (rows + 1,) and
    ``<prefix>indices`` (num_edges,) of the torch artifact ``file`` (tag ``schema``). Its rows
    are nodes ``dst_start ..`` of the whole graph, its columns ids of ``ids`` nodes (``src_count``
    of them) that lie at ``src_start ..`` in the whole graph."""

    file: str  # absolute: a worker may run elsewhere
    label: str  # the file as the stage was given it, for errors
    schema: str
    prefix: str
    dst_start: int
    rows: int
    src_start: int
    src_count: int
    ids: str  # what the columns are, for errors: "node" or the source node type
    num_edges: int

    @property
    def where(self) -> str:
        return self.label if not self.prefix else f"{self.label} ({self.prefix[:-1]})"


@dataclass(frozen=True)
class StoredGraph:
    """A phase's message graph as stored by the split, over every node (PyG's ``to_homogeneous``
    ids: node ``v`` of the i-th type at ``sum(sizes[:i]) + v``): its relations, and ``merge``:
    rows of several relations are merged with their columns sorted (``csr_from_edges``'s
    order; typed layout), or taken as stored (homogeneous layout)."""

    num_nodes: int
    relations: tuple[StoredRelation, ...]
    merge: bool

    @property
    def num_edges(self) -> int:
        return sum(r.num_edges for r in self.relations)


def _open(relation: StoredRelation) -> tuple[torch.Tensor, torch.Tensor]:
    """``relation``'s indptr and indices, memory-mapped (nothing read until sliced)."""
    p = relation.prefix
    payload = load_tensors(relation.file, relation.schema, {f"{p}indptr": (torch.int64, 1),
                                                            f"{p}indices": (torch.int64, 1)},
                           mmap=True)
    return payload[f"{p}indptr"], payload[f"{p}indices"]


def stored_message_graph(split: Path) -> StoredGraph:
    """The train message graph in ``split`` as a ``StoredGraph``; checks what costs no
    edge read (offset counts and ends; the block tasks check the rest of every row they read,
    with the same one-line errors as the whole-graph readers)."""
    meta = read_split_meta(split)
    label = str(Path(split) / meta["message_graph"]["train"])
    file = str(Path(label).resolve())
    sizes = meta["sizes"]
    starts = dict(zip([t for t, _ in sizes], np.cumsum([0] + [n for _, n in sizes]).tolist()))
    counts = dict(sizes)
    shapes = [(f"{edge_type_name(e)}.", MESSAGE_SCHEMA, starts[e[2]], counts[e[2]],
               starts[e[0]], counts[e[0]], e[0]) for e in meta["edge_type_list"]]
    relations = tuple(_checked(StoredRelation(file, label, schema, prefix, *rest, 0))
                      for prefix, schema, *rest in shapes)
    return StoredGraph(int(sum(counts.values())), relations, meta["layout"] != HOMOGENEOUS)


def stored_prepared_relation(prepared: Path, edge_type: tuple[str, str, str]) -> StoredGraph:
    """The prepared graph's relation ``edge_type`` between nodes of one type (a target's own
    relation) as a ``StoredGraph`` over that type's ids, checked as ``stored_message_graph``
    checks."""
    n = read_description(prepared)["sizes"][edge_type[2]]
    return _own_relation(Path(prepared) / "graph.pt", GRAPH_SCHEMA, edge_type, n)


def stored_message_relation(split: Path, edge_type: tuple[str, str, str]) -> StoredGraph:
    """``stored_prepared_relation`` of the train message graph in ``split``."""
    meta = read_split_meta(split)
    return _own_relation(Path(split) / meta["message_graph"]["train"], MESSAGE_SCHEMA, edge_type,
                         dict(meta["sizes"])[edge_type[2]])


def _own_relation(file: Path, schema: str, edge_type: tuple[str, str, str], n: int
                  ) -> StoredGraph:
    relation = StoredRelation(str(file.resolve()), str(file), schema,
                              f"{edge_type_name(edge_type)}.", 0, n, 0, n, edge_type[2], 0)
    return StoredGraph(n, (_checked(relation),), False)


def _checked(relation: StoredRelation) -> StoredRelation:
    """``relation`` with its edge count, after the checks that cost no edge read."""
    indptr, indices = _open(relation)
    if indptr.numel() != relation.rows + 1:
        raise ValueError(f"{relation.where}: indptr has {indptr.numel()} entries, expected "
                         f"{relation.rows + 1}")
    if indptr[0] != 0 or indptr[-1] != indices.numel():
        raise ValueError(f"{relation.where}: indptr is not a valid CSR offset array")
    return replace(relation, num_edges=indices.numel())


def stored_rows(graph: StoredGraph, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start..stop`` of ``graph``: in-degree int64 (B,) and the sources of their in-edges
    in row order, int64 (E_b,) (whole-graph ids), each relation's rows read through its map and
    checked."""
    degree = np.zeros(stop - start, dtype=np.int64)
    rows, sources = [], []
    for r in graph.relations:
        lo = max(start, r.dst_start) - r.dst_start
        hi = min(stop, r.dst_start + r.rows) - r.dst_start
        if lo >= hi:
            continue
        indptr, indices = _open(r)
        offsets = indptr[lo:hi + 1].numpy().copy()
        cols = indices[int(offsets[0]):int(offsets[-1])].numpy().copy()
        del indptr, indices  # unmapped: only this block's pages were ever resident
        check_csr(Csr(torch.from_numpy(offsets - offsets[0]), torch.from_numpy(cols)), hi - lo,
                  r.where, r.src_count, r.ids)
        here = r.dst_start + lo - start
        count = np.diff(offsets)
        degree[here:here + count.size] += count
        rows.append(np.repeat(np.arange(here, here + count.size, dtype=np.int64), count))
        sources.append(cols + r.src_start)
    if not sources:
        return degree, np.zeros(0, dtype=np.int64)
    if not graph.merge:
        return degree, sources[0]
    row, source = np.concatenate(rows), np.concatenate(sources)
    order = np.argsort(row * graph.num_nodes + source, kind="stable")  # rows, columns ascending
    return degree, source[order]


def place_in_rows(block: tuple[int, int, int, int], graph: StoredGraph, folder: str,
                  out_blocks: list[tuple[int, int]]) -> np.ndarray:
    """Rows ``(index, start, stop, base)`` of ``graph`` (``base``: the edges before ``start``)
    into ``indptr.npy`` / ``indices.npy`` of ``folder`` (``build_block_graph``'s), and their edges
    as (source, target) pairs routed to the row blocks ``out_blocks`` of the transpose
    (``routed/``; none: no transpose); returns the edges sent to each, int64 (len(out_blocks),)."""
    index, start, stop, base = block
    folder = Path(folder)
    degree, sources = stored_rows(graph, start, stop)
    write_rows(folder / "indptr.npy", start + 1, base + np.cumsum(degree))
    write_rows(folder / "indices.npy", base, sources)
    if not out_blocks:
        return np.zeros(0, dtype=np.int64)
    targets = np.repeat(np.arange(start, stop, dtype=np.int64), degree)
    cuts = np.array([lo for lo, _ in out_blocks[1:]], dtype=np.int64)
    bucket = np.searchsorted(cuts, sources, side="right")
    save_routed(folder / "routed", f"{index:08d}", np.stack([sources, targets], 1), bucket,
                len(out_blocks))
    return np.bincount(bucket, minlength=len(out_blocks))


def place_out_rows(block: tuple[int, int, int, int], folder: str) -> None:
    """Rows ``(index, start, stop, base)`` of the transpose into ``out_indptr.npy`` /
    ``out_indices.npy`` from what ``place_in_rows`` routed to them (producers in row order, so
    every out-list keeps its targets ascending)."""
    index, start, stop, base = block
    folder = Path(folder)
    pairs = load_routed(folder / "routed", index, np.int64, 2)
    pairs = pairs[np.argsort(pairs[:, 0], kind="stable")]
    degree = np.bincount(pairs[:, 0] - start, minlength=stop - start)
    write_rows(folder / "out_indptr.npy", start + 1, base + np.cumsum(degree))
    write_rows(folder / "out_indices.npy", base, pairs[:, 1].copy())


def stored_block_offsets(graph: StoredGraph, bounds: list[tuple[int, int]]) -> np.ndarray:
    """Edges before each row bound ``start`` of ``bounds`` (and at the end), int64 (B + 1,):
    one read of two offsets per relation and bound."""
    points = [lo for lo, _ in bounds] + [graph.num_nodes]
    before = np.zeros(len(points), dtype=np.int64)
    for r in graph.relations:
        indptr, _ = _open(r)
        local = np.clip(np.asarray(points) - r.dst_start, 0, r.rows)
        before += indptr[torch.from_numpy(local)].numpy()
        del indptr
    return before


Run = Callable[..., list]  # runtime.engine.run_blocks bound to a client: (fn, calls, **common)


def build_block_graph(folder: Path, graph: StoredGraph, run: Run, block_rows: int,
                      transpose: bool = True) -> None:
    """``graph`` (and, with ``transpose``, its transpose) as the block files of ``folder`` (module
    doc), by tasks of ``block_rows`` rows that ``run`` runs (in this process or on the workers)."""
    bounds = row_ranges(graph.num_nodes, block_rows)
    for prefix in ("", "out_") if transpose else ("",):  # empty files the tasks fill
        create_memmap(Path(folder) / f"{prefix}indptr.npy", (graph.num_nodes + 1,), np.int64)
        create_memmap(Path(folder) / f"{prefix}indices.npy", (graph.num_edges,), np.int64)
    base = stored_block_offsets(graph, bounds)
    sent = run(place_in_rows, [((i, lo, hi, int(base[i])),) for i, (lo, hi) in enumerate(bounds)],
               graph=graph, folder=str(folder), out_blocks=bounds if transpose else [])
    if not transpose:
        return
    per_block = np.sum(sent, axis=0) if sent else np.zeros(0, dtype=np.int64)
    out_base = np.concatenate([[0], np.cumsum(per_block)])
    run(place_out_rows, [((i, lo, hi, int(out_base[i])),) for i, (lo, hi) in enumerate(bounds)],
        folder=str(folder))
    # the routed edges (16 bytes each), now that the transpose holds them
    shutil.rmtree(Path(folder) / "routed", ignore_errors=True)


def gather_in_rows(folder: Path, ids: np.ndarray | slice, prefix: str = ""
                   ) -> tuple[np.ndarray, np.ndarray]:
    """In-degree int64 (m,) of the rows ``ids`` (int64 (m,), or a slice of step 1) of the graph
    in ``folder`` and the sources of their in-edges, row after row (sum of degrees,), by
    ``gather_npy`` (``prefix`` "out_": out-degree and out-edges, of the transpose)."""
    if isinstance(ids, slice):  # a run of rows: its offsets, then its edges, one read each
        ends, found = read_in_rows(folder, ids.start, ids.stop, prefix)
        return np.diff(ends), found
    # both ends of every row in one gather (interleaved: ascending ids stay ascending)
    ends = gather_npy(Path(folder) / f"{prefix}indptr.npy", np.stack([ids, ids + 1], 1).reshape(-1))
    starts, degree = ends[0::2], ends[1::2] - ends[0::2]
    first = np.cumsum(degree) - degree  # where each row's run begins in the output
    positions = np.arange(int(degree.sum()), dtype=np.int64) + np.repeat(starts - first, degree)
    return degree, gather_npy(Path(folder) / f"{prefix}indices.npy", positions)


def gather_block_rows(folder: Path, ids: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``ids`` (int64 (m,), or a slice of step 1) of the graph in ``folder`` read both
    ways (in-edges, then out-edges): each edge's row as an index into ``ids``, int64 (D,), and
    its neighbour's id (D,); only those rows' pages read."""
    rows, neighbours = [], []
    for prefix in ("", "out_"):
        degree, found = gather_in_rows(folder, ids, prefix)
        rows.append(np.repeat(np.arange(degree.size, dtype=np.int64), degree))
        neighbours.append(found)
    return np.concatenate(rows), np.concatenate(neighbours)
