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
* **Link task**: the held-out edge type ``E`` and its reverse ``R`` projected together onto
  homogeneous ids (``graph.offsets()``), where an ``E`` edge ``a -> p`` and an ``R`` edge
  ``p -> a`` are the same unordered pair: so a val/test pair kept in a phase's graph in *either*
  edge type fails ``message_<phase>_hides_...``. Typed graphs add: negatives are nodes of
  ``E``'s target type, and every other edge type is a subset of the prepared graph.

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
import torch

from gnnpipe.data.graph import ROLES, UNLABELLED, Csr, EdgeType, Graph, edge_type_name
from gnnpipe.data.edges import edge_pairs, homogeneous_csr, sorted_unique
from gnnpipe.splitting.split import MessageGraphs

PHASES = ("train", "val", "test")
HELD_OUT_ROLES = ("val", "test")

# Nodes whose edges each phase's message graph may contain, by mode (plus, always, the unused
# unlabelled nodes: see ``visible_nodes``).
VISIBLE_ROLES = {
    "transductive": {"train": None, "val": None, "test": None},  # None: the whole graph
    "inductive": {"train": ("train",), "val": ("train", "val"), "test": None},
    "time": {"train": ("train",), "val": ("train", "val"), "test": None},  # + time_respecting
}
# The roles whose latest timestamp is each phase's cut (strategy time).
TIME_CUT_ROLES = {"train": ("train",), "val": ("train", "val")}


class LeakageError(ValueError):
    """The split audit found information a phase must not see."""


def _is_subset(sub: Csr, full: Csr) -> bool:
    keys, full_keys = sub.edge_keys(), full.edge_keys()
    pos = torch.searchsorted(full_keys, keys)
    pos = pos.clamp(max=max(full_keys.numel() - 1, 0))
    return bool(keys.numel() == 0 or (full_keys.numel() and (full_keys[pos] == keys).all()))


def visible_nodes(roles: np.ndarray, labelled: np.ndarray, allowed: tuple[str, ...]) -> np.ndarray:
    """bool (N,): nodes whose edges a phase that may see the ``allowed`` roles may hold, i.e.
    those roles plus the unused unlabelled nodes (message carriers of every phase)."""
    return np.isin(roles, allowed) | (~labelled & (roles == "unused"))


def label_coverage(roles: np.ndarray, y: np.ndarray) -> dict:
    """Labelled / unlabelled nodes overall and per role (JSON-ready)."""
    labelled = y != UNLABELLED
    return coverage_entry({role: (int((labelled & (roles == role)).sum()),
                                  int((~labelled & (roles == role)).sum())) for role in ROLES},
                          int(labelled.sum()), int(y.size))


def coverage_entry(per_role: dict[str, tuple[int, int]], labelled: int, nodes: int) -> dict:
    """``label_coverage`` from (labelled, unlabelled) nodes per role, the labelled nodes and
    the nodes in all."""
    return {"labelled": labelled, "unlabelled": nodes - labelled,
            "labelled_fraction": round(labelled / max(nodes, 1), 6),
            "per_role": {role: {"labelled": a, "unlabelled": b} for role, (a, b) in
                         per_role.items()}}


def labelled_only_check(roles: np.ndarray, y: np.ndarray) -> dict:
    """The ``splits_labelled_only`` check: no unlabelled node is in train, val or test."""
    unlabelled = y == UNLABELLED
    first = np.flatnonzero(unlabelled & np.isin(roles, PHASES))
    return labelled_only_entry({role: int((unlabelled & (roles == role)).sum()) for role in PHASES},
                               (int(first[0]), roles[int(first[0])]) if first.size else None,
                               int(unlabelled.sum()))


def labelled_only_entry(bad: dict[str, int], first: tuple[int, str] | None,
                        unlabelled: int) -> dict:
    """``labelled_only_check`` from the unlabelled nodes per phase, the first of them (node,
    role) and the unlabelled nodes in all."""
    detail = (f"unlabelled nodes in splits: {bad} (first: node {first[0]}, {first[1]})" if first
              else f"every train/val/test node is labelled; {unlabelled} unlabelled nodes are "
                   "unused")
    return {"check": "splits_labelled_only", "passed": first is None, "detail": detail}


def time_respecting_check(target: str, roles: np.ndarray, timestamps: np.ndarray,
                          message_graphs: MessageGraphs, *, future_visible: bool = False) -> dict:
    """The ``time_respecting`` check of a time split.

    ``roles`` str (N_target,), ``timestamps`` (N_target,) of the ``target`` node type. Fails if
    a train-phase (val-phase) message edge of any edge type has an endpoint of the target type
    later than the train (val) cut, the latest timestamp of the train (train and val) nodes;
    ``future_visible`` (the user chose transductive) marks a failure ``waived``.
    """
    endpoints = {phase: [(csr.indices if s == target else None,
                          csr.targets() if d == target else None)
                         for (s, _, d), csr in message_graphs[phase].items()]
                 for phase in TIME_CUT_ROLES}
    t = torch.from_numpy(np.asarray(timestamps, dtype=np.float64))
    parts, leaked, first = [], 0, None
    for phase, cut_roles in TIME_CUT_ROLES.items():
        cut = t[torch.from_numpy(np.isin(roles, cut_roles))].max()
        late = t > cut
        count = total = 0
        for ends in endpoints[phase]:
            ends = [e for e in ends if e is not None]
            if not ends:
                continue
            bad = torch.zeros(ends[0].numel(), dtype=torch.bool)
            for e in ends:
                bad |= late[e]
            count, total = count + int(bad.sum()), total + bad.numel()
            hit = torch.cat([e[bad] for e in ends])
            hit = hit[late[hit]]
            if hit.numel() and first is None:
                node = int(hit.min())
                first = f" (first: node {node}, {roles[node]}, t={float(t[node]):.6g})"
        parts.append(f"{phase} phase: {count} of {total} message edges touch a node later than "
                     f"the {phase} cut t={float(cut):.6g}")
        leaked += count
    detail = "; ".join(parts) + (first or "")
    entry = {"check": "time_respecting", "passed": leaked == 0, "detail": detail}
    if leaked and future_visible:
        entry["waived"] = True
        entry["detail"] += ("; waived: split.node.mode=transductive was chosen explicitly, so "
                            "training aggregates over later nodes")
    elif leaked:
        entry["detail"] += ("; use split.node.mode: auto (or time) for time-respecting message "
                            "graphs, or transductive explicitly to accept the leak")
    return entry


def audit_node_split(graph: Graph, roles: np.ndarray, message_graphs: MessageGraphs,
                     mode: str, *, timed: bool = False, separated: bool = False,
                     future_visible: bool = False) -> dict:
    """Audit report (JSON-ready). ``report["passed"]`` is False if any check failed (a
    ``waived`` check does not count; it is listed in ``report["warnings"]``).

    ``roles`` str (N_target,); ``message_graphs`` phase -> edge type -> CSR. Labels ``graph.y``
    may be ``UNLABELLED`` (``class_balance`` counts labelled nodes only). ``timed`` (strategy
    time, with node times of the target type): every train node must be no later than every
    val node, and val no later than test, and the message graphs must respect time
    (``time_respecting_check``; ``future_visible`` waives it). ``separated`` (strategy cluster
    by components): no edge of the target's own relation may join two different splits.
    """
    checks: list[dict] = []

    def check(name: str, passed: bool, detail: str) -> None:
        checks.append({"check": name, "passed": bool(passed), "detail": detail})

    y = graph.y.numpy()
    full = graph.target_csr()  # no edge at all when the target type has no own relation
    counts = {role: int((roles == role).sum()) for role in PHASES}
    checks += role_checks(counts, int((roles == "unused").sum()), roles.size)
    checks.append(labelled_only_check(roles, y))
    if graph.is_homogeneous:
        checks += _message_checks(roles, y != UNLABELLED, message_graphs, graph.edge_types[0],
                                  full, mode)
    else:
        checks += _typed_checks(graph, message_graphs, roles, mode)

    cross = _cross_split_edges(roles, full)
    if separated:
        joined = {pair: count for pair, count in cross.items() if count}
        check("splits_not_adjacent", not joined,
              f"edges between splits: {joined}" if joined else "no edge joins two splits")
    times = graph.node_time.get(graph.target) if timed else None
    if times is not None:
        order_ok, detail = _time_order(roles, times.numpy())
        check("splits_in_time_order", order_ok, detail)
        checks.append(time_respecting_check(graph.target, roles, times.numpy(), message_graphs,
                                            future_visible=future_visible))

    labelled = y != UNLABELLED
    report = node_report(
        graph, mode, checks, counts,
        {role: np.bincount(y[(roles == role) & labelled], minlength=graph.num_classes)
         for role in PHASES}, label_coverage(roles, y), cross,
        {p: {e: message_graphs[p][e].num_edges for e in graph.edge_types} for p in PHASES})
    if times is not None:  # time splits only, so the other splits' reports stay as they were
        report["warnings"] = [f"{c['check']}: {c['detail']}" for c in checks if c.get("waived")]
    return report


def role_checks(counts: dict[str, int], unused: int, num_nodes: int) -> list[dict]:
    """``splits_non_empty`` and ``splits_disjoint`` from the nodes per phase, the unused nodes
    and the nodes in all."""
    empty = [role for role in PHASES if counts[role] == 0]
    # One role column makes overlap impossible; the check guards that the column is the truth.
    return [{"check": "splits_non_empty", "passed": not empty,
             "detail": f"empty: {empty}" if empty else f"sizes {counts}"},
            {"check": "splits_disjoint", "passed": sum(counts.values()) + unused == num_nodes,
             "detail": "every node has exactly one role"}]


def node_report(graph: Graph, mode: str, checks: list[dict], counts: dict[str, int],
                per_class: dict[str, np.ndarray], coverage: dict, cross: dict[str, int],
                message_edges: dict[str, dict[EdgeType, int]]) -> dict:
    """The node audit report from its checks and sums: nodes per phase, labelled nodes per phase
    and class (C,), ``coverage_entry``, ``cross_split_edges``, message edges per phase and
    edge type."""
    balance = {}
    for role in PHASES:
        total = max(int(per_class[role].sum()), 1)
        balance[role] = {"count": per_class[role].tolist(),
                         "fraction": [round(c / total, 4) for c in per_class[role].tolist()]}
    missing = {role: [c for c, k in enumerate(balance[role]["count"]) if k == 0] for role in PHASES}
    own = graph.own_relation()
    return {
        "task": "node",
        "mode": mode,
        "passed": all(c["passed"] or c.get("waived", False) for c in checks),
        "checks": checks,
        "sizes": counts,
        "class_balance": balance,
        "classes_missing": {role: cls for role, cls in missing.items() if cls},
        "label_coverage": coverage,
        "structure_shared_across_phases": mode == "transductive",
        "cross_split_edges": cross,
        "target": graph.target,
        "cross_split_edges_relation": None if own is None else edge_type_name(own),
        "message_edges": {p: {edge_type_name(e): count for e, count in edges.items()}
                          for p, edges in message_edges.items()},
    }


def _message_checks(roles: np.ndarray, labelled: np.ndarray, message_graphs: MessageGraphs,
                    edge_type: EdgeType, full: Csr, mode: str) -> list[dict]:
    """Per phase, the one edge type of a homogeneous graph: within the graph, and (inductive)
    seeing only the allowed roles; the first leaking node named."""
    checks = []
    for phase in PHASES:
        graph = message_graphs[phase][edge_type]
        checks.append(within_graph_entry(phase, _is_subset(graph, full)))
        allowed = VISIBLE_ROLES[mode][phase]
        if allowed is None:
            continue
        visible = torch.from_numpy(visible_nodes(roles, labelled, allowed))
        src, dst = graph.indices, graph.targets()
        leaking = ~(visible[src] & visible[dst])
        bad_nodes = torch.unique(torch.cat([src[leaking], dst[leaking]]))
        bad_nodes = bad_nodes[~visible[bad_nodes]]
        first = int(bad_nodes[0]) if bad_nodes.numel() else None
        checks.append(sees_only_entry(phase, allowed, int(leaking.sum()), bad_nodes.numel(),
                                      None if first is None else (first, roles[first])))
    return checks


def within_graph_entry(phase: str, passed: bool) -> dict:
    return {"check": f"message_{phase}_within_graph", "passed": bool(passed),
            "detail": "every message edge is an edge of the prepared graph"}


def sees_only_entry(phase: str, allowed: tuple[str, ...], leaking: int, bad_nodes: int,
                    first: tuple[int, str] | None) -> dict:
    """``message_<phase>_sees_only_<allowed>`` of a homogeneous graph: ``leaking`` edges touch
    ``bad_nodes`` nodes the phase may not see, the smallest ``first`` (node, role)."""
    return {"check": f"message_{phase}_sees_only_{'_'.join(allowed)}", "passed": leaking == 0,
            "detail": f"{leaking} edges touch {bad_nodes} nodes of other splits"
                      + (f" (first: node {first[0]}, {first[1]})" if first else "")}


def _within(sub: Csr, full: Csr, num_src: int) -> bool:
    """Every edge of ``sub`` is an edge of ``full`` (same edge type)."""
    if sub is full:
        return True

    def keys(csr: Csr) -> np.ndarray:  # (E,) dst * N_src + src: ascending for a sorted CSR
        return csr.targets().numpy() * num_src + csr.indices.numpy()

    small, big = keys(sub), keys(full)
    if small.size == 0:
        return True
    if big.size == 0:
        return False
    if (np.diff(big) < 0).any():  # columns not sorted within rows (not how gnnpipe writes them)
        big = np.sort(big)
    pos = np.minimum(np.searchsorted(big, small), big.size - 1)
    return bool((big[pos] == small).all())


def _typed_checks(graph: Graph, message_graphs: dict[str, dict[EdgeType, Csr]],
                  roles: np.ndarray | None, mode: str | None,
                  skip: tuple[EdgeType, ...] = ()) -> list[dict]:
    checks = []
    for phase in PHASES:
        for edge_type in graph.edge_types:
            if edge_type in skip:
                continue
            name = f"message_{phase}[{edge_type_name(edge_type)}]"
            csr = message_graphs[phase][edge_type]
            checks.append({"check": f"{name}_within_graph",
                           "passed": _within(csr, graph.csr[edge_type],
                                             graph.num_nodes_dict[edge_type[0]]),
                           "detail": "every message edge is an edge of the prepared graph"})
            allowed = VISIBLE_ROLES[mode][phase] if mode else None
            if allowed is None or graph.target not in (edge_type[0], edge_type[2]):
                continue
            visible = visible_nodes(roles, graph.y.numpy() != UNLABELLED, allowed)
            src, dst = edge_pairs(csr)
            bad = np.zeros(src.size, dtype=bool)
            if edge_type[0] == graph.target:
                bad |= ~visible[src]
            if edge_type[2] == graph.target:
                bad |= ~visible[dst]
            checks.append({"check": f"{name}_sees_only_{'_'.join(allowed)}",
                           "passed": not bad.any(),
                           "detail": f"{int(bad.sum())} edges touch {graph.target} nodes of "
                                     "other splits"})
    return checks


def _cross_split_edges(roles: np.ndarray, full: Csr) -> dict[str, int]:
    """Stored edges of the whole graph joining two different splits, per pair of splits."""
    code = np.full(roles.size, len(PHASES), dtype=np.int64)  # unused
    for i, role in enumerate(PHASES):
        code[roles == role] = i
    code = torch.from_numpy(code)
    a, b = code[full.indices], code[full.targets()]
    return cross_entry(torch.bincount(torch.minimum(a, b) * 4 + torch.maximum(a, b),
                                      minlength=16).numpy())


def cross_entry(counts: np.ndarray) -> dict[str, int]:
    """``cross_split_edges`` from the edge counts int64 (16,) per ``min * 4 + max`` of the two
    ends' phase codes (unused: 3)."""
    return {f"{PHASES[i]}-{PHASES[j]}": int(counts[i * 4 + j])
            for i in range(len(PHASES)) for j in range(i + 1, len(PHASES))}


def _time_order(roles: np.ndarray, timestamps: np.ndarray) -> tuple[bool, str]:
    spans = {role: (timestamps[roles == role].min(), timestamps[roles == role].max())
             for role in PHASES if (roles == role).any()}
    ok = all(spans[a][1] <= spans[b][0] for a, b in (("train", "val"), ("val", "test"))
             if a in spans and b in spans)
    detail = ", ".join(f"{role} [{float(lo):.6g}, {float(hi):.6g}]" for role, (lo, hi) in spans.items())
    return ok, detail


# ------------------------------------------------------------------------------------ links
# Held-out roles whose pairs each phase's message graph must not hold, in either direction.
LINK_HIDDEN = {"train": ("val", "test"), "val": ("val", "test"), "test": ("test",)}
LINK_ROLES = ("message", "train_supervision", "val", "test")


def _pairs(edges: torch.Tensor, n: int) -> np.ndarray:
    """Unordered pair key ``min * N + max`` of every edge of an int64 (2, E): (E,)."""
    src, dst = edges[0].numpy(), edges[1].numpy()
    return np.minimum(src, dst) * n + np.maximum(src, dst)


Found = tuple[int, int]  # (how many pairs, the smallest pair key; -1 when none)


def found(keys: np.ndarray) -> Found:
    return (int(keys.size), int(keys.min()) if keys.size else -1)


def _describe(pairs: Found, n: int) -> str:
    count, first = pairs
    return f"{count} pairs (first: {first // n}-{first % n})" if count else "none"


# per phase: (the targets' shape, positives, all in range, self-loops, true edges)
NegativeSums = tuple[tuple[int, ...], int, bool, int, int]


@dataclass
class LinkSums:
    """What the link audit's checks read, summed over whatever computed them (one process, or
    the blocks of gnnpipe/splitting/dask_link_audit.py). Per role (LINK_ROLES): ``sizes``
    positives, ``loops`` self-loops among them, ``outside`` not edges of the graph; ``overlap``
    "first&second" -> shared pairs (non-empty only); ``mismatch`` pairs in exactly one of
    message and train_supervision; ``lost`` graph pairs in no role; per phase ``message_edges``,
    ``within`` (its edges are graph edges), ``leaked`` hidden role -> pairs (non-empty only);
    per val/test phase ``negatives``: (their shape, positives, in range, self-loops, true
    edges), and ``hard`` alike for the hard negatives (None: the split drew none)."""

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
        + HELD_OUT_ROLES
    return [(first, second) for i, first in enumerate(roles) for second in roles[i + 1:]]


def audit_link_split(graph: Graph, edge_type: EdgeType, edges: dict[str, torch.Tensor],
                     negatives: dict[str, torch.Tensor], message_graphs: MessageGraphs, *,
                     disjoint: bool, hard: dict[str, torch.Tensor] | None = None) -> dict:
    """Audit report of the link split of ``edge_type`` held out with its reverse (JSON-ready);
    ``report["passed"]`` False if any check failed.

    ``edges`` role -> int64 (2, E) type-local positives (LINK_ROLES); ``negatives`` "val"/"test"
    -> int64 (P, K) targets (ids of ``edge_type[2]``) whose heads are ``edges[phase][0]``;
    ``hard``: the hard negatives in the same form (None: the split drew none), checked alike;
    ``disjoint``: supervision-only edges exist and must be absent from the train graph.
    """
    reverse = graph.reverse.get(edge_type)
    names = {"edge_type": edge_type_name(edge_type),
             "reverse_edge_type": None if reverse is None else edge_type_name(reverse)}
    if graph.is_homogeneous:
        report = _link_report(graph.csr[edge_type], edges,
                              {p: message_graphs[p][edge_type] for p in PHASES}, negatives,
                              disjoint=disjoint, hard=hard)
        return {**report, **names}
    held = (edge_type,) if reverse in (None, edge_type) else (edge_type, reverse)
    offsets = graph.offsets()
    s_off, d_off = offsets[edge_type[0]], offsets[edge_type[2]]
    shifted = {role: torch.stack([pair[0] + s_off, pair[1] + d_off])
               for role, pair in edges.items()}
    report = _link_report(
        _project(graph, graph.csr, held), shifted,
        {p: _project(graph, message_graphs[p], held) for p in PHASES},
        {p: negatives[p] + d_off for p in negatives}, disjoint=disjoint,
        hard=None if hard is None else {p: hard[p] + d_off for p in hard})
    held_names = "+".join(edge_type_name(e) for e in held)
    for check in report["checks"]:  # the held-out edge types, together
        check["check"] = f"{check['check']}[{held_names}]"
    n_dst = graph.num_nodes_dict[edge_type[2]]
    for name, drawn in (("negatives", negatives), ("hard_negatives", hard or {})):
        for phase, targets in drawn.items():
            typed = bool(((targets >= 0) & (targets < n_dst)).all())
            report["checks"].append({"check": f"{name}_{phase}_are_{edge_type[2]}_nodes",
                                     "passed": typed, "detail": f"targets in [0, {n_dst}) of "
                                                                f"{edge_type[2]}"})
    report["checks"] += _typed_checks(graph, message_graphs, None, None, skip=held)
    report.update(passed=all(c["passed"] for c in report["checks"]), **names)
    return report


def _project(graph: Graph, csrs: dict[EdgeType, Csr], types: tuple[EdgeType, ...]) -> Csr:
    """``types`` edges of ``csrs`` as one square CSR over homogeneous ids."""
    return homogeneous_csr(graph.sizes(), {e: csrs[e] for e in types})


def _link_report(full: Csr, edges: dict[str, torch.Tensor], message_graphs: dict[str, Csr],
                 negatives: dict[str, torch.Tensor], *, disjoint: bool,
                 hard: dict[str, torch.Tensor] | None = None) -> dict:
    """The link audit over one square CSR ``full`` (homogeneous ids), its per-phase message
    graphs, positives and negatives (random, and ``hard`` where given). Pairs are compared
    unordered, so an edge counts as present whichever direction is stored."""
    n = full.num_nodes
    full_src, full_dst = full.indices.numpy(), full.targets().numpy()
    full_directed = sorted_unique(full_src * n + full_dst)
    not_loop = full_src != full_dst
    full_pairs = sorted_unique(np.minimum(full_src, full_dst)[not_loop] * n
                           + np.maximum(full_src, full_dst)[not_loop])
    pairs = {role: sorted_unique(_pairs(edges[role], n)) for role in LINK_ROLES}
    overlap = {f"{a}&{b}": found(np.intersect1d(pairs[a], pairs[b]))
               for a, b in link_compared(disjoint)}
    assigned = sorted_unique(np.concatenate([pairs[role] for role in LINK_ROLES]))
    leaked, within = {}, {}
    for phase in PHASES:
        seen = sorted_unique(_pairs(message_graphs[phase].edge_index(), n))
        within[phase] = _is_subset(message_graphs[phase], full)
        leaked[phase] = {role: found(np.intersect1d(seen, pairs[role]))
                         for role in link_hidden(phase, disjoint)}
    sums = LinkSums(
        sizes={role: int(edges[role].shape[1]) for role in LINK_ROLES},
        loops={role: int((edges[role][0] == edges[role][1]).sum()) for role in LINK_ROLES},
        outside={role: int((~np.isin(edges[role][0].numpy() * n + edges[role][1].numpy(),
                                     full_directed)).sum()) for role in LINK_ROLES},
        overlap={name: pair for name, pair in overlap.items() if pair[0]},
        mismatch=int(np.setxor1d(pairs["message"], pairs["train_supervision"]).size),
        lost=found(np.setdiff1d(full_pairs, assigned)),
        message_edges={phase: message_graphs[phase].num_edges for phase in PHASES},
        within=within,
        leaked={phase: {r: pair for r, pair in roles.items() if pair[0]}
                for phase, roles in leaked.items()},
        negatives=_negative_sums(negatives, edges, full_pairs, n),
        hard=None if hard is None else _negative_sums(hard, edges, full_pairs, n))
    return link_report(sums, n, disjoint=disjoint)


def _negative_sums(negatives: dict[str, torch.Tensor], edges: dict[str, torch.Tensor],
                   full_pairs: np.ndarray, n: int) -> dict[str, NegativeSums]:
    """``LinkSums.negatives`` of the fixed negatives of each held-out phase (int64 (P, K)
    targets of the heads ``edges[phase][0]``; ``full_pairs``: the graph's unordered pair keys)."""
    sums = {}
    for phase in HELD_OUT_ROLES:
        targets, heads = negatives[phase], edges[phase][0]
        shape = tuple(targets.shape)
        if not (targets.dim() == 2 and targets.shape[0] == heads.numel()):
            sums[phase] = (shape, heads.numel(), False, 0, 0)
            continue
        h = heads[:, None].expand_as(targets).reshape(-1).numpy()
        t = targets.reshape(-1).numpy()
        sums[phase] = (
            shape, heads.numel(), bool(((t >= 0) & (t < n)).all()), int((h == t).sum()),
            int(np.isin(np.minimum(h, t) * n + np.maximum(h, t), full_pairs).sum()))
    return sums


def link_report(sums: LinkSums, n: int, *, disjoint: bool) -> dict:
    """The link audit report (JSON-ready) from its sums over a graph of ``n`` nodes."""
    checks: list[dict] = []

    def check(name: str, passed: bool, detail: str) -> None:
        checks.append({"check": name, "passed": bool(passed), "detail": detail})

    check("positives_not_self_loops", not any(sums.loops.values()),
          f"self-loops per role: {sums.loops}")
    check("positives_are_graph_edges", not any(sums.outside.values()),
          f"positives that are not edges of the prepared graph: {sums.outside}")
    overlap = {name: _describe(pair, n) for name, pair in sums.overlap.items()}
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
        leaked = {role: _describe(pair, n) for role, pair in sums.leaked[phase].items()}
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
    for phase in HELD_OUT_ROLES:
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


def raise_if_failed(report: dict) -> None:
    failed = [c for c in report["checks"] if not (c["passed"] or c.get("waived", False))]
    if failed:
        lines = "; ".join(f"{c['check']}: {c['detail']}" for c in failed)
        raise LeakageError(f"split audit failed ({len(failed)} checks): {lines}")
