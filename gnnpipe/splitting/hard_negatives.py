"""HeaRT-style hard negatives by blocks: for each held-out positive, the non-edges its source
would be most tempted by.

Random negatives are mostly far from the source, so any model that scores nearby nodes high
ranks the positive first and MRR / Hits@K look far better than the model is (Li et al. 2023,
"Evaluating Graph Neural Networks for Link Prediction: Current Pitfalls and New Benchmarking",
HeaRT). HeaRT instead corrupts one endpoint of each positive ``(s, d)`` and keeps the candidates
that a heuristic ranks highest around ``s``. Here the heuristic is resource allocation on the
train phase's message graph, every edge type over homogeneous ids (``graph.offsets()``), as an
undirected simple view (both directions, no self-loop, no repeat), with candidates kept to the
held-out edge type's target type (from an author, 2-hop papers through ``writes`` then
``cites``, never authors): ``RA(s, c) = sum over w in N(s) & N(c) of 1 / deg w``, nonzero
exactly for the 2-hop neighbourhood of ``s``. Each positive gets the ``K`` candidates ``(s, c)``
of highest RA:

* never a true edge: not a pair of the prepared held-out relations (any role, either
  direction; ``link_split.refused``), not an edge of the view, and ``c != s``;
* ties in RA are broken by a seeded hash priority per node (no bias to low ids, and the same
  for any blocks);
* a source with fewer than ``K`` candidates (an isolated node, a small component) gets the rest
  from a hashed uniform draw over the target type under the same rules
  (``negatives.hashed_negatives`` on a stream of its own); only these filled slots may repeat a
  candidate, as in OGB.

Tasks: ``route_view`` (per row block of each edge type's train graph: both directions over
homogeneous ids, routed to the view's row blocks), ``build_view`` (a row block sorted,
deduplicated; ``place_csr`` lays the view into memory maps), ``hard_bucket`` (per sorted val /
test bucket of the link split: the RA ranking of its distinct sources, in chunks of at most
``BUDGET`` 2-hop paths, one sparse product each, then the fill) into ``h<k>.npy`` beside the
bucket. A source's ranking reads only its 2-hop rows of the mapped view, so its candidates do
not depend on the bucket or chunk it is ranked in. Cost per chunk: time O(P2 + R log R) with P2
its 2-hop paths and R its candidates; memory O(P2).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from gnnpipe.data.graph import Graph, edge_type_name
from gnnpipe.graphops.heuristics import BUDGET, neighbour_weights, rows_of
from gnnpipe.io.blocks import load_routed, open_memmap, save_array, save_routed
from gnnpipe.io.csr_blocks import row_ranges, rows_by_edges
from gnnpipe.runtime.engine import run_blocks
from gnnpipe.runtime.rng import mix
from gnnpipe.splitting.split import block_edges, open_array, place_csr, save_rows
from gnnpipe.splitting.link_split import HELD_OUT, Held, LinkBlocks, csr_contains, refused
from gnnpipe.splitting.negatives import hashed_negatives

PRIORITY_STEP = zlib.crc32(b"split.link.hard.priority")  # the tie-break order of candidates
FILL_STEP = zlib.crc32(b"split.link.hard.fill")  # the uniform fill's draws


def top_ra_candidates(indptr, indices, sources: np.ndarray, k: int, refuse, seed: int,
                      targets: tuple[int, int], refusable: np.ndarray | None = None,
                      budget: int = BUDGET) -> np.ndarray:
    """The ``k`` allowed candidates of highest RA from each of ``sources`` (sorted, distinct,
    int64 (S,)) on the undirected simple view ``indptr`` / ``indices`` (mapped), best first:
    int64 (S, k), padded with -1 where a source has fewer. ``refuse(s, c)`` bool: the pair is
    not allowed (besides ``c == s``); ``targets`` ``[start, stop)``: the only ids a candidate
    may have; equal RA ordered by ``mix(seed, PRIORITY_STEP, c)``. ``refusable`` int (S,): at
    least the candidates ``refuse`` can turn down per source, so only each source's best ``k +
    refusable`` scores (ties kept) are checked (None: all)."""
    from scipy import sparse  # ~0.4 s: only hard negatives need it, not every split

    top = np.full((sources.size, k), -1, dtype=np.int64)
    if not sources.size:
        return top
    counts, first = rows_of(indptr, indices, sources)
    deg = np.asarray(indptr[first + 1]) - np.asarray(indptr[first])
    reach = np.concatenate([[0], np.cumsum(deg)])  # 2-hop paths through each neighbour slot
    offsets = np.concatenate([[0], np.cumsum(counts)])
    n = int(indptr.shape[0]) - 1
    for start, stop in rows_by_edges(reach[offsets], budget):  # sources by their 2-hop paths
        chunk = sources[start:stop]
        cols = first[offsets[start]:offsets[stop]]
        mids, inverse = np.unique(cols, return_inverse=True)  # the w of N(s), ascending
        mid_counts, ends = rows_of(indptr, indices, mids)
        weights = neighbour_weights(mid_counts)["resource_allocation"]
        # row w of D^-1 A: what w passes on to each neighbour (resource allocation)
        spread = sparse.csr_matrix((np.repeat(weights, mid_counts), ends,
                                    np.concatenate([[0], np.cumsum(mid_counts)])),
                                   shape=(mids.size, n))
        adjacency = sparse.csr_matrix((np.ones(cols.size), inverse, offsets[start:stop + 1]
                                       - offsets[start]), shape=(chunk.size, mids.size))
        ra = (adjacency @ spread).tocsr()  # (chunk, N): RA(s, c) of every 2-hop candidate
        local = np.repeat(np.arange(chunk.size), np.diff(ra.indptr))
        cand, score = ra.indices.astype(np.int64), ra.data
        s = chunk[local]
        keep = (score > 0) & (cand >= targets[0]) & (cand < targets[1]) & (cand != s)
        local, cand, score, s = local[keep], cand[keep], score[keep], s[keep]
        if refusable is not None:  # only the best `wanted` can hold the top k allowed
            bounds = np.searchsorted(local, np.arange(chunk.size + 1))
            wanted = k + refusable[start:stop]
            keep = np.ones(local.size, dtype=bool)
            for row in np.flatnonzero(np.diff(bounds) > wanted):
                values = score[bounds[row]:bounds[row + 1]]
                cut = np.partition(values, values.size - wanted[row])[values.size - wanted[row]]
                keep[bounds[row]:bounds[row + 1]] = values >= cut
            local, cand, score, s = local[keep], cand[keep], score[keep], s[keep]
        allowed = ~refuse(s, cand)
        local, cand, score = local[allowed], cand[allowed], score[allowed]
        # per source: highest RA first, then the seeded priority
        rank = np.lexsort((mix(seed, PRIORITY_STEP, cand), -score, local))
        local, cand = local[rank], cand[rank]
        slot = np.arange(local.size) - np.searchsorted(local, np.arange(chunk.size))[local]
        take = slot < k
        top[start + local[take], slot[take]] = cand[take]
    return top


def route_view(block: int, files: tuple, offsets: tuple[int, int], lo: int, hi: int,
               starts: np.ndarray, folder: str) -> None:
    """Rows ``[lo, hi)`` of one edge type's train graph (``files``: its indptr / indices
    ``.npy``, or the prepared graph.pt and the edge type's name): both directions of every
    non-loop edge over homogeneous ids (``offsets`` of its source and target types), as
    (row, column) routed to the view's row blocks beginning at ``starts``."""
    u, v = block_edges(*map(open_array, files), lo, hi)
    u, v = u + offsets[0], v + offsets[1]
    proper = u != v
    rows = np.concatenate([v[proper], u[proper]])
    pairs = np.stack([rows, np.concatenate([u[proper], v[proper]])], axis=1)
    save_routed(Path(folder) / "in", f"e{block:06d}", pairs,
                np.searchsorted(starts, rows, side="right") - 1, starts.size)


def build_view(block: int, lo: int, hi: int, num_nodes: int, folder: str) -> int:
    """The view's rows ``[lo, hi)``: distinct columns per row, as ``place_csr`` reads them
    from ``<folder>/rows/``; returns their count."""
    pairs = load_routed(Path(folder) / "in", block, np.int64, 2)
    keys = np.unique(pairs[:, 0] * num_nodes + pairs[:, 1])
    rows, cols = keys // num_nodes, keys % num_nodes
    return save_rows(Path(folder), block, lo, hi, cols, rows)


def hard_rows(indptr, indices, heads: np.ndarray, edges: np.ndarray, per_head: int, refuse,
              seed: int, targets: tuple[int, int], refusable: np.ndarray | None = None
              ) -> tuple[np.ndarray, int]:
    """``per_head`` hard negatives of each positive: int64 (P, per_head) ids in ``targets``
    ``[start, stop)``, row i for ``heads[i]`` (P,), the positives' ids ``edges`` (P,) seeding
    the uniform fill; and the slots the ranking filled. The view ``indptr`` / ``indices``,
    ``refuse(s, c)`` and ``refusable`` (per node, (N,)) as ``top_ra_candidates``, which ranks
    each distinct head once."""
    sources = np.unique(heads)
    top = top_ra_candidates(indptr, indices, sources, per_head, refuse, seed, targets,
                            None if refusable is None else np.asarray(refusable[sources]))[
        np.searchsorted(sources, heads)]
    count = (top >= 0).sum(axis=1)
    short = np.flatnonzero(count < per_head)
    if short.size:  # too few 2-hop candidates: uniform non-edges for the empty slots
        start, stop = targets
        fill = hashed_negatives(heads[short], edges[short], per_head, seed, stop - start, None,
                                lambda h, t: refuse(h, t + start), step=FILL_STEP) + start
        empty = np.arange(per_head) >= count[short, None]
        top[short] = np.where(empty, fill, top[short])
    return top, int(count.sum())


def hard_bucket(phase: str, bucket: int, source: str, held: Held, view: tuple[str, str, str],
                per_head: int, seed: int) -> tuple[int, int]:
    """``per_head`` hard negatives (type-local ids of E[2]) of the positives in
    ``<source>/b<bucket>.npy`` into ``h<bucket>.npy``; returns the slots the ranking filled and
    the slots."""
    rels = held.open()
    indptr, indices = open_memmap(Path(view[0])), open_memmap(Path(view[1]))
    pairs = np.load(Path(source) / f"b{bucket:06d}.npy")
    a, p = pairs[:, 0], pairs[:, 1]
    s_off, d_off = held.offsets

    def refuse(s: np.ndarray, c: np.ndarray) -> np.ndarray:  # homogeneous ids
        return refused(held, rels, s - s_off, c - d_off) | csr_contains(indptr, indices, c, s)

    ids, ranked = hard_rows(indptr, indices, a + s_off, a * held.num_dst + p, per_head, refuse,
                            seed, (d_off, d_off + held.num_dst), open_memmap(Path(view[2])))
    save_array(Path(source) / f"h{bucket:06d}.npy", ids - d_off)
    return ranked, ids.size


def train_view_files(client, graph: Graph, split: LinkBlocks) -> tuple[str, str, str]:
    """The train phase's simple undirected view over homogeneous ids into the split's scratch
    folder: its (indptr, indices) ``.npy`` files, and per node int64 (N,) at least the
    candidates the ranking can refuse (``top_ra_candidates``'s ``refusable``)."""
    folder, sizes = split.scratch / "view", split.sizes
    n = graph.num_nodes
    starts = np.arange(0, max(n, 1), sizes.rows, dtype=np.int64)
    view_blocks = row_ranges(n, sizes.rows)
    offsets, held = graph.offsets(), split.held.relations
    calls = []
    for edge_type in graph.edge_types:  # the split's files of a held relation, else graph.pt's
        name = edge_type_name(edge_type)
        files = (tuple(map(str, split.message["train"][held.index(edge_type)]))
                 if edge_type in held else tuple((split.held.graph_file, f"{name}.{part}")
                                                 for part in ("indptr", "indices")))
        calls += [(files, (offsets[edge_type[0]], offsets[edge_type[2]]), lo, hi)
                  for lo, hi in rows_by_edges(open_array(files[0]), sizes.edges, sizes.rows)]
    run_blocks(client, route_view, [(i, *call) for i, call in enumerate(calls)],
               starts=starts, folder=str(folder))
    kept = run_blocks(client, build_view, [(i, lo, hi) for i, (lo, hi) in
                                           enumerate(view_blocks)],
                      num_nodes=n, folder=str(folder))
    indptr_file, indices_file = place_csr(client, folder, view_blocks, kept, n)
    # what the ranking may turn down per node: its view neighbours, its pairs the view does
    # not hold (val, test, supervision-only positives), itself (a few bytes per node here)
    refusable = np.diff(open_memmap(indptr_file)) + 1
    s_off, d_off = split.held.offsets
    hidden = HELD_OUT + (("train_supervision",) if split.disjoint else ())
    for role in hidden:
        for pairs in split.edge_parts(role):
            np.add.at(refusable, np.concatenate([pairs[:, 0] + s_off, pairs[:, 1] + d_off]), 1)
    save_array(folder / "refusable.npy", refusable)
    return str(indptr_file), str(indices_file), str(folder / "refusable.npy")


def hard_link_negatives(client, graph: Graph, split: LinkBlocks, per_head: int, seed: int
                        ) -> dict[str, float]:
    """``per_head`` hard negatives of every val and test positive of ``split``, beside its
    sorted buckets (``h<k>.npy``, read by ``LinkBlocks.negative_parts(phase, "h")``); returns
    phase -> the fraction of slots the 2-hop ranking filled (the rest: uniform). On ``client``
    (None: in this process)."""
    if per_head < 1:
        raise ValueError(f"hard negatives: the number per positive must be >= 1, got {per_head}")
    view = train_view_files(client, graph, split)
    calls = [(phase, k, str(split.positives[phase][0])) for phase in HELD_OUT
             for k in range(split.positives[phase][1])]
    done = run_blocks(client, hard_bucket, calls, held=split.held, view=view,
                      per_head=per_head, seed=seed)
    filled = {phase: np.zeros(2, dtype=np.int64) for phase in HELD_OUT}  # ranked, all slots
    for (phase, _, _), counts in zip(calls, done):
        filled[phase] += counts
    return {phase: int(ranked) / max(int(slots), 1) for phase, (ranked, slots) in filled.items()}


# below this share of ranked slots the "hard" negatives are mostly uniform ones: say so
RANKED_WARNING = 0.5


def note_ranked(report: dict, ranked: dict[str, float]) -> None:
    """Record in the split audit ``report`` (its ``hard_negatives`` entry) the fraction of each
    phase's hard-negative slots that the 2-hop ranking filled, with a warning below
    ``RANKED_WARNING``: the run goes on, but the hard-negative scores are then near-random."""
    report["hard_negatives"]["ranked_fraction"] = {p: round(f, 4) for p, f in ranked.items()}
    low = {p: f for p, f in ranked.items() if f < RANKED_WARNING}
    if low:
        shares = ", ".join(f"{p} {f:.0%}" for p, f in low.items())
        report.setdefault("warnings", []).append(
            f"hard_negatives: only {shares} of the hard negatives come from the 2-hop ranking, "
            "the rest are uniform non-edges (few 2-hop paths, e.g. a bipartite relation): the "
            "hard-negative scores are close to the random-negative ones")
