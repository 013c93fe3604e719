"""The DGL row of bench/train_epoch.py without DGL: the files it hands bench/dgl_epoch.py give
back the same directed edges, features, seeds, probe and weights, and ``dgl_state`` puts PyG's
SAGEConv weights where DGL's SAGEConv('mean') formula uses them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gnnpipe.config import NeighborParams, TrainParams
from gnnpipe.data.graph import Csr
from gnnpipe.training.models import build_model

# bench/ is a folder of the repository, not part of the installed package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.dgl_epoch import dgl_state  # noqa: E402
from bench.train_epoch import write_dgl_inputs  # noqa: E402

CFG = TrainParams(model="sage", sampler="neighbor", hidden=4, num_layers=2,
                  neighbor=NeighborParams((3, 2)))


def _directed() -> Csr:
    """5 nodes, rows = targets, not symmetric: 1->0, 2->0, 3->1, 0->2, 4->2, 2->4."""
    return Csr(torch.tensor([0, 2, 3, 5, 5, 6]), torch.tensor([1, 2, 3, 0, 4, 2]))


def _pyg_state(in_dim: int = 5, classes: int = 3) -> dict[str, np.ndarray]:
    torch.manual_seed(0)
    model = build_model("sage", in_dim, classes, CFG)
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def test_files_round_trip(tmp_path):
    csr = _directed()
    x = torch.arange(10, dtype=torch.float32).reshape(5, 2)  # x[:, 0] / 2 == node id
    y = torch.tensor([0, 1, 2, 0, 1])
    probe = SimpleNamespace(n_id=torch.tensor([2, 0, 4]), edge_index=torch.tensor([[1, 2], [0, 0]]),
                            batch_size=1)
    torch.manual_seed(0)
    states = [build_model("sage", 2, 3, CFG).state_dict() for _ in range(2)]
    write_dgl_inputs(tmp_path, csr, x, y, torch.tensor([4, 1]), probe, states, {"fanout": [3, 2]})

    load = lambda name: np.load(tmp_path / f"{name}.npy", allow_pickle=False)  # noqa: E731
    indptr, indices = load("indptr"), load("indices")
    # dgl_epoch reads them as DGL's CSC: column (target) pointers, source ids
    dst = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    assert {(int(s), int(d)) for s, d in zip(indices, dst)} == {(1, 0), (2, 0), (3, 1), (0, 2),
                                                                (4, 2), (2, 4)}
    assert np.array_equal(np.stack([indices, dst]), csr.edge_index().numpy())
    assert indptr.dtype == indices.dtype == np.int64
    assert np.array_equal(load("x")[:, 0] / 2, np.arange(5)) and load("x").dtype == np.float32
    assert load("y").tolist() == [0, 1, 2, 0, 1] and load("train").tolist() == [4, 1]
    assert load("probe_nid").tolist() == [2, 0, 4]
    assert (load("probe_src").tolist(), load("probe_dst").tolist()) == ([1, 2], [0, 0])
    assert json.loads((tmp_path / "meta.json").read_text()) == {"fanout": [3, 2], "probe_size": 1}
    for r, state in enumerate(states):
        saved = np.load(tmp_path / f"weights_{r}.npz", allow_pickle=False)
        assert set(saved) == set(state)
        assert all(np.array_equal(saved[k], v.numpy()) for k, v in state.items())
    assert not np.array_equal(np.load(tmp_path / "weights_0.npz")["convs.0.lin_l.weight"],
                              np.load(tmp_path / "weights_1.npz")["convs.0.lin_l.weight"])


def test_weight_map_names_and_shapes():
    pyg = _pyg_state()
    dgl = dgl_state(pyg)
    assert {k: v.shape for k, v in dgl.items()} == {
        "layers.0.fc_neigh.weight": (4, 5), "layers.0.fc_self.weight": (4, 5),
        "layers.0.fc_self.bias": (4,),
        "layers.1.fc_neigh.weight": (3, 4), "layers.1.fc_self.weight": (3, 4),
        "layers.1.fc_self.bias": (3,)}
    assert dgl["layers.1.fc_neigh.weight"] is pyg["convs.1.lin_l.weight"]
    assert dgl["layers.1.fc_self.weight"] is pyg["convs.1.lin_r.weight"]


def test_weight_map_gives_dgls_formula_pygs_output():
    """DGL's SAGEConv('mean') computes fc_self(x_i) + fc_neigh(mean_j x_j) (fc_self holds the
    bias): with the mapped weights it equals PyG's SAGEConv on a directed graph."""
    torch.manual_seed(0)
    model = build_model("sage", 5, 3, CFG)
    conv = model.convs[0]
    csr = _directed()
    x = torch.randn(5, 5)
    expected = conv(x, csr.edge_index()).detach().numpy()
    w = dgl_state({k: v.detach().numpy() for k, v in model.state_dict().items()})
    xs, dst = x.numpy(), csr.targets().numpy()
    mean = np.zeros_like(xs)
    np.add.at(mean, dst, xs[csr.indices.numpy()])
    mean /= np.maximum(np.bincount(dst, minlength=5), 1)[:, None]  # no in-edges: mean 0
    got = (xs @ w["layers.0.fc_self.weight"].T + w["layers.0.fc_self.bias"]
           + mean @ w["layers.0.fc_neigh.weight"].T)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_weight_map_refuses_what_dgl_has_not():
    with pytest.raises(ValueError, match="'lin.weight' is not a PyG SAGEConv weight"):
        dgl_state({**_pyg_state(), "lin.weight": np.zeros((3, 4))})
