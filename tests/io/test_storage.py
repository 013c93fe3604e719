"""dataset.storage: feature precision and Parquet codec of the prepared artifacts."""

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from gnnpipe import io
from gnnpipe.config import DatasetParams, SyntheticParams
from graph_oracle import prepare
from prepared_oracle import read_typed_edge_table, read_typed_node_table
from conftest import as_graph

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.fixture(scope="module")
def graph():
    cfg = DatasetParams(synthetic=SyntheticParams(num_nodes=2000, num_features=32,
                                                  avg_degree=6.0))
    return prepare(cfg, seed=0)[0].target_view()


def _x_bytes(prepared):
    return (prepared / "graph.pt").stat().st_size, (prepared / "nodes_node.parquet").stat().st_size


def test_float32_is_exact_and_the_default(graph, tmp_path):
    io.write_prepared(tmp_path, as_graph(graph))
    back = io.read_graph(tmp_path).target_view()
    assert back.x.dtype == torch.float32 and torch.equal(back.x, graph.x)
    assert pq.ParquetFile(tmp_path / "nodes_node.parquet").metadata.row_group(0).column(0) \
        .compression == "ZSTD"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_halves_x_and_reads_back_as_the_rounded_float32(graph, tmp_path, dtype):
    full, half = tmp_path / "full", tmp_path / "half"
    full.mkdir(), half.mkdir()
    io.write_prepared(full, as_graph(graph))
    io.write_prepared(half, as_graph(graph), feature_dtype=dtype)
    back = io.read_graph(half, mmap=True).target_view()
    assert back.x.dtype == torch.float32
    assert torch.equal(back.x, graph.x.to(DTYPES[dtype]).float())
    assert not torch.equal(back.x, graph.x)  # really rounded
    x_bytes = graph.x.numel() * 4
    full_pt, full_pq = _x_bytes(full)
    half_pt, half_pq = _x_bytes(half)
    assert full_pt - half_pt == pytest.approx(x_bytes / 2, rel=0.01)
    assert half_pq < 0.75 * full_pq  # float16 column, or bfloat16's zero low mantissa bits
    table = read_typed_node_table(half, "node")
    rows = np.stack(table.column("x").to_numpy(zero_copy_only=False))
    assert np.array_equal(rows.astype(np.float32), back.x.numpy())
    assert torch.equal(back.csr.indices, graph.csr.indices) and torch.equal(back.y, graph.y)


@pytest.mark.parametrize("codec", ["none", "snappy", "gzip", "lz4"])
def test_compression_codecs_round_trip(graph, tmp_path, codec):
    io.write_prepared(tmp_path, as_graph(graph), compression=codec)
    meta = pq.ParquetFile(tmp_path / "edges_node__to__node.parquet").metadata.row_group(0).column(0)
    assert meta.compression == {"none": "UNCOMPRESSED", "lz4": "LZ4"}.get(codec, codec.upper())
    edges = read_typed_edge_table(tmp_path, ("node", "to", "node"))
    src, dst = graph.csr.edge_index().numpy()
    assert np.array_equal(edges.column("src").to_numpy(), src)
    assert np.array_equal(edges.column("dst").to_numpy(), dst)


def test_float64_features_in_an_artifact_are_rejected(graph, tmp_path):
    io.write_prepared(tmp_path, as_graph(graph))
    payload = torch.load(tmp_path / "graph.pt", weights_only=True)
    payload["x.node"] = payload["x.node"].double()
    torch.save(payload, tmp_path / "graph.pt")
    with pytest.raises(ValueError, match=r"tensor 'x.node' must be torch.float32 \(or float16"):
        io.read_graph(tmp_path)
