"""Link evaluation in shares under DDP (issue 43 item 2): each rank reads only its rows of the
val / test positives' fixed and hard negatives (``distributed.share_rows``, Parquet batches) and
scores them; the per-positive ranks (each epoch) and the scores (rank 0, at the end) are gathered
in order, so the figures are one process's, bit for bit, from the same scores."""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import traceback
from functools import partial

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import torch.distributed as dist
import yaml

from mapped_pages import mapped_file

from gnnpipe.cli import main
from gnnpipe.config import load_params
from gnnpipe.io import splits
from gnnpipe.io.temps import SCRATCH_ENV, SCRATCH_NAME
from gnnpipe.io.typed import read_typed_link_split
from gnnpipe.training.distributed import SINGLE, DistContext, gather_rows, share_rows
from gnnpipe.training import link_train
from gnnpipe.training.link_train import LinkTask, val_scores
from gnnpipe.training.model_inputs import read_model_inputs, read_supervision

GRAPHS = {"homogeneous": {"synthetic": {"num_nodes": 160, "num_features": 4, "num_classes": 3}},
          "typed": {"layout": "typed", "synthetic": {"num_nodes": 120, "num_authors": 50,
                                                     "num_venues": 4, "num_features": 4}}}


@pytest.mark.parametrize("count", [0, 1, 5, 7, 12])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_shares_cover_every_row_once_in_order(count, world):
    rows = [share_rows(count, DistContext(r, world, r)) for r in range(world)]
    assert [i for s in rows for i in range(s.start, s.stop)] == list(range(count))
    assert all(s.step is None for s in rows)


@pytest.fixture(scope="module", params=list(GRAPHS))
def link_split(request, tmp_path_factory):
    """(args, params) of a link split with hard negatives, of each layout."""
    root = tmp_path_factory.mktemp(request.param)
    (root / "params.yaml").write_text(yaml.safe_dump({
        "dataset": {**GRAPHS[request.param], "task": "link"},
        "split": {"link": {"num_val_negatives": 6, "num_test_negatives": 5,
                           "num_hard_negatives": 3}}}))
    with contextlib.chdir(root):
        assert main(["prepare"]) == 0 and main(["split"]) == 0
    args = argparse.Namespace(prepared=root / "data/prepared", split=root / "data/split",
                              features=root / "data/features")
    return args, load_params(root / "params.yaml")


@pytest.mark.parametrize("world", [2, 3])
def test_each_rank_reads_only_its_rows_of_the_negatives(link_split, world, monkeypatch):
    """Across several Parquet batches (7 rows each), the ranks' rows put together are the one
    process's whole read; the positives stay whole."""
    args, params = link_split
    monkeypatch.setattr(splits, "NEGATIVE_BATCH_ROWS", 7)
    inputs = read_model_inputs(args, params.train, "link")
    _, whole = read_supervision(args, inputs, SINGLE)
    assert whole.hard is not None
    shares = [read_supervision(args, inputs, DistContext(r, world, r))[1] for r in range(world)]
    for phase in ("val", "test"):
        positives = whole.edges[phase].shape[1]
        assert positives > world  # every rank holds rows
        for name in ("negatives", "hard"):
            parts = [getattr(s, name)[phase] for s in shares]
            assert max(p.shape[0] for p in parts) < positives
            assert torch.equal(torch.cat(parts), getattr(whole, name)[phase]), (phase, name)
        assert all(torch.equal(s.edges[phase], whole.edges[phase]) for s in shares)


def test_a_share_still_checks_its_rows(tmp_path, monkeypatch):
    """A row of another positive's source inside a rank's share is refused, as in one read."""
    monkeypatch.setattr(splits, "NEGATIVE_BATCH_ROWS", 7)
    heads = np.arange(10, dtype=np.int64)
    targets = torch.arange(30).reshape(10, 3)
    path = tmp_path / "negatives_val.parquet"
    splits._write_negatives(path, [(heads, targets.numpy())])
    read = splits.read_negatives_table(path, 3, heads, 100, "val", slice(4, 8))
    assert torch.equal(read, targets[4:8])
    wrong = heads.copy()
    wrong[6] = 9
    with pytest.raises(ValueError, match="grouped by positive"):
        splits.read_negatives_table(path, 3, wrong, 100, "val", slice(4, 8))
    splits.read_negatives_table(path, 3, wrong, 100, "val", slice(0, 4))  # not this share's
    with pytest.raises(ValueError, match="do not make 3 negatives for each of the 9"):
        splits.read_negatives_table(path, 3, heads[:9], 100, "val", slice(0, 4))


def test_a_task_refuses_negatives_that_are_not_its_share():
    edges = {role: torch.zeros(2, 5, dtype=torch.long)
             for role in ("message", "train_supervision", "val", "test")}
    whole = {p: torch.zeros(5, 2, dtype=torch.long) for p in ("val", "test")}
    LinkTask({}, edges, whole, None)  # one process: every row
    with pytest.raises(ValueError, match="val: 5 rows of negatives for rank 1's 2 of 5"):
        LinkTask({}, edges, whole, None, ctx=DistContext(1, 2, 1))
    share = {p: t[3:] for p, t in whole.items()}  # rank 1's rows 3..4
    LinkTask({}, edges, share, None, ctx=DistContext(1, 2, 1), hard_negatives=share)
    with pytest.raises(ValueError, match="test hard: 5 rows of negatives for rank 1's 2 of 5"):
        LinkTask({}, edges, share, None, ctx=DistContext(1, 2, 1),
                 hard_negatives={"val": share["val"], "test": whole["test"]})


def _rank(rank: int, world: int, init: str, pos, neg, out) -> None:
    """One forked rank: its share's val figures and the gathered scores (rank 0: in a mapped
    scratch file of the stage's folder, ``GNNPIPE_SCRATCH_DIR``)."""
    try:
        os.environ[SCRATCH_ENV] = init.removeprefix("file://").rsplit("/", 1)[0]
        ctx = DistContext(rank, world, rank)
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
        rows = share_rows(pos.shape[0], ctx)
        calls = []  # val_scores' collectives: one stacked gather of ranks and ties

        def counted(*args, **kwargs):
            calls.append(1)
            return gather_rows(*args, **kwargs)

        link_train.gather_rows = counted  # this forked rank's module only
        figures = val_scores(pos[rows].numpy(), neg[rows].numpy(), ctx, pos.shape[0])
        figures["collectives"] = len(calls)
        gathered = gather_rows(neg[rows], pos.shape[0], ctx)
        if gathered is not None:
            figures["mapped"] = mapped_file(gathered)
        out.put((rank, figures, None if gathered is None else gathered.numpy()))
        dist.destroy_process_group()
    except Exception:  # the parent asserts on it
        out.put((rank, traceback.format_exc(), None))


def test_ranks_gather_one_process_figures_and_scores(tmp_path):
    """Three ranks (forked: no new interpreter) over 7 positives, shares 3 / 3 / 1, scores with
    ties: every rank's val figures equal one process's exactly; rank 0 gets every score row in
    order, the others nothing."""
    generator = torch.Generator().manual_seed(0)
    pos = torch.randint(0, 4, (7,), generator=generator).float()
    neg = torch.randint(0, 4, (7, 5), generator=generator).float()  # ties with the positives
    world, context = 3, multiprocessing.get_context("fork")
    out = context.Queue()
    procs = [context.Process(target=_rank, args=(r, world, f"file://{tmp_path}/store", pos, neg,
                                                 out)) for r in range(world)]
    for proc in procs:
        proc.start()
    results = dict((r, (f, g)) for r, f, g in (out.get(timeout=60) for _ in procs))
    for proc in procs:
        proc.join(timeout=30)
    expected = {**val_scores(pos.numpy(), neg.numpy()), "collectives": 1}
    assert 0 < expected["val_tied_share"] < 1
    mapped = results[0][0].pop("mapped")  # rank 0's whole table: a scratch file, unlinked
    assert SCRATCH_NAME.name in mapped and mapped.endswith("(deleted)"), mapped
    assert not list(tmp_path.glob(f".{SCRATCH_NAME.name}*"))  # nothing left on disk
    for rank in range(world):
        assert results[rank][0] == expected, results[rank][0]
    assert np.array_equal(results[0][1], neg.numpy())
    assert results[1][1] is None and results[2][1] is None


@pytest.mark.parametrize("world", [1, 2])
def test_training_reads_the_link_edges_into_scratch_files(link_split, world, tmp_path,
                                                          monkeypatch):
    """Under a stage's scratch folder each process's train supervision, val and test positives
    are read by Parquet batches (7 edges each here) into unlinked mapped scratch tables, equal to
    the whole read, with the negatives of its share; the message edges are not held."""
    args, params = link_split
    monkeypatch.setattr(splits, "EDGE_BATCH_ROWS", 7)
    graph = read_model_inputs(args, params.train, "link").graph
    edge_type, _, negatives = read_typed_link_split(args.split, graph)
    whole = {role: torch.from_numpy(np.stack([  # the files as pyarrow reads them, whole
        table.column("src").to_numpy(), table.column("dst").to_numpy()]).astype(np.int64))
        for role in splits.TRAINING_LINK_ROLES
        for table in [pq.read_table(args.split / f"edges_{role}.parquet")]}
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path))
    rows = partial(share_rows, ctx=DistContext(world - 1, world, world - 1))
    got_type, edges, shares = read_typed_link_split(args.split, graph, rows,
                                                    splits.TRAINING_LINK_ROLES)
    assert got_type == edge_type and set(edges) == {"train_supervision", "val", "test"}
    for role, pair in edges.items():
        where = mapped_file(pair)
        assert SCRATCH_NAME.name in where and where.endswith("(deleted)"), (role, where)
        assert torch.equal(pair, whole[role]), role
    for phase, targets in shares.items():
        assert torch.equal(targets, negatives[phase][rows(whole[phase].shape[1])]), phase


def test_a_rank_searches_its_forbidden_keys_in_a_scratch_file(link_split, tmp_path, monkeypatch):
    """A rank's training negative sampler (read_supervision under a stage's scratch folder)
    holds its sorted keys in an unlinked scratch file, and its link edges in others: the
    edges, keys and draws of the in-memory read."""
    args, params = link_split
    inputs = read_model_inputs(args, params.train, "link")
    _, memory = read_supervision(args, inputs, SINGLE)
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path))
    _, sup = read_supervision(args, inputs, DistContext(1, 2, 1))
    where = mapped_file(torch.from_numpy(sup.sampler.forbidden))
    assert SCRATCH_NAME.name in where and where.endswith("(deleted)"), where
    assert set(sup.edges) == {"train_supervision", "val", "test"}  # the message edges: keys
    for role, pair in sup.edges.items():  # whole (typed: shifted in place), shares are views
        assert mapped_file(pair).endswith("(deleted)") and torch.equal(
            pair, memory.edges[role]), role
    assert np.array_equal(sup.sampler.forbidden, memory.sampler.forbidden)
    heads = memory.edges["train_supervision"][0].numpy()
    assert np.array_equal(sup.sampler.sample(heads, 2, np.random.default_rng(3)),
                          memory.sampler.sample(heads, 2, np.random.default_rng(3)))
