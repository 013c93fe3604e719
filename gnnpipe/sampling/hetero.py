"""HGT-style budget sampling of heterogeneous graphs (Hu et al. 2020, "Heterogeneous Graph
Transformer", Algorithm 1), PyG ``HGTLoader`` semantics without torch-sparse.

PyG's ``HGTSampler`` calls ``torch.ops.torch_sparse.hgt_sample``; ``HeteroBudgetSampler`` is
the same algorithm in vectorized NumPy behind PyG's ``BaseSampler``, so
``torch_geometric.loader.NodeLoader(data, node_sampler=sampler, input_nodes=(type, ids))``
yields the ``HeteroData`` batches ``HGTLoader`` would (``hgt_loader`` below builds one).

Graph: ``num_nodes[t]`` nodes per node type (ids local to the type) and one
``gnnpipe.data.graph.Csr`` per edge type ``(src, rel, dst)`` whose row ``v`` (a ``dst`` node) lists
its ``src`` sources (``gnnpipe.data.graph.Graph.csr``). Edge ids are CSR positions, i.e.
columns of
``csr[e].edge_index()``; pass ``edge_permutation`` when the ``HeteroData`` edges come in
another order (``from_hetero_data`` does).

The algorithm, for seeds of one node type and ``num_samples[t] = [n_1, ..., n_L]``:

1. The seeds are the first sampled nodes of their type (input order, duplicates kept).
2. Budget update, for every newly sampled node ``v`` of type ``d`` and every edge type
   ``(s, r, d)``: each in-neighbour ``u`` of ``v`` not sampled yet gets ``1 / deg_r(v)`` added
   to ``budget[s][u]``; a ``v`` with more than ``max_neighbors`` (50, torch-sparse's
   ``MAX_NEIGHBORS``) in-edges of that type adds ``1 / max_neighbors`` to that many of them
   drawn uniformly without replacement (so hubs do not flood the budget).
3. Hop ``l`` (1..L), every node type ``t``: draw ``min(n_l, |budget[t]|)`` nodes without
   replacement with probability proportional to ``budget[t][u] ** 2`` (successive sampling,
   as ``torch.multinomial``: Efraimidis-Spirakis keys), append them to type ``t``'s nodes in
   draw order and take them out of the budget; then (except after the last hop) the budget
   update of step 2 for every node sampled in this hop.
4. Edges: for every edge type, every edge among the sampled nodes (the induced subgraph).
   torch-sparse scans only 50 random in-edges of a node with more (and then reports wrong edge
   ids for them); here every edge is kept, at the cost of reading the full in-rows of the
   sampled nodes.

Output (``HeteroSamplerOutput``): ``node[t]`` (global ids of type ``t``; seeds first for the
input type), ``row[e]`` / ``col[e]`` local indices into ``node[src]`` / ``node[dst]``,
``edge[e]`` CSR positions, ``num_sampled_nodes[t] = [seeds or 0, hop 1, ..., hop L]``;
every node type and edge type is present, possibly empty.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import HeteroData
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    HeteroSamplerOutput,
    NegativeSampling,
    NodeSamplerInput,
)
from torch_geometric.sampler.utils import to_hetero_csc

from gnnpipe.data.graph import Csr
from gnnpipe.sampling.pick import pick_edges
from gnnpipe.sampling.streams import SeededStream
from gnnpipe.sampling.typed_csr import typed_csr_arrays

EdgeType = tuple[str, str, str]
MAX_NEIGHBORS = 50  # torch-sparse's cap on the in-edges a node adds to the budget


class HeteroBudgetSampler(SeededStream, BaseSampler):
    """HGT's per-type node budget sampler (see the module docstring for the algorithm).

    Args:
        num_nodes: node type -> number of nodes.
        csr: edge type ``(src, rel, dst)`` -> ``Csr`` with ``num_nodes[dst]`` rows and sources
            in ``[0, num_nodes[src])``.
        num_samples: nodes to sample per hop, the same list for every node type, or a dict
            node type -> list (one entry per hop; a node type left out samples none).
        max_neighbors: in-edges a node spreads its budget over at most; -1 = all.
        seed: int or ``torch.Generator`` for a reproducible stream; ``None`` draws one from
            torch's global RNG. ``set_epoch(e)`` restarts it at ``(seed, e)``; DataLoader
            workers derive their own (as ``CsrNeighborSampler``).
        edge_permutation: edge type -> (E,) id in the caller's edge order of each CSR
            position, or None when the CSR order is the caller's (``Csr.edge_index()``).
    """

    def __init__(self, num_nodes: Mapping[str, int], csr: Mapping[EdgeType, Csr],
                 num_samples: Sequence[int] | Mapping[str, Sequence[int]], *,
                 max_neighbors: int = MAX_NEIGHBORS, seed: int | torch.Generator | None = None,
                 edge_permutation: Optional[dict[EdgeType, Optional[Tensor]]] = None):
        typed = typed_csr_arrays(num_nodes, csr)
        self.num_nodes, self.node_types = typed.num_nodes, typed.node_types
        self.edge_types, self.indptr, self.indices = typed.edge_types, typed.indptr, typed.indices
        self.num_samples = _budgets(num_samples, self.node_types)
        self.num_hops = len(next(iter(self.num_samples.values()))) if self.num_samples else 0
        if int(max_neighbors) < -1 or int(max_neighbors) == 0:
            raise ValueError(f"max_neighbors={max_neighbors} must be >= 1 or -1 (all)")
        self.max_neighbors = int(max_neighbors)
        self.perm = edge_permutation
        self._start_stream(seed)

    @classmethod
    def from_hetero_data(cls, data: HeteroData, num_samples, **kwargs) -> "HeteroBudgetSampler":
        """The sampler over a PyG ``HeteroData`` (CSC per edge type, permutation kept)."""
        colptr, row, perm = to_hetero_csc(data, device="cpu")
        csr = {edge_type: Csr(colptr[edge_type], row[edge_type]) for edge_type in colptr}
        num_nodes = {t: data[t].num_nodes for t in data.node_types}
        return cls(num_nodes, csr, num_samples, edge_permutation=perm, **kwargs)

    @property
    def edge_permutation(self) -> Optional[dict[EdgeType, Optional[Tensor]]]:
        return self.perm

    def sample_from_edges(self, inputs: EdgeSamplerInput,
                          neg_sampling: Optional[NegativeSampling] = None):
        raise NotImplementedError("HeteroBudgetSampler samples from seed nodes only "
                                  "(as PyG's HGTSampler)")

    def sample_from_nodes(self, inputs: NodeSamplerInput, **kwargs) -> HeteroSamplerOutput:
        seed_type = inputs.input_type
        if seed_type not in self.num_nodes:
            raise ValueError(f"input node type {seed_type!r} is not one of: "
                             f"{', '.join(self.node_types)}")
        seeds = np.ascontiguousarray(inputs.node.numpy(), dtype=np.int64)
        if seeds.size and (seeds.min() < 0 or seeds.max() >= self.num_nodes[seed_type]):
            raise ValueError(f"seed ids must lie in [0, {self.num_nodes[seed_type]}) of node "
                             f"type {seed_type!r}")
        node, row, col, edge, counts = self._sample(seed_type, seeds, self._generator())
        t = torch.from_numpy
        return HeteroSamplerOutput(
            node={k: t(v) for k, v in node.items()}, row={k: t(v) for k, v in row.items()},
            col={k: t(v) for k, v in col.items()}, edge={k: t(v) for k, v in edge.items()},
            batch=None, num_sampled_nodes=counts, num_sampled_edges=None,
            metadata=(inputs.input_id, inputs.time))

    # ------------------------------------------------------------------------------ sampling
    def _sample(self, seed_type: str, seeds: np.ndarray, rng: np.random.Generator):
        # global -> local id per node type, -1 = not sampled (fresh per batch: the cost is
        # O(sum of N_t), small next to the budget work for the graphs this is meant for)
        local = {t: np.full(n, -1, dtype=np.int64) for t, n in self.num_nodes.items()}
        nodes = {t: [] for t in self.node_types}
        size = dict.fromkeys(self.node_types, 0)
        counts = {t: [0] for t in self.node_types}
        budget = {t: (np.empty(0, dtype=np.int64), np.empty(0)) for t in self.node_types}
        nodes[seed_type].append(seeds)
        local[seed_type][seeds] = np.arange(seeds.size)
        size[seed_type] = counts[seed_type][0] = seeds.size
        fresh = {seed_type: seeds}
        for hop in range(self.num_hops):
            self._update_budget(budget, fresh, local, rng)
            fresh = {}
            for t in self.node_types:
                ids, score = budget[t]
                k = self.num_samples[t][hop]
                if ids.size <= k:
                    chosen, rest = np.arange(ids.size), np.empty(0, dtype=np.int64)
                else:  # Efraimidis-Spirakis: the k largest u ** (1 / w), in decreasing order
                    key = np.log(rng.random(ids.size)) / (score * score)
                    order = np.argsort(-key, kind="stable")
                    chosen, rest = order[:k], np.sort(order[k:])
                picked = ids[chosen]
                budget[t] = (ids[rest], score[rest])
                local[t][picked] = size[t] + np.arange(picked.size)
                nodes[t].append(picked)
                size[t] += picked.size
                counts[t].append(int(picked.size))
                fresh[t] = picked
        node = {t: np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
                for t, parts in nodes.items()}
        row, col, edge = {}, {}, {}
        for edge_type in self.edge_types:  # every edge among the sampled nodes
            src, _, dst = edge_type
            indptr, indices = self.indptr[edge_type], self.indices[edge_type]
            start = indptr[node[dst]]
            pos, owner = pick_edges(start, indptr[node[dst] + 1] - start, -1, False, rng)
            src_local = local[src][indices[pos]]
            keep = src_local >= 0
            row[edge_type], col[edge_type], edge[edge_type] = (src_local[keep], owner[keep],
                                                               pos[keep])
        return node, row, col, edge, counts

    def _update_budget(self, budget: dict, fresh: dict[str, np.ndarray], local: dict,
                       rng: np.random.Generator) -> None:
        """Step 2 for the nodes ``fresh[t]`` just sampled: their unsampled in-neighbours gain
        ``1 / deg`` (``1 / max_neighbors`` from ``max_neighbors`` of them for a hub)."""
        gained: dict[str, list] = {t: [] for t in self.node_types}
        for edge_type in self.edge_types:
            src, _, dst = edge_type
            if dst not in fresh or fresh[dst].size == 0:
                continue
            indptr, indices = self.indptr[edge_type], self.indices[edge_type]
            start = indptr[fresh[dst]]
            deg = indptr[fresh[dst] + 1] - start
            pos, owner = pick_edges(start, deg, self.max_neighbors, False, rng)
            spread = deg if self.max_neighbors < 0 else np.minimum(deg, self.max_neighbors)
            u = indices[pos]
            unseen = local[src][u] < 0
            gained[src].append((u[unseen], 1.0 / spread[owner[unseen]]))
        for t, parts in gained.items():
            if not parts:
                continue
            ids, score = budget[t]
            ids = np.concatenate([ids] + [p[0] for p in parts])
            score = np.concatenate([score] + [p[1] for p in parts])
            order = np.argsort(ids, kind="stable")
            ids, score = ids[order], score[order]
            first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if ids.size else ids
            budget[t] = (ids[first], np.add.reduceat(score, first) if ids.size else score)


def _budgets(num_samples, node_types: list[str]) -> dict[str, list[int]]:
    """``num_samples`` as node type -> one count per hop, every type present."""
    if isinstance(num_samples, Mapping):
        unknown = sorted(set(num_samples) - set(node_types))
        if unknown:
            raise ValueError(f"num_samples names node type {unknown[0]!r}, which is not one of: "
                             f"{', '.join(node_types)}")
        given = {t: [int(k) for k in v] for t, v in num_samples.items()}
    else:
        given = {t: [int(k) for k in num_samples] for t in node_types}
    hops = {len(v) for v in given.values()}
    if len(hops) > 1 or 0 in hops:
        raise ValueError(f"num_samples={num_samples!r} must give every node type the same "
                         "number (>= 1) of hops")
    if any(k < 0 for v in given.values() for k in v):
        raise ValueError(f"num_samples={num_samples!r} must be counts >= 0")
    hops_n = hops.pop() if hops else 0
    return {t: given.get(t, [0] * hops_n) for t in node_types}


def hgt_loader(data: HeteroData, num_samples, input_nodes, *, batch_size: int = 1,
               shuffle: bool = False, seed: int | None = None, max_neighbors: int = MAX_NEIGHBORS,
               **kwargs) -> NodeLoader:
    """PyG's ``HGTLoader(data, num_samples, input_nodes, batch_size=...)`` on this sampler.

    ``input_nodes`` is ``(node_type, ids or bool mask or None)``; ``kwargs`` go to
    ``NodeLoader`` (``num_workers``, ``transform``, ...). Each batch is a ``HeteroData`` with
    ``batch[node_type].batch_size`` seeds first in ``batch[node_type].n_id``.
    """
    sampler = HeteroBudgetSampler.from_hetero_data(data, num_samples, seed=seed,
                                                   max_neighbors=max_neighbors)
    return NodeLoader(data, node_sampler=sampler, input_nodes=input_nodes, batch_size=batch_size,
                      shuffle=shuffle, **kwargs)
