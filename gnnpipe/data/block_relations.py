"""The relations of a typed graph built by blocks (``gnnpipe.data.dask_typed``), after the id
join: each stored edge type's CSR (a relation, and with ``dataset.undirected`` its reverse
``rev_<rel>`` or both directions of a relation inside one type) and its edge times, per block of
target rows (``gnnpipe.data.block_graph``); the features of featureless node types from the
in-degree maps; the target's isolated nodes. The edge types and counts are ``build_typed``'s.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from gnnpipe.config import DatasetParams
from gnnpipe.data.block_graph import Policy, Route, build_rows, place_rows, route_edges
from gnnpipe.data.dask_prepare import BlockSizes
from gnnpipe.data.graph import EdgeType, edge_type_name
from gnnpipe.data.table_blocks import Block, NodeSpec, make_features_file
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
    from ``Block.base``), whether it has edge times and their scratch file (int64 per row)."""

    index: int
    edge_type: EdgeType
    path: Path
    blocks: list[Block]
    timed: bool
    time_file: Path

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.blocks)


def table_width(spec: NodeSpec) -> int:
    """The number of feature columns a node table's spec reads."""
    return spec.width if spec.is_list else len(spec.features)


def edge_types_of(cfg: DatasetParams, relations: list[RelationTable]
                  ) -> dict[EdgeType, EdgeType | None]:
    """The stored edge types in ``build_typed``'s order (each relation, then its reverse) and
    the reverse of each (None: a directed graph's)."""
    types: dict[EdgeType, EdgeType | None] = {}
    for r in relations:
        s, rel, d = r.edge_type
        if not cfg.undirected:
            types[r.edge_type] = None
        elif s == d:
            types[r.edge_type] = r.edge_type
        else:
            rev = (d, f"rev_{rel}", s)
            types[r.edge_type], types[rev] = rev, r.edge_type
    return types


@dataclasses.dataclass(frozen=True)
class StoredCsr:
    """One stored edge type's files: indptr (N_dst + 1,), indices (E,) and, ``timed``, int64
    times (E,) (None: no edges)."""

    indptr: Path
    indices: Path | None
    time: Path | None
    edges: int
    timed: bool


def _bounds(targets: int, stored: int, sizes: BlockSizes) -> list[tuple[int, int, int]]:
    """Row blocks ``(block, lo, hi)`` of ``targets`` rows for about ``stored`` edges."""
    blocks = max(1, math.ceil(stored / sizes.row_block_edges))
    per = max(1, math.ceil(targets / blocks))
    return [(b, b * per, min(targets, (b + 1) * per)) for b in range(blocks) if b * per < targets]


def build_csrs(client, cfg: DatasetParams, types: list[NodeTable], relations: list[RelationTable],
                edge_types: dict, scratch: Path, sizes: BlockSizes
                ) -> tuple[dict[EdgeType, StoredCsr], dict]:
    """Every stored edge type's CSR (and edge times) into ``scratch/csr``; the input, duplicate
    and self-loop counts of ``prepare.json``."""
    rows_of = {t.name: t.rows for t in types}
    folder = {}
    plans = {}  # edge type -> (relation, bounds, num_src, reverse)
    for r in relations:
        s, _, d = r.edge_type
        same = s == d
        plans[r.edge_type] = (r, _bounds(rows_of[d], r.rows * (2 if same and cfg.undirected
                                                                 else 1), sizes), rows_of[s])
        folder[r.edge_type] = scratch / "csr" / str(r.index)
        rev = edge_types.get(r.edge_type)
        if rev is not None and rev != r.edge_type:
            plans[rev] = (r, _bounds(rows_of[s], r.rows, sizes), rows_of[d])
            folder[rev] = scratch / "csr" / f"{r.index}-rev"
    route_calls = []
    index = 0
    for r in relations:
        s, _, d = r.edge_type
        same = s == d
        policy = Policy(same and cfg.undirected, cfg.dedup,
                        same and cfg.self_loops == "remove")
        routes = [Route(str(folder[r.edge_type]), _per(plans[r.edge_type][1]),
                        len(plans[r.edge_type][1]))]
        rev = edge_types.get(r.edge_type)
        if rev is not None and rev != r.edge_type:
            routes.append(Route(str(folder[rev]), _per(plans[rev][1]), len(plans[rev][1]),
                                reverse=True))
        for b in r.blocks:
            route_calls.append((index, b.base + b.start, b.rows, b.start,
                                str(scratch / "ids" / "mapped"), policy, tuple(routes), r.rows,
                                r.timed))
            index += 1
    routed = run_blocks(client, route_edges, route_calls)
    build_calls = [(block, lo, hi, num_src, str(folder[e]), cfg.dedup, r.rows,
                    str(r.time_file) if r.timed else "", "as_given" if r.timed else "")
                   for e, (r, bounds, num_src) in plans.items() for block, lo, hi in bounds]
    built = run_blocks(client, build_rows, build_calls)
    by_type: dict[EdgeType, list] = {e: [] for e in plans}
    for call, block in zip(build_calls, built):
        by_type[next(e for e in plans if str(folder[e]) == call[4])].append(block)
    csrs, place_calls = {}, []
    for e, (r, bounds, _) in plans.items():
        blocks = by_type[e]
        offsets = np.concatenate([[0], np.cumsum([b.edges for b in blocks])]).astype(np.int64)
        edges = int(offsets[-1])
        out = scratch / "csr" / f"{edge_type_name(e)}"
        out.mkdir(parents=True, exist_ok=True)
        indptr, indices, time = out / "indptr.npy", out / "indices.npy", out / "time.npy"
        create_memmap(indptr, (rows_of[e[2]] + 1,), np.int64)
        if edges:
            create_memmap(indices, (edges,), np.int64)
        if edges and r.timed:
            create_memmap(time, (edges,), np.int64)
        gathers = ((str(r.time_file), str(time)),) if edges and r.timed else ()
        place_calls += [(block, lo, hi, int(offsets[i]), str(folder[e]), str(indptr),
                         str(indices), gathers) for i, (block, lo, hi) in enumerate(bounds)]
        csrs[e] = StoredCsr(indptr, indices if edges else None,
                       time if edges and r.timed else None, edges, r.timed)
    run_blocks(client, place_rows, place_calls)
    return csrs, _counts(cfg, relations, routed, by_type)


def _per(bounds: list[tuple[int, int, int]]) -> int:
    return max(1, bounds[0][2] - bounds[0][1]) if bounds else 1


def _counts(cfg: DatasetParams, relations: list[RelationTable], routed: list, by_type: dict
            ) -> dict:
    """``build_typed``'s input / duplicate / self-loop counts over the given relations."""
    input_edges = duplicates = loops = 0
    position = 0
    for r in relations:
        s, _, d = r.edge_type
        undirected = s == d and cfg.undirected
        rel_loops = sum(x.loops_removed for x in routed[position:position + len(r.blocks)])
        position += len(r.blocks)
        input_edges += r.rows
        loops += rel_loops
        if cfg.dedup:
            built = by_type[r.edge_type]
            distinct = sum(b.distinct for b in built)
            distinct_loops = sum(b.distinct_loops for b in built)
            pairs = (distinct - distinct_loops) // 2 + distinct_loops if undirected else distinct
            duplicates += r.rows - rel_loops - pairs
    return {"input_edges": input_edges, "duplicates_removed": duplicates,
            "self_loops_removed": loops}


def featureless_width(cfg: DatasetParams, node_type: str, csrs: dict) -> int:
    """Columns of a featureless type's features: one per edge type into it (``degree``)."""
    incoming = [e for e in csrs if e[2] == node_type]
    return 1 if cfg.typed.featureless == "constant" or not incoming else len(incoming)


def featureless_blocks(client, cfg: DatasetParams, types: list[NodeTable], csrs: dict
                 ) -> dict[str, str]:
    """Features of the types without feature columns, by blocks of rows into their x files
    (``build_typed``'s rule); the mode of each such type."""
    modes, calls = {}, []
    for t in types:
        if t.spec.features:
            continue
        modes[t.name] = cfg.typed.featureless
        width = featureless_width(cfg, t.name, csrs)
        if not t.rows:
            continue
        make_features_file(t.x_file, t.rows, width, "float32")
        incoming = [str(c.indptr) for e, c in csrs.items() if e[2] == t.name]
        if cfg.typed.featureless == "constant":
            incoming = []
        calls += [(lo, min(t.rows, lo + ROW_GROUP_ROWS), tuple(incoming), str(t.x_file))
                  for lo in range(0, t.rows, ROW_GROUP_ROWS)]
    run_blocks(client, degree_features, calls)
    return modes


def degree_features(lo: int, hi: int, indptr_files: tuple[str, ...], x_file: str) -> None:
    """Rows ``[lo, hi)`` of a featureless type: log1p of its in-degree per edge type
    (``indptr_files``), float32 (B, k); none: ones (B, 1)."""
    if not indptr_files:
        write_rows(Path(x_file), lo, np.ones((hi - lo, 1), dtype=np.float32))
        return
    degrees = np.stack([np.diff(np.asarray(open_memmap(Path(f))[lo:hi + 1]))
                        for f in indptr_files], axis=1)
    write_rows(Path(x_file), lo, np.log1p(degrees).astype(np.float32))


def isolated_targets(csrs: dict, target: str, rows: int) -> int:
    """Target nodes no edge type points into, over blocks of rows."""
    maps = [open_memmap(c.indptr) for e, c in csrs.items() if e[2] == target]
    isolated = 0
    for lo in range(0, rows, ROW_GROUP_ROWS):
        hi = min(rows, lo + ROW_GROUP_ROWS)
        received = sum((np.diff(np.asarray(m[lo:hi + 1])) for m in maps),
                       np.zeros(hi - lo, dtype=np.int64))
        isolated += int((received == 0).sum())
    return isolated
