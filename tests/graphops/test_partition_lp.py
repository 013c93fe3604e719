"""partition.method lp: block files, the exact cap plan, the same parts for any blocks or
engine (local; Dask with 2 and 1 workers in tests/graphops/test_partition_blocks.py, sharing its
cluster), and a cut far below random on a community graph."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from gnnpipe.config import PartitionParams, SyntheticParams
from gnnpipe.data import synthetic
from gnnpipe.data.graph import Csr
from gnnpipe.data.edges import csr_from_edges
from graph_oracle import normalize_edges
from shard_oracle import partition_report
from gnnpipe.graphops.partition_lp import (GAIN_ZERO, part_caps, permute, plan_inflow,
                                           split_ranges, swap_limits)
from gnnpipe.io import csr_blocks
from block_files import write_blocks
from lp_oracle import assign_parts, lp_partition


@pytest.fixture(scope="module")
def community_csr() -> Csr:
    cfg = SyntheticParams(num_nodes=3000, num_classes=4, num_features=2, avg_degree=8.0,
                          homophily=0.95, degree_skew=0.5)
    raw = synthetic.generate(cfg, np.random.default_rng(0))
    csr, _ = normalize_edges(raw["src"], raw["dst"], cfg.num_nodes, undirected=True, dedup=True,
                             remove_self_loops=True)
    return csr


def _lp(csr, k=4, **kw):
    return assign_parts(csr, PartitionParams(method="lp", num_parts=k, **kw),
                        np.random.default_rng(0))


def test_block_files_hold_the_graph_and_its_transpose(tmp_path):
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 50, 400), rng.integers(0, 50, 400)  # directed, loops, repeats
    csr = csr_from_edges(src, dst, 50)
    write_blocks(tmp_path, csr, block_rows=7)  # the transpose is built in many blocks
    assert csr_blocks.num_block_nodes(tmp_path) == 50
    row, neighbour = csr_blocks.gather_block_rows(tmp_path, slice(10, 20))
    expected = [(v, u) for u, v in zip(csr.indices.tolist(), csr.targets().tolist())
                if 10 <= v < 20]  # in-edges of rows 10..19 ...
    expected += [(u, v) for u, v in zip(csr.indices.tolist(), csr.targets().tolist())
                 if 10 <= u < 20]  # ... and their out-edges
    assert sorted(zip((row + 10).tolist(), neighbour.tolist())) == sorted(expected)
    out_indices = np.load(tmp_path / "out_indices.npy")
    out_indptr = np.load(tmp_path / "out_indptr.npy")
    for u in range(50):  # every out-list ascending
        assert np.all(np.diff(out_indices[out_indptr[u]:out_indptr[u + 1]]) >= 0)


def test_permute_is_a_seeded_bijection():
    ids = np.arange(1 << 10)
    once = permute(3, 1, ids, 10)
    assert np.array_equal(np.sort(once), ids)
    assert not np.array_equal(once, permute(3, 2, ids, 10))


def test_plan_lets_two_full_parts_swap_and_never_passes_a_cap():
    sizes, cap = np.array([100, 100, 90]), np.array([100, 100, 110])
    # rows target, cell, source, count: 0 <-> 1 both full (30 one way, 20 the other), 2 -> 0
    hist = np.array([[1, 1, 0, 0, 0], [9, 8, 9, 5, 7], [0, 0, 1, 2, 1], [10, 20, 15, 5, 5]])
    inflow = plan_inflow(hist, sizes, cap)
    assert inflow.taken.tolist()[:2] == [20, 20]  # the swap goes through, as far as it balances
    # the cell holding the last one taken, and its rank there (cells best first)
    assert inflow.cell[1] == 8 and inflow.rank[1] == 10  # 10 of cell 9, then 10 of cell 8
    assert inflow.cell[0] == 7 and inflow.rank[0] == 5  # 15 of cell 9, 5 of cell 7; none from 2
    out_lower = {0: 20, 1: 20}
    for p in (0, 1):
        assert sizes[p] + inflow.taken[p] - out_lower[p] <= cap[p]


def test_plan_under_a_limit_still_cuts_inside_a_cell():
    # 30 proposals into part 1 in one cell, at most 12 of them: the threshold falls inside it
    hist = np.array([[1], [4], [0], [30]])
    inflow = plan_inflow(hist, np.array([50, 50]), np.array([100, 100]), np.array([0, 12]))
    assert inflow.taken.tolist() == [0, 12] and inflow.cell[1] == 4 and inflow.rank[1] == 12


def _cell(gain: int) -> int:
    return (GAIN_ZERO + gain) << 8  # CELL_BITS: the gain bucket above the permuted id's bits


def test_swap_limits_pair_the_best_of_both_directions_while_the_pair_gains():
    sibling = np.array([1, 0])
    # into 1 (from 0): gains 5 x3, then -1 x4; into 0 (from 1): gains 2 x2, -3 x10
    hist = np.array([[1, 1, 0, 0], [_cell(5), _cell(-1), _cell(2), _cell(-3)], [0, 0, 1, 1],
                     [3, 4, 2, 10]])
    limit = swap_limits(hist, sibling, 8)
    # pairs by rank: 5+2, 5+2, 5-3 (> 0), -1-3: three swaps; part 1 also takes its 3 gainers
    assert limit.tolist() == [3, 3]
    no_pairs = np.array([[1, 0], [_cell(-1), _cell(-2)], [0, 1], [4, 4]])
    assert swap_limits(no_pairs, sibling, 8).tolist() == [0, 0]


def test_split_ranges_halves_parts_in_proportion_within_their_caps():
    labels = np.zeros(10, dtype=np.int32)
    caps = part_caps(10, 3, 0.0)
    ranges, sibling, cap = split_ranges(labels, [(0, 3)], caps)
    assert ranges == [(0, 1), (1, 3)]
    assert labels.tolist() == [0] * 3 + [1] * 7  # one part of three: the first ids
    assert sibling.tolist() == [1, 0, -1] and cap.tolist() == [4, 7, 0]


def test_lp_is_balanced_and_cuts_far_less_than_random(community_csr):
    parts = _lp(community_csr, k=4, imbalance=0.03)
    report = partition_report(community_csr, parts, 4)
    assert parts.dtype == np.int32 and parts.shape == (community_csr.num_nodes,)
    assert max(report["part_sizes"]) <= np.ceil(1.03 * community_csr.num_nodes / 4)
    assert report["edge_cut_fraction"] < 0.3  # random: 0.75
    assert np.array_equal(parts, _lp(community_csr, k=4, imbalance=0.03))


def test_the_library_leaves_lp_of_a_csr_in_memory_to_the_oracle(community_csr):
    from gnnpipe.graphops import partition

    with pytest.raises(ValueError, match="partition.method=lp partitions the stored graph by"):
        partition.assign_parts(community_csr, PartitionParams(method="lp", num_parts=2),
                               np.random.default_rng(0))


@pytest.mark.parametrize("k", [3, 7])
def test_lp_parts_do_not_depend_on_the_blocks(community_csr, k):
    # 10 sweeps a level, not 30 (a third of the time on 31 blocks): parts already reach caps
    one = _lp(community_csr, k=k, block_rows=5000, iterations=10)
    many = _lp(community_csr, k=k, block_rows=97, iterations=10)
    assert np.array_equal(one, many)
    assert np.bincount(one, minlength=k).max() <= np.ceil(1.03 * community_csr.num_nodes / k)


def test_lp_on_a_directed_graph_with_loops_counts_both_directions():
    # two directed 4-cycles joined by one edge: each cycle is one part
    src = [0, 1, 2, 3, 4, 5, 6, 7, 3, 5, 5]
    dst = [1, 2, 3, 0, 5, 6, 7, 4, 4, 5, 5]
    csr = csr_from_edges(np.array(src), np.array(dst), 8)
    parts = _lp(csr, k=2, imbalance=0.001)
    assert sorted(np.bincount(parts).tolist()) == [4, 4]
    assert len(set(parts[:4].tolist())) == 1 and len(set(parts[4:].tolist())) == 1


@pytest.mark.parametrize("raw", [{"node_weight": "degree"}, {"edge_weight": "multiplicity"}])
def test_lp_refuses_metis_weights(raw):
    from gnnpipe.config import ParamsError, params_from_dict

    with pytest.raises(ParamsError, match=r"partition\.method='lp' balances node counts"):
        params_from_dict({"partition": {"method": "lp", **raw}})


def test_partition_stage_runs_lp_on_the_local_engine(tmp_path, monkeypatch):
    import json

    import yaml

    from gnnpipe import io
    from gnnpipe.cli import main

    monkeypatch.chdir(tmp_path)
    params = {"dataset": {"synthetic": {"num_nodes": 1200, "num_features": 4, "num_classes": 3}},
              "partition": {"method": "lp", "num_parts": 4, "halo_hops": 1, "block_rows": 500}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert main(["prepare"]) == 0 and main(["split"]) == 0 and main(["partition"]) == 0
    parts = io.read_partition(tmp_path / "data/partition")
    metrics = json.loads((tmp_path / "metrics/partition.json").read_text())
    assert metrics["method"] == "lp" and metrics["backend"] == "none"
    assert np.bincount(parts, minlength=4).max() <= np.ceil(1.03 * 1200 / 4)
    assert metrics["edge_cut_fraction"] < 0.6  # random: 0.75


def test_propose_reads_the_labels_of_its_rows_and_their_neighbours_only(tmp_path, monkeypatch):
    from gnnpipe.graphops import partition_lp

    rng = np.random.default_rng(2)
    csr = csr_from_edges(rng.integers(0, 400, 1600), rng.integers(0, 400, 1600), 400)
    write_blocks(tmp_path, csr)
    csr_blocks.write_labels(tmp_path, 0, rng.integers(0, 4, 400))
    asked = []
    real = partition_lp.gather_labels

    def recording(folder, step, rows):
        asked.append(np.arange(400)[rows] if isinstance(rows, slice) else np.asarray(rows))
        return real(folder, step, rows)

    monkeypatch.setattr(partition_lp, "gather_labels", recording)
    partition_lp.propose((100, 150), tmp_path, 0, 4, 7)
    row, neighbour = csr_blocks.gather_block_rows(tmp_path, slice(100, 150))
    needed = set(range(100, 150)) | set(neighbour.tolist())
    assert set(np.concatenate(asked).tolist()) <= needed and len(needed) < 400


def test_labels_are_stored_int32_and_gathered_by_any_rows(tmp_path):
    rng = np.random.default_rng(5)
    values = rng.integers(-9, 9, 101)
    csr_blocks.write_labels(tmp_path, 3, values)
    ids = rng.integers(3, 97, 500)  # repeats, any order, a span short of the ends
    assert np.array_equal(csr_blocks.gather_labels(tmp_path, 3, ids), values[ids])
    assert np.array_equal(csr_blocks.gather_labels(tmp_path, 3, slice(7, 60)), values[7:60])
    assert csr_blocks.gather_labels(tmp_path, 3, ids[:0]).dtype == np.int32
    with pytest.raises(IndexError, match=r"labels_3\.npy: rows outside"):
        csr_blocks.gather_labels(tmp_path, 3, np.array([5, 101]))
    csr_blocks.remove_labels(tmp_path, 3)
    assert not (tmp_path / "labels_3.npy").exists()


def test_label_counts_count_every_edge_but_self_loops(tmp_path):
    from gnnpipe.graphops.partition_lp import label_counts

    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 40, 300), rng.integers(0, 40, 300)
    src[:20] = dst[:20]  # self-loops, some repeated
    write_blocks(tmp_path, csr_from_edges(src, dst, 40))
    labels = rng.integers(0, 5, 40)
    row, neighbour = csr_blocks.gather_block_rows(tmp_path, slice(10, 30))
    expected = np.zeros((20, 5), dtype=np.int64)
    for u, v in zip(src.tolist(), dst.tolist()):  # either direction, one edge at a time
        for here, there in ((v, u), (u, v)):
            if 10 <= here < 30 and here != there:
                expected[here - 10, labels[there]] += 1
    got = label_counts(row, neighbour, labels[neighbour], 10, 30, 5)
    assert np.array_equal(got, expected)


def test_a_sweep_keeps_its_proposals_in_the_block_folder_not_in_task_results(community_csr,
                                                                             tmp_path,
                                                                             monkeypatch):
    # held as task results, a bisection sweep's proposals (32 B a node) grew lp's workers
    from gnnpipe.graphops import partition_lp
    from gnnpipe.graphops.partition_lp import lp_parts
    from gnnpipe.runtime import engine

    calls = []

    def run(client, fn, items, **common):
        results = engine.run_blocks(client, fn, items, **common)
        calls.append((fn.__name__, [item for (item,) in items], results))
        return results

    def fold(client, fn, items, combine, **common):  # histograms: merged as each task ends
        return functools.reduce(combine, run(client, fn, items, **common))

    monkeypatch.setattr(partition_lp, "run_blocks", run)
    monkeypatch.setattr(partition_lp, "fold_blocks", fold)
    write_blocks(tmp_path, community_csr)
    cfg = PartitionParams(method="lp", num_parts=4, block_rows=700, iterations=3)
    parts = lp_parts(tmp_path, cfg, 11)
    monkeypatch.undo()
    assert np.array_equal(parts, lp_partition(community_csr, cfg, 11))
    names = {name for name, _, _ in calls}
    assert names == {"propose_block", "block_cell_keys", "block_moves"}
    blocks = csr_blocks.row_ranges(community_csr.num_nodes, 700)
    for name, items, results in calls:  # every task reads its rows' files, never a result
        assert items == blocks, name
        if name == "propose_block":  # histograms: int64 (4, b), no per-node rows
            assert all(r.shape[0] == 4 for r in results)
        elif name == "block_moves":
            assert all(isinstance(r, int) for r in results)
    moved = sum(sum(r) for name, _, r in calls if name == "block_moves")
    assert moved > community_csr.num_nodes // 4  # the sweeps did move nodes
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["indices.npy", "indptr.npy", "out_indices.npy", "out_indptr.npy"], left
