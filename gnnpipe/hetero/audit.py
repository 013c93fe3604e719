"""The split audit of heterogeneous graphs, per node type and per edge type.

Recomputed from the written roles, edges and message graphs (as ``gnnpipe.audit``), so a bug in
the split or a hand-edited artifact fails the stage. Check names carry the edge type, e.g.
``message_train[author__writes__paper]_sees_only_train``.

* **Node task**: the homogeneous node audit of the target type over its own relation (sizes,
  class balance, cross-split edges), plus for every edge type and phase: its message edges are
  edges of the prepared graph, and (inductive) none has an endpoint of the target type outside
  the roles the phase may see (unused unlabelled target nodes are visible to every phase, as
  in ``gnnpipe.audit``). ``splits_labelled_only`` and ``label_coverage`` are of the target type.
* **Link task**: the homogeneous link audit on the held-out edge type ``E`` and its reverse
  ``R`` projected together onto homogeneous ids (``graph.offsets()``), where an ``E`` edge
  ``a -> p`` and an ``R`` edge ``p -> a`` are the same unordered pair: so a val/test pair kept in
  a phase's graph in *either* edge type fails ``message_<phase>_hides_...``. Plus: negatives are
  nodes of ``E``'s target type, and every other edge type is a subset of the prepared graph.
"""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe import audit
from gnnpipe.graph import UNLABELLED, Csr
from gnnpipe.typed_graph import (EdgeType, HeteroGraph, edge_pairs, edge_type_name,
                                  homogeneous_csr)

PHASES = ("train", "val", "test")
VISIBLE_ROLES = audit.VISIBLE_ROLES


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


def _typed_checks(graph: HeteroGraph, message_graphs: dict[str, dict[EdgeType, Csr]],
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
                                             graph.num_nodes(edge_type[0])),
                           "detail": "every message edge is an edge of the prepared graph"})
            allowed = VISIBLE_ROLES[mode][phase] if mode else None
            if allowed is None or graph.target not in (edge_type[0], edge_type[2]):
                continue
            visible = audit.visible_nodes(roles, graph.y.numpy() != UNLABELLED, allowed)
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


def audit_hetero_node_split(graph: HeteroGraph, roles: np.ndarray,
                            message_graphs: dict[str, dict[EdgeType, Csr]], mode: str) -> dict:
    """Audit report (JSON-ready); ``report["passed"]`` False if any check failed."""
    own = graph.own_relation()
    # without a target -> target edge type no edge can join two split nodes directly; the
    # typed checks below still cover every edge type
    targets = ({p: message_graphs[p][own] for p in PHASES} if own is not None
               else dict.fromkeys(PHASES, graph.target_csr()))
    report = audit.audit_node_split(roles, graph.y.numpy(), graph.num_classes, targets,
                                    graph.target_csr(), mode)
    # the target relation's message checks are repeated, typed, below with every edge type
    checks = [c for c in report["checks"] if not c["check"].startswith("message_")]
    checks += _typed_checks(graph, message_graphs, roles, mode)
    report.update(checks=checks, passed=all(c["passed"] for c in checks), hetero=True,
                  target=graph.target, cross_split_edges_relation=None if own is None else edge_type_name(own),
                  message_edges={p: {edge_type_name(e): message_graphs[p][e].num_edges
                                     for e in graph.edge_types} for p in PHASES})
    return report


def _project(graph: HeteroGraph, csrs: dict[EdgeType, Csr], types: tuple[EdgeType, ...]) -> Csr:
    """``types`` edges of ``csrs`` as one square CSR over homogeneous ids."""
    return homogeneous_csr(graph.sizes(), {e: csrs[e] for e in types})


def audit_hetero_link_split(graph: HeteroGraph, edge_type: EdgeType, edges: dict[str, torch.Tensor],
                            negatives: dict[str, torch.Tensor],
                            message_graphs: dict[str, dict[EdgeType, Csr]], *,
                            disjoint: bool) -> dict:
    """Audit report of the link split of ``edge_type`` held out with its reverse."""
    reverse = graph.reverse.get(edge_type)
    held = (edge_type,) if reverse in (None, edge_type) else (edge_type, reverse)
    offsets = graph.offsets()
    s_off, d_off = offsets[edge_type[0]], offsets[edge_type[2]]
    shifted = {role: torch.stack([pair[0] + s_off, pair[1] + d_off]) for role, pair in edges.items()}
    report = audit.audit_link_split(
        _project(graph, graph.csr, held), shifted,
        {p: _project(graph, message_graphs[p], held) for p in PHASES},
        {p: negatives[p] + d_off for p in negatives}, disjoint=disjoint)
    names = "+".join(edge_type_name(e) for e in held)
    for check in report["checks"]:  # the held-out edge types, together
        check["check"] = f"{check['check']}[{names}]"
    n_dst = graph.num_nodes(edge_type[2])
    for phase, targets in negatives.items():
        typed = bool(((targets >= 0) & (targets < n_dst)).all())
        report["checks"].append({"check": f"negatives_{phase}_are_{edge_type[2]}_nodes",
                                 "passed": typed, "detail": f"targets in [0, {n_dst}) of "
                                                            f"{edge_type[2]}"})
    report["checks"] += _typed_checks(graph, message_graphs, None, None, skip=held)
    report.update(passed=all(c["passed"] for c in report["checks"]), hetero=True,
                  edge_type=edge_type_name(edge_type),
                  reverse_edge_type=None if reverse is None else edge_type_name(reverse))
    return report
