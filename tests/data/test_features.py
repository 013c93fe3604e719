"""features.normalize: row as PyG's NormalizeFeatures, standardize fitted on the train nodes only,
the data/features artifact, and every model input (GNN, MLP baseline, samplers, SIGN hops, typed
graphs) reading the same normalized features through splitting.inputs.model_features."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch_geometric.data import Data
from torch_geometric.transforms import NormalizeFeatures

from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.data.graph import ROLE_CODES, Graph
from gnnpipe.data.features import (FeatureTransform, fit, fit_rows, fit_split, read_transform,
                                   write_transforms)

SMALL = {"dataset": {"synthetic": {"num_nodes": 600, "num_features": 12, "num_classes": 3}},
         "train": {"epochs": 3, "patience": 3, "hidden": 8},
         "baseline": {"epochs": 3, "patience": 3, "hidden": 8}}


def _features(seed=0, n=300, f=9) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, f, generator=g) * 3 - 1  # negative entries: PyG's min shift matters
    x[::7] = 0.0  # all-zero rows
    x[1::11] = x[1::11] * 1e-3  # rows summing to less than 1 (PyG's clamp leaves them unscaled)
    return x


def _pyg_row(x: torch.Tensor) -> torch.Tensor:
    return NormalizeFeatures()(Data(x=x.clone())).x


@pytest.mark.parametrize("shift", [0.0, 1.0])  # shift 1: all >= 0 with exact zeros
def test_row_equals_pyg_normalize_features(shift):
    x = _features() + shift
    x[::7] = 0.0
    expected = _pyg_row(x)
    got = fit("row", x, None, block_rows=17).apply(x)  # the minimum gathered over row blocks
    assert torch.equal(got, expected)
    assert got.dtype == torch.float32 and not torch.equal(got, x)


def test_row_all_zero_rows_stay_zero_and_nonnegative_rows_sum_to_one():
    x = torch.rand(50, 6)
    x[3] = 0.0
    out = fit("row", x, None).apply(x)
    assert torch.equal(out[3], torch.zeros(6))
    big = x.sum(1) >= 1
    torch.testing.assert_close(out[big].sum(1), torch.ones(int(big.sum())))


def test_row_applies_the_global_minimum_to_any_subset_of_rows():
    x = _features()
    transform = fit("row", x, None)
    whole = transform.apply(x)
    rows = torch.tensor([5, 40, 41, 299])
    assert torch.equal(transform.apply(x[rows]), whole[rows])
    assert float(transform.stats["min"]) == float(x.min())  # one statistic: all nodes, as PyG


def test_standardize_uses_train_rows_only():
    x = _features(1).double().float()
    roles = np.array(["train", "val", "test", "unused"] * 75)
    train = np.flatnonzero(roles == "train")
    t = fit("standardize", x, train, block_rows=16)
    ref = x[torch.from_numpy(train)].double()
    torch.testing.assert_close(t.stats["mean"], ref.mean(0).float())
    torch.testing.assert_close(t.stats["std"], ref.std(0, correction=0).float())
    assert t.fitted_on == "train" and t.nodes == train.size
    changed = x.clone()
    changed[torch.from_numpy(np.flatnonzero(roles != "train"))] += 100.0  # val/test/unused rows
    again = fit("standardize", changed, train, block_rows=16)
    assert torch.equal(again.stats["mean"], t.stats["mean"])
    assert torch.equal(again.stats["std"], t.stats["std"])
    changed = x.clone()
    changed[train[3]] += 5.0  # one train row
    moved = fit("standardize", changed, train, block_rows=16)
    assert not torch.equal(moved.stats["mean"], t.stats["mean"])
    assert not torch.equal(moved.stats["std"], t.stats["std"])


def test_standardize_constant_column_gets_std_one_and_train_columns_are_standard():
    x = torch.randn(200, 4) * 5 + 3
    x[:, 2] = 7.0
    train = np.arange(0, 200, 2)
    t = fit("standardize", x, train)
    assert float(t.stats["std"][2]) == 1.0
    out = t.apply(x)
    assert torch.equal(out[:, 2], torch.zeros(200))
    fitted = out[torch.from_numpy(train)].double()
    torch.testing.assert_close(fitted.mean(0), torch.zeros(4, dtype=torch.float64), atol=1e-5,
                               rtol=0)
    torch.testing.assert_close(fitted.std(0, correction=0)[[0, 1, 3]],
                               torch.ones(3, dtype=torch.float64), atol=1e-5, rtol=0)


def test_none_returns_x_itself():
    x = torch.rand(10, 3)
    assert fit("none", x, None).apply(x) is x


@pytest.mark.parametrize("kind", ["none", "row", "standardize"])
def test_artifact_round_trips(tmp_path, kind):
    x = _features()
    fitted = {"": fit(kind, x, np.arange(0, 300, 3))}
    write_transforms(tmp_path, kind, fitted)
    back = read_transform(tmp_path, None, num_features=9)
    assert back.kind == kind and back.num_features == 9
    assert back.fitted_on == fitted[""].fitted_on and back.nodes == fitted[""].nodes
    assert set(back.stats) == set(fitted[""].stats)
    assert torch.equal(back.apply(x), fitted[""].apply(x))
    torch.load(tmp_path / "transform.pt", weights_only=True)  # plain tensors and containers


def _artifact(tmp_path, mutate):
    write_transforms(tmp_path, "standardize", {"": fit("standardize", _features(), None)})
    payload = torch.load(tmp_path / "transform.pt", weights_only=True)
    mutate(payload)
    torch.save(payload, tmp_path / "transform.pt")


BAD = {
    "schema": (lambda p: p.update(schema="gnnpipe.graph/1"), "expected a 'gnnpipe.features/1'"),
    "kind": (lambda p: p["meta"].update(kind="zscore"), "meta.kind must be one of"),
    "width": (lambda p: p["node_types"][""].update(std=torch.ones(10)), "shape (9,)"),
    "dtype": (lambda p: p["node_types"][""].update(mean=torch.zeros(9, dtype=torch.float64)),
              "float32 tensor"),
    "missing": (lambda p: p["node_types"][""].pop("mean"), "'mean' must be a float32"),
    "zero_std": (lambda p: p["node_types"][""].update(std=torch.zeros(9)), "'std' must be > 0"),
    "nan": (lambda p: p["node_types"][""].update(mean=torch.full((9,), float("nan"))),
            "NaN or inf"),
    "extra": (lambda p: p["node_types"][""].update(min=torch.zeros(())), "unexpected keys"),
    "fitted_on": (lambda p: p["node_types"][""].update(fitted_on="test"), "fitted_on must be"),
    "typed": (lambda p: p["meta"].update(typed=1) or p["node_types"].update(
        paper=p["node_types"].pop("")), "fitted on a typed graph"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_artifacts_are_refused_in_one_line(tmp_path, case):
    mutate, message = BAD[case]
    _artifact(tmp_path, mutate)
    with pytest.raises(ValueError) as err:
        read_transform(tmp_path, None, num_features=9)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert "transform.pt" in str(err.value)


def test_wrong_width_missing_and_garbage_artifacts(tmp_path):
    with pytest.raises(ValueError, match="file not found; run the split stage"):
        read_transform(tmp_path)
    write_transforms(tmp_path, "row", {"": fit("row", _features(), None)})
    with pytest.raises(ValueError, match="fitted on 9 features, the graph has 8"):
        read_transform(tmp_path, None, num_features=8)
    with pytest.raises(ValueError, match="fitted on 9 features, the input has 8"):
        read_transform(tmp_path).apply(torch.rand(4, 8))
    (tmp_path / "transform.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="not a readable gnnpipe torch artifact") as err:
        read_transform(tmp_path)
    assert "\n" not in str(err.value)


def test_typed_fit_is_per_type_target_train_others_all(tmp_path):
    x = {"paper": _features(2, 40, 5), "author": _features(3, 30, 3)}
    roles = np.array(["train", "val"] * 20)
    graph = Graph(x=x, csr={}, target="paper", y=torch.zeros(40, dtype=torch.int64),
                  num_classes=2, reverse={}, link_edge_type=("paper", "cites", "paper"))
    fitted = fit_split("standardize", graph, roles)  # typed: the types are not node / to / node
    assert (fitted["paper"].fitted_on, fitted["paper"].nodes) == ("train", 20)
    assert (fitted["author"].fitted_on, fitted["author"].nodes) == ("all", 30)
    torch.testing.assert_close(fitted["author"].stats["mean"], x["author"].mean(0))
    write_transforms(tmp_path, "standardize", fitted)
    assert read_transform(tmp_path, "author", 3).num_features == 3
    with pytest.raises(ValueError, match="no node type 'venue'"):
        read_transform(tmp_path, "venue")
    with pytest.raises(ValueError, match="fitted on a typed graph, read for a homogeneous"):
        read_transform(tmp_path)


def test_fit_rows_reads_int8_role_codes_as_the_role_names():
    """The split stage fits on its int8 role codes (``ROLES`` order): the train rows of the
    names."""
    names = np.array(["train", "val", "test", "unused", "train"])
    codes = np.array([0, 1, 2, 3, 0], dtype=np.int8)
    assert fit_rows(codes).tolist() == fit_rows(names).tolist() == [0, 4]


# --- the stages ----------------------------------------------------------------------------

def _repo(tmp_path, monkeypatch, normalize, extra=None) -> Path:
    monkeypatch.chdir(tmp_path)
    params = {**SMALL, "features": {"normalize": normalize}, **(extra or {})}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert main(["prepare"]) == 0
    assert main(["split"]) == 0
    return tmp_path


def _args(root: Path):
    return argparse.Namespace(prepared=root / "data/prepared", split=root / "data/split",
                              features=root / "data/features")


def _expected_standardized(root: Path) -> torch.Tensor:
    x = io.read_graph(root / "data/prepared").target_view().x.double()
    train = torch.from_numpy(np.flatnonzero(io.read_typed_role_codes(root / "data/split")
                                            == ROLE_CODES["train"]))
    mean, std = x[train].mean(0), x[train].std(0, correction=0)
    return ((x - mean.float().double()) / std.float().double()).float()


def test_split_writes_the_artifact_and_audit_and_split_is_unchanged(tmp_path, monkeypatch):
    root = _repo(tmp_path, monkeypatch, "none")
    split_bytes = {p.name: p.read_bytes() for p in (root / "data/split").iterdir()}
    assert read_transform(root / "data/features").kind == "none"
    assert json.loads((root / "metrics/split_audit.json").read_text())["features"] == {
        "normalize": "none", "fitted_on": "none", "nodes": 0}
    (root / "params.yaml").write_text(yaml.safe_dump({**SMALL,
                                                      "features": {"normalize": "standardize"}}))
    assert main(["split"]) == 0
    assert {p.name: p.read_bytes() for p in (root / "data/split").iterdir()} == split_bytes
    train = int((io.read_typed_role_codes(root / "data/split") == ROLE_CODES["train"]).sum())
    assert json.loads((root / "metrics/split_audit.json").read_text())["features"] == {
        "normalize": "standardize", "fitted_on": "train", "nodes": train}


def _record(monkeypatch, module, name, seen: list, stop=False):
    real = getattr(module, name)

    def spy(x, *args, **kwargs):
        seen.append(x)
        if stop:
            raise ValueError("recorded")
        return real(x, *args, **kwargs)

    monkeypatch.setattr(module, name, spy)


def _record_baseline(monkeypatch, seen: list, stop=False):
    """The baseline MLP's input rows (a ModelFeatures read by blocks), materialized."""
    from gnnpipe.training import baseline_fit

    real = baseline_fit.FIT_NODES["mlp"]

    def spy(x, *args):
        seen.append(x.materialize())
        if stop:
            raise ValueError("recorded")
        return real(x, *args)

    monkeypatch.setitem(baseline_fit.FIT_NODES, "mlp", spy)


def test_gnn_baseline_and_propagate_read_the_same_normalized_features(tmp_path, monkeypatch):
    import gnnpipe.training.model_inputs

    root = _repo(tmp_path, monkeypatch, "standardize")
    expected = _expected_standardized(root)
    seen: list = []
    _record_baseline(monkeypatch, seen)
    _record(monkeypatch, gnnpipe.training.model_inputs, "build_inputs", seen)  # train's
    assert main(["baseline"]) == 0
    assert main(["train"]) == 0
    assert len(seen) == 2
    for x in seen:  # the MLP baseline's input, then the GNN's
        torch.testing.assert_close(x, expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(seen[0], seen[1])
    assert main(["propagate"]) == 0
    hop0 = io.read_propagated(root / "data/propagate")["train"][0]
    assert torch.equal(hop0, seen[0])  # SIGN's X_0 is the normalized x


@pytest.mark.parametrize("sampler", ["neighbor", "shadow"])
def test_node_samplers_read_normalized_features(tmp_path, monkeypatch, sampler):
    from gnnpipe.sampling import builders

    root = _repo(tmp_path, monkeypatch, "row",
                 {"train": {**SMALL["train"], "sampler": sampler, "num_workers": 0}})
    seen: list = []
    _record(monkeypatch, builders, f"{sampler}_loader", seen, stop=True)
    assert main(["train"]) == 1  # stopped by the spy once it saw the features
    raw = io.read_graph(root / "data/prepared").target_view().x
    x = seen[0]
    if sampler == "neighbor":  # rows read per batch from the mapped file: PyG's values exactly
        from gnnpipe.data.features import ModelFeatures

        assert isinstance(x, ModelFeatures)
        ids = torch.randperm(raw.shape[0], generator=torch.Generator().manual_seed(0))[:97]
        assert torch.equal(x[ids], _pyg_row(raw)[ids])
        x = x.materialize()
    assert torch.equal(x, _pyg_row(raw))


def test_cluster_and_saint_batches_read_normalized_rows(tmp_path, monkeypatch):
    import gnnpipe.training.sharding

    root = _repo(tmp_path, monkeypatch, "row", {"partition": {"num_parts": 4}})
    assert main(["partition"]) == 0
    seen: list = []
    real = gnnpipe.training.sharding.NodeRows.__init__

    def spy(self, x, *args, **kwargs):
        seen.append(x)
        raise ValueError("recorded")

    monkeypatch.setattr(gnnpipe.training.sharding.NodeRows, "__init__", spy)
    raw = io.read_graph(root / "data/prepared").target_view().x
    for sampler in ("cluster", "saint"):
        (root / "params.yaml").write_text(yaml.safe_dump({
            **SMALL, "features": {"normalize": "row"}, "partition": {"num_parts": 4},
            "train": {**SMALL["train"], "sampler": sampler}}))
        seen.clear()
        assert main(["train"]) == 1
        assert len(seen) == 1 and torch.equal(seen[0], _pyg_row(raw)), sampler
    monkeypatch.setattr(gnnpipe.training.sharding.NodeRows, "__init__", real)


def test_shard_rows_are_normalized_rows_of_the_whole(tmp_path, monkeypatch):
    """train.dist.shard: partition reads only some rows; the transform is row-wise, so they are
    the rows of the normalized whole."""
    from gnnpipe.splitting.inputs import model_features
    from gnnpipe.sampling.store import read_node_rows

    root = _repo(tmp_path, monkeypatch, "standardize")
    args = _args(root)
    ids = torch.tensor([0, 3, 17, 599])
    rows = model_features(args, read_node_rows(args.prepared, ids).x)
    whole = model_features(args, io.read_graph(args.prepared).target_view().x)
    assert torch.equal(rows, whole[ids])


def test_none_keeps_the_memory_mapped_x(tmp_path, monkeypatch):
    from gnnpipe.config import TrainParams
    from gnnpipe.training.model_inputs import read_model_inputs

    root = _repo(tmp_path, monkeypatch, "none")
    read, real = [], io.read_graph
    monkeypatch.setattr(io, "read_graph", lambda *a, **k: read.append(real(*a, **k)) or read[-1])
    inputs = read_model_inputs(_args(root), TrainParams(model="mlp"), "node")
    # the very tensor torch.load(mmap=True) gave: no copy
    assert inputs.graph.target_view().x is read[0].target_view().x
    (root / "params.yaml").write_text(yaml.safe_dump({**SMALL, "features": {"normalize": "row"}}))
    assert main(["split"]) == 0
    inputs = read_model_inputs(_args(root), TrainParams(model="mlp"), "node")
    assert inputs.graph.target_view().x is not read[-1].target_view().x


def test_typed_graph_features_are_normalized_per_type(tmp_path, monkeypatch):
    from gnnpipe.splitting.inputs import read_model_typed, read_typed

    root = _repo(tmp_path, monkeypatch, "standardize", {"dataset": {"layout": "typed", "synthetic": {
        "num_nodes": 300, "num_authors": 120, "num_venues": 6,
        "num_features": 8}}})
    audit = json.loads((root / "metrics/split_audit.json").read_text())["features"]
    args = _args(root)
    raw = read_typed(args)
    model = read_model_typed(args)
    target = raw.graph.target

    train = np.flatnonzero(io.read_typed_role_codes(args.split, raw.graph)
                           == ROLE_CODES["train"])
    assert audit["node_types"][target] == {"fitted_on": "train", "nodes": int(train.size)}
    others = [t for t in raw.graph.node_types if t != target]
    assert others
    for t in raw.graph.node_types:
        x = raw.graph.x[t].double()
        rows = torch.from_numpy(train) if t == target else torch.arange(x.shape[0])
        if t != target:
            assert audit["node_types"][t] == {"fitted_on": "all", "nodes": x.shape[0]}
        mean, std = x[rows].mean(0), x[rows].std(0, correction=0)
        std = torch.where(std.float() > 0, std, torch.ones_like(std))
        expected = ((x - mean.float().double()) / std.float().double()).float()
        torch.testing.assert_close(model.graph.x[t], expected, atol=1e-5, rtol=1e-5)
    assert set(audit["node_types"]) == set(raw.graph.node_types)
    import gnnpipe.training.model_inputs

    seen: list = []
    _record_baseline(monkeypatch, seen, stop=True)  # the typed MLP's target rows
    assert main(["baseline"]) == 1
    _record(monkeypatch, gnnpipe.training.model_inputs, "phase_inputs", seen, stop=True)  # typed GNN
    assert main(["train"]) == 1
    assert torch.equal(seen[0], model.graph.x[target])
    assert all(torch.equal(seen[1].x[t], model.graph.x[t]) for t in raw.graph.node_types)


def test_feature_transform_rejects_unknown_kind():
    with pytest.raises(ValueError, match="features.normalize must be one of"):
        fit("zscore", torch.rand(3, 2), None)
    assert FeatureTransform().apply(torch.ones(2, 2)).sum() == 4


def test_link_task_fits_on_every_node_and_trains_on_them(tmp_path, monkeypatch):
    import gnnpipe.training.model_inputs

    root = _repo(tmp_path, monkeypatch, "standardize", {"dataset": {
        **SMALL["dataset"], "task": "link"}})
    audit = json.loads((root / "metrics/split_audit.json").read_text())["features"]
    assert audit == {"normalize": "standardize", "fitted_on": "all", "nodes": 600}
    x = io.read_graph(root / "data/prepared").target_view().x
    seen: list = []
    _record(monkeypatch, gnnpipe.training.model_inputs, "build_inputs", seen, stop=True)
    assert main(["train"]) == 1
    expected = (x - x.double().mean(0).float()) / x.double().std(0, correction=0).float()
    torch.testing.assert_close(seen[0], expected, atol=1e-5, rtol=1e-5)
