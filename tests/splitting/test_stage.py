"""The split stage's runs (gnnpipe/splitting/stage.py), without the CLI: each yields the audit
report, the fitted transforms, a writer and the stage's line; the block runs of cluster.engine
dask (block functions in this process) yield the local hash run's report, transforms and line;
a typed graph's line names its types."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from gnnpipe import io
from gnnpipe.config import params_from_dict
from gnnpipe.data.prepare import prepare
from gnnpipe.splitting import dask_split, stage
from gnnpipe.splitting.dask_split import BlockSizes

SPLIT = {"assign": "hash", "node": {"strategy": "stratified", "mode": "inductive"},
         "link": {"num_val_negatives": 5, "num_test_negatives": 5, "num_hard_negatives": 0}}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[str, Path]:
    """A 600-node homogeneous graph and a small typed one, as prepared files."""
    folders = {}
    for layout, synthetic in [("homogeneous", {}), ("typed", {"num_authors": 200})]:
        dataset = params_from_dict({"dataset": {"layout": layout, "synthetic": {
            "num_nodes": 600, "num_features": 4, **synthetic}}}).dataset
        folders[layout] = tmp_path_factory.mktemp(layout) / "prepared"
        io.write_prepared(folders[layout], prepare(dataset, 0)[0])
    return folders


def _params(task: str, engine: str = "local"):
    return params_from_dict({"dataset": {"task": task}, "split": SPLIT,
                             "features": {"normalize": "standardize"},
                             # the block link split draws no hard negatives (a params rule)
                             "evaluate": {"link": {"negatives": "random"}},
                             "cluster": {"engine": engine}})


@contextmanager
def _here(cfg):
    yield None  # the block functions run in this process


def _staged(run, prepared: Path, params, tmp_path: Path):
    with run(prepared, params, tmp_path / "split") as staged:
        staged.write(tmp_path / "written")
        return staged


@pytest.mark.parametrize("task, local, blocks", [("node", stage.local_nodes, stage.dask_nodes),
                                                 ("link", stage.local_links, stage.dask_links)])
def test_the_block_run_stages_what_the_local_hash_run_stages(prepared, tmp_path, monkeypatch,
                                                             task, local, blocks):
    monkeypatch.setattr(stage, "session", _here)
    monkeypatch.setattr(dask_split, "SIZES", BlockSizes(rows=97, edges=20_000))
    graph = prepared["homogeneous"]
    mine = _staged(local, graph, _params(task), tmp_path / "local")
    theirs = _staged(blocks, graph, _params(task, "dask"), tmp_path / "dask")
    assert mine.report["passed"] and theirs.report == mine.report
    assert list(theirs.fitted) == list(mine.fitted) == [""]
    assert all(torch.equal(theirs.fitted[""].stats[k], v)
               for k, v in mine.fitted[""].stats.items())
    assert theirs.line == mine.line
    assert sorted(p.name for p in (tmp_path / "dask/written").iterdir()) == \
        sorted(p.name for p in (tmp_path / "local/written").iterdir())
    assert not list((tmp_path / "dask").glob(".split-blocks*"))  # scratch gone after the block


def test_a_staged_line_names_the_types_and_ends_with_the_folder_and_warnings(prepared, tmp_path):
    node = _staged(stage.local_nodes, prepared["homogeneous"], _params("node"), tmp_path / "n")
    assert node.summary(Path("data/split")) == \
        f"{node.report['sizes']} (inductive), audit passed -> data/split"
    typed = _staged(stage.local_nodes, prepared["typed"], _params("node"), tmp_path / "t")
    assert typed.line == f"paper nodes {typed.report['sizes']} (inductive), audit passed per " \
                         "edge type"
    assert set(typed.fitted) == {"paper", "author", "venue"}
    link = _staged(stage.local_links, prepared["typed"], _params("link"), tmp_path / "l")
    assert link.line.startswith("author__writes__paper (+ reverse paper__rev_writes__author) "
                                "pairs {")
    assert link.report["negative_strategy"] == "uniform" and "undirected" not in link.report
    warned = stage.Staged({**node.report, "warnings": ["a: b"]}, {}, print, "line")
    assert warned.summary(Path("out")) == "line -> out; WARNING: a: b"


@pytest.mark.parametrize("task, run", [("node", stage.dask_nodes), ("link", stage.dask_links)])
def test_a_block_run_refuses_a_typed_graph_before_any_scratch(prepared, tmp_path, task, run):
    with pytest.raises(ValueError, match=r"^the prepared graph's layout=typed is not split on "
                                         r"cluster\.engine: dask"):
        with run(prepared["typed"], _params(task, "dask"), tmp_path / "split"):
            pass
    assert not list(tmp_path.iterdir())
