"""Wall time and peak memory of fitting the gradient-boosted-tree baseline at 1M nodes, beside
the MLP baseline's fit on the same rows in the same run (the ratio).

    python -m bench.gbdt                          # 1M nodes, 128 features, 10 classes, 1 thread
    python -m bench.gbdt --scale 0.1 --rounds 50  # a quick look

Features and labels are the bench graph's generator (bench/common.py: class-mean offsets plus
unit noise, the default graph's at 1M nodes) without its edges, which neither baseline reads.
The split has the scale profile's sizes (profiles/scale.yaml: 10% train, 5% val, 10% test, the
rest unused), drawn at random. The MLP runs the scale profile's baseline (hidden 64, 2 layers,
``--epochs`` 50, patience 10), the booster ``baseline.gbdt``'s defaults but at most ``--rounds``
rounds (early stopping after 10 rounds without a lower val loss) so the run stays within minutes.

Each model fits in its own subprocess, so each VmHWM is that fit's alone; ``added`` is the rise
of VmHWM over the RSS just before the fit (features and labels already resident); CPU seconds
(user + system of the process) beside the wall seconds tell a loaded machine apart. Both run on
``--threads`` threads (torch intra-op for the MLP, LightGBM's OpenMP for the booster).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and `gnnpipe` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from bench.common import PeakMemory, add_graph_args, graph_params, print_machine, rss_mb

MODELS = ("mlp", "gbdt")
SPLIT = {"train": 0.1, "val": 0.05, "test": 0.1}  # profiles/scale.yaml split.node


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_graph_args(parser)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=100, help="gbdt: boosting rounds at most")
    parser.add_argument("--early-stopping", type=int, default=10, help="gbdt: rounds of patience")
    parser.add_argument("--epochs", type=int, default=50, help="mlp: epochs at most")
    parser.add_argument("--patience", type=int, default=10, help="mlp: epochs of patience")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--json", type=Path, default=None, help="write the results here too")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "OUT"),
                        help=argparse.SUPPRESS)  # internal: one measured fit
    return parser.parse_args(argv)


def node_data(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, int]:
    """x float32 (N, F), y int64 (N,), int8 role codes (N,) (``ROLE_CODES``) and the class count: the same bytes for
    the same arguments."""
    from gnnpipe.data import synthetic
    from gnnpipe.data.graph import ROLE_CODES
    from gnnpipe.runtime.rng import make_rng

    cfg = dataclasses.replace(graph_params(args), avg_degree=1e-9)  # no edge draw: 0 edges
    raw = synthetic.generate(cfg, make_rng(args.seed, "bench"))
    n = cfg.num_nodes
    order = make_rng(args.seed, "split").permutation(n)
    roles = np.full(n, ROLE_CODES["unused"], dtype=np.int8)
    start = 0
    for role, share in SPLIT.items():
        count = int(round(share * n))
        roles[order[start:start + count]] = ROLE_CODES[role]
        start += count
    return torch.from_numpy(raw["x"]), torch.from_numpy(raw["y"]), roles, cfg.num_classes


def _fit_call(args: argparse.Namespace, model: str, x, y, roles, num_classes: int):
    """The measured call, every input built beforehand."""
    if model == "gbdt":
        from gnnpipe.config import GbdtParams
        from gnnpipe.training.gbdt import fit_gbdt

        cfg = GbdtParams(max_rounds=args.rounds, early_stopping_rounds=args.early_stopping)
        return lambda: fit_gbdt(x, y, roles, num_classes, cfg, args.seed, args.threads)
    from gnnpipe.config import BaselineParams
    from gnnpipe.training.models import build_model
    from gnnpipe.training.train import build_inputs, fit

    cfg = BaselineParams(epochs=args.epochs, patience=args.patience)
    inputs = build_inputs(x)
    return lambda: fit(lambda: build_model("mlp", x.shape[1], num_classes, cfg), inputs, y,
                       roles, cfg, args.seed)


def _accuracy(result, y: torch.Tensor, roles: np.ndarray, phase: str) -> float:
    from gnnpipe.data.graph import ROLE_CODES

    pred = torch.full_like(y, -1)
    pred[result.node_id] = result.logits.argmax(dim=1)
    nodes = torch.from_numpy(np.flatnonzero(roles == ROLE_CODES[phase]))
    return round(float((pred[nodes] == y[nodes]).double().mean()), 4)


def _worker(args: argparse.Namespace) -> None:
    model, out = args.worker[0], Path(args.worker[1])
    torch.set_num_threads(args.threads)
    x, y, roles, num_classes = node_data(args)
    call = _fit_call(args, model, x, y, roles, num_classes)
    before = rss_mb()
    with PeakMemory() as mem:
        start, cpu_start = time.perf_counter(), time.process_time()
        result = call()
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    s = result.summary
    iterations = s["rounds_run"] if model == "gbdt" else s["epochs_run"]
    out.write_text(json.dumps({
        "model": model, "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
        "iterations": iterations,
        "seconds_per_iteration": round(seconds / iterations, 3),
        "best": s["best_round"] if model == "gbdt" else s["best_epoch"],
        "val_acc": _accuracy(result, y, roles, "val"),
        "test_acc": _accuracy(result, y, roles, "test"),
        "rss_before_mb": round(before), "peak_rss_mb": round(mem.peak_mb),
        "added_mb": round(mem.added_mb), "load_after": round(os.getloadavg()[0], 2)}))


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        return _worker(args)
    import subprocess

    print_machine()
    cfg = graph_params(args)
    print(f"{cfg.num_nodes:,} nodes, {cfg.num_features} float32 features, {cfg.num_classes} "
          f"classes, split {SPLIT}, {args.threads} thread(s); gbdt <= {args.rounds} rounds "
          f"(patience {args.early_stopping}), mlp <= {args.epochs} epochs "
          f"(patience {args.patience})")
    argv = list(argv if argv is not None else sys.argv[1:])
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            out = Path(tmp) / f"{model}.json"
            cmd = [sys.executable, "-m", "bench.gbdt", *argv, "--worker", model, str(out)]
            code = subprocess.run(cmd, check=False).returncode
            if code != 0:
                print(f"{model}: failed, exit code {code} (killed for memory: -9)")
                continue
            row = rows[model] = json.loads(out.read_text())
            print(f"{model:4s} {row['seconds']:8.1f} s (CPU {row['cpu_seconds']:.1f} s)  "
                  f"{row['iterations']:4d} iterations "
                  f"({row['seconds_per_iteration']:.3f} s each, best {row['best']})  val "
                  f"{row['val_acc']:.4f} test {row['test_acc']:.4f}  peak RSS "
                  f"{row['peak_rss_mb']} MiB (+{row['added_mb']} over {row['rss_before_mb']})  "
                  f"load {row['load_after']:.2f}", flush=True)
    if len(rows) == 2:
        gbdt, mlp = rows["gbdt"], rows["mlp"]
        print(f"gbdt / mlp: {gbdt['seconds'] / max(mlp['seconds'], 0.01):.2f}x the time "
              f"({gbdt['cpu_seconds'] / max(mlp['cpu_seconds'], 0.01):.2f}x the CPU time), "
              f"+{gbdt['added_mb']} vs +{mlp['added_mb']} MiB over the inputs")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
