"""The split stage's two runs, one per dataset.task (``RUNS``): each reads the prepared graph,
splits it, audits the split and fits features.normalize's transforms, and yields what the
command publishes (gnnpipe/commands/split.py) as a ``Staged``.

A homogeneous graph is split and audited as the one-type case of a typed graph
(``Graph.homogeneous``); only the files keep the layout of its types (gnnpipe/io/splits.py
``write_split``). Both tasks run the same block tasks on either engine (split.py / audit.py,
link_split.py / link_audit.py: in the stage process on ``cluster.engine: local``, on Dask
workers on ``dask``) in a scratch folder beside data/split, and write the same bytes. Each run
is a context manager: what its writer reads (the block files) lives until the caller wrote.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from gnnpipe import io
from gnnpipe.config import NodeSplitParams
from gnnpipe.config.schema import Params
from gnnpipe.data import features
from gnnpipe.data.features import FeatureTransform
from gnnpipe.data.graph import ROLES, TYPED, Graph
from gnnpipe.io.blocks import open_memmap, scratch_beside
from gnnpipe.runtime.engine import session
from gnnpipe.splitting import audit
from gnnpipe.splitting.hard_negatives import hard_link_negatives, note_ranked
from gnnpipe.splitting.link_audit import audit_links
from gnnpipe.splitting.link_split import split_links
from gnnpipe.splitting.split import WHOLE, NodeBlocks, graph_source, split_node_blocks


@dataclass(frozen=True)
class Staged:
    """A split, audited, ready to publish: ``report`` (metrics/split_audit.json, its
    ``features`` entry included; ``report["passed"]`` False on a failed audit), ``fitted``
    (node type -> transform, "" on a homogeneous graph: data/features), ``write(folder)``
    (data/split into ``folder``) and ``line``, the stage's summary up to its ``-> data/split``."""

    report: dict
    fitted: dict[str, FeatureTransform]
    write: Callable[[Path], None]
    line: str

    def summary(self, out: Path) -> str:
        """The stage's last line and the audit report's warnings after it."""
        return "; ".join([f"{self.line} -> {out}",
                          *(f"WARNING: {w}" for w in self.report.get("warnings", ()))])


@contextmanager
def nodes(prepared: Path, params: Params, near: Path) -> Iterator[Staged]:
    """The target type's roles, message graphs per edge type and the audit, by block tasks
    (gnnpipe/splitting/split.py, audit.py) on either engine, in a scratch folder beside
    ``near`` (data/split), removed after the caller wrote. A strategy that needs a whole
    relation in one process is refused on cluster.engine dask before any scratch."""
    cfg = params.split.node
    if params.cluster.engine == "dask" and cfg.strategy in WHOLE:
        raise ValueError(f"split.node.strategy={cfg.strategy} is not split on cluster.engine: "
                         "dask (METIS and the components need the target's whole relation in "
                         "one process, docs/scaling.md); use cluster.engine: local")
    graph = io.read_graph(prepared, mmap=True, stored_x=True)
    with scratch_beside(near) as scratch:
        with session(params.cluster) as client:
            split = split_node_blocks(client, graph, cfg, params.seed, scratch,
                                      prepared / "graph.pt")
            report = audit_node_blocks(client, graph, prepared / "graph.pt", split, cfg)
        if cfg.strategy == "public":  # the official train/val/test nodes left without a label
            report["label_coverage"]["public_split_unlabelled"] = split.dropped
        roles = open_memmap(split.roles)  # int8 codes of ROLES
        fitted = features.fit_split(params.features.normalize, graph, roles)
        report["features"] = features.audit_entry(params.features.normalize, fitted)
        typed = graph.layout == TYPED  # the line names the target type, checks per edge type
        line = ((f"{graph.target} nodes " if typed else "") + f"{report['sizes']} ({cfg.mode}), "
                "audit passed" + (" per edge type" if typed else ""))
        yield Staged(report, fitted, lambda out: io.write_split(
            out, graph, split.message_graphs(graph), {"mode": cfg.mode}, roles=roles), line)


def audit_node_blocks(client, graph: Graph, graph_file: Path, split: NodeBlocks,
                      cfg: NodeSplitParams) -> dict:
    """``audit.audit_nodes`` of ``split``'s files (the tasks read ``graph``'s arrays in this
    process, ``graph_file``'s on a client)."""
    message = {p: {e: (str(files[e][0]), str(files[e][1])) if e in files else None
                   for e in graph.edge_types} for p, files in split.message.items()}
    return audit.audit_nodes(
        client, graph_source(graph, graph_file if client is not None else None),
        str(split.roles), message, cfg.mode, timed=cfg.strategy == "time",
        separated=cfg.strategy == "cluster" and cfg.cluster == "component",
        future_visible=cfg.future_visible)


@contextmanager
def links(prepared: Path, params: Params, near: Path) -> Iterator[Staged]:
    """Edge hold-out of one edge type with its reverse, fixed (and hard) negatives, the link
    audit, on either engine: block tasks (gnnpipe/splitting/link_split.py, link_audit.py) in a
    scratch folder beside ``near`` (data/split), the pair tables streamed from it by the writer.
    Pairs always take their roles by hash (split.assign is the node task's)."""
    cfg = params.split.link
    graph = io.read_graph(prepared, mmap=True, stored_x=True)
    typed = graph.layout == TYPED
    with scratch_beside(near) as scratch:
        with session(params.cluster) as client:
            split = split_links(client, graph, prepared / "graph.pt", cfg, params.seed, scratch)
            hard = cfg.num_hard_negatives
            ranked = (hard_link_negatives(client, graph, split, hard, params.seed)
                      if hard else None)
            report = audit_links(client, graph, split, hard=bool(hard))
        if ranked is not None:
            note_ranked(report, ranked)
        if not typed:  # a typed graph does not say
            report["undirected"] = split.undirected
        report["negative_strategy"] = cfg.negative_strategy
        fitted = features.fit_split(params.features.normalize, graph, None)  # no train nodes
        report["features"] = features.audit_entry(params.features.normalize, fitted)

        meta = {"edge_type": report["edge_type"], "reverse_edge_type": report["reverse_edge_type"],
                **({} if typed else {"undirected": report["undirected"]}),
                "disjoint_train_ratio": cfg.disjoint_train_ratio,
                "negative_strategy": cfg.negative_strategy}  # meta.json of a link split

        def write(out: Path) -> None:  # the pair tables streamed from the scratch buckets
            io.stream_link_tables(out, split.edge_parts, split.negative_parts, hard=bool(hard))
            io.write_split(out, graph, split.message_graphs(graph), meta,
                           roles=np.full(graph.num_nodes_dict[graph.target],
                                         ROLES.index("unused"), dtype=np.int8),
                           num_negatives={"val": cfg.num_val_negatives,
                                          "test": cfg.num_test_negatives},
                           num_hard_negatives={"val": hard, "test": hard} if hard else None)
        pairs = (f"{report['edge_type']} (+ reverse {report['reverse_edge_type']}) pairs"
                 if typed else "link edges")
        yield Staged(report, fitted, write, f"{pairs} {report['sizes']}, audit passed")


RUNS = {"node": nodes, "link": links}  # dataset.task -> its run, on either engine
