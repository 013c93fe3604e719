"""Predictions on a new graph (gnnpipe/training/new_graph.py): model.pt is self-contained
(gnnpipe.model/2, weights_only), the training graph scored through the new-graph path equals the
predict stage's file, a graph with 10% new nodes and edges scores them with the saved feature
transform (checked against a forward built by hand), and each mismatch is one line with no
scratch folder left behind; the same for typed tables (typed sage, a featureless type), where a
target node far from every new node scores as in the predict stage."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml

import gnnpipe
from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.config import TrainParams
from graph_oracle import normalize_edges
from gnnpipe.training.models import build_model
from gnnpipe.training.new_graph import (load_model, predict_to_file, read_saved, score,
                                         write_tables)
from conftest import run_stages

N, C, F = 80, 3, 5
CLASSES = ["ant", "bee", "cow"]
TRAIN = {"model": "sage", "epochs": 3, "patience": 3, "hidden": 8, "num_layers": 2,
         "dropout": 0.0}


def _tables(n: int, seed: int, ids_from: int = 0) -> tuple[pa.Table, pa.Table]:
    """A ring plus random chords; string ids ``n00042``; features with a class signal and an
    offset (so standardize moves them); every sixth label blank."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, C, n)
    x = rng.normal(size=(n, F)).astype(np.float32) * 3 + 5
    x[np.arange(n), y] += 4
    ids = [f"n{i:05d}" for i in range(ids_from, ids_from + n)]
    labels = [None if i % 6 == 0 else CLASSES[c] for i, c in enumerate(y)]
    src = np.concatenate([np.arange(n), rng.integers(0, n, n)])
    dst = np.concatenate([(np.arange(n) + 1) % n, rng.integers(0, n, n)])
    nodes = pa.table({"id": ids, "x": pa.array(list(x), pa.list_(pa.float32())),
                      "label": labels})
    edges = pa.table({"src": [ids[i] for i in src], "dst": [ids[i] for i in dst]})
    return nodes, edges


def _write(folder: Path, nodes: pa.Table, edges: pa.Table) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(nodes, folder / "nodes.parquet")
    pq.write_table(edges, folder / "edges.parquet")
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The tables prepared, split (features standardized on the train nodes), trained and
    predicted by the stages, in this process."""
    folder = tmp_path_factory.mktemp("new_graph")
    _write(folder / "tables", *_tables(N, 0))
    params = {"dataset": {"source": "parquet", "path": "tables"},
              "features": {"normalize": "standardize"}, "train": TRAIN,
              "predict": {"top_k": 2}}
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    run_stages(folder, ["prepare", "split", "train", "predict"])
    return folder


@contextlib.contextmanager
def _cwd(folder: Path):
    old = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(old)


def test_model_file_is_self_contained_and_loads_weights_only(trained):
    payload = torch.load(trained / "data/model/model.pt", weights_only=True)
    assert payload["schema"] == "gnnpipe.model/2"
    inference = payload["inference"]
    assert inference["classes"] == CLASSES and inference["class_type"] == "string"
    assert inference["ids"] == {"node": "string"} and inference["feature_widths"] == {"node": F}
    assert inference["params"]["train"]["hidden"] == TRAIN["hidden"]
    assert inference["params"]["dataset"]["source"] == "parquet"
    fitted = io.read_features(trained / "data/features")["node_types"][""]
    saved = inference["features"]["node_types"][""]
    assert inference["features"]["meta"]["kind"] == "standardize"
    assert torch.equal(saved["mean"], fitted["mean"]) and torch.equal(saved["std"], fitted["std"])


def test_training_graph_through_the_new_path_equals_the_predict_stage(trained):
    with _cwd(trained):
        assert main(["predict", "--model", "data/model/model.pt", "--graph", "tables",
                     "--out", "scored/train.parquet", "--top-k", "2"]) == 0
    stage = io.read_node_predictions(trained / "data/predict")
    mine = pq.read_table(trained / "scored/train.parquet")
    assert mine.schema.equals(stage.schema, check_metadata=False)
    for name in stage.column_names:
        if name != "role":  # a new graph has no split: every row "unused"
            assert mine.column(name).equals(stage.column(name)), name
    assert set(mine.column("role").to_pylist()) == {"unused"}
    api = load_model(trained / "data/model").predict(trained / "tables", top_k=2)
    assert api.drop_columns("role").equals(mine.drop_columns("role"))


def _reference_top(trained: Path, nodes: pa.Table, edges: pa.Table) -> np.ndarray:
    """The most probable class code of each node, by hand: the saved weights, the split
    stage's standardization (not one refitted on these nodes) and the undirected, deduplicated,
    loop-free edges."""
    ids = {v: i for i, v in enumerate(nodes.column("id").to_pylist())}
    src = np.array([ids[v] for v in edges.column("src").to_pylist()])
    dst = np.array([ids[v] for v in edges.column("dst").to_pylist()])
    csr, _ = normalize_edges(src, dst, len(ids), undirected=True, dedup=True,
                             remove_self_loops=True)
    fitted = io.read_features(trained / "data/features")["node_types"][""]
    x = torch.tensor(np.stack(nodes.column("x").to_pylist()), dtype=torch.float32)
    model = build_model("sage", F, C, TrainParams(**TRAIN))
    model.load_state_dict(io.read_model_file(trained / "data/model")["state_dict"])
    with torch.no_grad():
        logits = model.eval()((x - fitted["mean"]) / fitted["std"], csr.edge_index())
    return logits.argmax(1).numpy()


def test_a_graph_with_ten_percent_new_nodes_scores_them(trained, tmp_path):
    nodes, edges = _tables(N, 0)
    new_nodes, _ = _tables(N // 10, 7, ids_from=N)  # 8 new ids
    new_nodes = new_nodes.drop_columns("label").append_column(
        "label", pa.array([None] * new_nodes.num_rows, pa.string()))
    rng = np.random.default_rng(3)
    old = nodes.column("id").to_pylist()
    fresh = new_nodes.column("id").to_pylist()
    links = pa.table({"src": fresh * 2, "dst": [old[i] for i in rng.integers(0, N, 2 * len(fresh))]})
    all_nodes, all_edges = pa.concat_tables([nodes, new_nodes]), pa.concat_tables([edges, links])
    folder = _write(tmp_path / "grown", all_nodes, all_edges)
    done = predict_to_file(trained / "data/model/model.pt", folder, tmp_path / "p.parquet")
    table = pq.read_table(tmp_path / "p.parquet")
    assert done["rows"] == table.num_rows == N + len(fresh)
    assert table.column("original_id").to_pylist() == old + fresh
    assert table.column("label").to_pylist()[N:] == [None] * len(fresh)
    predicted = [CLASSES.index(v) for v in table.column("predicted").to_pylist()]
    np.testing.assert_array_equal(predicted, _reference_top(trained, all_nodes, all_edges))
    assert sorted(os.listdir(tmp_path)) == ["grown", "p.parquet"]  # no scratch left


def _refused(trained: Path, tmp_path: Path, nodes: pa.Table, edges: pa.Table,
             model: Path | None = None) -> str:
    folder = _write(tmp_path / "given", nodes, edges)
    with pytest.raises(ValueError) as err:
        predict_to_file(model or trained / "data/model/model.pt", folder, tmp_path / "p.parquet")
    assert sorted(os.listdir(tmp_path)) == ["given"] + (["m.pt"] if model else [])
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_graph_whose_features_or_classes_differ_is_refused_in_one_line(trained, tmp_path):
    nodes, edges = _tables(N, 1)
    narrow = nodes.set_column(1, "x", pa.array([row[:3] for row in nodes.column("x").to_pylist()],
                                               pa.list_(pa.float32())))
    assert "have 3 features, the model reads 5" in _refused(trained, tmp_path, narrow, edges)
    labels = nodes.column("label").to_pylist()
    labels[4] = "yak"
    odd = nodes.set_column(2, "label", pa.array(labels))
    message = _refused(trained, tmp_path / "b", odd, edges)
    assert "'yak', which is not a class of the model (ant, bee, cow)" in message


def test_a_graph_of_other_types_is_refused_in_one_line(trained, tmp_path):
    saved = read_saved(trained / "data/model")
    wanted = {**saved.inference["graph"], "node_types": ["paper"]}
    other = dataclasses.replace(saved, inference={**saved.inference, "graph": wanted})
    folder = _write(tmp_path / "given", *_tables(N, 1))
    with pytest.raises(ValueError, match=r"nodes.parquet: the graph's node types \(node\) are "
                                         r"not the model's \(paper\)"):
        score(other, folder, tmp_path / "scratch", 64)


@pytest.mark.parametrize("change, match", [
    ({"schema": "gnnpipe.model/1"}, "gnnpipe.model/1 model file lacks the feature transform "
                                    "and classes .*re-run the train stage"),
    ({"meta": {"task": "link"}}, "a link-prediction model"),
    ({"train": {"embeddings": {"dim": 4}}}, "trained with train.embeddings .*a new graph's "
                                              "nodes have none"),
])
def test_an_old_link_or_embeddings_model_is_refused_in_one_line(trained, tmp_path, change, match):
    payload = torch.load(trained / "data/model/model.pt", weights_only=True)
    payload["meta"].update(change.get("meta", {}))
    payload["inference"]["params"]["train"].update(change.get("train", {}))
    payload["schema"] = change.get("schema", payload["schema"])
    torch.save(payload, tmp_path / "m.pt")
    nodes, edges = _tables(N, 1)
    assert __import__("re").search(match, _refused(trained, tmp_path, nodes, edges,
                                                   model=tmp_path / "m.pt"))


def test_cli_needs_an_out_file_and_import_gnnpipe_stays_without_torch(trained):
    with _cwd(trained):
        assert main(["predict", "--model", "data/model", "--graph", "tables"]) == 1
    code = "import sys, gnnpipe; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert gnnpipe.load_model is load_model  # the lazy export


# ------------------------------------------------------------------------------ typed graphs
# papers (features, labels; target) cite papers in a ring with short chords; authors (no
# features: log1p in-degree, standardized like papers) write the papers of a window of the ring,
# so a change stays local and most papers are more than two hops from it
P, A, TF = 60, 20, 4
TYPED_TRAIN = {**TRAIN, "epochs": 2, "patience": 2}


def _typed_tables(seed: int, new: int = 0) -> dict[str, pa.Table]:
    """Typed tables (``{"nodes/paper": ..., "edges/paper__cites__paper": ...}``) of ``P``
    papers (string ids ``p00042``) and ``A`` authors (int ids ``1000 + k``); with ``new`` > 0,
    ``new`` papers and ``new // 2`` authors more, rows after the same old rows, whose edges
    touch only papers 0..3 and authors 0..1 of the old graph."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, C, P)
    x = rng.normal(size=(P + new, TF)).astype(np.float32) * 2 + 3
    x[np.arange(P), y] += 3
    pid = [f"p{i:05d}" for i in range(P + new)]
    aid = [1000 + k for k in range(A + new // 2)]
    labels = [None if i % 5 == 0 else CLASSES[c] for i, c in enumerate(y)] + [None] * new
    ring = np.arange(P)
    cites = [(ring, (ring + 1) % P), (ring[::2], (ring[::2] + 3) % P)]
    writes = [(ring // 3 % A, ring)]  # author k writes papers 3k..3k+2
    if new:  # new papers cite old ones near paper 0; new authors write new and old papers
        extra = np.random.default_rng(seed + 1)
        fresh_p, fresh_a = np.arange(P, P + new), np.arange(A, A + new // 2)
        cites.append((fresh_p, extra.integers(0, 4, new)))
        writes += [(extra.integers(0, 2, new), fresh_p),
                   (np.repeat(fresh_a, 2), extra.choice(np.r_[0:3, P:P + new], 2 * len(fresh_a)))]
    src, dst = (np.concatenate(part) for part in zip(*cites))
    w_src, w_dst = (np.concatenate(part) for part in zip(*writes))
    return {"nodes/paper": pa.table({"id": pid, "x": pa.array(list(x), pa.list_(pa.float32())),
                                     "label": pa.array(labels, pa.string())}),
            "nodes/author": pa.table({"id": aid}),
            "edges/paper__cites__paper": pa.table({"src": [pid[i] for i in src],
                                                   "dst": [pid[i] for i in dst]}),
            "edges/author__writes__paper": pa.table({"src": [aid[i] for i in w_src],
                                                     "dst": [pid[i] for i in w_dst]})}


@pytest.fixture(scope="module")
def typed_trained(tmp_path_factory):
    """The typed tables prepared, split (features standardized per type on train nodes),
    trained (typed sage) and predicted by the stages, in this process."""
    folder = tmp_path_factory.mktemp("new_typed_graph")
    write_tables(folder / "tables", _typed_tables(0))
    params = {"dataset": {"source": "parquet", "path": "tables", "layout": "typed"},
              "features": {"normalize": "standardize"}, "train": TYPED_TRAIN,
              "predict": {"top_k": 2}}
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    run_stages(folder, ["prepare", "split", "train", "predict"])
    return folder


def test_typed_training_graph_through_the_new_path_equals_the_predict_stage(typed_trained):
    inference = torch.load(typed_trained / "data/model/model.pt", weights_only=True)["inference"]
    assert inference["graph"]["target"] == "paper"
    assert inference["graph"]["edge_types"] == ["author__writes__paper",
                                                "paper__rev_writes__author", "paper__cites__paper"]
    assert set(inference["features"]["node_types"]) == {"author", "paper"}
    with _cwd(typed_trained):
        assert main(["predict", "--model", "data/model/model.pt", "--graph", "tables",
                     "--out", "scored/train.parquet", "--top-k", "2"]) == 0
    stage = io.read_node_predictions(typed_trained / "data/predict")
    mine = pq.read_table(typed_trained / "scored/train.parquet")
    assert mine.num_rows == stage.num_rows == P  # the target's rows only
    assert mine.schema.equals(stage.schema, check_metadata=False)
    for name in stage.column_names:
        if name != "role":
            assert mine.column(name).equals(stage.column(name)), name
    assert set(mine.column("role").to_pylist()) == {"unused"}


def _no_transform(trained: Path, out: Path) -> Path:
    """model.pt with its saved feature transform replaced by ``none`` for every type."""
    payload = torch.load(trained / "data/model/model.pt", weights_only=True)
    features = payload["inference"]["features"]
    features["meta"]["kind"] = "none"
    features["node_types"] = {t: {"num_features": e["num_features"], "fitted_on": "none",
                                  "nodes": 0} for t, e in features["node_types"].items()}
    torch.save(payload, out)
    return out


def _far_from(tables: dict[str, pa.Table], new: int, hops: int) -> np.ndarray:
    """Papers (row numbers) more than ``hops`` hops, over every relation both ways, from each
    new node and each node an edge of a new node touches."""
    papers = tables["nodes/paper"].column("id").to_pylist()
    authors = tables["nodes/author"].column("id").to_pylist()
    name = {**{p: ("p", p) for p in papers}, **{a: ("a", a) for a in authors}}
    fresh = {name[v] for v in papers[len(papers) - new:] + authors[len(authors) - new // 2:]}
    near, links = set(fresh), []
    for rel in ("edges/paper__cites__paper", "edges/author__writes__paper"):
        edges = tables[rel]
        for s, d in zip(edges.column("src").to_pylist(), edges.column("dst").to_pylist()):
            links.append((name[s], name[d]))
            if name[s] in fresh or name[d] in fresh:
                near |= {name[s], name[d]}
    for _ in range(hops):
        near |= {b for a, b in links if a in near} | {a for a, b in links if b in near}
    return np.array([i for i, p in enumerate(papers) if ("p", p) not in near])


def test_a_typed_graph_with_ten_percent_new_nodes_scores_them(typed_trained, tmp_path):
    new = P // 10  # 6 new papers, 3 new authors
    grown = _typed_tables(0, new=new)
    old = _typed_tables(0)
    for key in ("nodes/paper", "nodes/author"):  # the old rows unchanged, new ids after them
        assert grown[key].slice(0, old[key].num_rows).equals(old[key])
    folder = write_tables(tmp_path / "grown", grown)
    model = typed_trained / "data/model/model.pt"
    assert main(["predict", "--model", str(model), "--graph", str(folder), "--out",
                 str(tmp_path / "p.parquet"), "--top-k", "2"]) == 0
    table = pq.read_table(tmp_path / "p.parquet")
    assert table.num_rows == P + new
    assert table.column("original_id").to_pylist() == grown["nodes/paper"].column("id").to_pylist()
    assert table.column("node_id").to_pylist() == list(range(P + new))
    assert table.column("label").to_pylist()[P:] == [None] * new
    assert all(p in CLASSES for p in table.column("predicted").to_pylist())
    assert sorted(os.listdir(tmp_path)) == ["grown", "p.parquet"]  # no scratch left
    api = load_model(model).predict(grown, top_k=2)  # the same graph as Arrow tables
    assert api.equals(table)
    # two layers of sage: a paper more than two hops from every change scores as in training
    far = _far_from(grown, new, hops=2)
    assert len(far) > P // 2
    stage = io.read_node_predictions(typed_trained / "data/predict").take(far)
    mine = table.take(far)
    assert mine.column("predicted").equals(stage.column("predicted"))
    np.testing.assert_allclose(np.stack(mine.column("top_probs").to_pylist()),
                               np.stack(stage.column("top_probs").to_pylist()), atol=1e-5)
    # the saved per-type standardization is applied: without it the scores differ (and the
    # label column is optional: without it the rows are all unlabelled)
    unlabelled = {**grown, "nodes/paper": grown["nodes/paper"].drop_columns("label")}
    raw = load_model(_no_transform(typed_trained, tmp_path / "m.pt")).predict(unlabelled, top_k=2)
    assert raw.column("label").null_count == P + new
    assert raw.column("original_id").equals(table.column("original_id"))
    assert not np.allclose(np.stack(raw.column("top_probs").to_pylist()),
                           np.stack(table.column("top_probs").to_pylist()), atol=1e-3)


def _typed_refused(trained: Path, folder: Path, given: dict[str, pa.Table]) -> str:
    write_tables(folder, given)
    with pytest.raises(ValueError) as err:
        predict_to_file(trained / "data/model/model.pt", folder, folder.parent / "p.parquet")
    assert sorted(os.listdir(folder.parent)) == [folder.name]  # no output, no scratch
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_typed_graph_of_other_types_or_widths_is_refused_in_one_line(typed_trained, tmp_path):
    tables = _typed_tables(1)
    renamed = {("edges/author__wrote__paper" if k == "edges/author__writes__paper" else k): v
               for k, v in tables.items()}
    message = _typed_refused(typed_trained, tmp_path / "a" / "given", renamed)
    assert re.search(r"the graph's edge types \(author__wrote__paper, paper__rev_wrote__author, "
                     r"paper__cites__paper\) are not the model's \(author__writes__paper, "
                     r"paper__rev_writes__author, paper__cites__paper\)", message), message
    venues = {**tables, "nodes/venue": pa.table({"id": [1, 2]}),
              "edges/paper__in__venue": pa.table({"src": ["p00000", "p00001"], "dst": [1, 2]})}
    message = _typed_refused(typed_trained, tmp_path / "b" / "given", venues)
    assert "the graph's node types (author, paper, venue) are not the model's (author, paper)" \
        in message, message
    paper = tables["nodes/paper"]
    narrow = {**tables, "nodes/paper": paper.set_column(
        1, "x", pa.array([r[:3] for r in paper.column("x").to_pylist()], pa.list_(pa.float32())))}
    message = _typed_refused(typed_trained, tmp_path / "c" / "given", narrow)
    assert "node type 'paper' has 3 features, the model reads 4" in message, message
    authors = tables["nodes/author"]  # one column: as wide as the degree features it had
    featured = {**tables, "nodes/author": authors.append_column(
        "x", pa.array([[1.0]] * len(authors), pa.list_(pa.float32())))}
    message = _typed_refused(typed_trained, tmp_path / "d" / "given", featured)
    assert "node types without feature columns here: none; in the training tables: author" \
        in message, message
    with pytest.raises(ValueError) as err:  # Arrow tables: named as given, not the scratch copy
        load_model(typed_trained / "data/model").predict(narrow)
    assert str(err.value).startswith("nodes/paper.parquet: node type 'paper' has 3 features")
