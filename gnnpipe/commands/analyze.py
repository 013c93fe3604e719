"""analyze: graph diagnostics (homophily, degrees, components, labels) and their warnings. A
typed graph is analyzed on its target type's own relation (paper cites paper), with per-type
counts added."""

from pathlib import Path

from gnnpipe import io
from gnnpipe.commands.variant import HOMOGENEOUS, TYPED, pick, split_variant
from gnnpipe.config import load_params

HELP = "graph diagnostics: homophily, degrees, components, labels; warns on low homophily"
PHASES = ("train", "val", "test")


def add_arguments(parser):
    parser.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    parser.add_argument("--split", type=Path, default=Path("data/split"),
                        help="adds per-phase message-graph figures")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/graph.json"))
    parser.add_argument("--degree-hist", type=Path, default=Path("metrics/degree_hist.csv"),
                        help="log2 degree histogram for `dvc plots`")


def run(args):
    params = load_params(args.params)
    kind, task = split_variant(args.split)
    return pick(RUNS, kind, task, "analyze")(args, params)


def _homogeneous_graph(args):
    graph = io.read_graph(args.prepared, mmap=True)
    roles = io.read_split_roles(args.split)
    if roles.size != graph.num_nodes:
        raise ValueError(f"{args.split}: {roles.size} split roles for {graph.num_nodes} nodes; "
                         "re-run the split stage")
    return graph, roles


def analyze_nodes(args, params) -> str:
    from gnnpipe.analyze import analyze_graph

    graph, roles = _homogeneous_graph(args)
    message_graphs = io.read_message_graphs(args.split, graph.num_nodes)
    return _write(args, *analyze_graph(graph, params.analyze, message_graphs, roles))


def analyze_links(args, params) -> str:
    """A link split has no node roles: the per-phase node figures mean nothing there."""
    from gnnpipe.analyze import analyze_graph

    graph, _ = _homogeneous_graph(args)
    return _write(args, *analyze_graph(graph, params.analyze))


def analyze_typed_nodes(args, params) -> str:
    from gnnpipe.analyze import analyze_graph
    from gnnpipe.commands.inputs import read_typed
    from gnnpipe.io.hetero import read_hetero_roles

    typed = read_typed(args)
    graph, own = typed.graph, typed.graph.self_relation()
    roles = read_hetero_roles(args.split, graph)
    report, histogram = analyze_graph(graph.target_graph(), params.analyze,
                                      {p: typed.graphs[p][own] for p in PHASES}, roles)
    return _typed_write(args, typed, report, histogram)


def analyze_typed_links(args, params) -> str:
    from gnnpipe.analyze import analyze_graph
    from gnnpipe.commands.inputs import read_typed

    typed = read_typed(args)
    return _typed_write(args, typed, *analyze_graph(typed.graph.target_graph(), params.analyze))


def _typed_write(args, typed, report: dict, histogram: list) -> str:
    from gnnpipe.typed_graph import edge_type_name, type_summary

    relation = edge_type_name(typed.graph.self_relation())
    report["analyzed_relation"] = relation
    report["hetero"] = type_summary(typed.graph)
    return _write(args, report, histogram, prefix=f"{relation}: ")


def _write(args, report: dict, histogram: list, prefix: str = "") -> str:
    io.write_json(args.metrics, report)
    io.write_csv(args.degree_hist, histogram)
    h = report["homophily"]
    summary = (f"{prefix}edge homophily {h['edge']}, adjusted {h['adjusted']}, "
               f"{report['components']['count']} components -> {args.metrics}")
    return "; ".join([summary, *(f"WARNING: {w}" for w in report["warnings"])])


RUNS = {(HOMOGENEOUS, "node"): analyze_nodes, (HOMOGENEOUS, "link"): analyze_links,
        (TYPED, "node"): analyze_typed_nodes, (TYPED, "link"): analyze_typed_links}
