"""analyze: graph diagnostics (homophily, degrees, components, labels) and their warnings, on
the graph read as typed (either layout). The diagnostics are of the target type over its own
relation (a homogeneous graph: the graph itself; paper cites paper); typed files add per-type
counts and the relation analyzed. Without an own relation (users that only buy items)
homophily is marked not applicable, with the reason, and degrees / components still
reported. The bottleneck measure: Balanced Forman curvature of a seeded sample of the
relation's edges (analyze.curvature), over its undirected simple graph.

One algorithm on both engines: block tasks (in this process on ``cluster.engine: local``, on
the Dask workers otherwise) copy the own relation's rows from the prepared files into block
files, in a temp folder beside the metrics, and the report (gnnpipe/graphops/analyze.py) and
the curvature sample (gnnpipe/graphops/reach.py) come from block tasks reading them by rows.
A target without an own relation is computed here, its components those of the whole typed
graph, built in memory (PyG's to_homogeneous ids) and labelled there (``connected_components``)."""

import functools

import numpy as np

from gnnpipe import io
from gnnpipe.graphops.analyze import (BLOCK_ROWS, analyze_blocks, component_stats,
                                      connected_components, degree_histogram, degree_stats,
                                      graph_report, row_counts)
from gnnpipe.splitting.inputs import read_typed
from gnnpipe.commands.variant import split_task
from gnnpipe.config import load_params
from gnnpipe.graphops.reach import edge_curvature
from gnnpipe.io.blocks import scratch_beside
from gnnpipe.io.csr_blocks import (build_block_graph, stored_message_relation,
                                   stored_prepared_relation)
from gnnpipe.runtime.engine import run_blocks, session
from gnnpipe.runtime.rng import make_rng
from gnnpipe.data.graph import TYPED, edge_type_name, type_summary
from gnnpipe.data.edges import homogeneous_csr
from gnnpipe.io.common import PHASES


def run(args) -> str:
    """Node task: the per-phase figures over each phase's message graph and the node roles; a
    link split has no node roles, so the per-phase node figures mean nothing there."""
    params = load_params(args.params)
    typed = read_typed(args, mmap=True)
    graph, own = typed.graph, typed.graph.own_relation()
    if own is None:
        report, histogram = _without_own_relation(graph, params.analyze)
    else:
        # the block files lie on disk beside the output, where a real cluster's workers see them
        with session(params.cluster) as client, scratch_beside(args.metrics) as folder:
            report, histogram = _by_blocks(args, params, typed, own, client, folder)
    if graph.layout != TYPED:
        return _write(args, report, histogram)
    relation = None if own is None else edge_type_name(own)
    report["analyzed_relation"] = relation
    report["types"] = type_summary(graph)
    prefix = (f"{relation}: " if relation else
              f"{graph.target} (homophily not applicable: no "
              f"{graph.target}__*__{graph.target} relation): ")
    return _write(args, report, histogram, prefix=prefix)


def _by_blocks(args, params, typed, own, client, folder) -> tuple[dict, list]:
    """The report of the own relation and its curvature sample, from block tasks over the block
    files that tasks build from the prepared files' rows (in the temp ``folder``)."""
    stored = stored_prepared_relation(args.prepared, own)
    graph = typed.graph
    build_block_graph(folder, stored, functools.partial(run_blocks, client), BLOCK_ROWS)
    report, histogram = analyze_blocks(client, folder, graph.y.numpy(), graph.num_classes,
                                       params.analyze, *_phases(args, typed, own))
    if params.analyze.curvature.sample_edges > 0:
        report["curvature"] = edge_curvature(client, folder, stored.num_nodes,
                                             params.analyze.curvature,
                                             make_rng(params.seed, "analyze-curvature"))
    return report, histogram


def _phases(args, typed, own) -> tuple:
    """``(message_graphs, roles, train)`` of the own relation for a node split (``train``: its
    train-phase graph where the split stored it); () for a link split."""
    if split_task(args.split) != "node":
        return ()
    return ({p: typed.graphs[p][own] for p in PHASES},
            io.read_typed_role_codes(args.split, typed.graph),
            stored_message_relation(args.split, own))


def _without_own_relation(graph, cfg) -> tuple[dict, list]:
    """A target type with no relation of its own (users that only buy items): homophily is not
    applicable and says why; degrees are the target's in-degrees summed over every edge type,
    components those of the whole typed graph (every node type, to_homogeneous ids)."""
    n, y = graph.num_nodes_dict[graph.target], graph.y.numpy()
    empty = np.zeros(0, dtype=np.int64)
    counts = row_counts(np.zeros(n + 1, dtype=np.int64), y, empty, graph.num_classes)
    received = np.zeros(n, dtype=np.int64)  # (N_target,) in-edges of any type
    for edge_type, csr in graph.csr.items():
        if edge_type[2] == graph.target:
            received += csr.degrees().numpy()
    components = connected_components(homogeneous_csr(graph.sizes(), graph.csr))
    # labels, classes and the report's shape: the target's nodes with no edges among them
    report, _ = graph_report(n, y, graph.num_classes, counts, {}, None, cfg)
    reason = (f"no edge type joins {graph.target!r} nodes to {graph.target!r} nodes, so "
              "same-label neighbours are undefined")
    degree = degree_stats(received)
    report.update(
        edges=int(received.sum()), degree=degree, low_homophily=False,
        homophily={"edge": None, "node": None, "class_insensitive": None, "adjusted": None,
                   "per_class": [None] * graph.num_classes, "applicable": False,
                   "reason": reason},
        components={**component_stats(components), "over": "every node type"})
    report["warnings"] = [] if degree["isolated_fraction"] <= cfg.max_isolated_fraction else [
        f"{degree['isolated_fraction']:.1%} of {graph.target} nodes have no in-edges of any "
        f"type (above analyze.max_isolated_fraction={cfg.max_isolated_fraction}); for them a "
        "GNN is an MLP"]
    return report, degree_histogram(received)


def _write(args, report: dict, histogram: list, prefix: str = "") -> str:
    io.write_json(args.metrics, report)
    io.write_csv(args.degree_hist, histogram)
    h = report["homophily"]
    measured = (f"edge homophily {h['edge']}, adjusted {h['adjusted']}, "
                if h.get("applicable", True) else "")
    summary = (f"{prefix}{measured}"
               f"{report['components']['count']} components -> {args.metrics}")
    return "; ".join([summary, *(f"WARNING: {w}" for w in report["warnings"])])
