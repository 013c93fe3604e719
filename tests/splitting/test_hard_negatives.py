"""HeaRT-style hard negatives (gnnpipe/splitting/hard_negatives.py ``hard_rows``, what each block
task runs): top resource-allocation non-edges around the source, never a true edge, seeded,
with a uniform fill where the 2-hop neighbourhood runs out. The split's hard negatives by blocks:
test_link_blocks.py."""

from __future__ import annotations

import numpy as np
import pytest

from gnnpipe.data.edges import contains, csr_from_edges
from gnnpipe.graphops.heuristics import BUDGET
from gnnpipe.graphops.partition import symmetric_simple
from gnnpipe.reporting.link_heuristics import pair_scores
from gnnpipe.splitting.hard_negatives import (RANKED_WARNING, hard_rows, note_ranked,
                                              top_ra_candidates)
from gnnpipe.splitting.link_split import csr_contains
from gnnpipe.splitting.negatives import NegativeSampler
from link_oracle import edge_keys_both_directions


def hard_negatives(csr, heads, per_head, forbidden, seed, targets=None):
    """``hard_rows`` on the message graph ``csr`` (its simple view), refusing the head, the
    keys ``forbidden`` (either direction) and message edges: (ids (P, K), ranked slots)."""
    n = csr.num_nodes
    simple = symmetric_simple(csr)
    indptr, indices = simple.indptr.numpy(), simple.indices.numpy()

    def refuse(s, c):
        return ((s == c) | contains(forbidden, s * n + c) | contains(forbidden, c * n + s)
                | csr_contains(indptr, indices, c, s))

    heads = np.asarray(heads, dtype=np.int64)
    refusable = (np.diff(indptr) + 1 + np.bincount(forbidden // n, minlength=n)
                 + np.bincount(forbidden % n, minlength=n))  # what refuse can turn down
    return hard_rows(indptr, indices, heads, heads * n + np.arange(heads.size), per_head,
                     refuse, seed, targets or (0, n), refusable)


def hard_ids(*args, **kwargs) -> np.ndarray:
    """The negatives' ids alone."""
    return hard_negatives(*args, **kwargs)[0]


def _split_graph(n: int = 80, e: int = 240, held: int = 30, seed: int = 0):
    """Random undirected graph; ``held`` distinct pairs held out as positives. Returns the
    message CSR (both directions), the held-out (src, dst), the forbidden keys of every pair,
    and the set of true pairs (both directions)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    keep = src != dst
    pairs = np.unique(np.minimum(src, dst)[keep] * n + np.maximum(src, dst)[keep])
    rng.shuffle(pairs)
    u, v = pairs // n, pairs % n
    m_src, m_dst = u[held:], v[held:]
    csr = csr_from_edges(np.concatenate([m_src, m_dst]), np.concatenate([m_dst, m_src]), n)
    forbidden = edge_keys_both_directions(u, v, n)
    true_pairs = set(zip(u.tolist(), v.tolist())) | set(zip(v.tolist(), u.tolist()))
    return csr, (u[:held], v[:held]), forbidden, true_pairs


def _reference_ra(csr, n: int, head: int, true_pairs: set) -> dict[int, float]:
    """RA from ``head`` to every allowed candidate with RA > 0, by plain Python."""
    neighbours = [set() for _ in range(n)]
    for dst in range(n):
        for src in csr.indices[csr.indptr[dst]:csr.indptr[dst + 1]].tolist():
            if src != dst:
                neighbours[src].add(dst)
                neighbours[dst].add(src)
    ra = {}
    for c in range(n):
        if c == head or (head, c) in true_pairs or c in neighbours[head]:
            continue
        score = sum(1 / len(neighbours[w]) for w in neighbours[head] & neighbours[c])
        if score > 0:
            ra[c] = score
    return ra


def test_hard_negatives_are_never_a_true_edge_nor_the_source():
    csr, (heads, _), forbidden, true_pairs = _split_graph()
    neg = hard_ids(csr, heads, 12, forbidden, 0)
    assert neg.shape == (heads.size, 12) and neg.dtype == np.int64
    drawn = set(zip(np.repeat(heads, 12).tolist(), neg.reshape(-1).tolist()))
    assert not drawn & true_pairs
    assert all(h != t for h, t in drawn)
    assert ((neg >= 0) & (neg < 80)).all()


def test_a_held_out_pair_with_the_highest_ra_is_skipped_and_the_rest_come_in_ra_order():
    # 0-1, 0-2, 1-3, 2-3, 1-4, 2-5, 2-8, 5-6, 5-7; (0, 3) is the held-out positive
    # RA from 0 in the message graph: 3: 1/3 + 1/4 (forbidden), 4: 1/3, 5: 1/4, 8: 1/4
    n = 9
    u = np.array([0, 0, 1, 2, 1, 2, 2, 5, 5])
    v = np.array([1, 2, 3, 3, 4, 5, 8, 6, 7])
    csr = csr_from_edges(np.concatenate([u, v]), np.concatenate([v, u]), n)
    forbidden = edge_keys_both_directions(np.append(u, 0), np.append(v, 3), n)
    for seed in range(6):
        neg = hard_ids(csr, np.array([0, 0]), 2, forbidden, seed)
        assert neg[0, 0] == 4 and neg[0, 1] in (5, 8)
        assert np.array_equal(neg[0], neg[1])  # positives of one source share the candidates
    ties = {int(hard_ids(csr, np.array([0]), 2, forbidden, s)[0, 1])
            for s in range(20)}
    assert ties == {5, 8}  # equal RA is broken by the seed, not by node id
    # only 3 candidates (4, 5, 8) exist: the 2 other slots come from the uniform fill
    fills = set()
    for seed in range(6):
        neg = hard_ids(csr, np.array([0]), 5, forbidden, seed)[0]
        assert neg[0] == 4 and set(neg[1:3]) == {5, 8}
        fills |= set(neg[3:].tolist())
    assert {6, 7} <= fills <= {4, 5, 6, 7, 8}  # all non-edges of 0, drawn by the seed


@pytest.mark.parametrize("seed", [0, 1])
def test_they_are_the_top_ra_candidates_when_enough_exist(seed):
    n = 80
    csr, (heads, _), forbidden, true_pairs = _split_graph(n=n, seed=seed)
    k = 4
    neg = hard_ids(csr, heads, k, forbidden, seed)
    checked = 0
    for head, row in zip(heads.tolist(), neg):
        ra = _reference_ra(csr, n, head, true_pairs)
        if len(ra) < k:
            continue
        checked += 1
        assert len(set(row.tolist())) == k and set(row.tolist()) <= set(ra)
        best = sorted(ra.values(), reverse=True)[:k]
        np.testing.assert_allclose(sorted((ra[c] for c in row.tolist()), reverse=True), best)
        assert ra[int(row[0])] >= max(ra.values()) - 1e-12  # highest RA first
    assert checked >= heads.size // 2


@pytest.mark.parametrize("seed", [0, 1])
def test_a_target_range_keeps_the_top_ra_candidates_inside_it(seed):
    """``targets``: a typed graph's target type. Candidates outside are dropped before the
    ranking (not after a top-k of all), and the uniform fill stays inside too."""
    n, lo, hi, k = 80, 30, 70, 4
    csr, (heads, _), forbidden, true_pairs = _split_graph(n=n, seed=seed)
    neg = hard_ids(csr, heads, k, forbidden, seed, targets=(lo, hi))
    assert ((neg >= lo) & (neg < hi)).all()
    checked = 0
    for head, row in zip(heads.tolist(), neg):
        assert not any((head, c) in true_pairs or c == head for c in row.tolist())
        ra = {c: r for c, r in _reference_ra(csr, n, head, true_pairs).items() if lo <= c < hi}
        if len(ra) < k:
            continue
        checked += 1
        best = sorted(ra.values(), reverse=True)[:k]
        np.testing.assert_allclose(sorted((ra[c] for c in row.tolist()), reverse=True), best)
    assert checked >= heads.size // 3


def test_the_uniform_fill_of_an_isolated_source_stays_in_the_target_range():
    n = 30
    u, v = np.arange(1, n - 1), np.arange(2, n)  # a path; node 0 has no edge
    csr = csr_from_edges(np.concatenate([u, v]), np.concatenate([v, u]), n)
    neg = hard_ids(csr, np.array([0, 0, 5]), 6, np.array([0 * n + 20]),
                         0, targets=(10, 25))
    assert ((neg >= 10) & (neg < 25)).all() and 20 not in neg[:2]


def test_hard_negatives_have_a_higher_ra_than_uniform_ones():
    csr, (heads, _), forbidden, _ = _split_graph(seed=3)
    hard = hard_ids(csr, heads, 10, forbidden, 0)
    uniform = NegativeSampler(forbidden, 80).sample(
        heads, 10, np.random.default_rng(0))
    ra_hard = pair_scores(csr, np.repeat(heads, 10), hard.reshape(-1))["resource_allocation"]
    ra_uniform = pair_scores(csr, np.repeat(heads, 10), uniform.reshape(-1))["resource_allocation"]
    assert ra_hard.mean() > 3 * ra_uniform.mean()


def test_the_same_seed_gives_the_same_candidates_whatever_the_chunk_budget():
    csr, (heads, _), forbidden, _ = _split_graph(seed=4)
    simple = symmetric_simple(csr)
    indptr, indices = simple.indptr.numpy(), simple.indices.numpy()
    sources = np.unique(heads)

    def refuse(s, c):
        return contains(forbidden, s * 80 + c) | csr_contains(indptr, indices, c, s)

    first = top_ra_candidates(indptr, indices, sources, 15, refuse, 7, (0, 80), budget=BUDGET)
    assert np.array_equal(first, top_ra_candidates(indptr, indices, sources, 15, refuse, 7,
                                                   (0, 80), budget=5))
    assert np.array_equal(first[:3], top_ra_candidates(indptr, indices, sources[:3], 15, refuse,
                                                       7, (0, 80)))  # fewer sources: the same


def test_an_isolated_source_gets_uniform_non_edges_from_the_seed():
    # node 0 has no message edge; its held-out positive is (0, 1)
    n = 30
    ring = np.arange(1, n)
    u, v = ring, np.where(ring + 1 < n, ring + 1, 1)
    csr = csr_from_edges(np.concatenate([u, v]), np.concatenate([v, u]), n)
    forbidden = edge_keys_both_directions(np.append(u, 0), np.append(v, 1), n)
    neg = hard_ids(csr, np.array([0, 0]), 8, forbidden, 0)
    assert ((neg >= 2) & (neg < n)).all()  # never 0 itself nor 1, its true partner
    assert not np.array_equal(neg[0], neg[1])  # drawn per positive, not one fixed list
    other = hard_ids(csr, np.array([0, 0]), 8, forbidden, 1)
    assert not np.array_equal(neg, other)


def test_a_source_linked_to_every_other_node_raises_clearly():
    n = 4
    u, v = np.array([0, 0, 0]), np.array([1, 2, 3])  # node 0 is linked to every other node
    csr = csr_from_edges(np.concatenate([u, v]), np.concatenate([v, u]), n)
    forbidden = edge_keys_both_directions(u, v, n)
    with pytest.raises(ValueError, match=r"could not draw a valid negative .* node 0\)"):
        hard_ids(csr, np.array([0]), 2, forbidden, 0)


def test_the_ranked_count_is_the_slots_the_2_hop_ranking_filled():
    n = 30
    u, v = np.arange(1, n - 1), np.arange(2, n)  # a path; node 0 has no edge
    csr = csr_from_edges(np.concatenate([u, v]), np.concatenate([v, u]), n)
    # node 5 on the path: 2-hop candidates 3 and 7 only; isolated node 0: none
    ids, ranked = hard_negatives(csr, np.array([5, 0, 5]), 4, np.array([0], dtype=np.int64), 0)
    assert ranked == 2 + 0 + 2
    assert set(ids[0, :2].tolist()) == {3, 7}
    report = {"hard_negatives": {}}
    note_ranked(report, {"val": ranked / ids.size, "test": 0.9})
    assert report["hard_negatives"]["ranked_fraction"] == {"val": 0.3333, "test": 0.9}
    assert 4 / 12 < RANKED_WARNING
    assert len(report["warnings"]) == 1 and "val 33%" in report["warnings"][0]
    quiet = {"hard_negatives": {}}
    note_ranked(quiet, {"val": 0.9, "test": 0.8})
    assert "warnings" not in quiet
