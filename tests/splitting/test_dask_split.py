"""split on cluster.engine: dask (gnnpipe/splitting/dask_split.py, dask_audit.py, dask_link.py,
dask_link_audit.py): split.assign: hash gives the same files by blocks as on the local engine,
byte for byte, on 1, 2 and 4 workers, for the node and the link task; the block audits give the
local reports and fail a leaking split with the local LeakageError; refusals name the key.
Block functions run in this process (a client of None) with tiny blocks, except where a test
says a cluster."""

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
from gnnpipe.config import LinkSplitParams, NodeSplitParams
from gnnpipe.data.graph import Graph
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.data.prepare import prepare
from gnnpipe.data.graph import EDGE
from gnnpipe.runtime.rng import make_rng
from gnnpipe.splitting import audit, dask_split
from gnnpipe.splitting.dask_audit import audit_node_blocks
from gnnpipe.splitting.dask_link import split_link_blocks
from gnnpipe.splitting.dask_link_audit import audit_link_blocks
from gnnpipe.splitting.dask_split import BlockSizes, split_node_blocks
from gnnpipe.splitting import hash_assign
from gnnpipe.splitting.hash_assign import node_keys, radix_counts, select_keys, summed
from gnnpipe.splitting.link_split import EDGE_ROLES, split_links
from gnnpipe.splitting.split import split_nodes

TINY = BlockSizes(rows=97, edges=500)
LINK_BLOCKS = BlockSizes(rows=97, edges=20_000)  # sort and audit buckets: a few each
SEED = 5
CONFIGS = [dict(strategy="random"), dict(strategy="stratified"),
           dict(strategy="stratified", train=20, val=0.3, test=0.3, per_class=True,
                mode="inductive"),
           dict(strategy="random", train=30, val=40, test=50, mode="inductive")]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A 600-node graph, every 7th node unlabelled, as prepared files."""
    graph = prepare(small_params(num_nodes=600, num_features=4).dataset, 0)[0]
    graph.y[::7] = -1
    folder = tmp_path_factory.mktemp("dsplit") / "prepared"
    io.write_prepared(folder, graph)
    return folder


@pytest.fixture(scope="module")
def directed(tmp_path_factory) -> Path:
    """A directed 300-node graph with self-loops, repeated and reciprocal edges, prepared."""
    rng = np.random.default_rng(1)
    graph = Graph.homogeneous(
        csr=csr_from_edges(rng.integers(0, 300, 2000), rng.integers(0, 300, 2000), 300),
        x=torch.zeros(300, 2), y=torch.from_numpy(rng.integers(0, 3, 300)), num_classes=3)
    folder = tmp_path_factory.mktemp("dsplit") / "directed"
    io.write_prepared(folder, graph)
    return folder


def _local(prepared: Path, cfg: NodeSplitParams):
    graph = io.read_graph(prepared)
    return graph, split_nodes(graph, cfg, make_rng(0, "split"), hash_seed=SEED)


def test_radix_selection_finds_the_key_of_each_rank_in_its_group(monkeypatch):
    rng = np.random.default_rng(0)
    keys = node_keys(3, np.arange(5000))
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


@pytest.mark.parametrize("kw", CONFIGS)
def test_blocks_give_the_local_hash_split_and_its_audit(prepared, tmp_path, kw):
    cfg = NodeSplitParams(**kw)
    graph, local = _local(prepared, cfg)
    split = split_node_blocks(None, prepared / "graph.pt", graph.num_nodes_dict[graph.target],
                              graph.num_classes, cfg, SEED, tmp_path, TINY)
    assert len(split.blocks) > 5
    roles = np.asarray(["train", "val", "test", "unused"])[np.load(split.roles)]
    assert np.array_equal(roles, local.roles)
    for phase, files in split.message.items():
        csr = local.message_graphs[phase][EDGE]
        if files is None:
            assert csr is graph.csr[EDGE]
            continue
        assert np.array_equal(np.load(files[0]), csr.indptr.numpy())
        assert np.array_equal(np.load(files[1]), csr.indices.numpy())
    report = audit_node_blocks(None, graph, prepared / "graph.pt", split, cfg.mode)
    assert report == audit.audit_node_split(graph, local.roles, local.message_graphs, cfg.mode)
    assert report["passed"]


@pytest.mark.parametrize("which, kw", [
    ("prepared", {}),
    ("directed", {"disjoint_train_ratio": 0.3, "negative_strategy": "degree",
                  "num_val_negatives": 7}),
])
def test_link_blocks_give_the_local_hash_split_and_its_audit(request, tmp_path, which, kw):
    folder = request.getfixturevalue(which)
    cfg = LinkSplitParams(**kw)
    graph = io.read_graph(folder)
    local = split_links(graph, cfg, make_rng(0, "split"), hash_seed=SEED)
    n = graph.num_nodes_dict[graph.target]
    split = split_link_blocks(None, folder / "graph.pt", n, cfg, SEED, tmp_path, LINK_BLOCKS)
    assert split.undirected == local.undirected == (which == "prepared")
    for role in EDGE_ROLES:
        buckets, count = split.positives[role]
        assert np.array_equal(np.concatenate([np.load(buckets / f"b{k:06d}.npy")
                                              for k in range(count)]).T, local.edges[role])
        if role in ("val", "test"):
            assert np.array_equal(np.concatenate([np.load(buckets / f"n{k:06d}.npy")
                                                  for k in range(count)]), local.negatives[role])
    for phase, (indptr, indices) in split.message.items():
        assert np.array_equal(np.load(indptr), local.message_graphs[phase][EDGE].indptr)
        assert np.array_equal(np.load(indices), local.message_graphs[phase][EDGE].indices)
    report = audit_link_blocks(None, folder / "graph.pt", n, split, LINK_BLOCKS)
    expected = audit.audit_link_split(graph, EDGE, local.edges, local.negatives,
                                      local.message_graphs, disjoint=bool(kw))
    assert {**report, "edge_type": expected["edge_type"],
            "reverse_edge_type": expected["reverse_edge_type"]} == expected
    assert report["passed"]


@pytest.mark.parametrize("kw", [
    dict(strategy="random", train=400, val=100, test=100),  # more than the labelled nodes
    dict(strategy="stratified", train=500, val=10, test=10, per_class=True),  # a short class
    dict(strategy="stratified", train=0.9, val=0.09, test=0.001),  # test resolves to 0 nodes
])
def test_sizes_that_do_not_fit_get_the_local_message(prepared, tmp_path, kw):
    cfg = NodeSplitParams(**kw)
    with pytest.raises(ValueError) as local:
        _local(prepared, cfg)
    graph = io.read_graph(prepared)
    with pytest.raises(ValueError) as blocks:
        split_node_blocks(None, prepared / "graph.pt", graph.num_nodes_dict[graph.target],
                          graph.num_classes, cfg, SEED, tmp_path, TINY)
    assert str(blocks.value) == str(local.value)


def test_link_sizes_that_do_not_fit_get_the_local_message(prepared, tmp_path):
    cfg = LinkSplitParams(val=0.6, test=0.5)
    graph = io.read_graph(prepared)
    with pytest.raises(ValueError, match="leaves none of the graph's") as local:
        split_links(graph, cfg, make_rng(0, "split"), hash_seed=SEED)
    with pytest.raises(ValueError) as blocks:
        split_link_blocks(None, prepared / "graph.pt", graph.num_nodes_dict[graph.target], cfg, SEED,
                          tmp_path, LINK_BLOCKS)
    assert str(blocks.value) == str(local.value)


def test_hash_sizes_are_exact_and_roles_follow_the_seed(prepared):
    cfg = NodeSplitParams(strategy="random", train=0.5, val=0.25, test=0.25)
    graph, first = _local(prepared, cfg)
    labelled = int((graph.y >= 0).sum())
    assert (first.roles == "train").sum() == round(0.5 * labelled)
    assert (first.roles[graph.y.numpy() < 0] == "unused").all()
    other = split_nodes(graph, cfg, make_rng(0, "split"), hash_seed=SEED + 1)
    assert not np.array_equal(first.roles, other.roles)


# ------------------------------------------------------------------------- the split stage
def _run(tmp_path: Path, prepared: Path, name: str, cluster: dict | None = None,
         task: str = "node", **split) -> tuple[int, Path]:
    params = tmp_path / f"{name}.yaml"
    params.write_text(yaml.safe_dump({
        "dataset": {"task": task}, "split": {"assign": "hash", **split},
        # the block link split draws no hard negatives (a params rule): neither does local here
        **({"evaluate": {"link": {"negatives": "random"}}} if task == "link" else {}),
        "features": {"normalize": "standardize"}, **({"cluster": cluster} if cluster else {})}))
    out = tmp_path / name
    code = main(["split", "--params", str(params), "--prepared", str(prepared),
                 "--out", str(out / "split"), "--features", str(out / "features"),
                 "--audit", str(out / "audit.json")])
    return code, out


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_leaking_split_fails_the_block_audit_as_locally(prepared, tmp_path, dask_cluster):
    """The train phase's message graph replaced by the whole graph: the audit on the cluster
    raises the LeakageError the local audit raises for the same files."""
    from distributed import Client

    scale_cluster(dask_cluster, 4)  # as started: the smaller clusters come next
    cfg = NodeSplitParams(strategy="random", mode="inductive")
    graph, local = _local(prepared, cfg)
    with Client(dask_cluster, set_as_default=False) as client:
        split = split_node_blocks(client, prepared / "graph.pt", graph.num_nodes_dict[graph.target],
                                  graph.num_classes, cfg, SEED, tmp_path, TINY)
        indptr, indices = split.message["train"]
        np.save(indptr, graph.csr[EDGE].indptr.numpy())
        np.save(indices, graph.csr[EDGE].indices.numpy())
        report = audit_node_blocks(client, graph, prepared / "graph.pt", split, cfg.mode)
    leaking = {**local.message_graphs, "train": {EDGE: graph.csr[EDGE]}}
    expected = audit.audit_node_split(graph, local.roles, leaking, cfg.mode)
    assert report == expected and not report["passed"]
    with pytest.raises(audit.LeakageError) as caught:
        audit.raise_if_failed(report)
    with pytest.raises(audit.LeakageError, match="message_train_sees_only_train") as local_err:
        audit.raise_if_failed(expected)
    assert str(caught.value) == str(local_err.value)


def test_a_leaking_link_split_fails_the_block_audit_as_locally(prepared, tmp_path,
                                                                dask_cluster):
    """The train phase's message graph replaced by the whole graph: held-out pairs leak, in
    the cluster's audit as in the local one, with the same message."""
    from distributed import Client

    scale_cluster(dask_cluster, 4)  # as started: the smaller clusters come next
    cfg = LinkSplitParams(num_val_negatives=5, num_test_negatives=5)
    graph = io.read_graph(prepared)
    local = split_links(graph, cfg, make_rng(0, "split"), hash_seed=SEED)
    n = graph.num_nodes_dict[graph.target]
    with Client(dask_cluster, set_as_default=False) as client:
        split = split_link_blocks(client, prepared / "graph.pt", n, cfg, SEED, tmp_path,
                                  LINK_BLOCKS)
        indptr, indices = split.message["train"]  # val shares the file: it leaks too
        np.save(indptr, graph.csr[EDGE].indptr.numpy())
        np.save(indices, graph.csr[EDGE].indices.numpy())
        report = audit_link_blocks(client, prepared / "graph.pt", n, split, LINK_BLOCKS)
    whole = {EDGE: graph.csr[EDGE]}
    expected = audit.audit_link_split(graph, EDGE, local.edges, local.negatives,
                                      {**local.message_graphs, "train": whole, "val": whole},
                                      disjoint=False)
    assert {**report, "edge_type": expected["edge_type"],
            "reverse_edge_type": expected["reverse_edge_type"]} == expected
    with pytest.raises(audit.LeakageError, match="message_train_hides_val_test") as caught:
        audit.raise_if_failed(report)
    with pytest.raises(audit.LeakageError) as local_err:
        audit.raise_if_failed(expected)
    assert str(caught.value) == str(local_err.value)


NODE = {"strategy": "stratified", "mode": "inductive"}
LINK = {"disjoint_train_ratio": 0.2, "num_val_negatives": 5, "num_test_negatives": 5,
        "num_hard_negatives": 0}


@pytest.fixture(scope="module")
def local_hash_files(prepared, tmp_path_factory) -> dict[str, dict[str, str]]:
    """The local engine's node and link split files (digests), once for every cluster size."""
    tmp = tmp_path_factory.mktemp("local-hash")
    assert _run(tmp, prepared, "node", node=NODE)[0] == 0
    assert _run(tmp, prepared, "link", task="link", link=LINK)[0] == 0
    return {task: _digests(tmp / task) for task in ("node", "link")}


@pytest.mark.parametrize("workers", [4, 2, 1])
def test_clusters_of_4_2_and_1_workers_write_the_local_hash_files(prepared, local_hash_files,
                                                                  tmp_path, dask_cluster,
                                                                  monkeypatch, workers):
    """The node and the link split, on each cluster size once, largest first (a worker started
    again costs seconds)."""
    expected = local_hash_files["node"]
    assert set(expected) >= {"split/nodes_node.parquet", "split/message_train.pt",
                             "split/message_val.pt", "split/message_test.pt",
                             "split/meta.json", "features/transform.pt", "audit.json"}
    link_expected = local_hash_files["link"]
    assert set(link_expected) >= {"split/edges_val.parquet", "split/negatives_test.parquet",
                                  "split/message_val.pt", "split/nodes_node.parquet",
                                  "audit.json"}
    scale_cluster(dask_cluster, workers)
    cluster = {"engine": "dask", "address": dask_cluster.scheduler_address}
    monkeypatch.setattr(dask_split, "SIZES", TINY)
    code, out = _run(tmp_path, prepared, "node", node=NODE, cluster=cluster)
    assert code == 0 and _digests(out) == expected, workers
    monkeypatch.setattr(dask_split, "SIZES", LINK_BLOCKS)
    code, out = _run(tmp_path, prepared, "link", task="link", link=LINK, cluster=cluster)
    assert code == 0 and _digests(out) == link_expected, workers
    assert not list(tmp_path.glob("*/.split-blocks*"))  # the scratch folders are gone


def test_a_failed_audit_writes_no_split_and_leaves_no_worker(prepared, tmp_path, monkeypatch):
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
    code, out = _run(tmp_path, prepared, "failed", node={"strategy": "random"},
                     cluster={"engine": "dask", "workers": 1, "memory_limit": "512MiB"})
    assert code == 1
    assert sorted(p.name for p in out.iterdir()) == ["audit.json"]
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


@pytest.mark.parametrize("split, layout, message", [
    ({"assign": "permutation"}, None, r"split\.assign=permutation is not split on "
                                      r"cluster\.engine: dask \(allowed: hash\)"),
    ({"node": {"strategy": "time"}}, None, r"split\.node\.strategy=time .*allowed: random \| "
                                           r"stratified"),
    ({"node": {"strategy": "public"}}, None, r"split\.node\.strategy=public"),
    ({"node": {"strategy": "cluster"}}, None, r"split\.node\.strategy=cluster"),
])
def test_modes_the_blocks_do_not_run_are_refused_in_one_line(prepared, tmp_path, capsys, split,
                                                             layout, message):
    import re

    code, out = _run(tmp_path, prepared, "refused", cluster={"engine": "dask"}, **split)
    err = capsys.readouterr().err.strip()
    assert code == 1 and re.search(message, err) and "\n" not in err and not out.exists()


def test_typed_graphs_and_permutation_links_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^the prepared graph's layout=typed is not split on "
                                         r"cluster\.engine: dask \(allowed: homogeneous\); use "
                                         r"cluster\.engine: local$"):
        dask_split.refuse_unsupported("hash", "typed", None)
    with pytest.raises(ValueError, match=r"^split\.assign=permutation is not split"):
        dask_split.refuse_unsupported("permutation", "homogeneous", None)
    dask_split.refuse_unsupported("hash", "homogeneous", None)  # a link split: nothing else


def test_hash_assignment_splits_typed_graphs_on_the_local_engine():
    """split.assign: hash on a typed graph (local engine only): the node and the link split
    pass their audits and come out the same on a second run."""
    from test_hetero_data import small_hetero

    graph = small_hetero()
    cfg = NodeSplitParams(mode="inductive")
    nodes = [split_nodes(graph, cfg, make_rng(0, "split"), hash_seed=SEED) for _ in range(2)]
    assert np.array_equal(nodes[0].roles, nodes[1].roles)
    assert audit.audit_node_split(graph, nodes[0].roles, nodes[0].message_graphs,
                                  cfg.mode)["passed"]
    link_cfg = LinkSplitParams(num_val_negatives=20, num_test_negatives=20)
    links = [split_links(graph, link_cfg, make_rng(0, "split"), hash_seed=SEED) for _ in range(2)]
    for role in EDGE_ROLES:
        assert torch.equal(links[0].edges[role], links[1].edges[role])
    assert torch.equal(links[0].negatives["test"], links[1].negatives["test"])
    assert audit.audit_link_split(graph, links[0].edge_type, links[0].edges, links[0].negatives,
                                  links[0].message_graphs, disjoint=False)["passed"]
