"""The whole pipeline on the built-in heterogeneous graph through the CLI, node then link task."""

from __future__ import annotations

import json

import pytest
import yaml

from gnnpipe import io
from gnnpipe.config import ParamsError, params_from_dict
from conftest import run_stages
from gnnpipe.pipeline import STAGES
from test_pipeline import REPO

def _json(repo, name):
    return json.loads((repo / name).read_text())


@pytest.fixture(scope="module")
def hetero_repo(tmp_path_factory):
    """A folder with the shipped params.yaml set to the typed graph and HGT, before any stage
    ran (tests run in file order)."""
    folder = tmp_path_factory.mktemp("hetero")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["dataset"]["synthetic"].update(num_nodes=800, num_features=16, num_classes=3,
                                          num_authors=250, num_venues=6)
    params["dataset"]["layout"] = "typed"
    for section in ("train", "baseline"):
        params[section].update(epochs=40, patience=40, hidden=16)
    params["partition"]["num_parts"] = 4
    params["train"].update(model="hgt", heads=2)
    _write_params(folder, params)
    return folder


def _write_params(folder, params) -> None:
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def _edit(folder, **dotted) -> None:
    """params.yaml with ``section__key=value`` overrides, as ``dvc exp run -S`` sets them."""
    params = yaml.safe_load((folder / "params.yaml").read_text())
    for key, value in dotted.items():
        *path, last = key.split("__")
        node = params
        for part in path:
            node = node[part]
        node[last] = value
    _write_params(folder, params)


def test_hetero_pipeline_runs_every_stage(hetero_repo):
    """Every stage through the CLI, in this process (DVC's caching is the same dvc.yaml for
    every layout: tests/e2e/test_pipeline.py)."""
    run_stages(hetero_repo, STAGES)
    _check_repro(hetero_repo)


def _check_repro(repo):
    assert io.read_description(repo / "data/prepared")["layout"] == "typed"
    assert (repo / "data/prepared/nodes_author.parquet").exists()
    assert (repo / "data/prepared/edges_author__writes__paper.parquet").exists()
    audit = _json(repo, "metrics/split_audit.json")
    assert audit["passed"] and audit["target"] == "paper"
    assert any(c["check"] == "message_train[author__writes__paper]_within_graph"
               for c in audit["checks"])
    assert _json(repo, "data/propagate/meta.json")["applicable"] is False
    assert _json(repo, "data/partition/meta.json")["node_types"][1][:2] == ["author", 800]
    graph = _json(repo, "metrics/graph.json")
    assert graph["analyzed_relation"] == "paper__cites__paper"
    assert set(graph["types"]["node_types"]) == {"paper", "author", "venue"}
    evaluation = _json(repo, "metrics/eval.json")
    assert evaluation["model"] == "hgt" and evaluation["node_type"] == "paper"
    assert evaluation["gnn"]["test"]["accuracy"] > evaluation["mlp"]["test"]["accuracy"] + 0.1
    assert "gnnpipe run: hgt" in (repo / "reports/report.html").read_text()
    predicted = _json(repo, "metrics/predict.json")  # every paper scored, embeddings per type
    assert predicted["rows"] == _json(repo, "metrics/prepare.json")["node_types"]["paper"]
    assert (repo / "data/predict/predictions.parquet").exists()
    assert (repo / "data/predict/embeddings_paper.parquet").exists()


def test_hetero_stages_run_with_neighbor_and_link_neighbor_batches(hetero_repo):
    """After the run above: typed neighbour mini-batches (the stages a train change re-runs),
    then link_neighbor on the link task (split onwards)."""
    repo = hetero_repo
    short = {"train__epochs": 5, "train__patience": 5, "train__batch_size": 128}
    _edit(repo, train__sampler="neighbor", train__neighbor__num_neighbors=[8, 4], **short)
    run_stages(repo, ("train", "predict", "evaluate", "report"))
    train = _json(repo, "metrics/train.json")
    assert train["sampler"] == "neighbor" and train["node_type"] == "paper"
    assert "hetero" not in train and train["batches_per_epoch"] == 4
    evaluation = _json(repo, "metrics/eval.json")
    assert evaluation["gnn"]["test"]["accuracy"] > 0.5  # 3 classes: chance is 1/3
    _edit(repo, dataset__task="link", train__sampler="link_neighbor",
          split__link__num_val_negatives=20, split__link__num_test_negatives=20,
          baseline__epochs=5, baseline__patience=5, **short)
    run_stages(repo, ("prepare", "split", "analyze", "partition", "propagate", "baseline",
                      "train", "evaluate"))
    train = _json(repo, "metrics/train.json")
    assert train["sampler"] == "link_neighbor" and train["edge_type"] == "author__writes__paper"
    evaluation = _json(repo, "metrics/eval.json")
    assert evaluation["task"] == "link" and evaluation["gnn"]["test"]["mrr"] > 0


def test_link_task_runs_every_stage_through_the_cli(tmp_path, monkeypatch):
    """The same stages for dataset.task link, in this process (the dvc run above covers DVC)."""
    from gnnpipe.cli import main

    params = {"dataset": {"task": "link", "layout": "typed", "synthetic": {
        "num_nodes": 600, "num_features": 16, "num_classes": 3,
        "num_authors": 200, "num_venues": 6}},
        "split": {"link": {"num_val_negatives": 20, "num_test_negatives": 20}},
        "partition": {"num_parts": 2},
        # lr 0.005: at 0.02 the encoder learned on some draws of this small graph and not on
        # others (test AUC 0.49-0.69 over seeds 0-2); at 0.005 it learns on each (0.65-0.72)
        "train": {"epochs": 80, "patience": 80, "hidden": 16, "lr": 0.005, "dropout": 0.2},
        "baseline": {"epochs": 40, "patience": 40, "hidden": 16, "lr": 0.02, "dropout": 0.2}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    from gnnpipe.pipeline import STAGES

    for stage in STAGES:
        assert main([stage]) == 0, stage
    audit = _json(tmp_path, "metrics/split_audit.json")
    assert audit["passed"] and audit["edge_type"] == "author__writes__paper"
    assert audit["reverse_edge_type"] == "paper__rev_writes__author"
    assert any(c["check"] == "message_train_hides_val_test[author__writes__paper+paper__"
                             "rev_writes__author]" and c["passed"] for c in audit["checks"])
    evaluation = _json(tmp_path, "metrics/eval.json")
    assert evaluation["task"] == "link" and evaluation["edge_type"] == "author__writes__paper"
    # evaluate.link.negatives both: the encoder learned (random negatives), and the verdict is
    # on the hard ones (papers 2 hops from the author), against the best baseline on val
    assert evaluation["random_negatives"]["gnn"]["test"]["roc_auc"] > 0.6
    assert evaluation["negatives"] == "hard" and evaluation["baseline_model"] in evaluation[
        "baselines"]
    assert (tmp_path / "reports/report.html").exists()
    for node_type in ("paper", "author"):  # link task: node embeddings of both endpoint types
        assert (tmp_path / f"data/predict/embeddings_{node_type}.parquet").exists()


def test_hetero_only_models_are_refused_on_a_homogeneous_graph():
    with pytest.raises(ParamsError, match="train.model='hgt' needs a heterogeneous graph"):
        params_from_dict({"train": {"model": "hgt"}})
    with pytest.raises(ParamsError, match="train.model='gcn' is not available for heterogeneous"):
        params_from_dict({"dataset": {"layout": "typed"}, "train": {"model": "gcn"}})


def test_unsupported_hetero_combinations_stop_with_one_line(tmp_path, monkeypatch, capsys):
    from gnnpipe.cli import main

    monkeypatch.chdir(tmp_path)
    small = {"num_nodes": 300, "num_features": 8, "num_classes": 3, "num_authors": 50,
             "num_venues": 3}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(
        {"dataset": {"layout": "typed", "synthetic": small}, "train": {"sampler": "cluster", "epochs": 1}}))
    assert main(["prepare"]) == 1  # Params refuse the combination at load time, in any stage
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gnnpipe prepare: error: train.sampler='cluster' is not available for "
                   "heterogeneous graphs with dataset.task=node yet; use one of: full, hgt, "
                   "neighbor"]
    assert not (tmp_path / "data/prepared").exists()
