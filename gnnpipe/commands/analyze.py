"""analyze: graph diagnostics (homophily, degrees, components, labels) and their warnings."""

from pathlib import Path

from gnnpipe import io
from gnnpipe.analyze import analyze_graph
from gnnpipe.config import load_params
from gnnpipe.io import hetero as hio

HELP = "graph diagnostics: homophily, degrees, components, labels; warns on low homophily"


def add_arguments(parser):
    parser.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    parser.add_argument("--split", type=Path, default=Path("data/split"),
                        help="adds per-phase message-graph figures")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/graph.json"))
    parser.add_argument("--degree-hist", type=Path, default=Path("metrics/degree_hist.csv"),
                        help="log2 degree histogram for `dvc plots`")


def run(args):
    params = load_params(args.params)
    if hio.is_hetero(args.prepared):  # typed nodes and edges: gnnpipe/hetero/stages.py
        from gnnpipe.hetero import stages
        return stages.analyze(args, params)
    graph = io.read_graph(args.prepared, mmap=True)
    roles = io.read_split_roles(args.split)
    if roles.size != graph.num_nodes:
        raise ValueError(f"{args.split}: {roles.size} split roles for {graph.num_nodes} nodes; "
                         "re-run the split stage")
    if io.read_split_meta(args.split).get("task", "node") == "node":
        message_graphs = io.read_message_graphs(args.split, graph.num_nodes)
        report, histogram = analyze_graph(graph, params.analyze, message_graphs, roles)
    else:  # a link split has no node roles: the per-phase node figures mean nothing there
        report, histogram = analyze_graph(graph, params.analyze)
    io.write_json(args.metrics, report)
    io.write_csv(args.degree_hist, histogram)
    h = report["homophily"]
    summary = (f"edge homophily {h['edge']}, adjusted {h['adjusted']}, "
               f"{report['components']['count']} components -> {args.metrics}")
    return "; ".join([summary, *(f"WARNING: {w}" for w in report["warnings"])])
