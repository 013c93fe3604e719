"""The baseline's one node fit: the MLP's full-batch objective by row blocks equals the in-memory
fit (the oracle: bit for bit on a one-chunk graph, within float rounding beyond); its bits do
not depend on block_rows, on how rows are read or on cluster.engine, and the stage reads no
graph. (block_rows a multiple of 4096: tests/config/test_config.py RULE_CASES.)"""

from __future__ import annotations

import contextlib
import json
import os
import warnings

import numpy as np
import pytest
import torch
import yaml

from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.config import FitParams, load_params
from gnnpipe.data.features import ModelFeatures
from gnnpipe.data.features import fit as fit_transform
from gnnpipe.data.graph import ROLE_CODES, ROLES
from gnnpipe.io.rows import FeatureSource, open_node_source
from gnnpipe.splitting.inputs import read_model_typed
from gnnpipe.training.baseline_fit import baseline_seed
from gnnpipe.training.block_fit import fit_blocks
from gnnpipe.training.models import build_model
from gnnpipe.training.train import build_inputs, fit, objective_for

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROLES = np.arange(len(ROLES), dtype=np.int8)  # role codes: train, val, test, unused


def _tabular(n: int, share=(0.5, 0.2, 0.2, 0.1), width: int = 12):
    """``n`` nodes whose 4 classes are two thresholds on two feature columns, seeded roles."""
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((n, width)).astype(np.float32))
    y = (x[:, 0] > 0).long() * 2 + (x[:, 1] > 0.3).long()
    return x, y, rng.choice(ROLES, n, p=list(share))


def _fits(n, dropout, block_rows=(4096,), share=(0.5, 0.2, 0.2, 0.1), features=None):
    x, y, roles = _tabular(n, share)
    cfg = FitParams(hidden=8, epochs=6, patience=6, dropout=dropout)
    build = lambda: build_model("mlp", x.shape[1], 4, cfg)
    memory = fit(build, build_inputs(x), y, roles, cfg, seed=3)
    blocks = [fit_blocks(build, x if features is None else features(x), y, roles, cfg, seed=3,
                         block_rows=rows) for rows in block_rows]
    return memory, blocks


def _same(a, b) -> bool:
    return (torch.equal(a.node_id, b.node_id) and torch.equal(a.logits, b.logits)
            and a.history == b.history and a.summary == b.summary
            and all(torch.equal(a.state_dict[k], b.state_dict[k]) for k in a.state_dict))


def test_one_chunk_graph_is_bit_identical_to_the_in_memory_fit():
    """At most 4096 nodes: one chunk, the same matrices and dropout draws as the full batch."""
    memory, (blocks,) = _fits(3000, dropout=0.5)
    assert _same(memory, blocks)
    assert blocks.perf["block_rows"] == 4096


def test_many_chunks_equal_the_in_memory_fit_within_rounding():
    """Dropout included: torch's CPU dropout draws its mask element by element from the
    generator, so masks drawn chunk after chunk are the full batch's mask."""
    memory, (blocks,) = _fits(20_000, dropout=0.5)
    assert torch.equal(memory.node_id, blocks.node_id)
    assert torch.allclose(memory.logits, blocks.logits, atol=1e-5, rtol=0)
    assert memory.summary == blocks.summary
    for a, b in zip(memory.history, blocks.history):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=2e-6)
        assert a["val_acc"] == pytest.approx(b["val_acc"], abs=1e-3)


def test_block_rows_do_not_change_the_bits():
    _, (first, *others) = _fits(20_000, dropout=0.5, block_rows=(4096, 8192, 12_288, 65_536))
    assert all(_same(first, other) for other in others)


class _Reads:
    """A tensor's rows as a ModelFeatures gives them, counting range and row reads."""

    def __init__(self, x):
        self.x, self.shape, self.ranges, self.gathers = x, x.shape, 0, 0

    def __getitem__(self, index):
        if isinstance(index, slice):
            self.ranges += 1
        else:
            self.gathers += 1
        return self.x[index]


def test_sparse_blocks_read_their_rows_alone_with_the_same_result():
    """3% of the nodes in the split: each block reads its needed rows, not its range."""
    reads = []
    share = (0.01, 0.01, 0.01, 0.97)
    _, (dense,) = _fits(20_000, dropout=0.5, share=share)
    _, (sparse,) = _fits(20_000, dropout=0.5, share=share,
                         features=lambda x: reads.append(_Reads(x)) or reads[-1])
    assert reads[0].gathers > 0 and reads[0].ranges == 0
    assert _same(dense, sparse)


def test_rows_read_from_the_file_and_normalized_per_block_give_the_same_bits(tmp_path):
    """ModelFeatures over the file (range reads, then per-row reads of a sparse split) with a
    standardize transform: the bits of the same fit on the normalized matrix in memory."""
    x, y, roles = _tabular(9000, share=(0.03, 0.03, 0.03, 0.91))
    roles[:4096][roles[:4096] == ROLE_CODES["unused"]] = ROLE_CODES["train"]  # a dense block
    np.save(tmp_path / "x.npy", x.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        mapped = torch.from_numpy(np.load(tmp_path / "x.npy", mmap_mode="r"))
    transform = fit_transform("standardize", x, np.flatnonzero(roles == ROLE_CODES["train"]))
    features = ModelFeatures(FeatureSource(mapped, mapped=True, direct_bytes=0), transform)
    cfg = FitParams(hidden=8, epochs=4, patience=4)
    build = lambda: build_model("mlp", x.shape[1], 4, cfg)
    from_file = fit_blocks(build, features, y, roles, cfg, seed=1, block_rows=4096)
    in_memory = fit_blocks(build, transform.apply(x), y, roles, cfg, seed=1, block_rows=4096)
    assert _same(from_file, in_memory)


def test_block_rows_must_be_whole_chunks():
    x, y, roles = _tabular(100)
    cfg = FitParams(hidden=4, epochs=1, patience=1)
    with pytest.raises(ValueError, match="baseline.block_rows=5000 must be a multiple of 4096"):
        fit_blocks(lambda: build_model("mlp", 12, 4, cfg), x, y, roles, cfg, 0, block_rows=5000)
    with pytest.raises(ValueError, match="the mlp baseline needs train nodes"):
        fit_blocks(lambda: build_model("mlp", 12, 4, cfg), x, y,
                   np.full(100, ROLE_CODES["val"], np.int8), cfg, 0, block_rows=4096)


def test_a_slice_of_the_file_is_one_read_of_the_same_rows(tmp_path, monkeypatch):
    x = torch.arange(5000 * 6, dtype=torch.float32).reshape(5000, 6)
    np.save(tmp_path / "x.npy", x.numpy())
    with warnings.catch_warnings():  # a read-only map, as prepare's features_node.npy
        warnings.simplefilter("ignore", UserWarning)
        mapped = torch.from_numpy(np.load(tmp_path / "x.npy", mmap_mode="r"))
    source = FeatureSource(mapped, mapped=True, direct_bytes=0)
    calls = []
    preadv = os.preadv
    monkeypatch.setattr(os, "preadv", lambda *a: calls.append(a[2]) or preadv(*a))
    assert torch.equal(source.rows(slice(17, 4321)), x[17:4321]) and len(calls) == 1
    assert torch.equal(source.rows(slice(4990, 6000)), x[4990:])
    assert source.rows(slice(30, 30)).shape == (0, 6)
    assert torch.equal(source.rows(slice(0, 100, 7)), x[0:100:7])  # a stride: a read per row
    assert len(calls) == 2 + 15


# ------------------------------------------------------------------------------ the stage
TINY = {"dataset": {"synthetic": {"num_nodes": 9000, "num_features": 8, "num_classes": 3,
                                  "avg_degree": 4.0, "label_rate": 0.8}},
        "baseline": {"epochs": 5, "patience": 5, "hidden": 8, "models": ["mlp"]}}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    folder = tmp_path_factory.mktemp("blocks")
    (folder / "params.yaml").write_text(yaml.safe_dump(TINY))
    with contextlib.chdir(folder):
        for stage in ("prepare", "split"):
            assert main([stage]) == 0, stage
    return folder


def _baseline(folder, name: str, engine: str = "local", **keys) -> dict[str, bytes]:
    """The stage's written files, name -> bytes (perf apart: wall clock)."""
    params = folder / f"{name}.yaml"
    params.write_text(yaml.safe_dump({**TINY, "baseline": {**TINY["baseline"], **keys},
                                      "cluster": {"engine": engine}}))
    out = folder / name
    with contextlib.chdir(folder):
        assert main(["baseline", "--params", str(params), "--out", str(out / "model"),
                     *[arg for option in ("metrics", "perf", "history")
                       for arg in (f"--{option}", str(out / f"{option}.out"))]]) == 0
    files = {p.name: p.read_bytes() for p in sorted((out / "model").iterdir())}
    return {**files, **{k: (out / f"{k}.out").read_bytes() for k in ("metrics", "history")}}


def _never(*args, **kwargs):
    raise AssertionError("the baseline read the whole graph")


def test_the_stage_writes_the_same_bytes_for_any_block_size_and_engine(prepared, monkeypatch):
    """The mlp (gbdt has no reduction order of ours), unlabelled nodes included (read with -1
    labels, never fitted): 3 blocks on local and 1 on dask write the same files, byte for byte,
    and never read the graph (CSR, message graphs, the whole matrix)."""
    assert (open_node_source(prepared / "data" / "prepared")[1] == -1).any()
    with monkeypatch.context() as patch:
        patch.setattr("gnnpipe.io.read_graph", _never)
        patch.setattr(ModelFeatures, "materialize", _never)
        local = _baseline(prepared, "local", block_rows=4096)
        dask = _baseline(prepared, "dask", engine="dask", block_rows=65_536)
    assert local.keys() == dask.keys() and "predictions.pt" in local
    assert all(local[name] == dask[name] for name in local)
    assert json.loads(local["metrics"])["model"] == "mlp"


def test_the_stage_fits_the_in_memory_oracle_within_rounding(prepared):
    """The mlp the stage writes (features from the file, normalized per block) against
    ``train.fit`` on the whole normalized matrix: 3 chunks, so within float rounding."""
    written = _baseline(prepared, "oracle")
    with contextlib.chdir(prepared):
        params = load_params(prepared / "oracle.yaml")
        graph = read_model_typed(_Args(prepared)).graph
    roles = io.read_typed_role_codes(prepared / "data" / "split", graph)
    cfg = params.baseline
    memory = fit(lambda: build_model("mlp", graph.x[graph.target].shape[1], graph.num_classes,
                                     cfg), build_inputs(graph.x[graph.target]), graph.y, roles,
                 cfg, baseline_seed(params),
                 objective=objective_for(params, graph.y, roles, graph.num_classes))
    node_id, logits = io.read_predictions(prepared / "oracle" / "model")
    assert torch.equal(node_id, memory.node_id)
    assert torch.allclose(logits, memory.logits, atol=1e-5, rtol=0)
    assert json.loads(written["metrics"])["best_epoch"] == memory.summary["best_epoch"]


class _Args:
    def __init__(self, folder):
        self.prepared, self.split = folder / "data" / "prepared", folder / "data" / "split"
        self.features = folder / "data" / "features"
