"""Hashes of every data artifact of the default, link, typed and typed-link pipelines.

A refactor that must not change results runs this before and after and compares:

    python bench/compare_artifacts.py --out /tmp/before.json           # on the old tree
    python bench/compare_artifacts.py --compare /tmp/before.json       # on the new tree

Each pipeline runs its stages in-process (``gnnpipe <stage>``) in a scratch folder holding
params.yaml with the pipeline's overrides; ``--small`` (default) shrinks the graph and the
epochs so all four finish in a few minutes, ``--full`` keeps params.yaml's sizes (the default
pipeline then matches dvc.lock's data outputs). Wall-clock files (metrics/perf, reports) are
not hashed: they differ run to run. ``--stages`` stops early (prepare,split for a split change).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
STAGES = ("prepare", "split", "analyze", "partition", "propagate", "baseline", "train",
          "predict", "evaluate", "report")
PIPELINES = {
    "default": {},
    "link": {"dataset": {"task": "link"}},
    "typed": {"dataset": {"layout": "typed"}},
    "typed_link": {"dataset": {"task": "link", "layout": "typed"}},
    # the samplers, one pipeline each (the four above train full batch)
    "neighbor": {"train": {"sampler": "neighbor"}},
    "link_neighbor": {"dataset": {"task": "link"}, "train": {"sampler": "link_neighbor"}},
    "typed_neighbor": {"dataset": {"layout": "typed"}, "train": {"sampler": "neighbor"}},
    "typed_hgt": {"dataset": {"layout": "typed"},
                  "train": {"sampler": "hgt", "model": "hgt", "heads": 2}},
    "typed_link_neighbor": {"dataset": {"task": "link", "layout": "typed"},
                            "train": {"sampler": "link_neighbor"}},
    "cluster": {"train": {"sampler": "cluster"}},
    "saint": {"train": {"sampler": "saint"}},
    "shadow": {"train": {"sampler": "shadow"}},
    "sign": {"train": {"sampler": "sign", "model": "sign"}},
}
SMALL = {"dataset": {"synthetic": {"num_nodes": 600, "num_authors": 200, "num_venues": 6}},
         "train": {"epochs": 12, "patience": 12, "hidden": 16},
         "baseline": {"epochs": 12, "patience": 12, "hidden": 16},
         "partition": {"num_parts": 4}}
# one intra-op thread by default (--threads): the figures then do not depend on the core count
# not results: wall clock, resource use, and the HTML that embeds them
SKIP = ("metrics/perf/", "reports/", "dvc_plots/")


def merge(base: dict, over: dict) -> dict:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


def file_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under root's data/ and metrics/, by relative path."""
    out = {}
    for top in ("data", "metrics"):
        for path in sorted((root / top).rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and not rel.startswith(SKIP) and not rel.startswith("data/raw"):
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def run_pipeline(name: str, small: bool, stages: tuple[str, ...], keep: Path | None,
                 threads: int = 1) -> dict:
    """The stages of one pipeline in a child process: stages share a process (as the tests'
    ``run_stages`` do), pipelines do not, so one pipeline's global state never reaches another."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    if small:
        merge(params, json.loads(json.dumps(SMALL)))
    params["threads"] = threads
    merge(params, json.loads(json.dumps(PIPELINES[name])))
    folder = Path(tempfile.mkdtemp(prefix=f"gnnpipe-compare-{name}-"))
    try:
        for extra in ("data/raw", "data/pairs"):
            if (REPO / extra).exists():
                shutil.copytree(REPO / extra, folder / extra)
        (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        code = ("import sys; from gnnpipe.cli import main\n"
                "for stage in sys.argv[1:]:\n"
                "    if main([stage]) != 0: sys.exit(f'gnnpipe {stage} failed')")
        subprocess.run([sys.executable, "-c", code, *stages], cwd=folder, check=True)
        return file_hashes(folder)
    finally:
        if keep is not None:
            shutil.copytree(folder, keep / name, dirs_exist_ok=True)
        shutil.rmtree(folder, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--small", dest="small", action="store_true", default=True,
                      help="600-node graphs, 12 epochs (default)")
    size.add_argument("--full", dest="small", action="store_false",
                      help="params.yaml's own sizes")
    parser.add_argument("--pipelines", default=",".join(PIPELINES),
                        help=f"comma-separated subset of {', '.join(PIPELINES)}")
    parser.add_argument("--stages", default=",".join(STAGES),
                        help="comma-separated stages, in pipeline order (default: all)")
    parser.add_argument("--out", type=Path, help="write the hashes here (JSON)")
    parser.add_argument("--compare", type=Path, help="compare with hashes written by --out")
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads of every stage (default 1)")
    parser.add_argument("--keep", type=Path, help="copy each scratch folder here, to diff")
    args = parser.parse_args(argv)
    os.environ.setdefault("GNNPIPE_PROGRESS", "0")
    stages = tuple(s for s in args.stages.split(",") if s)
    result = {name: run_pipeline(name, args.small, stages, args.keep, args.threads)
              for name in args.pipelines.split(",") if name}
    return save_and_compare(result, args.out, args.compare, "files")


def save_and_compare(result: dict[str, dict[str, str]], out: Path | None,
                     compare: Path | None, what: str) -> int:
    """Write ``result`` (pipeline -> name -> hash) to ``out``; against ``compare`` (an earlier
    ``out``), print every name that differs, is new or gone, and the count per pipeline; 1 when
    any differs."""
    if out:
        out.write_text(json.dumps(result, indent=1, sort_keys=True))
    if compare is None:
        return 0
    before = json.loads(compare.read_text())
    differ = 0
    for name, hashes in result.items():
        old = before.get(name, {})
        for rel in sorted(set(old) | set(hashes)):
            if old.get(rel) != hashes.get(rel):
                differ += 1
                state = ("new" if rel not in old else "gone" if rel not in hashes else "differs")
                print(f"{name}: {rel} {state}")
        same = sum(old.get(rel) == h for rel, h in hashes.items())
        print(f"{name}: {same} {what} identical")
    print("all identical" if not differ else f"{differ} {what} differ", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
