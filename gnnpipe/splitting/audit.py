"""The split audit: proves from the artifacts themselves that no phase can see what it must not.

Every check is recomputed from the roles and message graphs as written, so a bug in the split
code (or a hand-edited artifact) is caught here rather than trusted. Written once, for
``Graph``; a homogeneous graph is its one-type case. Both kinds give one
report layout (node task: ``target``, ``cross_split_edges_relation``, ``message_edges`` per
phase and edge type; link task: ``edge_type``, ``reverse_edge_type``); a graph of one edge type
keeps the plain check names (``message_train_sees_only_train``), where a graph of several types
names the edge type (``message_train[author__writes__paper]_sees_only_train``).

* **Node task**: sizes, class balance, labels and cross-split edges of the target type over its
  own relation; for every edge type and phase: its message edges are edges of the prepared
  graph and (inductive) none has an endpoint of the target type outside the roles the phase may
  see (unused unlabelled target nodes are visible to every phase).
* **Link task**: gnnpipe/splitting/link_audit.py (by blocks); ``raise_if_failed`` here.

Unlabelled nodes (``y == UNLABELLED``) must be "unused" (check ``splits_labelled_only``); an
unused unlabelled node is a message carrier that every phase may see, inductive train and val
graphs included (``gnnpipe.splitting.split``). ``label_coverage`` counts labelled and unlabelled
nodes overall and per role.

Strategy ``time``: check ``time_respecting`` fails if a train-phase message edge touches a node
(labelled or not) later than the train cut (the latest train timestamp), or a val-phase edge one
later than the val cut. Only ``split.node.mode: transductive`` chosen explicitly waives it: the
check is then recorded as failed but ``waived`` and the report carries a warning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnpipe.data.graph import ROLES, UNLABELLED, EdgeType, edge_type_name
from gnnpipe.io.csr_blocks import row_ranges, rows_by_edges
from gnnpipe.runtime.engine import run_blocks
from gnnpipe.splitting.hash_assign import PHASES, UNUSED
from gnnpipe.splitting import split
from gnnpipe.splitting.split import Handle, Source, block_edges, open_array

# Nodes whose edges each phase's message graph may contain, by mode (plus, always, the unused
# unlabelled nodes: see ``audit_rows``).
VISIBLE_ROLES = {
    "transductive": {"train": None, "val": None, "test": None},  # None: the whole graph
    "inductive": {"train": ("train",), "val": ("train", "val"), "test": None},
    "time": {"train": ("train",), "val": ("train", "val"), "test": None},  # + time_respecting
}
# The roles whose latest timestamp is each phase's cut (strategy time).
TIME_CUT_ROLES = {"train": ("train",), "val": ("train", "val")}


class LeakageError(ValueError):
    """The split audit found information a phase must not see."""


@dataclass(frozen=True)
class RoleSums:
    """One block of target rows: nodes per role code, labelled / unlabelled, int64 (4, 2);
    labelled nodes per phase and class int64 (3, C); the first unlabelled node in a phase (-1:
    none); per phase (min, max) of its nodes' times (None: none there, or no times)."""

    per_role: np.ndarray
    per_class: np.ndarray
    first_unlabelled: int
    spans: list


def audit_roles(lo: int, hi: int, source: Source, roles: Handle, timed: bool) -> RoleSums:
    """The role sums of target rows ``[lo, hi)``."""
    code = np.asarray(open_array(roles)[lo:hi]).astype(np.int64)
    y = np.asarray(open_array(source.y)[lo:hi])
    labelled = y != UNLABELLED
    per_role = np.stack([np.bincount(code[labelled], minlength=UNUSED + 1),
                         np.bincount(code[~labelled], minlength=UNUSED + 1)], axis=1)
    per_class = np.stack([np.bincount(y[(code == p) & labelled], minlength=source.num_classes)
                          for p in range(len(PHASES))])
    in_split = np.flatnonzero(~labelled & (code < UNUSED))
    spans = [None] * len(PHASES)
    if timed:
        t = np.asarray(open_array(source.time)[lo:hi])
        spans = [(t[code == p].min(), t[code == p].max()) if (code == p).any() else None
                 for p in range(len(PHASES))]
    return RoleSums(per_role, per_class, int(in_split[0]) + lo if in_split.size else -1, spans)


@dataclass(frozen=True)
class EdgeSums:
    """One row block of one edge type, per phase (PHASES order): its message edges, whether
    they are edges of the prepared graph, (modes inductive / time) those touching a target node
    the phase may not see and those nodes (a leak's: only a failing audit has any); per time
    cut phase (train, val) the (late edges, edges touching the target, smallest late node or
    -1); the own relation's edges per ``min * 4 + max`` of their ends' codes (16,)."""

    edges: list[int]
    within: list[bool]
    leaking: list[int]
    bad_nodes: list[np.ndarray]
    late: list[tuple[int, int, int]]
    cross: np.ndarray | None


def within_rows(src: np.ndarray, dst: np.ndarray, full_src: np.ndarray, full_dst: np.ndarray,
                 lo: int, num_src: int) -> bool:
    """Every (src, dst) of rows from ``lo`` is an edge (full_src, full_dst) of those rows."""
    if src.size == 0:
        return True
    keys, full = (dst - lo) * num_src + src, (full_dst - lo) * num_src + full_src
    if full.size == 0:
        return False
    if (np.diff(full) < 0).any():  # columns not sorted within rows (not how gnnpipe writes them)
        full = np.sort(full)
    pos = np.minimum(np.searchsorted(full, keys), full.size - 1)
    return bool((full[pos] == keys).all())


def audit_rows(lo: int, hi: int, edge_type: EdgeType, source: Source, roles: Handle,
               message: dict[str, dict[EdgeType, tuple[Handle, Handle] | None]], mode: str,
               cuts: tuple[float, float] | None) -> EdgeSums:
    """The audit sums of rows ``[lo, hi)`` of ``edge_type``; ``cuts``: the train and val cuts
    of a time split (None: no time check)."""
    role_codes, y = open_array(roles), open_array(source.y)
    times = None if cuts is None else open_array(source.time)
    full_src, full_dst = block_edges(*map(open_array, source.csr[edge_type]), lo, hi)
    s, _, d = edge_type
    target_ends = [i for i, t in enumerate((s, d)) if t == source.target]
    cross = None
    if edge_type == source.own:
        a = np.asarray(role_codes[full_src]).astype(np.int64)
        b = np.asarray(role_codes[full_dst]).astype(np.int64)
        cross = np.bincount(np.minimum(a, b) * 4 + np.maximum(a, b), minlength=16)
    sums = EdgeSums([], [], [], [], [], cross)
    for phase in PHASES:
        files = message[phase][edge_type]
        src, dst = (full_src, full_dst) if files is None else block_edges(
            *map(open_array, files), lo, hi)
        sums.edges.append(int(src.size))
        sums.within.append(files is None or within_rows(src, dst, full_src, full_dst, lo,
                                                         source.sizes[s]))
        ends = [(src, dst)[i] for i in target_ends]
        allowed = VISIBLE_ROLES[mode][phase]
        if allowed is not None and ends:
            nodes = np.concatenate(ends)
            unique, inverse = np.unique(nodes, return_inverse=True)  # each end read once
            code = np.asarray(role_codes[unique])
            # the allowed roles, plus the unused unlabelled nodes (carriers of every phase)
            seen = np.isin(code, [ROLES.index(r) for r in allowed]) | (
                (np.asarray(y[unique]) == UNLABELLED) & (code == UNUSED))
            hidden = ~seen[inverse].reshape(len(ends), -1)
            leak = hidden.any(axis=0)
            sums.leaking.append(int(leak.sum()))
            sums.bad_nodes.append(np.unique(nodes[hidden.reshape(-1) & np.tile(leak, len(ends))]))
        else:
            sums.leaking.append(0)
            sums.bad_nodes.append(np.zeros(0, dtype=np.int64))
        if cuts is not None and phase in TIME_CUT_ROLES and ends:
            cut = cuts[list(TIME_CUT_ROLES).index(phase)]
            late = [np.asarray(times[e], dtype=np.float64) > cut for e in ends]
            bad = np.logical_or.reduce(late)
            hit = np.concatenate([e[bad][k[bad]] for e, k in zip(ends, late)])
            sums.late.append((int(bad.sum()), int(bad.size), int(hit.min()) if hit.size else -1))
        elif cuts is not None and phase in TIME_CUT_ROLES:
            sums.late.append((0, 0, -1))
    return sums


def audit_nodes(client, source: Source, roles: Handle,
                message: dict[str, dict[EdgeType, tuple[Handle, Handle] | None]], mode: str, *,
                timed: bool = False, separated: bool = False, future_visible: bool = False) -> dict:
    """Audit report (JSON-ready) of the node split ``roles`` (int8 codes (N_target,)) and its
    message graphs ``message`` (phase -> edge type -> (indptr, indices), None: the prepared
    CSR) of ``source``'s graph, by blocks on ``client`` (None: in this process).
    ``report["passed"]`` is False if any check failed (a ``waived`` check does not count; it is
    listed in ``report["warnings"]``). ``timed`` (strategy time, with node times of the target
    type): every train node must be no later than every val node, and val no later than test,
    and the message graphs must respect time (``future_visible`` waives that). ``separated``
    (strategy cluster by components): no edge of the target's own relation may join two
    different splits."""
    sizes = split.SIZES  # read here: tests set smaller blocks
    n = source.num_nodes
    times = timed and source.time is not None
    blocks = row_ranges(n, sizes.rows)
    found = run_blocks(client, audit_roles, blocks, source=source, roles=roles, timed=times)
    per_role = sum(b.per_role for b in found)  # (4, 2): nodes per code, labelled / unlabelled
    counts = {role: int(per_role[i].sum()) for i, role in enumerate(PHASES)}
    empty = [role for role in PHASES if counts[role] == 0]
    first = min([b.first_unlabelled for b in found if b.first_unlabelled >= 0], default=None)

    def role_at(node: int) -> str:
        return ROLES[int(open_array(roles)[node])]

    unlabelled = {role: int(per_role[i, 1]) for i, role in enumerate(PHASES)}
    # One role column makes overlap impossible; the check guards that the column is the truth.
    checks = [{"check": "splits_non_empty", "passed": not empty,
               "detail": f"empty: {empty}" if empty else f"sizes {counts}"},
              {"check": "splits_disjoint", "passed": sum(counts.values())
               + int(per_role[UNUSED].sum()) == n, "detail": "every node has exactly one role"},
              {"check": "splits_labelled_only", "passed": first is None, "detail":
               f"unlabelled nodes in splits: {unlabelled} (first: node {first}, {role_at(first)})"
               if first is not None else f"every train/val/test node is labelled; "
               f"{int(per_role[:, 1].sum())} unlabelled nodes are unused"}]
    spans, cuts = {}, None
    if times:
        for p, role in enumerate(PHASES):
            held = [b.spans[p] for b in found if b.spans[p] is not None]
            if held:
                spans[role] = (np.min([s[0] for s in held]), np.max([s[1] for s in held]))
        cuts = tuple(float(np.max([spans[r][1] for r in cut if r in spans] or [np.nan]))
                     for cut in TIME_CUT_ROLES.values())
    calls = [(lo, hi, e) for e in source.edge_types
             for lo, hi in rows_by_edges(open_array(source.csr[e][0]), sizes.edges, sizes.rows)]
    rows = run_blocks(client, audit_rows, calls, source=source, roles=roles, message=message,
                      mode=mode, cuts=cuts)
    by_type = {e: [r for (_, _, t), r in zip(calls, rows) if t == e] for e in source.edge_types}
    homogeneous = len(source.sizes) == 1 and len(source.edge_types) == 1
    for i, phase in enumerate(PHASES):
        allowed = VISIBLE_ROLES[mode][phase]
        for e, found_e in by_type.items():
            # a graph of several types names the edge type in its checks
            name = f"message_{phase}" + ("" if homogeneous else f"[{edge_type_name(e)}]")
            checks.append({"check": f"{name}_within_graph",
                           "passed": all(r.within[i] for r in found_e),
                           "detail": "every message edge is an edge of the prepared graph"})
            if allowed is None or source.target not in (e[0], e[2]):
                continue
            leaking = sum(r.leaking[i] for r in found_e)
            detail = f"{leaking} edges touch {source.target} nodes of other splits"
            if homogeneous:  # how many nodes, and the smallest
                bad = np.unique(np.concatenate([r.bad_nodes[i] for r in found_e] or [[]])
                                .astype(np.int64))
                detail = f"{leaking} edges touch {bad.size} nodes of other splits" + (
                    f" (first: node {int(bad[0])}, {role_at(int(bad[0]))})" if bad.size else "")
            checks.append({"check": f"{name}_sees_only_{'_'.join(allowed)}",
                           "passed": leaking == 0, "detail": detail})
    # own-relation edges per min * 4 + max of their ends' phase codes (unused: 3)
    crossed = sum([r.cross for r in rows if r.cross is not None], np.zeros(16, dtype=np.int64))
    cross = {f"{PHASES[i]}-{PHASES[j]}": int(crossed[i * 4 + j])
             for i in range(len(PHASES)) for j in range(i + 1, len(PHASES))}
    if separated:
        joined = {pair: count for pair, count in cross.items() if count}
        checks.append({"check": "splits_not_adjacent", "passed": not joined,
                       "detail": f"edges between splits: {joined}" if joined
                       else "no edge joins two splits"})
    if times:
        ok = all(spans[a][1] <= spans[b][0] for a, b in (("train", "val"), ("val", "test"))
                 if a in spans and b in spans)
        checks.append({"check": "splits_in_time_order", "passed": bool(ok), "detail": ", ".join(
            f"{role} [{float(lo):.6g}, {float(hi):.6g}]" for role, (lo, hi) in spans.items())})
        checks.append(_time_respecting(by_type, cuts, roles, source, future_visible))
    per_class = sum(b.per_class for b in found)
    report = node_report(
        source, mode, checks, counts, {role: per_class[i] for i, role in enumerate(PHASES)},
        per_role, cross, {p: {e: sum(r.edges[i] for r in found_e)
                              for e, found_e in by_type.items()} for i, p in enumerate(PHASES)})
    if times:  # time splits only, so the other splits' reports stay as they were
        report["warnings"] = [f"{c['check']}: {c['detail']}" for c in checks if c.get("waived")]
    return report


def _time_respecting(by_type: dict[EdgeType, list[EdgeSums]], cuts: tuple[float, float],
                     roles: Handle, source: Source, future_visible: bool) -> dict:
    """The ``time_respecting`` check of a time split from the edge sums of every edge type: per
    phase (train, val), its message edges that touch a target node later than its cut (the
    latest timestamp of the train (train and val) nodes), with the smallest late node of the
    first edge type holding one; ``future_visible`` (the user chose transductive) marks a
    failure ``waived``."""
    parts, first, leaked = [], None, 0
    for k, phase in enumerate(TIME_CUT_ROLES):
        count = total = 0
        for e, found in by_type.items():
            if source.target not in (e[0], e[2]):
                continue
            count += sum(r.late[k][0] for r in found)
            total += sum(r.late[k][1] for r in found)
            hits = [r.late[k][2] for r in found if r.late[k][2] >= 0]
            if hits and first is None:
                node = min(hits)
                first = (f" (first: node {node}, {ROLES[int(open_array(roles)[node])]}, "
                         f"t={float(open_array(source.time)[node]):.6g})")
        parts.append(f"{phase} phase: {count} of {total} message edges touch a node later "
                     f"than the {phase} cut t={cuts[k]:.6g}")
        leaked += count
    entry = {"check": "time_respecting", "passed": leaked == 0,
             "detail": "; ".join(parts) + (first or "")}
    if leaked and future_visible:
        entry["waived"] = True
        entry["detail"] += ("; waived: split.node.mode=transductive was chosen explicitly, so "
                            "training aggregates over later nodes")
    elif leaked:
        entry["detail"] += ("; use split.node.mode: auto (or time) for time-respecting message "
                            "graphs, or transductive explicitly to accept the leak")
    return entry


def node_report(source: Source, mode: str, checks: list[dict], counts: dict[str, int],
                per_class: dict[str, np.ndarray], per_role: np.ndarray, cross: dict[str, int],
                message_edges: dict[str, dict[EdgeType, int]]) -> dict:
    """The node audit report from its checks and sums: nodes per phase, labelled nodes per phase
    and class (C,), labelled / unlabelled nodes per role code (4, 2), ``cross_split_edges``,
    message edges per phase and edge type."""
    labelled, n = int(per_role[:, 0].sum()), source.num_nodes
    balance = {}
    for role in PHASES:
        total = max(int(per_class[role].sum()), 1)
        balance[role] = {"count": per_class[role].tolist(),
                         "fraction": [round(c / total, 4) for c in per_class[role].tolist()]}
    missing = {role: [c for c, k in enumerate(balance[role]["count"]) if k == 0] for role in PHASES}
    own = source.own
    return {
        "task": "node",
        "mode": mode,
        "passed": all(c["passed"] or c.get("waived", False) for c in checks),
        "checks": checks,
        "sizes": counts,
        "class_balance": balance,
        "classes_missing": {role: cls for role, cls in missing.items() if cls},
        "label_coverage": {"labelled": labelled, "unlabelled": n - labelled,
                           "labelled_fraction": round(labelled / max(n, 1), 6),
                           "per_role": {role: {"labelled": a, "unlabelled": b}
                                        for role, (a, b) in zip(ROLES, per_role.tolist())}},
        "structure_shared_across_phases": mode == "transductive",
        "cross_split_edges": cross,
        "target": source.target,
        "cross_split_edges_relation": None if own is None else edge_type_name(own),
        "message_edges": {p: {edge_type_name(e): count for e, count in edges.items()}
                          for p, edges in message_edges.items()},
    }


def raise_if_failed(report: dict) -> None:
    failed = [c for c in report["checks"] if not (c["passed"] or c.get("waived", False))]
    if failed:
        lines = "; ".join(f"{c['check']}: {c['detail']}" for c in failed)
        raise LeakageError(f"split audit failed ({len(failed)} checks): {lines}")
