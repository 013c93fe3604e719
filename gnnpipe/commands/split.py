"""split: assign node roles, build per-phase message graphs, audit them, write data/split."""

from pathlib import Path

from gnnpipe import audit, io
from gnnpipe.config import load_params
from gnnpipe.rng import make_rng
from gnnpipe.split import split_nodes

HELP = "split nodes into train/val/test with leak-free message graphs; fails on a failed audit"


def add_arguments(parser):
    parser.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    parser.add_argument("--out", type=Path, default=Path("data/split"))
    parser.add_argument("--audit", type=Path, default=Path("metrics/split_audit.json"),
                        help="audit report; written even when the audit fails")


def run(args):
    params = load_params(args.params)
    graph = io.read_graph(args.prepared)
    node_split = split_nodes(graph, params.split.node, make_rng(params.seed, "split"))
    report = audit.audit_node_split(node_split.roles, graph.y.numpy(), graph.num_classes,
                                    node_split.message_graphs, graph.csr, node_split.mode)
    io.write_json(args.audit, report)
    audit.raise_if_failed(report)
    with io.atomic_dir(args.out) as out:
        io.write_split(out, node_split.roles, node_split.message_graphs,
                       {"task": "node", "mode": node_split.mode})
    return f"{report['sizes']} ({node_split.mode}), audit passed -> {args.out}"
