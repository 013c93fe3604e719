"""partition.method lp by blocks (gnnpipe/graphops/partition_blocks.py): the block files built
from the split's stored graph (typed relations merged, uneven blocks) are those of the whole
graph's CSR, byte for byte; parts, report and
shards equal the whole-graph path's in this process and on 2 and 1 Dask workers, as lp's parts of
a whole CSR do (test_partition_lp.py's Dask case, here to share the cluster); the stage never
reads the graph whole; a bad stored graph fails in the same one line."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch
import pytest
import yaml

from conftest import scale_cluster
from gnnpipe import io
from gnnpipe.config import PartitionParams
from gnnpipe.config.schema import EngineParams
from gnnpipe.graphops.heuristics import train_projection
from gnnpipe.graphops.partition_blocks import partition_stage
from gnnpipe.io import csr_blocks
from gnnpipe.io.csr_blocks import build_block_graph
from gnnpipe.runtime.engine import run_blocks
from gnnpipe.runtime.rng import make_rng
from test_partition_lp import community_csr  # noqa: F401 (a fixture)
from block_files import write_blocks
from lp_oracle import assign_parts, lp_partition
from shard_oracle import build_shards, partition_report, shard_summary, write_partition_shard

FILES = ("indptr.npy", "indices.npy", "out_indptr.npy", "out_indices.npy")


def _split(folder: Path, layout: str) -> Path:
    from gnnpipe.cli import main

    params = {"dataset": {"layout": layout, "synthetic": {
        "num_nodes": 900, "num_features": 4, "num_classes": 3, "num_authors": 300}}}
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.MonkeyPatch.context() as patch:  # module scope: no monkeypatch fixture
        patch.chdir(folder)
        assert main(["prepare"]) == 0 and main(["split"]) == 0
    return folder / "data/split"


def train_graph(split: Path):
    """The split's train phase, read whole, as every method but lp partitions it."""
    sizes, graphs = io.read_typed_message_graphs(split)
    return train_projection(sizes, graphs["train"])


@pytest.fixture(scope="module")
def splits(tmp_path_factory) -> dict[str, Path]:
    return {layout: _split(tmp_path_factory.mktemp(layout), layout)
            for layout in ("homogeneous", "typed")}


@pytest.mark.parametrize("layout", ["homogeneous", "typed"])
def test_block_files_from_the_split_are_those_of_the_whole_graph(splits, layout, tmp_path):
    whole = train_graph(splits[layout])
    write_blocks(tmp_path / "whole", whole)
    graph = csr_blocks.stored_message_graph(splits[layout])
    assert (graph.num_nodes, graph.num_edges) == (whole.num_nodes, whole.num_edges)
    (tmp_path / "blocks").mkdir()
    # many uneven blocks
    build_block_graph(tmp_path / "blocks", graph, functools.partial(run_blocks, None), 97)
    assert sorted(p.name for p in (tmp_path / "blocks").iterdir()) == sorted(FILES)
    for name in FILES:
        assert (tmp_path / "blocks" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    # without the transpose (metis, random, bfs read in-edges only): the same in-edge files alone
    (tmp_path / "in").mkdir()
    build_block_graph(tmp_path / "in", graph, functools.partial(run_blocks, None), 97,
                      transpose=False)
    assert sorted(p.name for p in (tmp_path / "in").iterdir()) == sorted(FILES[:2])
    for name in FILES[:2]:
        assert (tmp_path / "in" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()


def _whole_path(csr, cfg, out: Path):
    """What the stage wrote before lp went by blocks: parts, report and shards of the whole CSR."""
    parts = assign_parts(csr, cfg, make_rng(0, "partition"))
    out.mkdir()
    summaries = []
    for shard in build_shards(csr, parts, cfg.num_parts, cfg.halo_hops):
        write_partition_shard(out, shard)
        summaries.append(shard_summary(shard))
    return parts, partition_report(csr, parts, cfg.num_parts), summaries


def _shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.glob("part_*/*"))}


@pytest.mark.parametrize("method", ["lp", "metis", "random", "bfs"])
@pytest.mark.parametrize("layout,halo_hops", [("homogeneous", 2), ("typed", 1)])
def test_every_method_by_blocks_equals_the_whole_graph_path(splits, layout, halo_hops, method,
                                                            tmp_path):
    """One stage path for every method: the block files, then lp by blocks or metis / random /
    bfs on their CSR mapped whole, then the cut and shards by blocks: the whole-graph bytes."""
    cfg = PartitionParams(method=method, num_parts=3, block_rows=250, iterations=4,
                          halo_hops=halo_hops)
    parts, report, summaries = _whole_path(train_graph(splits[layout]),
                                           cfg, tmp_path / "whole")
    (tmp_path / "blocks").mkdir()
    got = partition_stage(csr_blocks.stored_message_graph(splits[layout]), cfg,
                          make_rng(0, "partition"), tmp_path / "blocks")
    assert np.array_equal(got[0], parts) and got[1] == report and got[2] == summaries
    assert _shard_bytes(tmp_path / "blocks") == _shard_bytes(tmp_path / "whole")


def test_lp_on_two_and_one_dask_workers_equals_this_process(splits, community_csr, tmp_path):
    """One embedded cluster, 2 workers then scaled to 1 (a start costs seconds): lp of a whole
    CSR gives this process's parts, lp by blocks its parts, report and shards, and so does
    metis (its block files, cut and shards on the workers)."""
    from gnnpipe.runtime.engine import session

    lp_cfg = PartitionParams(method="lp", num_parts=4, block_rows=1000, iterations=4)
    lp_local = lp_partition(community_csr, lp_cfg, 11)
    graph = csr_blocks.stored_message_graph(splits["homogeneous"])
    cfg = PartitionParams(method="lp", num_parts=2, block_rows=450, iterations=2)
    (tmp_path / "local").mkdir()
    local = partition_stage(graph, cfg, make_rng(5, "partition"), tmp_path / "local")
    with session(EngineParams(engine="dask", workers=2, memory_limit="512MiB")) as client:
        for workers in (2, 1):
            scale_cluster(client.cluster, workers)
            assert np.array_equal(lp_partition(community_csr, lp_cfg, 11, client), lp_local)
            out = tmp_path / f"dask{workers}"
            out.mkdir()
            got = partition_stage(graph, cfg, make_rng(5, "partition"), out, client, tmp_path)
            assert np.array_equal(got[0], local[0]) and got[1:3] == local[1:3]
            assert _shard_bytes(out) == _shard_bytes(tmp_path / "local")
            assert not list(tmp_path.glob("*.tmp"))  # the block files went with the run
        # metis on the same path: block files, cut and shards as worker tasks, the same bytes
        metis = PartitionParams(method="metis", num_parts=2, block_rows=450)
        (tmp_path / "metis_local").mkdir()
        (tmp_path / "metis_dask").mkdir()
        want = partition_stage(graph, metis, make_rng(5, "partition"), tmp_path / "metis_local")
        got = partition_stage(graph, metis, make_rng(5, "partition"), tmp_path / "metis_dask",
                              client, tmp_path)
        assert np.array_equal(got[0], want[0]) and got[1:3] == want[1:3]
        assert _shard_bytes(tmp_path / "metis_dask") == _shard_bytes(tmp_path / "metis_local")


@pytest.mark.parametrize("method", ["lp", "metis"])
def test_the_partition_stage_reads_the_split_only_through_maps_of_its_rows(splits, tmp_path,
                                                                            monkeypatch, method):
    import shutil

    from gnnpipe.cli import main

    shutil.copytree(splits["homogeneous"], tmp_path / "data/split")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(
        {"partition": {"method": method, "num_parts": 3, "block_rows": 200, "iterations": 2}}))
    monkeypatch.chdir(tmp_path)

    def whole(*args, **kwargs):
        raise AssertionError("the partition stage read the train graph whole")

    monkeypatch.setattr(io, "read_typed_message_graphs", whole)
    loaded, load = [], csr_blocks.load_tensors

    def mapped_only(path, schema, spec, *, mmap=False):
        assert mmap, f"{path} read without a memory map"
        loaded.append(path)
        return load(path, schema, spec, mmap=mmap)

    monkeypatch.setattr(csr_blocks, "load_tensors", mapped_only)
    assert main(["partition"]) == 0
    assert loaded and io.read_partition(tmp_path / "data/partition").size == 900


@pytest.mark.parametrize("method", ["lp", "metis"])
def test_a_stored_graph_with_ids_out_of_range_fails_in_the_same_line(splits, tmp_path, method,
                                                                     capsys, monkeypatch):
    import shutil

    from gnnpipe.cli import main
    from gnnpipe.io.tensors import load_tensors, save_tensors

    shutil.copytree(splits["homogeneous"], tmp_path / "data/split")
    path = tmp_path / "data/split/message_train.pt"
    payload = load_tensors(path, io.MESSAGE_SCHEMA, {})
    indices = payload["node__to__node.indices"].clone()
    indices[-1] = 900  # one node past the end
    save_tensors(path, io.MESSAGE_SCHEMA, {
        "node__to__node.indptr": payload["node__to__node.indptr"],
        "node__to__node.indices": indices})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(
        {"partition": {"method": method, "num_parts": 3, "block_rows": 200}}))
    monkeypatch.chdir(tmp_path)
    assert main(["partition"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("gnnpipe partition: error: data/split/message_train.pt (node__to__node): "
                   "indices hold node ids outside [0, 900)"), err


def test_shards_are_read_in_chunks_and_do_not_depend_on_their_size(splits, monkeypatch):
    # a ring read whole (not in SHARD_ROWS chunks) put lp's 160M shard tasks past 1 GiB
    import shard_oracle
    from gnnpipe.graphops import partition

    csr = train_graph(splits["homogeneous"])
    parts = np.arange(csr.num_nodes, dtype=np.int32) % 3
    whole = list(build_shards(csr, parts, 3, 2))
    monkeypatch.setattr(partition, "SHARD_ROWS", 7)
    reads = []
    real_rows = shard_oracle.csr_rows

    def counted(csr):
        rows = real_rows(csr)
        return lambda ids: (reads.append(ids.size), rows(ids))[1]

    monkeypatch.setattr(shard_oracle, "csr_rows", counted)
    for a, b in zip(whole, build_shards(csr, parts, 3, 2)):
        assert all(torch.equal(x, y) for x, y in [(a.node_id, b.node_id), (a.degree, b.degree),
                                                  (a.csr.indptr, b.csr.indptr),
                                                  (a.csr.indices, b.csr.indices)])
    assert reads and max(reads) == 7 and len(reads) > 3 * csr.num_nodes // 7
