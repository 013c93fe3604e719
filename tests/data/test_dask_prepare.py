"""prepare on cluster.engine: dask (gnnpipe/data/dask_prepare.py): every prepared file byte for
byte as cluster.engine: local writes it, on tables cut into many blocks; the local reader's
one-line errors; refusals. The block functions run in this process (a client of None) except in
one test, on real LocalClusters of 1, 2 and 4 workers."""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import yaml

from gnnpipe.cli import main
from gnnpipe.commands import prepare as command
from gnnpipe.data import dask_prepare
from gnnpipe.data.dask_prepare import BlockSizes

N, F = 60, 3
TINY = BlockSizes(bucket_rows=37, row_block_edges=23, csv_block_bytes=300)


def tables(ids=None, seed: int = 0, labels=None, loops_and_repeats: bool = True) -> dict:
    """A node table (x[:, 0] = row) and an edge table of random pairs, with self-loops, repeated
    pairs and reverse pairs."""
    rng = np.random.default_rng(seed)
    ids = np.arange(N) * 7 + 3 if ids is None else np.asarray(ids)
    x = np.stack([np.arange(N), rng.random(N), rng.normal(size=N)], axis=1).astype(np.float32)
    label = rng.integers(0, 4, N) * 10 if labels is None else labels
    src, dst = rng.integers(0, N, 150), rng.integers(0, N, 150)
    if loops_and_repeats:
        src = np.concatenate([src, [1, 2, 5, src[0], dst[3]]])
        dst = np.concatenate([dst, [1, 9, 5, dst[0], src[3]]])
    nodes = pa.table({"id": ids, "x": pa.array(x.tolist(), pa.list_(pa.float32())),
                      **{f"f_{j}": x[:, j] for j in range(F)}, "label": label})
    return {"nodes": nodes, "edges": pa.table({"src": ids[src], "dst": ids[dst]})}


def write(folder: Path, data: dict, fmt: str = "parquet", node_rows: int = 7,
          edge_rows: int = 11) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        pacsv.write_csv(data["nodes"].drop_columns(["x"]), folder / "nodes.csv")
        pacsv.write_csv(data["edges"], folder / "edges.csv")
        return folder
    pq.write_table(data["nodes"], folder / "nodes.parquet", row_group_size=node_rows)
    parts = folder / "edges.parquet"  # a folder of two parts
    parts.mkdir()
    half = data["edges"].num_rows // 2
    pq.write_table(data["edges"].slice(0, half), parts / "a.parquet", row_group_size=edge_rows)
    pq.write_table(data["edges"].slice(half), parts / "b.parquet", row_group_size=edge_rows)
    return folder


def run_prepare(tmp_path: Path, name: str, dataset: dict, cluster: dict | None = None
                ) -> tuple[int, Path]:
    params = tmp_path / f"{name}.yaml"
    params.write_text(yaml.safe_dump({"dataset": dataset, **({"cluster": cluster} if cluster
                                                             else {})}))
    out = tmp_path / name
    code = main(["prepare", "--params", str(params), "--out", str(out),
                 "--metrics", str(tmp_path / f"{name}.json")])
    return code, out


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture
def inline(monkeypatch):
    """cluster.engine: dask with the block functions run in this process, in tiny blocks."""
    monkeypatch.setattr(command, "session", lambda cfg: contextlib.nullcontext(None))
    monkeypatch.setattr(dask_prepare, "SIZES", TINY)


def assert_same_as_local(tmp_path: Path, dataset: dict) -> Path:
    assert run_prepare(tmp_path, "local", dataset)[0] == 0
    code, out = run_prepare(tmp_path, "dask", dataset, {"engine": "dask"})
    assert code == 0
    assert digests(out) == digests(tmp_path / "local")
    assert (tmp_path / "dask.json").read_text() == (tmp_path / "local.json").read_text()
    return out


CASES = {
    "int ids, list features": ({}, {}),
    "string ids, scalar features, float16": (
        {"ids": np.array([f"n{i:03d}" for i in range(N)][::-1])},
        {"nodes": {"features": "f_*"}, "storage": {"feature_dtype": "float16"}}),
    "directed, keep loops, no dedup": ({}, {"undirected": False, "dedup": False,
                                            "self_loops": "keep"}),
    "undirected, keep loops, no dedup, bfloat16": (
        {}, {"dedup": False, "self_loops": "keep", "storage": {"feature_dtype": "bfloat16"}}),
    "directed dedup, external features, string labels": (
        {"labels": pa.array(["a", "b", None, "c", "NA"] * (N // 5))},
        {"undirected": False, "storage": {"features": "external"}}),
    "unlabelled values": ({"labels": np.arange(N) % 3 - 1},
                          {"nodes": {"unlabeled_values": [-1]}}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_blocks_write_the_local_files_byte_for_byte(tmp_path, inline, case):
    data_args, extra = CASES[case]
    folder = write(tmp_path / "in", tables(**data_args))
    assert_same_as_local(tmp_path, {"source": "parquet", "path": str(folder), **extra})


@pytest.mark.parametrize("ids", ["ints", "leading zeros"])
def test_csv_tables_by_blocks_match_local(tmp_path, inline, ids):
    names = np.arange(N) * 7 + 3 if ids == "ints" else np.array([f"{i:04d}" for i in range(N)])
    folder = write(tmp_path / "in", tables(ids=names), fmt="csv")
    assert_same_as_local(tmp_path, {"source": "csv", "path": str(folder),
                                    "nodes": {"features": "f_*"}})
