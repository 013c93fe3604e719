"""split: assign node roles (or hold out edges for dataset.task link), build per-phase message
graphs, audit them, write data/split. Typed graphs split the target type's nodes, or one edge
type with its reverse, and are audited per node type and edge type."""


from gnnpipe import audit, io
from gnnpipe.commands.variant import HOMOGENEOUS, TYPED, pick, prepared_kind
from gnnpipe.config import load_params
from gnnpipe.io import hetero as hio
from gnnpipe.link_split import split_links
from gnnpipe.rng import make_rng
from gnnpipe.split import split_nodes

HELP = ("split nodes (or edges, dataset.task link) into train/val/test with leak-free message "
        "graphs; fails on a failed audit")


def run(args):
    params = load_params(args.params)
    kind = prepared_kind(args.prepared)
    return pick(RUNS, kind, params.dataset.task, "split")(args, params)


def _audited(args, report: dict) -> None:
    """Writes the audit report, then fails the stage if any check failed (nothing else written)."""
    # a failed audit is published at once, alone: it says why the stage fails
    io.write_json(args.audit, report, now=not report["passed"])
    audit.raise_if_failed(report)


def _fit_features(params, report: dict, x, roles=None, target=None) -> dict:
    """Fits features.normalize (gnnpipe/features.py): on the train nodes of ``roles`` (None:
    all nodes), per node type when ``x`` is a dict; notes the fit in the audit report."""
    from gnnpipe import features

    kind = params.features.normalize
    fitted = (features.fit_typed(kind, x, target, roles) if isinstance(x, dict)
              else features.fit_graph(kind, x, roles))
    report["features"] = features.audit_entry(kind, fitted)
    return fitted


def _write_features(args, params, fitted: dict) -> None:
    """data/features, after data/split (so a failed audit writes neither)."""
    from gnnpipe.features import write_transforms

    with io.atomic_dir(args.features) as out:
        write_transforms(out, params.features.normalize, fitted)


def _public_dropped(report: dict, cfg, dropped: dict) -> None:
    """strategy public: the official train/val/test nodes left unused for lack of a label."""
    if cfg.strategy == "public":
        report["label_coverage"]["public_split_unlabelled"] = dropped


def run_nodes(args, params) -> str:
    graph = io.read_graph(args.prepared)
    cfg = params.split.node
    node_split = split_nodes(graph, cfg, make_rng(params.seed, "split"))
    timed = cfg.strategy == "time" and graph.timestamps is not None
    report = audit.audit_node_split(
        node_split.roles, graph.y.numpy(), graph.num_classes, node_split.message_graphs,
        graph.csr, node_split.mode, timestamps=graph.timestamps.numpy() if timed else None,
        separated=cfg.strategy == "cluster" and cfg.cluster == "component",
        future_visible=cfg.future_visible)
    fitted = _fit_features(params, report, graph.x, node_split.roles)
    _public_dropped(report, cfg, node_split.unlabelled_dropped)
    _audited(args, report)
    with io.atomic_dir(args.out) as out:
        io.write_split(out, node_split.roles, node_split.message_graphs,
                       {"task": "node", "mode": node_split.mode})
    _write_features(args, params, fitted)
    return "; ".join([f"{report['sizes']} ({node_split.mode}), audit passed -> {args.out}",
                      *(f"WARNING: {w}" for w in report.get("warnings", ()))])


def run_links(args, params) -> str:
    """Edge hold-out, fixed negatives, the link audit (gnnpipe/link_split.py)."""
    graph = io.read_graph(args.prepared)
    cfg = params.split.link
    link = split_links(graph.csr, cfg, make_rng(params.seed, "split"))
    report = audit.audit_link_split(graph.csr, link.edges, link.message_graphs, link.negatives,
                                    disjoint=cfg.disjoint_train_ratio > 0)
    report.update(undirected=link.undirected, negative_strategy=cfg.negative_strategy)
    fitted = _fit_features(params, report, graph.x)  # link task: every node's features
    _audited(args, report)
    with io.atomic_dir(args.out) as out:
        io.write_link_split(out, link.edges, link.negatives, link.message_graphs, graph.num_nodes,
                            {"undirected": link.undirected, "disjoint_train_ratio":
                             cfg.disjoint_train_ratio, "negative_strategy": cfg.negative_strategy})
    _write_features(args, params, fitted)
    return f"link edges {report['sizes']}, audit passed -> {args.out}"


def run_typed_nodes(args, params) -> str:
    """The target type's nodes; message graphs and audit per edge type (gnnpipe/hetero/split.py)."""
    from gnnpipe.hetero.audit import audit_hetero_node_split
    from gnnpipe.hetero.split import split_hetero_nodes

    graph = hio.read_hetero_graph(args.prepared)
    cfg = params.split.node
    node_split = split_hetero_nodes(graph, cfg, make_rng(params.seed, "split"))
    graphs = _typed_time_graphs(graph, node_split)
    report = audit_hetero_node_split(graph, node_split.roles, graphs, node_split.mode)
    times = graph.node_time.get(graph.target)
    if cfg.strategy == "time" and times is not None:
        _typed_time_check(report, graph, node_split.roles, times.numpy(), graphs,
                          cfg.future_visible)
    fitted = _fit_features(params, report, graph.x, node_split.roles, graph.target)
    _public_dropped(report, cfg, node_split.unlabelled_dropped)
    _audited(args, report)
    with io.atomic_dir(args.out) as out:
        hio.write_hetero_split(out, graph, graphs,
                               {"task": "node", "mode": node_split.mode}, roles=node_split.roles)
    _write_features(args, params, fitted)
    return "; ".join([f"{graph.target} nodes {report['sizes']} ({node_split.mode}), audit "
                      f"passed per edge type -> {args.out}",
                      *(f"WARNING: {w}" for w in report.get("warnings", ()))])


def _typed_time_graphs(graph, node_split) -> dict:
    """Mode time: the typed phase graphs cut by ``phase_visible`` on the target type, so later
    unlabelled targets are hidden too (hetero/split.py restricts by role only); else as split."""
    if node_split.mode != "time":
        return node_split.message_graphs
    from gnnpipe.graph import UNLABELLED
    from gnnpipe.hetero.split import restrict_to
    from gnnpipe.split import phase_visible

    seen = phase_visible(node_split.roles, "time", graph.y.numpy() != UNLABELLED,
                         graph.node_time[graph.target].numpy())
    return {"train": restrict_to(graph, graph.csr, seen["train"]),
            "val": restrict_to(graph, graph.csr, seen["val"]), "test": graph.csr}


def _typed_time_check(report: dict, graph, roles, times, graphs, future_visible: bool) -> None:
    """Adds ``time_respecting`` over every edge type's target-type endpoints to a typed report."""
    endpoints = {phase: [(csr.indices if s == graph.target else None,
                          csr.targets() if d == graph.target else None)
                         for (s, _, d), csr in graphs[phase].items()] for phase in ("train", "val")}
    entry = audit.time_respecting_check(roles, times, endpoints=endpoints,
                                        future_visible=future_visible)
    report["checks"].append(entry)
    report["passed"] = report["passed"] and (entry["passed"] or entry.get("waived", False))
    report["warnings"] = [f"{entry['check']}: {entry['detail']}"] if entry.get("waived") else []


def run_typed_links(args, params) -> str:
    """One edge type held out together with its reverse, typed fixed negatives."""
    from gnnpipe.hetero.audit import audit_hetero_link_split
    from gnnpipe.typed_graph import edge_type_name
    from gnnpipe.hetero.split import split_hetero_links

    graph = hio.read_hetero_graph(args.prepared)
    cfg = params.split.link
    link = split_hetero_links(graph, cfg, make_rng(params.seed, "split"))
    report = audit_hetero_link_split(graph, link.edge_type, link.edges, link.negatives,
                                     link.message_graphs, disjoint=cfg.disjoint_train_ratio > 0)
    report["negative_strategy"] = cfg.negative_strategy
    fitted = _fit_features(params, report, graph.x, None, graph.target)
    _audited(args, report)
    with io.atomic_dir(args.out) as out:
        hio.write_hetero_split(out, graph, link.message_graphs, {
            "task": "link", "edge_type": edge_type_name(link.edge_type),
            "reverse_edge_type": report["reverse_edge_type"],
            "disjoint_train_ratio": cfg.disjoint_train_ratio,
            "negative_strategy": cfg.negative_strategy},
            edges=link.edges, negatives=link.negatives)
    _write_features(args, params, fitted)
    return (f"{report['edge_type']} (+ reverse {report['reverse_edge_type']}) pairs "
            f"{report['sizes']}, audit passed -> {args.out}")


RUNS = {(HOMOGENEOUS, "node"): run_nodes, (HOMOGENEOUS, "link"): run_links,
        (TYPED, "node"): run_typed_nodes, (TYPED, "link"): run_typed_links}
