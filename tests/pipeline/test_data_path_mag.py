"""bench/data_path.py --shape mag: OGB-MAG's proportions, the typed tables it writes out of core
(schema, row counts, ids, the class signal in the relations) and prepare reading them through
the CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

# bench/ is a folder of the repository, not part of the installed package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import data_path  # noqa: E402


def test_mag_sizes_keep_ogb_mag_proportions():
    name, papers, edges = data_path.parse_size("40M", "mag")
    assert (name, edges) == ("mag-40M", 40_000_000)
    nodes, rows = data_path.mag_counts(papers, edges)
    assert sum(rows.values()) == edges and nodes["paper"] == papers
    scale = edges / sum(data_path.MAG_EDGES.values())
    for relation, n in data_path.MAG_EDGES.items():
        assert abs(rows[relation] - n * scale) <= 2
    for node_type, n in data_path.MAG_NODES.items():
        assert abs(nodes[node_type] - n * scale) <= 2
    assert data_path.parse_size("300:4000", "mag") == ("mag-300x4000", 300, 4000)
    assert data_path.parse_size("300:4000") == ("300x4000", 300, 4000)  # homogeneous unchanged


def test_mag_tables_are_typed_row_groups_with_known_ids(tmp_path, monkeypatch):
    monkeypatch.setattr(data_path, "GROUP", 64)
    data_path.write_mag_tables(tmp_path, papers=300, edges=3000, features=8, classes=5)
    counts, rows = data_path.mag_counts(300, 3000)
    assert sorted(p.name for p in (tmp_path / "nodes").iterdir()) == [
        f"{t}.parquet" for t in sorted(counts)]
    assert sorted(p.name for p in (tmp_path / "edges").iterdir()) == [
        f"{r}.parquet" for r in sorted(rows)]
    ids = {}
    for node_type, n in counts.items():
        table = pq.read_table(tmp_path / "nodes" / f"{node_type}.parquet")
        ids[node_type] = table["id"].to_numpy()
        assert table.num_rows == n and len(np.unique(ids[node_type])) == n
        assert table.column_names == (["id", "x", "label", "year"] if node_type == "paper"
                                      else ["id"])  # OGB-MAG: only papers have features
    papers = pq.ParquetFile(tmp_path / "nodes" / "paper.parquet")
    assert papers.metadata.num_row_groups == 5
    assert papers.schema_arrow.field("x").type.list_size == 8
    paper = papers.read()
    assert set(paper["label"].to_numpy()) == set(range(5))
    assert set(paper["year"].to_numpy()) <= set(range(2010, 2020))
    dense = {t: {i: k for k, i in enumerate(v)} for t, v in ids.items()}
    for relation, n in rows.items():
        src_type, _, dst_type = relation.split("__")
        table = pq.ParquetFile(tmp_path / "edges" / f"{relation}.parquet")
        assert table.metadata.num_rows == n
        assert table.metadata.num_row_groups == -(-n // 64)
        pairs = table.read()
        src, dst = pairs["src"].to_numpy(), pairs["dst"].to_numpy()
        assert np.isin(src, ids[src_type]).all() and np.isin(dst, ids[dst_type]).all()
        if relation == "paper__cites__paper":  # dense i is class i % 5: 80% drawn inside
            same = np.mean([dense["paper"][s] % 5 == dense["paper"][d] % 5
                            for s, d in zip(src, dst)])
            assert 0.75 < same < 0.9
    assert not (tmp_path / ".mag.tmp").exists()
    before = (tmp_path / "edges" / "paper__cites__paper.parquet").stat().st_mtime_ns
    data_path.write_mag_tables(tmp_path, papers=300, edges=3000, features=8, classes=5)
    assert (tmp_path / "edges" / "paper__cites__paper.parquet").stat().st_mtime_ns == before


def test_prepare_reads_the_mag_tables_through_the_cli(tmp_path):
    rows = data_path.main(["--dir", str(tmp_path), "--shape", "mag", "--sizes", "400:4000",
                           "--engines", "local", "--local", "", "--stages", "prepare",
                           "--features", "8", "--keep"])
    assert [(r["stage"], r["exit_code"], r["size"]) for r in rows] == [
        ("prepare", 0, "mag-400x4000")]
    assert "typed graph" in rows[0]["message"] and "target paper" in rows[0]["message"]
    run = tmp_path / "run-mag-400x4000-local"
    params = data_path.yaml.safe_load((run / "params.yaml").read_text())
    assert params["dataset"]["layout"] == "typed" and params["cluster"]["engine"] == "local"
    graph = json.loads((run / "data" / "prepared" / "graph.json").read_text())
    counts, tables = data_path.mag_counts(400, 4000)
    assert {t: n for t, n, _ in graph["node_types"]} == counts
    assert {t: f for t, _, f in graph["node_types"]}["paper"] == 8
    assert graph["featureless"] == ["author", "field_of_study", "institution"]
    assert graph["target"] == "paper" and graph["node_time"] == ["paper"]
    reverses = {"paper__rev_writes__author", "institution__rev_affiliated_with__author",
                "field_of_study__rev_has_topic__paper"}
    assert set(graph["edge_types"]) == set(tables) | reverses  # undirected: true
