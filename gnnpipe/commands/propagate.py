"""propagate: precompute A_hat^k X for each distinct phase message graph."""

from pathlib import Path

from gnnpipe import io
from gnnpipe.config import load_params
from gnnpipe.progress import progress
from gnnpipe.propagate import propagate

HELP = "precompute SIGN/SGC features A_hat^k X (k = 0..propagate.hops) per phase graph"


def add_arguments(parser):
    parser.add_argument("--prepared", type=Path, default=Path("data/prepared"))
    parser.add_argument("--split", type=Path, default=Path("data/split"))
    parser.add_argument("--out", type=Path, default=Path("data/propagate"))


def run(args):
    params = load_params(args.params)
    graph = io.read_graph(args.prepared)
    files = io.read_split_meta(args.split)["message_graph"]
    graphs = io.read_message_graphs(args.split, graph.num_nodes)
    phase_graph = {phase: name.removesuffix(".pt") for phase, name in files.items()}
    with io.atomic_dir(args.out) as out:
        done = set()
        for phase, name in phase_graph.items():  # phases sharing a message graph share hops
            if name in done:
                continue
            done.add(name)
            io.write_hop(out, name, 0, graph.x)
            hops = propagate(graphs[phase], graph.x, params.propagate,
                             progress=lambda it: progress(it, desc=f"propagate {name}", unit="hop"))
            for hop, x_hop in enumerate(hops, start=1):
                io.write_hop(out, name, hop, x_hop)
        io.write_propagate_meta(out, {"hops": params.propagate.hops, "phase_graph": phase_graph,
                                      "norm": params.propagate.norm})
    return f"{params.propagate.hops} hops over {len(done)} message graph(s) -> {args.out}"
