"""split: assign node roles (or hold out edges for dataset.task link), build per-phase message
graphs, audit them, write data/split."""

from pathlib import Path

from gnnpipe import audit, io
from gnnpipe.config import load_params
from gnnpipe.io import hetero as hio
from gnnpipe.link_split import split_links
from gnnpipe.rng import make_rng
from gnnpipe.split import split_nodes

HELP = ("split nodes (or edges, dataset.task link) into train/val/test with leak-free message "
        "graphs; fails on a failed audit")


def add_arguments(parser):
    parser.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    parser.add_argument("--out", type=Path, default=Path("data/split"))
    parser.add_argument("--audit", type=Path, default=Path("metrics/split_audit.json"),
                        help="audit report; written even when the audit fails")


def run(args):
    params = load_params(args.params)
    if hio.is_hetero(args.prepared):  # typed nodes and edges: gnnpipe/hetero/stages.py
        from gnnpipe.hetero import stages
        return stages.split(args, params)
    graph = io.read_graph(args.prepared)
    if params.dataset.task == "link":
        return _run_link(args, params, graph)
    cfg = params.split.node
    node_split = split_nodes(graph, cfg, make_rng(params.seed, "split"))
    timed = cfg.strategy == "time" and graph.timestamps is not None
    report = audit.audit_node_split(
        node_split.roles, graph.y.numpy(), graph.num_classes, node_split.message_graphs,
        graph.csr, node_split.mode, timestamps=graph.timestamps.numpy() if timed else None,
        separated=cfg.strategy == "cluster" and cfg.cluster == "component")
    io.write_json(args.audit, report)
    audit.raise_if_failed(report)
    with io.atomic_dir(args.out) as out:
        io.write_split(out, node_split.roles, node_split.message_graphs,
                       {"task": "node", "mode": node_split.mode})
    return f"{report['sizes']} ({node_split.mode}), audit passed -> {args.out}"


def _run_link(args, params, graph):
    """dataset.task link: edge hold-out, fixed negatives, the link audit (gnnpipe/link_split.py)."""
    cfg = params.split.link
    link = split_links(graph.csr, cfg, make_rng(params.seed, "split"))
    disjoint = cfg.disjoint_train_ratio > 0
    report = audit.audit_link_split(graph.csr, link.edges, link.message_graphs, link.negatives,
                                    disjoint=disjoint)
    report.update(undirected=link.undirected, negative_strategy=cfg.negative_strategy)
    io.write_json(args.audit, report)
    audit.raise_if_failed(report)
    with io.atomic_dir(args.out) as out:
        io.write_link_split(out, link.edges, link.negatives, link.message_graphs, graph.num_nodes,
                            {"undirected": link.undirected, "disjoint_train_ratio":
                             cfg.disjoint_train_ratio, "negative_strategy": cfg.negative_strategy})
    return f"link edges {report['sizes']}, audit passed -> {args.out}"
