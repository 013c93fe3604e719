"""gnnpipe's neighbor sampler, PyG ``NeighborSampler`` semantics in vectorised NumPy behind
PyG's ``BaseSampler``: one core for typed graphs, the homogeneous graph its one-type case.

PyG's ``NeighborSampler`` needs pyg-lib or torch-sparse (compiled extensions); this one is plain
NumPy over CSR arrays, so ``torch_geometric.loader.NodeLoader`` / ``LinkLoader`` give the same
batches as ``NeighborLoader`` / ``LinkNeighborLoader`` would. As PyG's sampler (``is_hetero``),
one class per input kind: ``HeteroNeighborSampler`` (``num_nodes[t]`` per node type, one
``gnnpipe.data.graph.Csr`` per edge type ``(src, rel, dst)`` whose row ``v`` lists the ``src``
sources of ``v``; ``HeteroSamplerOutput``) holds the sampling; ``CsrNeighborSampler`` (a
``Csr``, a ``Data`` or homogeneous stores, ``gnnpipe.sampling.graph_inputs``; ``SamplerOutput``)
runs it on one node type and one edge type. The arguments become fixed per-edge-type plans
(``gnnpipe.sampling.edge_plan``) that the hop loops read (``gnnpipe.sampling.hops``: the order
of nodes and edges, disjoint trees, induced edges). Edge ids are CSR positions;
``edge_permutation`` maps them to the caller's edge order.

Semantics (pyg-lib's ``neighbor_sample`` / ``hetero_neighbor_sample``, ``csc=True``):

- Hop ``h``: every node first reached at hop ``h - 1`` (the seeds at hop 0) draws up to ``k``
  of its in-edges of every edge type it is the ``dst`` of (``row`` = source, ``col`` = target).
  ``k = -1`` takes all, ``0`` none; ``deg <= k`` without replacement takes all; with
  replacement exactly ``k`` draws (duplicates kept as edges, nodes deduplicated).
  ``num_neighbors=[]``: zero hops, the batch is the seeds alone.
- ``num_neighbors``: a list (the same fan-outs for every edge type), a dict edge type -> list
  or a PyG ``NumNeighbors`` (``default`` for edge types a dict leaves out; without one a
  missing edge type is an error, as in PyG); the same number of hops for all. Counts per hop
  make ``torch_geometric.utils.trim_to_layer`` work; every node and edge type is in the output.
- ``bidirectional``: PyG's ``to_bidirectional`` of the directional batch.
- Temporal (``node_time`` per node type or ``edge_time`` per edge type): sampling is disjoint
  and tree ``i`` draws only edges whose time is ``<=`` its seed's time (``input_time``, else the
  seed's own ``node_time``); node-level: the time of the neighbour (the ``src`` node), as PyG.
  Edge types without a time are sampled without a bound, as pyg-lib. ``temporal_strategy`` as
  in ``gnnpipe.sampling.temporal``. Induced edges later than the tree's seed are dropped too.
- Weighted (``edge_weight`` per edge type, ``weight_attr``): in-edges drawn proportionally to
  their weight (``gnnpipe.sampling.pick.pick_weighted``); edge types without weights are sampled
  uniformly, as pyg-lib. Not with temporal sampling.
- ``sample_direction="backward"`` (PyG 2.7+): every edge type ``(s, r, d)`` is sampled as
  ``(d, r, s)`` (an ``s`` frontier node draws its out-edges), and the output is keyed and
  oriented as the original types (``row`` indexes ``node[s]``), as PyG. Not temporal (PyG
  raises NotImplementedError too). PyG 2.7's ``BidirectionalNeighborSampler`` (forward and
  backward hops merged): ``gnnpipe.sampling.bidirectional``.
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
from torch_geometric.sampler.neighbor_sampler import edge_sample, node_sample

from gnnpipe.data.graph import Csr
from gnnpipe.sampling.backend import resolve_backend
from gnnpipe.sampling.edge_plan import check_modes, edge_plans, node_times, read_fanouts
from gnnpipe.sampling.graph_inputs import hetero_data_input, homogeneous_input
from gnnpipe.sampling.hops import Hops, Sampled
from gnnpipe.sampling.store import typed_csc_of_stores
from gnnpipe.sampling.streams import SeededStream
from gnnpipe.sampling.subgraph import subgraph_type_name
from gnnpipe.sampling.temporal import check_strategy
from gnnpipe.sampling.typed_csr import EdgeType, TypedCsr, typed_csr_arrays

SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")
NODE, EDGE = "node", ("node", "to", "node")  # the one node / edge type of a homogeneous graph


# ------------------------------------------------------------------------- the typed sampler
class HeteroNeighborSampler(SeededStream, BaseSampler):
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

    Attributes: ``num_nodes``, ``node_types``, ``edge_types`` (the caller's, in order),
    ``indptr`` / ``indices`` (edge type -> the CSR arrays as given) and ``plans`` (one
    ``EdgePlan`` per edge type, in order: the arrays the hops read).
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
        if transposed:  # keyed by the caller's types again
            typed = TypedCsr(typed.num_nodes, [_flip(e) for e in typed.edge_types],
                             {_flip(e): v for e, v in typed.indptr.items()},
                             {_flip(e): v for e, v in typed.indices.items()})
        self.num_nodes, self.node_types = typed.num_nodes, typed.node_types
        self.edge_types, self.indptr, self.indices = typed.edge_types, typed.indptr, typed.indices
        fanouts = read_fanouts(num_neighbors, self.edge_types)
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
        if node_time is not None and edge_time is not None:
            raise ValueError("give node_time or edge_time, not both")
        self.node_time = None if node_time is None else node_times(node_time, self.num_nodes)
        self.plans = edge_plans(typed, backward=sample_direction == "backward",
                                transposed=transposed, edge_weight=edge_weight,
                                node_time=self.node_time, edge_time=edge_time)
        self.hops = Hops(list(self.num_nodes.values()), self.plans,
                         [fanouts[e] for e in self.edge_types], self.replace,
                         subgraph_type == "induced", self.temporal_strategy)
        self._position = {t: i for i, t in enumerate(self.node_types)}
        self._timed = self.node_time is not None or any(p.temporal for p in self.plans)
        # PyG's NeighborSampler is disjoint whenever it is temporal: each tree has its seed's time
        self.disjoint = bool(disjoint) or self._timed
        self._start_stream(seed)

    @classmethod
    def from_hetero_data(cls, data: HeteroData, num_neighbors, *, time_attr: str | None = None,
                         weight_attr: str | None = None, **kwargs) -> "HeteroNeighborSampler":
        """The sampler over a PyG ``HeteroData`` (CSC per edge type, permutation kept;
        ``gnnpipe.sampling.graph_inputs.hetero_data_input`` reads ``time_attr`` and
        ``weight_attr``)."""
        num_nodes, csr, perm, options = hetero_data_input(data, time_attr, weight_attr)
        return cls(num_nodes, csr, num_neighbors, edge_permutation=perm, **{**kwargs, **options})

    @classmethod
    def from_stores(cls, data, num_neighbors, **kwargs) -> "HeteroNeighborSampler":
        """The sampler over PyG's remote backend ``(FeatureStore, GraphStore)`` of a typed
        graph (``graph_store.csc()`` per edge type, in the store's order; edge ids = the stored
        ones; ``gnnpipe.sampling.store``). ``kwargs`` as the constructor's (weights and times
        in the stored edge order are not re-ordered here: give them in CSC order)."""
        num_nodes, csr, perm = typed_csc_of_stores(data)
        return cls(num_nodes, csr, num_neighbors, edge_permutation=perm, **kwargs)


    @property
    def num_neighbors(self) -> dict[EdgeType, list[int]]:
        return dict(zip(self.edge_types, self.hops.fanouts))

    @property
    def num_hops(self) -> int:
        return self.hops.num_hops

    @property
    def edge_permutation(self) -> Optional[dict[EdgeType, Optional[Tensor]]]:
        return self.perm

    @property
    def is_temporal(self) -> bool:
        return self._timed

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
        out = self.sample_arrays(list(seed.items()), seed_time)
        return out.hetero_output(self.node_types, self.edge_types)

    def sample_arrays(self, seed: list[tuple[str, Tensor]],
                      seed_time: Optional[Mapping[str, Tensor]] = None) -> Sampled:
        """One batch as NumPy arrays, node types and edge types by position (``node_types``,
        ``edge_types``), edges oriented and numbered as the caller's CSR.

        ``seed``: (node type, (S,) ids) pairs in input order; ``seed_time``: node type -> (S,)
        times (temporal sampling; default: the seeds' ``node_time``).
        """
        seeds = []
        for t, ids in seed:
            at = self._position.get(t)
            if at is None:
                raise ValueError(f"input node type {t!r} is not one of: "
                                 f"{', '.join(self.node_types)}")
            ids = np.ascontiguousarray(ids.numpy(), dtype=np.int64)
            # one reduction checks both bounds: a negative id is huge as uint64
            if ids.size and ids.view(np.uint64).max() >= self.num_nodes[t]:
                raise ValueError(f"seed node ids must lie in [0, {self.num_nodes[t]}) of node "
                                 f"type {t!r}")
            seeds.append((at, ids))
        if self._timed:
            out = self.hops.disjoint(seeds, self._seed_times(seed, seeds, seed_time),
                                     self._generator())
        elif seed_time is not None:
            raise ValueError("seed times were given but the sampler has no edge_time or "
                             "node_time to compare them with")
        elif self.disjoint:
            out = self.hops.disjoint(seeds, None, self._generator())
        else:
            out = self.hops.shared(seeds, self._generator())
        if self.sample_direction == "backward":  # the caller's edge direction and edge ids
            edge = [v if p.edge_map is None else p.edge_map.take(v, mode="clip")
                    for p, v in zip(self.plans, out.edge)]
            out = out._replace(row=out.col, col=out.row, edge=edge)
        return out

    def _seed_times(self, seed: list[tuple[str, Tensor]], seeds: list[tuple[int, np.ndarray]],
                    seed_time: Optional[Mapping[str, Tensor]]) -> np.ndarray:
        """(B,) time of every tree (seeds of all seed types, in order)."""
        parts = []
        for (t, _), (_, ids) in zip(seed, seeds):
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
        backward = sample_direction == "backward"
        csr, perm, transposed, edge_weight, edge_time = homogeneous_input(
            graph, backward=backward, sampler=type(self).__name__, weight_attr=weight_attr,
            edge_weight=edge_weight, edge_time=edge_time)
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
    edge_weight = property(lambda self: self.typed.plans[0].weight)

    @property
    def num_neighbors(self) -> list[int]:
        return self.typed.hops.fanouts[0]

    @num_neighbors.setter
    def num_neighbors(self, hops: Sequence[int]) -> None:
        """New fan-outs (PyG's ``BidirectionalNeighborSampler`` sets them per hop)."""
        self.typed.hops.fanouts = [[int(k) for k in hops]]

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
        out = self.typed.sample_arrays([(NODE, seed)],
                                       None if seed_time is None else {NODE: seed_time})
        return out.output()


def _flip(e: EdgeType) -> EdgeType:
    """``(s, r, d)`` -> ``(d, r, s)``."""
    return (e[2], e[1], e[0])


def _pyg_lib_sampler(cfg: CsrNeighborSampler, csr: Csr):
    """PyG's own ``NeighborSampler`` (it calls ``torch.ops.pyg.neighbor_sample``) on our CSC.

    Our CSR row = in-edges of a node is PyG's CSC; ``edge_index`` sorted by target is already
    CSC-ordered, so ``is_sorted=True`` keeps edge ids equal to CSR positions.
    """
    data = Data(edge_index=csr.edge_index(), num_nodes=csr.num_nodes)
    sampler = NeighborSampler(data, cfg.num_neighbors, subgraph_type=cfg.subgraph_type,
                              replace=cfg.replace, disjoint=cfg.disjoint, is_sorted=True)
    return sampler
