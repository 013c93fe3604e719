"""The split stage's four runs, one per (cluster.engine, dataset.task): each reads the prepared
graph, splits it, audits the split and fits features.normalize's transforms, and yields what
the command publishes (gnnpipe/commands/split.py) as a ``Staged``.

A homogeneous graph is split and audited as the one-type case of a typed graph
(``Graph.homogeneous``); only the files keep the layout of its types (gnnpipe/io/splits.py
``write_split``). With ``cluster.engine: dask`` both tasks run by blocks (dask_split.py,
dask_link.py and their audits) in a scratch folder beside data/split, and write the files of
``split.assign: hash`` on the local engine, byte for byte. Each run is a context manager: what
its writer reads (the block files) lives until the caller has written.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from gnnpipe import io
from gnnpipe.commands.variant import prepared_layout
from gnnpipe.config import NodeSplitParams
from gnnpipe.config.schema import Params
from gnnpipe.data import features
from gnnpipe.data.features import FeatureTransform
from gnnpipe.data.graph import ROLES, TYPED, Graph, edge_type_name
from gnnpipe.io.blocks import open_memmap, scratch_beside
from gnnpipe.runtime.engine import session
from gnnpipe.runtime.rng import make_rng
from gnnpipe.splitting import audit
from gnnpipe.splitting.dask_audit import audit_node_blocks
from gnnpipe.splitting.dask_link import split_link_blocks
from gnnpipe.splitting.dask_link_audit import audit_link_blocks
from gnnpipe.splitting.dask_split import refuse_unsupported, split_node_blocks
from gnnpipe.splitting.hard_negatives import note_ranked
from gnnpipe.splitting.link_split import hard_link_negatives, link_meta, split_links
from gnnpipe.splitting.split import split_nodes


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
def local_nodes(prepared: Path, params: Params, near: Path) -> Iterator[Staged]:
    """The target type's nodes; message graphs per edge type (gnnpipe/splitting/split.py).
    ``near``: unused (no scratch)."""
    graph = io.read_graph(prepared)
    cfg = params.split.node
    node_split = split_nodes(graph, cfg, make_rng(params.seed, "split"), _hash_seed(params))
    report = audit.audit_node_split(
        graph, node_split.roles, node_split.message_graphs, node_split.mode,
        timed=cfg.strategy == "time", separated=cfg.strategy == "cluster" and
        cfg.cluster == "component", future_visible=cfg.future_visible)
    if cfg.strategy == "public":  # the official train/val/test nodes left without a label
        report["label_coverage"]["public_split_unlabelled"] = node_split.unlabelled_dropped
    fitted = features.fit_split(params.features.normalize, graph, node_split.roles)
    yield _node_staged(params, graph, report, fitted, node_split.mode, lambda out: io.write_split(
        out, graph, node_split.message_graphs, {"mode": node_split.mode}, roles=node_split.roles))


@contextmanager
def local_links(prepared: Path, params: Params, near: Path) -> Iterator[Staged]:
    """Edge hold-out of one edge type with its reverse, fixed negatives, the link audit
    (gnnpipe/splitting/link_split.py). ``near``: unused (no scratch)."""
    graph = io.read_graph(prepared)
    typed = graph.layout == TYPED
    cfg = params.split.link
    link = split_links(graph, cfg, make_rng(params.seed, "split"), _hash_seed(params))
    # a stream of their own: the random negatives stay as they were without hard ones
    hard, ranked = (hard_link_negatives(graph, link, cfg.num_hard_negatives,
                                        make_rng(params.seed, "split.hard"))
                    if cfg.num_hard_negatives else (None, None))
    report = audit.audit_link_split(graph, link.edge_type, link.edges, link.negatives,
                                    link.message_graphs, disjoint=cfg.disjoint_train_ratio > 0,
                                    hard=hard)
    if ranked is not None:
        note_ranked(report, ranked)
    yield _link_staged(params, graph, report, None if typed else link.undirected,
                       lambda out: io.write_split(
                           out, graph, link.message_graphs, link_meta(report, cfg, typed),
                           edges=link.edges, negatives=link.negatives, hard_negatives=hard))


@contextmanager
def dask_nodes(prepared: Path, params: Params, near: Path) -> Iterator[Staged]:
    """``local_nodes`` by blocks of rows on cluster.engine dask: roles, message graphs and
    audit in a scratch folder beside ``near`` (data/split), removed after the caller wrote."""
    cfg = params.split.node
    graph = _mapped_graph(prepared, params, cfg)
    with scratch_beside(near) as scratch:
        with session(params.cluster) as client:
            split = split_node_blocks(client, prepared / "graph.pt",
                                      graph.num_nodes_dict[graph.target], graph.num_classes,
                                      cfg, params.seed, scratch)
            report = audit_node_blocks(client, graph, prepared / "graph.pt", split, cfg.mode)
        roles = open_memmap(split.roles)  # int8 codes: 0 is train
        fitted = {"": features.fit(params.features.normalize, graph.x[graph.target],
                                   np.flatnonzero(roles == 0))}
        yield _node_staged(params, graph, report, fitted, cfg.mode, lambda out: io.write_split(
            out, graph, split.message_graphs(graph), {"mode": cfg.mode}, roles=roles))


@contextmanager
def dask_links(prepared: Path, params: Params, near: Path) -> Iterator[Staged]:
    """``local_links`` on cluster.engine dask (homogeneous graphs): held-out pairs, message
    graphs, negatives and audit by blocks in a scratch folder beside ``near`` (data/split), the
    pair tables streamed from it by the writer."""
    cfg = params.split.link
    graph = _mapped_graph(prepared, params)
    n, e = graph.num_nodes_dict[graph.target], graph.link_edge_type
    with scratch_beside(near) as scratch:
        with session(params.cluster) as client:
            split = split_link_blocks(client, prepared / "graph.pt", n, cfg, params.seed,
                                      scratch)
            report = audit_link_blocks(client, prepared / "graph.pt", n, split)
        report.update(edge_type=edge_type_name(e), reverse_edge_type=edge_type_name(e))

        def write(out: Path) -> None:  # the pair tables streamed from the scratch buckets
            io.stream_link_tables(out, split.edge_parts, split.negative_parts)
            io.write_split_files(out, graph, split.message_graphs(e), link_meta(report, cfg, False),
                                 roles=np.full(n, ROLES.index("unused"), dtype=np.int8),
                                 num_negatives={"val": cfg.num_val_negatives,
                                                "test": cfg.num_test_negatives})
        yield _link_staged(params, graph, report, split.undirected, write)


def _hash_seed(params: Params) -> int | None:
    """split.assign: hash draws from keys of (seed, id); permutation from the stage's rng."""
    return params.seed if params.split.assign == "hash" else None


def _mapped_graph(prepared: Path, params: Params, node: NodeSplitParams | None = None) -> Graph:
    """The prepared graph for the block split, after its refusals (``node``: the node task's
    params): checked here once, then memory-mapped (x in its stored dtype, read in row
    blocks)."""
    refuse_unsupported(params.split.assign, prepared_layout(prepared), node)
    return io.read_graph(prepared, mmap=True, stored_x=True)


def _node_staged(params: Params, graph: Graph, report: dict, fitted: dict[str, FeatureTransform],
                 mode: str, write: Callable[[Path], None]) -> Staged:
    """Either engine's node split: ``fitted`` noted in ``report``, the summary line."""
    report["features"] = features.audit_entry(params.features.normalize, fitted)
    typed = graph.layout == TYPED
    nodes = f"{graph.target} nodes " if typed else ""
    per_type = " per edge type" if typed else ""
    return Staged(report, fitted, write,
                  f"{nodes}{report['sizes']} ({mode}), audit passed{per_type}")


def _link_staged(params: Params, graph: Graph, report: dict, undirected: bool | None,
                 write: Callable[[Path], None]) -> Staged:
    """Either engine's link split: ``undirected`` (None: a typed graph, which does not say)
    and the negative strategy noted in ``report``, every node's features fitted (the link task
    has no train nodes), the summary line."""
    if undirected is not None:
        report["undirected"] = undirected
    report["negative_strategy"] = params.split.link.negative_strategy
    fitted = features.fit_split(params.features.normalize, graph, None)
    report["features"] = features.audit_entry(params.features.normalize, fitted)
    pairs = (f"{report['edge_type']} (+ reverse {report['reverse_edge_type']}) pairs"
             if graph.layout == TYPED else "link edges")
    return Staged(report, fitted, write, f"{pairs} {report['sizes']}, audit passed")
