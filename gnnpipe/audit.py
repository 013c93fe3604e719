"""The split audit: proves from the artifacts themselves that no phase can see what it must not.

Every check is recomputed from the roles and message graphs as written, so a bug in the split
code (or a hand-edited artifact) is caught here rather than trusted.
"""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.graph import Csr

PHASES = ("train", "val", "test")

# Nodes whose edges each phase's message graph may contain, by mode.
VISIBLE_ROLES = {
    "transductive": {"train": None, "val": None, "test": None},  # None: the whole graph
    "inductive": {"train": ("train",), "val": ("train", "val"), "test": None},
}


class LeakageError(ValueError):
    """The split audit found information a phase must not see."""


def _is_subset(sub: Csr, full: Csr) -> bool:
    keys, full_keys = sub.edge_keys(), full.edge_keys()
    pos = torch.searchsorted(full_keys, keys)
    pos = pos.clamp(max=max(full_keys.numel() - 1, 0))
    return bool(keys.numel() == 0 or (full_keys.numel() and (full_keys[pos] == keys).all()))


def audit_node_split(roles: np.ndarray, y: np.ndarray, num_classes: int,
                     message_graphs: dict[str, Csr], full: Csr, mode: str) -> dict:
    """Audit report (JSON-ready). ``report["passed"]`` is False if any check failed."""
    checks: list[dict] = []

    def check(name: str, passed: bool, detail: str) -> None:
        checks.append({"check": name, "passed": bool(passed), "detail": detail})

    counts = {role: int((roles == role).sum()) for role in PHASES}
    empty = [role for role in PHASES if counts[role] == 0]
    check("splits_non_empty", not empty, f"empty: {empty}" if empty else f"sizes {counts}")
    # One role column makes overlap impossible; the check guards that the column is the truth.
    check("splits_disjoint", sum(counts.values()) + int((roles == "unused").sum()) == roles.size,
          "every node has exactly one role")

    for phase in PHASES:
        graph = message_graphs[phase]
        check(f"message_{phase}_within_graph", _is_subset(graph, full),
              "every message edge is an edge of the prepared graph")
        allowed = VISIBLE_ROLES[mode][phase]
        if allowed is None:
            continue
        visible = torch.from_numpy(np.isin(roles, allowed))
        src, dst = graph.indices, graph.targets()
        leaking = ~(visible[src] & visible[dst])
        bad_nodes = torch.unique(torch.cat([src[leaking], dst[leaking]]))
        bad_nodes = bad_nodes[~visible[bad_nodes]]
        check(f"message_{phase}_sees_only_{'_'.join(allowed)}", not bool(leaking.any()),
              f"{int(leaking.sum())} edges touch {bad_nodes.numel()} nodes of other splits"
              + (f" (first: node {int(bad_nodes[0])}, {roles[int(bad_nodes[0])]})"
                 if bad_nodes.numel() else ""))

    balance = {}
    for role in PHASES:
        per_class = np.bincount(y[roles == role], minlength=num_classes)
        total = max(int(per_class.sum()), 1)
        balance[role] = {"count": per_class.tolist(),
                         "fraction": [round(c / total, 4) for c in per_class.tolist()]}
    missing = {role: [c for c, k in enumerate(balance[role]["count"]) if k == 0] for role in PHASES}
    return {
        "task": "node",
        "mode": mode,
        "passed": all(c["passed"] for c in checks),
        "checks": checks,
        "sizes": counts,
        "class_balance": balance,
        "classes_missing": {role: cls for role, cls in missing.items() if cls},
        "structure_shared_across_phases": mode == "transductive",
    }


def raise_if_failed(report: dict) -> None:
    failed = [c for c in report["checks"] if not c["passed"]]
    if failed:
        lines = "; ".join(f"{c['check']}: {c['detail']}" for c in failed)
        raise LeakageError(f"split audit failed ({len(failed)} checks): {lines}")
