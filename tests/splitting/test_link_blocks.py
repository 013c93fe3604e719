"""The link split by blocks (gnnpipe/splitting/link_split.py, link_audit.py, hard_negatives.py),
the one link split of both engines: the files of the whole-graph hash split (tests' oracle,
link_oracle.py) byte for byte, for homogeneous, directed and typed graphs (a relation with its
reverse, one that is its own reverse, one without a stored reverse) and any block size; its
audit gives the oracle's report, also for a leaking split; hard negatives are the same for any
block size and engine, never a true pair, and the best RA candidates; the split stage writes the
same bytes in process and on 1 and 2 Dask workers. Block functions run in this process (a
client of None) except where a test says a cluster."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from conftest import scale_cluster, small_params
from gnnpipe import io
from gnnpipe.cli import main
from gnnpipe.config import LinkSplitParams
from gnnpipe.data.edges import csr_from_edges, edge_pairs
from gnnpipe.data.graph import Graph
from graph_oracle import prepare
from gnnpipe.data.synthetic import CITES, WRITES
from gnnpipe.runtime.rng import make_rng
from gnnpipe.splitting import audit
from gnnpipe.splitting import split as split_module
from gnnpipe.splitting.hard_negatives import hard_link_negatives
from gnnpipe.splitting.link_audit import audit_links
from gnnpipe.splitting.link_split import EDGE_ROLES, split_links
from gnnpipe.splitting.split import BlockSizes

import link_oracle
from test_hetero_data import small_hetero

BLOCKS = BlockSizes(rows=97, edges=20_000)  # row blocks: several; sort / audit buckets: a few
ONE = BlockSizes(rows=1 << 20, edges=1 << 22)  # one block of everything
SEED = 5


def _graphs() -> dict[str, Graph]:
    rng = np.random.default_rng(1)
    directed = Graph.homogeneous(
        csr=csr_from_edges(rng.integers(0, 300, 2000), rng.integers(0, 300, 2000), 300),
        x=torch.zeros(300, 2), y=torch.from_numpy(rng.integers(0, 3, 300)), num_classes=3)
    typed = small_hetero()
    return {"undirected": prepare(small_params(num_nodes=600, num_features=4).dataset, 0)[0],
            "directed": directed,  # self-loops, repeated and reciprocal edges
            "typed": typed,  # author writes paper, with paper rev_writes author
            "typed_own_reverse": dataclasses.replace(typed, link_edge_type=CITES),
            "typed_no_reverse": dataclasses.replace(typed, reverse={})}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[str, tuple[Graph, Path]]:
    """Each graph as prepared files, and as read back (memory-mapped, its link edge type)."""
    out = {}
    for name, graph in _graphs().items():
        folder = tmp_path_factory.mktemp(name) / "prepared"
        io.write_prepared(folder, graph)
        out[name] = (graph, folder)
    return out


def _read(graph: Graph, folder: Path, mmap: bool = True) -> Graph:
    """The prepared graph with ``graph``'s link edge type and reverses (tests change them)."""
    read = io.read_graph(folder, mmap=mmap, stored_x=mmap)
    return dataclasses.replace(read, link_edge_type=graph.link_edge_type, reverse=graph.reverse)


def _blocks(prepared, name: str, cfg: LinkSplitParams, scratch: Path, sizes=BLOCKS):
    graph, folder = prepared[name]
    mapped = _read(graph, folder)
    scratch.mkdir(parents=True, exist_ok=True)
    return mapped, split_links(None, mapped, folder / "graph.pt", cfg, SEED, scratch, sizes)


DISJOINT = {"disjoint_train_ratio": 0.3, "negative_strategy": "degree", "num_val_negatives": 7}


@pytest.mark.parametrize("name, kw", [("undirected", {}), ("directed", DISJOINT),
                                      ("typed", {}), ("typed", DISJOINT),
                                      ("typed_own_reverse", DISJOINT), ("typed_no_reverse", {})])
def test_blocks_write_the_whole_graph_hash_split_and_its_audit(prepared, tmp_path, name, kw):
    cfg = LinkSplitParams(**kw)
    graph, folder = prepared[name]
    whole = _read(graph, folder, mmap=False)
    local = link_oracle.split_links(whole, cfg, make_rng(0, "split"), hash_seed=SEED)
    mapped, split = _blocks(prepared, name, cfg, tmp_path)
    assert split.undirected == local.undirected == (name in ("undirected", "typed_own_reverse"))
    assert sum(map(len, split.blocks)) > 3
    for role in EDGE_ROLES:
        assert np.array_equal(np.concatenate(list(split.edge_parts(role))).T,
                              local.edges[role].numpy()), role
    for phase in ("val", "test"):
        assert np.array_equal(np.concatenate([t for _, t in split.negative_parts(phase)]),
                              local.negatives[phase].numpy()), phase
    graphs = split.message_graphs(mapped)
    for phase in ("train", "val", "test"):
        for e in mapped.edge_types:
            assert torch.equal(graphs[phase][e].indptr, local.message_graphs[phase][e].indptr)
            assert torch.equal(graphs[phase][e].indices, local.message_graphs[phase][e].indices)
    report = audit_links(None, mapped, split)
    assert report == link_oracle.audit_link_split(
        whole, whole.link_edge_type, local.edges, local.negatives, local.message_graphs,
        disjoint=bool(kw))
    assert report["passed"]


def test_one_block_and_many_blocks_write_the_same_split(prepared, tmp_path):
    cfg = LinkSplitParams(disjoint_train_ratio=0.2)
    _, many = _blocks(prepared, "typed", cfg, tmp_path / "many")
    _, one = _blocks(prepared, "typed", cfg, tmp_path / "one", ONE)
    assert len(one.blocks[0]) == 1 < len(many.blocks[0])
    for role in EDGE_ROLES:
        assert np.array_equal(np.concatenate(list(one.edge_parts(role))),
                              np.concatenate(list(many.edge_parts(role))))
    for phase, files in one.message.items():
        for mine, theirs in zip(files, many.message[phase]):
            assert all(np.array_equal(np.load(a), np.load(b)) for a, b in zip(mine, theirs))


@pytest.mark.parametrize("leak_into", [0, 1])  # WRITES or its reverse
def test_a_test_pair_kept_in_the_type_or_its_reverse_fails_the_audit_as_the_oracle(
        prepared, tmp_path, leak_into):
    """The train phase's graph of one held-out relation replaced by the prepared one: test
    pairs leak through that relation alone, in the block audit as in the whole-graph one."""
    cfg = LinkSplitParams()
    mapped, split = _blocks(prepared, "typed", cfg, tmp_path)
    relation = split.held.relations[leak_into]
    for path, tensor in zip(split.message["train"][leak_into],
                            (mapped.csr[relation].indptr, mapped.csr[relation].indices)):
        np.save(path, tensor.numpy())
    report = audit_links(None, mapped, split)
    whole = _read(*prepared["typed"], mmap=False)
    local = link_oracle.split_links(whole, cfg, make_rng(0, "split"), hash_seed=SEED)
    leaking = {**local.message_graphs["train"], relation: whole.csr[relation]}
    expected = link_oracle.audit_link_split(
        whole, WRITES, local.edges, local.negatives,
        {**local.message_graphs, "train": leaking, "val": leaking}, disjoint=False)
    assert report == expected and not report["passed"]
    with pytest.raises(audit.LeakageError, match=r"message_train_hides_val_test\[author__writes"):
        audit.raise_if_failed(report)


@pytest.mark.parametrize("name, kw, message", [
    ("undirected", {"val": 0.6, "test": 0.5}, "leaves none of the graph's"),
    ("typed", {"val": 0.6, "test": 0.5}, "leaves none of the .* author__writes__paper pairs"),
])
def test_sizes_that_do_not_fit_get_the_oracles_message(prepared, tmp_path, name, kw, message):
    cfg = LinkSplitParams(**kw)
    with pytest.raises(ValueError, match=message) as local:
        link_oracle.split_links(_read(*prepared[name], mmap=False), cfg, make_rng(0, "split"),
                                hash_seed=SEED)
    with pytest.raises(ValueError) as blocks:
        _blocks(prepared, name, cfg, tmp_path)
    assert str(blocks.value) == str(local.value)


def test_a_relation_without_a_pair_of_distinct_nodes_is_refused(tmp_path):
    loops = Graph.homogeneous(csr_from_edges(np.arange(5), np.arange(5), 5), torch.zeros(5, 1),
                              torch.zeros(5, dtype=torch.int64), num_classes=1)
    io.write_prepared(tmp_path / "p", loops)
    with pytest.raises(ValueError, match="needs edges between distinct nodes; the graph has none"):
        _blocks({"loops": (loops, tmp_path / "p")}, "loops", LinkSplitParams(), tmp_path / "s")


# ------------------------------------------------------------------------------ hard negatives
@pytest.mark.parametrize("name", ["undirected", "typed"])
def test_hard_negatives_are_the_best_allowed_ra_candidates_for_any_blocks(prepared, tmp_path,
                                                                        name):
    """Against dense RA on the train view: never the head, a true pair of any role or a message
    edge, of E's target type, best RA first; the same for one block and many, and audited."""
    cfg, k = LinkSplitParams(num_val_negatives=3, num_test_negatives=3), 8
    drawn = {}
    for sizes in (BLOCKS, ONE):
        mapped, split = _blocks(prepared, name, cfg, tmp_path / str(sizes.rows), sizes)
        ranked = hard_link_negatives(None, mapped, split, k, SEED)
        drawn[sizes.rows] = {p: np.concatenate([t for _, t in split.negative_parts(p, "h")])
                             for p in ("val", "test")}
    assert all(np.array_equal(drawn[BLOCKS.rows][p], drawn[ONE.rows][p]) for p in drawn[ONE.rows])
    assert 0.5 < ranked["test"] <= 1.0
    report = audit_links(None, mapped, split, hard=True)
    assert report["passed"] and report["hard_negatives"]["test"]["per_positive"] == k
    n, offsets, e = mapped.num_nodes, mapped.offsets(), mapped.link_edge_type
    s_off, d_off = offsets[e[0]], offsets[e[2]]
    view = np.zeros((n, n))  # the train phase's graph of every edge type, undirected, simple
    for edge_type, csr in split.message_graphs(mapped)["train"].items():
        a, b = edge_pairs(csr)
        view[a + offsets[edge_type[0]], b + offsets[edge_type[2]]] = 1
    view = np.maximum(view, view.T)
    np.fill_diagonal(view, 0)
    deg = view.sum(1)
    ra = view @ (view / np.where(deg > 0, deg, 1)[:, None])
    true = link_oracle.true_pairs(mapped)
    heads = np.concatenate(list(split.edge_parts("test")))[:, 0] + s_off
    for head, row in zip(heads.tolist(), (drawn[ONE.rows]["test"] + d_off).tolist()):
        assert all(d_off <= t < d_off + mapped.num_nodes_dict[e[2]] for t in row)
        assert head not in row and not any((head, t) in true or view[head, t] for t in row)
        allowed = [c for c in range(d_off, d_off + mapped.num_nodes_dict[e[2]])
                   if c != head and (head, c) not in true and not view[head, c] and ra[head, c]]
        best = sorted((ra[head, c] for c in allowed), reverse=True)[:k]
        ranked_part = [ra[head, t] for t in row[:len(best)]]
        assert np.allclose(ranked_part, best)


# ---------------------------------------------------------------------------- the split stage
def _run(tmp_path: Path, prepared: Path, name: str, cluster: dict | None = None) -> Path:
    params = tmp_path / f"{name}.yaml"
    params.write_text(yaml.safe_dump({
        "dataset": {"task": "link"}, "features": {"normalize": "standardize"},
        "split": {"link": {"disjoint_train_ratio": 0.2, "num_val_negatives": 5,
                           "num_test_negatives": 5, "num_hard_negatives": 6}},
        **({"cluster": cluster} if cluster else {})}))
    out = tmp_path / name
    assert main(["split", "--params", str(params), "--prepared", str(prepared), "--out",
                 str(out / "split"), "--features", str(out / "features"), "--audit",
                 str(out / "audit.json")]) == 0
    return out


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_stage_writes_the_same_bytes_in_process_and_on_2_and_1_workers(
        prepared, tmp_path, dask_cluster, monkeypatch):
    """A typed graph with hard negatives: every file of data/split, data/features and the
    audit report, whatever the engine and workers; no scratch folder left."""
    monkeypatch.setattr(split_module, "SIZES", BlockSizes(rows=300, edges=1 << 22))  # few tasks
    folder = prepared["typed"][1]
    expected = _digests(_run(tmp_path, folder, "local"))
    assert {"split/negatives_hard_test.parquet", "split/edges_val.parquet",
            "split/message_test.pt", "audit.json"} <= set(expected)
    for workers in (2, 1):
        scale_cluster(dask_cluster, workers)
        out = _run(tmp_path, folder, f"dask{workers}",
                   {"engine": "dask", "address": dask_cluster.scheduler_address})
        assert _digests(out) == expected, workers
    assert not list(tmp_path.glob("*/.split-blocks*"))
