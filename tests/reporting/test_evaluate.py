"""Link metrics against scikit-learn and hand-computed ranks; the evaluate stage's logic."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from gnnpipe.config import EvaluateParams
from gnnpipe.io.common import role_codes
from gnnpipe.reporting.evaluate import (compare, confusion_rows, predicted_labels,
                                        correct_on_test, score_predictions, smoothing)
from gnnpipe.reporting.verdict import paired_gap
from gnnpipe.reporting.metrics import (average_precision, hits_at_k, link_metrics, link_ranks, mrr, roc_auc)


# ------------------------------------------------------------------------------ link metrics
def _link_cases():
    rng = np.random.default_rng(7)
    cases = {
        "shared": (rng.normal(1.0, 1.0, 50), rng.normal(0.0, 1.0, 200)),
        "per-positive": (rng.normal(1.0, 1.0, 30), rng.normal(0.0, 1.0, (30, 20))),
        # scores rounded to one decimal: many ties between and within the classes
        "ties": (np.round(rng.normal(0.5, 1.0, 80), 1), np.round(rng.normal(0.0, 1.0, 300), 1)),
        "integer-ties": (rng.integers(0, 4, 40).astype(float), rng.integers(0, 4, (40, 7)).astype(float)),
        "perfect": (np.array([3.0, 4.0, 5.0]), np.array([0.0, 1.0, 2.0])),
        "inverted": (np.array([0.0, 1.0]), np.array([2.0, 3.0, 4.0])),
        "all-equal": (np.zeros(5), np.zeros(9)),
    }
    return [(name, *case) for name, case in cases.items()]


@pytest.mark.parametrize("name, pos, neg", _link_cases(), ids=[c[0] for c in _link_cases()])
def test_roc_auc_and_average_precision_match_sklearn(name, pos, neg):
    flat = neg.reshape(-1)
    labels = np.r_[np.ones(pos.size), np.zeros(flat.size)]
    scores = np.r_[pos, flat]
    assert roc_auc(pos, neg) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert average_precision(pos, neg) == pytest.approx(average_precision_score(labels, scores),
                                                        abs=1e-12)


def test_ranks_hits_and_mrr_hand_computed_per_positive():
    pos = np.array([0.9, 0.5, 0.1])
    neg = np.array([[0.1, 0.2, 0.3],    # pos 0 above all: rank 1
                    [0.6, 0.5, 0.4],    # one above, one tie: rank 1 + 1 + 0.5 = 2.5
                    [0.7, 0.8, 0.9]])   # all above: rank 4
    assert link_ranks(pos, neg).tolist() == [1.0, 2.5, 4.0]
    assert hits_at_k(pos, neg, 1) == pytest.approx(1 / 3)
    assert hits_at_k(pos, neg, 3) == pytest.approx(2 / 3)  # rank 2.5 <= 3
    assert hits_at_k(pos, neg, 4) == 1.0
    assert mrr(pos, neg) == pytest.approx((1 + 1 / 2.5 + 1 / 4) / 3)


def test_ranks_hits_and_mrr_hand_computed_shared_negatives():
    pos = np.array([5.0, 2.0, 0.0])
    neg = np.array([4.0, 3.0, 2.0, 1.0])  # shared by every positive
    # 5.0: none above -> 1; 2.0: 4, 3 above, one tie -> 3.5; 0.0: all four above -> 5
    assert link_ranks(pos, neg).tolist() == [1.0, 3.5, 5.0]
    assert hits_at_k(pos, neg, 3) == pytest.approx(1 / 3)
    assert hits_at_k(pos, neg, 4) == pytest.approx(2 / 3)
    assert mrr(pos, neg) == pytest.approx((1 + 1 / 3.5 + 1 / 5) / 3)


def test_shared_negatives_equal_the_same_pool_repeated_per_positive():
    rng = np.random.default_rng(3)
    pos = np.round(rng.normal(size=25), 1)
    shared = np.round(rng.normal(size=60), 1)
    tiled = np.tile(shared, (25, 1))
    assert np.array_equal(link_ranks(pos, shared), link_ranks(pos, tiled))
    for k in (1, 10, 50):
        assert hits_at_k(pos, shared, k) == hits_at_k(pos, tiled, k)
    # without ties this is OGB's shared-negative Hits@K: a positive counts if it scores above
    # the K-th best negative
    untied_pos, untied_neg = rng.normal(size=25), rng.normal(size=60)
    kth = np.sort(untied_neg)[-10]
    assert hits_at_k(untied_pos, untied_neg, 10) == pytest.approx(float((untied_pos > kth).mean()))


def test_link_metrics_bundle_is_json_ready():
    pos, neg = np.array([0.9, 0.2]), np.array([[0.1, 0.5], [0.3, 0.4]])
    got = link_metrics(pos, neg, ks=(1, 2))
    assert set(got) == {"roc_auc", "average_precision", "mrr", "count", "hits@1", "hits@2"}
    assert got["count"] == 2 and type(got["count"]) is int
    assert got["hits@1"] == 0.5 and got["hits@2"] == 0.5  # pos 0.2 is ranked 3rd of its row
    assert got["mrr"] == pytest.approx((1 + 1 / 3) / 2, abs=1e-6)


@pytest.mark.parametrize("pos, neg, match", [
    (np.array([]), np.array([1.0]), "positive scores must be a non-empty 1-D"),
    (np.ones((2, 2)), np.array([1.0]), "positive scores must be a non-empty 1-D"),
    (np.ones(3), np.ones((2, 5)), r"\(P, K\) per positive \(P=3\)"),
    (np.ones(3), np.array([]), "non-empty"),
    (np.array([np.nan, 1.0]), np.ones(3), "finite"),
])
def test_bad_link_inputs_raise(pos, neg, match):
    with pytest.raises(ValueError, match=match):
        link_ranks(pos, neg)
    with pytest.raises(ValueError, match=match):
        roc_auc(pos, neg)


def test_hits_at_k_rejects_bad_k():
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        hits_at_k(np.ones(2), np.ones(3), 0)


# ---------------------------------------------------------------------------- node scoring
def _logits_for(labels: list[int], num_classes: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(labels), num_classes).float()


def test_predicted_labels_mark_missing_nodes_and_reject_foreign_ids():
    got = predicted_labels(torch.tensor([3, 0]), _logits_for([2, 1], 3), 5)
    assert got.tolist() == [1, -1, -1, 2, -1]
    with pytest.raises(ValueError, match="outside \\[0, 5\\)"):
        predicted_labels(torch.tensor([5]), _logits_for([0], 3), 5)


def test_score_predictions_scores_only_split_nodes_and_requires_all():
    roles = role_codes(np.array(["train", "val", "test", "unused", "test"]))
    y = np.array([0, 1, 2, 0, 1])
    node_id = torch.tensor([0, 1, 2, 4])
    scores = score_predictions(node_id, _logits_for([0, 1, 2, 0], 3), y, roles, 3)
    assert scores["test"]["count"] == 2 and scores["test"]["accuracy"] == 0.5
    assert scores["train"]["accuracy"] == 1.0
    with pytest.raises(ValueError, match="predictions lack 1 test nodes \\(first: 4\\)"):
        score_predictions(node_id[:3], _logits_for([0, 1, 2], 3), y, roles, 3)


def test_confusion_rows_follow_the_test_nodes():
    roles = role_codes(np.array(["test", "train", "test"]))
    rows = confusion_rows(torch.tensor([0, 1, 2]), _logits_for([1, 0, 2], 3), np.array([0, 0, 2]),
                          roles)
    assert rows == [{"actual": 0, "predicted": 1}, {"actual": 2, "predicted": 2}]


def _scores(test_acc: float) -> dict:
    return {role: {"accuracy": test_acc, "macro_f1": test_acc} for role in ("train", "val", "test")}


def _correct(n: int, right: int) -> np.ndarray:
    return np.r_[np.ones(right), np.zeros(n - right)]


@pytest.mark.parametrize("n, gnn_right, outcome, phrase", [
    (2000, 1800, "helps", "beats the structure-free MLP by +0.2000 test accuracy (95% interval"),
    (2000, 1410, "inconclusive", "|gain| is below evaluate.min_gain=0.01"),
    (2000, 1200, "hurts", "the structure-free MLP beats sage by -0.1000 test accuracy"),
    (40, 36, "helps", "40 test nodes"),
    (10, 8, "inconclusive", "10 test nodes are too few"),
])
def test_verdict_says_plainly_whether_the_graph_helps(n, gnn_right, outcome, phrase):
    """The MLP is right on the first 70% of the test nodes, the GNN on its first ``gnn_right``:
    the same gap is a verdict on many test nodes and inconclusive on a handful."""
    cfg = EvaluateParams(min_gain=0.01, bootstrap=500)
    gnn_c, mlp_c = _correct(n, gnn_right), _correct(n, int(0.7 * n))
    gap = paired_gap(gnn_c, mlp_c, cfg.bootstrap, 0)
    summary = compare(_scores(gnn_c.mean()), _scores(mlp_c.mean()), "sage", cfg, gap, False)
    assert summary["outcome"] == outcome
    assert summary["graph_helps"] is (outcome == "helps")
    assert phrase in summary["verdict"]
    assert summary["gap"]["test_items"] == n and summary["gap"]["level"] == 0.95
    assert summary["gap"]["gain"] == pytest.approx(summary["gnn_minus_mlp"]["test_accuracy"])


def test_correct_on_test_is_one_score_per_test_node_in_id_order():
    roles = role_codes(np.array(["train", "test", "val", "test", "test"]))
    y = np.array([0, 1, 1, 2, 0])
    logits = torch.eye(3)[[0, 1, 0, 2, 1]]
    assert correct_on_test(torch.arange(5), logits, y, roles).tolist() == [1.0, 1.0, 0.0]


def test_smoothing_of_identical_outputs_is_fully_smoothed(tiny_graph):
    n = tiny_graph.num_nodes
    same = smoothing(torch.arange(n), torch.ones(n, 3), tiny_graph.csr)
    assert same["cosine_similarity"] == 1.0 and same["dirichlet_energy"] == 0.0
    # the degree-normalised energy is 0 for h ~ sqrt(d) (GCN's limit), small for constants
    assert 0.0 < same["rayleigh_quotient"] < 0.05
    gcn_limit = tiny_graph.csr.degrees().double().sqrt()[:, None].repeat(1, 3)
    assert smoothing(torch.arange(n), gcn_limit, tiny_graph.csr)["rayleigh_quotient"] == 0.0
    varied = smoothing(torch.arange(n), torch.randn(n, 3, generator=torch.Generator().manual_seed(0)),
                       tiny_graph.csr)
    assert varied["cosine_similarity"] < 0.5 and varied["dirichlet_energy"] > 0.1
