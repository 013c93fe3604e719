"""Collapsed link scores are caught, not celebrated: the figures of ``collapse``, a link encoder
whose embeddings all point one way trained for real (train records and warns, the metrics rank
its rounding noise as ties, evaluate's verdict says it collapsed and claims no gain), and the
causes evaluate measures (unscaled degree features of a featureless type, the learning rate)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from gnnpipe.config import EvaluateParams, LinkSplitParams, TrainParams
from gnnpipe.data.graph import Csr, Graph, phase_csrs
from gnnpipe.reporting.collapse import COLLAPSE_SHARE, collapse, collapse_warning
from gnnpipe.reporting.eval_inputs import collapse_causes
from gnnpipe.reporting.link_evaluate import evaluate_links
from gnnpipe.reporting.metrics import link_metrics
from gnnpipe.runtime.rng import make_rng
from link_oracle import split_links, training_sampler
from gnnpipe.training.link_train import fit_link
from gnnpipe.training.models import build_model
from gnnpipe.training.train import build_inputs

from conftest import as_graph, small_params

pytestmark = pytest.mark.usefixtures("one_torch_thread")
K = 20  # fixed negatives per val / test positive
FIT = TrainParams(model="sage", epochs=4, patience=4, hidden=16)


def test_collapse_figures_of_constant_working_and_half_tied_scores():
    rng = np.random.default_rng(0)
    constant = collapse(np.full(50, 7.0), np.full((50, 4), 7.0))
    assert constant == {"tied_share": 1.0, "relative_spread": 0.0, "collapsed": True,
                        "pairs": 200}
    working = collapse(rng.normal(2, 1, 50), rng.normal(0, 1, (50, 4)))
    assert working["tied_share"] == 0.0 and not working["collapsed"]
    assert working["relative_spread"] > 0.5
    # two of four negatives per positive equal to it: exactly the threshold
    pos = rng.normal(size=30)
    half = collapse(pos, np.c_[pos, pos * (1 + 1e-7), pos + 5, pos - 5])
    assert half["tied_share"] == COLLAPSE_SHARE and half["collapsed"]
    # the spread keeps significant digits, not 6 decimals
    tiny = collapse(np.full(10, 1e3) + np.arange(10) * 1e-4, np.full((10, 2), 1e3))
    assert 0 < tiny["relative_spread"] < 1e-6
    with pytest.raises(ValueError, match=r"negatives must be \(P, K\) with P=3"):
        collapse(np.ones(3), np.ones((2, 2)))
    assert collapse_warning({"val": working, "test": working}, "x") is None
    line = collapse_warning({"val": working, "test": constant}, "the SAGE encoder")
    assert line.startswith("the SAGE encoder's link scores collapsed: 100.0% of the (test ")
    assert "\n" not in line


class _OneWay(nn.Module):
    """An encoder whose embeddings all point one way: a large constant plus 1e-6 of what the
    inner encoder learns (as an unscaled input column can dominate every embedding). Pair
    scores are then equal up to float32 rounding, and the learned part moves them only by
    rounding noise."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x, edge_index=None):
        return 3.0 + 1e-6 * self.inner(x, edge_index)


@pytest.fixture(scope="module")
def collapsed_run():
    """A sage encoder wrapped by ``_OneWay`` and a working MLP, trained on the same split of a
    small homophilous synthetic graph."""
    from graph_oracle import prepare

    params = small_params(num_nodes=600)
    graph = prepare(params.dataset, params.seed)[0].target_view()
    link = split_links(as_graph(graph), LinkSplitParams(num_val_negatives=K, num_test_negatives=K),
                       make_rng(0, "split"))
    visible = torch.cat([link.edges["message"], link.edges["train_supervision"]], 1).numpy()
    sampler = training_sampler(visible[0], visible[1], graph.num_nodes)
    width = graph.x.shape[1]
    gnn = fit_link(lambda: _OneWay(build_model("sage", width, FIT.hidden, FIT)),
                   build_inputs(graph.x, message_graphs=phase_csrs(link.message_graphs)),
                   link.edges, link.negatives, sampler, FIT, 0)
    mlp_cfg = dataclasses.replace(FIT, model="mlp", epochs=30, patience=30)
    mlp = fit_link(lambda: build_model("mlp", width, FIT.hidden, mlp_cfg), build_inputs(graph.x),
                   link.edges, link.negatives, sampler, mlp_cfg, 0)
    return gnn, mlp, link, (graph, sampler)


def test_train_records_the_collapse_per_epoch_and_in_the_summary(collapsed_run):
    gnn, mlp, *_ = collapsed_run
    assert all(row["val_tied_share"] > 0.99 for row in gnn.history)
    assert gnn.summary["collapse"]["test"]["collapsed"]
    assert gnn.summary["collapse"]["test"]["tied_share"] > 0.99
    assert gnn.summary["collapse"]["test"]["relative_spread"] < 1e-5
    assert not mlp.summary["collapse"]["test"]["collapsed"]  # a working encoder is not flagged
    assert all(row["val_tied_share"] < 0.05 for row in mlp.history[-3:])


def test_train_warns_in_one_line(collapsed_run, capsys):
    *_, link, (graph, sampler) = collapsed_run
    capsys.readouterr()
    fit_link(lambda: _OneWay(build_model("sage", graph.x.shape[1], FIT.hidden, FIT)),
             build_inputs(graph.x, message_graphs=phase_csrs(link.message_graphs)),
             link.edges, link.negatives, sampler, dataclasses.replace(FIT, epochs=1), 0)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gnnpipe: warning: the _OneWay encoder's link "
                                               "scores collapsed: ")


def test_the_metrics_rank_the_collapsed_scores_at_chance(collapsed_run):
    gnn, *_ = collapsed_run
    pos, neg = (t.numpy() for t in gnn.scores["test"])
    got = link_metrics(pos, neg, (10,))
    assert got["roc_auc"] == pytest.approx(0.5, abs=0.01)
    assert got["mrr"] == pytest.approx(1 / (1 + K / 2), abs=0.005)  # every negative tied
    assert got["hits@10"] < 0.02
    # ranked exactly, the rounding noise would have claimed skill (what the issue saw)
    exact = link_metrics(pos, neg, (10,), rtol=0.0)
    assert exact["mrr"] > 0.15 and exact["hits@10"] > 0.15


def test_evaluate_says_the_gnn_collapsed_and_claims_no_gain(collapsed_run):
    gnn, mlp, link, _ = collapsed_run
    predictions = {"random": {"gnn": gnn.scores, "mlp": mlp.scores}}
    cfg = EvaluateParams(bootstrap=200)
    causes = {"gnn": ["train.lr=0.01: a cause"]}
    summary, _ = evaluate_links(predictions, {"random": link.negatives}, cfg, "sage", 0, None,
                                {}, causes=lambda key: causes.get(key, []))
    assert summary["outcome"] == "collapsed" and summary["graph_helps"] is False
    assert summary["collapse"]["gnn"]["collapsed"] and not summary["collapse"]["mlp"]["collapsed"]
    verdict = summary["verdict"]
    assert verdict.startswith("sage collapsed: ")
    assert "Likely causes: train.lr=0.01: a cause" in verdict
    assert "beats" not in verdict and "helps" not in verdict and "test MRR" not in verdict
    # without measured causes the verdict names the usual ones
    plain, _ = evaluate_links(predictions, {"random": link.negatives}, cfg, "sage", 0, None, {})
    assert "features.normalize" in plain["verdict"] and "(train.lr)" in plain["verdict"]
    assert "no gain of sage over the structure-free MLP or the reverse is claimed" in verdict
    # the headline still has every figure summary.py reads
    from gnnpipe.reporting.summary import headline
    assert headline(summary, "link")["verdict"] == "collapsed"


def test_a_collapsed_baseline_is_named_and_no_gain_is_claimed_over_it(collapsed_run):
    gnn, mlp, link, _ = collapsed_run
    predictions = {"random": {"gnn": mlp.scores, "mlp": gnn.scores}}  # roles swapped
    summary, _ = evaluate_links(predictions, {"random": link.negatives},
                                EvaluateParams(bootstrap=200), "sage", 0, None, {})
    assert summary["outcome"] == "collapsed" and not summary["graph_helps"]
    assert summary["verdict"].startswith("the structure-free MLP collapsed: ")
    assert "beats" not in summary["verdict"]


def _typed_csr(src: np.ndarray, dst: np.ndarray, num_dst: int) -> Csr:
    order = np.lexsort((src, dst))
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=num_dst), out=indptr[1:])
    return Csr(torch.from_numpy(indptr), torch.from_numpy(src[order].astype(np.int64)))


def test_the_causes_measured_name_unscaled_degree_features_and_the_learning_rate():
    """Users without feature columns carry the degree default (log1p of the in-degree per
    incoming edge type, in either column order); items carry their own columns."""
    rng = np.random.default_rng(0)
    users, items = 50, 20
    u, i = rng.integers(0, users, 300), rng.integers(0, items, 300)
    rates, rated_by = ("user", "rates", "item"), ("item", "rated_by", "user")
    csr = {rates: _typed_csr(u, i, items), rated_by: _typed_csr(i, u, users)}
    degree = np.log1p(csr[rated_by].degrees().numpy()).astype(np.float32)[:, None]
    graph = Graph(x={"user": torch.from_numpy(degree),
                     "item": torch.from_numpy(rng.integers(0, 2, (items, 6)).astype(np.float32))},
                  csr=csr, target="item", y=torch.zeros(items, dtype=torch.int64), num_classes=1,
                  reverse={rates: rated_by, rated_by: rates}, link_edge_type=rates)
    causes = collapse_causes(graph, "none", {"gnn": 0.05, "mlp": 0.01})
    gnn = causes("gnn")
    assert len(gnn) == 2 and gnn[0].startswith("user has no feature columns and reads unscaled "
                                                "degree features (log1p in-degree up to ")
    assert "features.normalize=standardize" in gnn[0] and "featureless=constant" in gnn[0]
    assert gnn[1].startswith("train.lr=0.05:") and "-S train.lr=0.005" in gnn[1]
    assert causes("mlp")[1].startswith("baseline.lr=0.01:")
    # standardized features are scaled: only the learning rate is left
    assert [c.split(":")[0] for c in collapse_causes(graph, "standardize", {"gnn": 0.05})("gnn")] \
        == ["train.lr=0.05"]
    # features of its own (not the degree default): not named
    own = dataclasses.replace(graph, x={**graph.x, "user": graph.x["user"] + 0.5})
    assert len(collapse_causes(own, "none", {"gnn": 0.05})("gnn")) == 1
