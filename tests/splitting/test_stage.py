"""The split stage's runs (gnnpipe/splitting/stage.py), without the CLI: each yields the audit
report, the fitted transforms, a writer and the stage's line; a typed graph's line names its
types. (Equal bytes across engines and block sizes: test_node_blocks.py, test_link_blocks.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from gnnpipe import io
from gnnpipe.config import params_from_dict
from graph_oracle import prepare
from gnnpipe.splitting import stage

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


def _staged(run, prepared: Path, params, tmp_path: Path):
    with run(prepared, params, tmp_path / "split") as staged:
        staged.write(tmp_path / "written")
        return staged


def test_a_staged_line_names_the_types_and_ends_with_the_folder_and_warnings(prepared, tmp_path):
    node = _staged(stage.nodes, prepared["homogeneous"], _params("node"), tmp_path / "n")
    assert node.summary(Path("data/split")) == \
        f"{node.report['sizes']} (inductive), audit passed -> data/split"
    typed = _staged(stage.nodes, prepared["typed"], _params("node"), tmp_path / "t")
    assert typed.line == f"paper nodes {typed.report['sizes']} (inductive), audit passed per " \
                         "edge type"
    assert set(typed.fitted) == {"paper", "author", "venue"}
    link = _staged(stage.links, prepared["typed"], _params("link"), tmp_path / "l")
    assert link.line.startswith("author__writes__paper (+ reverse paper__rev_writes__author) "
                                "pairs {")
    assert link.report["negative_strategy"] == "uniform" and "undirected" not in link.report
    warned = stage.Staged({**node.report, "warnings": ["a: b"]}, {}, print, "line")
    assert warned.summary(Path("out")) == "line -> out; WARNING: a: b"


def test_the_cluster_strategy_is_refused_on_dask_before_any_scratch(prepared, tmp_path):
    """METIS / components need the whole relation: one line, no scratch folder, no cluster."""
    params = params_from_dict({"split": {"node": {"strategy": "cluster"}},
                               "cluster": {"engine": "dask"}})
    with pytest.raises(ValueError, match=r"^split\.node\.strategy=cluster is not split on "
                                         r"cluster\.engine: dask \(METIS"):
        with stage.nodes(prepared["typed"], params, tmp_path / "split"):
            pass
    assert not list(tmp_path.iterdir())
