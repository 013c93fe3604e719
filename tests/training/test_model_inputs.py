"""gnnpipe/training/model_inputs.py: the one model-input builder of train and predict, for both
graph kinds and both tasks: each phase sees exactly its own message graph and the features the split
stage normalized, and the model it builds reads them."""

import argparse
import contextlib

import numpy as np
import pytest
import torch
import yaml

from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.splitting.inputs import (model_features, read_model_typed,
                                     read_typed_link_supervision)
from gnnpipe.commands.variant import split_task
from gnnpipe.config import load_params
from gnnpipe.data.graph import EDGE, ROLE_CODES
from gnnpipe.training.model_inputs import read_model_inputs, read_supervision
from gnnpipe.training.distributed import SINGLE
from gnnpipe.io.common import PHASES

SMALL = {"train": {"epochs": 1, "hidden": 8}, "features": {"normalize": "standardize"}}
HOMOGENEOUS = {"synthetic": {"num_nodes": 300, "num_features": 6, "num_classes": 3}}
TYPED = {"layout": "typed", "synthetic": {"num_nodes": 200, "num_authors": 80, "num_venues": 5,
                                          "num_features": 6}}
VARIANTS = {("homogeneous", "node"): {"dataset": HOMOGENEOUS},
            ("homogeneous", "link"): {"dataset": {**HOMOGENEOUS, "task": "link"}},
            ("typed", "node"): {"dataset": TYPED},
            ("typed", "link"): {"dataset": {**TYPED, "task": "link"}}}


@pytest.fixture(scope="module", params=list(VARIANTS), ids="-".join)
def split_repo(request, tmp_path_factory):
    """(args, params, kind, task) of a prepared and split graph of each variant."""
    root = tmp_path_factory.mktemp("_".join(request.param))
    (root / "params.yaml").write_text(yaml.safe_dump({**SMALL, **VARIANTS[request.param]}))
    with contextlib.chdir(root):
        assert main(["prepare"]) == 0 and main(["split"]) == 0
    args = argparse.Namespace(prepared=root / "data/prepared", split=root / "data/split",
                              features=root / "data/features", propagate=root / "data/propagate",
                              partition=root / "data/partition")
    kind, task = io.read_split_meta(args.split)["layout"], split_task(args.split)
    assert (kind, task) == request.param  # the variant comes from the artifacts
    return args, load_params(root / "params.yaml"), kind, task


def test_auto_evaluates_layer_by_layer_on_several_ranks(split_repo):
    """``world_size`` reaches ``inference.plan`` for both layouts: the small graph keeps auto's
    full forward in one process and evaluates layer by layer on two ranks."""
    args, params, _, task = split_repo
    assert params.train.inference.mode == "auto"
    one = read_model_inputs(args, params.train, task)
    two = read_model_inputs(args, params.train, task, world_size=2)
    assert all(one.phases[p].layerwise is None for p in PHASES)
    assert all(two.phases[p].layerwise is not None for p in PHASES)


def _message_edges(args, inputs, kind):
    """phase -> the message graph's edge_index (homogeneous) or edge type -> edge_index."""
    if kind == "homogeneous":
        graphs = io.read_typed_message_graphs(args.split, inputs.graph)[1]
        return {p: graphs[p][EDGE].edge_index() for p in PHASES}
    graphs = io.read_typed_message_graphs(args.split, inputs.graph)[1]
    return {p: {e: csr.edge_index() for e, csr in graphs[p].items()} for p in PHASES}


def test_each_phase_sees_its_own_message_graph_and_the_normalized_features(split_repo):
    args, params, kind, task = split_repo
    inputs = read_model_inputs(args, params.train, task)
    assert set(inputs.phases) == set(PHASES)
    expected = _message_edges(args, inputs, kind)
    if kind == "homogeneous":
        raw = io.read_graph(args.prepared).target_view().x
        assert inputs.graph.layout == "homogeneous" and inputs.graph.is_homogeneous
        x = inputs.graph.target_view().x
        assert torch.equal(x, model_features(args, raw))
        assert not torch.equal(x, raw)  # standardize: not the stored features
        for phase in PHASES:
            assert torch.equal(inputs.phases[phase].x, x)
            assert torch.equal(inputs.phases[phase].edge_index, expected[phase]), phase
    else:
        raw = io.read_graph(args.prepared)
        assert inputs.graph.target == raw.target
        for t, x in raw.x.items():
            assert torch.equal(inputs.graph.x[t], model_features(args, x, t))
        for phase in PHASES:
            given = inputs.phases[phase].edge_index
            assert set(given) == set(expected[phase])
            assert all(torch.equal(given[e], expected[phase][e]) for e in given), phase
    if task == "link":  # the held-out test edges are in no phase's message graph
        edge_type, sup = read_supervision(args, inputs, SINGLE)
        held_out = sup.edges["test"].clone()
        seen = inputs.phases["test"].edge_index
        if edge_type is not None:  # back from the typed models' output rows to type-local ids
            offsets = inputs.graph.offsets()
            held_out -= torch.tensor([[offsets[edge_type[0]]], [offsets[edge_type[2]]]])
            seen = seen[edge_type]
        pairs = set(map(tuple, seen.t().tolist()))
        assert held_out.shape[1] > 0
        assert not any(tuple(e) in pairs for e in held_out.t().tolist())


def test_predict_asks_for_the_test_phase_alone(split_repo):
    args, params, kind, task = split_repo
    inputs = read_model_inputs(args, params.train, task, phases=("test",))
    assert list(inputs.phases) == ["test"]
    whole = read_model_inputs(args, params.train, task)
    test, expected = inputs.phases["test"].edge_index, whole.phases["test"].edge_index
    if kind == "homogeneous":
        assert torch.equal(test, expected)
    else:
        assert all(torch.equal(test[e], expected[e]) for e in expected)


def test_the_model_it_builds_reads_its_inputs(split_repo):
    args, params, kind, task = split_repo
    inputs = read_model_inputs(args, params.train, task)
    out_dim, out = (inputs.graph.num_classes, "target") if task == "node" else (
        params.train.hidden, "all")
    torch.manual_seed(0)
    model = inputs.model(out_dim, out).eval()
    test = inputs.phases["test"]
    with torch.no_grad():
        y = model(test.x, test.edge_index)
    rows = (inputs.graph.num_nodes_dict[inputs.graph.target] if task == "node"
            else inputs.graph.num_nodes)
    assert y.shape == (rows, out_dim)
    task_meta = {"num_classes": out_dim} if task == "node" else {"task": "link",
                                                                  "embedding_dim": out_dim}
    meta = inputs.meta(task_meta)
    assert meta["model"] == params.train.model and task_meta.items() <= meta.items()
    if kind == "homogeneous":  # what predict checks model.pt against
        assert meta["in_dim"] == inputs.graph.target_view().x.shape[1] and meta["num_hops"] == 0
    else:
        assert meta["target"] == inputs.graph.target
        assert meta["node_types"] == ",".join(inputs.graph.node_types)


def test_roles_and_supervision_are_of_the_target(split_repo):
    args, params, kind, task = split_repo
    inputs = read_model_inputs(args, params.train, task)
    if task == "node":
        roles = io.read_typed_role_codes(args.split, inputs.graph)
        assert roles.dtype == np.int8 and roles.shape == inputs.graph.y.shape
        assert (roles == ROLE_CODES["train"]).any()
        return
    edge_type, sup = read_supervision(args, inputs, SINGLE)
    assert (edge_type is None) == (kind == "homogeneous")
    if edge_type is not None:  # typed: ids of the typed models' output rows (offsets)
        offsets = inputs.graph.offsets()
        src = sup.edges["train_supervision"][0]
        assert src.min() >= offsets[edge_type[0]]
        assert src.max() < offsets[edge_type[0]] + inputs.graph.num_nodes_dict[edge_type[0]]


def test_the_mlp_reads_no_edges(split_repo):
    args, params, kind, task = split_repo
    cfg = params.train.__class__(**{**vars(params.train), "model": "mlp"})
    inputs = read_model_inputs(args, cfg, task)
    if kind == "homogeneous":
        assert all(p.edge_index is None for p in inputs.phases.values())
    else:  # the typed MLP takes the typed edges like every typed model and ignores them
        assert all(isinstance(p.edge_index, dict) for p in inputs.phases.values())
    assert inputs.meta({})["model"] == "mlp"


def test_the_typed_view_reads_what_the_model_inputs_read(split_repo):
    """splitting/inputs.py's typed view of either kind (a homogeneous graph as its one type):
    the same model features, roles and link supervision, down to the training negatives drawn."""
    args, params, kind, task = split_repo
    typed = read_model_typed(args)
    inputs = read_model_inputs(args, params.train, task)
    assert typed.graph.layout == kind
    assert typed.graph.node_types == inputs.graph.node_types
    assert all(torch.equal(typed.graph.x[t], x) for t, x in inputs.graph.x.items())
    if task == "node":
        assert np.array_equal(io.read_typed_role_codes(args.split, typed.graph),
                              io.read_typed_role_codes(args.split, inputs.graph))
        return
    edge_type, sup = read_typed_link_supervision(args, typed)
    _, expected = read_supervision(args, inputs, SINGLE)
    assert edge_type == io.read_typed_link_split(args.split, typed.graph)[0]
    assert all(torch.equal(sup.edges[r], expected.edges[r]) for r in expected.edges)
    assert all(torch.equal(sup.negatives[p], expected.negatives[p]) for p in expected.negatives)
    heads = expected.edges["train_supervision"][0].numpy()
    assert np.array_equal(sup.sampler.sample(heads, 3, np.random.default_rng(0)),
                          expected.sampler.sample(heads, 3, np.random.default_rng(0)))
