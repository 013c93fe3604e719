"""The node split and its audit by blocks (gnnpipe/splitting/split.py, audit.py), the one node
split on both engines: roles and message graphs equal a small whole-graph oracle (here) for
homogeneous and typed graphs, hash and time strategies, at any block size; the audit is the same
for any block size, and fails a leaking split naming the edge type; the stage writes the same
bytes on cluster.engine local and on Dask with 1 and 2 workers. Block tasks run in this process
(a client of None) with tiny blocks, except where a test says a cluster."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from conftest import scale_cluster, small_params
from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.config import NodeSplitParams, params_from_dict
from gnnpipe.config.errors import ParamsError
from gnnpipe.data.edges import edge_pairs
from gnnpipe.data.graph import EDGE, ROLES, Csr, Graph
from graph_oracle import prepare
from gnnpipe.splitting import audit, hash_assign, split
from gnnpipe.runtime.rng import mix
from gnnpipe.splitting.hash_assign import NODE_STEP, radix_counts, select_keys, summed
from gnnpipe.splitting.ordered_split import ordered_sizes
from gnnpipe.splitting.split import BlockSizes
from split_oracle import audit_node_split, split_nodes

TINY = BlockSizes(rows=61, edges=400)
SEED = 5
WRITES = ("author", "writes", "paper")


@pytest.fixture(scope="module")
def homogeneous() -> Graph:
    """600 nodes, every 7th unlabelled, float times with ties (quarters of 0..9)."""
    graph = prepare(small_params(num_nodes=600, num_features=4).dataset, 0)[0]
    graph.y[::7] = -1
    times = np.random.default_rng(1).integers(0, 40, 600) / 4.0
    return Graph(**{**graph.__dict__, "node_time": {"node": torch.from_numpy(times)}})


@pytest.fixture(scope="module")
def typed() -> Graph:
    """Papers / authors / venues, every 9th paper unlabelled, int years with many ties and an
    official split that names a few unlabelled papers."""
    dataset = params_from_dict({"dataset": {"layout": "typed", "synthetic": {
        "num_nodes": 400, "num_features": 4, "num_authors": 90}}}).dataset
    graph = prepare(dataset, 0)[0]
    graph.y[::9] = -1
    rng = np.random.default_rng(2)
    n = graph.y.numel()
    return Graph(**{**graph.__dict__,
                    "node_time": {"paper": torch.from_numpy(rng.integers(2000, 2008, n))},
                    "public_roles": torch.from_numpy(rng.integers(0, 4, n).astype(np.int8))})


def _oracle(graph: Graph, cfg: NodeSplitParams, seed: int):
    """Whole-graph roles (int8 codes) and, per phase, the kept (src, dst) of each edge type."""
    y = graph.y.numpy()
    labelled = y >= 0
    n = y.size
    sizes = split.checked_sizes(cfg, int(labelled.sum()), n)
    codes = np.full(n, 3, dtype=np.int8)
    times = graph.node_time.get(graph.target)
    if cfg.strategy == "time":
        sizes = ordered_sizes(cfg, sizes, int(labelled.sum()), n)
        ids = np.flatnonzero(labelled)
        order = ids[np.lexsort((ids, times.numpy()[ids]))]
        bounds = np.cumsum([sizes[p] for p in split.PHASES])
        codes[order] = np.searchsorted(bounds, np.arange(order.size), side="right")
    elif cfg.strategy == "public":
        codes = graph.public_roles.numpy().copy()
        codes[~labelled] = 3
    else:
        stratified = cfg.strategy == "stratified"
        pools = ([np.flatnonzero(y == c) for c in range(graph.num_classes)] if stratified
                 else [np.flatnonzero(labelled)])
        counts = split.phase_counts(cfg, sizes, np.array([p.size for p in pools]), n)
        for g, pool in enumerate(pools):
            order = pool[np.argsort(mix(seed, NODE_STEP, pool))]
            bounds = np.cumsum(counts[:, g])
            codes[order] = np.minimum(np.searchsorted(bounds, np.arange(order.size),
                                                      side="right"), 3)
    seen = {"train": (codes == 0) | ~labelled, "val": (codes <= 1) | ~labelled}
    if cfg.mode == "time":
        t = times.numpy()
        for phase, cut in (("train", (0,)), ("val", (0, 1))):
            seen[phase] = np.isin(codes, cut) | (~labelled & (t <= t[np.isin(codes, cut)].max()))
    kept = {}
    for phase in split.PHASES:
        kept[phase] = {}
        for e, csr in graph.csr.items():
            src, dst = edge_pairs(csr)
            keep = np.ones(src.size, dtype=bool)
            if cfg.mode != "transductive" and phase != "test":
                keep &= seen[phase][src] if e[0] == graph.target else True
                keep &= seen[phase][dst] if e[2] == graph.target else True
            kept[phase][e] = (src[keep], dst[keep])
    return codes, kept


def test_radix_selection_finds_the_key_of_each_rank_in_its_group(monkeypatch):
    rng = np.random.default_rng(0)
    keys = mix(3, NODE_STEP, np.arange(5000))
    keys[:40] = np.arange(40, dtype=np.uint64)  # a run sharing every high bit
    groups = rng.integers(-1, 4, keys.size)
    wanted = np.array([0, 0, 1, 3, 2, 0])
    ranks = np.array([1, 17, 300, 5, (groups == 2).sum(), 40])
    blocks = np.array_split(np.arange(keys.size), 7)

    def count(wanted, prefixes, shift, gather=False):
        calls.append(gather)
        return summed([radix_counts(keys[b], groups[b], wanted, prefixes, shift, gather)
                       for b in blocks], gather)

    expected = [int(k) for k in (np.sort(keys[groups == g])[r - 1] for g, r in zip(wanted, ranks))]
    calls = []
    assert select_keys(count, wanted, ranks).tolist() == expected
    assert calls == [False, True]  # one histogram round, then the bins' keys gathered
    monkeypatch.setattr(hash_assign, "GATHER_KEYS", 0)  # radix rounds all the way down
    calls = []
    assert select_keys(count, wanted, ranks).tolist() == expected
    assert calls == [False] * 8


CASES = [("homogeneous", dict(strategy="stratified", train=20, val=0.3, test=0.3,
                              per_class=True, mode="inductive")),
         ("homogeneous", dict(strategy="time")),  # float times, ties, unlabelled carriers
         ("typed", dict(strategy="random", mode="inductive")),
         ("typed", dict(strategy="time", train=0.5, val=0.2, test=0.3)),  # years: many ties
         ("typed", dict(strategy="public", mode="inductive"))]


@pytest.mark.parametrize("which, kw", CASES)
@pytest.mark.parametrize("sizes", [TINY, split.SIZES])
def test_blocks_give_the_whole_graph_split(request, monkeypatch, which, kw, sizes):
    graph = request.getfixturevalue(which)
    cfg = NodeSplitParams(**kw)
    monkeypatch.setattr(split, "SIZES", sizes)
    got = split_nodes(graph, cfg, seed=SEED)
    codes, kept = _oracle(graph, cfg, SEED)
    assert np.array_equal(got.roles, np.asarray(ROLES)[codes])
    for phase in split.PHASES:
        for e, (src, dst) in kept[phase].items():
            s, d = edge_pairs(got.message_graphs[phase][e])
            assert np.array_equal(s, src) and np.array_equal(d, dst), (phase, e)
    if cfg.mode == "transductive":  # phases share the prepared CSRs: one file
        assert all(got.message_graphs[p] is graph.csr for p in split.PHASES)
    untouched = [e for e in graph.edge_types if graph.target not in (e[0], e[2])]
    assert all(got.message_graphs["train"][e] is graph.csr[e] for e in untouched)
    report = audit_node_split(graph, got.roles, got.message_graphs, cfg.mode,
                              timed=cfg.strategy == "time")
    assert report["passed"], report["checks"]
    if cfg.strategy == "public":
        unlabelled = graph.y.numpy() < 0
        assert got.unlabelled_dropped == {p: int((unlabelled & (graph.public_roles.numpy() == i))
                                                 .sum()) for i, p in enumerate(split.PHASES)}


def test_the_audit_is_the_same_for_any_block_size(typed, monkeypatch):
    cfg = NodeSplitParams(strategy="time", mode="transductive")  # a waived time leak
    got = split_nodes(typed, cfg, seed=SEED)
    reports = []
    for sizes in (TINY, BlockSizes(rows=150, edges=90), split.SIZES):
        monkeypatch.setattr(split, "SIZES", sizes)
        reports.append(audit_node_split(typed, got.roles, got.message_graphs, cfg.mode,
                                        timed=True, future_visible=True))
    assert reports[0] == reports[1] == reports[2]
    entry = next(c for c in reports[0]["checks"] if c["check"] == "time_respecting")
    assert entry["waived"] and not entry["passed"] and reports[0]["passed"]
    assert reports[0]["warnings"] == [f"time_respecting: {entry['detail']}"]
    names = [c["check"] for c in reports[0]["checks"]]
    assert "message_train[author__writes__paper]_within_graph" in names
    assert reports[0]["cross_split_edges_relation"] == "paper__cites__paper"


def test_a_leak_through_another_edge_type_fails_the_audit(typed, homogeneous, monkeypatch):
    """The train phase given the whole author -> paper relation: the audit counts exactly the
    edges into a paper the train phase may not see; a homogeneous leak names its first node."""
    monkeypatch.setattr(split, "SIZES", TINY)
    cfg = NodeSplitParams(strategy="stratified", mode="inductive")
    got = split_nodes(typed, cfg, seed=SEED)
    leaky = {**got.message_graphs, "train": {**got.message_graphs["train"],
                                             WRITES: typed.csr[WRITES]}}
    report = audit_node_split(typed, got.roles, leaky, cfg.mode)
    failed = [c for c in report["checks"] if not c["passed"]]
    _, dst = edge_pairs(typed.csr[WRITES])
    hidden = (got.roles[dst] != "train") & ~((typed.y.numpy()[dst] < 0)
                                             & (got.roles[dst] == "unused"))
    assert [c["check"] for c in failed] == ["message_train[author__writes__paper]_sees_only_train"]
    assert failed[0]["detail"] == f"{int(hidden.sum())} edges touch paper nodes of other splits"
    assert report["message_edges"]["train"]["author__writes__paper"] == typed.csr[WRITES].num_edges
    with pytest.raises(audit.LeakageError, match=r"author__writes__paper\]_sees_only_train"):
        audit.raise_if_failed(report)
    got = split_nodes(homogeneous, cfg, seed=SEED)
    report = audit_node_split(homogeneous, got.roles,
                              {**got.message_graphs, "val": {EDGE: homogeneous.csr[EDGE]}},
                              cfg.mode)
    (failed,) = [c for c in report["checks"] if not c["passed"]]
    src, dst = edge_pairs(homogeneous.csr[EDGE])
    labelled = homogeneous.y.numpy() >= 0
    visible = np.isin(got.roles, ("train", "val")) | ~labelled
    first = int(np.flatnonzero(~visible)[np.isin(np.flatnonzero(~visible), np.r_[src, dst])][0])
    assert failed["check"] == "message_val_sees_only_train_val"
    assert failed["detail"].endswith(f"(first: node {first}, test)")
    # a message edge that is no edge of the graph: within_graph fails
    fake = Csr(homogeneous.csr[EDGE].indptr, (homogeneous.csr[EDGE].indices + 1) % 600)
    report = audit_node_split(homogeneous, got.roles, {**got.message_graphs,
                                                       "test": {EDGE: fake}}, cfg.mode)
    assert [c["check"] for c in report["checks"] if not c["passed"]] == \
        ["message_test_within_graph"]


def test_a_time_split_with_inductive_graphs_fails_the_time_check(typed):
    got = split_nodes(typed, NodeSplitParams(strategy="time", mode="inductive"), seed=SEED)
    report = audit_node_split(typed, got.roles, got.message_graphs, "inductive",
                              timed=True)
    (failed,) = [c for c in report["checks"] if not c["passed"]]
    assert failed["check"] == "time_respecting" and "use split.node.mode: auto" in failed["detail"]
    assert next(c for c in report["checks"] if c["check"] == "splits_in_time_order")["passed"]


@pytest.mark.parametrize("kw, graph_kw, message", [
    (dict(strategy="public"), {"public_roles": None}, r"needs a dataset with an official split"),
    (dict(strategy="time"), {"node_time": {}}, r"strategy=time needs node timestamps"),
    (dict(strategy="random", train=300, val=100, test=100), {},
     r"= 500 nodes exceeds the graph's 355 labelled nodes \(of 400\)"),
    (dict(strategy="stratified", train=0.9, val=0.09, test=0.0001), {},
     r"split\.node\.test resolves to 0 nodes"),
])
def test_what_cannot_be_split_is_one_line(typed, kw, graph_kw, message):
    with pytest.raises(ValueError, match=message):
        split_nodes(Graph(**{**typed.__dict__, **graph_kw}), NodeSplitParams(**kw), seed=SEED)


def test_the_one_assignment_is_hash_and_permutation_is_refused():
    assert params_from_dict({}).split.assign == "hash"
    with pytest.raises(ParamsError, match=r"split\.assign='permutation' is not valid; expected "
                                          r"one of: hash"):
        params_from_dict({"split": {"assign": "permutation"}})


# ------------------------------------------------------------------------- the split stage
def _run(tmp_path: Path, prepared: Path, name: str, node: dict, cluster: dict | None = None):
    params = tmp_path / f"{name}.yaml"
    params.write_text(yaml.safe_dump({"split": {"node": node},
                                      "features": {"normalize": "standardize"},
                                      **({"cluster": cluster} if cluster else {})}))
    out = tmp_path / name
    code = main(["split", "--params", str(params), "--prepared", str(prepared),
                 "--out", str(out / "split"), "--features", str(out / "features"),
                 "--audit", str(out / "audit.json")])
    assert code == 0
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()}


STAGE_CASES = {"typed_time": {"strategy": "time"},
               "typed_stratified": {"strategy": "stratified", "mode": "inductive"}}


@pytest.fixture(scope="module")
def local_files(typed, tmp_path_factory):
    """The typed graph prepared, and the local engine's split files (digests) per case."""
    tmp = tmp_path_factory.mktemp("node-local")
    io.write_prepared(tmp / "prepared", typed)
    return tmp / "prepared", {name: _run(tmp, tmp / "prepared", name, node)
                              for name, node in STAGE_CASES.items()}


@pytest.mark.parametrize("workers", [2, 1])
def test_dask_with_2_and_1_workers_writes_the_local_files(local_files, tmp_path, dask_cluster,
                                                          monkeypatch, workers):
    prepared, expected = local_files
    assert {"split/nodes_paper.parquet", "split/message_train.pt", "split/message_val.pt",
            "features/transform.pt", "audit.json"} <= set(expected["typed_time"])
    scale_cluster(dask_cluster, workers)
    monkeypatch.setattr(split, "SIZES", BlockSizes(rows=250, edges=3000))  # a few blocks
    cluster = {"engine": "dask", "address": dask_cluster.scheduler_address}
    for name, node in STAGE_CASES.items():
        assert _run(tmp_path, prepared, name, node, cluster) == expected[name], (name, workers)
    assert not list(tmp_path.glob("*/.split-blocks*"))  # the scratch folders are gone


def test_a_failed_audit_writes_no_split_and_leaves_no_worker(local_files, tmp_path,
                                                             monkeypatch):
    """The embedded LocalCluster (1 worker) is gone after the stage, the scratch folder too;
    only the audit report is written."""
    import psutil

    from gnnpipe.splitting import stage

    def failing(*args, **kwargs):
        report = real(*args, **kwargs)
        report["checks"][0].update(passed=False)
        return {**report, "passed": False}

    real = stage.audit_node_blocks
    monkeypatch.setattr(stage, "audit_node_blocks", failing)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(AssertionError):
        _run(tmp_path, local_files[0], "failed", {"strategy": "random"},
             {"engine": "dask", "workers": 1, "memory_limit": "512MiB"})
    assert sorted(p.name for p in (tmp_path / "failed").iterdir()) == ["audit.json"]
    assert not list(tmp_path.glob(".split-blocks*"))
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_roles_follow_the_seed_and_sizes_are_exact(homogeneous):
    cfg = NodeSplitParams(strategy="random", train=0.5, val=0.25, test=0.25)
    first = split_nodes(homogeneous, cfg, seed=SEED)
    labelled = int((homogeneous.y >= 0).sum())
    assert (first.roles == "train").sum() == round(0.5 * labelled)
    assert (first.roles[homogeneous.y.numpy() < 0] == "unused").all()
    assert not np.array_equal(first.roles, split_nodes(homogeneous, cfg, seed=SEED + 1).roles)


def test_routed_rows_come_back_per_bucket_in_producer_order(tmp_path):
    """Two files per producer, whatever the buckets; a bucket reads its slice of each."""
    from gnnpipe.io.blocks import load_routed, save_routed

    rows = np.arange(12).reshape(6, 2)
    save_routed(tmp_path, "b", rows, np.array([2, 0, 2, 1, 0, 2]), 3)
    save_routed(tmp_path, "a", rows[:2] + 100, np.array([2, 2]), 3)
    assert len(list(tmp_path.rglob("*.npy"))) == 4
    assert load_routed(tmp_path, 2, np.int64, 2).tolist() == [
        [100, 101], [102, 103], [0, 1], [4, 5], [10, 11]]
    assert load_routed(tmp_path, 1, np.int64, 2).tolist() == [[6, 7]]
    assert load_routed(tmp_path / "none", 0, np.int64, 2).shape == (0, 2)
