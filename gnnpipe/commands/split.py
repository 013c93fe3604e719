"""split: assign node roles (or hold out edges for dataset.task link), build per-phase message
graphs, audit them, write data/split. One run per task: a homogeneous graph is split and
audited as the one-type case of a typed graph (``Graph.homogeneous``); only the files keep
the layout of its types (gnnpipe/io/splits.py ``write_split``). With ``cluster.engine: dask``
both tasks run by blocks (gnnpipe/splitting/dask_split.py, dask_link.py and their audits), the
files of ``split.assign: hash`` on the local engine, byte for byte."""

import numpy as np

from gnnpipe import io
from gnnpipe.commands.variant import prepared_layout
from gnnpipe.config import load_params
from gnnpipe.data import features
from gnnpipe.data.graph import TYPED, Graph, edge_type_name
from gnnpipe.io.blocks import open_memmap, scratch_beside
from gnnpipe.io.common import SPLIT_ROLES
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


def run(args):
    params = load_params(args.params)
    return RUNS[params.cluster.engine, params.dataset.task](args, params)


def run_nodes(args, params) -> str:
    """The target type's nodes; message graphs per edge type (gnnpipe/splitting/split.py)."""
    graph = io.read_graph(args.prepared)
    cfg = params.split.node
    node_split = split_nodes(graph, cfg, make_rng(params.seed, "split"), _hash_seed(params))
    report = audit.audit_node_split(
        graph, node_split.roles, node_split.message_graphs, node_split.mode,
        timed=cfg.strategy == "time", separated=cfg.strategy == "cluster" and
        cfg.cluster == "component", future_visible=cfg.future_visible)
    fitted = _fitted(params, report, features.fit_split(params.features.normalize, graph,
                                                        node_split.roles))
    if cfg.strategy == "public":  # the official train/val/test nodes left without a label
        report["label_coverage"]["public_split_unlabelled"] = node_split.unlabelled_dropped
    _publish(args, params, report, fitted, lambda out: io.write_split(
        out, graph, node_split.message_graphs, {"mode": node_split.mode}, roles=node_split.roles))
    return _node_summary(args, graph, report, node_split.mode)


def run_links(args, params) -> str:
    """Edge hold-out of one edge type with its reverse, fixed negatives, the link audit
    (gnnpipe/splitting/link_split.py)."""
    graph = io.read_graph(args.prepared)
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
    if not typed:
        report["undirected"] = link.undirected
    report["negative_strategy"] = cfg.negative_strategy
    # link task: every node's features
    fitted = _fitted(params, report, features.fit_split(params.features.normalize, graph, None))
    _publish(args, params, report, fitted, lambda out: io.write_split(
        out, graph, link.message_graphs, link_meta(report, cfg, typed), edges=link.edges,
        negatives=link.negatives, hard_negatives=hard))
    pairs = (f"{report['edge_type']} (+ reverse {report['reverse_edge_type']}) pairs" if typed
             else "link edges")
    return _with_warnings(f"{pairs} {report['sizes']}, audit passed -> {args.out}", report)


def run_nodes_on_blocks(args, params) -> str:
    """The node split of ``run_nodes`` on cluster.engine dask: roles, message graphs and audit
    by blocks of rows (scratch beside data/split), nothing written on a failed audit."""
    cfg = params.split.node
    graph = _mapped_graph(args, params, cfg)
    with scratch_beside(args.out) as scratch:
        with session(params.cluster) as client:
            split = split_node_blocks(client, args.prepared / "graph.pt",
                                      graph.num_nodes_dict[graph.target], graph.num_classes,
                                      cfg, params.seed, scratch)
            report = audit_node_blocks(client, graph, args.prepared / "graph.pt", split, cfg.mode)
        roles = open_memmap(split.roles)
        kind = params.features.normalize
        fitted = _fitted(params, report, {"": features.fit(kind, graph.x[graph.target],
                                                           np.flatnonzero(roles == 0))})
        _publish(args, params, report, fitted, lambda out: io.write_split(
            out, graph, split.message_graphs(graph), {"mode": cfg.mode}, roles=roles))
    return _node_summary(args, graph, report, cfg.mode)


def run_links_on_blocks(args, params) -> str:
    """The link split of ``run_links`` on cluster.engine dask (homogeneous graphs): held-out
    pairs, message graphs, negatives and audit by blocks, the tables streamed."""
    cfg = params.split.link
    graph = _mapped_graph(args, params)
    n, e = graph.num_nodes_dict[graph.target], graph.link_edge_type
    with scratch_beside(args.out) as scratch:
        with session(params.cluster) as client:
            split = split_link_blocks(client, args.prepared / "graph.pt", n, cfg, params.seed,
                                      scratch)
            report = audit_link_blocks(client, args.prepared / "graph.pt", n, split)
        report.update(edge_type=edge_type_name(e), reverse_edge_type=edge_type_name(e),
                      undirected=split.undirected, negative_strategy=cfg.negative_strategy)
        # link task: every node's features
        fitted = _fitted(params, report, features.fit_split(params.features.normalize, graph,
                                                            None))

        def write(out):  # the pair tables streamed from the scratch buckets
            io.stream_link_tables(out, split.edge_parts, split.negative_parts)
            io.write_split_files(out, graph, split.message_graphs(e), link_meta(report, cfg, False),
                                 roles=np.full(n, SPLIT_ROLES.index("unused"), dtype=np.int8),
                                 num_negatives={"val": cfg.num_val_negatives,
                                                "test": cfg.num_test_negatives})
        _publish(args, params, report, fitted, write)
    return f"link edges {report['sizes']}, audit passed -> {args.out}"


RUNS = {("local", "node"): run_nodes, ("local", "link"): run_links,
        ("dask", "node"): run_nodes_on_blocks, ("dask", "link"): run_links_on_blocks}


def _hash_seed(params) -> int | None:
    """split.assign: hash draws from keys of (seed, id); permutation from the stage's rng."""
    return params.seed if params.split.assign == "hash" else None


def _mapped_graph(args, params, node=None) -> Graph:
    """The prepared graph for the block split, after its refusals (``node``: the node task's
    params): checked here once, then memory-mapped (x in its stored dtype, read in row
    blocks)."""
    refuse_unsupported(params.split.assign, prepared_layout(args.prepared), node)
    return io.read_graph(args.prepared, mmap=True, stored_x=True)


def _fitted(params, report: dict, fitted: dict) -> dict:
    """``fitted`` (features.normalize's transforms, gnnpipe/data/features.py), noted in the
    audit report."""
    report["features"] = features.audit_entry(params.features.normalize, fitted)
    return fitted


def _publish(args, params, report: dict, fitted: dict, write_split) -> None:
    """The audit report, then (every check passed) data/split by ``write_split(folder)`` and
    data/features after it, so a failed audit writes neither."""
    # a failed audit is published at once, alone: it says why the stage fails
    io.write_json(args.audit, report, now=not report["passed"])
    audit.raise_if_failed(report)
    with io.atomic_dir(args.out) as out:
        write_split(out)
    with io.atomic_dir(args.features) as out:
        features.write_transforms(out, params.features.normalize, fitted)


def _node_summary(args, graph: Graph, report: dict, mode: str) -> str:
    typed = graph.layout == TYPED
    nodes = f"{graph.target} nodes " if typed else ""
    per_type = " per edge type" if typed else ""
    return _with_warnings(f"{nodes}{report['sizes']} ({mode}), audit passed{per_type} -> "
                          f"{args.out}", report)


def _with_warnings(line: str, report: dict) -> str:
    """The stage's last line and the audit report's warnings after it."""
    return "; ".join([line, *(f"WARNING: {w}" for w in report.get("warnings", ()))])
