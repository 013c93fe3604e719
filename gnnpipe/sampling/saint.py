"""GraphSAINT subgraphs (Zeng et al. 2020) with their normalization.

Three samplers (``train.saint.sampler``), each giving the subgraph induced on the nodes it drew:

- ``random_walk`` (``SaintSampler``): ``batch_size`` roots drawn uniformly (with replacement)
  from the train nodes, one random walk of ``walk_length`` steps from each. Walks step from a
  node to a uniformly chosen source of its in-edges (a CSR row), i.e. toward the nodes it
  aggregates from; a node without in-edges stays put (as PyG's ``random_walk``).
- ``node`` (``SaintNodeSampler``): ``batch_size`` edges drawn uniformly (with replacement),
  their sources kept: a node is drawn with probability proportional to its out-degree, as
  PyG's ``GraphSAINTNodeSampler`` (the paper's ``||A_{:,v}||^2`` with unnormalised ``A``).
- ``edge`` (``SaintEdgeSampler``): ``batch_size`` edges ``u -> v`` drawn (with replacement)
  with probability proportional to ``1 / out_deg(u) + 1 / in_deg(v)`` (the paper's edge
  sampler, and what PyG's ``GraphSAINTEdgeSampler`` means to draw: its code inverts the degrees
  twice and draws ``in_deg(u) + out_deg(v)``), both endpoints kept.

The PyG-named loaders at the end of this module (``GraphSAINTNodeSampler``,
``GraphSAINTEdgeSampler``, ``GraphSAINTRandomWalkSampler``) take PyG's arguments and a ``Data``,
and give PyG's batches and PyG's ``_compute_norm`` normalization, without torch-sparse.

Normalization, estimated once by pre-sampling subgraphs until they hold ``sample_coverage * N``
nodes in total (PyG's ``GraphSAINTSampler`` rule), with ``S`` the number of subgraphs drawn,
``C_v`` how many held node ``v`` and ``C_e`` how many held edge ``e = (u -> v)``:

- ``node_norm[v] = S / (C_v * T)``, ``T`` the number of train nodes (the loss nodes): the loss
  ``sum over the batch's train nodes of node_norm[v] * loss_v`` is then an unbiased estimate of
  the mean train loss (Eq. 3 of the paper, ``lambda_v = C_v / S``, as in the authors' code,
  which also divides by the train node count; PyG divides by ``N`` instead, the same up to the
  constant ``T / N``). ``C_v = 0`` counts as 0.1, as in both.
- ``edge_norm[e] = C_v / C_e`` for the edge into ``v``, clipped to [0, 1e4]; ``C_e = 0`` gives
  1e4 (0.1 when ``C_v = 0`` too), as in both. ``1 / edge_norm`` is the paper's
  ``alpha_{u,v} = p(u, v sampled) / p(v sampled)``: aggregating at ``v`` with weights
  ``edge_norm`` is unbiased for the aggregation over ``v``'s whole neighbourhood (Prop. 3.1).
  Note: PyG's ``_compute_norm`` takes ``C`` of ``edge_index[0]``, the edge's *source*; the
  authors' code and Prop. 3.1 take the aggregating node (the target), as here.

How the train loop uses them (``gnnpipe.training.train``): node_norm weights the unreduced loss;
edge_norm is passed as ``edge_weight`` to models that take one (``gcn``: GCNConv then applies
its symmetric normalisation to the weighted subgraph, whose weighted in-degree
``sum_u edge_norm[u -> v]`` is an unbiased estimate of ``v``'s train-graph degree). Models
without an edge weight (``sage``, ``gat``, ``mlp``) get no edge_norm at all: their aggregation
is the subgraph's own (mean for sage, attention for gat), and only node_norm corrects the loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch
from torch_geometric.data import Data

from gnnpipe.data.graph import Csr
from gnnpipe.data.edges import sorted_unique
from gnnpipe.sampling.subgraph import induced_edges
from gnnpipe.training.sharding import NodeRows

MAX_EDGE_NORM = 1e4  # clip of edge_norm, as in PyG and the authors' code
ZERO_COUNT = 0.1  # a count of 0 stands for 0.1 (PyG, authors' code)


def random_walks(indptr: np.ndarray, indices: np.ndarray, roots: np.ndarray, walk_length: int,
                 rng: np.random.Generator) -> np.ndarray:
    """Node visited at each step of a walk from each root: int64 (R, walk_length + 1)."""
    walks = np.empty((roots.size, walk_length + 1), dtype=np.int64)
    walks[:, 0] = current = roots
    if indices.size == 0:  # no edges: every walk stays at its root
        walks[:, 1:] = roots[:, None]
        return walks
    for step in range(1, walk_length + 1):
        start = indptr[current]
        deg = indptr[current + 1] - start
        offset = (rng.random(current.size) * deg).astype(np.int64)  # uniform in [0, deg)
        current = np.where(deg > 0, indices[np.minimum(start + offset, indices.size - 1)],
                           current)  # the clip only guards rows with deg 0
        walks[:, step] = current
    return walks


class _Induced:
    """Shared state of the samplers: ``csr`` as int64 arrays and a scratch id map."""

    def __init__(self, csr: Csr, batch_size: int, num_loss_nodes: int):
        self.indptr = np.ascontiguousarray(csr.indptr.numpy(), dtype=np.int64)
        self.indices = np.ascontiguousarray(csr.indices.numpy(), dtype=np.int64)
        self.num_nodes, self.num_edges = csr.num_nodes, csr.num_edges
        self.batch_size, self.num_loss_nodes = batch_size, num_loss_nodes
        self._local = np.full(csr.num_nodes, -1, dtype=np.int64)

    def _induce(self, nodes: np.ndarray, ordered: bool):
        n_id = sorted_unique(nodes)
        edge_index, e_id = induced_edges(self.indptr, self.indices, n_id, self._local,
                                         ordered=ordered)
        return n_id, edge_index, e_id


class SaintSampler(_Induced):
    """Random-walk subgraphs of ``csr``, indices only (``n_id``, local ``edge_index``, ``e_id``).

    ``walk_csr`` (default ``csr``) is the graph the walks step along (PyG's sampler walks
    out-edges: pass the CSR of the reversed graph); subgraphs are always induced in ``csr``.
    """

    def __init__(self, csr: Csr, roots: torch.Tensor, batch_size: int, walk_length: int,
                 walk_csr: Csr | None = None):
        if roots.numel() == 0:
            raise ValueError("train.sampler=saint needs train nodes to root its walks")
        super().__init__(csr, batch_size, roots.numel())
        self.roots = roots.numpy().astype(np.int64)
        self.walk_length = walk_length
        self._walk = (self.indptr, self.indices) if walk_csr is None else (
            walk_csr.indptr.numpy(), walk_csr.indices.numpy())

    def sample(self, rng: np.random.Generator, *, ordered: bool = True):
        """``n_id`` (B,) ascending global ids, ``edge_index`` (2, E) local, ``e_id`` (E,)."""
        roots = self.roots[rng.integers(0, self.roots.size, self.batch_size)]
        walks = random_walks(*self._walk, roots, self.walk_length, rng)
        return self._induce(walks.reshape(-1), ordered)


class SaintNodeSampler(_Induced):
    """Node-sampler subgraphs: the sources of ``batch_size`` uniformly drawn edges (a node's
    chance grows with its out-degree; a node without out-edges is never drawn).
    ``num_loss_nodes``: the train node count that ``estimate_norm`` divides by."""

    def __init__(self, csr: Csr, batch_size: int, num_loss_nodes: int):
        if csr.num_edges == 0:
            raise ValueError("train.saint.sampler=node draws edges: the train graph has none")
        super().__init__(csr, batch_size, num_loss_nodes)

    def sample(self, rng: np.random.Generator, *, ordered: bool = True):
        """As ``SaintSampler.sample``."""
        return self._induce(self.indices[rng.integers(0, self.num_edges, self.batch_size)],
                            ordered)


class SaintEdgeSampler(_Induced):
    """Edge-sampler subgraphs: both endpoints of ``batch_size`` edges ``u -> v`` drawn with
    replacement, each with probability proportional to ``1 / out_deg(u) + 1 / in_deg(v)``."""

    def __init__(self, csr: Csr, batch_size: int, num_loss_nodes: int):
        if csr.num_edges == 0:
            raise ValueError("train.saint.sampler=edge draws edges: the train graph has none")
        super().__init__(csr, batch_size, num_loss_nodes)
        self.targets = csr.targets().numpy()
        out_deg = np.bincount(self.indices, minlength=self.num_nodes)  # >= 1 at every source
        in_deg = np.diff(self.indptr)  # >= 1 at every target
        self.prob = 1.0 / out_deg[self.indices] + 1.0 / in_deg[self.targets]  # (E,) unnormalised
        self._cdf = np.cumsum(self.prob)

    def sample(self, rng: np.random.Generator, *, ordered: bool = True):
        """As ``SaintSampler.sample``."""
        draw = rng.random(self.batch_size) * self._cdf[-1]
        edges = np.minimum(np.searchsorted(self._cdf, draw, side="right"), self.num_edges - 1)
        return self._induce(np.concatenate([self.indices[edges], self.targets[edges]]), ordered)


def make_sampler(kind: str, csr: Csr, train_nodes: torch.Tensor, batch_size: int,
                 walk_length: int) -> _Induced:
    """The sampler of ``train.saint.sampler`` (``random_walk`` | ``node`` | ``edge``)."""
    if kind == "random_walk":
        return SaintSampler(csr, train_nodes, batch_size, walk_length)
    if train_nodes.numel() == 0:
        raise ValueError(f"train.saint.sampler={kind} needs train nodes for its loss")
    cls = {"node": SaintNodeSampler, "edge": SaintEdgeSampler}[kind]
    return cls(csr, batch_size, train_nodes.numel())


@dataclass(frozen=True)
class SaintNorm:
    """Normalization statistics (see the module docstring); arrays over the whole graph."""

    node_norm: torch.Tensor  # float32 (N,)
    edge_norm: torch.Tensor  # float32 (E,), by CSR position
    node_count: torch.Tensor  # int64 (N,): C_v
    edge_count: torch.Tensor  # int64 (E,): C_e
    num_samples: int  # S


def norm_from_counts(csr: Csr, node_count: np.ndarray, edge_count: np.ndarray,
                     num_samples: int, num_loss_nodes: int) -> SaintNorm:
    """``node_norm`` and ``edge_norm`` from the counts of ``num_samples`` subgraphs."""
    c_node = node_count.astype(np.float64)
    c_target = c_node[csr.targets().numpy()]  # (E,): C_v of each edge's target v
    with np.errstate(divide="ignore", invalid="ignore"):
        edge_norm = c_target / edge_count  # C_e = 0: inf (-> the clip) or nan (-> 0.1)
    edge_norm = np.clip(edge_norm, 0.0, MAX_EDGE_NORM)
    edge_norm[np.isnan(edge_norm)] = ZERO_COUNT
    c_node[c_node == 0] = ZERO_COUNT
    node_norm = num_samples / (c_node * num_loss_nodes)
    return SaintNorm(node_norm=torch.from_numpy(node_norm.astype(np.float32)),
                     edge_norm=torch.from_numpy(edge_norm.astype(np.float32)),
                     node_count=torch.from_numpy(node_count.astype(np.int64)),
                     edge_count=torch.from_numpy(edge_count.astype(np.int64)),
                     num_samples=num_samples)


def estimate_norm(sampler: _Induced, sample_coverage: int, seed: int) -> SaintNorm:
    """Pre-sample subgraphs until they hold ``sample_coverage * N`` nodes; count and normalise.

    ``seed`` fixes the pre-sampling stream (the same on every rank, so ranks share the norms).
    Counts are added up in chunks of about N (resp. E) sampled ids, so the bincounts stay few.
    """
    rng = np.random.default_rng([seed, 0x5A1])
    n, e = sampler.num_nodes, sampler.num_edges
    node_count = np.zeros(n, dtype=np.int64)
    edge_count = np.zeros(e, dtype=np.int64)
    nodes, edges, held_nodes, held_edges = [], [], 0, 0
    total, samples, target = 0, 0, sample_coverage * n
    while total < target:
        n_id, _, e_id = sampler.sample(rng, ordered=False)
        samples += 1
        total += n_id.size
        nodes.append(n_id)
        edges.append(e_id)
        held_nodes += n_id.size
        held_edges += e_id.size
        last = total >= target
        if held_nodes >= n or last:
            node_count += np.bincount(np.concatenate(nodes), minlength=n)
            nodes, held_nodes = [], 0
        if held_edges >= e or (last and edges):
            edge_count += np.bincount(np.concatenate(edges), minlength=e)
            edges, held_edges = [], 0
    return norm_from_counts(Csr(torch.from_numpy(sampler.indptr),
                                torch.from_numpy(sampler.indices)),
                            node_count, edge_count, samples, sampler.num_loss_nodes)


class SaintLoader:
    """GraphSAINT batches for one rank as PyG ``Data``; each iteration is one epoch.

    Batches carry ``x``, ``y``, ``edge_index`` (local), ``n_id``, ``e_id`` (the CSR position of
    each edge: its column in ``csr.edge_index()``, the train phase's ``edge_index``),
    ``train_mask`` (the loss nodes), ``node_norm`` (B,), ``edge_norm`` (E,) and each of
    ``edge_attrs`` (name -> (E_all, ...) by CSR position) gathered at ``e_id``. An epoch has
    ``ceil(num_steps / world_size)`` subgraphs on every rank; each rank draws its own stream,
    derived from one draw of torch's global RNG (``fit`` reseeds it per epoch) and its rank, so
    ranks draw independent subgraphs from the same distribution and share one ``SaintNorm``.
    """

    def __init__(self, sampler: _Induced, norm: SaintNorm, rows: NodeRows,
                 train_mask_all: torch.Tensor, num_steps: int, rank: int = 0,
                 world_size: int = 1, edge_attrs: dict[str, torch.Tensor] | None = None):
        self.sampler, self.norm, self.rows = sampler, norm, rows
        self.train_mask_all = train_mask_all
        self.steps = math.ceil(num_steps / world_size)
        self.rank = rank
        self.edge_attrs = edge_attrs or {}

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[Data]:
        rng = np.random.default_rng([int(torch.randint(2**62, ())), self.rank])
        for _ in range(self.steps):
            n_id, edge_index, e_id = self.sampler.sample(rng)
            ids, e_ids = torch.from_numpy(n_id), torch.from_numpy(e_id)
            x, y = self.rows.gather(ids)
            batch = Data(x=x, y=y, edge_index=torch.from_numpy(edge_index), n_id=ids, e_id=e_ids,
                         train_mask=self.train_mask_all[ids], node_norm=self.norm.node_norm[ids],
                         edge_norm=self.norm.edge_norm[e_ids], num_nodes=n_id.size)
            for key, value in self.edge_attrs.items():
                batch[key] = value[e_ids]
            yield batch
