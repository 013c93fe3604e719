"""The whole data path on ``cluster.engine: dask`` as the graph grows (issue 32 item 7): every
stage through the ``gnnpipe`` CLI, with the wall time and peak memory of each Dask worker and of
the stage process, per stage; the same run on ``cluster.engine: local`` where local fits.

    nice -n 5 python -m bench.data_path --dir /work/scale_data --sizes 10M,40M --local 10M
    nice -n 5 python -m bench.data_path --dir /work/scale_data --sizes 40M --dvc   # DVC's share

Sizes (``--sizes``, or ``NODES:EDGES`` such as ``2000:40000``): 10M = 0.5M nodes and 10M directed
edges, 40M = 2M and 40M, 160M = 8M and 160M (about 7 GB of raw features and edges). The user
tables are written out of core, one Parquet row group (65,536 rows) at a time: a node table of
shuffled int64 ids, 128 float32 features (a list column, one class-mean signal column) and 10
labels; an edge table of ``EDGES`` directed rows, 80% inside the source's class. Prepared with
``dataset.undirected: false``, so the stored edges are the rows less duplicates and self-loops.

Each size runs in a scratch copy of the pipeline (dvc.yaml, stages, gnnpipe; the tables stay
outside, ``dataset.path``), one stage after another with the command dvc.yaml gives it (the
``gnnpipe`` CLI), ``PARAMS`` on top of params.yaml: ``partition.method: lp``, ``split.assign:
hash``, the neighbor sampler, ``cluster.workers: 2``, ``cluster.memory_limit: 1GiB``. A
sampler thread reads /proc every 0.1 s for the stage process and every process under it; a Dask
worker's peak is the sum of the high-water marks (VmHWM) of its process tree, ``anon`` the peak
of its anonymous memory (RssAnon: VmHWM also counts file-backed pages of memory maps). A worker
that exceeds its limit is restarted by its nanny: a new pid, counted in ``worker_processes``.
``--dvc`` then times what DVC adds to that run: ``dvc commit`` (hashing every dep and output and
copying the outputs into the cache), ``dvc status`` and a no-op ``dvc repro``. Folders are
removed at the end (``--keep`` keeps them).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
GROUP = 65_536  # rows per Parquet row group of the generated tables
NAMED = {"10M": (500_000, 10_000_000), "40M": (2_000_000, 40_000_000),
         "160M": (8_000_000, 160_000_000)}
STAGES = ("prepare", "split", "analyze", "partition", "propagate", "baseline", "train")
COPIED = ("dvc.yaml", "params.yaml", "stages", "gnnpipe", ".dvc/config", ".dvcignore", "data/pairs")
PARAMS = {  # on top of the repository's params.yaml; dataset.path and cluster.engine per run
    "dataset": {"source": "parquet", "undirected": False},
    "split": {"assign": "hash", "node": {"train": 0.1, "val": 0.05, "test": 0.1}},
    "partition": {"method": "lp", "num_parts": 8},
    "baseline": {"epochs": 20, "patience": 5},
    "train": {"sampler": "neighbor", "neighbor": {"num_neighbors": [10, 5]}, "epochs": 1,
              "patience": 1, "checkpoint": {"every": 0}},
    "cluster": {"workers": 2, "memory_limit": "1GiB"},
}


def parse_size(text: str) -> tuple[str, int, int]:
    """``(name, nodes, edges)`` of ``10M`` / ``40M`` / ``160M`` or ``NODES:EDGES``."""
    if text in NAMED:
        return (text, *NAMED[text])
    nodes, sep, edges = text.partition(":")
    if not sep or not nodes.isdigit() or not edges.isdigit() or int(nodes) < 2:
        raise ValueError(f"--sizes: {text!r} is not one of {', '.join(NAMED)} or NODES:EDGES")
    return text.replace(":", "x"), int(nodes), int(edges)


def merged(base: dict, over: dict) -> dict:
    """``base`` with ``over``'s keys set, nested sections merged key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(base.get(key, {}), value) if isinstance(value, dict) else value
    return out


# ---------------------------------------------------------------------------- the user tables
def write_tables(folder: Path, nodes: int, edges: int, features: int = 128, classes: int = 10,
                 homophily: float = 0.8) -> None:
    """nodes.parquet / edges.parquet written a row group at a time (never all edges at once);
    node ``i`` (dense) has id ``perm[i] * 3 + 1000`` and label ``i % classes``. Skipped when
    the tables exist."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if (folder / "edges.parquet").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    ids = rng.permutation(nodes).astype(np.int64) * 3 + 1000  # (N,) user id of dense node i
    schema = pa.schema([("id", pa.int64()), ("x", pa.list_(pa.float32(), features)),
                        ("label", pa.int64())])
    with pq.ParquetWriter(folder / ".nodes.parquet.tmp", schema) as writer:
        for lo in range(0, nodes, GROUP):
            dense = np.arange(lo, min(lo + GROUP, nodes))
            x = rng.standard_normal((len(dense), features), dtype=np.float32)
            x[np.arange(len(dense)), dense % classes % features] += 1.0  # a class signal
            writer.write_table(pa.table({
                "id": ids[dense],
                "x": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), features),
                "label": dense % classes}, schema=schema))
    per_class = -(-nodes // classes)  # dense ids c, c + C, c + 2C, ... are class c
    with pq.ParquetWriter(folder / ".edges.parquet.tmp",
                          pa.schema([("src", pa.int64()), ("dst", pa.int64())])) as writer:
        for lo in range(0, edges, GROUP):
            rows = min(GROUP, edges - lo)
            src = rng.integers(0, nodes, rows)
            dst = rng.integers(0, nodes, rows)
            same = rng.random(rows) < homophily
            inside = src % classes + rng.integers(0, per_class, rows) * classes
            dst = np.where(same & (inside < nodes), inside, dst)
            writer.write_table(pa.table({"src": ids[src], "dst": ids[dst]}))
    os.replace(folder / ".nodes.parquet.tmp", folder / "nodes.parquet")
    os.replace(folder / ".edges.parquet.tmp", folder / "edges.parquet")


# ------------------------------------------------------------------------- memory sampling
def _status(pid: int) -> dict[str, int]:
    """VmHWM and RssAnon of ``pid`` in MiB ({} once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "RssAnon"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
                for c in (t / "children").read_text().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def process_kind(cmdline: str) -> str:
    """What a child of the stage process is: a Dask ``worker`` (a spawned multiprocessing child,
    as the nanny starts it), multiprocessing's ``helper`` (resource tracker, forkserver) or
    ``other``."""
    if "resource_tracker" in cmdline or "forkserver" in cmdline:
        return "helper"
    return "worker" if "spawn_main" in cmdline else "other"


class TreePeaks:
    """Peaks of a process and of each of its children's process trees, sampled every
    ``interval`` seconds in a daemon thread until ``stop()``."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid, self.interval = pid, interval
        self.hwm: dict[int, float] = {}  # pid -> largest VmHWM seen
        self.anon: dict[int, float] = {}  # pid -> largest RssAnon seen
        self.group: dict[int, int] = {}  # pid -> the stage's child whose tree it is in
        self.cmd: dict[int, str] = {}  # pid -> its command line when last sampled
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _sample(self, pid: int, group: int) -> None:
        line = _cmdline(pid)
        if not line:  # gone, or a zombie: keep what was seen
            return
        if self.cmd.get(pid) != line:  # new, or exec'd since: a forked child's pages were its
            self.cmd[pid] = line  # parent's until exec, so its peaks start again
            self.hwm.pop(pid, None)
            self.anon.pop(pid, None)
        fields = _status(pid)
        if fields:
            self.group.setdefault(pid, group)
            self.hwm[pid] = max(self.hwm.get(pid, 0.0), fields.get("VmHWM", 0.0))
            self.anon[pid] = max(self.anon.get(pid, 0.0), fields.get("RssAnon", 0.0))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample(self.pid, self.pid)
            for child in _children(self.pid):
                stack = [child]
                while stack:
                    pid = stack.pop()
                    self._sample(pid, child)
                    stack.extend(_children(pid))
            time.sleep(self.interval)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return summarize(self.pid, self.hwm, self.anon, self.group, self.cmd)


def summarize(root: int, hwm: dict[int, float], anon: dict[int, float], group: dict[int, int],
              cmd: dict[int, str]) -> dict:
    """Per-stage memory figures from per-process peaks: the stage process's own, and per
    worker tree (the sum of its processes' peaks), largest first. A child last seen with the
    stage's own command line had not exec'd yet (a short-lived subprocess): the pages it showed
    were the stage's, counted there, so it is left out."""
    trees: dict[int, list[float]] = {}
    for pid, top in group.items():
        if top != root and pid in hwm and cmd.get(pid) != cmd.get(root):
            sums = trees.setdefault(top, [0.0, 0.0])
            sums[0] += hwm[pid]
            sums[1] += anon[pid]
    kind = {top: process_kind(cmd.get(top, "")) for top in trees}
    workers = sorted((v for t, v in trees.items() if kind.get(t) == "worker"), reverse=True)
    others = [v[0] for t, v in trees.items() if kind.get(t) == "other"]
    return {"stage_peak_mb": round(hwm.get(root, 0.0), 1),
            "stage_anon_mb": round(anon.get(root, 0.0), 1),
            "worker_processes": len(workers),
            "worker_peak_mb": [round(v[0], 1) for v in workers],
            "worker_anon_mb": [round(v[1], 1) for v in workers],
            "other_peak_mb": round(max(others, default=0.0), 1)}


# ------------------------------------------------------------------------------- the runs
def scratch_repo(run: Path, tables: Path, engine: str, dvc: bool, cache_type: str = "") -> None:
    """The pipeline copied into ``run`` with ``PARAMS`` for ``tables`` on ``engine``; a git
    repository with one commit when DVC is to be timed there (``cache_type``: its
    ``cache.type``, DVC's default when empty)."""
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(REPO, run, ignore=_not_copied)
    params = merged(yaml.safe_load((REPO / "params.yaml").read_text()), merged(PARAMS, {
        "dataset": {"path": str(tables)}, "cluster": {"engine": engine}}))
    (run / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    if dvc:
        (run / ".gitignore").write_text("__pycache__/\n")
        git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
        for cmd in (["git", "init", "-q"], git + ["add", "-A"], git + ["commit", "-qm", "bench"]):
            subprocess.run(cmd, cwd=run, check=True, env=_env(run))
        if cache_type:
            subprocess.run(["dvc", "config", "--local", "cache.type", cache_type], cwd=run,
                           check=True, env=_env(run))


def _not_copied(folder: str, names: list[str]) -> list[str]:
    """copytree's filter: keep ``COPIED``, the folders leading to them and what is under them."""
    def kept(name: str) -> bool:
        rel = (Path(folder) / name).relative_to(REPO).as_posix()
        return name != "__pycache__" and any(
            rel == c or rel.startswith(c + "/") or c.startswith(rel + "/") for c in COPIED)
    return [name for name in names if not kept(name)]


def _env(run: Path) -> dict:
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(run),
                GNNPIPE_PROGRESS="0", DVC_NO_ANALYTICS="1")


def _stage(run: Path, stage: str) -> dict:
    return yaml.safe_load((run / "dvc.yaml").read_text())["stages"][stage]


def traced_stage(run: Path, stage: str) -> tuple[int, float, str, TreePeaks]:
    """One stage with dvc.yaml's command in ``run``, its process tree sampled: exit code, wall
    seconds, output and the sampler (to ``stop()``)."""
    cmd = _stage(run, stage)["cmd"]
    start = time.perf_counter()
    proc = subprocess.Popen(shlex.split(cmd), cwd=run, env=_env(run), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    peaks = TreePeaks(proc.pid)
    output, _ = proc.communicate()
    return proc.returncode, time.perf_counter() - start, output, peaks


def run_stage(run: Path, stage: str, edges: int) -> dict:
    """One stage with dvc.yaml's command in ``run``: wall time, its record, memory peaks."""
    code, wall, output, peaks = traced_stage(run, stage)
    row = {"stage": stage, "exit_code": code, "wall_s": round(wall, 1),
           "ns_per_edge": round(wall / edges * 1e9, 1), **peaks.stop(),
           "message": output.strip().splitlines()[-1] if output.strip() else ""}
    record = run / "metrics" / "perf" / "stages" / f"{stage}.json"
    if code == 0 and record.exists():
        row["stage_ru_maxrss_mb"] = json.loads(record.read_text())["peak_rss_mb_self"]
    return row


def time_dvc(run: Path, stages: list[str]) -> dict:
    """What DVC adds to a run whose stages ran directly: ``dvc commit`` of them (hash every dep
    and output, copy the outputs into the cache), then ``dvc status`` and a no-op ``dvc
    repro`` (both should find nothing to do)."""
    out = {}
    for name, cmd in (("commit_s", ["dvc", "commit", "-f", *stages]),
                      ("status_s", ["dvc", "status", *stages]),
                      ("noop_repro_s", ["dvc", "repro", *stages])):
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=run, env=_env(run), capture_output=True, text=True)
        out[name] = round(time.perf_counter() - start, 1)
        if done.returncode:
            out[name.replace("_s", "_error")] = (done.stdout + done.stderr).strip()[-400:]
    out["repro_output"] = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else []
    cache = run / ".dvc" / "cache"
    out["cache_bytes"] = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    return out


def stage_deps(run: Path, stage: str) -> set[str]:
    """The paths ``stage`` reads, as dvc.yaml lists them."""
    return {str(d) for d in _stage(run, stage).get("deps", [])}


def stage_outs(run: Path, stage: str) -> set[str]:
    """The paths ``stage`` writes (outs and metrics), as dvc.yaml lists them."""
    spec = _stage(run, stage)
    return {next(iter(o)) if isinstance(o, dict) else str(o)
            for key in ("outs", "metrics", "plots") for o in spec.get(key, [])}


def run_size(args, size: tuple[str, int, int], engine: str) -> list[dict]:
    name, nodes, edges = size
    tables, run = args.dir / f"tables-{name}", args.dir / f"run-{name}-{engine}"
    dvc = args.dvc and engine == "dask"
    if not (args.resume and (run / "params.yaml").exists()):
        scratch_repo(run, tables, engine, dvc, args.cache_type)
    rows, missing = [], set()
    for stage in args.stages:
        blocked = sorted(missing & stage_deps(run, stage))
        if blocked:  # it reads what a failed stage did not write
            print(f"# {name} {engine} {stage}: skipped, {blocked[0]} was not written", flush=True)
            continue
        row = {"size": name, "nodes": nodes, "edges": edges, "engine": engine,
               "load": round(os.getloadavg()[0], 1), **run_stage(run, stage, edges)}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if row["exit_code"]:
            missing |= stage_outs(run, stage)
    if dvc and not any(r["exit_code"] for r in rows):
        row = {"size": name, "engine": engine, "stage": "dvc",
               **time_dvc(run, args.dvc_stages or args.stages)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if not args.keep:
        shutil.rmtree(run, ignore_errors=True)
    return rows


def markdown(rows: list[dict]) -> str:
    """The per-stage rows as a Markdown table (MiB, seconds, microseconds per edge row)."""
    lines = ["| size | engine | stage | wall s | us / edge | worker peak RSS (anon) MiB | "
             "worker processes | stage process peak RSS (anon) MiB | load |",
             "|---|---|---|---:|---:|---|---:|---|---:|"]
    for r in rows:
        if r["stage"] == "dvc":
            continue
        workers = ", ".join(f"{p:.0f} ({a:.0f})" for p, a in zip(r["worker_peak_mb"],
                                                                 r["worker_anon_mb"])) or "-"
        failed = "" if r["exit_code"] == 0 else f" **exit {r['exit_code']}**"
        lines.append(f"| {r['size']} | {r['engine']} | {r['stage']}{failed} | {r['wall_s']} | "
                     f"{r['ns_per_edge'] / 1000:.2f} | {workers} | {r['worker_processes']} | "
                     f"{r['stage_peak_mb']:.0f} ({r['stage_anon_mb']:.0f}) | {r['load']} |")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True,
                        help="tables and runs (outside the repository); removed at the end")
    parser.add_argument("--sizes", default="10M,40M", help="10M | 40M | 160M | NODES:EDGES, ...")
    parser.add_argument("--local", default="10M",
                        help="sizes also run on cluster.engine: local ('' = none)")
    parser.add_argument("--engines", default="dask", help="engines of every size: dask, local")
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--dvc", action="store_true", help="time DVC on each dask run")
    parser.add_argument("--keep", action="store_true", help="keep the tables and runs")
    parser.add_argument("--resume", action="store_true",
                        help="run --stages in a kept run folder instead of a fresh copy")
    parser.add_argument("--dvc-stages", default="",
                        help="the stages --dvc commits (default: --stages; with --resume, list "
                             "the kept run's earlier stages too)")
    parser.add_argument("--cache-type", default="",
                        help="the scratch repository's DVC cache.type with --dvc "
                             "(e.g. hardlink: no second copy of the outputs on disk)")
    parser.add_argument("--json", type=Path, default=None, help="write every row here too")
    args = parser.parse_args(argv)
    args.stages = args.stages.split(",")
    args.dvc_stages = [s for s in args.dvc_stages.split(",") if s]
    args.dir = args.dir.resolve()
    local = set(filter(None, args.local.split(",")))
    rows = []
    for text in args.sizes.split(","):
        size = parse_size(text)
        start = time.perf_counter()
        write_tables(args.dir / f"tables-{size[0]}", size[1], size[2], args.features)
        print(f"# {size[0]}: tables written in {time.perf_counter() - start:.0f} s", flush=True)
        engines = args.engines.split(",") + (["local"] if text in local else [])
        for engine in dict.fromkeys(engines):
            rows += run_size(args, size, engine)
        if not args.keep:
            shutil.rmtree(args.dir / f"tables-{size[0]}", ignore_errors=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
