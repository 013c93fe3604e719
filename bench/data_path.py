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

``--shape mag`` runs a typed graph shaped like OGB-MAG instead (issue 44 item 4):

    nice -n 5 python -m bench.data_path --dir /work/scale_data --shape mag --sizes 10M,40M \
        --local ''

a size counts edge rows in all (``NODES:EDGES``: papers and edge rows; ``736389:21111007`` is
OGB-MAG's own size), split over OGB-MAG's relations in its proportions (``MAG_EDGES``):
author writes paper 34%, paper cites paper 26%, paper has_topic field_of_study 36%, author
affiliated_with institution 5%; the node types keep OGB-MAG's ratios to papers (``MAG_NODES``:
10M = 349k papers, 537k authors, 4.1k institutions, 28k fields of study; 40M = 1.40M papers).
``write_mag_tables`` writes ``nodes/<type>.parquet`` and ``edges/<src>__<rel>__<dst>.parquet``
a row group at a time: papers with 128 float32 features (unit noise plus a class mean), one
of 349 labels and a year; authors, institutions and fields with ids only (featureless: degree
features, as OGB-MAG has them); each relation's rows 80% inside the source's class.
``MAG_PARAMS`` on top of ``PARAMS``: ``dataset.layout: typed``, target paper,
``dataset.undirected: true`` (each relation gains its reverse, so about twice the rows are
stored), the MLP baseline only; the same stages, where propagate marks itself not applicable.

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

# --shape mag: OGB-MAG's node and edge counts (ogbn-mag, node types and relations in name order)
MAG_NODES = {"author": 1_134_649, "field_of_study": 59_965, "institution": 8_740,
             "paper": 736_389}
MAG_EDGES = {"author__affiliated_with__institution": 1_043_998,
             "author__writes__paper": 7_145_660, "paper__cites__paper": 5_416_271,
             "paper__has_topic__field_of_study": 7_505_078}
MAG_CLASSES = 349  # ogbn-mag's venue classes
MAG_PARAMS = {  # on top of PARAMS: a typed node task on papers; the reverses let every type send
    "dataset": {"layout": "typed", "undirected": True, "nodes": {"timestamp": "year"},
                "typed": {"target": "paper", "featureless": "degree"}},
    "baseline": {"models": ["mlp"]},  # auto fits gbdt (349 classes) at 10M and not at 40M
}


def parse_size(text: str, shape: str = "homogeneous") -> tuple[str, int, int]:
    """``(name, nodes, edges)`` of ``10M`` / ``40M`` / ``160M`` or ``NODES:EDGES``; with
    ``shape="mag"`` ``nodes`` counts papers, for a named size OGB-MAG's papers per edge row
    times ``edges``, and the name starts with ``mag-``."""
    nodes, sep, edges = text.partition(":")
    if text in NAMED:
        nodes, edges = NAMED[text]
        name = text
    elif not sep or not nodes.isdigit() or not edges.isdigit() or int(nodes) < 2:
        raise ValueError(f"--sizes: {text!r} is not one of {', '.join(NAMED)} or NODES:EDGES")
    else:
        nodes, edges, name = int(nodes), int(edges), text.replace(":", "x")
    if shape != "mag":
        return name, nodes, edges
    if text in NAMED:
        nodes = round(edges * MAG_NODES["paper"] / sum(MAG_EDGES.values()))
    return f"mag-{name}", nodes, edges


def merged(base: dict, over: dict) -> dict:
    """``base`` with ``over``'s keys set, nested sections merged key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(base.get(key, {}), value) if isinstance(value, dict) else value
    return out


# ---------------------------------------------------------------------------- the user tables
def _features(x: np.ndarray):
    """(B, F) float32 rows as a Parquet fixed-size list column."""
    import pyarrow as pa

    return pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])


def _edge_rows(rng: np.random.Generator, rows: int, n_src: int, n_dst: int, classes: int,
               homophily: float) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` dense (src, dst) pairs, (rows,) each: src uniform, dst inside the source's class
    (dense ``i`` of any type is class ``i % classes``) with probability ``homophily``, else
    uniform."""
    src = rng.integers(0, n_src, rows)
    dst = rng.integers(0, n_dst, rows)
    same = rng.random(rows) < homophily
    inside = src % classes + rng.integers(0, -(-n_dst // classes), rows) * classes
    return src, np.where(same & (inside < n_dst), inside, dst)


def _write_pairs(path: Path, rng: np.random.Generator, rows: int, src_ids: np.ndarray,
                 dst_ids: np.ndarray, classes: int, homophily: float) -> None:
    """An edge table of ``rows`` (src, dst) user ids, one row group of ``_edge_rows`` at a
    time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pq.ParquetWriter(path, pa.schema([("src", pa.int64()), ("dst", pa.int64())])) as writer:
        for lo in range(0, rows, GROUP):
            src, dst = _edge_rows(rng, min(GROUP, rows - lo), len(src_ids), len(dst_ids),
                                  classes, homophily)
            writer.write_table(pa.table({"src": src_ids[src], "dst": dst_ids[dst]}))


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
            writer.write_table(pa.table({"id": ids[dense], "x": _features(x),
                                         "label": dense % classes}, schema=schema))
    _write_pairs(folder / ".edges.parquet.tmp", rng, edges, ids, ids, classes, homophily)
    os.replace(folder / ".nodes.parquet.tmp", folder / "nodes.parquet")
    os.replace(folder / ".edges.parquet.tmp", folder / "edges.parquet")


def mag_counts(papers: int, edges: int) -> tuple[dict[str, int], dict[str, int]]:
    """Rows per node table (type -> count) and per edge table (``src__rel__dst`` -> count) of
    a graph with OGB-MAG's proportions, ``papers`` papers and ``edges`` edge rows in all (the
    last relation takes the rounding)."""
    nodes = {t: max(1, round(n * papers / MAG_NODES["paper"])) for t, n in MAG_NODES.items()}
    nodes["paper"] = papers
    total = sum(MAG_EDGES.values())
    rows = {r: round(n * edges / total) for r, n in MAG_EDGES.items()}
    last = next(reversed(rows))
    rows[last] = edges - sum(rows.values()) + rows[last]
    return nodes, rows


def write_mag_tables(folder: Path, papers: int, edges: int, features: int = 128,
                     classes: int = MAG_CLASSES, homophily: float = 0.8) -> None:
    """Typed tables shaped like OGB-MAG (``mag_counts``) under ``folder/nodes`` and
    ``folder/edges`` (``dataset.layout: typed``), a row group at a time, seeded per table.
    ``nodes/paper.parquet``: id, x (``features`` float32: unit noise plus the mean of its
    class), label (``i % classes`` for dense paper ``i``), year (2010..2019); author,
    institution and field_of_study: id only (featureless, as in OGB-MAG). Every type's dense
    ``i`` has id ``perm[i] * 3 + 1000`` and class ``i % classes``, and each relation's dst is in
    its src's class with probability ``homophily`` (``_edge_rows``). Skipped when ``edges/``
    exists (moved in last)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if (folder / "edges").exists():
        return
    counts, rows = mag_counts(papers, edges)
    tmp = folder / ".mag.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "nodes").mkdir(parents=True)
    (tmp / "edges").mkdir()
    ids = {t: np.random.default_rng([0, k]).permutation(n).astype(np.int64) * 3 + 1000
           for k, (t, n) in enumerate(counts.items())}  # type -> (N_t,) user id of dense i
    rng = np.random.default_rng([1, 0])
    means = rng.standard_normal((classes, features)).astype(np.float32) * (2 / features ** 0.5)
    schema = pa.schema([("id", pa.int64()), ("x", pa.list_(pa.float32(), features)),
                        ("label", pa.int64()), ("year", pa.int64())])
    with pq.ParquetWriter(tmp / "nodes" / "paper.parquet", schema) as writer:
        for lo in range(0, papers, GROUP):
            dense = np.arange(lo, min(lo + GROUP, papers))
            x = rng.standard_normal((len(dense), features), dtype=np.float32)
            x += means[dense % classes]  # the class signal, norm about 2
            writer.write_table(pa.table({"id": ids["paper"][dense], "x": _features(x),
                                         "label": dense % classes,
                                         "year": 2010 + rng.integers(0, 10, len(dense))},
                                        schema=schema))
    for node_type, table_ids in ids.items():
        if node_type != "paper":
            pq.write_table(pa.table({"id": table_ids}), tmp / "nodes" / f"{node_type}.parquet",
                           row_group_size=GROUP)
    for k, (relation, n) in enumerate(rows.items()):
        src, _, dst = relation.split("__")
        _write_pairs(tmp / "edges" / f"{relation}.parquet", np.random.default_rng([2, k]), n,
                     ids[src], ids[dst], classes, homophily)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(folder / "nodes", ignore_errors=True)
    os.replace(tmp / "nodes", folder / "nodes")
    os.replace(tmp / "edges", folder / "edges")
    tmp.rmdir()


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
def scratch_repo(run: Path, tables: Path, engine: str, dvc: bool, cache_type: str = "", *,
                 params: dict | None = None) -> None:
    """The pipeline copied into ``run`` with ``params`` (default ``PARAMS``) for ``tables`` on
    ``engine``; a git repository with one commit when DVC is to be timed there (``cache_type``:
    its ``cache.type``, DVC's default when empty)."""
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(REPO, run, ignore=_not_copied)
    params = merged(yaml.safe_load((REPO / "params.yaml").read_text()), merged(
        PARAMS if params is None else params,
        {"dataset": {"path": str(tables)}, "cluster": {"engine": engine}}))
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
        scratch_repo(run, tables, engine, dvc, args.cache_type,
                     params=merged(PARAMS, MAG_PARAMS) if args.shape == "mag" else PARAMS)
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
    parser.add_argument("--shape", choices=("homogeneous", "mag"), default="homogeneous",
                        help="mag: typed tables shaped like OGB-MAG (write_mag_tables); sizes "
                             "count edge rows, NODES:EDGES = papers:edge rows")
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
        size = parse_size(text, args.shape)
        start = time.perf_counter()
        write = write_mag_tables if args.shape == "mag" else write_tables
        write(args.dir / f"tables-{size[0]}", size[1], size[2], args.features)
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
