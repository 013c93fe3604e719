"""The library's node split and its audit run on an in-memory graph in this process, what many
tests and benches start from (the stage runs them by blocks, gnnpipe/splitting/stage.py):
``split_nodes`` (``split_node_blocks``, its files read back into memory) and
``audit_node_split`` (``audit_nodes`` of in-memory roles and message graphs)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from gnnpipe.config import NodeSplitParams
from gnnpipe.data.graph import ROLES, Csr, Graph
from gnnpipe.splitting.audit import audit_nodes
from gnnpipe.splitting.hash_assign import UNUSED
from gnnpipe.splitting.split import MessageGraphs, graph_source, split_node_blocks


@dataclass(frozen=True)
class NodeSplit:
    roles: np.ndarray  # str (N_target,): "train" | "val" | "test" | "unused"
    message_graphs: MessageGraphs  # phases may share one dict, edge types one CSR
    mode: str
    # strategy public: official train/val/test nodes that are unlabelled, per role (now unused)
    unlabelled_dropped: dict[str, int] = field(default_factory=dict)

    def nodes(self, role: str) -> np.ndarray:
        """Node ids with ``role``: int64 (n_role,), ascending."""
        return np.flatnonzero(self.roles == role)


def split_nodes(graph: Graph, cfg: NodeSplitParams, rng: np.random.Generator | None = None,
                seed: int = 0) -> NodeSplit:
    """``split_node_blocks`` of an in-memory ``graph`` in this process, its files read back
    into memory (str roles); ``rng``: unused (the split is drawn from ``seed``, as the stage
    draws it from params ``seed``)."""
    with tempfile.TemporaryDirectory(prefix="gnnpipe-split-") as scratch:
        split = split_node_blocks(None, graph, cfg, seed, Path(scratch))
        roles = np.asarray(ROLES)[np.load(split.roles)].astype(object).astype(str)
        graphs: MessageGraphs = {}
        for phase, files in split.message.items():
            graphs[phase] = graph.csr if not files else {
                e: Csr(*(torch.from_numpy(np.load(f)) for f in files[e])) if e in files
                else graph.csr[e] for e in graph.edge_types}
    return NodeSplit(roles=roles, message_graphs=graphs, mode=cfg.mode,
                     unlabelled_dropped=split.dropped)


def audit_node_split(graph: Graph, roles: np.ndarray, message_graphs: MessageGraphs,
                     mode: str, *, timed: bool = False, separated: bool = False,
                     future_visible: bool = False) -> dict:
    """``audit_nodes`` of an in-memory ``graph``, its ``roles`` (str (N_target,)) and
    ``message_graphs`` (phase -> edge type -> CSR), in this process."""
    codes = np.full(len(roles), UNUSED, dtype=np.int8)
    for code, role in enumerate(ROLES):
        codes[np.asarray(roles) == role] = code
    message = {p: {e: None if csr is graph.csr[e] else (csr.indptr.numpy(), csr.indices.numpy())
                   for e, csr in graphs.items()} for p, graphs in message_graphs.items()}
    return audit_nodes(None, graph_source(graph), codes, message, mode, timed=timed,
                       separated=separated, future_visible=future_visible)
