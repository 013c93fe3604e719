"""The train stage on the default graph, per sampler: variants of threads and source tree, one run.

    python -m bench.default_speed --dir DIR                            # full, neighbor, sign at 2 and 1 threads
    python -m bench.default_speed --dir DIR --trees OLD . --threads 2  # this tree against another
    python -m bench.default_speed --dir DIR --epochs 0 --rounds 1      # whole default runs (early stopping)

Issue 30 asked why ``train.sampler: neighbor`` and SIGN took longer than full-batch training on
the default graph (``dataset.synthetic`` defaults: 20,000 nodes, ~200k edges, 64 features). This
bench runs ``gnnpipe train`` as the pipeline does (one process per run: imports, reading the
artifacts, training, evaluation each epoch, the final logits, writing) in ``DIR``, whose
``prepare``, ``split`` and ``propagate`` outputs it makes once with the default params (and
reuses). Each run is a *row*: a sampler (``full``: GraphSAGE full batch, ``neighbor``:
GraphSAGE on neighbor batches, ``sign``: the SIGN model on precomputed hops) with a variant:

- ``--threads``: ``train.threads`` of the run (``auto``: params.yaml's rule);
- ``--wait``: how idle OpenMP threads wait: ``active`` / ``passive`` set ``OMP_WAIT_POLICY``
  (spin at barriers / sleep), ``spinN`` sets ``GOMP_SPINCOUNT=N`` (libgomp: spin N rounds, then
  sleep; ``spin300000`` is libgomp's own default, what a process without either variable did
  before gnnpipe set ``OMP_WAIT_POLICY=PASSIVE``), ``default`` sets neither and the tree's
  ``gnnpipe`` chooses (the variables the caller's environment has are removed first);
- ``--aggregation``: ``train.aggregation`` (scatter: PyG's message passing; csr: a sparse
  CSR product; full and neighbor only);
- ``--trees``: the source tree whose ``gnnpipe`` runs (``PYTHONPATH``; ``git archive <commit> |
  tar -x -C OLD`` gives one), the first being the baseline of the ratios.

``--epochs N`` trains exactly N epochs (patience N): the per-epoch split (``train_seconds``,
``eval_seconds`` of ``metrics/perf/train_history.csv``) compares like with like; ``--epochs 0``
keeps params.yaml's epochs and patience, so each row's wall clock is what ``dvc repro`` would
spend (its epochs can differ between thread counts: the float rounding changes). Rows run in
rounds (``--rounds``), every row once per round, odd rounds in reverse order, so the load of a
shared machine hits all rows alike; the 1-minute load average is recorded at each run's end.
Ratios are of the mean over rounds, against the first variant of the same sampler.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import print_machine, machine

REPO = Path(__file__).resolve().parents[1]
SAMPLERS = {"full": {"sampler": "full"}, "neighbor": {"sampler": "neighbor"},
            "sign": {"sampler": "sign", "model": "sign"},
            "cluster": {"sampler": "cluster"}, "saint": {"sampler": "saint"}}
UPSTREAM = ("prepare", "split", "partition", "propagate")
_RUN = ("import sys; from gnnpipe.cli import main\n"
        "for stage in sys.argv[1:]:\n"
        "    if main([stage] if stage != 'train' else ['train', '--params', 'run.yaml', '--out', "
        "'out/model', '--perf', 'out/perf.json', '--metrics', 'out/train.json', '--history', "
        "'out/history.csv', '--perf-history', 'out/perf_history.csv', '--checkpoint', "
        "'out/checkpoint.pt']) != 0: sys.exit(f'gnnpipe {stage} failed')")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True,
                        help="work folder: the default pipeline's upstream outputs, made once")
    parser.add_argument("--samplers", default="full,neighbor,sign",
                        help=f"comma-separated, of {', '.join(SAMPLERS)}")
    parser.add_argument("--threads", default="2,1", help="comma-separated train.threads values")
    parser.add_argument("--wait", default="default",
                        help="comma-separated: default, active, passive, spinN (GOMP_SPINCOUNT=N)")
    parser.add_argument("--aggregation", default="scatter",
                        help="comma-separated train.aggregation values: scatter, csr")
    parser.add_argument("--trees", nargs="+", type=Path, default=[REPO],
                        help="source trees to run (the first is the baseline)")
    parser.add_argument("--epochs", type=int, default=10,
                        help="epochs per run (patience alike); 0 = params.yaml's epochs and "
                             "patience")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    return parser.parse_args(argv)


def _env(tree: Path, wait: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY",
                        "GOMP_SPINCOUNT")}
    env.update(PYTHONPATH=str(tree), GNNPIPE_PROGRESS="0")
    if wait.startswith("spin"):
        env["GOMP_SPINCOUNT"] = wait[len("spin"):]
    elif wait != "default":
        env["OMP_WAIT_POLICY"] = wait.upper()
    return env


def prepare_upstream(folder: Path) -> None:
    """The default pipeline's stages before train, in ``folder`` (skipped when done)."""
    if (folder / "data" / "propagate").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "params.yaml").write_text((REPO / "params.yaml").read_text())
    subprocess.run([sys.executable, "-c", _RUN, *UPSTREAM], cwd=folder,
                   env=_env(REPO, "default"), check=True)


def run_train(folder: Path, tree: Path, sampler: str, threads: str, wait: str,
              aggregation: str, epochs: int) -> dict:
    """One ``gnnpipe train`` process in ``folder``; its wall seconds and per-epoch split."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["train"].update(SAMPLERS[sampler], threads=yaml.safe_load(threads),
                           aggregation=aggregation)
    params["train"]["checkpoint"]["every"] = 0
    if epochs:
        params["train"].update(epochs=epochs, patience=epochs)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        run = Path(scratch)
        (run / "run.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        for name in ("data",):
            (run / name).symlink_to(folder / name)
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _RUN, "train"], cwd=run,
                              env=_env(tree.resolve(), wait), capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"train ({sampler}, {threads}, {wait}, {tree}) failed:\n"
                               f"{done.stderr[-3000:]}")
        rows = list(csv.DictReader((run / "out" / "perf_history.csv").open()))
        perf = json.loads((run / "out" / "perf.json").read_text())
        metrics = json.loads((run / "out" / "train.json").read_text())
    train = [float(r["train_seconds"]) for r in rows]
    evals = [float(r["eval_seconds"]) for r in rows]
    return {"seconds": seconds, "epochs": len(rows), "train_per_epoch": statistics.mean(train),
            "eval_per_epoch": statistics.mean(evals), "threads": perf.get("threads"),
            "best_val_acc": metrics["best_val_acc"], "load1": os.getloadavg()[0]}


def main(argv=None) -> dict:
    args = parse_args(argv)
    print_machine()
    prepare_upstream(args.dir.resolve())
    trees = [t.resolve() for t in args.trees]
    variants = list(itertools.product(trees, args.threads.split(","), args.wait.split(","),
                                      args.aggregation.split(",")))
    rows = [(s, *v) for s in args.samplers.split(",") for v in variants]

    def name(row) -> str:
        sampler, tree, threads, wait, aggregation = row
        return (f"{sampler} threads={threads}" + (f" wait={wait}" if wait != "default" else "")
                + (f" {aggregation}" if aggregation != "scatter" else "")
                + (f" tree={tree.name}" if len(trees) > 1 else ""))

    print(f"# default graph; {args.epochs or 'params.yaml'} epochs per run; "
          f"{args.rounds} rounds, rows interleaved (odd rounds reversed)")
    print(f"{'row':44s} {'wall s':>7} {'epochs':>6} {'train/ep':>9} {'eval/ep':>8} "
          f"{'val acc':>7} {'load1':>5}", flush=True)
    runs: dict[str, list[dict]] = {name(r): [] for r in rows}
    for r in range(args.rounds):
        for row in rows if r % 2 == 0 else rows[::-1]:
            result = run_train(args.dir.resolve(), row[1], row[0], row[2], row[3], row[4],
                               args.epochs)
            runs[name(row)].append(result)
            print(f"{name(row):44s} {result['seconds']:7.2f} {result['epochs']:6d} "
                  f"{result['train_per_epoch']:9.4f} {result['eval_per_epoch']:8.4f} "
                  f"{result['best_val_acc']:7.4f} {result['load1']:5.2f}",
                  flush=True)

    print()
    summary: dict[str, dict] = {}
    for row in rows:
        key = name(row)
        results = runs[key]
        base = name((row[0], *variants[0]))
        mean = {k: statistics.mean(e[k] for e in results)
                for k in ("seconds", "epochs", "train_per_epoch", "eval_per_epoch", "load1")}
        mean["wall_ratio_vs_first"] = (statistics.mean(e["seconds"] for e in runs[base])
                                       / mean["seconds"])
        summary[key] = {**mean, "runs": results}
        print(f"{key:44s} mean wall {mean['seconds']:7.2f} s, {mean['epochs']:5.1f} epochs, "
              f"train {mean['train_per_epoch']:.4f} + eval {mean['eval_per_epoch']:.4f} s/epoch"
              f"; {base} / this: {mean['wall_ratio_vs_first']:.2f}x (load {mean['load1']:.1f})")
    out = {"machine": machine(), "epochs": args.epochs, "rounds": args.rounds,
           "trees": [str(t) for t in trees], "rows": summary,
           "load_average_end": os.getloadavg()}
    print(f"# load average at the end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
