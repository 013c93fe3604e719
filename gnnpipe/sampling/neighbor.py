"""gnnpipe's CSR neighbor sampler behind PyG's ``BaseSampler`` interface.

PyG's ``NeighborSampler`` needs pyg-lib or torch-sparse (compiled extensions); this one is plain
vectorized NumPy over the CSR arrays, so ``torch_geometric.loader.NodeLoader`` /
``LinkLoader`` give the same batches as ``NeighborLoader`` / ``LinkNeighborLoader`` would:
``batch.n_id`` with the seeds first, ``batch.batch_size`` seeds, ``batch.edge_index`` local.

Semantics follow pyg-lib's ``neighbor_sample`` (CSC, ``csc=True``):

- The CSR row of ``v`` lists the sources of the edges into ``v`` (see ``gnnpipe.graph``), so a
  hop draws, for every frontier node ``v``, up to ``k`` of its in-edges ``(u -> v)``.
  ``row`` = local id of the source ``u``, ``col`` = local id of the target ``v``: messages flow
  from the sampled neighbours into the seeds, as GNN layers expect.
- Hop 0's frontier is the seeds, hop ``h``'s the nodes first reached at hop ``h - 1``; every node
  is a frontier at most once, so without replacement no edge appears twice.
- ``k = -1`` takes all in-edges; ``deg <= k`` without replacement takes all; with replacement
  exactly ``k`` draws (duplicates kept as edges, nodes deduplicated).
- Local ids: seeds ``0..B-1`` (in input order, duplicates kept), then nodes in order of first
  discovery. ``num_sampled_nodes = [B, new at hop 1, ...]``, ``num_sampled_edges`` per hop.
- ``edge`` is the CSR position of each sampled edge (the column of ``Csr.edge_index()``).
- ``disjoint``: each seed grows its own tree; a node reached from two seeds appears twice, and
  ``batch[i]`` is the seed (0..B-1) whose tree holds local node ``i``.
- ``induced``: the hops choose the nodes; the edges are then every edge among them.
- ``bidirectional``: PyG's ``SamplerOutput.to_bidirectional`` (both directions of each edge).
- Temporal (``edge_time`` or ``node_time`` given): only edges no later than the seed's time
  (``NodeSamplerInput.time``), disjoint trees, PyG's ``temporal_strategy``; see
  ``gnnpipe.sampling.temporal``.
- Weighted (``weight_attr`` / ``edge_weight``): a node's in-edges are drawn with probability
  proportional to their weight, as pyg-lib (``gnnpipe.sampling.pick.pick_weighted``).
- ``sample_direction="backward"`` (PyG 2.7+): the hops follow out-edges instead, from the CSR
  transposed once; a frontier node ``v`` draws up to ``k`` of its out-edges ``(v -> u)`` and
  the output keeps the edges' direction (``row`` = ``v``, ``col`` = ``u``), as PyG swaps them.
- ``num_neighbors=[]``: zero hops, the batch is the seeds alone
  (``num_sampled_nodes = [B]``, ``num_sampled_edges = []``), as pyg-lib.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    NegativeSampling,
    NodeSamplerInput,
    SamplerOutput,
)
from torch_geometric.sampler.neighbor_sampler import edge_sample, node_sample
from torch_geometric.sampler.utils import to_csc

from gnnpipe.graph import Csr
from gnnpipe.sampling.backend import resolve_backend
from gnnpipe.sampling.pick import pick_edges, pick_weighted
from gnnpipe.sampling.store import csc_of_stores
from gnnpipe.sampling.temporal import TemporalIndex, check_strategy

SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")
SAMPLE_DIRECTIONS = ("forward", "backward")


# ---------------------------------------------------------------------------------- the sampler
def sampler_seed(seed: int | torch.Generator | None) -> int:
    """A sampler's stream seed: ``seed`` itself, one draw of a generator, or of torch's RNG."""
    if isinstance(seed, torch.Generator):
        return int(torch.randint(2**62, (), generator=seed))
    return int(torch.randint(2**62, ())) if seed is None else int(seed)


class CsrNeighborSampler(BaseSampler):
    """Neighbor sampler over a CSR graph, usable by PyG's ``NodeLoader`` and ``LinkLoader``.

    Args:
        graph: a ``gnnpipe.graph.Csr`` (row ``v`` = sources of edges into ``v``) or a PyG
            ``Data`` with ``edge_index`` (converted to CSC once, as PyG's sampler does); or
            PyG's remote backend ``(FeatureStore, GraphStore)`` (``graph_store.csc()``, or
            ``csr()`` for backward, as PyG; edge ids = the stored ones;
            ``gnnpipe.sampling.store``).
        num_neighbors: fan-out per hop; ``-1`` takes every in-edge.
        replace: draw with replacement.
        subgraph_type: ``directional`` | ``bidirectional`` | ``induced``.
        disjoint: one tree per seed (``batch.batch`` says whose).
        seed: int or ``torch.Generator`` for a reproducible stream; ``None`` draws one from
            torch's global RNG (so ``torch.manual_seed`` makes runs repeat). In DataLoader
            workers each worker derives its own stream from the loader's per-worker seed.
        backend: ``auto`` (pyg-lib when importable, except for ``induced`` which pyg-lib
            lacks), ``gnnpipe`` or ``pyg-lib``. pyg-lib draws from its own generator, which
            follows ``torch.manual_seed``, not ``seed``.
        edge_time: (E,) int or float, one time per edge (CSR order for a ``Csr``,
            ``edge_index`` order for a ``Data``): temporal sampling, only edges with time
            ``<=`` the seed's time. Forces ``disjoint`` and the gnnpipe backend.
        node_time: (N,) int or float: temporal sampling on the neighbours' times instead (and
            the seeds' own times when a batch brings none). At most one of the two.
        temporal_strategy: ``uniform`` | ``last`` (the most recent allowed edges).
        weight_attr: name of a ``Data`` edge attribute (E,) of non-negative weights: weighted
            sampling, as PyG's ``NeighborSampler(weight_attr=...)``.
        edge_weight: (E,) the weights themselves (CSR order for a ``Csr``, ``edge_index`` order
            for a ``Data``); at most one of the two. Not with temporal sampling (as pyg-lib).
        sample_direction: ``forward`` (in-edges, the default) | ``backward`` (out-edges; not
            with temporal sampling, as PyG).
    """

    def __init__(self, graph: Csr | Data, num_neighbors: Sequence[int], *, replace: bool = False,
                 subgraph_type: str = "directional", disjoint: bool = False,
                 seed: int | torch.Generator | None = None, backend: str = "auto",
                 edge_time: Tensor | np.ndarray | None = None,
                 node_time: Tensor | np.ndarray | None = None,
                 temporal_strategy: str = "uniform", weight_attr: str | None = None,
                 edge_weight: Tensor | np.ndarray | None = None,
                 sample_direction: str = "forward"):
        num_neighbors = [int(k) for k in num_neighbors]
        if any(k < -1 for k in num_neighbors):
            raise ValueError(f"num_neighbors={num_neighbors} must list one fan-out >= -1 per hop "
                             "(-1 = all neighbours; [] = the seeds alone)")
        if subgraph_type not in SUBGRAPH_TYPES:
            raise ValueError(f"subgraph_type={subgraph_type!r} is not valid; expected one of: "
                             f"{', '.join(SUBGRAPH_TYPES)}")
        check_modes(sample_direction, timed=edge_time is not None or node_time is not None,
                    weighted=edge_weight is not None or weight_attr is not None)
        backward = sample_direction == "backward"
        self.sample_direction = sample_direction
        self.perm: Optional[Tensor] = None
        self._edge_map: Optional[np.ndarray] = None  # sampled CSR position -> Csr position
        if isinstance(graph, (tuple, list)):  # PyG's remote backend: (FeatureStore, GraphStore)
            if weight_attr is not None:  # as PyG's NeighborSampler, same exception
                raise NotImplementedError("'weight_attr' argument not yet supported within "
                                          f"'{type(self).__name__}' for '(FeatureStore, "
                                          "GraphStore)' inputs; pass edge_weight")
            # (backward: graph_store.csr(), as PyG); perm: position -> stored edge id
            indptr, indices, self.perm = csc_of_stores(graph, to_transpose=backward)
        elif isinstance(graph, Csr):
            if weight_attr is not None:
                raise ValueError(f"weight_attr={weight_attr!r} names a Data edge attribute; "
                                 "for a Csr pass edge_weight (E,) in CSR order")
            indptr, indices = graph.indptr, graph.indices
            if backward:
                indptr, indices, self._edge_map = transpose_csr(indptr.numpy(), indices.numpy())
        else:  # PyG Data: colptr over targets, row = sources, perm back to data.edge_index order
            # (backward: rowptr over sources, col = targets, as PyG's to_transpose)
            indptr, indices, self.perm = to_csc(graph, device="cpu", to_transpose=backward)
            if weight_attr is not None:
                if edge_weight is not None:
                    raise ValueError("give weight_attr or edge_weight, not both")
                if weight_attr not in graph:
                    raise ValueError(f"weight_attr={weight_attr!r} is not an attribute of the "
                                     "graph")
                edge_weight = graph[weight_attr]
        self.indptr = np.ascontiguousarray(np.asarray(indptr), dtype=np.int64)
        self.indices = np.ascontiguousarray(np.asarray(indices), dtype=np.int64)
        self.num_nodes = self.indptr.size - 1
        self.edge_weight = None if edge_weight is None else self._weights(edge_weight)
        self.num_neighbors = num_neighbors
        self.replace = bool(replace)
        self.subgraph_type = subgraph_type
        self.temporal_strategy = check_strategy(temporal_strategy)
        self.node_time, self._temporal = None, None
        if edge_time is not None and node_time is not None:
            raise ValueError("give edge_time or node_time, not both")
        if node_time is not None:
            self.node_time = np.asarray(node_time)
            if self.node_time.shape != (self.num_nodes,):
                raise ValueError(f"node_time has shape {self.node_time.shape}; expected "
                                 f"({self.num_nodes},), one time per node")
            edge_time = self.node_time[self.indices]  # a neighbour's time is its edge's time
        elif edge_time is not None:
            edge_time = np.asarray(edge_time)
            if self.perm is not None and edge_time.shape == self.perm.shape:
                edge_time = edge_time[self.perm.numpy()]  # edge_index order -> CSR order
        if edge_time is not None:
            self._temporal = TemporalIndex(self.indptr, self.indices, edge_time)
            if backend == "pyg-lib":
                raise ValueError("backend='pyg-lib' does not do temporal sampling here; use "
                                 "backend='gnnpipe' (or auto)")
            backend = "gnnpipe"
        # PyG's NeighborSampler is disjoint whenever it is temporal: each tree has its seed's time
        self.disjoint = bool(disjoint) or self._temporal is not None
        self.seed = sampler_seed(seed)
        self._rng = np.random.default_rng(self.seed)
        self._rng_worker: Optional[int] = None
        self._map: Optional[np.ndarray] = None
        if self.edge_weight is not None or backward:  # our pyg-lib bridge passes neither
            if backend == "pyg-lib":
                raise ValueError("backend='pyg-lib' is not wired for weighted or backward "
                                 "sampling here; use backend='gnnpipe' (or auto)")
            backend = "gnnpipe"
        self.backend = resolve_backend(backend, subgraph_type)
        self._pyg = None
        if self.backend == "pyg-lib":
            self._pyg = _pyg_lib_sampler(self, indptr, indices)

    def _weights(self, edge_weight) -> np.ndarray:
        """(E,) float64 weights in the order of ``self.indices``, checked."""
        w = check_weights(edge_weight, self.indices.size)
        if self.perm is not None:
            w = w[self.perm.numpy()]  # edge_index order -> CSR order
        if self._edge_map is not None:
            w = w[self._edge_map]  # Csr order -> transposed order
        return np.ascontiguousarray(w)

    def __getstate__(self) -> dict:  # workers get the graph, not the per-process scratch map
        state = dict(self.__dict__)
        state["_map"] = None
        return state

    # ------------------------------------------------------------------------ PyG interface
    def sample_from_nodes(self, inputs: NodeSamplerInput, **kwargs) -> SamplerOutput:
        if self._pyg is not None:
            return self._pyg.sample_from_nodes(inputs)
        if inputs.input_type is not None:
            raise NotImplementedError("CsrNeighborSampler samples homogeneous graphs only")
        out = node_sample(inputs, self._sample)
        return out.to_bidirectional() if self.subgraph_type == "bidirectional" else out

    def sample_from_edges(self, inputs: EdgeSamplerInput,
                          neg_sampling: Optional[NegativeSampling] = None) -> SamplerOutput:
        """Seeds = both endpoints of the seed links (+ negatives), as PyG's ``edge_sample``.

        Negatives come from PyG's ``NegativeSampling.sample`` (uniform over all nodes, torch's
        global RNG; false negatives are not filtered, as in PyG).
        """
        if self._pyg is not None:
            return self._pyg.sample_from_edges(inputs, neg_sampling)
        if inputs.input_type is not None:
            raise NotImplementedError("CsrNeighborSampler samples homogeneous graphs only")
        node_time = None if self.node_time is None else torch.from_numpy(self.node_time)
        out = edge_sample(inputs, self._sample, self.num_nodes, self.disjoint, node_time,
                          neg_sampling)
        return out.to_bidirectional() if self.subgraph_type == "bidirectional" else out

    @property
    def edge_permutation(self) -> Optional[Tensor]:
        return self.perm

    @property
    def is_temporal(self) -> bool:
        return self._temporal is not None

    def set_epoch(self, epoch: int) -> None:
        """Restart the stream at ``(seed, epoch)``: epoch e's batches no longer depend on what
        was drawn before, so a run resumed at epoch e samples exactly what it would have."""
        self._rng = np.random.default_rng([self.seed, epoch])
        self._rng_worker = None

    # ------------------------------------------------------------------------------ sampling
    def _generator(self) -> np.random.Generator:
        info = torch.utils.data.get_worker_info()
        if info is not None and self._rng_worker != info.id:
            # A worker holds a copy of the parent's generator: re-derive, or all workers
            # would draw the same stream.
            self._rng = np.random.default_rng([self.seed, info.seed % 2**63])
            self._rng_worker = info.id
        return self._rng

    def _scratch_map(self) -> np.ndarray:
        if self._map is None:  # global -> local id, -1 = not sampled; reset after each batch
            self._map = np.full(self.num_nodes, -1, dtype=np.int64)
        return self._map

    def _sample(self, seed: Tensor, seed_time: Optional[Tensor] = None, **kwargs) -> SamplerOutput:
        if seed_time is not None and self._temporal is None:
            raise ValueError("seed times were given but the sampler has no edge_time or "
                             "node_time to compare them with")
        seeds = np.ascontiguousarray(seed.numpy(), dtype=np.int64)
        if seeds.size and (seeds.min() < 0 or seeds.max() >= self.num_nodes):
            raise ValueError(f"seed node ids must lie in [0, {self.num_nodes})")
        if self._temporal is not None:
            if seed_time is None and self.node_time is None:
                raise ValueError("temporal sampling over edge times needs a time per seed "
                                 "(NodeLoader input_time / NodeSamplerInput.time)")
            seed_time = (self.node_time[seeds] if seed_time is None
                         else np.asarray(seed_time.numpy()).reshape(-1))
            if seed_time.shape != seeds.shape:
                raise ValueError(f"{seed_time.size} seed times for {seeds.size} seeds")
        rng = self._generator()
        if self.disjoint:
            node, batch, row, col, edge, n_nodes, n_edges = self._sample_disjoint(seeds, rng,
                                                                                  seed_time)
        else:
            batch = None
            node, row, col, edge, n_nodes, n_edges = self._sample_shared(seeds, rng)
        if self.sample_direction == "backward":  # edges keep their direction: frontier -> new
            row, col = col, row
            if self._edge_map is not None:
                edge = _take(self._edge_map, edge)
        t = torch.from_numpy
        return SamplerOutput(node=t(node), row=t(row), col=t(col), edge=t(edge),
                             batch=None if batch is None else t(batch),
                             num_sampled_nodes=n_nodes, num_sampled_edges=n_edges)

    def _pick(self, start: np.ndarray, deg: np.ndarray, k: int, rng: np.random.Generator):
        if self.edge_weight is None:
            return pick_edges(start, deg, k, self.replace, rng)
        return pick_weighted(start, deg, k, self.replace, self.edge_weight, rng)

    def _sample_shared(self, seeds: np.ndarray, rng: np.random.Generator):
        """One subgraph for all seeds, deduplicated with the global-to-local map."""
        indptr, indices, induced = self.indptr, self.indices, self.subgraph_type == "induced"
        local = self._scratch_map()
        nodes = [seeds]
        rows, cols, edges, n_nodes, n_edges = [], [], [], [seeds.size], []
        n = seeds.size
        # a repeated seed maps to its first copy: NumPy's last write wins, so write reversed
        local[seeds[::-1]] = np.arange(n)[::-1]
        front_first, front = 0, seeds
        done = False
        try:
            for k in self.num_neighbors:
                start = _take(indptr, front)
                pos, owner = self._pick(start, _take(indptr, front + 1) - start, k, rng)
                src_local, fresh = _dedupe(local, _take(indices, pos), n)
                if not induced:
                    rows.append(src_local)
                    cols.append(owner + front_first)  # frontier ids are one contiguous range
                    edges.append(pos)
                    n_edges.append(int(pos.size))
                nodes.append(fresh)
                n_nodes.append(int(fresh.size))
                front_first, front = n, fresh
                n += fresh.size
            node = np.concatenate(nodes)
            if induced:  # every in-edge of every sampled node whose source is sampled too
                start = _take(indptr, node)
                pos, owner = pick_edges(start, _take(indptr, node + 1) - start, -1, False, rng)
                src_local = _take(local, _take(indices, pos))
                keep = src_local >= 0
                rows, cols, edges, n_edges = [src_local[keep]], [owner[keep]], [pos[keep]], None
            done = True
        finally:
            if done:
                local[node] = -1
            else:  # interrupted mid-hop: tags may sit anywhere in the map
                local.fill(-1)
        return node, _cat(rows), _cat(cols), _cat(edges), n_nodes, n_edges

    def _sample_disjoint(self, seeds: np.ndarray, rng: np.random.Generator,
                         seed_time: Optional[np.ndarray] = None):
        """One tree per seed; nodes are keyed ``tree * N + node`` and deduplicated per tree.

        Temporal: tree ``i`` draws only edges with time ``<= seed_time[i]``; positions are then
        in the ``TemporalIndex``'s time-sorted order until mapped back (``perm``) for ``edge``.
        """
        indptr, indices, n_all = self.indptr, self.indices, self.num_nodes
        induced = self.subgraph_type == "induced"
        temporal = self._temporal
        if temporal is not None:
            indices = temporal.indices
            seed_bound = temporal.bound(seed_time)  # (B,): the time limit of each tree
        b = seeds.size
        node_parts, tree_parts = [seeds], [np.arange(b)]
        rows, cols, edges, n_nodes, n_edges = [], [], [], [b], []
        seen_key = np.arange(b) * n_all + seeds  # sorted, since tree ids increase
        seen_local = np.arange(b)
        front_first, front, front_tree, n = 0, seeds, np.arange(b), b
        for k in self.num_neighbors:
            start = _take(indptr, front)
            if temporal is None:
                pos, owner = self._pick(start, _take(indptr, front + 1) - start, k, rng)
            else:  # the frontier node's tree fixes the time bound
                pos, owner = temporal.pick(front, start, _take(seed_bound, front_tree), k,
                                           self.replace, self.temporal_strategy, rng)
            key = _take(front_tree, owner) * n_all + _take(indices, pos)  # (E,) tree-qualified
            src_local, found = _lookup(seen_key, seen_local, key)
            uniq, first, inverse = np.unique(key[~found], return_index=True, return_inverse=True)
            order = np.argsort(first, kind="stable")  # discovery order, as in the shared path
            uniq_local = np.empty(uniq.size, dtype=np.int64)
            uniq_local[order] = n + np.arange(uniq.size)
            src_local[~found] = uniq_local[inverse.reshape(-1)]
            if not induced:
                rows.append(src_local)
                cols.append(owner + front_first)
                edges.append(pos if temporal is None else _take(temporal.perm, pos))
                n_edges.append(int(pos.size))
            at = np.searchsorted(seen_key, uniq)  # merge two sorted key sets in one pass
            seen_key = np.insert(seen_key, at, uniq)
            seen_local = np.insert(seen_local, at, uniq_local)
            fresh_key = uniq[order]
            front_first, front, front_tree = n, fresh_key % n_all, fresh_key // n_all
            node_parts.append(front)
            tree_parts.append(front_tree)
            n_nodes.append(int(uniq.size))
            n += uniq.size
        node, batch = np.concatenate(node_parts), np.concatenate(tree_parts)
        if induced:  # edges among the nodes of the same tree
            start = _take(indptr, node)
            pos, owner = pick_edges(start, _take(indptr, node + 1) - start, -1, False, rng)
            src = _take(indices, pos)
            # most in-edges come from nodes in no tree at all: drop those with one gather
            # through the scratch map before the per-tree lookup (a binary search per edge)
            member = self._scratch_map()
            member[node] = 0
            try:
                in_some_tree = _take(member, src) >= 0
            finally:
                member[node] = -1
            pos, owner, src = pos[in_some_tree], owner[in_some_tree], src[in_some_tree]
            key = _take(batch, owner) * n_all + src
            src_local, found = _lookup(seen_key, seen_local, key)
            if temporal is not None:  # an edge among the tree's nodes may still be too recent
                found &= _take(temporal.time, pos) <= _take(seed_time, _take(batch, owner))
                pos = _take(temporal.perm, pos)
            rows, cols, edges, n_edges = [src_local[found]], [owner[found]], [pos[found]], None
        return node, batch, _cat(rows), _cat(cols), _cat(edges), n_nodes, n_edges


def _dedupe(local: np.ndarray, src: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Local ids (E,) of the sources ``src`` and the new nodes among them (U,), in slot order.

    ``local`` maps global -> local id (-1 = not sampled) and is updated; new nodes get
    ``n, n + 1, ...`` in order of first occurrence (pyg-lib's order). Without sorting: every
    unseen slot writes its tag into the map in reverse, so the first slot of each node
    survives (NumPy's last write wins), and that slot's node is new.
    """
    src_local = _take(local, src)
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


def transpose_csr(indptr: np.ndarray, indices: np.ndarray, num_src: int | None = None):
    """The CSR of the reversed edges: ``indptr`` (num_src + 1,) over sources, ``indices`` (E,)
    their targets, and ``perm`` (E,) the original position of each; rows keep the original
    order (stable), as PyG's ``to_csc(..., to_transpose=True)`` on ``Csr.edge_index()``.
    ``num_src`` defaults to the number of rows (a homogeneous graph)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    n = indptr.size - 1
    num_src = n if num_src is None else int(num_src)
    perm = np.argsort(indices, kind="stable")
    targets = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    out_ptr = np.zeros(num_src + 1, dtype=np.int64)
    np.cumsum(np.bincount(indices, minlength=num_src), out=out_ptr[1:])
    return out_ptr, targets[perm], perm


def check_modes(sample_direction: str, timed: bool, weighted: bool) -> None:
    """Refuse what PyG refuses: an unknown direction, backward or weighted temporal sampling."""
    if sample_direction not in SAMPLE_DIRECTIONS:
        raise ValueError(f"sample_direction={sample_direction!r} is not valid; expected one "
                         f"of: {', '.join(SAMPLE_DIRECTIONS)}")
    if sample_direction == "backward" and timed:  # PyG's own refusal, same exception
        raise NotImplementedError("Temporal sampling not yet supported for backward sampling")
    if weighted and timed:
        raise ValueError("weighted sampling with edge_time / node_time is not supported "
                         "(pyg-lib refuses biased temporal sampling too)")


def check_weights(edge_weight, num_edges: int, what: str = "edge weights") -> np.ndarray:
    """``edge_weight`` as float64 (E,), or a ValueError: wrong length, NaN/inf or negative."""
    w = np.asarray(edge_weight.numpy() if isinstance(edge_weight, Tensor) else edge_weight,
                   dtype=np.float64)
    if w.shape != (num_edges,):
        raise ValueError(f"{what} have shape {w.shape}; expected one per edge, ({num_edges},)")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"{what} must be finite and >= 0")
    return w


def _take(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``values[index]`` for indices known to be in range: ``mode="clip"`` skips NumPy's bounds
    error path, which makes the gather several times faster."""
    return np.take(values, index, mode="clip")


def _lookup(sorted_key: np.ndarray, value: np.ndarray, key: np.ndarray):
    """``value`` at each ``key`` found in ``sorted_key`` (-1 elsewhere) and the found mask."""
    if sorted_key.size == 0:
        return np.full(key.size, -1, dtype=np.int64), np.zeros(key.size, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_key, key), sorted_key.size - 1)
    found = sorted_key[at] == key
    return np.where(found, value[at], -1), found


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _pyg_lib_sampler(cfg: CsrNeighborSampler, indptr: Tensor, indices: Tensor):
    """PyG's own ``NeighborSampler`` (it calls ``torch.ops.pyg.neighbor_sample``) on our CSC.

    Our CSR row = in-edges of a node is PyG's CSC; ``edge_index`` sorted by target is already
    CSC-ordered, so ``is_sorted=True`` keeps edge ids equal to CSR positions.
    """
    from torch_geometric.sampler import NeighborSampler

    csr = Csr(indptr, indices)
    data = Data(edge_index=csr.edge_index(), num_nodes=csr.num_nodes)
    sampler = NeighborSampler(data, cfg.num_neighbors, subgraph_type=cfg.subgraph_type,
                              replace=cfg.replace, disjoint=cfg.disjoint, is_sorted=True)
    return sampler
