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
    total = int(labelled.sum())
    per_role = {role: {"labelled": int((labelled & (roles == role)).sum()),
                       "unlabelled": int((~labelled & (roles == role)).sum())} for role in ROLES}
    return {"labelled": total, "unlabelled": int(y.size - total),
            "labelled_fraction": round(total / max(int(y.size), 1), 6), "per_role": per_role}


def labelled_only_check(roles: np.ndarray, y: np.ndarray) -> dict:
    """The ``splits_labelled_only`` check: no unlabelled node is in train, val or test."""
    unlabelled = y == UNLABELLED
    bad = {role: int((unlabelled & (roles == role)).sum()) for role in PHASES}
    first = np.flatnonzero(unlabelled & np.isin(roles, PHASES))
    detail = (f"unlabelled nodes in splits: {bad} (first: node {int(first[0])}, "
              f"{roles[int(first[0])]})" if first.size else
              f"every train/val/test node is labelled; {int(unlabelled.sum())} unlabelled "
              "nodes are unused")
    return {"check": "splits_labelled_only", "passed": not first.size, "detail": detail}


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
    empty = [role for role in PHASES if counts[role] == 0]
    check("splits_non_empty", not empty, f"empty: {empty}" if empty else f"sizes {counts}")
    # One role column makes overlap impossible; the check guards that the column is the truth.
    check("splits_disjoint", sum(counts.values()) + int((roles == "unused").sum()) == roles.size,
          "every node has exactly one role")
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
    balance = {}
    for role in PHASES:
        per_class = np.bincount(y[(roles == role) & labelled], minlength=graph.num_classes)
        total = max(int(per_class.sum()), 1)
        balance[role] = {"count": per_class.tolist(),
                         "fraction": [round(c / total, 4) for c in per_class.tolist()]}
    missing = {role: [c for c, k in enumerate(balance[role]["count"]) if k == 0] for role in PHASES}
    own = graph.own_relation()
    report = {
        "task": "node",
        "mode": mode,
        "passed": all(c["passed"] or c.get("waived", False) for c in checks),
        "checks": checks,
        "sizes": counts,
        "class_balance": balance,
        "classes_missing": {role: cls for role, cls in missing.items() if cls},
        "label_coverage": label_coverage(roles, y),
        "structure_shared_across_phases": mode == "transductive",
        "cross_split_edges": cross,
        "target": graph.target,
        "cross_split_edges_relation": None if own is None else edge_type_name(own),
        "message_edges": {p: {edge_type_name(e): message_graphs[p][e].num_edges
                              for e in graph.edge_types} for p in PHASES},
    }
    if times is not None:  # time splits only, so the other splits' reports stay as they were
        report["warnings"] = [f"{c['check']}: {c['detail']}" for c in checks if c.get("waived")]
    return report


def _message_checks(roles: np.ndarray, labelled: np.ndarray, message_graphs: MessageGraphs,
                    edge_type: EdgeType, full: Csr, mode: str) -> list[dict]:
    """Per phase, the one edge type of a homogeneous graph: within the graph, and (inductive)
    seeing only the allowed roles; the first leaking node named."""
    checks = []
    for phase in PHASES:
        graph = message_graphs[phase][edge_type]
        checks.append({"check": f"message_{phase}_within_graph", "passed": _is_subset(graph, full),
                       "detail": "every message edge is an edge of the prepared graph"})
        allowed = VISIBLE_ROLES[mode][phase]
        if allowed is None:
            continue
        visible = torch.from_numpy(visible_nodes(roles, labelled, allowed))
        src, dst = graph.indices, graph.targets()
        leaking = ~(visible[src] & visible[dst])
        bad_nodes = torch.unique(torch.cat([src[leaking], dst[leaking]]))
        bad_nodes = bad_nodes[~visible[bad_nodes]]
        checks.append({"check": f"message_{phase}_sees_only_{'_'.join(allowed)}",
                       "passed": not bool(leaking.any()),
                       "detail": f"{int(leaking.sum())} edges touch {bad_nodes.numel()} nodes of "
                                 "other splits" + (f" (first: node {int(bad_nodes[0])}, "
                                                   f"{roles[int(bad_nodes[0])]})"
                                                   if bad_nodes.numel() else "")})
    return checks


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
    counts = torch.bincount(torch.minimum(a, b) * 4 + torch.maximum(a, b), minlength=16)
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


def _describe(keys: np.ndarray, n: int) -> str:
    return f"{keys.size} pairs (first: {int(keys[0] // n)}-{int(keys[0] % n)})" if keys.size else "none"


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
    checks: list[dict] = []

    def check(name: str, passed: bool, detail: str) -> None:
        checks.append({"check": name, "passed": bool(passed), "detail": detail})

    full_src, full_dst = full.indices.numpy(), full.targets().numpy()
    full_directed = sorted_unique(full_src * n + full_dst)
    not_loop = full_src != full_dst
    full_pairs = sorted_unique(np.minimum(full_src, full_dst)[not_loop] * n
                           + np.maximum(full_src, full_dst)[not_loop])
    pairs = {role: sorted_unique(_pairs(edges[role], n)) for role in LINK_ROLES}

    loops = {role: int((edges[role][0] == edges[role][1]).sum()) for role in LINK_ROLES}
    check("positives_not_self_loops", not any(loops.values()), f"self-loops per role: {loops}")
    outside = {role: int((~np.isin(edges[role][0].numpy() * n + edges[role][1].numpy(),
                                   full_directed)).sum()) for role in LINK_ROLES}
    check("positives_are_graph_edges", not any(outside.values()),
          f"positives that are not edges of the prepared graph: {outside}")
    training = ("train_supervision", "message") if disjoint else ("train_supervision",)
    overlap = {}
    for i, first in enumerate(training + HELD_OUT_ROLES):
        for second in (training + HELD_OUT_ROLES)[i + 1:]:
            shared = np.intersect1d(pairs[first], pairs[second])
            if shared.size:
                overlap[f"{first}&{second}"] = _describe(shared, n)
    check("positives_disjoint", not overlap,
          f"shared pairs: {overlap}" if overlap else "supervision, val and test share no pair"
          + (" (nor message and supervision)" if disjoint else ""))
    if not disjoint:
        same = np.array_equal(pairs["message"], pairs["train_supervision"])
        check("supervision_is_message", same, "without disjoint_train_ratio every training "
              "edge both passes messages and supervises")
    assigned = sorted_unique(np.concatenate([pairs[role] for role in LINK_ROLES]))
    lost = np.setdiff1d(full_pairs, assigned)
    check("every_edge_assigned", lost.size == 0, f"edges in no role: {_describe(lost, n)}")

    message_edges = {}
    for phase in PHASES:
        graph = message_graphs[phase]
        message_edges[phase] = graph.num_edges
        check(f"message_{phase}_within_graph", _is_subset(graph, full),
              "every message edge is an edge of the prepared graph")
        hidden = LINK_HIDDEN[phase] + (("train_supervision",) if phase == "train" and disjoint else ())
        seen = sorted_unique(_pairs(graph.edge_index(), n))
        leaked = {role: _describe(np.intersect1d(seen, pairs[role]), n) for role in hidden
                  if np.intersect1d(seen, pairs[role]).size}
        check(f"message_{phase}_hides_{'_'.join(hidden)}", not leaked,
              f"leaked (either direction): {leaked}" if leaked else
              f"no {'/'.join(hidden)} pair in either direction")

    negative_counts = _negative_checks("negatives", negatives, edges, full_pairs, n, check)
    report = {
        "task": "link",
        "passed": False,
        "checks": checks,
        "sizes": {role: int(edges[role].shape[1]) for role in LINK_ROLES},
        "message_edges": message_edges,
        "negatives": negative_counts,
        "disjoint_supervision": disjoint,
    }
    if hard is not None:  # only where the split drew them: the other reports stay as they were
        report["hard_negatives"] = _negative_checks("hard_negatives", hard, edges, full_pairs, n,
                                                    check)
    report["passed"] = all(c["passed"] for c in checks)
    return report


def _negative_checks(name: str, negatives: dict[str, torch.Tensor], edges: dict[str, torch.Tensor],
                     full_pairs: np.ndarray, n: int, check) -> dict:
    """Checks ``<name>_<phase>_...`` of the fixed negatives of each held-out phase (int64
    (P, K) targets of the heads ``edges[phase][0]``): one row per positive, in range, no
    self-loop, no true edge of the graph (``full_pairs``: its unordered pair keys). Returns
    ``{phase: {"per_positive", "count"}}``."""
    counts = {}
    for phase in HELD_OUT_ROLES:
        targets = negatives[phase]
        heads = edges[phase][0]
        shape_ok = targets.dim() == 2 and targets.shape[0] == heads.numel()
        check(f"{name}_{phase}_one_row_per_positive", shape_ok,
              f"{tuple(targets.shape)} for {heads.numel()} positives")
        if not shape_ok:
            continue
        per = targets.shape[1]
        counts[phase] = {"per_positive": per, "count": targets.numel()}
        h = heads[:, None].expand_as(targets).reshape(-1).numpy()
        t = targets.reshape(-1).numpy()
        in_range = bool(((t >= 0) & (t < n)).all())
        check(f"{name}_{phase}_in_range", in_range, f"targets in [0, {n})")
        check(f"{name}_{phase}_no_self_loops", not (h == t).any(),
              f"{int((h == t).sum())} negatives are self-loops")
        hits = np.isin(np.minimum(h, t) * n + np.maximum(h, t), full_pairs)
        check(f"{name}_{phase}_not_edges", not hits.any(),
              f"{int(hits.sum())} negatives are true edges of the graph (any split, either "
              "direction)")
    return counts


def raise_if_failed(report: dict) -> None:
    failed = [c for c in report["checks"] if not (c["passed"] or c.get("waived", False))]
    if failed:
        lines = "; ".join(f"{c['check']}: {c['detail']}" for c in failed)
        raise LeakageError(f"split audit failed ({len(failed)} checks): {lines}")
