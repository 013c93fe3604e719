"""The node split audit by blocks (``cluster.engine: dask``): the report
``gnnpipe.splitting.audit.audit_node_split`` gives for a homogeneous graph, computed per block of
target rows and summed, from the files the block split wrote (gnnpipe/splitting/dask_split.py).

A block task maps its rows of the prepared CSR and of every phase's message CSR, and the role
codes (1 byte per node, read at the edges' ends); it returns counts, never edges: nodes per role
and label state, labelled nodes per phase and class, unlabelled nodes in a split (the first),
edges per pair of phases (``cross_split_edges``), and per phase its message edges, whether they
are edges of the prepared graph, and (inductive) those touching a node the phase may not see,
with those nodes (a leak's, so only a failing audit returns any).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnpipe.data.graph import ROLES, UNLABELLED
from gnnpipe.data.graph import Graph
from gnnpipe.io.blocks import open_memmap
from gnnpipe.runtime.engine import run_blocks
from gnnpipe.splitting import audit
from gnnpipe.splitting.dask_split import NodeBlocks, graph_arrays, phase_sees
from gnnpipe.splitting.hash_assign import UNUSED
from gnnpipe.splitting.split import PHASES


@dataclass(frozen=True)
class BlockAudit:
    """One block's sums (see the module docstring); per-phase entries in PHASES order."""

    per_role: np.ndarray  # int64 (4, 2): nodes per role code, labelled / unlabelled
    per_class: np.ndarray  # int64 (3, C): labelled nodes per phase and class
    first_unlabelled: int  # the first unlabelled node in a phase, -1: none
    cross: np.ndarray  # int64 (16,): edges per min * 4 + max of their ends' codes
    edges: list[int]
    within: list[bool]
    leaking: list[int]
    bad_nodes: list[np.ndarray]  # int64, unique: unseen nodes that leaking edges touch


def _rows(indptr: np.ndarray, indices: np.ndarray, lo: int, hi: int
          ) -> tuple[np.ndarray, np.ndarray]:
    """Sources and targets int64 (E_block,) of rows ``[lo, hi)``."""
    ptr = np.asarray(indptr[lo:hi + 1])
    return np.asarray(indices[ptr[0]:ptr[-1]]), np.repeat(np.arange(lo, hi), np.diff(ptr))


def audit_block(lo: int, hi: int, graph_file: str, roles_file: str,
                message: dict[str, tuple[str, str] | None], mode: str,
                num_classes: int) -> BlockAudit:
    """The audit sums of target rows ``[lo, hi)``."""
    indptr, indices, y = graph_arrays(graph_file)
    roles = open_memmap(Path(roles_file))
    code = np.asarray(roles[lo:hi]).astype(np.int64)
    block_y = np.asarray(y[lo:hi])
    labelled = block_y != UNLABELLED
    per_role = np.stack([np.bincount(code[labelled], minlength=UNUSED + 1),
                         np.bincount(code[~labelled], minlength=UNUSED + 1)], axis=1)
    per_class = np.stack([np.bincount(block_y[(code == p) & labelled], minlength=num_classes)
                          for p in range(len(PHASES))])
    in_split = np.flatnonzero(~labelled & (code < UNUSED))
    src, dst = _rows(indptr, indices, lo, hi)
    a, b = np.asarray(roles[src]).astype(np.int64), np.asarray(roles[dst]).astype(np.int64)
    cross = np.bincount(np.minimum(a, b) * 4 + np.maximum(a, b), minlength=16)
    full_keys = (dst - lo) * y.size + src  # ascending: rows sorted
    edges, within, leaking, bad_nodes = [], [], [], []
    for phase in PHASES:
        files = message[phase]
        m_src, m_dst = (src, dst) if files is None else _rows(
            open_memmap(Path(files[0])), open_memmap(Path(files[1])), lo, hi)
        edges.append(int(m_src.size))
        keys = (m_dst - lo) * y.size + m_src
        pos = np.minimum(np.searchsorted(full_keys, keys), max(full_keys.size - 1, 0))
        within.append(bool(keys.size == 0 or (full_keys.size and (full_keys[pos] == keys).all())))
        if audit.VISIBLE_ROLES[mode][phase] is None:
            leaking.append(0)
            bad_nodes.append(np.zeros(0, dtype=np.int64))
            continue
        ends = np.concatenate([m_src, m_dst])
        unique, inverse = np.unique(ends, return_inverse=True)
        seen = phase_sees(np.asarray(roles[unique]).astype(np.int64),
                          np.asarray(y[unique]) != UNLABELLED)[phase]
        both = seen[inverse]
        leak = ~(both[:m_src.size] & both[m_src.size:])
        leaking.append(int(leak.sum()))
        bad_nodes.append(unique[~seen & np.isin(unique, ends[np.concatenate([leak, leak])])])
    return BlockAudit(per_role, per_class, int(in_split[0]) + lo if in_split.size else -1, cross,
                      edges, within, leaking, bad_nodes)


def audit_node_blocks(client, graph: Graph, graph_file: Path, split: NodeBlocks,
                      mode: str) -> dict:
    """``audit_node_split``'s report of a homogeneous ``graph`` (its sizes and types; the data
    are read from ``graph_file`` by the tasks) split into ``split``'s files, by its blocks."""
    message = {p: None if f is None else (str(f[0]), str(f[1])) for p, f in split.message.items()}
    found = run_blocks(client, audit_block, split.blocks, graph_file=str(graph_file),
                       roles_file=str(split.roles), message=message, mode=mode,
                       num_classes=graph.num_classes)
    per_role = sum(b.per_role for b in found)
    counts = {role: int(per_role[i].sum()) for i, role in enumerate(PHASES)}
    num_nodes = graph.num_nodes_dict[graph.target]
    checks = audit.role_checks(counts, int(per_role[UNUSED].sum()), num_nodes)
    firsts = [b.first_unlabelled for b in found if b.first_unlabelled >= 0]
    first = min(firsts) if firsts else None
    role_of = np.asarray(ROLES)
    checks.append(audit.labelled_only_entry(
        {role: int(per_role[i, 1]) for i, role in enumerate(PHASES)},
        None if first is None else (first, str(role_of[open_memmap(split.roles)[first]])),
        int(per_role[:, 1].sum())))
    for i, phase in enumerate(PHASES):
        checks.append(audit.within_graph_entry(phase, all(b.within[i] for b in found)))
        allowed = audit.VISIBLE_ROLES[mode][phase]
        if allowed is None:
            continue
        bad = np.unique(np.concatenate([b.bad_nodes[i] for b in found]))
        first_bad = ((int(bad[0]), str(role_of[open_memmap(split.roles)[int(bad[0])]]))
                     if bad.size else None)
        checks.append(audit.sees_only_entry(phase, allowed, sum(b.leaking[i] for b in found),
                                            int(bad.size), first_bad))
    (edge_type,) = graph.edge_types
    per_class = sum(b.per_class for b in found)
    coverage = audit.coverage_entry(
        {role: (int(per_role[i, 0]), int(per_role[i, 1])) for i, role in enumerate(ROLES)},
        int(per_role[:, 0].sum()), num_nodes)
    return audit.node_report(
        graph, mode, checks, counts, {role: per_class[i] for i, role in enumerate(PHASES)},
        coverage, audit.cross_entry(sum(b.cross for b in found)),
        {p: {edge_type: sum(b.edges[i] for b in found)} for i, p in enumerate(PHASES)})
