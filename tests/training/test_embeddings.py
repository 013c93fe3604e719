"""Learnable node embeddings (gnnpipe/training/embeddings.py, ``train.embeddings``): batches hand
the model their rows' global ids, only those rows get gradients and optimizer steps, untrained
rows read the mean of the trained ones, layer-wise inference reads the same input table, the
tables stay identical on DDP ranks, and on links made by latent factors no column carries the
embeddings beat degree features."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import socket

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.multiprocessing as mp
import yaml

from gnnpipe import io as gnnpipe_io
from gnnpipe.cli import main
from gnnpipe.config import ParamsError, TrainParams, params_from_dict
from gnnpipe.config.schema import EmbeddingsParams
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.data.graph import Graph
from gnnpipe.hetero.inputs import phase_inputs
from gnnpipe.hetero.models import build_hetero_model
from gnnpipe.reporting.metrics import link_metrics
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sampling import builders
from gnnpipe.splitting.link_split import negative_weights
from link_oracle import split_links, typed_negative_sampler
from gnnpipe.training import embeddings
from gnnpipe.training.inference import LayerwiseInference, csr_view, layerwise_logits
from gnnpipe.training.link_train import fit_link
from gnnpipe.training.model_inputs import read_model_inputs
from gnnpipe.training.models import build_model
from gnnpipe.training.train import batch_output, node_step

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WITH = TrainParams(hidden=8, embeddings=EmbeddingsParams(dim=4))


def _graph(n: int = 300, seed: int = 0) -> Graph:
    """A random graph whose one feature column is the node id (a wrong gather shows)."""
    gen = np.random.default_rng(seed)
    src, dst = gen.integers(0, n, (2, 4 * n))
    csr = csr_from_edges(np.concatenate([src, dst]), np.concatenate([dst, src]), n)
    x = torch.arange(n, dtype=torch.float32).view(n, 1)
    return Graph.homogeneous(csr, x, torch.arange(n) % 3, 3)


def _source(graph: Graph, sampler: str) -> builders.Source:
    train = torch.arange(0, graph.num_nodes, 2)  # every other node is a train node
    mask = torch.zeros(graph.num_nodes, dtype=torch.bool)
    mask[train] = True
    csr = graph.csr[graph.link_edge_type]
    parts = np.arange(graph.num_nodes) % 4
    partition = ({"num_parts": 4}, parts, np.bincount(parts[train.numpy()], minlength=4))
    return builders.Source(graph, csr, train, train, csr.edge_index(), partition=partition,
                           train_mask=mask if sampler in ("cluster", "saint") else None)


@pytest.mark.parametrize("sampler", ["neighbor", "shadow", "cluster", "saint"])
def test_batches_give_their_rows_ids_and_only_those_rows_get_gradients(sampler):
    graph = _graph()
    cfg = dataclasses.replace(WITH, sampler=sampler, batch_size=16)
    batch = next(iter(builders.build(_source(graph, sampler), cfg, 0).loader))
    assert torch.equal(batch.x[:, 0].long(), batch.n_id)  # the ids the tables read: the rows'
    torch.manual_seed(0)
    model = build_model("sage", 1, 3, cfg, num_nodes={"node": graph.num_nodes})
    loss, _ = node_step(model, batch)
    loss.backward()
    grad = model.node_inputs.tables[0].embedding.weight.grad
    assert grad.is_sparse  # a step's cost follows the batch: no (N, D) gradient
    rows = grad.coalesce().indices()[0]
    assert set(rows.tolist()) <= set(batch.n_id.tolist()) and rows.numel() < graph.num_nodes


def test_link_batches_and_typed_batches_carry_ids_per_type():
    from link_oracle import training_sampler

    graph = _graph()
    csr = graph.csr[graph.link_edge_type]
    sup = csr.edge_index()[:, :64]
    loader = builders.link_neighbor_batches(graph.target_view().x, csr, sup,
                                            training_sampler(*sup.numpy(), graph.num_nodes),
                                            WITH.neighbor, 0, batch_size=16)
    batch = next(iter(loader))
    assert torch.equal(batch.x[:, 0].long(), batch.n_id)
    model = build_model("sage", 1, 8, WITH, num_nodes={"node": graph.num_nodes})
    batch_output(model, batch).sum().backward()  # trimmed: the pair endpoints' rows
    rows = model.node_inputs.tables[0].embedding.weight.grad.coalesce().indices()[0]
    assert set(rows.tolist()) <= set(batch.n_id.tolist())
    typed = _latent_graph(40, 40, per_user=5)
    typed = dataclasses.replace(typed, x={t: torch.arange(v.shape[0], dtype=torch.float32)
                                          .view(-1, 1) for t, v in typed.x.items()})
    seeds = np.arange(0, 40, 2)
    params = params_from_dict({"dataset": {"layout": "typed", "task": "link"}, "split": {
        "link": {"num_val_negatives": 5, "num_test_negatives": 5, "num_hard_negatives": 0}},
        "evaluate": {"link": {"negatives": "random"}}})
    split = split_links(typed, params.split.link, make_rng(0, "split"))
    off = typed.offsets()
    visible = split.edges["message"].numpy()
    link_loader = builders.typed_link_batches(
        typed, split.message_graphs["train"], RATES,
        split.edges["train_supervision"] + torch.tensor([[off["user"]], [off["item"]]]),
        typed_negative_sampler(typed, RATES, visible[0], visible[1], negative_weights(
            typed, RATES, "uniform", split.message_graphs["train"][RATES])), WITH.neighbor, 8, 0)
    for loader in (builders.typed_neighbor_batches(typed, typed.csr, seeds, WITH.neighbor, 8, 0),
                   builders.hgt_batches(typed, typed.csr, seeds, (8, 8), 8, 0), link_loader):
        batch = next(iter(loader))
        assert set(batch.n_id) == {"user", "item"}
        for t, ids in batch.n_id.items():
            assert torch.equal(batch.x[t][:, 0].long(), ids)
    batch = next(iter(builders.typed_neighbor_batches(typed, typed.csr, seeds, WITH.neighbor,
                                                      8, 0)))
    model = build_hetero_model("sage", typed.metadata(), {"user": 1, "item": 1}, 2, "user",
                               WITH, num_nodes=dict(typed.num_nodes_dict))
    node_step(model, batch)[0].backward()
    for t, table in embeddings.tables(model).items():
        rows = table.embedding.weight.grad.coalesce().indices()[0]
        assert set(rows.tolist()) <= set(batch.n_id[t].tolist()), t


def test_lightning_trains_the_tables_as_the_plain_loop_does():
    """train.engine: lightning takes the same optimizer (its step runs Lightning's closure)."""
    from gnnpipe.training.lightning import fit_lightning
    from gnnpipe.training.train import build_inputs, fit

    view = _graph(300).target_view()
    roles = np.full(300, 3, dtype=np.int8)
    roles[0::2], roles[1::4], roles[3::4] = 0, 1, 2
    cfg = dataclasses.replace(WITH, epochs=2, patience=2, sampler="neighbor", batch_size=32)
    x = view.x / 300
    inputs = build_inputs(x, message_graphs={p: view.csr for p in ("train", "val", "test")})

    def loader():
        return builders.neighbor_batches(x, view.y, view.csr, torch.arange(0, 300, 2),
                                         cfg.neighbor, 7, batch_size=32,
                                         edge_index=inputs["train"].edge_index)

    def build():
        return build_model("sage", 1, 3, cfg, num_nodes={"node": 300})

    plain = fit(build, inputs, view.y, roles, cfg, 3, loader=loader())
    light = fit_lightning(build, inputs, view.y, roles, cfg, 3,
                          node_sampler=loader().node_sampler)
    assert light.history == plain.history and torch.equal(light.logits, plain.logits)
    assert all(torch.equal(light.state_dict[k], v) for k, v in plain.state_dict.items())


def test_without_embeddings_the_model_and_its_optimizer_are_as_before():
    cfg = TrainParams(hidden=8)
    torch.manual_seed(0)
    plain = build_model("sage", 3, 2, cfg)
    torch.manual_seed(0)
    counted = build_model("sage", 3, 2, cfg, num_nodes={"node": 50})
    assert list(plain.state_dict()) == list(counted.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(),
                                                 counted.state_dict().values()))
    assert not hasattr(counted, "_ddp_params_and_buffers_to_ignore")
    assert type(embeddings.optimizer(counted, cfg)) is torch.optim.Adam
    assert embeddings.meta(cfg, ["node"]) == {}


def _trained_table():
    """A sage model with a 4-wide table of 12 nodes after steps on rows 0..5 only."""
    torch.manual_seed(0)
    model = build_model("sage", 1, 2, WITH, num_nodes={"node": 12})
    opt = embeddings.optimizer(model, WITH)
    x, edges = torch.ones(6, 1), torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    for _ in range(3):
        opt.zero_grad()
        model(x, edges, n_id=torch.arange(6)).pow(2).sum().backward()
        opt.step()
    return model, opt


def test_untrained_rows_read_the_mean_of_the_trained_rows_never_zero():
    model, _ = _trained_table()
    table = model.node_inputs.tables[0]
    assert table.trained.tolist() == [True] * 6 + [False] * 6
    assert embeddings.untrained_rows(model) == {"node": 6}
    said = embeddings.summary(model.state_dict(), embeddings.meta(WITH, ["node"]))
    assert said == {"embeddings": "node:4", "embeddings_combine": "concat",
                    "embedding_rows_untrained": {"node": 6}}  # train.json and the report
    model.eval()
    rows = table(None, 12)  # a whole-graph forward: every row in id order
    weight = table.embedding.weight.detach()
    mean = weight[:6].mean(0)
    assert torch.equal(rows[:6], weight[:6])
    assert torch.allclose(rows[6:], mean.expand(6, -1)) and bool(mean.abs().sum() > 0)
    assert not torch.allclose(weight[6:], mean.expand(6, -1))  # the fallback replaced them
    # a new graph: its nodes point at trained rows, -1 for a node the table never had
    embeddings.remap_rows(model, {"node": torch.tensor([5, -1, 0])})
    assert torch.equal(table(None, 3), torch.stack([weight[5], mean, weight[0]]))
    embeddings.remap_rows(model, {"node": None})
    with pytest.raises(ValueError, match="holds 12 embedding rows .* 30 nodes.*remap_rows"):
        model(torch.ones(30, 1), torch.empty(2, 0, dtype=torch.long))


def test_the_rows_step_is_torchs_sparse_adam_on_the_gradients_rows():
    gen = torch.Generator().manual_seed(0)
    mine = torch.nn.Parameter(torch.randn(20, 3, generator=gen))
    theirs = torch.nn.Parameter(mine.detach().clone())
    group, state = {"lr": 0.1, "betas": (0.9, 0.999), "eps": 1e-8}, {}
    reference = torch.optim.SparseAdam([theirs], lr=0.1)
    for rows in ([1, 4, 7], [4, 5], [19, 0, 4]):
        grad = torch.sparse_coo_tensor(torch.tensor([rows]), torch.randn(
            len(rows), 3, generator=gen), (20, 3), check_invariants=True)
        theirs.grad = grad.clone()
        reference.step()
        with torch.no_grad():
            embeddings._adam_rows(mine, grad.coalesce(), state, group)
    assert torch.allclose(mine, theirs, atol=1e-6)
    untouched = [r for r in range(20) if r not in (0, 1, 4, 5, 7, 19)]
    assert torch.equal(state["exp_avg"][untouched], torch.zeros(len(untouched), 3))


def test_optimizer_state_round_trips_and_the_dense_weights_keep_adam():
    model, opt = _trained_table()
    assert isinstance(opt, embeddings.RowSparseAdam)
    assert [g.get("weight_decay") for g in opt.param_groups] == [WITH.weight_decay, None]
    torch.manual_seed(1)  # a fresh model and optimizer, then the saved state of both
    twin = build_model("sage", 1, 2, WITH, num_nodes={"node": 12})
    twin.load_state_dict(model.state_dict())
    twin_opt = embeddings.optimizer(twin, WITH)
    saved = io.BytesIO()  # a checkpoint's round trip: torch.save, load with weights_only
    torch.save(opt.state_dict(), saved)
    saved.seek(0)
    twin_opt.load_state_dict(torch.load(saved, weights_only=True))
    for m, o in ((model, opt), (twin, twin_opt)):  # one more step from the same state
        torch.manual_seed(2)  # the same dropout masks
        o.zero_grad()
        m(torch.ones(6, 1), torch.tensor([[0], [1]]), n_id=torch.arange(6, 12)).sum().backward()
        o.step()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 twin.state_dict().values()))


class _RowsOnRequest:
    """Feature rows read per request, as ``gnnpipe.data.features.ModelFeatures`` reads them."""

    def __init__(self, x: torch.Tensor):
        self.x, self.shape = x, x.shape

    def __getitem__(self, index) -> torch.Tensor:
        return self.x[index].clone()


def test_layerwise_inference_reads_the_input_table_as_the_forward_does():
    graph = _graph(200)
    csr = graph.csr[graph.link_edge_type]
    for combine in ("concat", "alone"):
        cfg = dataclasses.replace(WITH, embeddings=EmbeddingsParams(dim=4, combine=combine))
        torch.manual_seed(0)
        model = build_model("gcn", 1, 3, cfg, num_nodes={"node": 200})
        model.node_inputs.tables[0].trained[:150] = True  # the rest read the fallback
        model.eval()
        x = graph.target_view().x / 200
        table = embeddings.input_table(model, x)
        assert embeddings.input_table(model, table) is table  # a table passes through
        engine = LayerwiseInference(*csr_view(csr), block_edges=300)
        with torch.no_grad():
            full = model(x, csr.edge_index())
        assert torch.allclose(layerwise_logits(model, table, engine), full, atol=1e-5)
        # what the stages pass: the features alone, the tables joined inside
        assert torch.allclose(layerwise_logits(model, x, engine), full, atol=1e-5)
        lazy = embeddings.input_table(model, _RowsOnRequest(x))  # out-of-core features
        assert isinstance(lazy, embeddings.InputRows) and lazy.shape == table.shape
        assert torch.allclose(layerwise_logits(model, lazy, engine), full, atol=1e-5)
    typed = _latent_graph(30, 20, per_user=4)
    torch.manual_seed(0)
    model = build_hetero_model("rgcn", typed.metadata(), {"user": 1, "item": 1}, 3, "user",
                               WITH, out="all", num_nodes=dict(typed.num_nodes_dict)).eval()
    edges = {e: c.edge_index() for e, c in typed.csr.items()}
    engine = LayerwiseInference(typed.csr, typed.num_nodes_dict, block_edges=40)
    with torch.no_grad():
        full = model(typed.x, edges)
    assert torch.allclose(layerwise_logits(model, embeddings.input_table(model, typed.x),
                                           engine), full, atol=1e-5)
    assert torch.allclose(layerwise_logits(model, typed.x, engine), full, atol=1e-5)


def test_embeddings_params_are_refused_where_they_cannot_apply():
    on = {"embeddings": {"dim": 8}}
    cases = {"mlp": ({"model": "mlp"}, "train.model='mlp' is a features-only model"),
             "sign": ({"model": "sign", "sampler": "sign"}, "train.model='sign'"),
             "shard": ({"sampler": "cluster", "dist": {"shard": "partition", "nproc": 2}},
                       "train.dist.shard='partition'")}
    for extra, match in cases.values():
        with pytest.raises(ParamsError, match=match):
            params_from_dict({"train": {**on, **extra}})
    with pytest.raises(ParamsError, match="train.embeddings.dim=0 turns embeddings off"):
        params_from_dict({"train": {"embeddings": {"types": ["user"]}}})
    assert params_from_dict({"train": on}).train.embeddings.dim == 8
    with pytest.raises(ValueError, match="train.embeddings.types names 'user'"):
        build_model("sage", 1, 2, params_from_dict(
            {"train": {"embeddings": {"dim": 4, "types": ["user"]}}}).train,
            num_nodes={"node": 5})


# ---------------------------------------------------------------------------------------- DDP
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_gloo_ranks_keep_identical_tables_as_one_process_averaging_their_losses():
    """The loop's DDP on two spawned gloo ranks, each stepping on its own rows (rows 4, 5 on
    both): the tables (kept out of DDP, averaged by the optimizer) and the dense weights end the
    same on both ranks, and as one process stepping on the mean of both ranks' losses; the
    trained rows are both ranks' rows."""
    import embeddings_ranks

    # forked, not spawned: a spawned rank spends seconds importing torch again; each rank
    # runs one torch thread (no OpenMP pool to inherit across the fork)
    queue = mp.get_context("fork").SimpleQueue()
    mp.start_processes(embeddings_ranks.worker, args=(2, _free_port(), queue), nprocs=2,
                       start_method="fork")
    out = {rank: state for rank, state in (queue.get() for _ in range(2))}
    assert out[0] == out[1]
    one = embeddings_ranks.train([0, 1])
    for key, value in one.items():
        assert torch.allclose(torch.tensor(out[0][key]).to(value.dtype), value, atol=1e-6), key
    trained = one["node_inputs.tables.0.trained"]
    assert trained.nonzero().squeeze(1).tolist() == list(range(10))


# ----------------------------------------------------------------------------- the measurement
RATES, RATED = ("user", "rates", "item"), ("item", "rated_by", "user")


def _latent_graph(users: int, items: int, per_user: int = 12, k: int = 3, seed: int = 0
                  ) -> Graph:
    """Users rate the ``per_user`` items closest to them in a k-dim latent space (unit
    vectors, Gumbel noise): no popularity, and no column carries the factors; each type's one
    feature is its log degree, as ``dataset.typed.featureless: degree`` gives."""
    gen = np.random.default_rng(seed)
    fu, fi = gen.normal(size=(users, k)), gen.normal(size=(items, k))
    fu /= np.linalg.norm(fu, axis=1, keepdims=True)
    fi /= np.linalg.norm(fi, axis=1, keepdims=True)
    score = 4 * fu @ fi.T + gen.gumbel(size=(users, items))
    u = np.repeat(np.arange(users), per_user)
    i = np.argsort(-score, axis=1)[:, :per_user].reshape(-1)
    x = {"user": np.log1p(np.bincount(u, minlength=users)),
         "item": np.log1p(np.bincount(i, minlength=items))}
    return Graph(x={t: torch.from_numpy(v.astype(np.float32)).view(-1, 1) for t, v in x.items()},
                 csr={RATES: csr_from_edges(u, i, items, users),
                      RATED: csr_from_edges(i, u, users, items)},
                 target="user", y=torch.zeros(users, dtype=torch.int64), num_classes=2,
                 reverse={RATES: RATED, RATED: RATES}, link_edge_type=RATES)


def _link_fit(graph: Graph, dim: int) -> dict:
    params = params_from_dict({
        "dataset": {"layout": "typed", "task": "link"},
        "train": {"epochs": 40, "patience": 40, "hidden": 32, "dropout": 0.0, "lr": 0.01,
                  "embeddings": {"dim": dim}},
        "split": {"link": {"num_val_negatives": 20, "num_test_negatives": 20,
                           "num_hard_negatives": 0}},
        "evaluate": {"link": {"negatives": "random"}}})
    split = split_links(graph, params.split.link, make_rng(0, "split"))
    off = graph.offsets()
    edges = {r: torch.stack([p[0] + off["user"], p[1] + off["item"]])
             for r, p in split.edges.items()}
    negatives = {p: t + off["item"] for p, t in split.negatives.items()}
    visible = split.edges["message"].numpy()
    sampler = typed_negative_sampler(graph, RATES, visible[0], visible[1], negative_weights(
        graph, RATES, "uniform", split.message_graphs["train"][RATES]))
    result = fit_link(lambda: build_hetero_model(
        "sage", graph.metadata(), {"user": 1, "item": 1}, 32, "user", params.train, out="all",
        num_nodes=dict(graph.num_nodes_dict)), phase_inputs(graph, split.message_graphs),
        edges, negatives, sampler, params.train, 0)
    return link_metrics(*(s.numpy() for s in result.scores["test"]), (10,))


def test_embeddings_beat_degree_features_on_links_made_by_latent_factors():
    graph = _latent_graph(100, 100)
    degree, learned = _link_fit(graph, 0), _link_fit(graph, 32)
    assert learned["roc_auc"] > degree["roc_auc"] + 0.08, (learned, degree)
    assert learned["mrr"] > degree["mrr"] + 0.03, (learned, degree)


# ------------------------------------------------------------------------ types: featureless
def _featureless_repo(root, featureless: bool) -> argparse.Namespace:
    """Tiny typed tables prepared and split under ``root``: user (features f0 = id number,
    labels) buys item, item has tag; item and tag have no feature columns when
    ``featureless``, else one each. Model-input args of the result."""
    users, items, tags = 24, 10, 4
    extra = {} if featureless else {"f0": np.arange(10.0)}
    tables = {"nodes/user": {"id": np.arange(users), "f0": np.arange(users, dtype=float),
                             "label": np.arange(users) % 2},
              "nodes/item": {"id": np.arange(items), **extra},
              "nodes/tag": {"id": np.arange(tags), **({} if featureless
                                                     else {"f0": np.arange(4.0)})},
              "edges/user__buys__item": {"src": np.arange(users), "dst": np.arange(users) % items},
              "edges/item__has__tag": {"src": np.arange(items), "dst": np.arange(items) % tags}}
    for name, columns in tables.items():
        (root / "raw" / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(columns), root / "raw" / f"{name}.parquet")
    (root / "params.yaml").write_text(yaml.safe_dump({
        "dataset": {"source": "parquet", "path": "raw", "layout": "typed",
                    "nodes": {"features": "f*"}},
        "split": {"node": {"strategy": "random"}}}))
    with contextlib.chdir(root):
        assert main(["prepare"]) == 0 and main(["split"]) == 0
    return argparse.Namespace(prepared=root / "data/prepared", split=root / "data/split",
                              features=root / "data/features", propagate=root / "data/propagate",
                              partition=root / "data/partition")


FEATURELESS = TrainParams(hidden=8, embeddings=EmbeddingsParams(dim=4, types="featureless"))


def test_featureless_gives_rows_to_exactly_the_types_graph_json_lists(tmp_path):
    args = _featureless_repo(tmp_path, featureless=True)
    assert gnnpipe_io.read_featureless(args.prepared) == ["item", "tag"]
    inputs = read_model_inputs(args, FEATURELESS, "node")
    model = inputs.model(2)
    sizes = {t: table.num_nodes for t, table in embeddings.tables(model).items()}
    assert sizes == {"item": 10, "tag": 4}  # user had f0: no table
    meta = inputs.meta({"task": "node"})
    assert meta["embeddings"] == "item:4,tag:4"
    # the whole-graph forward reads [degree feature | row] for item and tag, x alone for user
    assert model.node_inputs.width("item", 1) == 5 and model.node_inputs.width("user", 1) == 1
    phase = inputs.phases["train"]
    assert model(phase.x, phase.edge_index).shape == (24, 2)


def test_featureless_is_refused_on_a_graph_whose_types_all_had_features(tmp_path):
    args = _featureless_repo(tmp_path, featureless=False)
    with pytest.raises(ValueError, match=r"train.embeddings.types='featureless', but every node "
                                         r"type of the prepared graph \('item', 'tag', 'user'\)"):
        read_model_inputs(args, FEATURELESS, "node")
    # named types and all are untouched by resolve; featureless without dim is off
    for cfg in (WITH, TrainParams(embeddings=EmbeddingsParams(dim=0))):
        assert embeddings.resolve(cfg, ["user"], []) is cfg


def test_featureless_is_refused_in_params_where_every_type_has_features():
    on = {"embeddings": {"dim": 4, "types": "featureless"}}
    for dataset in ({}, {"layout": "typed"}):  # homogeneous sources; the built-in typed graph
        with pytest.raises(ParamsError, match=r"train.embeddings.types='featureless' gives rows "
                                              r"to the node types without feature columns"):
            params_from_dict({"dataset": dataset, "train": on})
    typed = params_from_dict({"dataset": {"source": "parquet", "layout": "typed"}, "train": on})
    assert typed.train.embeddings.types == "featureless"
    with pytest.raises(ParamsError, match="dim=0 turns embeddings off"):
        params_from_dict({"dataset": {"source": "parquet", "layout": "typed"},
                          "train": {"embeddings": {"types": "featureless"}}})
