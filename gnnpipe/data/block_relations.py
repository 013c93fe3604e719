"""The relations of a graph built by blocks (``gnnpipe.data.prepare_tables``), after the id join:
each stored edge type's CSR (a relation, and with ``dataset.undirected`` its reverse
``rev_<rel>`` or both directions of a relation inside one type) and its edge attributes, per block
of target rows (``gnnpipe.data.block_graph``); the features of featureless node types from the
in-degree maps; the target's isolated nodes and largest in-degree.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from gnnpipe.config import DatasetParams
from gnnpipe.data.block_graph import (Route, build_rows, duplicates_removed, place_rows,
                                      route_edges)
from gnnpipe.data.graph import EdgeType, edge_type_name, reverse_edge_type
from gnnpipe.data.table_blocks import Block, BlockSizes, NodeSpec
from gnnpipe.io.blocks import ROW_GROUP_ROWS, create_memmap, open_memmap, write_rows
from gnnpipe.runtime.engine import run_blocks


@dataclasses.dataclass(frozen=True)
class NodeTable:
    """A node type's table: its spec and blocks, its features' and times' scratch files."""

    name: str
    path: Path
    spec: NodeSpec | None  # None: its table could not be opened (a finding says why)
    blocks: list[Block]
    x_file: Path
    time_file: Path

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.blocks)


@dataclasses.dataclass(frozen=True)
class RelationTable:
    """A relation's table (``index`` in name order): its edge type and blocks (scratch rows
    from ``Block.base``), whether it has edge times, the attributes each stored edge takes from
    its input row (name -> scratch file of one value per row, column type) and the sortable
    times (``order``, one per row) that dedup and copies follow."""

    index: int
    edge_type: EdgeType
    path: Path
    blocks: list[Block]
    timed: bool = False
    attrs: dict = dataclasses.field(default_factory=dict)
    order: Path | None = None

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.blocks)


def edge_types_of(cfg: DatasetParams, relations: list[RelationTable]
                  ) -> dict[EdgeType, EdgeType | None]:
    """The stored edge types in ``build_typed``'s order (each relation, then its reverse) and
    the reverse of each (None: a directed graph's)."""
    types: dict[EdgeType, EdgeType | None] = {}
    for r in relations:
        if not cfg.undirected:
            types[r.edge_type] = None
        elif r.edge_type[0] == r.edge_type[2]:
            types[r.edge_type] = r.edge_type
        else:
            rev = reverse_edge_type(r.edge_type)
            types[r.edge_type], types[rev] = rev, r.edge_type
    return types


@dataclasses.dataclass(frozen=True)
class StoredCsr:
    """One stored edge type's files: indptr (N_dst + 1,), indices (E,) and its relation's
    attributes, name -> (E,) values (None: no edges)."""

    indptr: Path
    indices: Path | None
    attrs: dict[str, Path | None]
    edges: int


@dataclasses.dataclass(frozen=True)
class _Plan:
    """How one stored edge type is built: from ``relation`` (flipped when ``reverse``), over
    ``targets`` rows and ``num_src`` sources, in row blocks ``(block, lo, hi)`` of ``per``
    targets, in ``folder``."""

    relation: RelationTable
    reverse: bool
    targets: int
    num_src: int
    bounds: list[tuple[int, int, int]]
    per: int
    folder: Path


def _plans(cfg: DatasetParams, types: list[NodeTable], relations: list[RelationTable],
           edge_types: dict, scratch: Path, sizes: BlockSizes) -> dict[EdgeType, _Plan]:
    """Every stored edge type's plan, in ``edge_types``' order; row blocks of about
    ``sizes.row_block_edges`` stored edges."""
    rows_of = {t.name: t.rows for t in types}
    plans = {}
    for r in relations:
        s, _, d = r.edge_type
        both = s == d and cfg.undirected  # both directions stored in this edge type
        for edge_type, reverse in ((r.edge_type, False), (edge_types.get(r.edge_type), True)):
            if edge_type is None or (reverse and edge_type == r.edge_type):
                continue
            targets, sources = (rows_of[s], rows_of[d]) if reverse else (rows_of[d], rows_of[s])
            blocks = max(1, math.ceil(r.rows * (2 if both else 1) / sizes.row_block_edges))
            per = max(1, math.ceil(targets / blocks))
            bounds = [(b, b * per, min(targets, (b + 1) * per)) for b in range(blocks)
                      if b * per < targets]
            plans[edge_type] = _Plan(r, reverse, targets, sources, bounds, per, scratch / "csr" / (
                f"{r.index}-rev" if reverse else str(r.index)))
    return plans


def build_csrs(client, cfg: DatasetParams, types: list[NodeTable],
               relations: list[RelationTable], edge_types: dict, scratch: Path,
               sizes: BlockSizes) -> tuple[dict[EdgeType, StoredCsr], dict]:
    """Every stored edge type's CSR (and edge attributes) into ``scratch/csr``, in three waves (route
    the edge blocks, build the row blocks, place them); the input, duplicate and self-loop
    counts of ``prepare.json``."""
    plans = _plans(cfg, types, relations, edge_types, scratch, sizes)
    route_calls = []
    for r in relations:
        s, _, d = r.edge_type
        routes = tuple(Route(str(p.folder), p.per, len(p.bounds), p.reverse)
                       for p in plans.values() if p.relation is r)
        route_calls += [(len(route_calls) + i, b.base + b.start, b.rows, b.start,
                         str(scratch / "ids" / "mapped"), s == d and cfg.undirected,
                         s == d and cfg.self_loops == "remove", routes, r.rows, bool(r.attrs))
                        for i, b in enumerate(r.blocks)]
    routed = run_blocks(client, route_edges, route_calls)
    build_calls = [(e, (block, lo, hi, plan.num_src, str(plan.folder), cfg.dedup,
                        plan.relation.rows, str(plan.relation.order or ""),
                        bool(plan.relation.attrs)))
                   for e, plan in plans.items() for block, lo, hi in plan.bounds]
    built: dict[EdgeType, list] = {e: [] for e in plans}
    for (e, _), block in zip(build_calls, run_blocks(client, build_rows,
                                                     [call for _, call in build_calls])):
        built[e].append(block)
    csrs, place_calls = {}, []
    for e, plan in plans.items():
        offsets = np.concatenate([[0], np.cumsum([b.edges for b in built[e]])]).astype(np.int64)
        edges = int(offsets[-1])
        out = scratch / "csr" / edge_type_name(e)
        out.mkdir(parents=True, exist_ok=True)
        indptr, indices = out / "indptr.npy", out / "indices.npy"
        create_memmap(indptr, (plan.targets + 1,), np.int64)
        attrs: dict[str, Path | None] = {name: None for name in plan.relation.attrs}
        if edges:
            create_memmap(indices, (edges,), np.int64)
            for name, (values, _) in plan.relation.attrs.items():
                attrs[name] = out / f"{name}.npy"
                create_memmap(attrs[name], (edges,), open_memmap(values).dtype)
        gathers = tuple((str(plan.relation.attrs[name][0]), str(path))
                        for name, path in attrs.items() if path is not None)
        place_calls += [(block, lo, hi, int(offsets[i]), str(plan.folder), str(indptr),
                         str(indices), gathers) for i, (block, lo, hi) in enumerate(plan.bounds)]
        csrs[e] = StoredCsr(indptr, indices if edges else None, attrs, edges)
    run_blocks(client, place_rows, place_calls)
    return csrs, _counts(cfg, relations, routed, built)


def _counts(cfg: DatasetParams, relations: list[RelationTable], routed: list, by_type: dict
            ) -> dict:
    """``build_typed``'s input / duplicate / self-loop counts over the given relations
    (``routed``: the self-loops each edge block removed, relation after relation)."""
    ends = np.cumsum([len(r.blocks) for r in relations])
    loops = [sum(routed[end - len(r.blocks):end]) for r, end in zip(relations, ends)]
    duplicates = sum(duplicates_removed(r.rows, n, by_type[r.edge_type],
                                        r.edge_type[0] == r.edge_type[2] and cfg.undirected)
                     for r, n in zip(relations, loops)) if cfg.dedup else 0
    return {"input_edges": sum(r.rows for r in relations), "duplicates_removed": duplicates,
            "self_loops_removed": sum(loops)}


def featureless_blocks(client, cfg: DatasetParams, types: list[NodeTable], csrs: dict
                       ) -> dict[str, int]:
    """Features of the types without feature columns, by blocks of rows into their x files
    (``build_typed``'s rule: ``degree``, one column per edge type into the type; ``constant``,
    or none: one); the width of each such type."""
    widths, calls = {}, []
    for t in (t for t in types if not t.spec.features):
        incoming = () if cfg.typed.featureless == "constant" else tuple(
            str(c.indptr) for e, c in csrs.items() if e[2] == t.name)
        widths[t.name] = max(len(incoming), 1)
        if t.rows:
            create_memmap(t.x_file, (t.rows, widths[t.name]), np.float32)
            calls += [(lo, min(t.rows, lo + ROW_GROUP_ROWS), incoming, str(t.x_file))
                      for lo in range(0, t.rows, ROW_GROUP_ROWS)]
    run_blocks(client, degree_features, calls)
    return widths


def degree_features(lo: int, hi: int, indptr_files: tuple[str, ...], x_file: str) -> None:
    """Rows ``[lo, hi)`` of a featureless type: log1p of its in-degree per edge type
    (``indptr_files``), float32 (B, k); none: ones (B, 1)."""
    if not indptr_files:
        write_rows(Path(x_file), lo, np.ones((hi - lo, 1), dtype=np.float32))
        return
    degrees = np.stack([np.diff(np.asarray(open_memmap(Path(f))[lo:hi + 1]))
                        for f in indptr_files], axis=1)
    write_rows(Path(x_file), lo, np.log1p(degrees).astype(np.float32))


def received(csrs: dict, target: str, rows: int) -> tuple[int, int]:
    """Target nodes no edge type points into and the largest number of edges any receives,
    over blocks of rows."""
    maps = [open_memmap(c.indptr) for e, c in csrs.items() if e[2] == target]
    isolated = largest = 0
    for lo in range(0, rows, ROW_GROUP_ROWS):
        hi = min(rows, lo + ROW_GROUP_ROWS)
        degrees = sum((np.diff(np.asarray(m[lo:hi + 1])) for m in maps),
                      np.zeros(hi - lo, dtype=np.int64))
        isolated += int((degrees == 0).sum())
        largest = max(largest, int(degrees.max()) if degrees.size else 0)
    return isolated, largest
