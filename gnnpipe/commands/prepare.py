"""prepare: load dataset.source (synthetic, or your files under dataset.path), validate it, write
nodes/edges Parquet and the CSR graph; for parquet/csv tables also node_ids.parquet (original id
of every node) and, with edge weight/timestamp columns, edge_attrs.parquet."""

from pathlib import Path

from gnnpipe import io
from gnnpipe.config import load_params
from gnnpipe.prepare import prepare_dataset

HELP = "load dataset.source, validate it and write data/prepared (Parquet + torch CSR)"


def add_arguments(parser):
    parser.add_argument("--out", type=Path, default=Path("data/prepared"), help="output folder")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/prepare.json"),
                        help="counts: nodes, edges, duplicates and self-loops removed")


def run(args):
    params = load_params(args.params)
    if params.dataset.synthetic.hetero:  # papers / authors / venues: gnnpipe/hetero/stages.py
        from gnnpipe.hetero import stages
        return stages.prepare(args, params)
    prepared = prepare_dataset(params.dataset, params.seed)
    graph, report = prepared.graph, prepared.report
    storage = params.dataset.storage
    with io.atomic_dir(args.out) as out:
        io.write_prepared(out, graph, feature_dtype=storage.feature_dtype,
                          compression=storage.compression)
        if prepared.node_ids is not None:
            io.write_node_ids(out, prepared.node_ids, prepared.node_time, storage.compression)
        if prepared.edge_attrs:
            src, dst = graph.csr.edge_index().numpy()
            io.write_edge_attrs(out, src, dst, prepared.edge_attrs, storage.compression)
    io.write_json(args.metrics, report)
    return (f"{report['nodes']} nodes, {report['edges']} edges ({report['duplicates_removed']} "
            f"duplicates, {report['self_loops_removed']} self-loops removed) -> {args.out}")
