"""prepare on ``cluster.engine: dask`` as the graph grows (issue 32 item 2): peak memory of each
Dask worker and of the stage process, for user Parquet tables of several sizes (x4 each), on an
embedded LocalCluster of 2 workers; optionally ``cluster.engine: local`` on the same tables.

    python -m bench.prepare_scale --dir /tmp/prep --sizes 1,4,16 --local
    python -m bench.prepare_scale --dir /tmp/prep --sizes 1,4 --local --typed
    python -m bench.prepare_scale --dir /tmp/prep --sizes 10 --features 128 --trees OLD .

``--trees``: ``gnnpipe prepare`` of each checkout (its own code and params.yaml), alternating,
on the default params (the embedded synthetic graph) and on the size's tables (directed, on
``cluster.engine: local``): wall time and peak RSS of each run, old against new in one run.

Size ``s``: ``s * 62,500`` nodes with ``--features`` float32 features and 4 labels, ``s * 1M``
directed edge rows of random integer ids (string-free, shuffled node table), written as Parquet
row groups of 65,536 rows. Each run is its own child process (``--one``), which prepares the
tables and reports, from /proc: the peak resident set (VmHWM: anonymous and file-backed pages,
such as the memory maps the stage writes and torch.save reads) and the peak of anonymous memory
alone (RssAnon sampled every 20 ms), for itself and for each worker (sampled in the worker, read
through ``client.run``). ``--typed``: typed tables of the same counts: ``user`` (the target: the nodes, features and
labels above, string-free), a featureless ``item`` type of a quarter as many nodes, and two
relations, ``user__follows__user`` (half the edge rows) and ``user__buys__item`` (the other half,
with an integer time column carried as edge times), undirected (so ``item rev_buys user`` too).
Block targets are ``--block-rows`` (ids per join bucket and stored edges
per row block), so every size has several blocks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

BASE_NODES, BASE_EDGES, GROUP = 62_500, 1_000_000, 65_536


def write_tables(folder: Path, scale: float, features: int) -> None:
    """nodes.parquet / edges.parquet of size ``scale``, written a row group at a time."""
    if (folder / "edges.parquet").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    n, e = int(BASE_NODES * scale), int(BASE_EDGES * scale)
    ids = rng.permutation(n).astype(np.int64) * 3 + 1000
    schema = pa.schema([("id", pa.int64()), ("x", pa.list_(pa.float32(), features)),
                        ("label", pa.int64())])
    with pq.ParquetWriter(folder / "nodes.parquet", schema) as writer:
        for lo in range(0, n, GROUP):
            rows = min(GROUP, n - lo)
            x = rng.random((rows, features), dtype=np.float32)
            writer.write_table(pa.table({
                "id": ids[lo:lo + rows],
                "x": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), features),
                "label": rng.integers(0, 4, rows)}, schema=schema))
    with pq.ParquetWriter(folder / "edges.parquet",
                          pa.schema([("src", pa.int64()), ("dst", pa.int64())])) as writer:
        for lo in range(0, e, GROUP):
            rows = min(GROUP, e - lo)
            writer.write_table(pa.table({"src": ids[rng.integers(0, n, rows)],
                                         "dst": ids[rng.integers(0, n, rows)]}))


def write_typed_tables(folder: Path, scale: float, features: int) -> None:
    """nodes/{user,item}.parquet and edges/{user__follows__user,user__buys__item}.parquet of
    size ``scale``, a row group at a time."""
    if (folder / "edges" / "user__buys__item.parquet").exists():
        return
    write_tables(folder / "flat", scale, features)
    (folder / "nodes").mkdir(parents=True, exist_ok=True)
    (folder / "edges").mkdir(parents=True, exist_ok=True)
    (folder / "flat" / "nodes.parquet").rename(folder / "nodes" / "user.parquet")
    rng = np.random.default_rng(1)
    items = int(BASE_NODES * scale) // 4
    pq.write_table(pa.table({"id": rng.permutation(items).astype(np.int64)}),
                   folder / "nodes" / "item.parquet", row_group_size=GROUP)
    flat = pq.ParquetFile(folder / "flat" / "edges.parquet")
    schema = pa.schema([("src", pa.int64()), ("dst", pa.int64()), ("t", pa.int64())])
    with pq.ParquetWriter(folder / "edges" / "user__follows__user.parquet", flat.schema_arrow) \
            as follows, pq.ParquetWriter(folder / "edges" / "user__buys__item.parquet",
                                         schema) as buys:
        for group in range(flat.num_row_groups):
            table = flat.read_row_group(group)
            if group % 2 == 0:
                follows.write_table(table)
            else:
                rows = table.num_rows
                buys.write_table(pa.table({"src": table.column("src"),
                                           "dst": rng.integers(0, items, rows),
                                           "t": rng.integers(0, 1000, rows)}, schema=schema))
    (folder / "flat" / "edges.parquet").unlink()


# ------------------------------------------------------------------------- memory sampling
def _status() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "RssAnon"):
            fields[key] = int(value.split()[0]) // 1024
    return fields


class AnonPeak:
    """Peak RssAnon (MiB) of this process, sampled every 20 ms in a daemon thread."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _status()["RssAnon"])
            time.sleep(0.02)

    def read(self) -> dict[str, int]:
        return {"peak_rss_mb": _status()["VmHWM"], "peak_anon_mb": max(self.peak,
                                                                        _status()["RssAnon"])}


def _start_sampler(dask_worker) -> None:
    dask_worker._bench_peak = AnonPeak()


def _read_sampler(dask_worker) -> dict[str, int]:
    return dask_worker._bench_peak.read()


# ------------------------------------------------------------------------------- one run
def run_one(folder: Path, out: Path, engine: str, block_rows: int, memory_limit: str,
            typed: bool = False) -> dict:
    """Prepare ``folder``'s tables into ``out`` in this process; wall time and memory peaks."""
    from gnnpipe import io
    from gnnpipe.config import params_from_dict
    from gnnpipe.data.prepare_tables import prepare_tables
    from gnnpipe.data.table_blocks import BlockSizes
    from gnnpipe.io.blocks import scratch_beside
    from gnnpipe.runtime.engine import session

    peak = AnonPeak()
    typed_keys = {"layout": "typed", "edges": {"timestamp": "t"}} if typed else {}
    params = params_from_dict({"dataset": {"source": "parquet", "path": str(folder),
                                           **typed_keys},
                               "cluster": {"engine": engine, "workers": 2,
                                           "memory_limit": memory_limit}})
    sizes = BlockSizes(bucket_rows=block_rows, row_block_edges=block_rows)
    start = time.perf_counter()
    workers = {}
    with session(params.cluster) as client, io.atomic_dir(out) as target, \
            scratch_beside(out) as scratch:
        if client is not None:
            client.run(_start_sampler)
        report = prepare_tables(client, params.dataset, target, scratch, sizes).report
        if client is not None:
            workers = client.run(_read_sampler)
    return {"engine": engine, "nodes": report["nodes"], "input_edges": report["input_edges"],
            "edges": report["edges"], "wall_s": round(time.perf_counter() - start, 1),
            "stage": peak.read(), "workers": list(workers.values())}


def compare_trees(trees: list[Path], folder: Path, out: Path, repeats: int,
                  names: list[str]) -> None:
    """``gnnpipe prepare`` of each tree (its own code, run from it) on the default params
    (params.yaml: the embedded synthetic graph) and on ``folder``'s tables, alternating trees
    ``repeats`` times; one JSON line per run (wall seconds, peak RSS of the stage process)."""
    cases = {"default": {}, "tables": {"dataset": {"source": "parquet", "path": str(folder),
                                                   "undirected": False}}}
    for case, extra in ((name, cases[name]) for name in names):
        for repeat in range(repeats):
            for tree in trees:
                params = yaml.safe_load((tree / "params.yaml").read_text())
                for section, values in extra.items():
                    params[section] = {**params[section], **values}
                file = out / f"params-{case}.yaml"
                file.write_text(yaml.safe_dump(params))
                target = out / f"out-{tree.name}-{case}"
                start = time.perf_counter()
                child = subprocess.Popen(
                    [sys.executable, "-m", "gnnpipe", "prepare", "--params", str(file), "--out",
                     str(target), "--metrics", str(out / "prepare.json")], cwd=tree,
                    env={**os.environ, "PYTHONPATH": str(tree), "GNNPIPE_PROGRESS": "0"})
                _, status, usage = os.wait4(child.pid, 0)
                assert status == 0, f"{tree}: prepare failed"
                print(json.dumps({"tree": str(tree), "case": case, "repeat": repeat,
                                  "wall_s": round(time.perf_counter() - start, 2),
                                  "peak_rss_mb": usage.ru_maxrss // 1024}), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="tables and outputs")
    parser.add_argument("--sizes", default="1,4,16", help="comma-separated scales")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--block-rows", type=int, default=1 << 20)
    parser.add_argument("--memory-limit", default="1GiB")
    parser.add_argument("--local", action="store_true", help="also cluster.engine: local")
    parser.add_argument("--typed", action="store_true", help="typed tables (two node types)")
    parser.add_argument("--trees", nargs="+", type=Path, help="compare these checkouts' "
                        "prepare on the default params and the tables of the first --sizes")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cases", default="default,tables", help="which of the --trees cases")
    parser.add_argument("--one", nargs=2, metavar=("SCALE", "ENGINE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        scale, engine = args.one
        kind = "typed" if args.typed else "tables"
        folder = args.dir / f"{kind}-{scale}"
        print(json.dumps(run_one(folder, args.dir / f"out-{kind}-{scale}-{engine}", engine,
                                 args.block_rows, args.memory_limit, args.typed)))
        return
    if args.trees:
        scale = args.sizes.split(",")[0]
        write_tables(args.dir / f"tables-{scale}", float(scale), args.features)
        compare_trees([t.resolve() for t in args.trees], args.dir / f"tables-{scale}", args.dir,
                      args.repeats, args.cases.split(","))
        return
    for scale in args.sizes.split(","):
        if args.typed:
            write_typed_tables(args.dir / f"typed-{scale}", float(scale), args.features)
        else:
            write_tables(args.dir / f"tables-{scale}", float(scale), args.features)
        for engine in ("dask", "local") if args.local else ("dask",):
            done = subprocess.run([sys.executable, "-m", "bench.prepare_scale", "--dir",
                                   str(args.dir), "--block-rows", str(args.block_rows),
                                   "--memory-limit", args.memory_limit, "--one", scale, engine]
                                  + (["--typed"] if args.typed else []),
                                  check=True, stdout=subprocess.PIPE, text=True)
            print(done.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
