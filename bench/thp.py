"""Transparent huge pages for torch's large CPU allocations (``THP_MEM_ALLOC_ENABLE``) on or
off: epoch time, page faults and peak memory, each configuration in its own process, alternating.

    nice -n 5 python -m bench.thp --cache /tmp/h43/cache --rounds 6 --stage-dir /tmp/thp-stage

``THP_MEM_ALLOC_ENABLE=1`` makes c10's ``alloc_cpu`` ``madvise(MADV_HUGEPAGE)`` every buffer of
2 MiB or more (page-aligned, not rounded), so the kernel (``transparent_hugepage/enabled``:
``madvise`` or ``always``) backs its aligned 2 MiB spans with huge pages: one fault where there
were 512. torch reads the variable once, at its first allocation, so every configuration runs in
a fresh process with the variable set ``0`` or ``1`` (explicit, so gnnpipe's default does not
decide).

- ``epoch``: ``bench.train_epoch`` (``--rows fit``: gnnpipe's fit on its neighbor sampler, 1M
  nodes, 128 features, 1 thread) for ``--epochs`` epochs per process; rounds alternate which
  configuration runs first. Figures per process: mean epoch and its gather / forward phases,
  minor page faults and system CPU (``wait4``), peak ``RssAnon`` (sampled every 0.1 s) and
  ``ru_maxrss``; ratios off / on per round (paired: the two processes ran back to back).
- ``stage`` (with ``--stage-dir``): the whole ``train`` stage process (dvc.yaml's command, as
  bench/stage_memory.py runs it) on generated tables, 1 thread, alternating; peak ``RssAnon``
  and ``VmHWM`` of the stage process, wall time and ``train_s`` (``metrics/perf/train.json``:
  the training loop: epochs with their validation, no start-up, final inference or writes), and an md5 of ``model.pt``,
  ``predictions.pt`` and ``metrics/train.json`` without its timing keys: equal across
  configurations means the arithmetic is unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.common import machine
from bench.data_path import TreePeaks, merged, scratch_repo, traced_stage, write_tables

CONFIGS = ("0", "1")  # THP_MEM_ALLOC_ENABLE values compared: off, on
STAGE_OVER = {  # the train stage measured: default model and fan-out, one thread
    "threads": 1,
    "split": {"node": {"train": 0.1, "val": 0.05, "test": 0.1}},
    "baseline": {"epochs": 2, "patience": 1},
    "train": {"sampler": "neighbor", "epochs": 2, "patience": 2, "checkpoint": {"every": 0},
              "inference": {"mode": "layerwise"}},
}


def _env(value: str) -> dict:
    return dict(os.environ, THP_MEM_ALLOC_ENABLE=value, OMP_NUM_THREADS="1")


def epoch_process(args: argparse.Namespace, value: str) -> dict:
    """One ``bench.train_epoch`` process with THP_MEM_ALLOC_ENABLE=``value``: its figures."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "epoch.json"
        cmd = [sys.executable, "-m", "bench.train_epoch", "--threads", "1", "--rows", "fit",
               "--epochs", str(args.epochs), "--json", str(out)]
        if args.cache:
            cmd += ["--cache", str(args.cache)]
        if args.scale != 1.0:
            cmd += ["--scale", str(args.scale)]
        proc = subprocess.Popen(cmd, env=_env(value), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        peaks = TreePeaks(proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)
        figures = peaks.stop()
        err = proc.stderr.read()
        proc.stderr.close()
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"train_epoch THP={value} failed: {err[-2000:]}")
        row = next(iter(json.loads(out.read_text())["sampled"]["results"].values()))
    epochs = row["epochs"]
    return {"thp": value, "epoch_s": statistics.mean(e["seconds"] for e in epochs),
            "gather_s": statistics.mean(e["gather_seconds"] for e in epochs),
            "forward_s": statistics.mean(e["forward_seconds"] for e in epochs),
            "loss": epochs[-1]["loss"], "probe": epochs[-1]["probe"],
            "minflt": usage.ru_minflt, "sys_s": round(usage.ru_stime, 2),
            "anon_mb": figures["stage_anon_mb"], "maxrss_mb": round(usage.ru_maxrss / 1024),
            "load1": round(os.getloadavg()[0], 2)}


def _md5(run: Path) -> str:
    digest = hashlib.md5()
    for name in ("data/model/model.pt", "data/model/predictions.pt"):
        digest.update((run / name).read_bytes())
    train = json.loads((run / "metrics/train.json").read_text())
    timeless = {k: v for k, v in train.items() if "second" not in k and "time" not in k}
    digest.update(json.dumps(timeless, sort_keys=True).encode())
    return digest.hexdigest()[:12]


def stage_process(run: Path, value: str) -> dict:
    """The train stage process with THP_MEM_ALLOC_ENABLE=``value``: wall, peaks, output md5."""
    saved = {k: os.environ.get(k) for k in ("THP_MEM_ALLOC_ENABLE", "OMP_NUM_THREADS")}
    os.environ.update(THP_MEM_ALLOC_ENABLE=value, OMP_NUM_THREADS="1")  # traced_stage's env
    try:
        code, wall, output, peaks = traced_stage(run, "train")
    finally:
        for key, old in saved.items():
            os.environ.pop(key, None) if old is None else os.environ.__setitem__(key, old)
    figures = peaks.stop()
    if code != 0:
        raise RuntimeError(f"train stage THP={value} failed: {output[-2000:]}")
    perf = json.loads((run / "metrics/perf/train.json").read_text())
    return {"thp": value, "wall_s": round(wall, 1), "train_s": perf["seconds"],
            "anon_mb": figures["stage_anon_mb"],
            "peak_mb": figures["stage_peak_mb"], "md5": _md5(run),
            "load1": round(os.getloadavg()[0], 2)}


def _ratios(rows: list[dict], key: str) -> list[float]:
    """off / on of ``key`` per round (rows come in round pairs)."""
    out = []
    for a, b in zip(rows[::2], rows[1::2]):
        off, on = (a, b) if a["thp"] == "0" else (b, a)
        out.append(off[key] / on[key])
    return out


def report(name: str, rows: list[dict], keys: list[str]) -> dict:
    print(f"\n# {name}: off / on per round (median, min, max)")
    summary = {}
    for key in keys:
        r = _ratios(rows, key)
        summary[key] = {"median": statistics.median(r), "min": min(r), "max": max(r)}
        print(f"{key:10s} {statistics.median(r):6.3f}x  {min(r):6.3f}  {max(r):6.3f}")
    return summary


def alternate(rounds: int, measure) -> list[dict]:
    rows = []
    for r in range(rounds):
        for value in (CONFIGS if r % 2 == 0 else CONFIGS[::-1]):
            rows.append(measure(value))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=None, help="bench.train_epoch's graph cache")
    parser.add_argument("--scale", type=float, default=1.0, help="bench.train_epoch's --scale")
    parser.add_argument("--epochs", type=int, default=2, help="epochs per epoch process")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--stage-dir", type=Path, default=None,
                        help="scratch folder for the train stage part (skipped without)")
    parser.add_argument("--stage-rounds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=500_000)
    parser.add_argument("--edges", type=int, default=5_000_000)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    summary = {"machine": machine(), "thp_enabled": thp.read_text().strip() if thp.exists() else
               "absent", "load_start": os.getloadavg()}
    print(f"# {summary['machine']['cpu']}  THP {summary['thp_enabled']}  load "
          f"{summary['load_start'][0]:.2f}", flush=True)
    if args.rounds:
        rows = alternate(args.rounds, lambda v: epoch_process(args, v))
        summary["epoch"] = {"rows": rows, "off_over_on": report(
            "epoch", rows, ["epoch_s", "gather_s", "forward_s", "minflt", "anon_mb", "maxrss_mb"])}
    if args.stage_dir:
        tables, run = args.stage_dir.resolve() / "tables", args.stage_dir.resolve() / "run"
        write_tables(tables, args.nodes, args.edges, args.features)
        if not (run / "data" / "baseline").exists():
            scratch_repo(run, tables, "local", dvc=False)
            params = yaml.safe_load((run / "params.yaml").read_text())
            (run / "params.yaml").write_text(yaml.safe_dump(merged(params, STAGE_OVER),
                                                            sort_keys=False))
            for stage in ("prepare", "split", "baseline"):
                code, wall, output, peaks = traced_stage(run, stage)
                peaks.stop()
                print(f"# {stage}: exit {code}, {wall:.0f} s", flush=True)
                if code != 0:
                    raise RuntimeError(output[-2000:])
        rows = alternate(args.stage_rounds, lambda v: stage_process(run, v))
        summary["stage"] = {"rows": rows, "md5_equal": len({r["md5"] for r in rows}) == 1,
                            "off_over_on": report("train stage", rows,
                                                  ["wall_s", "train_s", "anon_mb",
                                                   "peak_mb"])}
        print(f"outputs byte-identical across configurations: {summary['stage']['md5_equal']}")
    summary["load_end"] = os.getloadavg()
    print(f"# load average at the end: {', '.join(f'{v:.2f}' for v in summary['load_end'])}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=float) + "\n")
    return summary


if __name__ == "__main__":
    main()
