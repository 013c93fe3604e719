"""prepare: load dataset.source (synthetic, or your files under dataset.path), validate it, write
the prepared files of its types (gnnpipe/io/typed.py): nodes_<type> / edges_<edge type>
Parquet, graph.pt and graph.json; for parquet/csv tables also node_ids_<type>.parquet
(original id of every node) and, with edge weight/timestamp columns of a one-type graph,
edge_attrs_node__to__node.parquet. With dataset.layout typed: the built-in papers / authors /
venues graph (source synthetic), or the user's typed tables or OGB-MAG folder. The user's
parquet / csv tables (homogeneous or typed) and every source's graph (synthetic, Planetoid,
OGB, PyG, OGB-MAG: written as tables first) go through one block prepare
(gnnpipe/data/prepare_tables.py) on either cluster.engine."""

import sys
from pathlib import Path

from gnnpipe import io, sources
from gnnpipe.config import load_params
from gnnpipe.data.prepare_tables import STEPS, prepare_tables
from gnnpipe.data.source_tables import raw_tables, synthetic_tables
from gnnpipe.io.blocks import scratch_beside
from gnnpipe.runtime.engine import session
from gnnpipe.runtime.progress import progress


def run(args) -> str:
    """One path for every graph kind, source and task (both tasks prepare the same graph):
    prepare.json, each of its ``warnings`` as one stderr line, the summary line."""
    report = prepare_to(load_params(args.params), args.out)
    io.write_json(args.metrics, report)
    for warning in report.get("warnings", []):
        print(f"gnnpipe prepare: warning: {warning}", file=sys.stderr)
    return f"{_summary(report)} -> {args.out}"


def prepare_to(params, out: Path) -> dict:
    """The user's tables, or a source's graph written as tables, by blocks (``prepare_tables``)
    in this process or, with ``cluster.engine: dask``, on a Dask cluster; the prepared files
    into ``out`` (atomically); ``prepare.json``."""
    dataset = params.dataset
    with session(params.cluster) as client, io.atomic_dir(out) as folder, \
            scratch_beside(out) as scratch:
        source = None  # a source's graph as tables, in scratch
        if dataset.source == "synthetic":
            source = synthetic_tables(dataset, params.seed, scratch / "source")
        elif dataset.source not in ("parquet", "csv"):
            source = raw_tables(sources.load(dataset), dataset, scratch / "source")
        with progress(None, total=STEPS, unit="steps", desc="prepare by blocks") as bar:
            report, class_values = prepare_tables(
                client, dataset if source is None else source.cfg, folder, scratch,
                source=source, step=bar.update)
        io.write_classes(folder, class_values, dataset.storage.compression)
    return {**report, "source": dataset.source}


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
