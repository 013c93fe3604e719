"""partition: METIS (or random) parts of the train-phase message graph."""

import time
from pathlib import Path

from gnnpipe import io
from gnnpipe.config import load_params
from gnnpipe.partition import assign_parts, partition_report
from gnnpipe.rng import make_rng

HELP = "partition the train-phase message graph (METIS via pymetis, or random)"


def add_arguments(parser):
    parser.add_argument("--split", type=Path, default=Path("data/split"))
    parser.add_argument("--out", type=Path, default=Path("data/partition"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/partition.json"),
                        help="edge cut, balance and part sizes")
    parser.add_argument("--perf", type=Path, default=Path("metrics/perf/partition.json"),
                        help="wall time (kept apart: it differs run to run)")


def run(args):
    params = load_params(args.params)
    roles = io.read_split_roles(args.split)
    csr = io.read_message_graphs(args.split, roles.size)["train"]
    started = time.perf_counter()
    parts = assign_parts(csr, params.partition, make_rng(params.seed, "partition"))
    report = partition_report(csr, parts, params.partition.num_parts)
    report["method"] = params.partition.method
    with io.atomic_dir(args.out) as out:
        io.write_partition(out, parts)
    io.write_json(args.metrics, report)
    io.write_json(args.perf, {"seconds": round(time.perf_counter() - started, 3)})
    return (f"{report['num_parts']} parts, edge cut {report['edge_cut_fraction']:.3f}, "
            f"balance {report['balance']:.3f} -> {args.out}")
