"""Over-smoothing check: docs/evaluation.md's `dvc exp run --queue` depth sweep, end to end, in a scratch copy.

    python bench/depth_sweep.py                      # gcn, 1000 nodes, depths 1..8
    python bench/depth_sweep.py --model sage --nodes 3000 --out /tmp/sweep

Copies the pipeline into a temporary git repository (the working tree is never touched), runs
`dvc repro` once, queues one experiment per `train.num_layers` (named depth-<L>), runs the queue
with `dvc queue start`, dumps `dvc exp show --json` and renders the depth-* experiments with
`gnnpipe report --sweep`,
which writes depth_sweep.png (accuracy and cosine similarity / Dirichlet energy vs depth) and
depth_sweep.csv into --out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# the committed input folders are deps (prepare: ${dataset.path} = data/raw; predict: data/pairs)
COPIED = ("dvc.yaml", "params.yaml", "stages", "gnnpipe", ".dvc/config", ".dvcignore", "data/raw",
          "data/pairs")


def sh(cmd: list[str], cwd: Path, timeout: int = 1800) -> str:
    # One intra-op thread: on a small graph and shared cores, more threads mostly spin (measured
    # ~25x slower training on 2 busy cores); set OMP_NUM_THREADS yourself to override.
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(cwd),
               GNNPIPE_PROGRESS="0", DVC_NO_ANALYTICS="1",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def scratch_repo(root: Path, args) -> Path:
    for name in COPIED:
        source, target = REPO / name, root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["dataset"]["synthetic"].update(num_nodes=args.nodes, num_features=16)
    params["train"].update(model=args.model, epochs=args.epochs, patience=args.epochs,
                           hidden=32, dropout=0.0 if args.no_dropout else params["train"]["dropout"])
    params["baseline"].update(epochs=args.epochs, patience=args.epochs, hidden=32)
    params["partition"]["num_parts"] = 2
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / ".gitignore").write_text("__pycache__/\n")
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    sh(["git", "init", "-q"], root)
    sh(git + ["add", "-A"], root)
    sh(git + ["commit", "-qm", "scratch"], root)
    sh(["dvc", "repro"], root)
    sh(git + ["add", "-A"], root)
    sh(git + ["commit", "-qm", "reproduced"], root)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gcn", choices=["gcn", "sage", "gat"])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--depths", type=int, nargs="+", default=list(range(1, 9)))
    parser.add_argument("--no-dropout", action="store_true",
                        help="train.dropout=0 (isolates depth from regularisation)")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "sweep")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gnnpipe-sweep-") as tmp:
        repo = scratch_repo(Path(tmp), args)
        # exactly the commands docs/evaluation.md documents
        for depth in args.depths:
            sh(["dvc", "exp", "run", "--queue", "-n", f"depth-{depth}", "-S",
                f"train.num_layers={depth}"], repo)
        sh(["dvc", "queue", "start", "-j", "1"], repo)
        while True:  # `dvc queue start` returns at once; the worker runs the queue
            status = sh(["dvc", "queue", "status"], repo)
            if not any(word in status for word in ("Queued", "Running")):
                break
            time.sleep(5)
        if "Failed" in status:
            print(status)
            for line in status.splitlines():
                if "Failed" in line:
                    print(sh(["dvc", "queue", "logs", line.split()[0]], repo)[-3000:])
        exps = Path(tmp) / "exps.json"
        exps.write_text(sh(["dvc", "exp", "show", "--json"], repo))
        args.out.mkdir(parents=True, exist_ok=True)
        shutil.copy(exps, args.out / "exps.json")
        print(sh([str(BIN / "gnnpipe"), "report", "--sweep", str(exps), "--experiments",
                  "depth-*", "--sweep-out", str(args.out)], repo).strip())
    print((args.out / "depth_sweep.csv").read_text())
    print(f"{len(args.depths)} experiments in {time.perf_counter() - started:.0f} s -> "
          f"{args.out / 'depth_sweep.png'}")


if __name__ == "__main__":
    main()
