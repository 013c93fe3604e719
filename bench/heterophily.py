"""Which model to advise on a heterophilous graph (issue 49 item 3, docs/models.md): test accuracy
of mlp, gcn, sage and sep trained with one budget on generated graphs of low and high homophily.

    python -m bench.heterophily                                   # the table in docs/models.md
    python -m bench.heterophily --homophily 0.1 --seeds 2 --models gcn sep   # quick

Graphs: gnnpipe's contextual SBM (``gnnpipe.data.synthetic.generate``, built undirected,
deduplicated, without self-loops as prepare does, by ``bench.common.build_graph``) with
``--nodes`` nodes, ``--classes`` classes, ``--features`` features whose class means have norm
``--signal`` against unit noise, ``--avg-degree``, and a share ``--homophily`` of edges inside a
class (the rest go to another class, uniformly): below ``1 / classes`` a neighbour's class is
mostly another than the node's, so its features say which class the node is *not*. Each graph
line gives the adjusted homophily analyze measures (``gnnpipe.graphops.analyze.homophily``; the
verdict advises sep below ``analyze.low_homophily``, 0.2).

Each ``--seeds`` seed draws its own graph, stratified 60/20/20 split (``split.node`` defaults)
and initialisation; every model trains full-batch through ``gnnpipe.training.train.fit`` with
the same ``train`` keys (``--hidden``, ``--layers``, ``--epochs``, ``--patience``, the rest
default: Adam lr 0.01, dropout 0.5), early-stopped on val accuracy. A model ``NAME:JK`` trains
with ``train.jk: JK`` (``sep:cat``: H2GCN's combination of every layer). Printed per graph and
model: test accuracy, mean +- std over seeds, its gain over ``--ref`` (the default model, sage)
on the same seeds, mean +- std of the paired differences, and the mean seconds of one fit.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `gnnpipe` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.common import build_graph, print_machine  # noqa: E402
from gnnpipe.config import NodeSplitParams, SyntheticParams, TrainParams  # noqa: E402
from gnnpipe.data.graph import Graph  # noqa: E402
from gnnpipe.graphops.analyze import homophily_of, row_counts  # noqa: E402
from gnnpipe.io.common import role_codes  # noqa: E402
from gnnpipe.runtime.rng import make_rng  # noqa: E402
from tests.split_oracle import split_nodes  # noqa: E402
from gnnpipe.training.models import build_model  # noqa: E402
from gnnpipe.training.train import build_inputs, fit  # noqa: E402

PHASES = ("train", "val", "test")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--classes", type=int, default=3)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--signal", type=float, default=1.5,
                        help="norm of the class means against unit noise per feature")
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument("--homophily", type=float, nargs="+", default=[0.1, 0.2, 0.8],
                        help="share of edges inside a class, one graph each")
    parser.add_argument("--models", nargs="+", default=["mlp", "gcn", "sage", "sep", "sep:cat"],
                        help="train.model values; NAME:JK trains with train.jk JK")
    parser.add_argument("--seeds", type=int, default=5, help="graph, split and init seeds 0..S-1")
    parser.add_argument("--ref", default="sage",
                        help="model spec each model's paired gain is measured against")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--patience", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here too")
    return parser.parse_args(argv)


def test_accuracy(result, y: torch.Tensor, roles: np.ndarray) -> float:
    """Accuracy of ``fit``'s logits on the test nodes of ``roles`` (int8 role codes (N,))."""
    test = torch.from_numpy(np.flatnonzero(roles == role_codes(np.array(["test"]))[0]))
    rows = torch.isin(result.node_id, test)
    return float((result.logits[rows].argmax(1) == y[result.node_id[rows]]).float().mean())


def run_seed(args, h: float, seed: int, specs: list[str]) -> tuple[dict, dict]:
    """One graph of homophily ``h`` drawn with ``seed``: its measured homophily and, per model
    spec, (test accuracy, seconds of the fit)."""
    cfg = SyntheticParams(num_nodes=args.nodes, num_classes=args.classes,
                          num_features=args.features, avg_degree=args.avg_degree, homophily=h,
                          feature_signal=args.signal)
    view = build_graph(cfg, seed)
    graph = Graph.homogeneous(view.csr, view.x, view.y, args.classes)
    roles = role_codes(split_nodes(graph, NodeSplitParams(), make_rng(seed, "split")).roles)
    inputs = build_inputs(view.x, {p: view.csr for p in PHASES})
    y = view.y.numpy()  # all rows as one block, as analyze adds its blocks' counts
    measured = homophily_of(row_counts(view.csr.indptr.numpy(), y, y[view.csr.indices.numpy()],
                                       args.classes), args.classes)
    out = {}
    for spec in specs:
        name, _, jk = spec.partition(":")
        train = TrainParams(model=name, hidden=args.hidden, num_layers=args.layers,
                            epochs=args.epochs, patience=args.patience, jk=jk or "none")
        tick = time.perf_counter()
        result = fit(lambda: build_model(name, args.features, args.classes, train), inputs,
                     view.y, roles, train, seed)
        out[spec] = (test_accuracy(result, view.y, roles), time.perf_counter() - tick)
    return measured, out


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    if args.ref not in args.models:
        raise SystemExit(f"--ref {args.ref} must be one of --models {' '.join(args.models)}")
    torch.set_num_threads(args.threads)
    print_machine()
    print(f"# {args.nodes:,} nodes, {args.classes} classes, {args.features} features (signal "
          f"{args.signal:g}), mean degree {args.avg_degree:g}; hidden {args.hidden}, "
          f"{args.layers} layers, {args.epochs} epochs (patience {args.patience}), "
          f"{args.seeds} seeds")
    rows = []
    print(f"{'graph':<32} {'model':<8} {'test accuracy':>16} {'vs ' + args.ref:>16} "
          f"{'seconds':>8}")
    for h in args.homophily:
        per_seed = [run_seed(args, h, seed, args.models) for seed in range(args.seeds)]
        adjusted = np.mean([m["adjusted"] for m, _ in per_seed])
        graph = f"homophily {h:g} (adjusted {adjusted:+.2f})"
        for spec in args.models:
            acc = np.array([o[spec][0] for _, o in per_seed])
            gain = acc - np.array([o[args.ref][0] for _, o in per_seed])  # paired by seed
            seconds = float(np.mean([o[spec][1] for _, o in per_seed]))
            rows.append({"homophily": h, "adjusted_homophily": round(float(adjusted), 4),
                         "model": spec, "test_acc_mean": round(float(acc.mean()), 4),
                         "test_acc_std": round(float(acc.std()), 4),
                         "test_acc": [round(float(a), 4) for a in acc],
                         f"gain_vs_{args.ref}_mean": round(float(gain.mean()), 4),
                         f"gain_vs_{args.ref}_std": round(float(gain.std()), 4),
                         "seconds": round(seconds, 2)})
            print(f"{graph:<32} {spec:<8} {acc.mean():>8.3f} +- {acc.std():.3f} "
                  f"{gain.mean():>+8.3f} +- {gain.std():.3f} {seconds:>8.1f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
