"""The link task's one baseline fit: the encoder's full-batch objective by row blocks equals
fit_link in memory (the oracle) within float rounding (homogeneous and typed), its bits do not
depend on block_rows, and no request reads more rows than a block; the stage (link, typed node,
typed link) writes the same bytes for any block_rows and cluster.engine without building the
whole matrix."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
import torch
import yaml

from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.config import FitParams
from gnnpipe.data.features import ModelFeatures
from gnnpipe.hetero.models import build_hetero_model
from gnnpipe.training.block_link_fit import fit_link_blocks
from gnnpipe.training.link_train import fit_link
from gnnpipe.training.models import build_model
from gnnpipe.training.train import PhaseInput, build_inputs
from link_oracle import training_sampler

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CFG = FitParams(hidden=8, epochs=5, patience=5, dropout=0.5)


def _link_split(n: int, pairs: int, seed: int = 0):
    """Node ids: ``pairs`` supervision edges (not a multiple of 4096: the last term is short),
    300 val and test pairs with 20 fixed negatives and 3 hard ones each, over ``n`` nodes."""
    rng = np.random.default_rng(seed)
    pick = lambda *shape: torch.from_numpy(rng.integers(0, n, shape))
    edges = {"train_supervision": pick(2, pairs), "val": pick(2, 300), "test": pick(2, 300)}
    negatives = {p: pick(300, 20) for p in ("val", "test")}
    hard = {p: pick(300, 3) for p in ("val", "test")}
    sup = edges["train_supervision"].numpy()
    return edges, negatives, hard, training_sampler(sup[0], sup[1], n)


class _Largest:
    """Rows of a tensor as a ModelFeatures gives them, recording the largest request."""

    def __init__(self, x):
        self.x, self.shape, self.largest = x, x.shape, 0

    def __getitem__(self, index):
        rows = self.x[index]
        self.largest = max(self.largest, rows.shape[0])
        return rows


def _close(memory, blocks) -> None:
    collapse = memory.summary["collapse"]  # figures of scores equal up to summation order
    assert {k: v for k, v in memory.summary.items() if k != "collapse"} == {
        k: v for k, v in blocks.summary.items() if k != "collapse"}
    for phase, stats in blocks.summary["collapse"].items():
        assert stats["collapsed"] == collapse[phase]["collapsed"] is False
        assert stats["tied_share"] == pytest.approx(collapse[phase]["tied_share"], abs=1e-3)
        assert stats["relative_spread"] == pytest.approx(collapse[phase]["relative_spread"],
                                                         rel=1e-3)
    for a, b in zip(memory.history, blocks.history, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-6)
        assert a["val_mrr"] == pytest.approx(b["val_mrr"], abs=1e-6)
        assert a["val_tied_share"] == pytest.approx(b["val_tied_share"], abs=1e-3)
    for phase, (pos, neg) in memory.scores.items():
        assert torch.allclose(pos, blocks.scores[phase][0], atol=1e-5, rtol=0)
        assert torch.allclose(neg, blocks.scores[phase][1], atol=1e-5, rtol=0)
        assert torch.allclose(memory.hard_scores[phase], blocks.hard_scores[phase], atol=1e-5,
                              rtol=0)
    for key, value in memory.state_dict.items():
        assert torch.allclose(value, blocks.state_dict[key], atol=1e-5, rtol=0)


def _same(a, b) -> bool:
    return (a.summary == b.summary and a.history == b.history
            and all(torch.equal(a.scores[p][i], b.scores[p][i]) for p in a.scores for i in (0, 1))
            and all(torch.equal(a.hard_scores[p], b.hard_scores[p]) for p in a.hard_scores)
            and all(torch.equal(a.state_dict[k], b.state_dict[k]) for k in a.state_dict))


def test_blocks_equal_fit_link_in_memory_and_block_rows_do_not_change_the_bits():
    """10,000 nodes (3 chunks, the last short), 9,000 pairs (3 terms, the last short),
    dropout 0.5: the masks drawn chunk after chunk are the full batch's."""
    n = 10_000
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((n, 12)).astype(np.float32))
    edges, negatives, hard, sampler = _link_split(n, 9_000)
    build = lambda: build_model("mlp", 12, CFG.hidden, CFG)
    memory = fit_link(build, build_inputs(x), edges, negatives, sampler, CFG, seed=3,
                      hard_negatives=hard)
    blocks = []
    for rows in (4096, 8192, 12_288):
        features = _Largest(x)
        blocks.append(fit_link_blocks(build, [(None, 0, features)], edges, negatives, sampler,
                                      CFG, seed=3, block_rows=rows, hard_negatives=hard))
        assert features.largest <= min(rows, n) and (rows >= n or features.largest < n)
    _close(memory, blocks[0])
    assert all(_same(blocks[0], other) for other in blocks[1:])
    assert [b.perf["block_rows"] for b in blocks] == [4096, 8192, 12_288]


def test_typed_blocks_equal_the_per_type_encoders_in_memory():
    """Two types of different widths, ids in offsets order; the encoder's forward order is
    the graph's type order (here not the offsets order, as a TypedMLP may have it)."""
    sizes, widths = {"a": 5000, "b": 3000}, {"a": 6, "b": 4}
    rng = np.random.default_rng(2)
    x = {t: torch.from_numpy(rng.standard_normal((sizes[t], widths[t])).astype(np.float32))
         for t in ("b", "a")}  # forward order b, a; ids: a first (offsets order of node_types)
    metadata = (["a", "b"], [("a", "to", "b"), ("b", "rev_to", "a")])
    offsets = {"a": 0, "b": 5000}
    edges, negatives, hard, sampler = _link_split(8000, 5000, seed=4)
    build = lambda: build_hetero_model("mlp", metadata, {t: widths[t] for t in x}, CFG.hidden,
                                       "a", CFG, out="all")
    inputs = {p: PhaseInput(x) for p in ("train", "val", "test")}
    memory = fit_link(build, inputs, edges, negatives, sampler, CFG, seed=5, hard_negatives=hard)
    segments = [(t, offsets[t], x[t]) for t in x]
    blocks = fit_link_blocks(build, segments, edges, negatives, sampler, CFG, seed=5,
                             block_rows=4096, hard_negatives=hard)
    _close(memory, blocks)


def test_block_rows_must_be_whole_chunks():
    x = torch.zeros(10, 3)
    edges, negatives, _, sampler = _link_split(10, 5)
    with pytest.raises(ValueError, match="baseline.block_rows=5000 must be a multiple of 4096"):
        fit_link_blocks(lambda: build_model("mlp", 3, 4, CFG), [(None, 0, x)], edges, negatives,
                        sampler, CFG, 0, block_rows=5000)


# ------------------------------------------------------------------------------ the stage
# 5000 nodes (typed: 5000 papers, 5000 authors): two blocks of 4096 ids; the mlp alone (gbdt's
# bytes: tests/training/test_block_fit.py)
STAGE = {"dataset": {"synthetic": {"num_nodes": 5000, "num_features": 8, "num_classes": 3,
                                   "avg_degree": 4.0}},
         "baseline": {"epochs": 3, "patience": 3, "hidden": 8, "models": ["mlp"]}}
VARIANTS = {"link": {"task": "link"}, "typed": {"layout": "typed"},
            "typed_link": {"task": "link", "layout": "typed"}}


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    params = {**STAGE, "dataset": {**STAGE["dataset"], **VARIANTS[request.param]}}
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    with contextlib.chdir(folder):
        for stage in ("prepare", "split"):
            assert main([stage]) == 0, stage
    return folder, params


# what the params rules let dask run (hard link negatives are refused there)
ON_DASK = {"split": {"link": {"num_hard_negatives": 0}},
           "evaluate": {"link": {"negatives": "random"}}}


def _baseline(folder, params, name: str, engine: str, block_rows: int) -> dict[str, bytes]:
    """The stage's written files, name -> bytes (perf apart: wall clock)."""
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**params, **ON_DASK, "cluster": {"engine": engine},
                                    "baseline": {**params["baseline"],
                                                 "block_rows": block_rows}}))
    out = folder / name
    with contextlib.chdir(folder):
        assert main(["baseline", "--params", str(path), "--out", str(out / "model"),
                     *[arg for option in ("metrics", "perf", "history")
                       for arg in (f"--{option}", str(out / f"{option}.out"))]]) == 0
    files = {p.name: p.read_bytes() for p in sorted((out / "model").iterdir())}
    return {**files, **{k: (out / f"{k}.out").read_bytes() for k in ("metrics", "history")}}


def _never(*args, **kwargs):
    raise AssertionError("the baseline read the whole feature matrix")


def test_the_stage_writes_the_same_bytes_for_any_block_size_and_engine(variant, monkeypatch):
    """Link (either layout): the pairs' scores; typed node task: the target's logits. Two
    blocks of 4096 ids on local, one of 65,536 on dask: the same bytes (4096 ids per chunk
    either way); the whole matrix is never built."""
    folder, params = variant
    with monkeypatch.context() as patch:
        patch.setattr("gnnpipe.splitting.inputs.model_features", _never)
        patch.setattr(ModelFeatures, "materialize", _never)
        local = _baseline(folder, params, "local", "local", 4096)
        dask = _baseline(folder, params, "dask", "dask", 65_536)
    assert local.keys() == dask.keys() and "metrics" in local
    assert all(local[name] == dask[name] for name in local)
    metrics = json.loads(local["metrics"])
    assert "source" not in metrics
    if params["dataset"].get("task") == "link":
        scores = io.read_link_predictions(folder / "local" / "model")
        assert scores.keys() == {"val", "test"}
    else:
        node_id, logits = io.read_predictions(folder / "local" / "model")
        assert node_id.numel() == logits.shape[0] > 0
