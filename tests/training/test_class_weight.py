"""train.class_weight: balanced: sklearn's weights n / (C x count) of the train classes, the
weighted cross-entropy of every loss path (whole batch, a loader's loss rows, saint's
node_norm-weighted sum, the blocks baseline), and a model that learns the minority class of an
imbalanced graph where the unweighted one predicts the majority alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnnpipe.config import FitParams, NodeSplitParams, TrainParams, params_from_dict
from gnnpipe.data.graph import ROLE_CODES
from graph_oracle import prepare
from gnnpipe.io.common import PHASES, role_codes
from gnnpipe.reporting.node_metric import node_metrics
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sampling.batch import LossBatch
from split_oracle import split_nodes
from gnnpipe.training.block_fit import fit_blocks
from gnnpipe.training.models import build_model
from gnnpipe.training.train import (NodeTask, Objective, _loss, balanced_weights, build_inputs,
                                    fit, node_objective, objective_for)
from conftest import as_graph, small_params

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TRAIN, VAL, TEST, UNUSED = (ROLE_CODES[r] for r in ("train", "val", "test", "unused"))
CFG = TrainParams(epochs=60, patience=60, hidden=16, model="mlp")


@pytest.fixture(scope="module")
def imbalanced():
    """2,000 nodes, two classes, 15% positives ((c + 1) ** -2.5 weights), weak features: an
    unweighted MLP predicts class 0 everywhere."""
    params = small_params(num_classes=2, class_imbalance=2.5, feature_signal=0.7,
                          num_nodes=2000)
    graph = prepare(params.dataset, params.seed)[0].target_view()
    roles = role_codes(split_nodes(as_graph(graph), NodeSplitParams(), make_rng(0, "split")).roles)
    return graph, roles


def test_balanced_weights_are_sklearns_and_average_one_over_the_train_nodes():
    counts = np.array([60, 30, 10, 0])  # class 3 has no train node
    weights = balanced_weights(counts)
    present = 3  # sklearn's "balanced": n_samples / (n_classes_present * bincount)
    assert weights.dtype == torch.float32
    assert weights.tolist() == pytest.approx([100 / (present * 60), 100 / (present * 30),
                                              100 / (present * 10), 0.0])
    assert float((weights[:3] * torch.tensor([60.0, 30, 10])).sum()) == pytest.approx(100.0)


def test_objective_counts_labelled_train_nodes_only():
    """Weights from the labelled train nodes; unused, val/test and unlabelled ones do not
    count; ``none`` gives no weights."""
    y = torch.tensor([0, 0, 0, 1, 1, 0, 1, 1, 1, -1])
    roles = np.array([TRAIN, TRAIN, TRAIN, TRAIN, VAL, VAL, TEST, UNUSED, UNUSED, TRAIN],
                     dtype=np.int8)
    weighted = node_objective("accuracy", "balanced", y, roles, 2)
    assert weighted.class_weight.tolist() == pytest.approx([4 / (2 * 3), 4 / (2 * 1)])
    assert node_objective("accuracy", "none", y, roles, 2).class_weight is None
    params = params_from_dict({"train": {"class_weight": "balanced"},
                               "evaluate": {"metric": "macro_f1"}})
    both = objective_for(params, y, roles, 2)
    assert both.metric == "macro_f1" and torch.equal(both.class_weight, weighted.class_weight)


def test_the_step_is_pytorchs_weighted_cross_entropy(imbalanced):
    """NodeTask.step on the train rows (full batch) and on a loader's LossBatch: the loss is
    F.cross_entropy(weight=n / (C x count)) with the weights computed here from scratch."""
    graph, roles = imbalanced
    train = torch.from_numpy(np.flatnonzero(roles == TRAIN))
    counts = torch.bincount(graph.y[train], minlength=2).double()
    expected_weight = (train.numel() / (2 * counts)).float()
    torch.manual_seed(0)
    model = build_model("mlp", graph.x.shape[1], 2, CFG).eval()  # no dropout: one function
    logits = model(graph.x[train])
    expected = F.cross_entropy(logits, graph.y[train], weight=expected_weight)
    assert not torch.isclose(expected, F.cross_entropy(logits, graph.y[train]))  # it matters

    objective = node_objective("accuracy", "balanced", graph.y, roles, 2)
    task = NodeTask(build_inputs(graph.x), graph.y, roles, objective=objective)
    loss, examples = task.step(model, train)
    assert examples == train.numel()
    torch.testing.assert_close(loss, expected)

    batch = LossBatch(graph.x[train], None, graph.y[train], torch.arange(train.numel()))
    loss, _ = task.step(model, batch)
    torch.testing.assert_close(loss, expected)


def test_saints_weighted_sum_composes_with_the_class_weights():
    """node_norm = 1 / n over every train node (a 'subgraph' of them all): the weighted sum
    equals the full weighted mean, as the balanced weights average 1 over the train nodes."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(40, 3, generator=gen)
    target = torch.randint(0, 3, (40,), generator=gen)
    weight = balanced_weights(np.bincount(target.numpy(), minlength=3))
    norm = torch.full((40,), 1 / 40)
    torch.testing.assert_close(_loss(logits, target, norm, weight),
                               F.cross_entropy(logits, target, weight=weight))
    per_node = F.cross_entropy(logits, target, reduction="none")
    torch.testing.assert_close(_loss(logits, target, norm * 2, weight),
                               (per_node * weight[target] * norm * 2).sum())


def _minority(result, graph, roles) -> tuple[int, dict]:
    """Nodes predicted as class 1 (of every scored node), and the test metrics."""
    node_id = result.node_id.numpy()
    test = roles[node_id] == TEST
    predicted = int((result.logits.argmax(dim=1) == 1).sum())
    return predicted, node_metrics(graph.y[node_id][test].numpy(), result.logits[test], 2)


def test_balanced_mlp_predicts_the_minority_the_plain_one_hardly_does(imbalanced):
    graph, roles = imbalanced
    runs = {}
    for choice in ("none", "balanced"):
        objective = node_objective("accuracy", choice, graph.y, roles, 2)
        runs[choice] = fit(lambda: build_model("mlp", graph.x.shape[1], 2, CFG),
                           build_inputs(graph.x), graph.y, roles, CFG, 0, objective=objective)
    plain, plain_metrics = _minority(runs["none"], graph, roles)
    weighted, weighted_metrics = _minority(runs["balanced"], graph, roles)
    # (nearly) the majority class everywhere: accuracy at the base rate
    assert plain < 0.01 * len(graph.y)
    assert weighted > 100
    assert weighted_metrics["per_class_f1"][1] > max(0.25, plain_metrics["per_class_f1"][1] + 0.2)
    assert weighted_metrics["macro_f1"] > plain_metrics["macro_f1"] + 0.03


def test_balanced_gnn_on_a_neighbor_loader_predicts_the_minority(imbalanced):
    """The loader path (LossBatch of sampled seeds) weighs its loss too."""
    from gnnpipe.config import NeighborParams
    from gnnpipe.sampling.builders import neighbor_batches

    graph, roles = imbalanced
    cfg = dataclasses.replace(CFG, model="sage", sampler="neighbor", batch_size=128, epochs=20,
                              patience=20, neighbor=NeighborParams(num_neighbors=(5, 5)))
    inputs = build_inputs(graph.x, message_graphs={p: graph.csr for p in PHASES})
    predicted = {}
    for choice in ("none", "balanced"):
        loader = neighbor_batches(graph.x, graph.y, graph.csr,
                                  torch.from_numpy(np.flatnonzero(roles == TRAIN)), cfg.neighbor,
                                  0, batch_size=cfg.batch_size)
        result = fit(lambda: build_model("sage", graph.x.shape[1], 2, cfg), inputs, graph.y,
                     roles, cfg, 0, loader=loader,
                     objective=node_objective("accuracy", choice, graph.y, roles, 2))
        predicted[choice] = _minority(result, graph, roles)[0]
    assert predicted["balanced"] > 3 * max(predicted["none"], 10)


def test_blocks_baseline_fits_the_same_weighted_objective():
    """The blocks baseline with balanced weights equals the in-memory fit (one chunk)
    within float rounding, and differs from the unweighted fit."""
    rng = np.random.default_rng(0)
    n = 3000
    x = torch.from_numpy(rng.standard_normal((n, 6)).astype(np.float32))
    y = torch.from_numpy((x[:, 0].numpy() > 1.0).astype(np.int64))  # ~16% positives
    roles = rng.choice(np.arange(4, dtype=np.int8), n, p=[0.5, 0.2, 0.2, 0.1])
    cfg = FitParams(hidden=8, epochs=6, patience=6, dropout=0.5)
    build = lambda: build_model("mlp", 6, 2, cfg)
    objective = node_objective("accuracy", "balanced", y, roles, 2)
    memory = fit(build, build_inputs(x), y, roles, cfg, seed=3, objective=objective)
    blocks = fit_blocks(build, x, y, roles, cfg, seed=3, block_rows=4096, objective=objective)
    plain = fit_blocks(build, x, y, roles, cfg, seed=3, block_rows=4096)
    for a, b in zip(memory.history, blocks.history):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=2e-6)
    torch.testing.assert_close(memory.logits, blocks.logits, atol=1e-5, rtol=0)
    assert plain.history[0]["train_loss"] != pytest.approx(blocks.history[0]["train_loss"],
                                                           abs=1e-3)


def test_none_leaves_the_fit_unchanged(imbalanced):
    """An Objective without weights is the fit of before: the same bits."""
    graph, roles = imbalanced
    cfg = dataclasses.replace(CFG, epochs=5)
    build = lambda: build_model("mlp", graph.x.shape[1], 2, cfg)
    default = fit(build, build_inputs(graph.x), graph.y, roles, cfg, 0)
    explicit = fit(build, build_inputs(graph.x), graph.y, roles, cfg, 0,
                   objective=Objective("accuracy", None))
    assert torch.equal(default.logits, explicit.logits) and default.history == explicit.history
