"""gnnpipe's neighbor sampler, PyG ``NeighborSampler`` semantics in vectorised NumPy behind
PyG's ``BaseSampler``: one core for typed graphs, the homogeneous graph its one-type case.

PyG's ``NeighborSampler`` needs pyg-lib or torch-sparse (compiled extensions); this one is plain
NumPy over CSR arrays, so ``torch_geometric.loader.NodeLoader`` / ``LinkLoader`` give the same
batches as ``NeighborLoader`` / ``LinkNeighborLoader`` would. As PyG's sampler (``is_hetero``),
one class per input kind: ``HeteroNeighborSampler`` (node types, edge types ``(src, rel, dst)``,
``HeteroSamplerOutput``) holds the sampling; ``CsrNeighborSampler`` (a ``Csr``, a ``Data`` or
homogeneous stores, ``SamplerOutput``) runs it on one node type and one edge type.

Graph: ``num_nodes[t]`` nodes per node type (ids local to the type) and one
``gnnpipe.data.graph.Csr`` per edge type whose row ``v`` (a ``dst`` node) lists its ``src`` sources
(see ``gnnpipe.data.graph``). Edge ids are CSR positions (columns of ``csr[e].edge_index()``);
``edge_permutation`` maps them to the caller's edge order.

Semantics (pyg-lib's ``neighbor_sample`` / ``hetero_neighbor_sample``, ``csc=True``):

- Hop ``h``, for every edge type ``(s, r, d)`` in order: every ``d`` node first reached at hop
  ``h - 1`` (the seeds at hop 0) draws up to ``k`` of its ``(s, r, d)`` in-edges ``(u -> v)``;
  an ``s`` node not sampled yet becomes new at hop ``h``. ``row`` = local id of the source
  ``u``, ``col`` = local id of the target ``v``: messages flow from the sampled neighbours into
  the seeds. Every node is a frontier at most once, so without replacement no edge appears
  twice; nodes reached in one hop through two edge types are one node.
- ``k = -1`` takes all in-edges, ``0`` none; ``deg <= k`` without replacement takes all; with
  replacement exactly ``k`` draws (duplicates kept as edges, nodes deduplicated).
- ``num_neighbors``: a list (the same fan-outs for every edge type), a dict edge type -> list
  or a PyG ``NumNeighbors`` (``default`` for edge types a dict leaves out; without one a
  missing edge type is an error, as in PyG). Every edge type has the same number of hops.
- Local ids per node type: seeds first (input order, duplicates kept; a repeated seed is its
  first copy as a source), then nodes in order of first appearance (edge type, then frontier
  order, then draw order), as pyg-lib. ``num_sampled_nodes[t] = [seeds of t or 0, new at hop
  1, ...]``, ``num_sampled_edges[e]`` per hop (edges stored hop by hop), so
  ``torch_geometric.utils.trim_to_layer`` works. Every node and edge type is in the output.
- ``disjoint``: every seed grows its own tree (tree ids count the seeds over the seed types in
  input order, as pyg-lib); a node reached from two seeds appears twice, and ``batch[i]`` is the
  tree of local node ``i``.
- ``induced``: the hops choose the nodes, the edges are every edge among them (per tree when
  disjoint), per edge type in the order of the sampled target nodes, then CSR order;
  ``num_sampled_edges`` is None. ``bidirectional``: PyG's ``to_bidirectional``.
- Temporal (``node_time`` per node type or ``edge_time`` per edge type): sampling is disjoint
  and tree ``i`` draws only edges whose time is ``<=`` its seed's time (``input_time``, else the
  seed's own ``node_time``); node-level: the time of the neighbour (the ``src`` node), as PyG.
  Edge types without a time are sampled without a time bound, as pyg-lib. ``temporal_strategy``
  uniform | last as in ``gnnpipe.sampling.temporal``. Induced edges later than the tree's seed
  are dropped too.
- Weighted (``edge_weight`` per edge type, ``weight_attr``): in-edges drawn proportionally to
  their weight (``gnnpipe.sampling.pick.pick_weighted``); edge types without weights are sampled
  uniformly, as pyg-lib. Not with temporal sampling.
- ``sample_direction="backward"`` (PyG 2.7+): every edge type ``(s, r, d)`` is sampled as
  ``(d, r, s)`` (an ``s`` frontier node draws its out-edges to ``d``), and the output is keyed
  and oriented as the original types (``row`` indexes ``node[s]``), as PyG. Not with temporal
  sampling (PyG raises NotImplementedError too).
- ``num_neighbors=[]``: zero hops, the batch is the seeds alone.
- Not PyG 2.7's ``BidirectionalNeighborSampler`` (forward and backward hops merged,
  homogeneous-only): see ``gnnpipe.sampling.bidirectional``.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import (
    BaseSampler,
    NeighborSampler,
    EdgeSamplerInput,
    HeteroSamplerOutput,
    NegativeSampling,
    NodeSamplerInput,
    SamplerOutput,
)
from torch_geometric.sampler.base import NumNeighbors
from torch_geometric.sampler.neighbor_sampler import edge_sample, node_sample
from torch_geometric.sampler.utils import to_csc, to_hetero_csc

from gnnpipe.data.graph import Csr
from gnnpipe.sampling.backend import resolve_backend
from gnnpipe.sampling.pick import pick_edges, pick_weighted
from gnnpipe.sampling.store import csc_of_stores, typed_csc_of_stores
from gnnpipe.sampling.subgraph import subgraph_type_name
from gnnpipe.sampling.temporal import TemporalIndex, check_strategy
from gnnpipe.sampling.typed_csr import typed_csr_arrays

EdgeType = tuple[str, str, str]
SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")
SAMPLE_DIRECTIONS = ("forward", "backward")
NODE, EDGE = "node", ("node", "to", "node")  # the one node / edge type of a homogeneous graph
_EMPTY = np.empty(0, dtype=np.int64)


def sampler_seed(seed: int | torch.Generator | None) -> int:
    """A sampler's stream seed: ``seed`` itself, one draw of a generator, or of torch's RNG."""
    if isinstance(seed, torch.Generator):
        return int(torch.randint(2**62, (), generator=seed))
    return int(torch.randint(2**62, ())) if seed is None else int(seed)


# ------------------------------------------------------------------------- the typed sampler
class HeteroNeighborSampler(BaseSampler):
    """Neighbor sampler over a typed CSR graph (semantics in the module docstring).

    Args:
        num_nodes: node type -> number of nodes.
        csr: edge type ``(src, rel, dst)`` -> ``Csr`` with ``num_nodes[dst]`` rows and sources
            in ``[0, num_nodes[src])``.
        num_neighbors: fan-outs per hop: a list for every edge type, a dict edge type -> list,
            or a PyG ``NumNeighbors``.
        replace: draw with replacement.
        subgraph_type: ``directional`` | ``bidirectional`` | ``induced``.
        disjoint: one tree per seed (``batch[t]`` says whose).
        seed: int or ``torch.Generator`` for a reproducible stream; ``None`` draws one from
            torch's global RNG (so ``torch.manual_seed`` makes runs repeat). ``set_epoch(e)``
            restarts the stream at ``(seed, e)``; in DataLoader workers each worker derives its
            own stream from the loader's per-worker seed.
        node_time: node type -> (N_t,) int or float times (some types may be left out).
        edge_time: edge type -> (E_e,) times in CSR order. At most one of the two.
        temporal_strategy: ``uniform`` | ``last``.
        edge_permutation: edge type -> (E_e,) caller's edge id of each CSR position, or None.
        edge_weight: edge type -> (E_e,) non-negative weights in CSR order (types left out are
            sampled uniformly).
        sample_direction: ``forward`` | ``backward`` (out-edges; see the module docstring).
        transposed: backward only: ``csr`` already holds each edge type's out-edges (row = a
            ``src`` node, its ``dst`` targets; PyG's ``to_csc(..., to_transpose=True)``), and
            edge ids are positions in it.
    """

    def __init__(self, num_nodes: Mapping[str, int], csr: Mapping[EdgeType, Csr],
                 num_neighbors, *, replace: bool = False, subgraph_type: str = "directional",
                 disjoint: bool = False, seed: int | torch.Generator | None = None,
                 node_time: Optional[Mapping[str, object]] = None,
                 edge_time: Optional[Mapping[EdgeType, object]] = None,
                 temporal_strategy: str = "uniform",
                 edge_permutation: Optional[Mapping[EdgeType, Optional[Tensor]]] = None,
                 edge_weight: Optional[Mapping[EdgeType, object]] = None,
                 sample_direction: str = "forward", transposed: bool = False):
        subgraph_type = subgraph_type_name(subgraph_type)  # PyG's SubgraphType or its name
        if transposed and sample_direction != "backward":
            raise ValueError("transposed=True holds out-edges: it needs sample_direction="
                             "'backward'")
        if transposed:  # checked as the reversed types they are: N_s rows of d targets
            csr = {_flip(e): graph for e, graph in csr.items()}
        typed = typed_csr_arrays(num_nodes, csr, what="csr edge type")
        self.num_nodes, self.node_types = typed.num_nodes, typed.node_types
        self.edge_types, self.indptr, self.indices = typed.edge_types, typed.indptr, typed.indices
        if transposed:  # keyed by the caller's types until _reverse
            self.edge_types = [_flip(e) for e in self.edge_types]
            self.indptr = {_flip(e): v for e, v in self.indptr.items()}
            self.indices = {_flip(e): v for e, v in self.indices.items()}
        self.num_neighbors = _fanouts(num_neighbors, self.edge_types)
        self.num_hops = len(next(iter(self.num_neighbors.values()))) if self.edge_types else 0
        if subgraph_type not in SUBGRAPH_TYPES:
            raise ValueError(f"subgraph_type={subgraph_type!r} is not valid; expected one of: "
                             f"{', '.join(SUBGRAPH_TYPES)}")
        self.subgraph_type = subgraph_type
        self.replace = bool(replace)
        self.temporal_strategy = check_strategy(temporal_strategy)
        self.perm = None if edge_permutation is None else dict(edge_permutation)
        check_modes(sample_direction, timed=node_time is not None or edge_time is not None,
                    weighted=edge_weight is not None)
        self.sample_direction = sample_direction
        self.edge_weight = self._edge_weights(edge_weight)
        self._restore: Optional[dict[EdgeType, EdgeType]] = None  # sampled type -> output type
        self._edge_map: dict[EdgeType, np.ndarray] = {}  # sampled position -> CSR position
        if sample_direction == "backward":
            self._reverse(transposed)
        self.node_time, self._temporal = self._time_index(node_time, edge_time)
        # PyG's NeighborSampler is disjoint whenever it is temporal: each tree has its seed's time
        self.disjoint = bool(disjoint) or bool(self._temporal) or node_time is not None
        self.seed = sampler_seed(seed)
        self._rng = np.random.default_rng(self.seed)
        self._rng_worker: Optional[int] = None
        self._maps: dict[str, np.ndarray] = {}

    def _edge_weights(self, edge_weight) -> dict[EdgeType, np.ndarray]:
        """Checked float64 weights per weighted edge type (CSR order)."""
        out = {}
        for e, value in (edge_weight or {}).items():
            e = tuple(e)
            if e not in self.indptr:
                raise ValueError(f"edge_weight names edge type {e!r}, which is not in csr")
            out[e] = check_weights(value, self.indices[e].size, f"edge_weight[{e!r}]")
        return out

    def _reverse(self, transposed: bool) -> None:
        """Sample every edge type ``(s, r, d)`` as ``(d, r, s)`` over its transposed CSR
        (``transposed``: the arrays already are)."""
        edge_types, indptr, indices, fanouts, weight = [], {}, {}, {}, {}
        self._restore = {}
        for e in self.edge_types:
            back = _flip(e)
            if transposed:
                indptr[back], indices[back] = self.indptr[e], self.indices[e]
            else:
                indptr[back], indices[back], self._edge_map[back] = transpose_csr(
                    self.indptr[e], self.indices[e], self.num_nodes[e[0]])
            fanouts[back] = self.num_neighbors[e]
            if e in self.edge_weight:
                weight[back] = self.edge_weight[e]
                if back in self._edge_map:
                    weight[back] = weight[back][self._edge_map[back]]
            self._restore[back] = e
            edge_types.append(back)
        self.edge_types, self.indptr, self.indices = edge_types, indptr, indices
        self.num_neighbors, self.edge_weight = fanouts, weight

    def _pick(self, e: EdgeType, start: np.ndarray, deg: np.ndarray, k: int,
              rng: np.random.Generator):
        weight = self.edge_weight.get(e)
        if weight is None:
            return pick_edges(start, deg, k, self.replace, rng)
        return pick_weighted(start, deg, k, self.replace, weight, rng)

    def _time_index(self, node_time, edge_time):
        """Checked node times (type -> (N_t,)) and a ``TemporalIndex`` per time-bounded edge
        type."""
        if node_time is not None and edge_time is not None:
            raise ValueError("give node_time or edge_time, not both")
        times, index = None, {}
        self._csr_time: dict[EdgeType, np.ndarray] = {}  # CSR-order times, for induced edges
        if node_time is not None:
            times = {}
            for t, value in node_time.items():
                if t not in self.num_nodes:
                    raise ValueError(f"node_time names node type {t!r}, which is not one of: "
                                     f"{', '.join(self.node_types)}")
                value = np.asarray(value.numpy() if isinstance(value, Tensor) else value)
                if value.shape != (self.num_nodes[t],):
                    raise ValueError(f"node_time[{t!r}] has shape {value.shape}; expected "
                                     f"({self.num_nodes[t]},), one time per node")
                times[t] = value
            for e in self.edge_types:  # a neighbour's time is its edge's time
                if e[0] in times:
                    self._csr_time[e] = times[e[0]][self.indices[e]]
                    index[e] = TemporalIndex(self.indptr[e], self.indices[e], self._csr_time[e])
        elif edge_time is not None:
            for e, value in edge_time.items():
                e = tuple(e)
                if e not in self.indptr:
                    raise ValueError(f"edge_time names edge type {e!r}, which is not in csr")
                value = np.asarray(value.numpy() if isinstance(value, Tensor) else value)
                self._csr_time[e] = value
                index[e] = TemporalIndex(self.indptr[e], self.indices[e], value)
        return times, index

    @classmethod
    def from_hetero_data(cls, data: HeteroData, num_neighbors, *, time_attr: str | None = None,
                         weight_attr: str | None = None, **kwargs) -> "HeteroNeighborSampler":
        """The sampler over a PyG ``HeteroData`` (CSC per edge type, permutation kept).

        ``time_attr`` names a node-level or edge-level attribute, as ``NeighborLoader``'s;
        edge-level times are re-ordered to CSR order here. ``weight_attr`` names an edge-level
        attribute of weights (edge types without it are sampled uniformly, as PyG).
        """
        colptr, row, perm = to_hetero_csc(data, device="cpu")
        csr = {e: Csr(colptr[e], row[e]) for e in data.edge_types if e in colptr}
        num_nodes = {t: data[t].num_nodes for t in data.node_types}
        if weight_attr is not None:
            weight = {e: data[e][weight_attr] for e in data.edge_types if weight_attr in data[e]}
            if not weight:
                raise ValueError(f"weight_attr={weight_attr!r} is not an attribute of any edge "
                                 "type")
            kwargs["edge_weight"] = {e: w if perm.get(e) is None else w[perm[e]]
                                     for e, w in weight.items()}
        if time_attr is not None:
            node_time = {t: data[t][time_attr] for t in data.node_types if time_attr in data[t]}
            edge_time = {e: data[e][time_attr] for e in data.edge_types if time_attr in data[e]}
            if node_time and edge_time:
                raise ValueError(f"time_attr={time_attr!r} is both a node-level and an "
                                 "edge-level attribute")
            if not node_time and not edge_time:
                raise ValueError(f"time_attr={time_attr!r} is neither a node-level nor an "
                                 "edge-level attribute")
            if node_time:
                kwargs["node_time"] = node_time
            else:
                kwargs["edge_time"] = {e: t if perm.get(e) is None else t[perm[e]]
                                       for e, t in edge_time.items()}
        return cls(num_nodes, csr, num_neighbors, edge_permutation=perm, **kwargs)

    @classmethod
    def from_stores(cls, data, num_neighbors, **kwargs) -> "HeteroNeighborSampler":
        """The sampler over PyG's remote backend ``(FeatureStore, GraphStore)`` of a typed
        graph (``graph_store.csc()`` per edge type, in the store's order; edge ids = the stored
        ones; ``gnnpipe.sampling.store``). ``kwargs`` as the constructor's (weights and times
        in the stored edge order are not re-ordered here: give them in CSC order)."""
        num_nodes, csr, perm = typed_csc_of_stores(data)
        return cls(num_nodes, csr, num_neighbors, edge_permutation=perm, **kwargs)

    def __getstate__(self) -> dict:  # workers get the graph, not the per-process scratch maps
        state = dict(self.__dict__)
        state["_maps"] = {}
        return state

    def set_epoch(self, epoch: int) -> None:
        """Restart the stream at ``(seed, epoch)``: epoch e's batches no longer depend on what
        was drawn before, so a run resumed at epoch e samples exactly what it would have."""
        self._rng = np.random.default_rng([self.seed, epoch])
        self._rng_worker = None

    def _generator(self) -> np.random.Generator:
        info = torch.utils.data.get_worker_info()
        if info is not None and self._rng_worker != info.id:
            # A worker holds a copy of the parent's generator: re-derive, or all workers
            # would draw the same stream.
            self._rng = np.random.default_rng([self.seed, info.seed % 2**63])
            self._rng_worker = info.id
        return self._rng

    @property
    def edge_permutation(self) -> Optional[dict[EdgeType, Optional[Tensor]]]:
        return self.perm

    @property
    def is_temporal(self) -> bool:
        return bool(self._temporal) or self.node_time is not None

    # ------------------------------------------------------------------------ PyG interface
    def sample_from_nodes(self, inputs: NodeSamplerInput, **kwargs) -> HeteroSamplerOutput:
        if inputs.input_type is None:
            raise ValueError("input_nodes must name a node type: (node_type, ids or mask)")
        out = node_sample(inputs, self._sample)
        return out.to_bidirectional() if self.subgraph_type == "bidirectional" else out

    def sample_from_edges(self, inputs: EdgeSamplerInput,
                          neg_sampling: Optional[NegativeSampling] = None) -> HeteroSamplerOutput:
        """Seeds = both endpoints of the seed links (+ negatives), as PyG's ``edge_sample``.

        PyG's ``NegativeSampling`` draws uniformly over the endpoint types' nodes from torch's
        global RNG and does not filter true edges (``gnnpipe.sampling.link`` does).
        """
        if inputs.input_type is None:
            raise ValueError("edge_label_index must name an edge type: (edge_type, (2, P))")
        node_time = None
        if self.node_time is not None:
            node_time = {t: torch.from_numpy(v) for t, v in self.node_time.items()}
        out = edge_sample(inputs, self._sample, self.num_nodes, self.disjoint, node_time,
                          neg_sampling)
        return out.to_bidirectional() if self.subgraph_type == "bidirectional" else out

    # ------------------------------------------------------------------------------ sampling
    def _sample(self, seed: dict[str, Tensor], seed_time: Optional[dict[str, Tensor]] = None,
                **kwargs) -> HeteroSamplerOutput:
        node, batch, row, col, edge, n_nodes, n_edges = self._sample_arrays(seed, seed_time)
        t = torch.from_numpy
        return HeteroSamplerOutput(
            node={k: t(v) for k, v in node.items()}, row={k: t(v) for k, v in row.items()},
            col={k: t(v) for k, v in col.items()}, edge={k: t(v) for k, v in edge.items()},
            batch=None if batch is None else {k: t(v) for k, v in batch.items()},
            num_sampled_nodes=n_nodes, num_sampled_edges=n_edges)

    def _sample_arrays(self, seed: dict[str, Tensor],
                       seed_time: Optional[dict[str, Tensor]] = None) -> tuple:
        """``_sample``'s output as NumPy arrays: node, batch (or None), row, col, edge (dicts)
        and the per-hop counts."""
        seeds: dict[str, np.ndarray] = {}
        for t, ids in seed.items():
            if t not in self.num_nodes:
                raise ValueError(f"input node type {t!r} is not one of: "
                                 f"{', '.join(self.node_types)}")
            ids = np.ascontiguousarray(ids.numpy(), dtype=np.int64)
            if ids.size and (ids.min() < 0 or ids.max() >= self.num_nodes[t]):
                raise ValueError(f"seed node ids must lie in [0, {self.num_nodes[t]}) of node "
                                 f"type {t!r}")
            seeds[t] = ids
        times = self._seed_times(seeds, seed_time)
        rng = self._generator()
        if self.disjoint:
            node, batch, row, col, edge, n_nodes, n_edges = self._sample_disjoint(seeds, rng,
                                                                                  times)
        else:
            batch = None
            node, row, col, edge, n_nodes, n_edges = self._sample_shared(seeds, rng)
        if self._restore is not None:  # back to the caller's edge types and edge direction
            back = self._restore
            row, col = ({back[e]: v for e, v in col.items()}, {back[e]: v for e, v in row.items()})
            edge = {back[e]: _take(self._edge_map[e], v) if e in self._edge_map else v
                    for e, v in edge.items()}
            if n_edges is not None:
                n_edges = {back[e]: v for e, v in n_edges.items()}
        return node, batch, row, col, edge, n_nodes, n_edges

    def _seed_times(self, seeds: dict[str, np.ndarray], seed_time) -> Optional[np.ndarray]:
        """(B,) time of every tree (seeds of all seed types, in order), or None."""
        if not self.is_temporal:
            if seed_time is not None:
                raise ValueError("seed times were given but the sampler has no edge_time or "
                                 "node_time to compare them with")
            return None
        parts = []
        for t, ids in seeds.items():
            if seed_time is not None and t in seed_time:
                part = np.asarray(seed_time[t].numpy()).reshape(-1)
            elif self.node_time is not None and t in self.node_time:
                part = self.node_time[t][ids]
            else:
                raise ValueError(f"temporal sampling needs a time per seed of node type {t!r}: "
                                 "pass input_time or node_time for it")
            if part.shape != ids.shape:
                raise ValueError(f"{part.size} seed times for {ids.size} seeds of type {t!r}")
            parts.append(part)
        return np.concatenate(parts) if parts else np.empty(0)

    def _empty(self):
        node = {t: [] for t in self.node_types}
        edges = {e: ([], [], []) for e in self.edge_types}
        n_nodes = {t: [0] for t in self.node_types}
        n_edges = {e: [] for e in self.edge_types}
        return node, edges, n_nodes, n_edges

    def _scratch_map(self, t: str) -> np.ndarray:
        if t not in self._maps:  # global -> local id, -1 = not sampled; reset after each batch
            self._maps[t] = np.full(self.num_nodes[t], -1, dtype=np.int64)
        return self._maps[t]

    def _sample_shared(self, seeds: dict[str, np.ndarray], rng: np.random.Generator):
        """One subgraph for all seeds, deduplicated per node type with a global-to-local map."""
        induced = self.subgraph_type == "induced"
        nodes, edges, n_nodes, n_edges = self._empty()
        size = dict.fromkeys(self.node_types, 0)
        front: dict[str, tuple[int, np.ndarray]] = {}  # type -> (first local id, global ids)
        local = {t: self._scratch_map(t) for t in self.node_types}
        for t, ids in seeds.items():
            # a repeated seed maps to its first copy: NumPy's last write wins, so write reversed
            local[t][ids[::-1]] = size[t] + np.arange(ids.size)[::-1]
            front[t] = (size[t], ids)
            nodes[t].append(ids)
            size[t] += ids.size
            n_nodes[t][0] = size[t]
        done = False
        try:
            for hop in range(self.num_hops):
                hop_first = dict(size)
                new = {t: [] for t in self.node_types}  # this hop's new nodes per type
                for e in self.edge_types:
                    src, _, dst = e
                    k = self.num_neighbors[e][hop]
                    first, frontier = front.get(dst, (0, _EMPTY))
                    if k == 0 or frontier.size == 0:
                        n_edges[e].append(0)
                        continue
                    indptr = self.indptr[e]
                    start = _take(indptr, frontier)
                    pos, owner = self._pick(e, start, _take(indptr, frontier + 1) - start, k,
                                            rng)
                    src_local, fresh = _dedupe(local[src], _take(self.indices[e], pos), size[src])
                    nodes[src].append(fresh)
                    new[src].append(fresh)
                    size[src] += fresh.size
                    if not induced:
                        rows, cols, ids = edges[e]
                        rows.append(src_local)
                        cols.append(owner + first)  # frontier ids are one contiguous range
                        ids.append(pos)
                    n_edges[e].append(int(pos.size))
                for t in self.node_types:
                    n_nodes[t].append(size[t] - hop_first[t])
                front = {t: (hop_first[t], _join(new[t])) for t in self.node_types if new[t]}
            node = {t: _cat(parts) for t, parts in nodes.items()}
            if induced:
                edges = self._induced_shared(node, local, rng)
                n_edges = None
            done = True
        finally:
            for t in self.node_types:
                if done:
                    local[t][node[t]] = -1
                else:  # interrupted mid-hop: tags may sit anywhere in the map
                    local[t].fill(-1)
        row = {e: _cat(edges[e][0]) for e in self.edge_types}
        col = {e: _cat(edges[e][1]) for e in self.edge_types}
        edge = {e: _cat(edges[e][2]) for e in self.edge_types}
        return node, row, col, edge, n_nodes, n_edges

    def _in_edges(self, e: EdgeType, targets: np.ndarray, rng):
        """Every ``e`` in-edge of the local nodes ``targets``: CSR position, owner (index into
        ``targets``) and source id, each (E,), in target order, then CSR order."""
        indptr = self.indptr[e]
        start = _take(indptr, targets)
        pos, owner = pick_edges(start, _take(indptr, targets + 1) - start, -1, False, rng)
        return pos, owner, _take(self.indices[e], pos)

    def _induced_shared(self, node: dict[str, np.ndarray], local: dict, rng):
        """Every edge of every edge type between two sampled nodes."""
        out = {}
        for e in self.edge_types:
            src, _, dst = e
            pos, owner, src_id = self._in_edges(e, node[dst], rng)
            src_local = _take(local[src], src_id)
            keep = src_local >= 0
            out[e] = ([src_local[keep]], [owner[keep]], [pos[keep]])
        return out

    def _sample_disjoint(self, seeds: dict[str, np.ndarray], rng: np.random.Generator,
                         seed_time: Optional[np.ndarray]):
        """One tree per seed; nodes of type t are keyed ``tree * N_t + node`` and deduplicated
        per tree with a sorted key array per type.

        Temporal edge types draw only edges with time ``<= seed_time[tree]``; their positions
        are in the ``TemporalIndex``'s time-sorted order until mapped back (``perm``).
        """
        induced = self.subgraph_type == "induced"
        nodes, edges, n_nodes, n_edges = self._empty()
        trees = {t: [] for t in self.node_types}
        size = dict.fromkeys(self.node_types, 0)
        seen_key = {t: _EMPTY for t in self.node_types}
        seen_local = {t: _EMPTY for t in self.node_types}
        front: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}  # (first, ids, trees)
        b = 0
        for t, ids in seeds.items():
            tree = b + np.arange(ids.size)  # tree ids run on over the seed types, as pyg-lib
            b += ids.size
            key = tree * self.num_nodes[t] + ids  # sorted: tree ids increase
            at = np.searchsorted(seen_key[t], key)
            seen_key[t] = np.insert(seen_key[t], at, key)
            seen_local[t] = np.insert(seen_local[t], at, size[t] + np.arange(ids.size))
            front[t] = (size[t], ids, tree)
            nodes[t].append(ids)
            trees[t].append(tree)
            size[t] += ids.size
            n_nodes[t][0] = size[t]
        bound = {e: ix.bound(seed_time) for e, ix in self._temporal.items()}  # (B,) per type
        for hop in range(self.num_hops):
            hop_first = dict(size)
            new = {t: ([], []) for t in self.node_types}  # this hop's new (nodes, trees)
            for e in self.edge_types:
                src, _, dst = e
                k = self.num_neighbors[e][hop]
                first, frontier, ftree = front.get(dst, (0, _EMPTY, _EMPTY))
                if k == 0 or frontier.size == 0:
                    n_edges[e].append(0)
                    continue
                indptr, temporal = self.indptr[e], self._temporal.get(e)
                start = _take(indptr, frontier)
                if temporal is None:
                    pos, owner = self._pick(e, start, _take(indptr, frontier + 1) - start, k,
                                            rng)
                    indices = self.indices[e]
                else:  # the frontier node's tree fixes the time bound
                    pos, owner = temporal.pick(frontier, start, _take(bound[e], ftree), k,
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
                at = np.searchsorted(seen_key[src], uniq)  # merge two sorted key sets
                seen_key[src] = np.insert(seen_key[src], at, uniq)
                seen_local[src] = np.insert(seen_local[src], at, uniq_local)
                fresh = uniq[order]
                fresh_node, fresh_tree = fresh % n_src, fresh // n_src
                nodes[src].append(fresh_node)
                trees[src].append(fresh_tree)
                new[src][0].append(fresh_node)
                new[src][1].append(fresh_tree)
                size[src] += uniq.size
                if not induced:
                    rows, cols, ids = edges[e]
                    rows.append(src_local)
                    cols.append(owner + first)
                    ids.append(pos if temporal is None else _take(temporal.perm, pos))
                n_edges[e].append(int(pos.size))
            front = {}
            for t, (fresh_node, fresh_tree) in new.items():
                n_nodes[t].append(size[t] - hop_first[t])
                if fresh_node:
                    front[t] = (hop_first[t], _join(fresh_node), _join(fresh_tree))
        node = {t: _cat(parts) for t, parts in nodes.items()}
        batch = {t: _cat(parts) for t, parts in trees.items()}
        if induced:
            edges, n_edges = self._induced_disjoint(node, batch, seen_key, seen_local, seed_time,
                                                    rng), None
        row = {e: _cat(edges[e][0]) for e in self.edge_types}
        col = {e: _cat(edges[e][1]) for e in self.edge_types}
        edge = {e: _cat(edges[e][2]) for e in self.edge_types}
        return node, batch, row, col, edge, n_nodes, n_edges

    def _induced_disjoint(self, node, batch, seen_key, seen_local, seed_time, rng):
        """Every edge between two nodes of the same tree (no later than its seed, if timed)."""
        out = {}
        for e in self.edge_types:
            src, _, dst = e
            pos, owner, src_id = self._in_edges(e, node[dst], rng)
            # most in-edges come from nodes in no tree at all: drop those with one gather
            # through the scratch map before the per-tree lookup (a binary search per edge)
            member = self._scratch_map(src)
            member[node[src]] = 0
            try:
                in_some_tree = _take(member, src_id) >= 0
            finally:
                member[node[src]] = -1
            pos, owner, src_id = pos[in_some_tree], owner[in_some_tree], src_id[in_some_tree]
            key = _take(batch[dst], owner) * self.num_nodes[src] + src_id
            src_local, found = _lookup(seen_key[src], seen_local[src], key)
            temporal = self._temporal.get(e)
            if temporal is not None:  # an edge among the tree's nodes may still be too recent
                found &= _take(self._csr_time[e], pos) <= _take(seed_time, _take(batch[dst], owner))
            out[e] = ([src_local[found]], [owner[found]], [pos[found]])
        return out



# ------------------------------------------------------------------- the homogeneous sampler
class CsrNeighborSampler(BaseSampler):
    """Neighbor sampler over a homogeneous graph, usable by PyG's ``NodeLoader`` and
    ``LinkLoader``: ``HeteroNeighborSampler`` on one node type and one edge type, with
    homogeneous input and output (``SamplerOutput``: ``batch.n_id`` seeds first,
    ``batch.batch_size`` seeds, ``batch.edge_index`` local).

    Args:
        graph: a ``gnnpipe.data.graph.Csr`` (row ``v`` = sources of edges into ``v``) or a PyG
            ``Data`` with ``edge_index`` (converted to CSC once, as PyG's sampler does); or
            PyG's remote backend ``(FeatureStore, GraphStore)`` (``graph_store.csc()``, or
            ``csr()`` for backward, as PyG; edge ids = the stored ones;
            ``gnnpipe.sampling.store``).
        num_neighbors: fan-out per hop; ``-1`` takes every in-edge.
        replace, subgraph_type, disjoint, seed, temporal_strategy, sample_direction: as
            ``HeteroNeighborSampler``.
        backend: ``auto`` (pyg-lib when importable, except for ``induced`` which pyg-lib
            lacks), ``gnnpipe`` or ``pyg-lib``. pyg-lib draws from its own generator, which
            follows ``torch.manual_seed``, not ``seed``.
        edge_time: (E,) int or float, one time per edge (CSR order for a ``Csr``,
            ``edge_index`` order for a ``Data``): temporal sampling, only edges with time
            ``<=`` the seed's time. Forces ``disjoint`` and the gnnpipe backend.
        node_time: (N,) int or float: temporal sampling on the neighbours' times instead (and
            the seeds' own times when a batch brings none). At most one of the two.
        weight_attr: name of a ``Data`` edge attribute (E,) of non-negative weights: weighted
            sampling, as PyG's ``NeighborSampler(weight_attr=...)``.
        edge_weight: (E,) the weights themselves (CSR order for a ``Csr``, ``edge_index`` order
            for a ``Data``); at most one of the two. Not with temporal sampling (as pyg-lib).
    """

    def __init__(self, graph: Csr | Data, num_neighbors: Sequence[int], *, replace: bool = False,
                 subgraph_type: str = "directional", disjoint: bool = False,
                 seed: int | torch.Generator | None = None, backend: str = "auto",
                 edge_time: Tensor | np.ndarray | None = None,
                 node_time: Tensor | np.ndarray | None = None,
                 temporal_strategy: str = "uniform", weight_attr: str | None = None,
                 edge_weight: Tensor | np.ndarray | None = None,
                 sample_direction: str = "forward"):
        subgraph_type = subgraph_type_name(subgraph_type)  # PyG's SubgraphType or its name
        backward, perm, transposed = sample_direction == "backward", None, False
        if isinstance(graph, (tuple, list)):  # PyG's remote backend: (FeatureStore, GraphStore)
            if weight_attr is not None:  # as PyG's NeighborSampler, same exception
                raise NotImplementedError("'weight_attr' argument not yet supported within "
                                          f"'{type(self).__name__}' for '(FeatureStore, "
                                          "GraphStore)' inputs; pass edge_weight")
            # (backward: graph_store.csr(), as PyG); perm: position -> stored edge id
            indptr, indices, perm = csc_of_stores(graph, to_transpose=backward)
            transposed = backward
        elif isinstance(graph, Csr):
            if weight_attr is not None:
                raise ValueError(f"weight_attr={weight_attr!r} names a Data edge attribute; "
                                 "for a Csr pass edge_weight (E,) in CSR order")
            indptr, indices = graph.indptr, graph.indices
        else:  # PyG Data: colptr over targets, row = sources, perm back to data.edge_index order
            # (backward: rowptr over sources, col = targets, as PyG's to_transpose)
            indptr, indices, perm = to_csc(graph, device="cpu", to_transpose=backward)
            transposed = backward
            if weight_attr is not None:
                if edge_weight is not None:
                    raise ValueError("give weight_attr or edge_weight, not both")
                if weight_attr not in graph:
                    raise ValueError(f"weight_attr={weight_attr!r} is not an attribute of the "
                                     "graph")
                edge_weight = graph[weight_attr]
        csr = Csr(torch.as_tensor(indptr), torch.as_tensor(indices))
        if perm is not None:  # edge_index order -> CSR order
            order = perm.numpy()
            if edge_weight is not None:
                edge_weight = check_weights(edge_weight, order.size)[order]
            if edge_time is not None and np.shape(edge_time) == order.shape:
                edge_time = np.asarray(edge_time)[order]
        timed = edge_time is not None or node_time is not None
        if timed or edge_weight is not None or backward:  # our pyg-lib bridge passes none
            if backend == "pyg-lib":
                raise ValueError("backend='pyg-lib' does not do temporal, weighted or backward "
                                 "sampling here; use backend='gnnpipe' (or auto)")
            backend = "gnnpipe"
        self.typed = HeteroNeighborSampler(
            {NODE: csr.num_nodes}, {EDGE: csr}, [int(k) for k in num_neighbors], replace=replace,
            subgraph_type=subgraph_type, disjoint=disjoint, seed=seed,
            node_time=None if node_time is None else {NODE: node_time},
            edge_time=None if edge_time is None else {EDGE: edge_time},
            temporal_strategy=temporal_strategy, edge_permutation={EDGE: perm},
            edge_weight=None if edge_weight is None else {EDGE: edge_weight},
            sample_direction=sample_direction, transposed=transposed)
        self.num_nodes = csr.num_nodes
        self.perm: Optional[Tensor] = perm
        self.node_time = None if node_time is None else self.typed.node_time[NODE]
        self.backend = resolve_backend(backend, subgraph_type)
        self._pyg = None
        if self.backend == "pyg-lib":
            self._pyg = _pyg_lib_sampler(self, csr)

    # the typed sampler's settings, read (and num_neighbors set) as one type's
    replace = property(lambda self: self.typed.replace)
    subgraph_type = property(lambda self: self.typed.subgraph_type)
    disjoint = property(lambda self: self.typed.disjoint)
    seed = property(lambda self: self.typed.seed)
    sample_direction = property(lambda self: self.typed.sample_direction)
    edge_weight = property(lambda self: self.typed.edge_weight.get(
        EDGE if self.typed._restore is None else _flip(EDGE)))

    @property
    def num_neighbors(self) -> list[int]:
        return next(iter(self.typed.num_neighbors.values()))

    @num_neighbors.setter
    def num_neighbors(self, hops: Sequence[int]) -> None:
        """New fan-outs (PyG's ``BidirectionalNeighborSampler`` sets them per hop)."""
        typed = self.typed
        typed.num_neighbors = {e: [int(k) for k in hops] for e in typed.edge_types}
        typed.num_hops = len(hops)

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
        return self.typed.is_temporal

    def set_epoch(self, epoch: int) -> None:
        """Restart the stream at ``(seed, epoch)`` (``HeteroNeighborSampler.set_epoch``)."""
        self.typed.set_epoch(epoch)

    def _sample(self, seed: Tensor, seed_time: Optional[Tensor] = None, **kwargs) -> SamplerOutput:
        node, batch, row, col, edge, n_nodes, n_edges = self.typed._sample_arrays(
            {NODE: seed}, None if seed_time is None else {NODE: seed_time})
        t = torch.from_numpy
        return SamplerOutput(node=t(node[NODE]), row=t(row[EDGE]), col=t(col[EDGE]),
                             edge=t(edge[EDGE]), batch=None if batch is None else t(batch[NODE]),
                             num_sampled_nodes=n_nodes[NODE],
                             num_sampled_edges=None if n_edges is None else n_edges[EDGE])

def _flip(e: EdgeType) -> EdgeType:
    """``(s, r, d)`` -> ``(d, r, s)``."""
    return (e[2], e[1], e[0])


def _fanouts(num_neighbors, edge_types: list[EdgeType]) -> dict[EdgeType, list[int]]:
    """``num_neighbors`` as edge type -> one fan-out per hop, every edge type present."""
    given = num_neighbors.values if isinstance(num_neighbors, NumNeighbors) else num_neighbors
    if not isinstance(num_neighbors, NumNeighbors):
        if isinstance(num_neighbors, Mapping):
            num_neighbors = {tuple(k): list(v) for k, v in num_neighbors.items()}
        elif isinstance(num_neighbors, (list, tuple)):
            num_neighbors = list(num_neighbors)
        else:
            raise ValueError(f"num_neighbors={num_neighbors!r} must be a list, a dict edge type "
                             "-> list, or a NumNeighbors")
        num_neighbors = NumNeighbors(num_neighbors)
    try:  # PyG's own reading: unknown types and missing ones without a default are errors
        values = num_neighbors.get_values(edge_types)
    except ValueError as err:
        raise ValueError(f"num_neighbors: {err}") from None
    out = {e: [int(k) for k in values[e]] for e in edge_types}
    hops = {len(v) for v in out.values()}
    if len(hops) > 1:
        raise ValueError(f"num_neighbors must give every edge type the same number of hops, "
                         f"got {sorted(hops)}")
    if any(k < -1 for v in out.values() for k in v):
        raise ValueError(f"num_neighbors={given} must list one fan-out >= -1 per hop "
                         "(-1 = all neighbours; [] = the seeds alone)")
    return out


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
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _join(parts: list[np.ndarray]) -> np.ndarray:
    """``_cat`` without the copy of a single part (a frontier, read only)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _pyg_lib_sampler(cfg: CsrNeighborSampler, csr: Csr):
    """PyG's own ``NeighborSampler`` (it calls ``torch.ops.pyg.neighbor_sample``) on our CSC.

    Our CSR row = in-edges of a node is PyG's CSC; ``edge_index`` sorted by target is already
    CSC-ordered, so ``is_sorted=True`` keeps edge ids equal to CSR positions.
    """
    data = Data(edge_index=csr.edge_index(), num_nodes=csr.num_nodes)
    sampler = NeighborSampler(data, cfg.num_neighbors, subgraph_type=cfg.subgraph_type,
                              replace=cfg.replace, disjoint=cfg.disjoint, is_sorted=True)
    return sampler
