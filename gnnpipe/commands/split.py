"""split: assign node roles (or hold out edges for dataset.task link), build per-phase message
graphs, audit them, write data/split. One run per task: a homogeneous graph is split and
audited as the one-type case of a typed graph (``Graph.homogeneous``); only the files keep
the layout of its types (gnnpipe/io/splits.py ``write_split``)."""

from gnnpipe import io
from gnnpipe.data import features
from gnnpipe.splitting import audit
from gnnpipe.config import load_params
from gnnpipe.splitting.link_split import hard_link_negatives, split_links
from gnnpipe.runtime.rng import make_rng
from gnnpipe.splitting.split import split_nodes
from gnnpipe.data.graph import TYPED, Graph, edge_type_name



def run(args):
    params = load_params(args.params)
    return RUNS[params.dataset.task](args, params)


def _audited(args, report: dict) -> None:
    """Writes the audit report, then fails the stage if any check failed (nothing else written)."""
    # a failed audit is published at once, alone: it says why the stage fails
    io.write_json(args.audit, report, now=not report["passed"])
    audit.raise_if_failed(report)


def _fit_features(params, report: dict, graph: Graph, roles=None) -> dict:
    """Fits features.normalize (gnnpipe/data/features.py): on the train nodes of ``roles`` (None:
    all nodes), per node type for typed files; notes the fit in the audit report."""
    kind = params.features.normalize
    fitted = (features.fit_typed(kind, graph.x, graph.target, roles) if graph.layout == TYPED
              else features.fit_graph(kind, graph.x[graph.target], roles))
    report["features"] = features.audit_entry(kind, fitted)
    return fitted


def _write_features(args, params, fitted: dict) -> None:
    """data/features, after data/split (so a failed audit writes neither)."""
    with io.atomic_dir(args.features) as out:
        features.write_transforms(out, params.features.normalize, fitted)


def _public_dropped(report: dict, cfg, dropped: dict) -> None:
    """strategy public: the official train/val/test nodes left unused for lack of a label."""
    if cfg.strategy == "public":
        report["label_coverage"]["public_split_unlabelled"] = dropped


def run_nodes(args, params) -> str:
    """The target type's nodes; message graphs per edge type (gnnpipe/splitting/split.py)."""
    graph = io.read_graph(args.prepared)
    typed = graph.layout == TYPED
    cfg = params.split.node
    node_split = split_nodes(graph, cfg, make_rng(params.seed, "split"))
    report = audit.audit_node_split(
        graph, node_split.roles, node_split.message_graphs, node_split.mode,
        timed=cfg.strategy == "time", separated=cfg.strategy == "cluster" and
        cfg.cluster == "component", future_visible=cfg.future_visible)
    fitted = _fit_features(params, report, graph, node_split.roles)
    _public_dropped(report, cfg, node_split.unlabelled_dropped)
    _audited(args, report)
    with io.atomic_dir(args.out) as out:
        io.write_split(out, graph, node_split.message_graphs,
                       {"mode": node_split.mode}, roles=node_split.roles)
    _write_features(args, params, fitted)
    nodes = f"{graph.target} nodes " if typed else ""
    per_type = " per edge type" if typed else ""
    return "; ".join([f"{nodes}{report['sizes']} ({node_split.mode}), audit passed{per_type} -> "
                      f"{args.out}", *(f"WARNING: {w}" for w in report.get("warnings", ()))])


def run_links(args, params) -> str:
    """Edge hold-out of one edge type with its reverse, fixed negatives, the link audit
    (gnnpipe/splitting/link_split.py)."""
    graph = io.read_graph(args.prepared)
    typed = graph.layout == TYPED
    cfg = params.split.link
    link = split_links(graph, cfg, make_rng(params.seed, "split"))
    # a stream of their own: the random negatives stay as they were without hard ones
    hard = (hard_link_negatives(graph, link, cfg.num_hard_negatives,
                                make_rng(params.seed, "split.hard"))
            if cfg.num_hard_negatives else None)
    report = audit.audit_link_split(graph, link.edge_type, link.edges, link.negatives,
                                    link.message_graphs, disjoint=cfg.disjoint_train_ratio > 0,
                                    hard=hard)
    if not typed:
        report["undirected"] = link.undirected
    report["negative_strategy"] = cfg.negative_strategy
    fitted = _fit_features(params, report, graph)  # link task: every node's features
    _audited(args, report)
    meta = {"edge_type": edge_type_name(link.edge_type),
            "reverse_edge_type": report["reverse_edge_type"],
            **({} if typed else {"undirected": link.undirected})}
    with io.atomic_dir(args.out) as out:
        io.write_split(out, graph, link.message_graphs, {
            **meta, "disjoint_train_ratio": cfg.disjoint_train_ratio,
            "negative_strategy": cfg.negative_strategy},
            edges=link.edges, negatives=link.negatives, hard_negatives=hard)
    _write_features(args, params, fitted)
    if typed:
        return (f"{report['edge_type']} (+ reverse {report['reverse_edge_type']}) pairs "
                f"{report['sizes']}, audit passed -> {args.out}")
    return f"link edges {report['sizes']}, audit passed -> {args.out}"


RUNS = {"node": run_nodes, "link": run_links}
