"""Bounded memory in train, predict and evaluate (issue 43 item 1): layer-wise inference keeps its
per-node tables in memory-mapped scratch files beside the stage's outputs, not in anonymous
memory, with the bytes of the in-memory path and nothing left behind; the phase message graphs
are read memory-mapped; a block's gather holds no per-node table."""

from __future__ import annotations

import argparse
import errno
import gc
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnpipe import io
from gnnpipe.config import TrainParams
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.data.graph import EDGE, NODE, Graph
from gnnpipe.io.temps import scratch_array, scratch_beside, scratch_folder
from gnnpipe.training import inference
from gnnpipe.training.inference import LayerwiseInference, csr_view, layerwise_logits
from gnnpipe.training.models import build_model
from conftest import as_graph

N, F, C = 200, 5, 3


@pytest.fixture(scope="module")
def graph():
    rng = np.random.default_rng(4)
    csr = csr_from_edges(rng.integers(0, N, 1500), rng.integers(0, N - 10, 1500), N)
    return csr, torch.randn(N, F, generator=torch.Generator().manual_seed(1))


def _mapped_file(tensor: torch.Tensor) -> str | None:
    """The file whose mapping holds ``tensor``'s first byte (/proc/self/maps), None for
    anonymous memory."""
    address = tensor.data_ptr()
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        lo, hi = (int(v, 16) for v in fields[0].split("-"))
        if lo <= address < hi:
            return fields[5] if len(fields) == 6 and fields[5].startswith("/") else None
    return None


def _model(name: str, **extra):
    torch.manual_seed(0)
    return build_model(name, F, C, TrainParams(model=name, hidden=8, **extra)).eval()


@pytest.mark.parametrize("name, extra", [("sage", {}), ("gcn", {"jk": "cat"}), ("gat", {})])
def test_layer_tables_are_unlinked_scratch_files_with_the_in_memory_bytes(graph, tmp_path, name,
                                                                         extra):
    csr, x = graph
    model = _model(name, **extra)
    want_out, want_hidden = layerwise_logits(model, x, LayerwiseInference(*csr_view(csr), 300),
                                             with_hidden=True)
    assert _mapped_file(want_out) is None  # outside a stage: anonymous memory, as before
    with scratch_beside(tmp_path / "model"):
        assert scratch_folder() == tmp_path
        out, hidden = layerwise_logits(model, x, LayerwiseInference(*csr_view(csr), 300),
                                       with_hidden=True)
    assert scratch_folder() is None  # the stage's setting ends with it
    for got, want in ((out, want_out), (hidden, want_hidden)):
        path = _mapped_file(got)
        assert path is not None and path.startswith(f"{tmp_path}/.layerwise.p{os.getpid()}-")
        assert path.endswith("(deleted)")  # unlinked once mapped: nothing to clean up
        assert got.numpy().tobytes() == want.numpy().tobytes()
    assert os.listdir(tmp_path) == []


def test_a_scratch_table_beside_an_output_folder_not_yet_written_creates_it(tmp_path):
    """A stage maps scratch tables before its output folder exists (the baseline's link
    sampler keys, read before it writes ``--out``): the folder is made, the file unlinked."""
    out = tmp_path / "local" / "model"
    with scratch_beside(out):
        table = scratch_array(5, 2, np.int64)
    assert table is not None and table.shape == (5, 2)
    assert (tmp_path / "local").is_dir() and os.listdir(tmp_path / "local") == []


def test_typed_tables_are_scratch_files_too(tmp_path):
    from gnnpipe.hetero.models import build_hetero_model

    rng = np.random.default_rng(2)
    sizes = {"a": 60, "b": 40}
    graph = {("a", "to", "b"): csr_from_edges(rng.integers(0, 60, 300),
                                              rng.integers(0, 40, 300), 40),
             ("b", "rev", "a"): csr_from_edges(rng.integers(0, 40, 300),
                                               rng.integers(0, 60, 300), 60)}
    gen = torch.Generator().manual_seed(3)
    x = {"a": torch.randn(60, 4, generator=gen), "b": torch.randn(40, 3, generator=gen)}
    for name in ("sage", "rgcn"):
        torch.manual_seed(0)
        model = build_hetero_model(name, (["a", "b"], list(graph)), {"a": 4, "b": 3}, C, "a",
                                   TrainParams(model=name, hidden=8)).eval()
        want = layerwise_logits(model, x, LayerwiseInference(graph, sizes, 50))
        with scratch_beside(tmp_path / "model"):
            got = layerwise_logits(model, x, LayerwiseInference(graph, sizes, 50))
        assert _mapped_file(got) is not None, name
        assert got.numpy().tobytes() == want.numpy().tobytes(), name
    assert os.listdir(tmp_path) == []


def test_an_error_mid_layer_leaves_no_file_and_no_mapping(graph, tmp_path, monkeypatch):
    csr, x = graph
    model = _model("sage")
    calls = []

    def failing(model, layer, out, h):  # the second block of the second layer fails
        calls.append(layer)
        if calls.count(1) == 2:
            raise RuntimeError("boom")
        return real(model, layer, out, h)

    real = inference.finish_layer
    monkeypatch.setattr(inference, "finish_layer", failing)
    with scratch_beside(tmp_path / "model"), pytest.raises(RuntimeError, match="boom"):
        layerwise_logits(model, x, LayerwiseInference(*csr_view(csr), 300))
    gc.collect()
    assert os.listdir(tmp_path) == []
    assert str(tmp_path) not in Path("/proc/self/maps").read_text()  # the tables are gone


def test_a_full_disk_is_an_oserror_naming_no_leftover(tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full)
    with scratch_beside(tmp_path / "predict"), pytest.raises(OSError, match="No space"):
        scratch_array(100, 8)  # raised here, not as SIGBUS on a later write to the map
    assert os.listdir(tmp_path) == []


def test_scratch_array_is_writable_and_none_outside_a_stage(tmp_path):
    assert scratch_array(4, 3) is None
    with scratch_beside(tmp_path / "out"):
        table = scratch_array(4, 3)
        assert scratch_array(0, 3) is None  # an empty table maps nothing
    table[:] = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert table.dtype == np.float32 and table.sum() == 66
    assert os.listdir(tmp_path) == []


def test_uncached_blocks_are_gathered_again_with_the_same_ids(graph, monkeypatch):
    csr, x = graph
    model = _model("gat")
    want = layerwise_logits(model, x, LayerwiseInference(*csr_view(csr), 300))
    monkeypatch.setattr(inference, "GATHER_CACHE_BYTES", 0)  # nothing kept between layers
    engine = LayerwiseInference(*csr_view(csr), 300)
    got = layerwise_logits(model, x, engine)
    blocks = len(engine.blocks(NODE))
    assert engine.num_gathered == 2 * blocks  # both layers gathered every block
    assert got.numpy().tobytes() == want.numpy().tobytes()


def test_gather_reads_no_per_node_table(graph, monkeypatch):
    """A block's local ids come from its own edges: building one touches nothing of size N."""
    csr, _ = graph
    made = []
    real_zeros, real_empty = torch.zeros, torch.empty

    def watch(make):
        def made_by(*shape, **kwargs):
            made.append(shape)
            return make(*shape, **kwargs)
        return made_by

    monkeypatch.setattr(torch, "zeros", watch(real_zeros))
    monkeypatch.setattr(torch, "empty", watch(real_empty))
    block = inference.gather_block(csr, 20, 30)
    assert not [s for s in made if N in s or (N,) in s]
    src, dst = inference.block_edges(csr, 20, 30)
    assert torch.equal(block.n_id[block.edge_index[0]], src) and torch.equal(
        block.edge_index[1], dst)


def test_model_inputs_read_the_message_graphs_memory_mapped(tmp_path):
    from gnnpipe.data.features import fit_graph, write_transforms
    from gnnpipe.training.model_inputs import read_model_inputs

    rng = np.random.default_rng(0)
    csr = csr_from_edges(rng.integers(0, N, 600), rng.integers(0, N, 600), N)
    y = torch.from_numpy(rng.integers(0, C, N))
    view = Graph.homogeneous(csr=csr, x=torch.randn(N, F), y=y, num_classes=C).target_view()
    (tmp_path / "prepared").mkdir()
    io.write_prepared(tmp_path / "prepared", as_graph(view))
    roles = np.array(["train", "val", "test", "unused"])[np.arange(N) % 4]
    io.write_split(tmp_path / "split", as_graph(view), {p: {EDGE: csr} for p in
                                                        ("train", "val", "test")},
                   {"task": "node", "mode": "transductive"}, roles=roles)
    (tmp_path / "features").mkdir()
    write_transforms(tmp_path / "features", "none", fit_graph("none", view.x, None))
    args = argparse.Namespace(prepared=tmp_path / "prepared", split=tmp_path / "split",
                              features=tmp_path / "features", propagate=tmp_path / "propagate")
    inputs = read_model_inputs(args, TrainParams(model="sage", hidden=8), "node")
    train = inputs.message_graphs["train"]
    for tensor in (train.indptr, train.indices):
        assert (_mapped_file(tensor) or "").startswith(str(tmp_path / "split"))
    assert torch.equal(train.indices, csr.indices)


def test_phase_edge_lists_are_scratch_tables_with_the_csr_edges(graph, tmp_path):
    from gnnpipe.training.train import build_inputs

    csr, x = graph
    phases = {p: csr for p in ("train", "val", "test")}
    want = build_inputs(x, message_graphs=phases)["train"].edge_index
    assert torch.equal(want, csr.edge_index()) and _mapped_file(want) is None
    with scratch_beside(tmp_path / "model"):
        inputs = build_inputs(x, message_graphs=phases)
    got = inputs["train"].edge_index
    assert got is inputs["test"].edge_index  # one table per distinct graph
    assert (_mapped_file(got) or "").startswith(f"{tmp_path}/.layerwise.")
    assert got.dtype == torch.int64 and torch.equal(got, want)
    assert os.listdir(tmp_path) == []


def _typed_graph():
    """Two node types, three edge types (``a`` -> ``b``, ``b`` -> ``a``, ``a`` -> ``a``)."""
    rng = np.random.default_rng(5)
    sizes = {"a": 60, "b": 40}
    graph = {("a", "to", "b"): csr_from_edges(rng.integers(0, 60, 300),
                                              rng.integers(0, 40, 300), 40),
             ("b", "rev", "a"): csr_from_edges(rng.integers(0, 40, 300),
                                               rng.integers(0, 60, 300), 60),
             ("a", "self", "a"): csr_from_edges(rng.integers(0, 60, 200),
                                                rng.integers(0, 60, 200), 60)}
    gen = torch.Generator().manual_seed(6)
    x = {"a": torch.randn(60, 4, generator=gen), "b": torch.randn(40, 3, generator=gen)}
    return graph, sizes, x


def test_typed_phase_and_loader_edge_lists_are_scratch_tables(tmp_path):
    """The typed phase inputs and the typed loaders' HeteroData hold each edge type's edge
    list in a mapped scratch table (in a stage), never ``Csr.edge_index``'s 16 anonymous bytes
    an edge, with its values."""
    from gnnpipe.hetero.inputs import phase_inputs
    from gnnpipe.hetero.loader import hetero_data

    graph, sizes, x = _typed_graph()
    typed = Graph(x=x, csr=graph, target="a", y=torch.zeros(60, dtype=torch.int64),
                  num_classes=C, reverse={}, link_edge_type=("a", "to", "b"))
    phases = {p: graph for p in ("train", "val", "test")}
    with scratch_beside(tmp_path / "model"):
        given = phase_inputs(typed, phases)
        data = hetero_data(typed, graph)
    assert given["train"].edge_index is given["test"].edge_index  # one table per graph
    for edge_type, csr in graph.items():
        for got in (given["train"].edge_index[edge_type], data[edge_type].edge_index):
            assert (_mapped_file(got) or "").startswith(f"{tmp_path}/.layerwise.")
            assert got.dtype == torch.int64 and torch.equal(got, csr.edge_index())
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["sage", "rgcn"])
@pytest.mark.parametrize("out", ["target", "all"])
def test_typed_last_layer_computes_only_the_rows_it_returns(name, out, monkeypatch):
    """The last layer of layer-wise typed SAGE / R-GCN fills only the target's (N_t, C) table
    when the model returns the target's rows (``out="all"``: every type's), with the full
    forward's output."""
    from gnnpipe.hetero.models import build_hetero_model

    graph, sizes, x = _typed_graph()
    torch.manual_seed(0)
    model = build_hetero_model(name, (["a", "b"], list(graph)), {"a": 4, "b": 3}, C, "b",
                               TrainParams(model=name, hidden=8, num_layers=2),
                               out=out).eval()
    layers = []
    real = inference._layer

    def recorded(engine, ctx, widths, rows):
        layers.append(sorted(widths))
        return real(engine, ctx, widths, rows)

    monkeypatch.setattr(inference, "_layer", recorded)
    got = layerwise_logits(model, x, LayerwiseInference(graph, sizes, 50))
    assert len(layers) >= 2 and all(widths == ["a", "b"] for widths in layers[:-1])
    assert layers[-1] == (["b"] if out == "target" else ["a", "b"])
    edges = {e: csr.edge_index() for e, csr in graph.items()}
    with torch.no_grad():
        want = model(x, edges)
    assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)


def test_typed_input_maps_run_on_row_blocks_not_whole_types(monkeypatch):
    """Layer-wise typed models map each type's input rows ``ROW_STEP`` rows at a time (not a
    block of ``block_edges`` rows: a (N_t, hidden) temporary per type at scale), with the full
    forward's output."""
    from gnnpipe.hetero.models import build_hetero_model

    graph, sizes, x = _typed_graph()
    monkeypatch.setattr(inference, "ROW_STEP", 16)
    for name in ("sage", "rgcn"):
        torch.manual_seed(0)
        model = build_hetero_model(name, (["a", "b"], list(graph)), {"a": 4, "b": 3}, C, "a",
                                   TrainParams(model=name, hidden=8)).eval()
        rows = []
        hooks = [lin.register_forward_hook(lambda m, args, out: rows.append(args[0].shape[0]))
                 for lin in model.inputs.maps]
        got = layerwise_logits(model, x, LayerwiseInference(graph, sizes, 1000))
        for hook in hooks:
            hook.remove()
        assert rows and max(rows) == 16 and sum(rows) == sum(sizes.values()), name
        with torch.no_grad():
            want = model(x, {e: csr.edge_index() for e, csr in graph.items()})
        assert torch.allclose(got, want, atol=1e-5), name


def test_the_cost_prefix_is_a_scratch_table_with_the_in_memory_values(graph, tmp_path):
    """``cost_prefix`` (8 B a node) is filled by row steps into a mapped scratch table inside a
    stage: the values of arange + the summed indptr."""
    csr, _ = graph
    want = torch.arange(N + 1) + 2 * csr.indptr
    outside = inference.cost_prefix([csr, csr], N)
    assert _mapped_file(outside) is None and torch.equal(outside, want)
    with scratch_beside(tmp_path / "model"):
        inside = inference.cost_prefix([csr, csr], N)
    assert _mapped_file(inside) is not None and torch.equal(inside, want)


def test_evaluates_gathered_rows_are_a_scratch_table_with_the_same_values(tmp_path):
    from gnnpipe.io.tensors import gathered_rows

    logits = torch.randn(50, 4, generator=torch.Generator().manual_seed(0))
    rows = torch.tensor([7, 3, 49, 0, 3])
    assert _mapped_file(gathered_rows(logits, rows)) is None  # outside a stage
    assert torch.equal(gathered_rows(logits, rows), logits[rows])
    with scratch_beside(tmp_path / "eval.json"):
        got = gathered_rows(logits, rows)
    assert _mapped_file(got) is not None and torch.equal(got, logits[rows])


def test_an_epochs_layerwise_phase_logits_are_a_scratch_table(tmp_path):
    """``train._rows_of``: a layer-wise table's phase rows (every epoch's train and val logits)
    are copied into a mapped scratch table inside a stage, the values of ``full[rows]``."""
    from gnnpipe.training.train import _rows_of

    full = torch.randn(30, 3, generator=torch.Generator().manual_seed(0))
    rows = torch.tensor([4, 0, 29, 4])
    assert _mapped_file(_rows_of(full, rows, True)) is None  # outside a stage
    with scratch_beside(tmp_path / "model"):
        mapped, plain = _rows_of(full, rows, True), _rows_of(full, rows, False)
    assert _mapped_file(mapped) is not None and _mapped_file(plain) is None
    assert torch.equal(mapped, full[rows]) and torch.equal(plain, full[rows])
