"""Features larger than memory: rows read per batch from the mapped file (gnnpipe/io/rows.py
FeatureSource, gnnpipe/data/features.py ModelFeatures), features_node.npy written in row blocks
(dataset.storage.features: external), streamed synthetic generation, bfloat16 batches."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch
import yaml

from gnnpipe import io
from gnnpipe.data import synthetic
from gnnpipe.cli import main
from gnnpipe.config import params_from_dict
from gnnpipe.data.features import ModelFeatures, fit
from gnnpipe.data.graph import NODE
from gnnpipe.io.rows import FeatureSource, open_node_source
from gnnpipe.runtime.rng import make_rng
from prepared_oracle import read_typed_node_table
from conftest import as_graph

SMALL = {"dataset": {"synthetic": {"num_nodes": 500, "num_features": 13, "num_classes": 3}},
         "split": {"node": {"train": 0.6, "val": 0.2, "test": 0.2}}}


def _x(n=700, f=37, seed=0) -> torch.Tensor:
    return torch.randn(n, f, generator=torch.Generator().manual_seed(seed)) * 3 + 1


@pytest.mark.parametrize("kind", ["none", "row", "standardize"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gathered_rows_are_the_whole_matrix_path_bit_for_bit(kind, dtype):
    """Normalizing the batch's rows gives exactly what normalizing the whole (float32) matrix
    and indexing it gives (today's path), for every stored dtype."""
    stored = _x().to(dtype)
    transform = fit(kind, stored.float(), np.arange(0, 700, 3))
    whole = transform.apply(stored.float())
    features = ModelFeatures(FeatureSource(stored, mapped=False), transform)
    gen = torch.Generator().manual_seed(1)
    for size in (1, 64, 513):
        ids = torch.randint(0, 700, (size,), generator=gen)
        assert torch.equal(features[ids], whole[ids])
    assert torch.equal(features[100:300], whole[100:300])
    assert torch.equal(features.materialize(block_rows=128), whole)


def test_bfloat16_rows_stay_bfloat16_and_take_half_the_bytes():
    stored = _x().to(torch.bfloat16)
    features = ModelFeatures(FeatureSource(stored, mapped=False), fit("none", stored, None),
                             torch.bfloat16)
    rows = features[torch.tensor([5, 1, 5])]
    assert rows.dtype == torch.bfloat16 and torch.equal(rows, stored[[5, 1, 5]])
    assert rows.element_size() * 2 == torch.float32.itemsize
    assert rows.data_ptr() != stored.data_ptr()  # a copy: no view keeps the map alive


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_external_features_read_back_as_inline_ones(tmp_path, tiny_graph, dtype):
    inline, external = tmp_path / "inline", tmp_path / "external"
    inline.mkdir(), external.mkdir()
    io.write_prepared(inline, as_graph(tiny_graph), feature_dtype=dtype)
    io.write_prepared(external, as_graph(tiny_graph), feature_dtype=dtype, features="external",
                      block_rows=3)
    file = io.features_file(NODE)
    assert not (inline / file).exists() and (external / file).exists()
    for mmap in (False, True):
        a, b = (io.read_graph(p, mmap=mmap).target_view() for p in (inline, external))
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
        assert torch.equal(io.read_graph(external, mmap=mmap, stored_x=True).target_view().x,
                           io.read_graph(inline, mmap=mmap, stored_x=True).target_view().x)
    source = open_node_source(external)[0]
    assert source.mapped and source.dtype == io.FEATURE_DTYPES[dtype]
    # x once, on disk
    assert read_typed_node_table(external, NODE).column_names == ["node_id", "label"]


def test_inline_default_writes_todays_bytes(tmp_path, tiny_graph):
    """features: inline (the default) and auto on a small graph write byte-identical files."""
    for name, mode in (("a", "inline"), ("b", "auto")):
        (tmp_path / name).mkdir()
        io.write_prepared(tmp_path / name, as_graph(tiny_graph), features=mode)
    for file in ("graph.pt", "nodes_node.parquet", "edges_node__to__node.parquet"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()
    assert io.external_features("auto", 1 << 20, 256, "float32")  # 1 GiB: external
    assert not io.external_features("auto", 1 << 20, 256, "float16")


def test_bad_feature_files_are_refused_in_one_line(tmp_path, tiny_graph):
    io.write_prepared(tmp_path, as_graph(tiny_graph), features="external")
    path = tmp_path / io.features_file(NODE)
    good = np.load(path)
    np.save(path, good[:-1])
    with pytest.raises(ValueError, match=r"features_node.npy: holds float32 \[\d+, \d+\], "
                                         r"graph.pt says"):
        io.read_graph(tmp_path)
    np.save(path, good.astype(np.float64))
    with pytest.raises(ValueError, match="features_node.npy: holds float64"):
        io.read_graph(tmp_path, mmap=True)
    path.write_bytes(b"not numpy")
    with pytest.raises(ValueError, match="features_node.npy: not a readable .npy feature file"):
        io.read_graph(tmp_path)
    path.unlink()
    with pytest.raises(ValueError, match="features_node.npy: file not found"):
        open_node_source(tmp_path)


def test_streamed_synthetic_features_equal_the_in_memory_ones(monkeypatch):
    cfg = params_from_dict({"dataset": {"synthetic": {
        "num_nodes": 3000, "num_features": 7, "timestamps": True}}}).dataset.synthetic
    whole = synthetic.generate(cfg, make_rng(0, "prepare"))
    monkeypatch.setattr(synthetic, "BLOCK_VALUES", 7 * 400)  # 8 blocks, the last one short
    blocks: list = []
    streamed = synthetic.generate(cfg, make_rng(0, "prepare"), blocks.append)
    assert "x" not in streamed and len(blocks) == 8
    assert np.array_equal(np.concatenate(blocks), whole["x"])
    for key in ("y", "src", "dst", "timestamps"):  # drawn around x: the same stream
        assert np.array_equal(streamed[key], whole[key])


def test_prepare_streams_external_features_and_writes_the_same_graph(tmp_path, monkeypatch):
    """prepare with features: external gives the graph inline would, x read from features_node.npy;
    a tiny block size shows x goes through the file block by block."""
    monkeypatch.setattr(synthetic, "BLOCK_VALUES", 13 * 64)
    roots = {}
    for mode in ("inline", "external"):
        root = roots[mode] = tmp_path / mode
        root.mkdir()
        monkeypatch.chdir(root)
        params = {**SMALL, "dataset": {**SMALL["dataset"], "storage": {"features": mode}}}
        (root / "params.yaml").write_text(yaml.safe_dump(params))
        assert main(["prepare"]) == 0
    a, b = (io.read_graph(roots[m] / "data/prepared").target_view()
            for m in ("inline", "external"))
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    assert torch.equal(a.csr.indices, b.csr.indices)
    assert (roots["external"] / "data/prepared" / io.features_file(NODE)).exists()
    edges = "data/prepared/edges_node__to__node.parquet"
    assert (roots["inline"] / edges).read_bytes() == (roots["external"] / edges).read_bytes()


def test_neighbor_training_reads_rows_of_the_mapped_file(tmp_path, monkeypatch):
    """train.sampler: neighbor on external features: batches carry the rows of the file
    (features equal to the whole-matrix path), and the stage trains end to end."""
    from gnnpipe.sampling import builders

    monkeypatch.chdir(tmp_path)
    params = {**SMALL, "dataset": {**SMALL["dataset"], "storage": {"features": "external"}},
              "features": {"normalize": "standardize"},
              "train": {"sampler": "neighbor", "epochs": 2, "hidden": 8, "batch_size": 64,
                        "neighbor": {"num_neighbors": [4, 3]},
                        "inference": {"mode": "layerwise"}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert main(["prepare"]) == 0 and main(["split"]) == 0
    batches: list = []
    real = builders.neighbor_loader

    def spy(*args, **kwargs):
        loader = real(*args, **kwargs)
        batches.append(next(iter(loader)))
        return loader

    monkeypatch.setattr(builders, "neighbor_loader", spy)
    assert main(["train"]) == 0
    from gnnpipe.data.features import read_transform

    raw = io.read_graph(tmp_path / "data/prepared").target_view().x
    whole = read_transform(tmp_path / "data/features", None, raw.shape[1]).apply(raw)
    batch = batches[0]
    assert batch.x.dtype == torch.float32 and torch.equal(batch.x, whole[batch.n_id])
    assert (tmp_path / "data/model/model.pt").exists()


def _rss_file_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    return 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pread / procfs")
@pytest.mark.parametrize("how", ["pread", "map"])
def test_gathered_pages_leave_the_resident_set(tmp_path, how):
    """Reading every row of a mapped 24 MiB file: pread (the file found behind the map) leaves
    none of it resident; indexing the map itself (a long-lived map) leaves all of it resident."""
    path = tmp_path / "x.npy"
    np.save(path, np.arange(6 * 1024 * 1024, dtype=np.float32).reshape(-1, 1024))
    x = torch.from_numpy(np.load(path, mmap_mode="r+"))
    source = FeatureSource(x, mapped=True)
    assert source._fd is not None and source._offset == 128  # the .npy header
    before = _rss_file_kib()
    for lo in range(0, x.shape[0], 256):
        ids = torch.arange(lo, min(lo + 256, x.shape[0])).flip(0)
        rows = x.index_select(0, ids) if how == "map" else source.rows(ids)
        assert torch.equal(rows[:, 0], ids.float() * 1024)  # right rows
    grown = _rss_file_kib() - before
    assert grown < 1024 if how == "pread" else grown > 16 * 1024, grown  # KiB


@pytest.mark.parametrize("mode, dtype", [("inline", "bfloat16"), ("external", "float32"),
                                         ("external", "float16")])
def test_shard_rows_read_any_storage(tmp_path, tiny_graph, mode, dtype):
    """train.dist.shard: partition ranks read their rows through the same source: float32 rows
    of x in graph.pt or features_node.npy, in any stored dtype, block by block."""
    from gnnpipe.sampling.store import read_node_rows

    io.write_prepared(tmp_path, as_graph(tiny_graph), feature_dtype=dtype, features=mode)
    ids = torch.tensor([0, 2, 3, tiny_graph.num_nodes - 1])
    rows = read_node_rows(tmp_path, ids, block_rows=2)
    assert rows.x.dtype == torch.float32 and torch.equal(rows.y, tiny_graph.y[ids])
    assert torch.equal(rows.x, io.read_graph(tmp_path).target_view().x[ids])


@pytest.mark.parametrize("name", ["sage", "gcn", "gat", "mlp"])
def test_layerwise_evaluation_reads_rows_and_equals_the_full_forward(name):
    """Evaluation over ModelFeatures (rows per block of the map, never the whole matrix) gives
    the full forward's logits on the whole tensor."""
    from gnnpipe.config import TrainParams
    from gnnpipe.data.edges import csr_from_edges
    from gnnpipe.training.inference import LayerwiseInference, layerwise_logits, csr_view
    from gnnpipe.training.models import build_model

    gen = torch.Generator().manual_seed(3)
    n = 120
    src, dst = torch.randint(0, n, (2, 600), generator=gen).numpy()
    csr = csr_from_edges(src, dst, n)
    x = _x(n, 11)
    transform = fit("standardize", x, None)
    features = ModelFeatures(FeatureSource(x, mapped=False), transform)
    torch.manual_seed(0)
    model = build_model(name, 11, 4, TrainParams(model=name, hidden=8, heads=2)).eval()
    lazy = layerwise_logits(model, features, LayerwiseInference(*csr_view(csr), 40))
    with torch.no_grad():
        whole = transform.apply(x)
        full = model(whole) if name == "mlp" else model(whole, csr.edge_index())
    torch.testing.assert_close(lazy, full, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pread / procfs")
def test_feature_store_over_a_source_reads_rows_without_making_the_file_resident(tmp_path):
    """open_prepared's FeatureStore (x behind a FeatureSource) and read_node_rows (a shard
    rank's rows, through that store): every row right, none of the 24 MiB file resident."""
    from gnnpipe.data.graph import Graph
    from gnnpipe.data.edges import csr_from_edges
    from gnnpipe.sampling.store import open_prepared, read_node_rows

    n, f = 6144, 1024
    x = torch.arange(n, dtype=torch.float32)[:, None] * f + torch.arange(f, dtype=torch.float32)
    src = np.arange(n)
    io.write_prepared(tmp_path, Graph.homogeneous(csr_from_edges(src, (src + 1) % n, n), x,
                                      torch.arange(n) % 3, 3))
    fs, _ = open_prepared(tmp_path)
    assert isinstance(fs._tensors[(None, "x")], FeatureSource)
    before = _rss_file_kib()
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    for lo in range(0, n, 512):
        ids = order[lo:lo + 512]
        assert torch.equal(fs.get_tensor(None, "x", index=ids), x[ids])
    assert torch.equal(fs.get_tensor(None, "x", index=7), x[7])
    held = torch.arange(0, n, 3)
    rows = read_node_rows(tmp_path, held, block_rows=1000)
    assert torch.equal(rows.x, x[held]) and torch.equal(rows.y, held % 3)  # the rows' labels
    assert _rss_file_kib() - before < 1024  # KiB; indexing the map would leave 24 MiB


def test_a_feature_source_is_put_as_the_whole_matrix():
    from gnnpipe.sampling.store import GnnpipeFeatureStore

    store = GnnpipeFeatureStore()
    with pytest.raises(ValueError, match="put it with index=None"):
        store.put_tensor(FeatureSource(_x(10, 3), mapped=False), group_name=None,
                         attr_name="x", index=torch.arange(10))


def test_a_small_mapped_matrix_is_indexed_on_the_map(tmp_path, monkeypatch):
    """At most direct_bytes of features: the map itself, no pread per row; the same rows."""
    path = tmp_path / "x.npy"
    np.save(path, np.arange(64 * 8, dtype=np.float32).reshape(64, 8))
    x = torch.from_numpy(np.load(path, mmap_mode="r+"))
    small = FeatureSource(x, mapped=True, direct_bytes=64 * 8 * 4)
    large = FeatureSource(x, mapped=True, direct_bytes=64 * 8 * 4 - 1)
    assert small.direct and small._fd is None and not large.direct and large._fd is not None
    ids = torch.tensor([5, 0, 63, 5])
    monkeypatch.setattr(os, "preadv", lambda *a: (_ for _ in ()).throw(AssertionError("pread")))
    assert torch.equal(small.rows(ids), x[ids])
    with pytest.raises(AssertionError, match="pread"):
        large.rows(ids)
