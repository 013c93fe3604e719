"""Link training and evaluation: the GNN beats the MLP, runs repeat exactly, phases see their own
graph, and a ``dataset.task: link`` pipeline runs every stage, also on two DDP ranks."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.config import EvaluateParams, LinkSplitParams, TrainParams
from gnnpipe.reporting.verdict import paired_gap
from gnnpipe.reporting.link_evaluate import (compare_links, reciprocal_ranks,
                                             score_link_predictions)
from link_oracle import split_links, training_sampler
from gnnpipe.training.link_train import fit_link, score_phase
from gnnpipe.reporting.metrics import link_metrics
from gnnpipe.training.models import build_model
from gnnpipe.runtime.rng import make_rng
from gnnpipe.training.train import build_inputs
from gnnpipe.data.graph import phase_csrs
from conftest import as_graph


REPO = Path(__file__).resolve().parents[2]
FAST = TrainParams(epochs=60, patience=60, hidden=32)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def link_data():
    from conftest import small_params
    from graph_oracle import prepare

    params = small_params()
    graph = prepare(params.dataset, params.seed)[0].target_view()
    link = split_links(as_graph(graph), LinkSplitParams(), make_rng(0, "split"))
    visible = torch.cat([link.edges["message"], link.edges["train_supervision"]], 1).numpy()
    return graph, link, training_sampler(visible[0], visible[1], graph.num_nodes)


def _fit(link_data, model="sage", cfg=FAST, seed=0, wrap=None):
    graph, link, sampler = link_data
    cfg = dataclasses.replace(cfg, model=model)
    inputs = (build_inputs(graph.x) if model == "mlp"
              else build_inputs(graph.x, message_graphs=phase_csrs(link.message_graphs)))

    def build():
        encoder = build_model(model, graph.x.shape[1], cfg.hidden, cfg)
        return wrap(encoder) if wrap else encoder

    return fit_link(build, inputs, link.edges, link.negatives, sampler, cfg, seed), inputs


def _test_metrics(result):
    return link_metrics(*(s.numpy() for s in result.scores["test"]), (10, 50))


def test_gnn_beats_the_mlp_on_links_of_a_homophilous_graph(link_data):
    gnn = _test_metrics(_fit(link_data, "sage")[0])
    mlp = _test_metrics(_fit(link_data, "mlp")[0])
    assert gnn["roc_auc"] > mlp["roc_auc"] + 0.08, (gnn, mlp)
    assert gnn["mrr"] > mlp["mrr"] and gnn["hits@10"] > mlp["hits@10"], (gnn, mlp)


def test_same_seed_same_scores_other_seed_other_scores(link_data):
    short = dataclasses.replace(FAST, epochs=5)
    first, _ = _fit(link_data, cfg=short, seed=3)
    again, _ = _fit(link_data, cfg=short, seed=3)
    other, _ = _fit(link_data, cfg=short, seed=4)
    for phase in ("val", "test"):
        assert all(torch.equal(a, b) for a, b in zip(first.scores[phase], again.scores[phase]))
    assert not torch.equal(first.scores["test"][0], other.scores["test"][0])
    assert first.history == again.history and first.summary == again.summary


class _Spy(nn.Module):
    """Wraps an encoder and records which edge set each forward pass got, in which mode."""

    def __init__(self, inner: nn.Module, calls: list):
        super().__init__()
        self.inner, self.calls = inner, calls

    def forward(self, x, edge_index=None):
        self.calls.append((self.training, edge_index.data_ptr()))
        return self.inner(x, edge_index)


def test_training_encodes_only_the_train_graph_and_each_phase_scores_on_its_own(link_data):
    calls: list = []
    short = dataclasses.replace(FAST, epochs=3)
    result, inputs = _fit(link_data, cfg=short, wrap=lambda enc: _Spy(enc, calls))
    pointer = {phase: inputs[phase].edge_index.data_ptr() for phase in ("train", "val", "test")}
    _, link, _ = link_data
    assert link.message_graphs["val"] is link.message_graphs["train"]  # shared: one edge tensor
    assert pointer["test"] != pointer["train"]
    assert {ptr for training, ptr in calls if training} == {pointer["train"]}
    assert calls[-1] == (False, pointer["test"])  # the final test scores: test graph only
    # the stored scores are the best weights on each phase's own graph, and the graph matters
    encoder = _Spy(build_model("sage", inputs["train"].x.shape[1], 32,
                               dataclasses.replace(short, model="sage")), [])
    encoder.load_state_dict(result.state_dict)
    for phase in ("val", "test"):
        pos, neg = score_phase(encoder, inputs[phase], link.edges[phase], link.negatives[phase])
        assert torch.equal(pos, result.scores[phase][0]) and torch.equal(neg, result.scores[phase][1])
    on_test_graph = score_phase(encoder, inputs["test"], link.edges["val"], link.negatives["val"])
    assert not torch.equal(on_test_graph[0], result.scores["val"][0])


def test_compare_links_and_stale_predictions():
    rng = np.random.default_rng(0)
    negatives = {p: torch.zeros(20, 5, dtype=torch.int64) for p in ("val", "test")}
    good = {p: (torch.from_numpy(rng.normal(2, 1, 20)).float(),
                torch.from_numpy(rng.normal(0, 1, (20, 5))).float()) for p in ("val", "test")}
    poor = {p: (torch.from_numpy(rng.normal(0, 1, 20)).float(),
                torch.from_numpy(rng.normal(0, 1, (20, 5))).float()) for p in ("val", "test")}
    gnn = score_link_predictions(good, negatives, (1, 3), "gnn")
    mlp = score_link_predictions(poor, negatives, (1, 3), "mlp")
    assert set(gnn["test"]) == {"roc_auc", "average_precision", "mrr", "hits@1", "hits@3", "count"}
    cfg = EvaluateParams(bootstrap=200)
    rr_good, rr_poor = reciprocal_ranks(*good["test"]), reciprocal_ranks(*poor["test"])
    assert rr_good.mean() == pytest.approx(gnn["test"]["mrr"], abs=1e-6)
    better = paired_gap(rr_good, rr_poor, cfg.bootstrap, 0)
    summary = compare_links(gnn, mlp, "sage", cfg, better, None)
    assert summary["graph_helps"] and summary["verdict"].startswith("sage beats")
    assert summary["outcome"] == "helps" and summary["gap"]["test_items"] == 20
    assert summary["gnn_minus_mlp"]["test_mrr"] == round(gnn["test"]["mrr"] - mlp["test"]["mrr"], 6)
    worse = paired_gap(rr_poor, rr_good, cfg.bootstrap, 0)
    assert "MLP beats sage" in compare_links(mlp, gnn, "sage", cfg, worse, None)["verdict"]
    same = paired_gap(rr_good, rr_good, cfg.bootstrap, 0)
    assert compare_links(gnn, gnn, "sage", cfg, same, None)["outcome"] == "inconclusive"
    stale = dict(good, test=(good["test"][0][:10], good["test"][1][:10]))
    with pytest.raises(ValueError, match=r"data/model: test scores have shape \(10, 5\) but the "
                                         r"split has \(20, 5\)"):
        score_link_predictions(stale, negatives, (1,), "data/model")


def test_link_predictions_round_trip_and_node_reader_refuses_them(tmp_path):
    scores = {p: (torch.randn(4), torch.randn(4, 3)) for p in ("val", "test")}
    io.write_link_predictions(tmp_path, scores)
    back = io.read_link_predictions(tmp_path)
    assert all(torch.equal(back[p][i], scores[p][i]) for p in scores for i in (0, 1))
    with pytest.raises(ValueError, match="expected a 'gnnpipe.predictions/1' artifact, found "
                                         "'gnnpipe.link_predictions/1'"):
        io.read_predictions(tmp_path)


def test_link_stages_run_without_dvc_with_the_sign_encoder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = {"dataset": {"task": "link", "synthetic": {"num_nodes": 500, "num_features": 8}},
              "split": {"link": {"disjoint_train_ratio": 0.3, "negative_strategy": "degree",
                                 "num_val_negatives": 20, "num_test_negatives": 30}},
              "train": {"model": "sign", "sampler": "sign", "epochs": 5, "hidden": 16},
              "baseline": {"epochs": 5, "hidden": 16}, "evaluate": {"hits_k": [1, 5]}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    for stage in ("prepare", "split", "propagate", "partition", "baseline", "train", "evaluate"):
        assert main([stage]) == 0, stage
    meta = json.loads((tmp_path / "data/propagate/meta.json").read_text())
    assert len(set(meta["phase_graph"].values())) == 3  # disjoint supervision: 3 phase graphs
    scores = io.read_link_predictions(tmp_path / "data/model")
    assert scores["test"][1].shape[1] == 30
    summary = json.loads((tmp_path / "metrics/eval.json").read_text())
    assert summary["task"] == "link" and set(summary["gnn"]["test"]) == {
        "roc_auc", "average_precision", "mrr", "hits@1", "hits@5"}
    # evaluate.link.negatives both (the default): judged on the split's hard negatives, which
    # both encoders scored, against the best of the MLP and the heuristics
    assert summary["negatives"] == "hard" and summary["baseline_model"] in summary["baselines"]
    assert set(summary["baselines"]) == set(summary["random_negatives"]["baselines"]) == {
        "mlp", "common_neighbours", "adamic_adar", "resource_allocation",
        "preferential_attachment"}
    assert "not_applicable" not in summary  # a homogeneous graph: every heuristic applies
    # working encoders: few pairs tied, nothing collapsed, in train.json and eval.json alike
    train = json.loads((tmp_path / "metrics/train.json").read_text())
    assert set(train["collapse"]) == {"val", "test"}
    assert not train["collapse"]["test"]["collapsed"]
    assert not summary["collapse"]["gnn"]["collapsed"]
    assert summary["collapse"]["gnn"]["tied_share"] < 0.05 and summary["outcome"] != "collapsed"
    assert "val_tied_share" in (tmp_path / "metrics/train_history.csv").read_text().splitlines()[0]
    for folder in ("data/model", "data/baseline"):
        assert io.read_hard_link_scores(tmp_path / folder)["test"].shape == (
            scores["test"][1].shape[0], 100)
    assert json.loads((tmp_path / "metrics/train.json").read_text())["model"] == "sign"


# ------------------------------------------------------------------------------- DVC pipeline
def test_link_stages_reproduce_every_artifact_for_a_fixed_seed(tmp_path, monkeypatch):
    params = {"dataset": {"task": "link", "synthetic": {"num_nodes": 500, "num_features": 8}},
              "train": {"epochs": 8, "hidden": 16}, "baseline": {"epochs": 8, "hidden": 16}}

    def artifacts(folder: Path) -> dict[str, bytes]:
        folder.mkdir()
        monkeypatch.chdir(folder)
        (folder / "params.yaml").write_text(yaml.safe_dump(params))
        for stage in ("prepare", "split", "propagate", "baseline", "train", "evaluate"):
            assert main([stage]) == 0, stage
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
                if p.is_file() and "perf" not in p.parts}  # perf: wall-clock, differs by design

    first, again = artifacts(tmp_path / "a"), artifacts(tmp_path / "b")
    assert {"data/split/negatives_test.parquet", "data/model/predictions.pt",
            "data/baseline/predictions.pt", "metrics/eval.json"} <= set(first)
    assert first == again


def test_link_pipeline_runs_every_stage_then_trains_on_two_ranks(tmp_path, monkeypatch):
    """Every stage of a dataset.task link pipeline through the CLI (DVC's caching is the same
    dvc.yaml for every task: tests/e2e/test_pipeline.py), then train relaunched under torchrun
    with 2 gloo ranks on link_neighbor batches and evaluate on its scores."""
    from conftest import run_stages
    from gnnpipe.pipeline import STAGES

    params = yaml.safe_load((REPO / "params.yaml").read_text())  # the shipped params
    params["dataset"]["task"] = "link"
    params["dataset"]["synthetic"].update(num_nodes=600, num_features=16, num_classes=3)
    params["partition"]["num_parts"] = 4
    for section in ("train", "baseline"):
        params[section].update(epochs=20, patience=20, hidden=16)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    run_stages(tmp_path, STAGES)
    metrics = json.loads((tmp_path / "metrics/eval.json").read_text())
    assert metrics["task"] == "link"
    for model in ("gnn", "mlp"):
        assert {"roc_auc", "average_precision", "mrr", "hits@10", "hits@50"} == set(
            metrics[model]["test"])
    assert json.loads((tmp_path / "metrics/split_audit.json").read_text())["passed"]
    html = (tmp_path / "reports/report.html").read_text()
    assert "test MRR" in html and "mrr" in html

    params["train"].update(sampler="link_neighbor", dist={"nproc": 2}, batch_size=128, epochs=3,
                           patience=3)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    run_stages(tmp_path, ("train", "evaluate"))
    train = json.loads((tmp_path / "metrics/train.json").read_text())
    assert train["sampler"] == "link_neighbor" and train["epochs_run"] == 3
    assert train["batches_per_epoch"] >= 2  # per rank
    assert json.loads((tmp_path / "metrics/perf/train.json").read_text())["world_size"] == 2
    history = (tmp_path / "metrics/perf/train_history.csv").read_text().splitlines()
    assert len(history) == 4 and history[0].startswith("epoch,")
    evaluated = json.loads((tmp_path / "metrics/eval.json").read_text())
    assert evaluated["task"] == "link" and 0.0 < evaluated["gnn"]["test"]["mrr"] <= 1.0
    assert not (tmp_path / "data/checkpoint/train.pt").exists()
