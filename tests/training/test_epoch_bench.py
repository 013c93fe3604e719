"""The epoch benches' own helpers (bench/epoch_steps.py, bench/train_epoch.py,
bench/typed_epoch.py): fit's step split changes nothing fit computes and accounts for its
epoch, the bare loop is timed alike, fit's epoch runs the bare loop's tensor ops, the
OGB-MAG-shaped graph keeps its shape, and the per-hop counts read off a breadth-first typed
sample are the sampler's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from conftest import make_tiny_graph
from torch_geometric.sampler import NodeSamplerInput

from gnnpipe.config import CheckpointParams, NeighborParams, TrainParams
from gnnpipe.sampling import HeteroNeighborSampler
from gnnpipe.sampling.builders import neighbor_batches
from gnnpipe.training.loop import LoopOptions
from gnnpipe.training.models import build_model
from gnnpipe.training.train import fit

# bench/ is a folder of the repository, not part of the installed package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _fit(clock=None):
    graph = make_tiny_graph(60)
    cfg = TrainParams(model="sage", sampler="neighbor", hidden=8, epochs=2, patience=3,
                      batch_size=8, neighbor=NeighborParams((3, 2)),
                      checkpoint=CheckpointParams(every=0))
    loader = neighbor_batches(graph.x, graph.y, graph.csr, torch.arange(30), cfg.neighbor, 0,
                              batch_size=cfg.batch_size)
    watch = clock.watch if clock else (lambda m: m)
    build = lambda: watch(build_model("sage", 2, 3, cfg))  # noqa: E731
    return fit(build, None, None, None, cfg, seed=0,
               loader=clock.loader(loader) if clock else loader,
               evaluator=_no_evaluation(graph))


def _no_evaluation(graph):
    from bench.train_epoch import NoEvaluation

    return NoEvaluation(torch.arange(60), np.repeat(np.int8([0, 1]), 30), 3)  # train, val


def test_step_clock_splits_fit_without_changing_it():
    from bench.epoch_steps import PHASES, StepClock

    clock = StepClock()
    with clock:
        timed = _fit(clock)
    plain = _fit()
    assert [h["train_loss"] for h in timed.history] == [h["train_loss"] for h in plain.history]
    assert len(clock.epochs) == 2
    for i, row in enumerate(timed.perf_history):
        split = clock.split(i, row["train_seconds"])
        assert set(split) == {f"{p}_seconds" for p in PHASES}
        assert all(split[f"{p}_seconds"] > 0 for p in ("sample", "gather", "assemble",
                                                       "forward", "backward", "optimizer"))
        assert split["other_seconds"] >= 0
        assert abs(sum(split.values()) - row["train_seconds"]) < 1e-9
    # the hooks are gone: another optimizer's step is not charged
    before = dict(clock.epochs[-1])
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    assert clock.epochs[-1] == before


def _bare_loop(tally=None):
    """The bench's bare loop (``plain_epoch``, trimmed) over ``_fit``'s graph, loader and model."""
    from bench.epoch_steps import plain_epoch
    from bench.train_epoch import homogeneous_inputs

    graph = make_tiny_graph(60)
    cfg = TrainParams(model="sage", sampler="neighbor", hidden=8, batch_size=8,
                      neighbor=NeighborParams((3, 2)))
    loader = neighbor_batches(graph.x, graph.y, graph.csr, torch.arange(30), cfg.neighbor, 0,
                              batch_size=cfg.batch_size)
    torch.manual_seed(0)
    model = build_model("sage", 2, 3, cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    return plain_epoch(model, optimizer, loader.loader, homogeneous_inputs, trim=True,
                       tally=tally), model


def test_plain_epoch_is_timed_as_fit_over_the_whole_epoch():
    """The bare loop's row uses fit's clock: its split holds every phase but the adapter's and
    sums to the epoch's wall time, and the clock's hooks are gone afterwards."""
    from bench.epoch_steps import PHASES

    e, model = _bare_loop()
    assert e["batches"] == 4 and e["seeds"] == 30
    split = {k[:-len("_seconds")]: v for k, v in e.items()
             if k.endswith("_seconds") and k != "seconds"}
    assert set(split) == set(PHASES) - {"assemble"}
    assert all(split[p] > 0 for p in ("sample", "gather", "forward", "backward", "optimizer"))
    assert split["other"] >= 0
    assert abs(sum(split.values()) - e["seconds"]) < 1e-9
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_fit_runs_the_bare_loops_tensor_work():
    """One epoch of fit executes exactly the aten ops of the bare loop on the same loader and
    model (the same steps and one loss sum each): whatever fit adds is Python bookkeeping."""
    from bench.epoch_steps import Tally, timed_fit

    mine, bare = Tally(), Tally()
    graph = make_tiny_graph(60)
    cfg = TrainParams(model="sage", sampler="neighbor", hidden=8, epochs=1, patience=2,
                      batch_size=8, neighbor=NeighborParams((3, 2)),
                      checkpoint=CheckpointParams(every=0))
    loader = neighbor_batches(graph.x, graph.y, graph.csr, torch.arange(30), cfg.neighbor, 0,
                              batch_size=cfg.batch_size)
    timed_fit(lambda: build_model("sage", 2, 3, cfg), cfg, 0, loader, _no_evaluation(graph),
              LoopOptions(), tally=mine)
    _bare_loop(bare)
    assert mine.batches == bare.batches == 4
    assert sum(mine.ops.values()) > 100 and mine.calls > bare.calls > 0
    assert mine.differences(bare) == {}


def test_mag_like_graph_has_ogb_mag_shape():
    from bench.typed_epoch import MAG_EDGES, MAG_NODES, mag_like_graph

    graph = mag_like_graph(0.001, 4, 5, 1.0, 0)
    assert graph.num_nodes_dict == {t: round(n * 0.001) for t, n in MAG_NODES.items()}
    for (s, rel, d), count in MAG_EDGES.items():
        forward = graph.csr[(s, rel, d)]
        assert forward.num_nodes == graph.num_nodes_dict[d]
        assert int(forward.indices.max()) < graph.num_nodes_dict[s]
        if s == d:  # cites stored both ways in one type
            assert forward.num_edges == 2 * round(count * 0.001)
        else:  # the reverse type holds the same edges flipped
            back = graph.csr[(d, f"rev_{rel}", s)]
            assert forward.num_edges == back.num_edges == round(count * 0.001)
            pairs = lambda c: sorted(zip(c.targets().tolist(), c.indices.tolist()))  # noqa: E731
            assert pairs(forward) == sorted((b, a) for a, b in pairs(back))
    assert graph.y.max() < 5 and all(x.shape[1] == 4 for x in graph.x.values())


def test_hetero_hop_counts_reads_back_a_breadth_first_samples_counts():
    """gnnpipe's typed sample is breadth-first as torch-sparse's (nodes per type and edges per
    edge type stored hop by hop, targets ascending): the counts read off it are its own."""
    from bench.typed_epoch import hetero_hop_counts, mag_like_graph

    graph = mag_like_graph(0.002, 4, 5, 1.0, 0)
    sampler = HeteroNeighborSampler(graph.num_nodes_dict, graph.csr, [4, 3], seed=0)
    for seeds in (torch.arange(0, 40, 3), torch.tensor([5]), torch.arange(200, 300)):
        out = sampler.sample_from_nodes(NodeSamplerInput(seeds, seeds, input_type="paper"))
        nodes, edges = out.num_sampled_nodes, out.num_sampled_edges
        out.num_sampled_nodes = out.num_sampled_edges = None
        read = hetero_hop_counts(out, 2, "paper")
        assert read.num_sampled_nodes == nodes
        assert read.num_sampled_edges == edges
