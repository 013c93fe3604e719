"""Typed tables prepared by blocks (gnnpipe/data/prepare_tables.py): every prepared file byte for
byte as the whole-graph oracle writes it (``build``), on tables cut into many blocks; the typed
synthetic graph and OGB-MAG written as typed tables first (gnnpipe/data/source_tables.py); the
whole-table reader's one-line errors on bad tables; clusters of 1, 2 and 4 workers (in
tests/data/test_dask_prepare.py, on its module's cluster)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from gnnpipe.config import params_from_dict
from gnnpipe.data.prepare_tables import prepare_tables
from graph_oracle import prepare_dataset
from test_dask_prepare import TINY, _error, assert_same_as_local, inline  # noqa: F401

USERS, ITEMS, SHOPS = 40, 25, 6


def typed_tables(seed: int = 0, user_ids=None, times=None) -> dict[str, pa.Table]:
    """user (target: features, labels, times; string ids), item (int ids, featureless, times),
    shop (featureless, no in-edges when directed); relations with repeated pairs, self-loops,
    edge times with ties."""
    rng = np.random.default_rng(seed)
    users = np.array([f"u{i:03d}" for i in rng.permutation(USERS)]) if user_ids is None \
        else np.asarray(user_ids)
    items = rng.permutation(ITEMS) * 10 + 7
    shops = np.arange(SHOPS) * 3

    def pick(ids, n):
        return ids[rng.integers(0, len(ids), n)]

    x = np.stack([np.arange(USERS), rng.normal(size=USERS)], axis=1).astype(np.float32)
    labels = pa.array([None if i % 7 == 0 else f"c{i % 3}" for i in range(USERS)])
    follows_src, follows_dst = pick(users, 90), pick(users, 90)
    follows_src[:4], follows_dst[:4] = users[:4], users[:4]  # self-loops
    buys_src, buys_dst = pick(users, 120), pick(items, 120)
    buys_src[100:110], buys_dst[100:110] = buys_src[:10], buys_dst[:10]  # repeated pairs
    return {
        "nodes/user": pa.table({"id": users, "f0": x[:, 0], "f1": x[:, 1], "label": labels,
                                "t": rng.integers(0, 50, USERS) if times is None else times}),
        "nodes/item": pa.table({"id": items, "t": rng.integers(0, 9, ITEMS)}),
        "nodes/shop": pa.table({"id": shops}),
        "edges/user__buys__item": pa.table({"src": buys_src, "dst": buys_dst,
                                            "t": rng.integers(0, 5, 120)}),
        "edges/user__follows__user": pa.table({"src": follows_src, "dst": follows_dst,
                                               "t": rng.integers(0, 5, 90)}),
        "edges/item__sold_at__shop": pa.table({"src": pick(items, 30), "dst": pick(shops, 30)}),
    }


def write_typed(root: Path, tables: dict[str, pa.Table], fmt: str = "parquet") -> Path:
    for name, table in tables.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "csv":
            pacsv.write_csv(table, path.with_suffix(".csv"))
        else:
            pq.write_table(table, path.with_suffix(".parquet"), row_group_size=9)
    return root


def typed_dataset(root: Path, fmt: str = "parquet", **extra) -> dict:
    raw = {"source": fmt, "path": str(root), "layout": "typed",
           "nodes": {"features": "f*", "timestamp": "t"}, "edges": {"timestamp": "t"}}
    for key, value in extra.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return raw


CASES = {
    "undirected dedup, times": {},
    "directed, no dedup, keep loops": {"undirected": False, "dedup": False,
                                       "self_loops": "keep"},
    "undirected, no dedup (copies by time, row)": {"dedup": False},
    "constant featureless, no edge times": {"typed": {"featureless": "constant"},
                                            "edges": {"timestamp": ""}},
    "link task without labels, link edge type": {
        "task": "link", "nodes": {"label": "none"},
        "typed": {"link_edge_type": "user__follows__user"}},
    "snappy Parquet": {"storage": {"compression": "snappy"}},
}


@pytest.mark.parametrize("case", list(CASES))
def test_typed_blocks_write_the_local_files_byte_for_byte(tmp_path, inline, case):
    root = write_typed(tmp_path / "in", typed_tables())
    link = {"split": {"link": {"num_hard_negatives": 0}},
            "evaluate": {"link": {"negatives": "random"}}}
    assert_same_as_local(tmp_path, typed_dataset(root, **CASES[case]), None,
                         link if CASES[case].get("task") == "link" else None)


def test_typed_csv_tables_and_float_times_match_local(tmp_path, inline):
    tables = typed_tables(seed=1, times=np.arange(USERS, dtype=np.float64) * 2)
    root = write_typed(tmp_path / "in", tables, fmt="csv")
    assert_same_as_local(tmp_path, typed_dataset(root, "csv"))


SYNTHETIC = {  # the built-in typed graph (papers / authors / venues) under the edge policies
    "default": {},
    "directed, loops and copies kept, few labels": {
        "undirected": False, "dedup": False, "self_loops": "keep",
        "synthetic": {"label_rate": 0.3}},
    "link task on cites": {"task": "link", "typed": {"link_edge_type": "paper__cites__paper"}},
    "no cites drawn: the warning names the source": {"synthetic": {"avg_degree": 0.001}},
}


def typed_synthetic(**extra) -> dict:
    return {"layout": "typed", **extra,
            "synthetic": {"num_nodes": 120, "num_authors": 30, "num_venues": 4,
                          "num_features": 6, **extra.get("synthetic", {})}}


@pytest.mark.parametrize("case", list(SYNTHETIC))
def test_the_typed_synthetic_graph_goes_through_the_block_prepare_unchanged(tmp_path, inline,
                                                                            case):
    """Written as typed tables in its own type order (paper, author, venue; cites, writes,
    published_in, not the tables' name order) with writes as the link relation: the oracle's
    files, prepare.json included, on cluster.engine: dask."""
    link = {"split": {"link": {"num_hard_negatives": 0}},
            "evaluate": {"link": {"negatives": "random"}}}
    out = assert_same_as_local(tmp_path, typed_synthetic(**SYNTHETIC[case]), None,
                               link if SYNTHETIC[case].get("task") == "link" else None)
    assert not list(out.glob("node_ids_*"))  # node i is row i of every type: no ids to keep


def test_ogb_mag_goes_through_the_block_prepare_unchanged(tmp_path, inline):
    """Featureless types, paper years, sparse class ids and the official split."""
    import gzip

    from test_ogb_mag import make_mag

    mag = make_mag(tmp_path / "ogbn_mag")
    (mag / "raw/node-label/paper/node-label.csv.gz").write_bytes(gzip.compress(
        "".join(f"{(10, 20, 70)[p % 3]}\n" for p in range(8)).encode()))
    assert_same_as_local(tmp_path, {"source": "ogb", "path": str(mag), "layout": "typed"})
    report = (tmp_path / "dask.json").read_text()
    assert "public_split" in report and "featureless" in report


# ------------------------------------------------------------------------------- bad inputs
def _set(tables: dict, name: str, column: str, values) -> dict:
    table = tables[name]
    return {**tables, name: table.set_column(table.column_names.index(column), column,
                                             pa.array(values))}


def _nan_features(t):
    values = t["nodes/user"].column("f1").to_numpy().copy()
    values[[12, 30]] = np.nan
    return _set(t, "nodes/user", "f1", values)


def _unknown_item(t):
    values = t["edges/user__buys__item"].column("dst").to_numpy().copy()
    values[57] = 99999
    return _set(t, "edges/user__buys__item", "dst", values)


def _repeated_user(t):
    ids = t["nodes/user"].column("id").to_pylist()
    ids[33] = ids[5]
    return _set(t, "nodes/user", "id", ids)


def _fractional_edge_time(t):
    values = t["edges/user__follows__user"].column("t").to_numpy().astype(np.float64)
    values[40] = 2.5
    return _set(t, "edges/user__follows__user", "t", values)


def _unknown_type(t):
    t = dict(t)
    t["edges/user__visits__place"] = t.pop("edges/item__sold_at__shop")
    return t


def _null_item_id(t):
    return _set(t, "nodes/item", "id", [None if i == 20 else v for i, v in
                                        enumerate(t["nodes/item"].column("id").to_pylist())])


def _reverse_taken(t):
    buys = t["edges/user__buys__item"]
    return {**t, "edges/item__rev_buys__user": pa.table({"src": buys.column("dst"),
                                                         "dst": buys.column("src")})}


BAD = {
    "absent id (unknown edge id)": _unknown_item,
    "a reverse name taken": _reverse_taken,
    "NaN features": _nan_features,
    "repeated ids": _repeated_user,
    "edge naming an unknown node type": _unknown_type,
    "fractional edge time": _fractional_edge_time,
    "null id in a later type": _null_item_id,
    "NaN features and a later unknown id": lambda t: _unknown_item(_nan_features(t)),
    "repeated ids after a null id in an earlier type": lambda t: _repeated_user(
        _null_item_id(t)),
    "corrupted parquet": "corrupt",
}


@pytest.mark.parametrize("case", list(BAD) + ["unknown link edge type"])
def test_bad_typed_tables_give_the_local_message(tmp_path, case):
    spoil = BAD.get(case, lambda t: t)
    tables = typed_tables()
    root = write_typed(tmp_path / "in", spoil(tables) if callable(spoil) else tables)
    if spoil == "corrupt":
        path = root / "nodes" / "item.parquet"
        data = bytearray(path.read_bytes())
        data[len(data) // 3:len(data) // 3 + 100] = b"\xff" * 100
        path.write_bytes(bytes(data))
    link = {"typed": {"link_edge_type": "user__likes__item"}} if case.startswith("unknown link") \
        else {}
    cfg = params_from_dict({"dataset": typed_dataset(root, **link)}).dataset
    local = _error(lambda: prepare_dataset(cfg, 0))
    for name in ("out", "scratch"):
        (tmp_path / name).mkdir()
    blocks = _error(lambda: prepare_tables(None, cfg, tmp_path / "out",
                                                 tmp_path / "scratch", TINY))
    assert blocks == local
    assert "\n" not in blocks
