"""prepare of the user's tables by blocks (gnnpipe/data/prepare_tables.py), on both engines:
every prepared file byte for byte as the whole-graph oracle writes it (edge_attrs_node__to__node
.parquet included), on tables cut into many blocks; the whole-table reader's one-line errors;
the tables the sources write (gnnpipe/data/source_tables.py). The block functions run in this
process (a client of None) except in one test, on real LocalClusters of 1, 2 and 4 workers
(typed tables and the typed synthetic graph too: test_dask_typed.py's)."""

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

from conftest import scale_cluster
from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.commands import prepare as command
from gnnpipe.config import params_from_dict
from gnnpipe.data import prepare_tables
from gnnpipe.data.table_blocks import BlockSizes
from graph_oracle import prepare_dataset, prepare_whole

N, F = 60, 3
TINY = BlockSizes(bucket_rows=37, row_block_edges=23, csv_block_bytes=300, node_csv_bytes=400)


def tables(ids=None, seed: int = 0, labels=None, loops_and_repeats: bool = True,
           times=None) -> dict:
    """A node table (x[:, 0] = row, a timestamp column t) and an edge table of random pairs,
    with self-loops, repeated pairs and reverse pairs."""
    rng = np.random.default_rng(seed)
    ids = np.arange(N) * 7 + 3 if ids is None else np.asarray(ids)
    x = np.stack([np.arange(N), rng.random(N), rng.normal(size=N)], axis=1).astype(np.float32)
    label = rng.integers(0, 4, N) * 10 if labels is None else labels
    src, dst = rng.integers(0, N, 150), rng.integers(0, N, 150)
    if loops_and_repeats:
        src = np.concatenate([src, [1, 2, 5, src[0], dst[3]]])
        dst = np.concatenate([dst, [1, 9, 5, dst[0], src[3]]])
    nodes = pa.table({"id": ids, "x": pa.array(x.tolist(), pa.list_(pa.float32())),
                      **{f"f_{j}": x[:, j] for j in range(F)}, "label": label,
                      "t": rng.integers(0, 1000, N) if times is None else times})
    rows = src.size  # edge weights, times with ties (int, float and timestamp columns)
    ts = rng.integers(0, 6, rows)
    return {"nodes": nodes, "edges": pa.table({
        "src": ids[src], "dst": ids[dst], "w": rng.random(rows).astype(np.float32),
        "ts": ts, "fts": ts / 2, "tts": pa.array(ts * 1000, pa.timestamp("ms"))})}


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


def run_prepare(tmp_path: Path, name: str, dataset: dict, cluster: dict | None = None,
                sections: dict | None = None) -> tuple[int, Path]:
    params = tmp_path / f"{name}.yaml"
    params.write_text(yaml.safe_dump({"dataset": dataset, **({"cluster": cluster} if cluster
                                                             else {}), **(sections or {})}))
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
    monkeypatch.setattr(prepare_tables, "SIZES", TINY)


def whole_graph(tmp_path: Path, name: str, dataset: dict, sections: dict | None = None) -> Path:
    """The oracle: the same files from the graph whole in memory (``prepare_whole``)."""
    params = params_from_dict({"dataset": dataset, **(sections or {})})
    with io.atomic_dir(tmp_path / name) as out:
        io.write_json(tmp_path / f"{name}.json", prepare_whole(params, out))
    return tmp_path / name


def assert_same_as_local(tmp_path: Path, dataset: dict, cluster: dict | None = None,
                         sections: dict | None = None) -> Path:
    """The block prepare (``cluster``: on Dask) writes the whole-graph oracle's files;
    ``sections``: other params sections of both runs."""
    whole_graph(tmp_path, "local", dataset, sections)
    code, out = run_prepare(tmp_path, "dask", dataset, cluster or {"engine": "dask"}, sections)
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
    "node times": ({}, {"nodes": {"timestamp": "t"}}),
    "float node times": ({"times": np.linspace(0, 1, N)}, {"nodes": {"timestamp": "t"}}),
    "date node times": ({"times": pa.array(np.arange(N) * 3, pa.int32()).cast(pa.date32())},
                        {"nodes": {"timestamp": "t"}, "storage": {"features": "external"}}),
    "edge weights and times, undirected dedup": ({}, {"edges": {"weight": "w",
                                                                "timestamp": "ts"}}),
    "edge times, copies by time": ({}, {"dedup": False, "self_loops": "keep",
                                        "edges": {"timestamp": "fts"}}),
    "edge weights, directed copies": ({}, {"undirected": False, "dedup": False,
                                           "edges": {"weight": "w"}}),
    "timestamp-typed edge times, directed dedup": ({}, {"undirected": False,
                                                        "edges": {"timestamp": "tts"}}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_blocks_write_the_local_files_byte_for_byte(tmp_path, inline, case):
    data_args, extra = CASES[case]
    folder = write(tmp_path / "in", tables(**data_args))
    assert_same_as_local(tmp_path, {"source": "parquet", "path": str(folder), **extra})


def test_local_engine_prepares_tables_by_blocks_beside_the_output(tmp_path, monkeypatch):
    folder = write(tmp_path / "in", tables())
    dataset = {"source": "parquet", "path": str(folder), "edges": {"weight": "w"}}
    oracle = whole_graph(tmp_path, "whole", dataset)
    seen = []

    def spy(client, cfg, out, scratch, **kwargs):
        seen.append((client, scratch.parent, scratch.exists()))
        return prepare_tables.prepare_tables(client, cfg, out, scratch, TINY, **kwargs)

    monkeypatch.setattr(command, "prepare_tables", spy)
    code, out = run_prepare(tmp_path, "local", dataset)
    assert code == 0 and seen == [(None, tmp_path, True)]  # in process, scratch beside out
    assert digests(out) == digests(oracle)
    assert (tmp_path / "local.json").read_text() == (tmp_path / "whole.json").read_text()
    assert not list(tmp_path.glob(".local-blocks*"))


SYNTHETIC = {
    "default shape": {},
    "timestamps, few labels, float16": {"synthetic": {"timestamps": True, "label_rate": 0.2},
                                        "storage": {"feature_dtype": "float16"}},
    "external features, directed, loops kept": {"storage": {"features": "external"},
                                                "undirected": False, "self_loops": "keep"},
    "a class never drawn": {"synthetic": {"num_classes": 9, "class_imbalance": 4.0}},
    "no edge drawn: the warning names the source": {"synthetic": {"avg_degree": 0.001}},
}


@pytest.mark.parametrize("case", list(SYNTHETIC))
def test_the_synthetic_graph_goes_through_the_block_prepare_unchanged(tmp_path, inline, case):
    extra = SYNTHETIC[case]
    dataset = {"source": "synthetic", **extra,
               "synthetic": {"num_nodes": 300, "avg_degree": 6.0, "num_features": 5,
                             **extra.get("synthetic", {})}}
    out = assert_same_as_local(tmp_path, dataset)
    assert not (out / "node_ids_node.parquet").exists()  # node i is row i: no ids to keep
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_block_prepare_reports_its_progress(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GNNPIPE_PROGRESS", "1")  # off a terminal: plain lines
    folder = write(tmp_path / "in", tables())
    assert run_prepare(tmp_path, "out", {"source": "parquet", "path": str(folder)})[0] == 0
    assert "prepare by blocks: 4/4 steps" in capsys.readouterr().err


@pytest.mark.parametrize("source", ["planetoid", "ogb"])
def test_the_readers_graphs_go_through_the_block_prepare_unchanged(tmp_path, inline, source):
    """Their official split (graph.pt's public_roles, prepare.json's public_split) included."""
    from test_sources import write_ogb, write_planetoid

    if source == "planetoid":
        write_planetoid(tmp_path / "raw")
        dataset = {"source": "planetoid", "path": str(tmp_path / "raw"), "name": "Cora"}
    else:
        write_ogb(tmp_path / "raw" / "ogbn_tiny")
        dataset = {"source": "ogb", "path": str(tmp_path / "raw"), "name": "ogbn-tiny"}
    assert_same_as_local(tmp_path, dataset)
    assert "public_split" in (tmp_path / "dask.json").read_text()


@pytest.mark.parametrize("column, late", [("f_0", 59.5), ("label", "z")])
def test_a_csv_column_a_later_block_widens_is_read_as_the_whole_file_reads_it(tmp_path, inline,
                                                                              column, late):
    """The first CSV block says integers; the last row holds a decimal (or text): read again
    as decimals (or text), not refused."""
    data = tables()
    values = data["nodes"].column(column).to_pylist()
    text = isinstance(late, str)  # a text column whose first cells read as integers
    data["nodes"] = _set(data["nodes"], column, pa.array(
        [str(v) if text else v for v in values[:-1]] + [late]))
    folder = write(tmp_path / "in", data, fmt="csv")
    assert_same_as_local(tmp_path, {"source": "csv", "path": str(folder),
                                    "nodes": {"features": "f_*"}})


@pytest.mark.parametrize("ids", ["ints", "leading zeros"])
def test_csv_tables_by_blocks_match_local(tmp_path, inline, ids):
    names = np.arange(N) * 7 + 3 if ids == "ints" else np.array([f"{i:04d}" for i in range(N)])
    folder = write(tmp_path / "in", tables(ids=names), fmt="csv")
    assert_same_as_local(tmp_path, {"source": "csv", "path": str(folder),
                                    "nodes": {"features": "f_*", "timestamp": "t"},
                                    "edges": {"weight": "w", "timestamp": "fts"}})


@pytest.mark.parametrize("workers", [4, 2, 1])
def test_clusters_of_4_2_and_1_workers_write_the_local_files(tmp_path, monkeypatch, dask_cluster,
                                                             workers):
    """Homogeneous and typed tables and the typed synthetic graph (test_dask_typed.py's) on one
    module cluster: a cluster and its workers' imports cost seconds a file."""
    from test_dask_typed import typed_dataset, typed_synthetic, typed_tables, write_typed

    monkeypatch.setattr(prepare_tables, "SIZES", TINY)
    scale_cluster(dask_cluster, workers)
    cluster = {"engine": "dask", "address": dask_cluster.scheduler_address}
    ids = np.array([f"user-{i}" for i in range(N)])
    folder = write(tmp_path / "in", tables(ids=ids, seed=workers))
    (tmp_path / "homogeneous").mkdir()
    assert_same_as_local(tmp_path / "homogeneous", {"source": "parquet", "path": str(folder)},
                         cluster)
    root = write_typed(tmp_path / "typed-in", typed_tables(seed=workers))
    (tmp_path / "typed").mkdir()
    assert_same_as_local(tmp_path / "typed", typed_dataset(root), cluster)
    (tmp_path / "synthetic").mkdir()
    assert_same_as_local(tmp_path / "synthetic", typed_synthetic(), cluster,
                         {"seed": workers})
    assert not list(tmp_path.rglob(".dask-blocks*"))  # the scratch folders are gone


def test_edges_without_rows_match_local_and_warn(tmp_path, inline):
    data = tables()
    data["edges"] = data["edges"].slice(0, 0)
    folder = write(tmp_path / "in", data)
    out = assert_same_as_local(tmp_path, {"source": "parquet", "path": str(folder)})
    assert "no edge rows" in (tmp_path / "dask.json").read_text()
    assert (out / "graph.pt").exists()


# ------------------------------------------------------------------------------- bad inputs
def _set(table: pa.Table, name: str, column) -> pa.Table:
    return table.set_column(table.column_names.index(name), name, column)


def _nodes(change):
    return lambda d: {**d, "nodes": change(d["nodes"])}


def _edges(change):
    return lambda d: {**d, "edges": change(d["edges"])}


def _with_nan(column: str, rows: list[int]):
    def change(t):
        values = t.column(column).to_numpy().copy()
        values[rows] = np.nan
        return _set(t, column, pa.array(values))
    return change


def _corrupt(folder: Path) -> None:
    path = folder / "nodes.parquet"
    data = bytearray(path.read_bytes())
    middle = len(data) // 3
    data[middle:middle + 200] = b"\xff" * 200
    path.write_bytes(bytes(data))


IDS = np.arange(N) * 7 + 3
BAD = {
    "missing id column": (_nodes(lambda t: t.drop_columns(["id"])), {}),
    "missing label column": (_nodes(lambda t: t.drop_columns(["label"])), {}),
    "missing feature column": (None, {"nodes": {"features": "g_*"}}),
    "missing edge column": (_edges(lambda t: t.rename_columns(["from", *t.column_names[1:]])),
                            {}),
    "unknown edge id": (_edges(lambda t: _set(t, "dst", pa.array(
        np.where(np.arange(t.num_rows) == 77, 5, t.column("dst").to_numpy())))), {}),
    "unknown in both ends": (_edges(lambda t: pa.table({
        "src": np.where(np.arange(t.num_rows) == 90, 4, t.column("src").to_numpy()),
        "dst": np.where(np.arange(t.num_rows) == 30, 6, t.column("dst").to_numpy())})), {}),
    "NaN features in two blocks": (_nodes(_with_nan("f_1", [12, 40])), {}),
    "null features": (_nodes(lambda t: _set(t, "f_2", pa.array(
        [None if i in (9, 33) else 1.0 for i in range(N)]))), {}),
    "all labels missing": (_nodes(lambda t: _set(t, "label", pa.nulls(N, pa.int64()))), {}),
    "fractional label": (_nodes(lambda t: _set(t, "label", pa.array(
        [0.5 if i == 30 else 1.0 for i in range(N)]))), {}),
    "negative label": (_nodes(lambda t: _set(t, "label", pa.array(
        [-3 if i == 44 else i % 2 for i in range(N)]))), {}),
    "one class": (_nodes(lambda t: _set(t, "label", pa.array(
        [None if i % 4 == 0 else 2 for i in range(N)], pa.int64()))), {}),
    "too many classes": (_nodes(lambda t: _set(t, "label", pa.array(np.arange(N)))),
                         {"max_classes": 10}),
    "repeated ids across blocks": (_nodes(lambda t: _set(t, "id", pa.array(
        np.where(np.arange(N) == 50, IDS[8], IDS)))), {}),
    "null edge id": (_edges(lambda t: _set(t, "src", pa.array(
        [None if i in (20, 21) else v for i, v in enumerate(t.column("src").to_pylist())]))),
        {}),
    "float ids": (_nodes(lambda t: _set(t, "id", pa.array(IDS + 0.5))), {}),
    "string feature": (_nodes(lambda t: _set(t, "f_0", pa.array(["a"] * N))), {}),
    "fractional edge ids for integer nodes": (_edges(lambda t: pa.table(
        {"src": t.column("src"), "dst": pa.array(t.column("dst").to_numpy() + 0.5)})), {}),
    "uneven feature lists": (_nodes(lambda t: _set(t, "x", pa.array(
        [[1.0, 2.0, 3.0]] * 20 + [[1.0]] + [[1.0, 2.0, 3.0]] * (N - 21)))),
        {"nodes": {"features": "x"}}),
    "NaN in a feature list": (_nodes(lambda t: _set(t, "x", pa.array(
        [[1.0, 2.0, float("nan")] if i in (3, 50) else [1.0, 2.0, 3.0] for i in range(N)]))),
        {"nodes": {"features": "x"}}),
    "null node times": (_nodes(lambda t: _set(t, "t", pa.array(
        [None if i in (8, 41) else 1 for i in range(N)], pa.int64()))),
        {"nodes": {"timestamp": "t"}}),
    "NaN node times": (_nodes(_with_nan("t", [30, 31, 59])), {"nodes": {"timestamp": "t"}}),
    "text node times": (_nodes(lambda t: _set(t, "t", pa.array(["x"] * N))),
                        {"nodes": {"timestamp": "t"}}),
    "missing time column": (None, {"nodes": {"timestamp": "when"}}),
    "NaN edge weight": (_edges(_with_nan("w", [33, 90])), {"edges": {"weight": "w"}}),
    "text edge weight": (_edges(lambda t: _set(t, "w", pa.array(["a"] * t.num_rows))),
                         {"edges": {"weight": "w"}}),
    "null edge time": (_edges(lambda t: _set(t, "ts", pa.array(
        [None if i in (14, 70) else 1 for i in range(t.num_rows)], pa.int64()))),
        {"edges": {"timestamp": "ts"}}),
    "missing edge time column": (None, {"edges": {"timestamp": "when"}}),
    "corrupted parquet": ("corrupt", {}),
    "not parquet": ("not parquet", {}),
}


def _error(fn) -> str:
    with pytest.raises(ValueError) as err:
        fn()
    return str(err.value)


@pytest.mark.parametrize("case", list(BAD))
def test_bad_tables_give_the_local_message(tmp_path, case):
    spoil, extra = BAD[case]
    data = tables(ids=IDS, times=np.arange(N, dtype=np.float64))
    data = spoil(data) if callable(spoil) else data
    folder = write(tmp_path / "in", data)
    if spoil == "corrupt":
        _corrupt(folder)
    elif spoil == "not parquet":
        (folder / "edges.parquet" / "a.parquet").write_text("src,dst\n1,2\n")
    cfg = params_dataset(folder, **({"nodes": {"features": "f_*"}} | extra))
    local = _error(lambda: prepare_dataset(cfg, 0))
    blocks = _error(lambda: in_blocks(tmp_path, cfg))
    assert blocks == local
    assert "\n" not in blocks


def test_a_bad_table_through_the_cli_gives_one_line_and_leaves_nothing(tmp_path, inline,
                                                                       capsys):
    folder = write(tmp_path / "in", _nodes(_with_nan("f_1", [12, 40]))(tables()))
    code, out = run_prepare(tmp_path, "dask", {"source": "parquet", "path": str(folder),
                                               "nodes": {"features": "f_*"}}, {"engine": "dask"})
    err = capsys.readouterr().err.strip()
    assert code == 1 and "\n" not in err
    assert "feature column 'f_1' has NaN or inf in 2 rows (first: row 12)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dask.yaml", "in"]  # no scratch left


CSV_BAD = {
    "blank edge id": "",
    "non-canonical edge id": "0010",
    "unknown edge id": "99999",
}


def test_node_parts_of_different_column_types_are_refused_edge_parts_not(tmp_path, inline):
    data = tables()
    folder = write(tmp_path / "in", data)
    part = folder / "edges.parquet" / "b.parquet"  # edge parts are read one by one: fine
    edges = pq.read_table(part)
    pq.write_table(_set(edges, "src", edges.column("src").cast(pa.int32())), part)
    assert_same_as_local(tmp_path, {"source": "parquet", "path": str(folder)})
    (folder / "nodes.parquet").unlink()
    (folder / "nodes.parquet").mkdir()
    pq.write_table(data["nodes"].slice(0, 30), folder / "nodes.parquet" / "a.parquet")
    pq.write_table(data["nodes"].slice(30).cast(data["nodes"].schema.set(
        data["nodes"].schema.get_field_index("label"), pa.field("label", pa.int32()))),
        folder / "nodes.parquet" / "b.parquet")
    cfg = params_dataset(folder)
    assert "nodes.parquet: parts disagree in column types" in _error(
        lambda: prepare_dataset(cfg, 0))
    assert _error(lambda: in_blocks(tmp_path, cfg)).endswith(
        "nodes.parquet: parts disagree in column types (column 'label' is int32 in b.parquet, "
        "int64 in a.parquet)")


@pytest.mark.parametrize("case", list(CSV_BAD))
def test_bad_csv_edge_ids_give_the_local_message(tmp_path, case):
    folder = write(tmp_path / "in", tables(ids=IDS), fmt="csv")
    lines = (folder / "edges.csv").read_text().splitlines()
    lines[40] = f"{lines[40].split(',')[0]},{CSV_BAD[case]}"
    (folder / "edges.csv").write_text("\n".join(lines) + "\n")
    cfg = params_dataset(folder, source="csv", nodes={"features": "f_*"})
    local = _error(lambda: prepare_dataset(cfg, 0))
    blocks = _error(lambda: in_blocks(tmp_path, cfg))
    assert blocks == local


def in_blocks(tmp_path: Path, cfg):
    for name in ("out", "scratch"):
        (tmp_path / name).mkdir(exist_ok=True)
    return prepare_tables.prepare_tables(None, cfg, tmp_path / "out", tmp_path / "scratch",
                                         TINY)


def params_dataset(folder: Path, **dataset):
    return params_from_dict({"dataset": {"source": "parquet", "path": str(folder),
                                         **dataset}}).dataset
