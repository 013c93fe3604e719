"""The synthetic contextual SBM (determinism, homophily, degree skew, imbalance) and input checks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gnnpipe.data import synthetic
from gnnpipe.config import SyntheticParams
from gnnpipe.config import params_from_dict
from gnnpipe.data.edges import edge_pairs
from graph_oracle import (REV_PUBLISHED_IN, REV_WRITES, normalize_edges, prepare, prepare_dataset,
                          validate_arrays)
from gnnpipe.data.synthetic import CITES, PUBLISHED_IN, WRITES
from gnnpipe.runtime.rng import make_rng

from conftest import small_params

SMALL = SyntheticParams(num_nodes=1500, num_classes=3, num_features=8, avg_degree=6.0)


def _gen(cfg: SyntheticParams = SMALL, seed: int = 0) -> dict:
    return synthetic.generate(cfg, make_rng(seed, "prepare"))


def _edge_homophily(raw: dict) -> float:
    return float(np.mean(raw["y"][raw["src"]] == raw["y"][raw["dst"]]))


def _degree_ratio(raw: dict, n: int) -> float:
    csr, _ = normalize_edges(raw["src"], raw["dst"], n, undirected=True, dedup=True,
                             remove_self_loops=True)
    deg = csr.degrees().double()
    return float(deg.max() / deg.mean())


# ------------------------------------------------------------------------------- generation
def test_output_shapes_and_dtypes():
    raw = _gen()
    n, f = SMALL.num_nodes, SMALL.num_features
    m = round(n * SMALL.avg_degree / 2)
    assert raw["x"].dtype == np.float32 and raw["x"].shape == (n, f)
    assert raw["y"].dtype == np.int64 and raw["y"].shape == (n,)
    assert raw["src"].dtype == raw["dst"].dtype == np.int64
    assert raw["src"].shape == raw["dst"].shape == (m,)
    assert raw["src"].min() >= 0 and raw["dst"].max() < n
    assert set(np.unique(raw["y"]).tolist()) == {0, 1, 2}
    assert validate_arrays(raw["x"], raw["y"], raw["src"], raw["dst"], "synthetic") == 3


def test_same_params_and_seed_give_identical_arrays():
    first, again = _gen(seed=5), _gen(seed=5)
    for key in ("x", "y", "src", "dst"):
        assert np.array_equal(first[key], again[key]), key


def test_different_seed_gives_different_arrays():
    first, other = _gen(seed=5), _gen(seed=6)
    for key in ("x", "y", "src", "dst"):
        assert not np.array_equal(first[key], other[key]), key


def test_each_node_block_draws_from_its_own_stream(monkeypatch):
    """A block's classes and features are the same whatever the number of nodes after it (the
    generator draws node blocks, then edges, then features, each block from its own stream)."""
    monkeypatch.setattr(synthetic, "NODE_BLOCK", 100)
    small, big = (_gen(dataclasses.replace(SMALL, num_nodes=n)) for n in (250, 700))
    assert np.array_equal(small["y"][:200], big["y"][:200])
    assert np.array_equal(small["x"][:200], big["x"][:200])
    assert not np.array_equal(small["src"][:100], big["src"][:100])  # sources: over all nodes


def test_edges_streamed_by_blocks_equal_the_whole_draw(monkeypatch):
    monkeypatch.setattr(synthetic, "EDGE_BLOCK", 1000)
    whole, blocks = _gen(), []
    streamed = synthetic.generate(SMALL, make_rng(0, "prepare"),
                                  edge_sink=lambda src, dst: blocks.append((src, dst)))
    assert "src" not in streamed and [len(s) for s, _ in blocks] == [1000] * 4 + [500]
    assert np.array_equal(np.concatenate([s for s, _ in blocks]), whole["src"])
    assert np.array_equal(np.concatenate([d for _, d in blocks]), whole["dst"])
    assert np.array_equal(streamed["x"], whole["x"]) and np.array_equal(streamed["y"], whole["y"])


def test_prepare_is_deterministic_and_reports_edge_policies():
    params = small_params()
    g1, r1 = prepare(params.dataset, params.seed)
    g2, r2 = prepare(params.dataset, params.seed)
    assert r1 == r2
    g1, g2 = g1.target_view(), g2.target_view()
    assert np.array_equal(g1.csr.indices.numpy(), g2.csr.indices.numpy())
    assert np.array_equal(g1.x.numpy(), g2.x.numpy())
    assert r1["nodes"] == 1500 and r1["classes"] == 3 and r1["features"] == 16
    assert r1["input_edges"] == 1500 * 4
    # every input edge is stored twice unless dropped as a loop or a duplicate
    assert r1["edges"] == 2 * (r1["input_edges"] - r1["self_loops_removed"]
                               - r1["duplicates_removed"])


def _typed(**dataset):
    return prepare_dataset(params_from_dict({"dataset": {"layout": "typed", "synthetic": {
        "num_nodes": 400, "num_authors": 100, "num_venues": 5}, **dataset}}).dataset, 0)


def test_the_typed_graph_takes_the_dataset_edge_policies_and_the_tables_report():
    """The built-in typed graph goes through prepare's one build: undirected adds the reverses,
    dedup and self_loops apply to every relation, typed.link_edge_type is honoured, and
    prepare.json has the keys of typed tables."""
    default = _typed()
    graph, report = default.graph, default.report
    assert list(graph.csr) == [CITES, WRITES, REV_WRITES, PUBLISHED_IN, REV_PUBLISHED_IN]
    assert graph.reverse[WRITES] == REV_WRITES and graph.link_edge_type == WRITES
    assert report["input_edges"] == 400 * 5 + round(400 * 3.0) + 400  # cites, writes, venues
    assert report["duplicates_removed"] > 0 and report["self_loops_removed"] > 0
    assert {"layout", "target", "node_types", "edge_types", "link_edge_type", "featureless",
            "labelled"} <= set(report) and "cites_duplicates_removed" not in report
    directed = _typed(undirected=False, dedup=False, self_loops="keep").graph
    assert list(directed.csr) == [CITES, WRITES, PUBLISHED_IN] and directed.reverse == {}
    assert directed.csr[CITES].num_edges == 400 * 5  # every draw as given
    assert directed.csr[WRITES].num_edges == round(400 * 3.0)  # repeated authorships kept
    src, dst = edge_pairs(graph.csr[WRITES])
    assert graph.csr[WRITES].num_edges == np.unique(src * 400 + dst).size < 400 * 3.0
    assert np.array_equal(directed.x["author"].numpy(), graph.x["author"].numpy())
    picked = _typed(typed={"link_edge_type": "paper__published_in__venue"}).graph
    assert picked.link_edge_type == PUBLISHED_IN


@pytest.mark.parametrize("homophily", [0.2, 0.9])
def test_edge_homophily_matches_param(homophily):
    cfg = SyntheticParams(num_nodes=5000, num_classes=4, num_features=2, avg_degree=10.0,
                          homophily=homophily)
    raw = _gen(cfg)
    assert _edge_homophily(raw) == pytest.approx(homophily, abs=0.03)
    # still within tolerance after the edge policies (loops are intra-class, rare)
    csr, _ = normalize_edges(raw["src"], raw["dst"], cfg.num_nodes, undirected=True, dedup=True,
                             remove_self_loops=True)
    src, dst = csr.edge_index().numpy()
    assert np.mean(raw["y"][src] == raw["y"][dst]) == pytest.approx(homophily, abs=0.03)


def test_zero_homophily_has_no_intra_class_edges_and_one_has_only():
    base = dict(num_nodes=800, num_classes=3, num_features=2, avg_degree=6.0)
    assert _edge_homophily(_gen(SyntheticParams(**base, homophily=0.0))) == 0.0
    assert _edge_homophily(_gen(SyntheticParams(**base, homophily=1.0))) == 1.0


def test_degree_skew_controls_degree_spread():
    base = dict(num_nodes=5000, num_classes=4, num_features=2, avg_degree=10.0)
    flat = _degree_ratio(_gen(SyntheticParams(**base, degree_skew=0.0)), 5000)
    skewed = _degree_ratio(_gen(SyntheticParams(**base, degree_skew=2.0)), 5000)
    assert flat < 3.0  # Poisson-like degrees
    assert skewed > 5 * flat


def test_class_imbalance_gives_decreasing_class_counts():
    base = dict(num_nodes=5000, num_classes=5, num_features=2)
    skewed = np.bincount(_gen(SyntheticParams(**base, class_imbalance=1.0))["y"], minlength=5)
    assert all(skewed[:-1] > skewed[1:]), skewed.tolist()
    expected = 5000 * (np.arange(1, 6) ** -1.0) / (np.arange(1, 6) ** -1.0).sum()
    np.testing.assert_allclose(skewed, expected, rtol=0.15)
    balanced = np.bincount(_gen(SyntheticParams(**base, class_imbalance=0.0))["y"], minlength=5)
    assert balanced.max() / balanced.min() < 1.2


def test_feature_signal_separates_class_means():
    cfg = dataclasses.replace(SMALL, feature_signal=3.0, num_features=16)
    raw = _gen(cfg)
    means = np.stack([raw["x"][raw["y"] == c].mean(axis=0) for c in range(3)])
    np.testing.assert_allclose(np.linalg.norm(means, axis=1), 3.0, rtol=0.1)
    noise = _gen(dataclasses.replace(cfg, feature_signal=0.0))
    noise_means = np.stack([noise["x"][noise["y"] == c].mean(axis=0) for c in range(3)])
    assert np.linalg.norm(noise_means, axis=1).max() < 0.5


# ----------------------------------------------------------------------------- validation
def _valid():
    x = np.zeros((4, 2), dtype=np.float32)
    y = np.array([0, 1, 0, 2], dtype=np.int64)
    src = np.array([0, 1, 2], dtype=np.int64)
    dst = np.array([1, 2, 3], dtype=np.int64)
    return x, y, src, dst


def test_validate_arrays_accepts_valid_input_and_counts_classes():
    assert validate_arrays(*_valid(), "test") == 3
    x, y, _, _ = _valid()
    empty = np.zeros(0, dtype=np.int64)
    assert validate_arrays(x, y, empty, empty, "test") == 3  # edgeless is fine


@pytest.mark.parametrize("mutate, message", [
    (lambda x, y, s, d: (np.where(np.arange(8).reshape(4, 2) == 5, np.nan, x), y, s, d),
     r"where0: features contain NaN or inf in 1 rows \(first: node 2\)"),
    (lambda x, y, s, d: (np.full_like(x, np.inf), y, s, d), r"features contain NaN or inf in 4 rows"),
    (lambda x, y, s, d: (x, y, np.array([0, 4, 1]), d),
     r"edge column 'src' has node id 4 outside \[0, 4\) \(4 nodes\)"),
    (lambda x, y, s, d: (x, y, s, np.array([1, 2, 9])), r"edge column 'dst' has node id 9 outside"),
    (lambda x, y, s, d: (x, y, np.array([0, -1, 1]), d), r"edge column 'src' has node id -1 outside"),
    (lambda x, y, s, d: (x, y, s, np.array([-3, 2, 3])), r"edge column 'dst' has node id -3 outside"),
    (lambda x, y, s, d: (x, y[:3], s, d), r"labels have shape \(3,\) but there are 4 feature rows"),
    (lambda x, y, s, d: (x, np.zeros(4, dtype=np.int64), s, d), r"labels hold a single class"),
    (lambda x, y, s, d: (np.zeros((0, 2), np.float32), np.zeros(0, np.int64), s[:0], d[:0]),
     r"the graph has no nodes"),
    (lambda x, y, s, d: (x, y.astype(np.float64), s, d), r"labels must be integers, got float64"),
    (lambda x, y, s, d: (x, y - 2, s, d), r"label column has negative value -2"),  # -1: unlabelled
    (lambda x, y, s, d: (x[:, 0], y, s, d), r"features must be a 2-D"),
    (lambda x, y, s, d: (x, y, s, d[:2]), r"src and dst must be 1-D of equal length"),
], ids=["nan", "inf", "src-too-big", "dst-too-big", "src-negative", "dst-negative",
        "label-length", "single-class", "empty", "float-labels", "negative-label", "1d-features",
        "edge-length"])
def test_validate_arrays_rejects(mutate, message):
    x, y, src, dst = mutate(*_valid())
    with pytest.raises(ValueError, match=message):
        validate_arrays(x, y, src, dst, "where0")


def test_validate_arrays_error_names_the_source():
    x, y, src, dst = _valid()
    with pytest.raises(ValueError, match=r"^dataset\.synthetic: labels hold a single class"):
        validate_arrays(x, np.zeros(4, dtype=np.int64), src, dst, "dataset.synthetic")


def test_validate_arrays_rejects_single_nonzero_class():
    x, _, src, dst = _valid()
    with pytest.raises(ValueError, match="labels hold a single class"):
        validate_arrays(x, np.ones(4, dtype=np.int64), src, dst, "test")


def test_validate_arrays_rejects_float_edge_ids():
    x, y, src, dst = _valid()
    with pytest.raises(ValueError, match="edge column 'src' must hold integer node ids"):
        validate_arrays(x, y, src.astype(np.float64) + 0.5, dst, "test")
