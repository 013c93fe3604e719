"""What a pipeline run costs besides the stages' work, two trees in one run (issue 46).

    python -m bench.iteration --old OLD_TREE [--new .] [--dir /tmp/iteration] [--repro]
                              [--exp [LR]] [--warm] [--stages prepare,split,...]

Each tree is copied into ``DIR/<old|new>`` (a plain copy: sources, ``stages/``, ``dvc.yaml``,
``params.yaml``, ``data/raw`` and the placeholders beside it; no outputs, no ``.git``), its bytecode compiled (as
``make setup`` does), then every stage of the default pipeline runs as DVC runs it
(``python stages/<s>.py --resources ...``) with ``-X importtime`` and the copy first on
``PYTHONPATH``; the trees alternate stage by stage, so the load of a shared box hits both alike.
Per stage and tree: the process's wall seconds, its import closure's seconds (the top-level
imports that ``-X importtime`` reports, lazy ones inside ``run`` included: the real start-up)
and the stage's own seconds (its ``metrics/perf/stages/<s>.json``, which starts after the
imports). ``--repro`` then times ``dvc repro -f`` in each copy (``git init`` + commit there, so
``/work``'s repository is never touched) against the sum of the stages' own seconds, and prints
the dvc process's own CPU seconds (its bookkeeping; the stages, its children, excluded). ``--exp``
(after the repro, which it implies) commits that state in each copy and times ``dvc exp run -S
train.lr=LR`` (default: half of params.yaml's), a one-param experiment: the stages it re-runs
(train, predict, evaluate, report: those whose perf file it rewrote) against their own seconds.
``--warm`` runs the new tree's ``dvc repro -f`` and ``dvc exp run`` through its warm stage
server (``gnnpipe warm -- dvc ...``, gnnpipe/runtime/warm.py) and the old tree's as they are: with
``--old .`` that is the cold path against the warm one on the same code (``--stages ''`` skips the
per-stage table, which only times cold processes). A warm stage's own seconds shrink too where
its run imported PyG or lightgbm lazily, so the wall ratios new / old are printed beside.
Prints a table and the new / old ratios; writes ``DIR/iteration.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("prepare", "split", "analyze", "partition", "propagate", "baseline", "train",
          "predict", "evaluate", "report")
HEAVY = ("torch_geometric", "torch._dynamo", "lightgbm", "sklearn", "scipy.sparse", "dask",
         "distributed", "matplotlib", "numba", "pandas")
# runs dvc's CLI in this process and writes its own CPU seconds (the stages, its children,
# excluded: DVC's bookkeeping, robust on a loaded box) to the file argv[1]
DVC_RUNNER = """
import json, resource, sys
from dvc.cli import main
code = main(sys.argv[2:])
own = resource.getrusage(resource.RUSAGE_SELF)
with open(sys.argv[1], "w") as out:
    json.dump(own.ru_utime + own.ru_stime, out)
sys.exit(code)
"""
# what a tree copy takes: sources and the pipeline's own files, never outputs or environments
SKIP = shutil.ignore_patterns(".git", ".venv*", "__pycache__", ".pytest_cache", "site",
                              "dvc_plots", "cache", "tmp")


def copy_tree(tree: Path, dest: Path) -> Path:
    """``tree``'s files into ``dest`` (replaced): a git work tree's tracked and unignored files
    (no outputs), or every file of an unpacked ``git archive``; then a fresh git repository
    there (DVC needs one; the source repository is never touched) and compiled bytecode."""
    if dest.exists():
        shutil.rmtree(dest)
    if (tree / ".git").exists():
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=tree,
                                check=True, capture_output=True, text=True).stdout
        files = [tree / name for name in listed.split("\0") if name]
    else:
        files = [path for path in tree.rglob("*") if "__pycache__" not in path.parts]
    for path in files:
        if path.is_file() and not path.is_symlink():
            target = dest / path.relative_to(tree)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    (dest / "metrics" / "perf" / "stages").mkdir(parents=True, exist_ok=True)
    quiet = {"cwd": dest, "check": True, "stdout": subprocess.DEVNULL}
    subprocess.run(["git", "init", "-q"], **quiet)
    # the copy's own repository: `dvc exp run` commits experiments there under this name
    subprocess.run(["git", "config", "user.name", "bench"], **quiet)
    subprocess.run(["git", "config", "user.email", "bench@localhost"], **quiet)
    commit(dest)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "gnnpipe", "stages"], **quiet)
    return dest


def commit(copy: Path) -> None:
    """Everything in ``copy`` (its own repository) committed: what ``dvc exp run`` starts from."""
    quiet = {"cwd": copy, "check": True, "stdout": subprocess.DEVNULL}
    subprocess.run(["git", "add", "-A"], **quiet)
    subprocess.run(["git", "commit", "-qm", "tree", "--allow-empty"], **quiet)


def import_closure(stderr: str) -> tuple[float, list[str]]:
    """Seconds of the top-level imports in a ``-X importtime`` report and which HEAVY modules
    it loaded (50 ms or more: pyarrow's probe of a missing pandas is not pandas)."""
    total, seen = 0, set()
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|", 2)
        if not name.startswith("  "):  # depth 0: its cumulative covers everything below it
            total += int(cumulative)
        if int(cumulative) >= 50_000:
            seen.add(name.strip())
    return total / 1e6, [m for m in HEAVY if m in seen]


def run_stage(copy: Path, stage: str) -> dict:
    """One stage process in ``copy``, as dvc.yaml runs it, timed."""
    env = {**os.environ, "PYTHONPATH": str(copy), "GNNPIPE_PROGRESS": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    record = copy / "metrics" / "perf" / "stages" / f"{stage}.json"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", f"stages/{stage}.py",
                           "--resources", str(record)], cwd=copy, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{copy.name} {stage} failed:\n{done.stderr[-2000:]}")
    imports, heavy = import_closure(done.stderr)
    own = json.loads(record.read_text())["seconds"]
    # what the run imported at depth 0, in order (lazy imports inside run included)
    modules = [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
               if line.startswith("import time:") and "self [us]" not in line
               and not line.rsplit("|", 1)[1].startswith("  ")]
    return {"wall": wall, "imports": imports, "own": own, "heavy": heavy, "modules": modules}


def dvc(copy: Path, *args: str, warm: bool = False) -> tuple[float, float]:
    """Wall seconds of ``dvc ARGS`` in ``copy`` (its own git repository and DVC cache) and the
    dvc process's own CPU seconds; ``warm``: through the copy's ``gnnpipe warm --`` (its
    server's start and stop timed too)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "PYTHONPATH": str(copy), "GNNPIPE_PROGRESS": "0"}
    env.pop("GNNPIPE_WARM", None)
    prefix = [sys.executable, "-m", "gnnpipe", "warm", "--"] if warm else []
    cpu = copy.parent / f"{copy.name}.dvc-cpu.json"  # beside the copy: no file in its workspace
    started = time.perf_counter()
    subprocess.run([*prefix, sys.executable, "-c", DVC_RUNNER, str(cpu), *args, "-q"], env=env,
                   cwd=copy, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started, json.loads(cpu.read_text())


def repro(copy: Path, warm: bool = False) -> tuple[float, float]:
    """Wall seconds of ``dvc repro -f`` in ``copy`` and DVC's own CPU seconds."""
    return dvc(copy, "repro", "-f", warm=warm)


def perf_files(copy: Path) -> dict[str, tuple[int, float]]:
    """stage -> (mtime ns, its own seconds) of each ``metrics/perf/stages/<stage>.json``."""
    return {path.stem: (path.stat().st_mtime_ns, json.loads(path.read_text())["seconds"])
            for path in (copy / "metrics" / "perf" / "stages").glob("*.json")}


def exp_run(copy: Path, lr: float, warm: bool = False) -> dict:
    """``dvc exp run -S train.lr=<lr>`` in ``copy`` from its committed, reproduced state:
    seconds, the stages it re-ran (their perf file rewritten) and their own seconds."""
    commit(copy)
    before = perf_files(copy)
    seconds, cpu = dvc(copy, "exp", "run", "-S", f"train.lr={lr}", warm=warm)
    after = perf_files(copy)
    ran = sorted((s for s in after if after[s][0] != before.get(s, (None,))[0]),
                 key=STAGES.index)
    return {"exp": seconds, "exp_dvc_cpu": cpu, "exp_stages": ran,
            "exp_own": sum(after[s][1] for s in ran)}


def default_lr(tree: Path) -> float:
    """``train.lr`` of ``tree``'s params.yaml."""
    import yaml

    return float(yaml.safe_load((tree / "params.yaml").read_text())["train"]["lr"])


def import_seconds(copy: Path, modules: list[str]) -> float:
    """Wall seconds of a fresh interpreter importing ``modules`` (what a stage's run imported,
    in order; a module its run generated, PyG's propagate code, is skipped) from ``copy``: the
    stage's start-up without its work."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    script = ("import importlib\n"
              f"for name in {modules!r}:\n"
              "    try:\n        importlib.import_module(name)\n"
              "    except Exception:\n        pass\n")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", script], cwd=copy, env=env, check=True)
    return time.perf_counter() - started


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="old source tree")
    parser.add_argument("--new", type=Path, default=ROOT, help="new source tree")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/gnnpipe-iteration"))
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--rounds", type=int, default=0,
                        help="then time each stage's import closure alone this many times per "
                             "tree (alternating), median")
    parser.add_argument("--repro", action="store_true", help="also time `dvc repro -f`")
    parser.add_argument("--exp", nargs="?", type=float, const=0.0, default=None, metavar="LR",
                        help="also (after --repro, implied) time `dvc exp run -S train.lr=LR` "
                             "(default: half of params.yaml's train.lr)")
    parser.add_argument("--warm", action="store_true",
                        help="the new tree's dvc runs through `gnnpipe warm --` (its warm stage "
                             "server); with --old . : cold against warm on the same code")
    args = parser.parse_args(argv)
    args.repro = args.repro or args.exp is not None
    stages = [stage for stage in args.stages.split(",") if stage]
    warm = {"old": False, "new": args.warm}
    tag = {name: " (warm)" if on else "" for name, on in warm.items()}
    copies = {name: copy_tree(tree.resolve(), args.dir / name)
              for name, tree in (("old", args.old), ("new", args.new))}
    rows: dict[str, dict[str, dict]] = {name: {} for name in copies}
    print(f"{'stage':10s} {'tree':4s} {'wall s':>7s} {'imports s':>9s} {'own s':>7s}  heavy modules")
    for i, stage in enumerate(stages):
        order = ("old", "new") if i % 2 == 0 else ("new", "old")
        for name in order:
            row = rows[name][stage] = run_stage(copies[name], stage)
            print(f"{stage:10s} {name:4s} {row['wall']:7.2f} {row['imports']:9.2f} "
                  f"{row['own']:7.2f}  {' '.join(row['heavy'])}", flush=True)
    summary = {}
    for name in copies:
        summary[name] = {key: sum(r[key] for r in rows[name].values())
                         for key in ("wall", "imports", "own")}
    for name in copies if stages else ():
        s = summary[name]
        print(f"{name}: stage processes {s['wall']:.1f} s, imports {s['imports']:.1f} s, "
              f"stages' own {s['own']:.1f} s (wall / own {s['wall'] / s['own']:.2f}x)")
    if stages:
        print(f"imports new / old: {summary['new']['imports'] / summary['old']['imports']:.2f}x")
    if args.rounds and stages:
        print(f"{'stage':10s} {'old s':>6s} {'new s':>6s}  import closure alone, median of "
              f"{args.rounds}")
        for stage in stages:
            times = {name: [] for name in copies}
            for r in range(args.rounds):
                for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
                    times[name].append(import_seconds(copies[name],
                                                      rows[name][stage]["modules"]))
            for name in copies:
                rows[name][stage]["startup"] = statistics.median(times[name])
            print(f"{stage:10s} {rows['old'][stage]['startup']:6.2f} "
                  f"{rows['new'][stage]['startup']:6.2f}", flush=True)
        for name in copies:
            summary[name]["startup"] = sum(rows[name][s]["startup"] for s in stages)
        print(f"start-up, ten stages: old {summary['old']['startup']:.1f} s, new "
              f"{summary['new']['startup']:.1f} s ({summary['new']['startup'] / summary['old']['startup']:.2f}x)")
    if args.repro:
        for name in copies:
            summary[name]["repro"], summary[name]["repro_dvc_cpu"] = repro(copies[name],
                                                                          warm[name])
            own = sum(json.loads(p.read_text())["seconds"] for p in
                      (copies[name] / "metrics" / "perf" / "stages").glob("*.json"))
            summary[name]["repro_own"] = own
            print(f"{name}: dvc repro -f{tag[name]} {summary[name]['repro']:.1f} s, stages' own "
                  f"{own:.1f} s ({summary[name]['repro'] / own:.2f}x), DVC's own CPU "
                  f"{summary[name]['repro_dvc_cpu']:.1f} s", flush=True)
        print(f"dvc repro -f new / old: {summary['new']['repro'] / summary['old']['repro']:.2f}x"
              f" (new against old's stages' own: "
              f"{summary['new']['repro'] / summary['old']['repro_own']:.2f}x)")
    if args.exp is not None:
        lr = args.exp or default_lr(copies["new"]) / 2
        for name in ("new", "old"):  # the other order than the repro's last: load hits both
            row = summary[name] | exp_run(copies[name], lr, warm[name])
            summary[name] = row
            print(f"{name}: dvc exp run{tag[name]} -S train.lr={lr:g} {row['exp']:.1f} s, re-ran "
                  f"{','.join(row['exp_stages'])}: own {row['exp_own']:.1f} s "
                  f"({row['exp'] / row['exp_own']:.2f}x), DVC's own CPU {row['exp_dvc_cpu']:.1f} s",
                  flush=True)
        print(f"dvc exp run new / old: {summary['new']['exp'] / summary['old']['exp']:.2f}x "
              f"(new against old's stages' own: "
              f"{summary['new']['exp'] / summary['old']['exp_own']:.2f}x)")
    (args.dir / "iteration.json").write_text(json.dumps({"rows": rows, "summary": summary},
                                                         indent=1))


if __name__ == "__main__":
    main()
