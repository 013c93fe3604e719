"""The predict stage: every node (unlabelled ones too) with the user's ids and label values,
top-k probabilities that agree with train's logits, last-hidden embeddings (layer-wise equal to
the full forward), row groups, float16, link pair scores and their refusal, typed files, two
DDP ranks byte-identical to one process, and schema checks on read."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.config import TrainParams
from gnnpipe.data.graph import EDGE, UNLABELLED, Graph
from graph_oracle import normalize_edges
from gnnpipe.training.inference import NODE, LayerwiseInference, layerwise_logits, csr_view
from gnnpipe.training.models import build_model, forward_with_hidden
from gnnpipe.training.predict import held_out_collapse
from gnnpipe.reporting.collapse import collapse
from prepared_oracle import embedding_matrix, write_node_ids
from conftest import as_graph

N, C, F = 90, 3, 6
CLASSES = ["cat", "dog", "eel"]
TRAIN = {"epochs": 4, "patience": 4, "hidden": 8, "num_layers": 2}


def _graph() -> Graph:
    rng = np.random.default_rng(0)
    ring = np.arange(N)
    src = np.concatenate([ring, rng.integers(0, N, 120)])
    dst = np.concatenate([(ring + 1) % N, rng.integers(0, N, 120)])
    csr, _ = normalize_edges(src, dst, N, undirected=True, dedup=True, remove_self_loops=True)
    y = torch.from_numpy(rng.integers(0, C, N))
    x = torch.randn(N, F, generator=torch.Generator().manual_seed(0))
    x[:, :C] += 2 * torch.nn.functional.one_hot(y, C)
    y[::5] = UNLABELLED  # every fifth node has no label
    return Graph.homogeneous(csr=csr, x=x, y=y, num_classes=C).target_view()


def _ids() -> pa.Array:
    return pa.array([f"{(i * 37) % 1000:04d}" for i in range(N)])  # digit strings stay strings


def _roles(y: torch.Tensor) -> np.ndarray:
    roles = np.full(N, "unused", dtype=object)
    labelled = np.random.default_rng(1).permutation(np.flatnonzero(y.numpy() != UNLABELLED))
    roles[labelled[:30]], roles[labelled[30:45]], roles[labelled[45:65]] = "train", "val", "test"
    return roles.astype(str)  # the last labelled nodes are in no split


def _params(folder: Path, name: str = "params.yaml", **sections) -> str:
    params = {"train": {**TRAIN, **sections.pop("train", {})}, **sections}
    (folder / name).write_text(yaml.safe_dump(params))
    return name


def _features(folder: Path, graph: Graph) -> None:
    """data/features as the split stage writes it for features.normalize: none."""
    from gnnpipe.data.features import fit_graph, write_transforms

    out = folder / "data/features"
    out.mkdir(parents=True, exist_ok=True)
    write_transforms(out, "none", fit_graph("none", graph.x, None))


def _prepare(folder: Path, graph: Graph, ids: pa.Array | None, classes: list | None) -> None:
    out = folder / "data/prepared"
    out.mkdir(parents=True)
    io.write_prepared(out, as_graph(graph))
    if ids is not None:
        write_node_ids(out, NODE, ids)
    if classes is not None:
        io.write_classes(out, pa.array(classes))


@pytest.fixture(scope="module")
def node_run(tmp_path_factory):
    """A partially labelled graph with string ids and class names, trained, then predicted."""
    folder = tmp_path_factory.mktemp("predict")
    graph = _graph()
    _prepare(folder, graph, _ids(), CLASSES)
    io.write_split(folder / "data/split", as_graph(graph),
                   {p: {EDGE: graph.csr} for p in ("train", "val", "test")},
                   {"task": "node", "mode": "transductive"}, roles=_roles(graph.y))
    _features(folder, graph)
    _params(folder, predict={"top_k": 2, "block_rows": 7})
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        assert main(["train"]) == 0
        assert main(["predict"]) == 0
    finally:
        os.chdir(cwd)
    return folder, graph


def _predict(folder: Path, params: str, out: str) -> int:
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return main(["predict", "--params", params, "--out", f"data/{out}",
                     "--metrics", f"metrics/{out}.json"])
    finally:
        os.chdir(cwd)


# ------------------------------------------------------------------------------------ node task
def test_every_node_is_predicted_with_the_users_ids_and_label_values(node_run):
    folder, graph = node_run
    table = io.read_node_predictions(folder / "data/predict")
    assert table.num_rows == N and table.column("node_id").to_pylist() == list(range(N))
    assert table.schema.field("original_id").type == pa.string()
    assert table.column("original_id").to_pylist() == _ids().to_pylist()
    assert table.column("role").to_pylist() == _roles(graph.y).tolist()
    labels = table.column("label").to_pylist()
    y = graph.y.tolist()
    assert [lab is None for lab in labels] == [code == UNLABELLED for code in y]
    assert labels == [None if code == UNLABELLED else CLASSES[code] for code in y]
    unlabelled = [i for i, code in enumerate(y) if code == UNLABELLED]
    assert unlabelled and all(table.column("predicted")[i].as_py() in CLASSES for i in unlabelled)
    metrics = io.read_json(folder / "metrics/predict.json")
    assert metrics["rows"] == N and metrics["unlabelled"] == len(unlabelled)
    assert metrics["labelled"] == N - len(unlabelled) and metrics["classes"] == C
    assert metrics["label_values"] == "classes.parquet" and "seconds" not in str(metrics)


def test_top_k_is_ordered_and_agrees_with_the_train_logits(node_run):
    folder, _ = node_run
    table = io.read_node_predictions(folder / "data/predict")
    top_labels = table.column("top_labels").to_pylist()
    top_probs = np.array(table.column("top_probs").to_pylist())
    assert top_probs.shape == (N, 2) and (np.diff(top_probs, axis=1) <= 0).all()
    assert table.column("predicted").to_pylist() == [row[0] for row in top_labels]
    node_id, logits = io.read_predictions(folder / "data/model")  # what train scored
    probs = torch.softmax(logits, dim=1)
    values, codes = probs.topk(2, dim=1)
    np.testing.assert_allclose(top_probs[node_id.numpy()], values.numpy(), atol=1e-5)
    assert [top_labels[i] for i in node_id.tolist()] == [[CLASSES[c] for c in row]
                                                         for row in codes.tolist()]


def test_embeddings_are_the_last_hidden_layer_in_row_groups(node_run):
    folder, graph = node_run
    for name in ("predictions.parquet", "embeddings.parquet"):
        assert pq.ParquetFile(folder / "data/predict" / name).num_row_groups == math.ceil(N / 7)
    table = io.read_embeddings(folder / "data/predict")
    assert table.column("original_id").to_pylist() == _ids().to_pylist()
    emb = embedding_matrix(table)
    assert emb.shape == (N, TRAIN["hidden"]) and emb.dtype == np.float32
    cfg = TrainParams(**TRAIN)
    model = build_model("sage", F, C, cfg)
    model.load_state_dict(io.read_model_file(folder / "data/model")["state_dict"])
    model.eval()
    with torch.no_grad():  # the last conv applied to the embeddings gives the logits
        logits = model.convs[-1](torch.from_numpy(emb.copy()), graph.csr.edge_index())
    np.testing.assert_allclose(torch.softmax(logits, 1).topk(2, 1).values.numpy(),
                               np.array(io.read_node_predictions(folder / "data/predict")
                                        .column("top_probs").to_pylist()), atol=1e-5)


def test_float16_embeddings_and_top_k_capped_at_the_classes(node_run):
    folder, _ = node_run
    _params(folder, "half.yaml", predict={"embedding_dtype": "float16", "top_k": 10})
    assert _predict(folder, "half.yaml", "half") == 0
    half = io.read_embeddings(folder / "data/half")
    assert half.schema.field("embedding").type == pa.list_(pa.float16(), TRAIN["hidden"])
    full = embedding_matrix(io.read_embeddings(folder / "data/predict"))
    assert np.array_equal(embedding_matrix(half), full.astype(np.float16))
    lists = io.read_node_predictions(folder / "data/half").column("top_labels").to_pylist()
    assert all(sorted(row) == CLASSES for row in lists)  # k = min(10, C): every class once
    assert pq.ParquetFile(folder / "data/half/embeddings.parquet").num_row_groups == 1  # 65536 rows


def test_layerwise_prediction_equals_the_full_forward(node_run):
    folder, _ = node_run
    _params(folder, "lw.yaml", predict={"top_k": 2, "block_rows": 7},
            train={"inference": {"mode": "layerwise", "block_edges": 40}})
    assert _predict(folder, "lw.yaml", "lw") == 0
    assert io.read_json(folder / "metrics/lw.json")["inference"] == "layerwise"
    for read in (lambda d: np.array(io.read_node_predictions(d).column("top_probs").to_pylist()),
                 lambda d: embedding_matrix(io.read_embeddings(d))):
        np.testing.assert_allclose(read(folder / "data/lw"), read(folder / "data/predict"),
                                   atol=1e-5)


CASES = [("gcn", {}), ("sage", {}), ("gat", {}), ("mlp", {}), ("gcn", {"jk": "cat"}),
         ("sage", {"jk": "max"}), ("sage", {"residual": True}), ("gcn", {"num_layers": 2})]


@pytest.mark.parametrize("name, extra", CASES, ids=[f"{n}-{e}" for n, e in CASES])
def test_hidden_is_what_the_last_layer_reads_layerwise_and_full(name, extra):
    graph = _graph()
    cfg = TrainParams(model=name, hidden=8, heads=2, **{"num_layers": 3, **extra})
    torch.manual_seed(0)
    model = build_model(name, F, C, cfg).eval()
    edge_index = graph.csr.edge_index()
    with torch.no_grad():
        out, hidden = forward_with_hidden(model, graph.x, edge_index)
        torch.testing.assert_close(out, model(graph.x, edge_index))  # forward unchanged
        if name == "mlp":
            last = model.mlp.lins[-1](hidden)
        elif "jk" in extra:
            last = model.lin(hidden)
        else:
            last = model.convs[-1](hidden, edge_index)
        torch.testing.assert_close(last, out)
        engine = LayerwiseInference(*csr_view(graph.csr), 25)
        lw_out, lw_hidden = layerwise_logits(model, graph.x, engine, with_hidden=True)
    torch.testing.assert_close(lw_out, out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lw_hidden, hidden, atol=1e-5, rtol=1e-5)


def _rank(rank: int, port: int, folder: str) -> None:
    """One torchrun-like worker: the predict command with RANK / WORLD_SIZE set."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GNNPIPE_PROGRESS="0")
    torch.set_num_threads(1)
    os.chdir(folder)
    code = main(["predict", "--params", "two.yaml", "--out", "data/two",
                 "--metrics", "metrics/two.json"])
    assert code == 0


def test_two_gloo_ranks_write_the_bytes_of_one_process(node_run):
    """Under DDP the ranks split the layer-wise blocks (test_aligned_rank_blocks...); the
    files equal one process's byte for byte. Workers are spawned as torchrun would start them
    (the relaunch itself is train's, tests/e2e/test_train_resume_ddp.py)."""
    import socket

    import torch.multiprocessing as mp

    folder, _ = node_run
    layerwise = {"inference": {"mode": "layerwise", "block_edges": 40}}
    _params(folder, "one.yaml", train=layerwise)
    _params(folder, "two.yaml", train={**layerwise, "dist": {"nproc": 2}})
    assert _predict(folder, "one.yaml", "one") == 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.start_processes(_rank, args=(port, str(folder)), nprocs=2, start_method="spawn")
    assert io.read_json(folder / "metrics/two.json")["world_size"] == 2
    for name in ("predictions.parquet", "embeddings.parquet"):
        two, one = (folder / "data/two" / name), (folder / "data/one" / name)
        assert two.read_bytes() == one.read_bytes()


def test_aligned_rank_blocks_are_the_one_process_blocks():
    from gnnpipe.training.distributed import DistContext

    csr = _graph().csr
    single = LayerwiseInference(*csr_view(csr), 23).blocks(NODE)
    engine = LayerwiseInference(*csr_view(csr), 23, aligned=True)
    ranks = [engine.blocks(NODE, DistContext(r, 3, r)) for r in range(3)]
    assert sum(ranks, []) == single and all(ranks)
    plain = LayerwiseInference(*csr_view(csr), 23)  # without alignment the cut differs
    assert sum((plain.blocks(NODE, DistContext(r, 3, r)) for r in range(3)), []) != single


def test_predict_computes_each_rank_in_the_one_process_blocks(monkeypatch):
    """A GEMM's rounding may depend on its row count (it does on AMD EPYC boxes): predict's
    ranks must cut the blocks one process cuts, whatever the engine was built with."""
    from gnnpipe.training import inference
    from gnnpipe.training.distributed import DistContext
    from gnnpipe.training.predict import model_outputs
    from gnnpipe.training.train import PhaseInput

    graph = _graph()
    single = LayerwiseInference(*csr_view(graph.csr), 23).blocks(NODE)
    engine = LayerwiseInference(*csr_view(graph.csr), 23)  # as inference.plan builds it
    # no process group: every rank's rows stand in for all of them
    monkeypatch.setattr(inference, "_all_rows", lambda mine, ctx, n: torch.zeros(n, mine.shape[1]))
    model = build_model("sage", F, C, TrainParams(model="sage", **TRAIN))
    phase = PhaseInput(graph.x, None, engine)
    for rank in range(2):
        ctx = DistContext(rank, 2, rank)
        model_outputs(model, phase, ctx, block_rows=7)
        assert set(engine.blocks(NODE, ctx)) <= set(single), rank


def test_codes_stand_in_for_label_values_without_classes_parquet(tmp_path):
    graph = _graph()
    _prepare(tmp_path, graph, None, None)
    io.write_split(tmp_path / "data/split", as_graph(graph),
                   {p: {EDGE: graph.csr} for p in ("train", "val", "test")}, {"task": "node"},
                   roles=_roles(graph.y))
    _features(tmp_path, graph)
    _params(tmp_path, train={"model": "mlp", "epochs": 2})
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["train"]) == 0 and main(["predict"]) == 0
    finally:
        os.chdir(cwd)
    table = io.read_node_predictions(tmp_path / "data/predict")
    assert table.schema.field("original_id").type == pa.int64()
    assert table.column("original_id").to_pylist() == list(range(N))
    assert table.column("label").to_pylist() == [None if c < 0 else c for c in graph.y.tolist()]
    assert io.read_json(tmp_path / "metrics/predict.json")["label_values"] == "codes"


# ------------------------------------------------------------------------------------ link task
@pytest.fixture(scope="module")
def link_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("predict_link")
    graph = _graph()
    _prepare(folder, Graph.homogeneous(graph.csr, graph.x, graph.y.clamp(min=0), C).target_view(),
             _ids(), None)
    _params(folder, dataset={"task": "link"},
            split={"link": {"num_val_negatives": 5, "num_test_negatives": 5}})
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        assert main(["split"]) == 0 and main(["train"]) == 0
    finally:
        os.chdir(cwd)
    return folder


def test_link_pairs_are_scored_with_the_train_decoder(link_run):
    folder = link_run
    test_pos = io.read_link_edges(folder / "data/split", N)["test"]
    ids = _ids().to_pylist()
    (folder / "data/pairs").mkdir(exist_ok=True)
    lines = ["src,dst"] + [f"{ids[s]},{ids[d]}" for s, d in test_pos.T.tolist()]
    (folder / "data/pairs/pairs.csv").write_text("\n".join(lines) + "\n")
    _params(folder, "pairs.yaml", dataset={"task": "link"},
            split={"link": {"num_val_negatives": 5, "num_test_negatives": 5}},
            predict={"pairs": "data/pairs/pairs.csv"})
    assert _predict(folder, "pairs.yaml", "pairs") == 0
    scores = io.read_pair_scores(folder / "data/pairs")
    assert scores.schema.field("src").type == pa.string()
    assert scores.column("src").to_pylist() == [ids[s] for s in test_pos[0].tolist()]
    trained = io.read_link_predictions(folder / "data/model")["test"][0]  # the test graph too
    np.testing.assert_allclose(scores.column("score").to_numpy(), trained.numpy(), atol=1e-5)
    np.testing.assert_allclose(scores.column("prob").to_numpy(),
                               torch.sigmoid(trained).numpy(), atol=1e-6)
    emb = embedding_matrix(io.read_embeddings(folder / "data/pairs"))
    assert emb.shape == (N, TRAIN["hidden"])
    dots = (emb[test_pos[0]] * emb[test_pos[1]]).sum(1)
    np.testing.assert_allclose(scores.column("score").to_numpy(), dots, atol=1e-5)
    # predict.json's collapse figures: those of the trained test scores, from the embeddings
    graph = io.read_graph(folder / "data/prepared")
    got = held_out_collapse(torch.from_numpy(np.array(emb)), folder / "data/split", graph)
    want = collapse(*(t.numpy() for t in io.read_link_predictions(folder / "data/model")["test"]))
    assert got["pairs"] == want["pairs"] == test_pos.shape[1] * 5
    assert got["tied_share"] == pytest.approx(want["tied_share"], abs=1e-3)
    assert got["relative_spread"] == pytest.approx(want["relative_spread"], rel=1e-3)
    assert got["collapsed"] is want["collapsed"] is False


def test_unknown_pair_ids_are_refused_in_one_line_writing_nothing(link_run, capsys):
    folder = link_run
    ids = _ids().to_pylist()
    (folder / "data/pairs").mkdir(exist_ok=True)
    (folder / "data/pairs/bad.csv").write_text(
        f"src,dst\n{ids[0]},{ids[1]}\n{ids[2]},nobody\n{ids[3]},{ids[4]}\n37,{ids[5]}\n")
    _params(folder, "bad.yaml", dataset={"task": "link"}, predict={"pairs": "data/pairs/bad.csv"})
    capsys.readouterr()
    assert _predict(folder, "bad.yaml", "bad") == 1
    err = capsys.readouterr().err.strip()
    assert err == ("gnnpipe predict: error: predict.pairs data/pairs/bad.csv: 2 of 4 pairs name "
                   "unknown node ids (first: row 1, id 'nobody')")
    assert not (folder / "data/bad").exists() and not (folder / "metrics/bad.json").exists()
    (folder / "elsewhere.csv").write_text(f"src,dst\n{ids[0]},{ids[1]}\n")
    _params(folder, "out.yaml", dataset={"task": "link"}, predict={"pairs": "elsewhere.csv"})
    assert _predict(folder, "out.yaml", "out") == 1
    assert "put the file under data/pairs/" in capsys.readouterr().err


def test_pairs_follow_the_id_rule_of_csv_node_tables(tmp_path):
    """CSV pair cells are text: against integer ids only canonical integers name nodes (00042
    is not 42); against text ids they stay text, so 00042 joins node '00042'."""
    from gnnpipe.training.predict import map_pairs, read_pairs

    path = tmp_path / "p.csv"
    path.write_text("src,dst\n42,7\n00042,7\n")
    int64 = (pa.int64(), pa.int64())
    with pytest.raises(ValueError, match=r"^w: column 'src' has id '00042' \(row 1; 1 such "
                                         r"rows\), which names no node: the graph's ids are "
                                         r"integers"):
        read_pairs(path, int64, "w")
    text_ids = pa.array(["42", "00042", "7"])
    src, dst = read_pairs(path, (pa.string(), pa.string()), "w")
    assert src.to_pylist() == ["42", "00042"]
    s, d = map_pairs(src, dst, text_ids, text_ids, "w")
    assert s.tolist() == [0, 1] and d.tolist() == [2, 2]
    path.write_text("src,dst\n42,7\n-3,7\n")
    src, dst = read_pairs(path, int64, "w")
    assert src.type == pa.int64() and src.to_pylist() == [42, -3]
    pq.write_table(pa.table({"src": ["42", "042"], "dst": ["7", "7"]}), tmp_path / "p.parquet")
    with pytest.raises(ValueError, match=r"column 'src' has id '042' \(row 1"):
        read_pairs(tmp_path / "p.parquet", int64, "w")
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(ValueError, match=r"^w: is a directory; expected a \.parquet or \.csv file"):
        read_pairs(tmp_path / "d.csv", int64, "w")


# ----------------------------------------------------------------------------------- typed graph
def test_typed_graph_writes_the_target_predictions_and_every_types_embeddings(tmp_path):
    _params(tmp_path, dataset={"layout": "typed", "synthetic": {"num_nodes": 240, "num_features": 8,
                                             "num_classes": 3, "num_authors": 80,
                                             "num_venues": 6}},
            train={"model": "sage", "epochs": 3})
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for stage in ("prepare", "split", "train", "predict"):
            assert main([stage]) == 0, stage
    finally:
        os.chdir(cwd)
    out = tmp_path / "data/predict"
    table = io.read_node_predictions(out)
    assert table.num_rows == 240 and table.column("top_labels").to_pylist()[0].__len__() == 3
    sizes = {"paper": 240, "author": 80, "venue": 6}
    for node_type, rows in sizes.items():
        emb = io.read_embeddings(out, node_type)
        assert emb.num_rows == rows and emb.schema.field("embedding").type.list_size == 8
    assert not (out / "embeddings.parquet").exists()
    node_id, logits = io.read_predictions(tmp_path / "data/model")
    top = np.array(table.column("top_probs").to_pylist())[node_id.numpy()]
    np.testing.assert_allclose(top, torch.softmax(logits, 1).topk(3, 1).values.numpy(), atol=1e-5)


def test_typed_link_pairs_score_like_train_and_every_type_gets_embeddings(tmp_path):
    hetero = {"num_nodes": 240, "num_features": 8, "num_classes": 3,
              "num_authors": 80, "num_venues": 6}
    split = {"link": {"num_val_negatives": 5, "num_test_negatives": 5}}
    _params(tmp_path, dataset={"task": "link", "layout": "typed", "synthetic": hetero},
            split=split,
            train={"model": "sage", "epochs": 3})
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for stage in ("prepare", "split", "train"):
            assert main([stage]) == 0, stage

        graph = io.read_graph(Path("data/prepared"))
        edge_type, edges, _ = io.read_typed_link_split(Path("data/split"), graph)
        src, dst = edges["test"].numpy()
        Path("data/pairs").mkdir()
        pq.write_table(pa.table({"src": src, "dst": dst}), "data/pairs/p.parquet")
        _params(tmp_path, dataset={"task": "link", "layout": "typed", "synthetic": hetero},
            split=split,
                train={"model": "sage", "epochs": 3}, predict={"pairs": "data/pairs/p.parquet"})
        assert main(["predict"]) == 0
    finally:
        os.chdir(cwd)
    out = tmp_path / "data/predict"
    scores = io.read_pair_scores(out)
    assert scores.column("src").to_pylist() == src.tolist()
    trained = io.read_link_predictions(tmp_path / "data/model")["test"][0]
    np.testing.assert_allclose(scores.column("score").to_numpy(), trained.numpy(), atol=1e-5)
    emb = {t: embedding_matrix(io.read_embeddings(out, t)) for t in graph.node_types}
    assert {t: e.shape[0] for t, e in emb.items()} == {"paper": 240, "author": 80, "venue": 6}
    dots = (emb[edge_type[0]][src] * emb[edge_type[2]][dst]).sum(1)
    np.testing.assert_allclose(scores.column("score").to_numpy(), dots, atol=1e-5)
    assert not (out / "predictions.parquet").exists()


# ---------------------------------------------------------------------------------- validation
def test_readers_refuse_a_wrong_schema(tmp_path):
    good = io.predictions_schema(pa.int64(), pa.string())
    block = {"node_id": pa.array([0, 1]), "original_id": pa.array([5, 6]),
             "role": pa.array(["train", "unused"]), "label": pa.array(["a", None]),
             "predicted": pa.array(["a", "b"]), "top_labels": pa.array([["a"], ["b"]]),
             "top_probs": pa.array([[0.9], [0.6]], pa.list_(pa.float32()))}
    io.write_blocks(tmp_path / "predictions.parquet", good, io.PREDICTIONS, [block])
    assert io.read_node_predictions(tmp_path).num_rows == 2
    wrong = good.set(good.get_field_index("top_probs"),
                     pa.field("top_probs", pa.list_(pa.float64())))
    io.write_blocks(tmp_path / "predictions.parquet", wrong, io.PREDICTIONS,
                    [{**block, "top_probs": pa.array([[0.9], [0.6]])}])
    with pytest.raises(ValueError, match=r"column 'top_probs' must be list<\w+: float>, "
                                         r"found list<\w+: double>"):
        io.read_node_predictions(tmp_path)
    io.write_blocks(tmp_path / "predictions.parquet", good, io.EMBEDDINGS, [block])
    with pytest.raises(ValueError, match="expected a 'gnnpipe.node_predictions/1' table"):
        io.read_node_predictions(tmp_path)
    emb = io.embeddings_schema(pa.int64(), pa.float64(), 2)
    io.write_blocks(tmp_path / "embeddings.parquet", emb, io.EMBEDDINGS, [{
        "node_id": pa.array([0]), "original_id": pa.array([0]),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array([1.0, 2.0]), 2)}])
    with pytest.raises(ValueError, match="fixed_size_list<float32 or float16>"):
        io.read_embeddings(tmp_path)


def test_dvc_stage_reads_only_the_predict_section_and_the_models_train_keys():
    stages = yaml.safe_load((Path(__file__).parents[2] / "dvc.yaml").read_text())["stages"]
    predict = stages["predict"]
    assert "predict" in predict["params"] and "train" not in predict["params"]
    # `threads` (every stage's thread count) is the one top-level key besides its own section
    assert all(p in ("predict", "threads") or p.startswith("train.") for p in predict["params"])
    assert "data/pairs" in predict["deps"] and (Path(__file__).parents[2] / "data/pairs").is_dir()
    assert predict["outs"] == ["data/predict", "metrics/perf/stages/predict.json",
                               {"metrics/predict.json": {"cache": False}}]
    others = [spec for name, spec in stages.items() if name != "predict"]
    assert not any(str(d).startswith(("data/predict", "metrics/predict"))
                   for spec in others for d in spec.get("deps", []))
    assert not any(str(p).startswith("predict") for spec in others
                   for p in spec.get("params", []))  # nothing else re-runs on predict.*
