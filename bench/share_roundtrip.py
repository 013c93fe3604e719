"""Share round trip (docs/sharing.md): a second clone reproduces the first clone's predictions
from the remote, and how long that takes by `dvc pull` against re-running (`dvc repro -f`).

A scratch Git + DVC repository of the default pipeline (this repository's dvc.yaml, stages,
gnnpipe and params.yaml; ``--nodes`` shrinks the synthetic graph) runs `dvc repro`, commits and
pushes to a local-folder remote; a fresh `git clone` then runs the documented commands
(`dvc remote modify --local ... url`, `dvc pull`) and the predictions are compared byte for
byte, then `dvc repro -f` re-runs every stage in the clone and they are compared again.

    python -m bench.share_roundtrip            # the default pipeline (20k nodes)
    python -m bench.share_roundtrip --nodes 4000 --keep /tmp/roundtrip

Prints one JSON object: seconds of each step, the pull / re-run ratio, the byte checks, and the
machine (CPU model, load average, date).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
COPY = ("dvc.yaml", "stages", "gnnpipe", ".dvc/config", ".dvcignore", "data/raw", "data/pairs")
COMPARED = ("data/predict/predictions.parquet", "data/predict/embeddings.parquet",
            "data/model/model.pt")
REMOTE = "gnnpipe-store"  # the remote .dvc/config names


def run(cmd: list[str], cwd: Path) -> float:
    """Seconds ``cmd`` took in ``cwd``; exits with its output when it fails."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(cwd),
               GNNPIPE_PROGRESS="0", DVC_NO_ANALYTICS="1")
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed in {cwd}:\n{done.stdout}\n{done.stderr}")
    return round(time.perf_counter() - start, 2)


def make_repo(repo: Path, nodes: int | None) -> None:
    for name in COPY:
        source, target = REPO / name, repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    if nodes:
        params["dataset"]["synthetic"]["num_nodes"] = nodes
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (repo / ".gitignore").write_text("__pycache__/\n")
    run(["git", "init", "-q"], repo)
    run(GIT + ["add", "-A"], repo)
    run(GIT + ["commit", "-qm", "scratch pipeline"], repo)


def same_bytes(a: Path, b: Path) -> dict[str, bool]:
    return {name: (a / name).read_bytes() == (b / name).read_bytes() for name in COMPARED}


def cpu_model() -> str:
    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    found = re.search(r"^Model name:\s*(.+)$", text, re.M)
    return found.group(1).strip() if found else "unknown"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=None,
                        help="dataset.synthetic.num_nodes (default: params.yaml's)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="build the repositories here and keep them (default: a temp dir)")
    args = parser.parse_args(argv)
    root = args.keep or Path(tempfile.mkdtemp(prefix="gnnpipe-roundtrip-"))
    root.mkdir(parents=True, exist_ok=True)
    first, clone, store = root / "first", root / "second", root / "store"
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    try:
        make_repo(first, args.nodes)
        run(["dvc", "remote", "modify", "--local", REMOTE, "url", str(store)], first)
        seconds = {"repro": run(["dvc", "repro"], first)}
        run(GIT + ["add", "-A"], first)
        run(GIT + ["commit", "-qm", "pipeline ran"], first)
        seconds["push"] = run(["dvc", "push"], first)
        # the second clone: the commands docs/sharing.md gives
        seconds["clone"] = run(["git", "clone", "-q", str(first), str(clone)], root)
        run(["dvc", "remote", "modify", "--local", REMOTE, "url", str(store)], clone)
        seconds["pull"] = run(["dvc", "pull"], clone)
        pulled = same_bytes(first, clone)
        seconds["repro_f"] = run(["dvc", "repro", "-f"], clone)
        rerun = same_bytes(first, clone)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    result = {
        "command": "python -m bench.share_roundtrip" + (f" --nodes {args.nodes}"
                                                         if args.nodes else ""),
        "nodes": args.nodes or yaml.safe_load((REPO / "params.yaml").read_text())
        ["dataset"]["synthetic"]["num_nodes"],
        "seconds": seconds, "pull_vs_rerun": round(seconds["pull"] / seconds["repro_f"], 3),
        "same_bytes_after_pull": pulled, "same_bytes_after_repro_f": rerun,
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                    "loadavg_before": load_before,
                    "loadavg_after": Path("/proc/loadavg").read_text().split()[:3]},
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
