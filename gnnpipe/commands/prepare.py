"""prepare: load the dataset, validate it, write nodes/edges Parquet and the CSR graph."""

from pathlib import Path

from gnnpipe import io
from gnnpipe.config import load_params
from gnnpipe.prepare import prepare

HELP = "load dataset.source, validate it and write data/prepared (Parquet + torch CSR)"


def add_arguments(parser):
    parser.add_argument("--out", type=Path, default=Path("data/prepared"), help="output folder")
    parser.add_argument("--metrics", type=Path, default=Path("metrics/prepare.json"),
                        help="counts: nodes, edges, duplicates and self-loops removed")


def run(args):
    params = load_params(args.params)
    graph, report = prepare(params.dataset, params.seed)
    with io.atomic_dir(args.out) as out:
        io.write_prepared(out, graph)
    io.write_json(args.metrics, report)
    return (f"{report['nodes']} nodes, {report['edges']} edges ({report['duplicates_removed']} "
            f"duplicates, {report['self_loops_removed']} self-loops removed) -> {args.out}")
