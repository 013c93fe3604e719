"""prepare: load dataset.source (synthetic, or your files under dataset.path), validate it, write
nodes/edges Parquet and the CSR graph; for parquet/csv tables also node_ids.parquet (original id
of every node) and, with edge weight/timestamp columns, edge_attrs.parquet; graph.json
describes every prepared graph. With dataset.layout typed: the built-in papers / authors /
venues graph (source synthetic), or the user's typed tables or OGB-MAG folder (plus
node_ids_<type>.parquet)."""

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

from gnnpipe import io
from gnnpipe.config import load_params
from gnnpipe.data.prepare import prepare_dataset
from gnnpipe.data.typed_graph import HOMOGENEOUS



def run(args) -> str:
    """One path for every graph kind and task (both tasks prepare the same graph)."""
    params = load_params(args.params)
    dataset = params.dataset
    storage, synthetic = dataset.storage, dataset.synthetic
    # features.npy of a synthetic graph is streamed in row blocks: x is never whole in memory
    stream = (dataset.source == "synthetic" and dataset.layout == HOMOGENEOUS
              and io.external_features(storage.features, synthetic.num_nodes,
                                       synthetic.num_features, storage.feature_dtype))
    with io.atomic_dir(args.out) as out:
        sink = io.FeatureFileWriter(out, synthetic.num_nodes, synthetic.num_features,
                                    storage.feature_dtype, "dataset.synthetic") if stream else None
        prepared = prepare_dataset(dataset, params.seed, feature_sink=sink)
        graph, report = prepared.graph, prepared.report
        io.write_prepared(out, graph, feature_dtype=storage.feature_dtype,
                          compression=storage.compression, features=storage.features,
                          features_written=stream)
        for node_type, ids in prepared.node_ids.items():
            io.write_node_ids(out, ids, prepared.node_time.get(node_type), storage.compression,
                              node_type=node_type)
        if prepared.edge_attrs:
            src, dst = graph.csr.edge_index().numpy()
            io.write_edge_attrs(out, src, dst, prepared.edge_attrs, storage.compression)
        _labels(out, graph.y, graph.num_classes, prepared.class_values, report,
                storage.compression)
    io.write_json(args.metrics, report)
    _warn(report)
    return f"{_summary(report)} -> {args.out}"


def _warn(report: dict) -> None:
    """Each of ``report["warnings"]`` (also kept in prepare.json) as one stderr line."""
    for warning in report.get("warnings", []):
        print(f"gnnpipe prepare: warning: {warning}", file=sys.stderr)


def _labels(out: Path, y, num_classes: int, class_values, report: dict, compression: str):
    """classes.parquet (the user's label of each code; 0..C-1 when the source had codes) and
    the label coverage of ``y`` (N,) in ``report``."""
    values = (pa.array(np.arange(num_classes, dtype=np.int64)) if class_values is None
              else class_values)
    io.write_classes(out, values, compression)
    labelled, total = int((y >= 0).sum()), int(y.numel())
    report["labelled_nodes"] = labelled
    # the split audit's overall shape, so report and users read one layout
    report["label_coverage"] = {"labelled": labelled, "unlabelled": total - labelled,
                                "labelled_fraction": round(labelled / max(total, 1), 6)}


def _summary(report: dict) -> str:
    """One line of counts from ``prepare.json``."""
    removed = (f"{report['duplicates_removed']} duplicates, {report['self_loops_removed']} "
               "self-loops removed")
    if "node_types" not in report:
        return f"{report['nodes']} nodes, {report['edges']} edges ({removed})"
    types = ", ".join(f"{n} {t}" for t, n in report["node_types"].items())
    featureless = report.get("featureless", {})
    modes = ", ".join(f"{t} ({mode} features)" for t, mode in featureless.items())
    return (f"typed graph: {types}; {report['edges']} edges in {len(report['edge_types'])} "
            f"types, target {report['target']} ({removed})"
            + (f"; featureless: {modes}" if modes else ""))
