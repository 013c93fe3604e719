"""The hops of gnnpipe's neighbor sampler: which nodes and edges each hop adds, for every edge
type, as NumPy arrays (``gnnpipe.sampling.neighbor`` turns them into PyG's outputs).

Node types and edge types are positions (``num_nodes[t]``, ``plans[i]``, see
``gnnpipe.sampling.edge_plan``): a batch builds short lists, and the one-type graph of
``CsrNeighborSampler`` pays for one-element lists, not for the typed bookkeeping.

Order of the output (pyg-lib's ``neighbor_sample`` / ``hetero_neighbor_sample``, ``csc=True``):

- Hop ``h``, for every plan ``(s, r, d)`` in order: every ``d`` node first reached at hop
  ``h - 1`` (the seeds at hop 0) draws up to ``k`` of its in-edges ``u -> v``
  (``gnnpipe.sampling.pick``); an ``s`` node not sampled yet becomes new at hop ``h``. ``row`` =
  local id of the source ``u``, ``col`` = local id of the target ``v``. Every node is a
  frontier at most once, so without replacement no edge appears twice; nodes reached in one
  hop through two edge types are one node.
- Local ids per node type: seeds first (input order, duplicates kept; a repeated seed is its
  first copy as a source), then nodes in order of first appearance (plan, then frontier order,
  then draw order). ``num_nodes[t] = [seeds of t or 0, new at hop 1, ...]``, ``num_edges[i]``
  per hop (edges stored hop by hop).
- Disjoint: every seed grows its own tree (tree ids count the seeds over the seed types in
  input order); a node reached from two seeds appears twice, ``batch[t][i]`` is the tree of
  local node ``i``. Time-bounded plans draw only edges no later than their tree's seed.
- Induced: the hops choose the nodes; the edges are every edge among them (per tree when
  disjoint), per plan in the order of the sampled target nodes, then CSR order (no later than
  the tree's seed when timed); ``num_edges`` is None.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import torch
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

from gnnpipe.sampling.edge_plan import EdgePlan
from gnnpipe.sampling.pick import pick_edges, pick_weighted

_EMPTY = np.empty(0, dtype=np.int64)


class Sampled(NamedTuple):
    """One batch. Per node type ``t``: ``node[t]`` (N_t,) global ids, seeds first;
    ``batch[t]`` (N_t,) tree ids (None unless disjoint); ``num_nodes[t]`` per hop. Per plan
    ``i``: ``row[i]``, ``col[i]``, ``edge[i]`` (E_i,) local source, local target and position
    in the plan's arrays; ``num_edges[i]`` per hop (None when induced)."""

    node: list[np.ndarray]
    batch: Optional[list[np.ndarray]]
    row: list[np.ndarray]
    col: list[np.ndarray]
    edge: list[np.ndarray]
    num_nodes: list[list[int]]
    num_edges: Optional[list[list[int]]]

    def output(self) -> SamplerOutput:
        """PyG's homogeneous output of a one-type batch."""
        t = torch.from_numpy
        return SamplerOutput(node=t(self.node[0]), row=t(self.row[0]), col=t(self.col[0]),
                             edge=t(self.edge[0]),
                             batch=None if self.batch is None else t(self.batch[0]),
                             num_sampled_nodes=self.num_nodes[0],
                             num_sampled_edges=None if self.num_edges is None
                             else self.num_edges[0])

    def hetero_output(self, node_types: list[str], edge_types: list) -> HeteroSamplerOutput:
        """PyG's typed output, keyed by the names of the positions."""
        def by(keys, values):
            return dict(zip(keys, map(torch.from_numpy, values)))

        return HeteroSamplerOutput(
            node=by(node_types, self.node), row=by(edge_types, self.row),
            col=by(edge_types, self.col), edge=by(edge_types, self.edge),
            batch=None if self.batch is None else by(node_types, self.batch),
            num_sampled_nodes=dict(zip(node_types, self.num_nodes)),
            num_sampled_edges=None if self.num_edges is None
            else dict(zip(edge_types, self.num_edges)))


class Hops:
    """The hop loops over fixed plans.

    Args:
        num_nodes: nodes per node type, by position.
        plans: the edge types as sampled (``gnnpipe.sampling.edge_plan.edge_plans``).
        fanouts: per plan, one fan-out per hop (``-1`` all, ``0`` none); the same number of
            hops for every plan. Settable (PyG's bidirectional sampler sets it per hop).
        replace, induced: draw with replacement; build induced edges.
        temporal_strategy: ``uniform`` | ``last`` for time-bounded plans.
    """

    def __init__(self, num_nodes: list[int], plans: list[EdgePlan], fanouts: list[list[int]],
                 replace: bool, induced: bool, temporal_strategy: str):
        self.num_nodes, self.plans, self.fanouts = num_nodes, plans, fanouts
        self.replace, self.induced, self.temporal_strategy = replace, induced, temporal_strategy
        self._maps: list[Optional[np.ndarray]] = [None] * len(num_nodes)

    @property
    def num_hops(self) -> int:
        return len(self.fanouts[0]) if self.fanouts else 0

    def __getstate__(self) -> dict:  # workers get the graph, not the per-process scratch maps
        state = dict(self.__dict__)
        state["_maps"] = [None] * len(self.num_nodes)
        return state

    def scratch_map(self, t: int) -> np.ndarray:
        """Node type ``t``'s global -> local id map, -1 = not sampled; all -1 between batches.
        int32 below 2**31 nodes: the one array of every node a sampling process holds, 4 bytes
        a node (readers widen what they take from it to int64). Anonymous memory on purpose: it
        is written every batch, and a mapped file's pages fault again after each writeback
        (an epoch at 8M nodes was 17% slower)."""
        local = self._maps[t]
        if local is None:
            local = self._maps[t] = np.full(self.num_nodes[t], -1, dtype=map_dtype(
                self.num_nodes[t]))
        return local

    def _pick(self, plan: EdgePlan, frontier: np.ndarray, k: int, rng: np.random.Generator):
        """Sampled in-edges of ``frontier``: positions and frontier rows (``pick_edges``)."""
        indptr = plan.indptr
        start = _take(indptr, frontier)
        deg = _take(indptr, frontier + 1) - start
        if plan.weight is None:
            return pick_edges(start, deg, k, self.replace, rng)
        return pick_weighted(start, deg, k, self.replace, plan.weight, rng)

    # ------------------------------------------------------------------ one shared subgraph
    def shared(self, seeds: list[tuple[int, np.ndarray]], rng: np.random.Generator) -> Sampled:
        """One subgraph for all ``seeds`` ((type, (S,) int64 ids) in input order),
        deduplicated per node type through its scratch map."""
        n_types, plans, induced = len(self.num_nodes), self.plans, self.induced
        if self.num_hops == 0 and not induced:
            return self._seeds_alone(seeds)
        parts: list[list[np.ndarray]] = [[] for _ in range(n_types)]
        size = [0] * n_types
        n_nodes = [[0] for _ in range(n_types)]
        front: list[Optional[tuple[int, np.ndarray]]] = [None] * n_types  # (first local, ids)
        local = [self.scratch_map(t) for t in range(n_types)]
        for t, ids in seeds:
            # a repeated seed maps to its first copy: NumPy's last write wins, so write reversed
            # (a contiguous copy of the reversed ids writes faster than the strided view)
            local[t][ids[::-1].copy()] = np.arange(ids.size - 1, -1, -1)
            front[t] = (0, ids)
            parts[t].append(ids)
            size[t] = n_nodes[t][0] = ids.size
        rows, cols, ids_ = [[] for _ in plans], [[] for _ in plans], [[] for _ in plans]
        n_edges: list[list[int]] = [[] for _ in plans]
        done = False
        try:
            for hop in range(self.num_hops):
                hop_first = size.copy()
                new: list[list[np.ndarray]] = [[] for _ in range(n_types)]
                for i, plan in enumerate(plans):
                    k, at = self.fanouts[i][hop], front[plan.dst]
                    if k == 0 or at is None or at[1].size == 0:
                        n_edges[i].append(0)
                        continue
                    pos, owner = self._pick(plan, at[1], k, rng)
                    src = plan.src
                    src_local, fresh = _dedupe(local[src], _take(plan.indices, pos), size[src])
                    parts[src].append(fresh)
                    new[src].append(fresh)
                    size[src] += fresh.size
                    if not induced:
                        rows[i].append(src_local)
                        cols[i].append(owner + at[0])  # frontier ids are one contiguous range
                        ids_[i].append(pos)
                    n_edges[i].append(int(pos.size))
                for t in range(n_types):
                    n_nodes[t].append(size[t] - hop_first[t])
                    front[t] = (hop_first[t], _join(new[t])) if new[t] else None
            node = [_cat(p) for p in parts]
            if induced:
                rows, cols, ids_ = self._induced_shared(node, local)
                n_edges = None
            done = True
        finally:
            for t in range(n_types):
                if done:
                    local[t][node[t]] = -1
                else:  # interrupted mid-hop: tags may sit anywhere in the map
                    local[t].fill(-1)
        return Sampled(node, None, [_join(r) for r in rows], [_join(c) for c in cols],
                       [_join(e) for e in ids_], n_nodes, n_edges)

    def _seeds_alone(self, seeds: list[tuple[int, np.ndarray]]) -> Sampled:
        """Zero hops, not induced: the batch is the seeds, no edges (no scratch map needed)."""
        node = [_EMPTY] * len(self.num_nodes)
        for t, ids in seeds:
            node[t] = ids
        plans = range(len(self.plans))
        return Sampled([v.copy() for v in node], None, [_EMPTY.copy() for _ in plans],
                       [_EMPTY.copy() for _ in plans], [_EMPTY.copy() for _ in plans],
                       [[v.size] for v in node], [[] for _ in plans])

    def _induced_shared(self, node: list[np.ndarray], local: list[np.ndarray]):
        """Every edge of every plan between two sampled nodes: rows, cols, ids per plan."""
        rows, cols, ids = [], [], []
        for plan in self.plans:
            pos, owner, src_id = _in_edges(plan, node[plan.dst])
            src_local = _take(local[plan.src], src_id)
            keep = src_local >= 0
            rows.append([src_local[keep].astype(np.int64)])
            cols.append([owner[keep]])
            ids.append([pos[keep]])
        return rows, cols, ids

    # ---------------------------------------------------------------------- one tree per seed
    def disjoint(self, seeds: list[tuple[int, np.ndarray]], seed_time: Optional[np.ndarray],
                 rng: np.random.Generator) -> Sampled:
        """One tree per seed; nodes of type t are keyed ``tree * N_t + node`` and deduplicated
        per tree with a sorted key array per type. ``seed_time`` (B,): each tree's time bound
        for the time-bounded plans (their positions are in the ``TemporalIndex``'s time-sorted
        order until mapped back with its ``perm``)."""
        n_types, plans, induced = len(self.num_nodes), self.plans, self.induced
        parts: list[list[np.ndarray]] = [[] for _ in range(n_types)]
        trees: list[list[np.ndarray]] = [[] for _ in range(n_types)]
        size = [0] * n_types
        n_nodes = [[0] for _ in range(n_types)]
        seen_key, seen_local = [_EMPTY] * n_types, [_EMPTY] * n_types
        front: list[Optional[tuple]] = [None] * n_types  # (first local, ids, trees)
        b = 0
        for t, ids in seeds:
            tree = np.arange(b, b + ids.size)  # tree ids run on over the seed types, as pyg-lib
            b += ids.size
            seen_key[t] = tree * self.num_nodes[t] + ids  # sorted: tree ids increase
            seen_local[t] = np.arange(ids.size)
            front[t] = (0, ids, tree)
            parts[t].append(ids)
            trees[t].append(tree)
            size[t] = n_nodes[t][0] = ids.size
        bound = [None if p.temporal is None else p.temporal.bound(seed_time) for p in plans]
        # the key sets are read again by a later plan of the same source type, another hop
        # or the induced edges: after the last such read, they need no merge
        last_read = {p.src: (self.num_hops - 1, i) for i, p in enumerate(plans)}
        rows, cols, ids_ = [[] for _ in plans], [[] for _ in plans], [[] for _ in plans]
        n_edges: list[list[int]] = [[] for _ in plans]
        for hop in range(self.num_hops):
            hop_first = size.copy()
            new: list[list[np.ndarray]] = [[] for _ in range(n_types)]
            new_tree: list[list[np.ndarray]] = [[] for _ in range(n_types)]
            for i, plan in enumerate(plans):
                k, at, src = self.fanouts[i][hop], front[plan.dst], plan.src
                if k == 0 or at is None or at[1].size == 0:
                    n_edges[i].append(0)
                    continue
                first, frontier, ftree = at
                temporal = plan.temporal
                if temporal is None:
                    pos, owner = self._pick(plan, frontier, k, rng)
                    indices = plan.indices
                else:  # the frontier node's tree fixes the time bound
                    start = _take(plan.indptr, frontier)
                    pos, owner = temporal.pick(frontier, start, _take(bound[i], ftree), k,
                                               self.replace, self.temporal_strategy, rng)
                    indices = temporal.indices
                n_src = self.num_nodes[src]
                key = _take(ftree, owner) * n_src + _take(indices, pos)  # (E,) tree-qualified
                src_local, found = _lookup(seen_key[src], seen_local[src], key)
                uniq, first_at, inverse = np.unique(key[~found], return_index=True,
                                                    return_inverse=True)
                order = np.argsort(first_at, kind="stable")  # discovery order
                uniq_local = np.empty(uniq.size, dtype=np.int64)
                uniq_local[order] = size[src] + np.arange(uniq.size)
                src_local[~found] = uniq_local[inverse.reshape(-1)]
                if uniq.size and (induced or last_read[src] != (hop, i)):
                    at_key = np.searchsorted(seen_key[src], uniq)  # merge two sorted key sets
                    seen_key[src] = np.insert(seen_key[src], at_key, uniq)
                    seen_local[src] = np.insert(seen_local[src], at_key, uniq_local)
                fresh = uniq[order]
                fresh_node, fresh_tree = fresh % n_src, fresh // n_src
                parts[src].append(fresh_node)
                trees[src].append(fresh_tree)
                new[src].append(fresh_node)
                new_tree[src].append(fresh_tree)
                size[src] += uniq.size
                if not induced:
                    rows[i].append(src_local)
                    cols[i].append(owner + first)
                    ids_[i].append(pos if temporal is None else _take(temporal.perm, pos))
                n_edges[i].append(int(pos.size))
            for t in range(n_types):
                n_nodes[t].append(size[t] - hop_first[t])
                front[t] = ((hop_first[t], _join(new[t]), _join(new_tree[t])) if new[t]
                            else None)
        node = [_cat(p) for p in parts]
        batch = [_cat(p) for p in trees]
        if induced:
            rows, cols, ids_ = self._induced_disjoint(node, batch, seen_key, seen_local,
                                                      seed_time)
            n_edges = None
        return Sampled(node, batch, [_join(r) for r in rows], [_join(c) for c in cols],
                       [_join(e) for e in ids_], n_nodes, n_edges)

    def _induced_disjoint(self, node, batch, seen_key, seen_local, seed_time):
        """Every edge between two nodes of the same tree (no later than its seed, if timed)."""
        rows, cols, ids = [], [], []
        for plan in self.plans:
            src, dst = plan.src, plan.dst
            pos, owner, src_id = _in_edges(plan, node[dst])
            # most in-edges come from nodes in no tree at all: drop those with one gather
            # through the scratch map before the per-tree lookup (a binary search per edge)
            member = self.scratch_map(src)
            member[node[src]] = 0
            try:
                in_some_tree = _take(member, src_id) >= 0
            finally:
                member[node[src]] = -1
            pos, owner, src_id = pos[in_some_tree], owner[in_some_tree], src_id[in_some_tree]
            tree = _take(batch[dst], owner)
            src_local, found = _lookup(seen_key[src], seen_local[src],
                                       tree * self.num_nodes[src] + src_id)
            if plan.time is not None:  # an edge among the tree's nodes may still be too recent
                found &= _take(plan.time, pos) <= _take(seed_time, tree)
            rows.append([src_local[found]])
            cols.append([owner[found]])
            ids.append([pos[found]])
        return rows, cols, ids


def _in_edges(plan: EdgePlan, targets: np.ndarray):
    """Every in-edge of the nodes ``targets``: position, owner (index into ``targets``) and
    source id, each (E,), in target order, then CSR order."""
    start = _take(plan.indptr, targets)
    pos, owner = pick_edges(start, _take(plan.indptr, targets + 1) - start, -1, False, None)
    return pos, owner, _take(plan.indices, pos)


def _dedupe(local: np.ndarray, src: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Local ids (E,) of the sources ``src`` and the new nodes among them (U,), in slot order.

    ``local`` maps global -> local id (-1 = not sampled) and is updated; new nodes get
    ``n, n + 1, ...`` in order of first occurrence (pyg-lib's order). Without sorting: every
    unseen slot writes its tag into the map in reverse, so the first slot of each node
    survives (NumPy's last write wins), and that slot's node is new.
    """
    src_local = _take(local, src).astype(np.int64)  # (E,) int64 whatever the map's dtype
    is_new = src_local < 0
    unseen = src[is_new]
    slot = np.arange(unseen.size)
    local[unseen[::-1]] = -2 - slot[::-1]
    winner = -2 - _take(local, unseen)  # (U,): surviving slot of each node
    is_winner = winner == slot
    fresh = unseen[is_winner]
    rank = np.cumsum(is_winner) - 1  # (U,): new-node index of each winning slot
    src_local[is_new] = n + _take(rank, winner)
    local[fresh] = n + np.arange(fresh.size)
    return src_local, fresh


def map_dtype(num_nodes: int) -> type:
    """The scratch map's dtype for ``num_nodes``: int32 while local ids and the negative tags
    of ``_dedupe`` (-2 - slot, slot < a hop's edges) fit, else int64."""
    return np.int32 if num_nodes < 2**31 - 1 else np.int64


def _take(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``values[index]`` for indices known to be in range: ``mode="clip"`` skips NumPy's bounds
    error path, which makes the gather several times faster (the method skips ``np.take``'s
    dispatch, which small batches feel)."""
    return values.take(index, mode="clip")


def _lookup(sorted_key: np.ndarray, value: np.ndarray, key: np.ndarray):
    """``value`` at each ``key`` found in ``sorted_key`` (-1 elsewhere) and the found mask."""
    if sorted_key.size == 0:
        return np.full(key.size, -1, dtype=np.int64), np.zeros(key.size, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_key, key), sorted_key.size - 1)
    found = sorted_key[at] == key
    return np.where(found, value[at], -1), found


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    """The parts in one new array (a copy even of one part: seeds may be the caller's)."""
    if len(parts) == 1:
        return parts[0].copy()
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _join(parts: list[np.ndarray]) -> np.ndarray:
    """``_cat`` without the copy of a single part (arrays the hops made themselves)."""
    return parts[0] if len(parts) == 1 else _cat(parts)
