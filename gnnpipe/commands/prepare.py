"""prepare: load dataset.source (synthetic, or your files under dataset.path), validate it, write
nodes/edges Parquet and the CSR graph; for parquet/csv tables also node_ids.parquet (original id
of every node) and, with edge weight/timestamp columns, edge_attrs.parquet. With
dataset.synthetic.hetero: the built-in papers / authors / venues graph as typed tables; with
dataset.layout typed: the user's typed tables or OGB-MAG folder (plus node_ids_<type>.parquet)."""

import sys
from pathlib import Path

from gnnpipe import io
from gnnpipe.commands.variant import HOMOGENEOUS, TYPED, params_kind, pick
from gnnpipe.config import load_params
from gnnpipe.io import hetero as hio
from gnnpipe.rng import make_rng

HELP = "load dataset.source, validate it and write data/prepared (Parquet + torch CSR)"


def run(args):
    params = load_params(args.params)
    # the task changes nothing here: both tasks of a kind prepare the same graph
    kind = params_kind(params)
    return pick(RUNS, kind, params.dataset.task, "prepare")(args, params)


def _warn(report: dict) -> None:
    """Each of ``report["warnings"]`` (also kept in prepare.json) as one stderr line."""
    for warning in report.get("warnings", []):
        print(f"gnnpipe prepare: warning: {warning}", file=sys.stderr)


def _labels(out: Path, y, num_classes: int, class_values, report: dict, compression: str):
    """classes.parquet (the user's label of each code; 0..C-1 when the source had codes) and
    the label coverage of ``y`` (N,) in ``report``."""
    import numpy as np
    import pyarrow as pa

    values = (pa.array(np.arange(num_classes, dtype=np.int64)) if class_values is None
              else class_values)
    io.write_classes(out, values, compression)
    labelled, total = int((y >= 0).sum()), int(y.numel())
    report["labelled_nodes"] = labelled
    # the split audit's overall shape, so report and users read one layout
    report["label_coverage"] = {"labelled": labelled, "unlabelled": total - labelled,
                                "labelled_fraction": round(labelled / max(total, 1), 6)}


def prepare_homogeneous(args, params) -> str:
    from gnnpipe.prepare import prepare_dataset

    dataset = params.dataset
    storage, synthetic = dataset.storage, dataset.synthetic
    # features.npy of a synthetic graph is streamed in row blocks: x is never whole in memory
    stream = dataset.source == "synthetic" and io.external_features(
        storage.features, synthetic.num_nodes, synthetic.num_features, storage.feature_dtype)
    with io.atomic_dir(args.out) as out:
        sink = io.FeatureFileWriter(out, synthetic.num_nodes, synthetic.num_features,
                                    storage.feature_dtype, "dataset.synthetic") if stream else None
        prepared = prepare_dataset(dataset, params.seed, feature_sink=sink)
        graph, report = prepared.graph, prepared.report
        io.write_prepared(out, graph, feature_dtype=storage.feature_dtype,
                          compression=storage.compression, features=storage.features,
                          features_written=stream)
        if prepared.node_ids is not None:
            io.write_node_ids(out, prepared.node_ids, prepared.node_time, storage.compression)
        if prepared.edge_attrs:
            src, dst = graph.csr.edge_index().numpy()
            io.write_edge_attrs(out, src, dst, prepared.edge_attrs, storage.compression)
        _labels(out, graph.y, graph.num_classes, prepared.class_values, report,
                storage.compression)
    io.write_json(args.metrics, report)
    _warn(report)
    return (f"{report['nodes']} nodes, {report['edges']} edges ({report['duplicates_removed']} "
            f"duplicates, {report['self_loops_removed']} self-loops removed) -> {args.out}")


def prepare_typed(args, params) -> str:
    """The built-in heterogeneous graph, or the user's typed tables / OGB-MAG folder."""
    if params.dataset.source != "synthetic":
        return prepare_typed_tables(args, params)
    return prepare_typed_synthetic(args, params)


def prepare_typed_tables(args, params) -> str:
    """dataset.layout typed: one table per node type and relation (gnnpipe/hetero/prepare.py)."""
    from gnnpipe.hetero.prepare import prepare_typed_dataset

    prepared = prepare_typed_dataset(params.dataset)
    graph, report = prepared.graph, prepared.report
    compression = params.dataset.storage.compression
    with io.atomic_dir(args.out) as out:
        hio.write_hetero_prepared(out, graph)
        for node_type, ids in prepared.node_ids.items():
            hio.write_hetero_node_ids(out, node_type, ids, prepared.node_time.get(node_type),
                                      compression)
        _labels(out, graph.y, graph.num_classes, prepared.class_values, report, compression)
    io.write_json(args.metrics, report)
    _warn(report)
    types = ", ".join(f"{n} {t}" for t, n in report["node_types"].items())
    featureless = (f"; featureless ({params.dataset.typed.featureless} features): "
                   f"{', '.join(report['featureless'])}" if report["featureless"] else "")
    return (f"typed graph: {types}; {report['edges']} edges in {len(graph.csr)} types, target "
            f"{graph.target} ({report['duplicates_removed']} duplicates, "
            f"{report['self_loops_removed']} self-loops removed){featureless} -> {args.out}")


def prepare_typed_synthetic(args, params) -> str:
    """The built-in heterogeneous graph (gnnpipe/hetero/synthetic.py) as typed tables."""
    from gnnpipe.typed_graph import edge_type_name
    from gnnpipe.hetero.synthetic import generate_hetero

    graph, counts = generate_hetero(params.dataset, make_rng(params.seed, "prepare"))
    report = {}
    with io.atomic_dir(args.out) as out:
        hio.write_hetero_prepared(out, graph)
        _labels(out, graph.y, graph.num_classes, None, report, "zstd")
    target = graph.target
    degrees = graph.csr[graph.self_relation()].degrees()
    report = {
        "source": "synthetic", "hetero": True, "target": target,
        "nodes": graph.total_nodes, "edges": sum(c.num_edges for c in graph.csr.values()),
        "features": int(graph.x[target].shape[1]), "classes": graph.num_classes,
        "undirected": True,  # cites is stored both ways, other relations with their reverse
        "duplicates_removed": counts["cites_duplicates_removed"]
        + counts["writes_duplicates_removed"],
        "self_loops_removed": counts["cites_self_loops_removed"],
        "isolated_nodes": int((degrees == 0).sum()),  # of the target type, over its relation
        "node_types": {t: graph.num_nodes(t) for t in graph.node_types},
        "edge_types": {edge_type_name(e): c.num_edges for e, c in graph.csr.items()},
        **counts, **report}
    io.write_json(args.metrics, report)
    types = ", ".join(f"{n} {t}" for t, n in report["node_types"].items())
    return (f"heterogeneous graph: {types}; {report['edges']} edges in {len(graph.csr)} types "
            f"-> {args.out}")


RUNS = {(HOMOGENEOUS, "node"): prepare_homogeneous, (HOMOGENEOUS, "link"): prepare_homogeneous,
        (TYPED, "node"): prepare_typed, (TYPED, "link"): prepare_typed}
