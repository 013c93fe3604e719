"""The link evaluation with hard negatives: heuristics on the train graph beside the GNN and
the MLP, the verdict against the best of them, and the random-only mode as it always was."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gnnpipe.config import EvaluateParams, LinkSplitParams, TrainParams
from gnnpipe.data.graph import Graph, phase_csrs
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.graphops.heuristics import train_view
from gnnpipe.reporting.link_evaluate import (evaluate_links, heuristic_predictions,
                                             reciprocal_ranks, compare_links,
                                             score_link_predictions)
from gnnpipe.reporting.link_heuristics import HEURISTICS
from gnnpipe.reporting.verdict import BASELINE_NAMES, paired_gap
from gnnpipe.runtime.rng import make_rng
from gnnpipe.splitting.link_split import hard_link_negatives, split_links
from gnnpipe.splitting.negatives import training_sampler
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
    view = train_view(typed, link.message_graphs["train"])
    held = {p: link.edges[p] for p in ("val", "test")}
    for name in negatives:
        predictions[name].update(heuristic_predictions(view, held, negatives[name]))
    return predictions, negatives


def test_a_heuristic_beats_a_badly_trained_gnn_and_the_verdict_names_it(evaluated):
    predictions, negatives = evaluated
    summary, details = evaluate_links(predictions, negatives, CFG, "sage", 0, None, {})
    assert summary["negatives"] == "hard" and summary["baseline_model"] in HEURISTICS
    assert summary["outcome"] == "hurts" and not summary["graph_helps"]
    name = BASELINE_NAMES[summary["baseline_model"]]
    assert summary["verdict"].startswith(f"the {name} (train graph only) beats sage by -")
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
    for name in HEURISTICS:
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
    assert summary == compare_links(gnn, mlp, "sage", CFG, gap, None)
    assert set(summary) == {"task", "model", "gnn", "mlp", "gnn_minus_mlp", "gap",
                            "graph_helps", "outcome", "verdict"}
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
