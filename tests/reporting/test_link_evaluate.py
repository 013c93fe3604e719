"""The link evaluation with hard negatives: heuristics on the train graph beside the GNN and
the MLP, the verdict against the best of them, and the random-only mode as it always was; the
heuristics defined for the relation (popularity alone across a bipartite user-item relation,
every heuristic on a homogeneous graph or a typed one with 2-hop paths between its ends)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gnnpipe.config import EvaluateParams, LinkSplitParams, TrainParams
from gnnpipe.data.graph import Csr, Graph, phase_csrs
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.graphops.heuristics import train_projection
from gnnpipe.graphops.partition import symmetric_simple
from gnnpipe.reporting.eval_inputs import heuristic_sets
from gnnpipe.reporting.metrics import link_metrics
from gnnpipe.reporting.link_evaluate import (evaluate_links, heuristic_predictions,
                                             reciprocal_ranks, compare_links,
                                             score_link_predictions)
from gnnpipe.reporting.link_heuristics import HEURISTICS, SHARED_NEIGHBOUR
from gnnpipe.reporting.verdict import described, paired_gap
from gnnpipe.runtime.rng import make_rng
from link_oracle import hard_link_negatives, split_links, training_sampler
from gnnpipe.training.link_train import fit_link
from gnnpipe.training.models import build_model
from gnnpipe.training.train import build_inputs

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CFG = EvaluateParams(bootstrap=300)
BAD = TrainParams(epochs=1, patience=1, hidden=8, lr=1e-6)  # one step of almost nothing


def _cliques(cliques: int = 40, size: int = 6, keep: float = 0.8, bridges: int = 80,
             seed: int = 0) -> Graph:
    """Cliques (each edge kept with probability ``keep``) joined by random bridges: a graph
    where shared neighbours predict links; features are noise."""
    rng = np.random.default_rng(seed)
    a, b = np.triu_indices(size, 1)
    block = np.repeat(np.arange(cliques) * size, a.size)
    src, dst = block + np.tile(a, cliques), block + np.tile(b, cliques)
    kept = rng.random(src.size) < keep
    n = cliques * size
    src = np.concatenate([src[kept], rng.integers(0, n, bridges)])
    dst = np.concatenate([dst[kept], rng.integers(0, n, bridges)])
    loop = src == dst
    src, dst = src[~loop], dst[~loop]
    csr = csr_from_edges(np.concatenate([src, dst]), np.concatenate([dst, src]), n)
    x = torch.from_numpy(rng.normal(size=(n, 8))).float()
    return Graph.homogeneous(csr, x, torch.zeros(n, dtype=torch.int64), num_classes=1)


@pytest.fixture(scope="module")
def evaluated():
    """A badly trained sage and MLP, both scored on random and hard negatives, and the
    heuristics on the train graph: predictions and negatives per set."""
    typed = _cliques()
    graph = typed.target_view()
    link = split_links(typed, LinkSplitParams(val=0.15, test=0.15, num_val_negatives=20,
                                              num_test_negatives=20), make_rng(0, "split"))
    hard = hard_link_negatives(typed, link, 20, make_rng(0, "split.hard"))[0]
    visible = torch.cat([link.edges["message"], link.edges["train_supervision"]], 1).numpy()
    sampler = training_sampler(visible[0], visible[1], graph.num_nodes)
    predictions = {"random": {}, "hard": {}}
    for name, model in (("gnn", "sage"), ("mlp", "mlp")):
        cfg = dataclasses.replace(BAD, model=model)
        inputs = (build_inputs(graph.x) if model == "mlp"
                  else build_inputs(graph.x, message_graphs=phase_csrs(link.message_graphs)))
        result = fit_link(lambda: build_model(model, 8, cfg.hidden, cfg), inputs, link.edges,
                          link.negatives, sampler, cfg, 0, hard_negatives=hard)
        predictions["random"][name] = result.scores
        predictions["hard"][name] = {p: (result.scores[p][0], result.hard_scores[p])
                                     for p in ("val", "test")}
    negatives = {"random": link.negatives, "hard": hard}
    view = train_projection(typed.sizes(), link.message_graphs["train"])
    held = {p: link.edges[p] for p in ("val", "test")}
    for name in negatives:
        predictions[name].update(heuristic_predictions(view, held, negatives[name]))
    return predictions, negatives


def test_a_heuristic_beats_a_badly_trained_gnn_and_the_verdict_names_it(evaluated):
    predictions, negatives = evaluated
    summary, details = evaluate_links(predictions, negatives, CFG, "sage", 0, None, {})
    assert summary["negatives"] == "hard" and summary["baseline_model"] in HEURISTICS
    assert summary["outcome"] == "hurts" and not summary["graph_helps"]
    name = described(summary["baseline_model"])
    # "X beats Y by +d", d > 0: the winner leads the sentence and the figures
    assert summary["verdict"].startswith(f"the {name}, the best baseline, beats sage by +")
    assert f"by +{-summary['gap']['gain']:.4f} test MRR" in summary["verdict"]
    # "mlp" holds the chosen baseline's figures (as the node task's gbdt), each model beside
    chosen = summary["baseline_model"]
    assert summary["mlp"] == summary["baselines"][chosen]
    assert set(summary["baselines"]) == {"mlp", *HEURISTICS}
    assert set(summary["random_negatives"]["baselines"]) == {"mlp", *HEURISTICS}
    val_mrr = {m: s["val"]["mrr"] for m, s in summary["baselines"].items()}
    assert val_mrr[chosen] == max(val_mrr.values())  # chosen on val, not on test
    assert details["hard"]["gnn"]["test"]["count"] == negatives["hard"]["test"].shape[0]


def test_hard_negatives_lower_a_heuristics_mrr(evaluated):
    """Random negatives are mostly far from the source: counting shared neighbours ranks the
    positive first against them far more often than against its 2-hop neighbourhood."""
    predictions, negatives = evaluated
    summary, _ = evaluate_links(predictions, negatives, CFG, "sage", 0, None, {})
    for name in SHARED_NEIGHBOUR:  # popularity does not read the 2-hop neighbourhood
        random = summary["random_negatives"]["baselines"][name]["test"]["mrr"]
        hard = summary["baselines"][name]["test"]["mrr"]
        assert hard < random - 0.05, (name, hard, random)


def test_hard_mode_judges_on_the_hard_set_alone(evaluated):
    predictions, negatives = evaluated
    hard_only = {"hard": predictions["hard"]}
    summary, details = evaluate_links(hard_only, negatives, CFG, "sage", 0, None, {})
    both, _ = evaluate_links(predictions, negatives, CFG, "sage", 0, None, {})
    assert "random_negatives" not in summary and set(details) == {"hard"}
    assert {k: v for k, v in both.items() if k != "random_negatives"} == summary


def test_random_mode_gives_the_evaluation_as_it_always_was(evaluated):
    """GNN against the MLP on the random negatives, no heuristic: the same dict as
    compare_links alone (what eval.json held before hard negatives existed)."""
    predictions, negatives = evaluated
    random = {"random": {m: predictions["random"][m] for m in ("gnn", "mlp")}}
    summary, details = evaluate_links(random, negatives, CFG, "sage", 0, None, {})
    gnn, mlp = (score_link_predictions(random["random"][m], negatives["random"], CFG.hits_k, m)
                for m in ("gnn", "mlp"))
    gap = paired_gap(reciprocal_ranks(*random["random"]["gnn"]["test"]),
                     reciprocal_ranks(*random["random"]["mlp"]["test"]), CFG.bootstrap, 0)
    collapsed = {m: summary["collapse"][m] for m in ("gnn", "mlp")}
    assert summary == compare_links(gnn, mlp, "sage", CFG, gap, None, collapsed=collapsed)
    assert set(summary) == {"task", "model", "gnn", "mlp", "gnn_minus_mlp", "gap",
                            "graph_helps", "outcome", "verdict", "collapse"}
    assert set(summary["collapse"]) == {"tolerance", "share_threshold", "gnn", "mlp"}
    assert "structure-free MLP" in summary["verdict"] and details == {"gnn": gnn, "mlp": mlp}


def test_hard_scores_are_the_model_on_the_hard_targets(evaluated):
    """fit_link's hard scores rank the same positives (equal positive scores) against the hard
    targets, and stale hard scores are refused by shape."""
    predictions, negatives = evaluated
    for phase in ("val", "test"):
        pos, _ = predictions["random"]["gnn"][phase]
        assert torch.equal(pos, predictions["hard"]["gnn"][phase][0])
    stale = dict(predictions["hard"]["gnn"])
    stale["test"] = (stale["test"][0], stale["test"][1][:, :5])
    with pytest.raises(ValueError, match=r"data/model: test scores have shape"):
        score_link_predictions(stale, negatives["hard"], (1,), "data/model")


# ------------------------------------------------- heuristics that fit the relation (item 8)
RATES, RATED_BY = ("user", "rates", "item"), ("item", "rated_by", "user")


def _typed_csr(src: np.ndarray, dst: np.ndarray, num_dst: int) -> Csr:
    """Rows = ``dst`` nodes, sources sorted per row (a typed graph's CSR)."""
    order = np.lexsort((src, dst))
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=num_dst), out=indptr[1:])
    return Csr(torch.from_numpy(indptr), torch.from_numpy(src[order].astype(np.int64)))


def _user_item(users: int = 400, items: int = 80, per_user: int = 6, seed: int = 0) -> Graph:
    """Users rate items drawn by a Zipf popularity: what predicts an edge is the item's
    popularity. Users have no feature columns (the degree default); items have 19 binary
    columns of noise."""
    rng = np.random.default_rng(seed)
    weight = 1.0 / np.arange(1, items + 1) ** 1.1
    u = np.repeat(np.arange(users), per_user)
    i = rng.choice(items, size=u.size, p=weight / weight.sum())
    pairs = np.unique(u * items + i)
    u, i = pairs // items, pairs % items
    csr = {RATES: _typed_csr(u, i, items), RATED_BY: _typed_csr(i, u, users)}
    degree = np.log1p(csr[RATED_BY].degrees().numpy()).astype(np.float32)[:, None]
    return Graph(x={"user": torch.from_numpy(degree),
                    "item": torch.from_numpy(rng.integers(0, 2, (items, 19)).astype(np.float32))},
                 csr=csr, target="item", y=torch.zeros(items, dtype=torch.int64), num_classes=1,
                 reverse={RATES: RATED_BY, RATED_BY: RATES}, link_edge_type=RATES)


@pytest.fixture(scope="module")
def user_item():
    """The user-item graph split on ``rates``, its hard negatives, and the heuristics the
    evaluate stage scores on it (the typed path: ids shifted by ``Graph.offsets()``)."""
    graph = _user_item()
    link = split_links(graph, LinkSplitParams(val=0.15, test=0.15, num_val_negatives=20,
                                              num_test_negatives=20), make_rng(0, "split"))
    hard = hard_link_negatives(graph, link, 20, make_rng(0, "split.hard"))[0]
    negatives = {"random": link.negatives, "hard": hard}
    scored = heuristic_sets(graph, link.message_graphs["train"], link.edge_type, link.edges,
                            negatives)
    return graph, link, negatives, scored


def test_a_bipartite_relation_is_scored_by_popularity_alone(user_item):
    graph, link, negatives, scored = user_item
    assert graph.offsets()["item"] > 0  # the typed path: item ids are shifted onto the view
    assert set(scored) == {"random", "hard"}
    assert all(set(models) == {"preferential_attachment"} for models in scored.values())
    # popularity is what predicts the edges here, and the scores are deg(u) x deg(v) on the
    # train graph: each candidate item ranked by its train degree (the source fixed per row)
    pos, neg = scored["random"]["preferential_attachment"]["test"]
    assert link_metrics(pos.numpy(), neg.numpy())["roc_auc"] > 0.75
    view = train_projection(graph.sizes(), link.message_graphs["train"])
    degree = np.diff(symmetric_simple(view).indptr.numpy())
    item = graph.offsets()["item"]
    heads, tails = link.edges["test"].numpy()
    np.testing.assert_array_equal(pos.numpy(), degree[heads] * degree[tails + item])
    np.testing.assert_array_equal(neg.numpy(), degree[heads][:, None]
                                  * degree[negatives["random"]["test"].numpy() + item])


def _synthetic_scores(negatives, model_scores) -> dict:
    """Per-phase (pos, neg) scores of a synthetic model: ``model_scores(phase, P, K)``."""
    return {p: tuple(torch.from_numpy(a) for a in model_scores(p, *negatives[p].shape))
            for p in ("val", "test")}


def test_the_verdict_names_popularity_when_it_ties_or_beats_the_gnn(user_item):
    """GNN scores = popularity (the PA scores) blurred by noise, MLP scores = noise: the best
    baseline on val is preferential attachment, which the verdict names; CN / AA / RA are
    reported not applicable and never compared with."""
    _, _, negatives, scored = user_item
    rng = np.random.default_rng(0)
    predictions = {}
    for name in ("random", "hard"):
        pa = scored[name]["preferential_attachment"]

        def blurred(phase, p, k, pa=pa):
            pos, neg = (np.log(t.numpy() + 1) for t in pa[phase])
            return (pos + rng.normal(0, 1.0, p), neg + rng.normal(0, 1.0, (p, k)))

        predictions[name] = {"gnn": _synthetic_scores(negatives[name], blurred),
                             "mlp": _synthetic_scores(negatives[name], lambda p_, p, k: (
                                 rng.normal(size=p), rng.normal(size=(p, k)))),
                             **scored[name]}
    summary, _ = evaluate_links(predictions, negatives, CFG, "sage", 0, None, {})
    assert summary["baseline_model"] == "preferential_attachment"
    assert set(summary["baselines"]) == {"mlp", "preferential_attachment"}
    assert summary["not_applicable"]["heuristics"] == list(SHARED_NEIGHBOUR)
    assert "walk of even length" in summary["not_applicable"]["reason"]
    assert summary["outcome"] in ("hurts", "inconclusive") and not summary["graph_helps"]
    name = "preferential-attachment heuristic (endpoint popularity, train graph only)"
    verdict = summary["verdict"]
    assert name in verdict and "endpoint popularity (degree in the train graph)" in verdict
    assert ("beats sage by +" in verdict) or ("ties with sage" in verdict)
    assert "best_heuristic" not in summary  # the chosen baseline already is the heuristic


def test_the_best_heuristic_is_named_beside_a_better_mlp_on_val(user_item):
    """The MLP is best on val (its val scores are perfect), so it is the baseline; the GNN
    beats it on test; popularity beats the GNN on test, and the verdict says so too."""
    _, _, negatives, scored = user_item
    rng = np.random.default_rng(1)

    def mlp(phase, p, k):
        if phase == "val":  # every positive far above its negatives
            return np.full(p, 10.0), rng.normal(size=(p, k))
        return rng.normal(size=p), rng.normal(size=(p, k))

    predictions = {}
    for name in ("random", "hard"):
        pa = scored[name]["preferential_attachment"]

        def weak(phase, p, k, pa=pa):  # popularity blurred far more than it is worth
            pos, neg = (np.log(t.numpy() + 1) for t in pa[phase])
            return (pos + rng.normal(0, 3.0, p), neg + rng.normal(0, 3.0, (p, k)))

        predictions[name] = {"gnn": _synthetic_scores(negatives[name], weak),
                             "mlp": _synthetic_scores(negatives[name], mlp), **scored[name]}
    summary, _ = evaluate_links(predictions, negatives, CFG, "sage", 0, None, {})
    assert summary["baseline_model"] == "mlp"
    best = summary["best_heuristic"]
    assert best["model"] == "preferential_attachment" and best["outcome"] == "hurts"
    assert best["gap"]["gain"] < 0
    assert ("; the preferential-attachment heuristic (endpoint popularity, train graph only), "
            "the best heuristic on val, beats sage by +") in summary["verdict"]


def test_a_homogeneous_graph_keeps_every_heuristic():
    typed = _cliques()
    link = split_links(typed, LinkSplitParams(val=0.15, test=0.15, num_val_negatives=20,
                                              num_test_negatives=20), make_rng(0, "split"))
    scored = heuristic_sets(typed, link.message_graphs["train"], link.edge_type, link.edges,
                            {"random": link.negatives})
    assert set(scored["random"]) == set(HEURISTICS)


def test_a_typed_relation_with_two_hop_paths_keeps_the_shared_neighbour_heuristics():
    """author writes paper, paper cites paper: source and destination types differ, yet an
    author and a paper share a neighbour (a paper the author wrote that cites it)."""
    from gnnpipe.config import params_from_dict
    from graph_oracle import prepare

    graph = prepare(params_from_dict({"dataset": {"layout": "typed", "synthetic": {
        "num_nodes": 300, "num_authors": 80, "num_venues": 5}}}).dataset, 0)[0]
    link = split_links(graph, LinkSplitParams(val=0.15, test=0.15, num_val_negatives=10,
                                              num_test_negatives=10), make_rng(0, "split"))
    assert link.edge_type[0] != link.edge_type[2]
    scored = heuristic_sets(graph, link.message_graphs["train"], link.edge_type, link.edges,
                            {"random": link.negatives})
    assert set(scored["random"]) == set(HEURISTICS)
    pos, neg = scored["random"]["common_neighbours"]["test"]
    assert (pos > 0).any() or (neg > 0).any()
