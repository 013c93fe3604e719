"""The link split audit by blocks, on either engine: proves from the files the link split wrote
(gnnpipe/splitting/link_split.py) that no phase can see what it must not, with no process
holding all edges.

The held-out edge type ``E`` and its reverse ``R`` are projected together onto homogeneous ids
(``graph.offsets()``), where an ``E`` edge ``a -> p`` and an ``R`` edge ``p -> a`` are the same
unordered pair: so a val/test pair kept in a phase's graph in *either* edge type fails
``message_<phase>_hides_...``. A typed graph names the held-out types in every check
(``positives_disjoint[author__writes__paper+paper__rev_writes__author]``) and adds: negatives
are nodes of ``E``'s target type, and every other edge type is a subset of the prepared graph.

Pair questions (which roles share a pair, which graph pair is in no role, which held-out pair a
phase's message graph holds in either direction) meet by the pair: every task routes records
(unordered pair key, tag bits) to buckets by a hash of the key, and ``reduce_bucket`` ORs the
tags of each pair and counts. Records come from the sorted positive buckets (a bit per role)
and from the row blocks of the prepared relations (``FULL``) and of each phase's message graph
(a bit per phase). The row blocks also check that each message graph's rows are rows of the
prepared graph; the positive buckets count self-loops, positives that are not edges, and check
their negatives (shape, range, self-loops, true edges: looked up in the mapped CSRs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnpipe.data.graph import Graph, edge_type_name
from gnnpipe.io.blocks import load_routed, open_memmap, save_routed
from gnnpipe.runtime.engine import run_blocks
from gnnpipe.runtime.rng import mix
from gnnpipe.splitting.audit import within_rows
from gnnpipe.splitting.split import block_edges
from gnnpipe.splitting.link_split import (EDGE_ROLES, HELD_OUT, PHASES, Held, LinkBlocks,
                                          bucket_bits, bucket_of, csr_contains, refused)

# Held-out roles whose pairs each phase's message graph must not hold, in either direction.
LINK_HIDDEN = {"train": ("val", "test"), "val": ("val", "test"), "test": ("test",)}
ROLE_BIT = {role: 1 << i for i, role in enumerate(EDGE_ROLES)}
FULL = 1 << 4
PHASE_BIT = {phase: 1 << (5 + i) for i, phase in enumerate(PHASES)}
ROUTE_STEP = 0x5EED  # the hash that spreads pairs over the audit's buckets

Found = tuple[int, int]  # (how many pairs, the smallest pair key; -1 when none)
# per phase: (the targets' shape, positives, all in range, self-loops, true edges)
NegativeSums = tuple[tuple[int, ...], int, bool, int, int]


def found(keys: np.ndarray) -> Found:
    return (int(keys.size), int(keys.min()) if keys.size else -1)


def _describe(pairs: Found, n: int) -> str:
    count, first = pairs
    return f"{count} pairs (first: {first // n}-{first % n})" if count else "none"


@dataclass
class LinkSums:
    """What the link audit's checks read, summed over the blocks. Per role (EDGE_ROLES):
    ``sizes`` positives, ``loops`` self-loops among them, ``outside`` not edges of the graph;
    ``overlap`` "first&second" -> shared pairs; ``mismatch`` pairs in exactly one of message
    and train_supervision; ``lost`` graph pairs in no role; per phase ``message_edges``,
    ``within`` (its edges are graph edges), ``leaked`` hidden role -> pairs; per val/test
    phase ``negatives``: (their shape, positives, in range, self-loops, true edges), and
    ``hard`` alike for the hard negatives (None: none drawn)."""

    sizes: dict[str, int]
    loops: dict[str, int]
    outside: dict[str, int]
    overlap: dict[str, Found]
    mismatch: int
    lost: Found
    message_edges: dict[str, int]
    within: dict[str, bool]
    leaked: dict[str, dict[str, Found]]
    negatives: dict[str, NegativeSums]
    hard: dict[str, NegativeSums] | None = None


def link_hidden(phase: str, disjoint: bool) -> tuple[str, ...]:
    """The roles whose pairs the ``phase`` message graph must not hold, either direction."""
    return LINK_HIDDEN[phase] + (("train_supervision",) if phase == "train" and disjoint else ())


def link_compared(disjoint: bool) -> list[tuple[str, str]]:
    """The role pairs ``positives_disjoint`` compares, in report order."""
    roles = (("train_supervision", "message") if disjoint else ("train_supervision",)) \
        + HELD_OUT
    return [(first, second) for i, first in enumerate(roles) for second in roles[i + 1:]]


def _or_by_key(keys: np.ndarray, tags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct int64 ``keys`` (n,) ascending and the OR of each one's ``tags`` (n,)."""
    order = np.argsort(keys, kind="stable")
    keys, tags = keys[order], tags[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else keys[:0]
    return keys[starts], np.bitwise_or.reduceat(tags, starts) if starts.size else tags[:0]


def _route(keys: np.ndarray, tags: np.ndarray, bits: int, folder: str, name: str) -> None:
    """Records (key, tag) routed to the audit buckets in ``<folder>/audit/``, one per key."""
    keys, tags = _or_by_key(keys, tags)
    save_routed(Path(folder) / "audit", name, np.stack([keys, tags.astype(np.int64)], axis=1),
                bucket_of(mix(0, ROUTE_STEP, keys), bits), 1 << bits)


def _homogeneous(held: Held, rel: int, src: np.ndarray, dst: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Relation ``rel``'s type-local ends over homogeneous ids (E: E[0] -> E[2]; R: back)."""
    s_off, d_off = held.offsets
    return (src + s_off, dst + d_off) if rel == 0 else (src + d_off, dst + s_off)


def _pair_records(held: Held, rel: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Unordered homogeneous pair keys ``min * N + max`` of the non-loop edges."""
    u, v = _homogeneous(held, rel, src, dst)
    proper = u != v
    return np.minimum(u, v)[proper] * held.num_nodes + np.maximum(u, v)[proper]


def graph_block(block: int, rel: int, local: int, lo: int, hi: int, held: Held,
                message: dict[str, tuple[tuple[str, str], ...]], bits: int,
                folder: str) -> dict[str, bool]:
    """Rows ``[lo, hi)`` of relation ``rel``: pair records of the graph and of every phase's
    message graph; per phase whether its rows are rows of the graph."""
    rels = held.open()
    src, dst = block_edges(*rels[rel], lo, hi)
    n_src = held.num_src if rel == 0 else held.num_dst
    keys = [_pair_records(held, rel, src, dst)]
    tags = [np.full(keys[0].size, FULL, dtype=np.int64)]
    within = {}
    for phase in PHASES:
        mapped = tuple(open_memmap(Path(f)) for f in message[phase][rel])
        m_src, m_dst = block_edges(*mapped, lo, hi)
        within[phase] = within_rows(m_src, m_dst, src, dst, lo, n_src)
        keys.append(_pair_records(held, rel, m_src, m_dst))
        tags.append(np.full(keys[-1].size, PHASE_BIT[phase], dtype=np.int64))
    _route(np.concatenate(keys), np.concatenate(tags), bits, folder, f"g{block:06d}")
    return within


@dataclass(frozen=True)
class PositiveSums:
    """One sorted bucket of a role: positives, self-loops, positives that are not edges, and
    (val / test) per negatives file "n" / "h": its ``NegativeSums`` entries (shape, in range,
    self-loops, true edges) and whether every target is of E's target type."""

    positives: int
    loops: int
    outside: int
    negatives: dict[str, tuple[tuple[int, ...], bool, int, int, bool]]


def _negative_bucket(held: Held, rels, heads: np.ndarray, targets: np.ndarray
                     ) -> tuple[tuple[int, ...], bool, int, int, bool]:
    """(shape, all in range, self-loops, true edges, all of E's target type) of ``targets``
    (m, K) type-local, the negatives of ``heads`` (m,)."""
    shape = tuple(targets.shape)
    if targets.ndim != 2:
        return shape, False, 0, 0, False
    a, t = np.repeat(heads, targets.shape[1]), targets.reshape(-1)
    h_a, h_t = _homogeneous(held, 0, a, t)
    typed = (t >= 0) & (t < held.num_dst)
    loops = h_a == h_t
    check = typed & ~loops
    edge = refused(held, rels, a[check], t[check])  # a pair of the graph, either direction
    return (shape, bool(((h_t >= 0) & (h_t < held.num_nodes)).all()), int(loops.sum()),
            int(edge.sum()), bool(typed.all()))


def positive_bucket(role: str, bucket: int, source: str, held: Held, names: tuple[str, ...],
                    bits: int, folder: str) -> PositiveSums:
    """The positives of ``role`` in ``<source>/b<bucket>.npy`` (and their negatives files of
    ``names``)."""
    rels = held.open()
    pairs = np.load(Path(source) / f"b{bucket:06d}.npy")
    a, p = pairs[:, 0], pairs[:, 1]
    h_a, h_p = _homogeneous(held, 0, a, p)
    _route(np.minimum(h_a, h_p) * held.num_nodes + np.maximum(h_a, h_p),
           np.full(a.size, ROLE_BIT[role], dtype=np.int64), bits, folder,
           f"p_{role}_{bucket:06d}")
    edge = csr_contains(*rels[0], p, a)
    if held.one_type and len(rels) == 2:  # one type: an R edge a -> p is the same projection
        edge |= csr_contains(*rels[1], p, a)
    negatives = {}
    if role in HELD_OUT:
        negatives = {name: _negative_bucket(held, rels, a, np.load(Path(source) /
                                                                   f"{name}{bucket:06d}.npy"))
                     for name in names}
    return PositiveSums(int(a.size), int((h_a == h_p).sum()), int((~edge).sum()), negatives)


def reduce_bucket(bucket: int, folder: str, disjoint: bool) -> dict:
    """One audit bucket's pairs: (count, smallest key) per overlap of two roles, per lost
    pair, per (phase, hidden role) leak; pairs in exactly one of message / supervision."""
    records = load_routed(Path(folder) / "audit", bucket, np.int64, 2)
    keys, tags = _or_by_key(records[:, 0], records[:, 1])

    def has(bits: int) -> np.ndarray:
        return (tags & bits) == bits

    any_role = (tags & sum(ROLE_BIT.values())) != 0
    return {
        "overlap": {f"{a}&{b}": found(keys[has(ROLE_BIT[a] | ROLE_BIT[b])])
                    for a, b in link_compared(disjoint)},
        "lost": found(keys[has(FULL) & ~any_role]),
        "leaked": {phase: {role: found(keys[has(PHASE_BIT[phase] | ROLE_BIT[role])])
                           for role in link_hidden(phase, disjoint)} for phase in PHASES},
        "mismatch": int((has(ROLE_BIT["message"]) != has(ROLE_BIT["train_supervision"])).sum()),
    }


def _merge(found_: list[Found]) -> Found:
    hits = [first for count, first in found_ if count]
    return sum(count for count, _ in found_), min(hits) if hits else -1


def _negative_sums(parts: list[PositiveSums], name: str) -> tuple[NegativeSums, bool]:
    """A phase's ``NegativeSums`` of the negatives file ``name`` over its buckets, and whether
    all its targets are of E's target type."""
    sums = [part.negatives[name] for part in parts]
    shapes = [shape for shape, *_ in sums]
    shape = ((sum(s[0] for s in shapes), shapes[0][1]) if all(len(s) == 2 for s in shapes)
             and len({s[1] for s in shapes}) == 1 else (-1,))
    return ((shape, sum(p.positives for p in parts), all(s[1] for s in sums),
             sum(s[2] for s in sums), sum(s[3] for s in sums)), all(s[4] for s in sums))


def audit_links(client, graph: Graph, split: LinkBlocks, hard: bool = False) -> dict:
    """Audit report (JSON-ready) of the link split ``split`` of ``graph``: ``report["passed"]``
    False if any check failed; ``hard``: the split drew hard negatives (``h<k>.npy``), checked
    like the random ones. On ``client`` (None: in this process), by the split's block sizes."""
    held, scratch = split.held, split.scratch
    edges = sum(int(indptr[-1]) for indptr, _ in held.open())
    bits = bucket_bits(2 * 5 * edges, split.sizes.edges)  # the graph's, 3 phases', positives
    message = {p: tuple((str(i), str(j)) for i, j in files) for p, files in split.message.items()}
    numbered = [(i, rel, j, lo, hi) for i, (rel, j, lo, hi) in enumerate(
        (rel, j, lo, hi) for rel, bounds in enumerate(split.blocks)
        for j, (lo, hi) in enumerate(bounds))]
    within = run_blocks(client, graph_block, numbered, held=held, message=message, bits=bits,
                        folder=str(scratch))
    names = ("n", "h") if hard else ("n",)
    calls = [(role, k, str(split.positives[role][0])) for role in EDGE_ROLES
             for k in range(split.positives[role][1])]
    parts = run_blocks(client, positive_bucket, calls, held=held, names=names, bits=bits,
                       folder=str(scratch))
    reduced = run_blocks(client, reduce_bucket, [(k,) for k in range(1 << bits)],
                         folder=str(scratch), disjoint=split.disjoint)
    per_role = {role: [f for (r, _, _), f in zip(calls, parts) if r == role]
                for role in EDGE_ROLES}
    drawn = {name: {phase: _negative_sums(per_role[phase], name) for phase in HELD_OUT}
             for name in names}
    sums = LinkSums(
        sizes={role: sum(f.positives for f in per_role[role]) for role in EDGE_ROLES},
        loops={role: sum(f.loops for f in per_role[role]) for role in EDGE_ROLES},
        outside={role: sum(f.outside for f in per_role[role]) for role in EDGE_ROLES},
        overlap={name: _merge([r["overlap"][name] for r in reduced])
                 for name in reduced[0]["overlap"]},
        mismatch=sum(r["mismatch"] for r in reduced),
        lost=_merge([r["lost"] for r in reduced]),
        message_edges={p: sum(int(open_memmap(Path(f[0]))[-1]) for f in split.message[p])
                       for p in PHASES},
        within={p: all(w[p] for w in within) for p in PHASES},
        leaked={p: {role: _merge([r["leaked"][p][role] for r in reduced])
                    for role in reduced[0]["leaked"][p]} for p in PHASES},
        negatives={p: sums for p, (sums, _) in drawn["n"].items()},
        hard={p: sums for p, (sums, _) in drawn["h"].items()} if hard else None)
    report = link_report(sums, held.num_nodes, disjoint=split.disjoint)
    e, r = held.edge_type, held.reverse
    names_ = {"edge_type": edge_type_name(e),
              "reverse_edge_type": None if r is None else edge_type_name(r)}
    if held.homogeneous:
        return {**report, **names_}
    held_names = "+".join(edge_type_name(t) for t in held.relations)
    for check in report["checks"]:  # the held-out edge types, together
        check["check"] = f"{check['check']}[{held_names}]"
    for name, label in (("n", "negatives"), ("h", "hard_negatives")):
        for phase, (_, typed) in drawn.get(name, {}).items():
            report["checks"].append({"check": f"{label}_{phase}_are_{e[2]}_nodes",
                                     "passed": typed,
                                     "detail": f"targets in [0, {held.num_dst}) of {e[2]}"})
    graphs = split.message_graphs(graph)
    for phase in PHASES:  # every other edge type: the prepared CSR itself (link_split.py)
        report["checks"] += [{"check": f"message_{phase}[{edge_type_name(t)}]_within_graph",
                              "passed": graphs[phase][t] is graph.csr[t],
                              "detail": "every message edge is an edge of the prepared graph"}
                             for t in graph.edge_types if t not in held.relations]
    report.update(passed=all(c["passed"] for c in report["checks"]), **names_)
    return report


def link_report(sums: LinkSums, n: int, *, disjoint: bool) -> dict:
    """The link audit report (JSON-ready) from its sums over a graph of ``n`` nodes."""
    checks: list[dict] = []

    def check(name: str, passed: bool, detail: str) -> None:
        checks.append({"check": name, "passed": bool(passed), "detail": detail})

    check("positives_not_self_loops", not any(sums.loops.values()),
          f"self-loops per role: {sums.loops}")
    check("positives_are_graph_edges", not any(sums.outside.values()),
          f"positives that are not edges of the prepared graph: {sums.outside}")
    overlap = {name: _describe(pair, n) for name, pair in sums.overlap.items() if pair[0]}
    check("positives_disjoint", not overlap,
          f"shared pairs: {overlap}" if overlap else "supervision, val and test share no pair"
          + (" (nor message and supervision)" if disjoint else ""))
    if not disjoint:
        check("supervision_is_message", sums.mismatch == 0, "without disjoint_train_ratio every "
              "training edge both passes messages and supervises")
    check("every_edge_assigned", sums.lost[0] == 0, f"edges in no role: {_describe(sums.lost, n)}")
    for phase in PHASES:
        check(f"message_{phase}_within_graph", sums.within[phase],
              "every message edge is an edge of the prepared graph")
        hidden = link_hidden(phase, disjoint)
        leaked = {role: _describe(pair, n) for role, pair in sums.leaked[phase].items()
                  if pair[0]}
        check(f"message_{phase}_hides_{'_'.join(hidden)}", not leaked,
              f"leaked (either direction): {leaked}" if leaked else
              f"no {'/'.join(hidden)} pair in either direction")
    report = {
        "task": "link",
        "passed": False,
        "checks": checks,
        "sizes": sums.sizes,
        "message_edges": sums.message_edges,
        "negatives": _negative_checks("negatives", sums.negatives, n, check),
        "disjoint_supervision": disjoint,
    }
    if sums.hard is not None:  # only where the split drew them: other reports stay as they were
        report["hard_negatives"] = _negative_checks("hard_negatives", sums.hard, n, check)
    report["passed"] = all(c["passed"] for c in checks)
    return report


def _negative_checks(name: str, sums: dict[str, NegativeSums], n: int, check) -> dict:
    """Checks ``<name>_<phase>_...`` from each held-out phase's ``NegativeSums``: one row per
    positive, in range, no self-loop, no true edge. Returns ``{phase: {"per_positive",
    "count"}}``."""
    counts = {}
    for phase in HELD_OUT:
        shape, positives, in_range, loops, hits = sums[phase]
        shape_ok = len(shape) == 2 and shape[0] == positives
        check(f"{name}_{phase}_one_row_per_positive", shape_ok,
              f"{shape} for {positives} positives")
        if not shape_ok:
            continue
        counts[phase] = {"per_positive": shape[1], "count": shape[0] * shape[1]}
        check(f"{name}_{phase}_in_range", in_range, f"targets in [0, {n})")
        check(f"{name}_{phase}_no_self_loops", not loops, f"{loops} negatives are self-loops")
        check(f"{name}_{phase}_not_edges", not hits,
              f"{hits} negatives are true edges of the graph (any split, either direction)")
    return counts
