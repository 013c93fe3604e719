"""DVC's own bookkeeping for layouts of the code deps and of dvc.yaml, with and without a C YAML
parser (issue 46 item 3).

    python -m bench.dvc_layout [--dir /tmp/dvc-layout] [--rounds 3] [--repro] [--split]

Needs this repository after a finished ``dvc repro`` (``dvc status`` clean: outputs and cache
there). Copies it once per layout into ``DIR`` (tracked files, the outputs, ``.dvc/cache``; a
fresh ``git init``, so this repository is never touched):

* ``modules``: every module its own dep (a package is a folder only when a stage reaches all
  of it), close to gnnpipe's layout before 2026-12-07 (which also made io and sampling folders);
* ``packages``: gnnpipe's layout, a reached subpackage is one folder dep, a stage's command
  module and the top-level modules files;
* ``split`` (with ``--split``): ``packages``' deps, each stage in a dvc.yaml of its own,
  ``pipeline/<stage>/dvc.yaml`` (``wdir: ../..``), so with a lock of its own: DVC re-reads and
  rewrites only that stage's lock after it runs, not the whole pipeline's (run with ``-P``);

each copy's code deps rewritten by ``gnnpipe.dvc_yaml.code_deps`` and its lock refreshed by
``dvc commit -f`` (nothing runs).

Each round runs, per copy and per parser (``pure``: ruamel's Python parser, by hiding its C
extension ``_ruamel_yaml``; ``c``: the extension), ``dvc status`` and a no-op ``dvc repro`` in a
fresh process, and reports wall seconds and the dvc process's own CPU seconds (children
excluded: robust on a loaded box). ``--repro`` adds ``dvc repro -f`` per copy with the C
parser: wall, dvc's own CPU (its bookkeeping) and the stages' own seconds
(``metrics/perf/stages``). Also printed: the lock's lines and, per layout, the stage seconds a
one-module edit re-runs, averaged over the package's modules (what the coarser deps cost).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

from gnnpipe.dvc_yaml import PER_FILE, code_deps, import_graph, module_files
from gnnpipe.pipeline import STAGES

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ("data", "metrics", "reports")
# runs dvc's CLI in this process and prints its own CPU seconds (children excluded) as JSON
RUNNER = """
import json, resource, sys, time
if sys.argv[1] == "pure":
    sys.modules["_ruamel_yaml"] = None  # ruamel falls back to its pure-Python parser
from dvc.cli import main
start = time.perf_counter()
code = main(sys.argv[2:])
own = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"rc": code, "wall": time.perf_counter() - start,
                  "cpu": own.ru_utime + own.ru_stime}))
"""


def layouts(root: Path) -> dict[str, tuple[str, ...]]:
    """Layout name -> ``code_deps``'s ``per_file`` for the tree at ``root``: ``modules``, every
    module its own dep (a package a folder only when a stage reaches all of it); ``packages``,
    gnnpipe's layout (a reached subpackage is one folder, the commands files)."""
    packages = tuple(sorted(m for m, p in module_files(root).items() if p.name == "__init__.py"))
    return {"modules": packages, "packages": PER_FILE}


def rerun_seconds(root: Path, stage_seconds: dict[str, float]) -> dict[str, float]:
    """Per layout: stage seconds re-run by an edit of one module of the tree at ``root``,
    averaged over the modules."""
    graph = import_graph(root)
    files = sorted(p.relative_to(root).as_posix() for p in module_files(root).values())

    def covers(listed: list[str], path: str) -> bool:
        return any(path == d or path.startswith(d + "/") for d in listed)

    found = {}
    for name, per_file in layouts(root).items():
        deps = {s: code_deps(s, graph, root, per_file) for s in STAGES}
        found[name] = statistics.mean(sum(stage_seconds[s] for s in STAGES if covers(deps[s], f))
                                      for f in files)
    return found


def copy_repo(dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    # the committed tree (the outputs and dvc.lock belong to it), not the work tree's edits
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    for name in OUTPUTS:
        shutil.copytree(ROOT / name, dest / name, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / ".dvc" / "cache", dest / ".dvc" / "cache")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit",
                 "-qm", "bench"]):
        subprocess.run(cmd, cwd=dest, check=True, capture_output=True)


def to_layout(copy: Path, per_file: tuple[str, ...]) -> None:
    """Rewrite the code deps of the copy's dvc.yaml as ``code_deps(..., per_file)`` lists
    them, then refresh its lock (hashes only: nothing runs)."""
    graph, lines, out, stage = import_graph(copy), (copy / "dvc.yaml").read_text().split("\n"), [], None
    for line in lines:
        named = re.match(r"^  (\w+):$", line)
        stage = named.group(1) if named and named.group(1) in STAGES else stage
        if re.match(r"^      - (gnnpipe/\S+|stages/\S+\.py)$", line):
            if line.startswith("      - stages/"):
                out += [f"      - {d}" for d in code_deps(stage, graph, copy, per_file)]
            continue
        out.append(line)
    (copy / "dvc.yaml").write_text("\n".join(out))
    dvc(copy, "c", "commit", "-f", "-q")


def to_split(copy: Path) -> None:
    """Move each stage of the copy's dvc.yaml and its lock entry into ``pipeline/<stage>/``
    (run from the root: ``wdir: ../..``, ``${...}`` from the root's params.yaml); the root
    dvc.yaml keeps the plots and artifacts, and no lock."""
    pipeline = yaml.safe_load((copy / "dvc.yaml").read_text())
    lock = yaml.safe_load((copy / "dvc.lock").read_text())
    for name, stage in pipeline.pop("stages").items():
        folder = copy / "pipeline" / name
        folder.mkdir(parents=True)
        (folder / "dvc.yaml").write_text(yaml.safe_dump(
            {"vars": ["../../params.yaml"], "stages": {name: {**stage, "wdir": "../.."}}},
            sort_keys=False))
        (folder / "dvc.lock").write_text(yaml.safe_dump(
            {"schema": lock["schema"], "stages": {name: lock["stages"][name]}}, sort_keys=False))
    (copy / "dvc.yaml").write_text(yaml.safe_dump(pipeline, sort_keys=False))
    (copy / "dvc.lock").unlink()


def lock_lines(copy: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in copy.rglob("dvc.lock")
               if ".dvc" not in p.relative_to(copy).parts)


def dvc(copy: Path, parser: str, *args: str) -> dict:
    """Run ``dvc args`` in ``copy`` with ``parser``: {rc, wall, cpu}; exits on a failure."""
    # the copy's gnnpipe, not the editable install's (this repository, maybe mid-edit)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "PYTHONPATH": str(copy)}
    done = subprocess.run([sys.executable, "-c", RUNNER, parser, *args], cwd=copy,
                          capture_output=True, text=True, env=env)
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {"rc": done.returncode}
    if result["rc"]:
        raise SystemExit(f"dvc_layout: dvc {' '.join(args)} in {copy} exited {result['rc']} "
                         f"(a status that is not clean: run dvc repro in the repository first) "
                         f"{done.stderr.strip()[-300:]}")
    return result


def stage_seconds(copy: Path) -> dict[str, float]:
    return {s: json.loads((copy / "metrics" / "perf" / "stages" / f"{s}.json").read_text())["seconds"]
            for s in STAGES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dvc_layout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/dvc-layout"))
    parser.add_argument("--rounds", type=int, default=3, help="no-op rounds (0: none)")
    parser.add_argument("--repro", action="store_true", help="also time dvc repro -f per layout")
    parser.add_argument("--split", action="store_true",
                        help="also the split layout (a dvc.yaml and lock per stage)")
    args = parser.parse_args(argv)
    names = ("modules", "packages", "split") if args.split else ("modules", "packages")
    copies = {name: args.dir / name for name in names}
    for name, copy in copies.items():
        copy_repo(copy)
        to_layout(copy, layouts(copy)["packages" if name == "split" else name])
        if name == "split":
            to_split(copy)
        dvc(copy, "c", "status", "-q")  # exits unless the copy is up to date
    # the split root dvc.yaml has no stage: -P reproduces every dvc.yaml's
    every = {name: ("-P",) if name == "split" else () for name in names}
    rows: dict[tuple, list[dict]] = {}
    for _ in range(args.rounds):
        for name, copy in copies.items():
            for yaml_parser in ("pure", "c"):
                for cmd in (("status",), ("repro",)):
                    extra = every[name] if cmd[0] == "repro" else ()
                    rows.setdefault((name, yaml_parser, cmd[0]), []).append(
                        dvc(copy, yaml_parser, *cmd, "-q", *extra))
    print("layout    parser  command  lock lines  wall s (median)  dvc CPU s (median)")
    for (name, yaml_parser, cmd), runs in rows.items():
        lock = lock_lines(copies[name])
        print(f"{name:9} {yaml_parser:7} {cmd:8} {lock:10d}  "
              f"{statistics.median(r['wall'] for r in runs):15.2f}  "
              f"{statistics.median(r['cpu'] for r in runs):18.2f}")
    seconds = stage_seconds(copies["modules"])
    for name, value in rerun_seconds(copies["modules"], seconds).items():
        print(f"{name}: a one-module edit re-runs {value:.1f} s of stages on average "
              f"(of {sum(seconds.values()):.1f} s)")
    if args.repro:
        for name, copy in copies.items():
            run = dvc(copy, "c", "repro", "-f", "-q", *every[name])
            work = sum(stage_seconds(copy).values())
            print(f"dvc repro -f, {name}: wall {run['wall']:.1f} s, dvc's own CPU {run['cpu']:.1f} s, "
                  f"stages' own {work:.1f} s, wall / stages {run['wall'] / work:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
