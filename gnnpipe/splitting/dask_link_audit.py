"""The link split audit by blocks (``cluster.engine: dask``): the report
``gnnpipe.splitting.audit.audit_link_split`` gives for a homogeneous graph, from the files the
block link split wrote (gnnpipe/splitting/dask_link.py), with no process holding all edges.

Pair questions (which roles share a pair, which graph pair is in no role, which held-out pair a
phase's message graph holds in either direction) meet by the pair: every task routes records
(unordered pair key, tag bits) to buckets by a hash of the key, and ``reduce_bucket`` ORs the
tags of each pair and counts. Records come from the sorted positive buckets (a bit per role)
and from the row blocks of the prepared graph (``FULL``) and of each phase's message graph (a
bit per phase). The row blocks also check that each message graph's rows are rows of the
prepared graph; the positive buckets count self-loops, positives that are not edges, and
check their negatives (shape, range, self-loops, true edges: looked up in the mapped CSR).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnpipe.io.blocks import load_routed, open_memmap, save_routed
from gnnpipe.runtime.engine import run_blocks
from gnnpipe.runtime.rng import mix
from gnnpipe.splitting import audit
from gnnpipe.splitting.dask_link import LinkBlocks, bucket_bits, csr_contains
from gnnpipe.splitting import dask_split
from gnnpipe.splitting.dask_split import BlockSizes, graph_arrays
from gnnpipe.splitting.link_split import EDGE_ROLES, PHASES

ROLE_BIT = {role: 1 << i for i, role in enumerate(EDGE_ROLES)}
FULL = 1 << 4
PHASE_BIT = {phase: 1 << (5 + i) for i, phase in enumerate(PHASES)}
ROUTE_STEP = 0x5EED  # the hash that spreads pairs over the audit's buckets


def _route(keys: np.ndarray, tags: np.ndarray, bits: int, folder: str, name: str) -> None:
    """Records (key, tag) routed to the audit buckets in ``<folder>/audit/``, one per key."""
    order = np.argsort(keys, kind="stable")
    keys, tags = keys[order], tags[order]
    first = np.r_[True, keys[1:] != keys[:-1]] if keys.size else np.zeros(0, dtype=bool)
    starts = np.flatnonzero(first)
    keys, tags = keys[starts], np.bitwise_or.reduceat(tags, starts) if starts.size else tags
    bucket = (np.zeros(keys.size, dtype=np.int64) if bits == 0 else
              (mix(0, ROUTE_STEP, keys) >> np.uint64(64 - bits)).astype(np.int64))
    save_routed(Path(folder) / "audit", name, np.stack([keys, tags.astype(np.int64)], axis=1),
                bucket, 1 << bits)


def _rows(indptr, indices, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.asarray(indptr[lo:hi + 1])
    return np.asarray(indices[ptr[0]:ptr[-1]]), np.repeat(np.arange(lo, hi), np.diff(ptr))


def graph_block(block: int, lo: int, hi: int, graph_file: str,
                message: dict[str, tuple[str, str]], bits: int, folder: str) -> dict[str, bool]:
    """Rows ``[lo, hi)``: pair records of the graph and of every phase's message graph; per
    phase whether its rows are rows of the graph."""
    indptr, indices, y = graph_arrays(graph_file)
    n = y.size
    src, dst = _rows(indptr, indices, lo, hi)
    full = (dst - lo) * n + src  # ascending: rows sorted
    proper = src != dst
    keys = [np.minimum(src, dst)[proper] * n + np.maximum(src, dst)[proper]]
    tags = [np.full(keys[0].size, FULL, dtype=np.int64)]
    within = {}
    for phase in PHASES:
        m_src, m_dst = _rows(open_memmap(Path(message[phase][0])),
                             open_memmap(Path(message[phase][1])), lo, hi)
        own = (m_dst - lo) * n + m_src
        pos = np.minimum(np.searchsorted(full, own), max(full.size - 1, 0))
        within[phase] = bool(own.size == 0 or (full.size and (full[pos] == own).all()))
        kept = m_src != m_dst
        keys.append(np.minimum(m_src, m_dst)[kept] * n + np.maximum(m_src, m_dst)[kept])
        tags.append(np.full(keys[-1].size, PHASE_BIT[phase], dtype=np.int64))
    _route(np.concatenate(keys), np.concatenate(tags), bits, folder, f"g{block:06d}")
    return within


@dataclass(frozen=True)
class PositiveSums:
    """One sorted bucket of a role: positives, self-loops, positives that are not edges, and
    (val / test) the shape of its negatives and their range / self-loop / true-edge counts."""

    positives: int
    loops: int
    outside: int
    negatives: tuple[tuple[int, ...], bool, int, int] | None


def positive_bucket(role: str, bucket: int, source: str, graph_file: str, bits: int,
                    folder: str) -> PositiveSums:
    """The positives of ``role`` in ``<source>/b<bucket>.npy`` (and their negatives)."""
    indptr, indices, y = graph_arrays(graph_file)
    n = y.size
    pairs = np.load(Path(source) / f"b{bucket:06d}.npy")
    src, dst = pairs[:, 0], pairs[:, 1]
    _route(np.minimum(src, dst) * n + np.maximum(src, dst),
           np.full(src.size, ROLE_BIT[role], dtype=np.int64), bits, folder,
           f"p_{role}_{bucket:06d}")
    negatives = None
    if role in audit.HELD_OUT_ROLES:
        targets = np.load(Path(source) / f"n{bucket:06d}.npy")
        h = np.repeat(src, targets.shape[1]) if targets.ndim == 2 else src[:0]
        t = targets.reshape(-1) if targets.ndim == 2 else h
        inside = (t >= 0) & (t < n)
        edge = np.zeros(t.size, dtype=bool)
        check = inside & (h != t)
        edge[check] = (csr_contains(indptr, indices, t[check], h[check])
                       | csr_contains(indptr, indices, h[check], t[check]))
        negatives = (tuple(targets.shape), bool(inside.all()), int((h == t).sum()),
                     int(edge.sum()))
    return PositiveSums(int(src.size), int((src == dst).sum()),
                        int((~csr_contains(indptr, indices, dst, src)).sum()), negatives)


def reduce_bucket(bucket: int, folder: str, disjoint: bool) -> dict:
    """One audit bucket's pairs: (count, smallest key) per overlap of two roles, per lost
    pair, per (phase, hidden role) leak; pairs in exactly one of message / supervision."""
    records = load_routed(Path(folder) / "audit", bucket, np.int64, 2)
    order = np.argsort(records[:, 0], kind="stable")
    keys, tags = records[order, 0], records[order, 1]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else keys[:0]
    keys = keys[starts]
    tags = np.bitwise_or.reduceat(tags, starts) if starts.size else tags[:0]

    def has(bits: int) -> np.ndarray:
        return (tags & bits) == bits

    any_role = (tags & sum(ROLE_BIT.values())) != 0
    return {
        "overlap": {f"{a}&{b}": audit.found(keys[has(ROLE_BIT[a] | ROLE_BIT[b])])
                    for a, b in audit.link_compared(disjoint)},
        "lost": audit.found(keys[has(FULL) & ~any_role]),
        "leaked": {phase: {role: audit.found(keys[has(PHASE_BIT[phase] | ROLE_BIT[role])])
                           for role in audit.link_hidden(phase, disjoint)} for phase in PHASES},
        "mismatch": int((has(ROLE_BIT["message"]) != has(ROLE_BIT["train_supervision"])).sum()),
    }


def _merge(found: list[tuple[int, int]]) -> tuple[int, int]:
    hits = [first for count, first in found if count]
    return sum(count for count, _ in found), min(hits) if hits else -1


def audit_link_blocks(client, graph_file: Path, num_nodes: int, split: LinkBlocks,
                      sizes: BlockSizes | None = None) -> dict:
    """``_link_report`` of the block link split ``split`` of a homogeneous graph (without the
    edge type names ``audit_link_split`` adds)."""
    sizes = sizes or dask_split.SIZES  # read here: tests set smaller blocks
    graph, scratch = str(graph_file), split.positives["message"][0].parent.parent
    edges = int(graph_arrays(graph)[0][-1])
    bits = bucket_bits(2 * 5 * edges, sizes.edges)  # the graph's and 3 phases' pairs + positives
    message = {p: (str(f[0]), str(f[1])) for p, f in split.message.items()}
    within = run_blocks(client, graph_block, [(i, *b) for i, b in enumerate(split.blocks)],
                        graph_file=graph, message=message, bits=bits, folder=str(scratch))
    calls = [(role, k, str(split.positives[role][0])) for role in EDGE_ROLES
             for k in range(split.positives[role][1])]
    found = run_blocks(client, positive_bucket, calls, graph_file=graph, bits=bits,
                       folder=str(scratch))
    reduced = run_blocks(client, reduce_bucket, [(k,) for k in range(1 << bits)],
                         folder=str(scratch), disjoint=split.disjoint)
    per_role = {role: [f for (r, _, _), f in zip(calls, found) if r == role]
                for role in EDGE_ROLES}
    negatives = {}
    for phase in audit.HELD_OUT_ROLES:
        parts = [f.negatives for f in per_role[phase]]
        shapes = [shape for shape, *_ in parts]
        shape = ((sum(s[0] for s in shapes), shapes[0][1]) if all(len(s) == 2 for s in shapes)
                 and len({s[1] for s in shapes}) == 1 else (-1,))
        negatives[phase] = (shape, sum(f.positives for f in per_role[phase]),
                            all(p[1] for p in parts), sum(p[2] for p in parts),
                            sum(p[3] for p in parts))
    overlap = {name: _merge([r["overlap"][name] for r in reduced])
               for name in reduced[0]["overlap"]}
    leaked = {phase: {role: _merge([r["leaked"][phase][role] for r in reduced])
                      for role in reduced[0]["leaked"][phase]} for phase in PHASES}
    sums = audit.LinkSums(
        sizes={role: sum(f.positives for f in per_role[role]) for role in EDGE_ROLES},
        loops={role: sum(f.loops for f in per_role[role]) for role in EDGE_ROLES},
        outside={role: sum(f.outside for f in per_role[role]) for role in EDGE_ROLES},
        overlap={name: pair for name, pair in overlap.items() if pair[0]},
        mismatch=sum(r["mismatch"] for r in reduced),
        lost=_merge([r["lost"] for r in reduced]),
        message_edges={p: int(open_memmap(Path(split.message[p][0]))[-1]) for p in PHASES},
        within={p: all(w[p] for w in within) for p in PHASES},
        leaked={p: {r: pair for r, pair in roles.items() if pair[0]}
                for p, roles in leaked.items()},
        negatives=negatives)
    return audit.link_report(sums, num_nodes, disjoint=split.disjoint)
