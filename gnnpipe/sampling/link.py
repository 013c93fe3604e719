"""Link-prediction mini-batches: supervision edges plus fresh negatives, neighbourhoods sampled
by gnnpipe's neighbor sampler behind PyG's ``LinkLoader`` (``train.sampler: link_neighbor``),
on a homogeneous graph (``link_neighbor_loader``) or on one edge type ``E = (s, r, d)`` of a
typed graph (``typed_link_loader``).

A batch holds ``B = train.batch_size`` supervision edges ``(h, t)`` of this rank and one negative
``(h, t')`` per positive (the head is kept, the target corrupted, as in full-graph link
training). The negatives come from the training ``NegativeSampler``
(``gnnpipe.splitting.negatives.training_sampler_of_blocks``, over ``to_homogeneous`` ids on a
typed graph): they avoid only the edges training may see, never the held-out ones (see that
module for why). On a typed graph it works on ``to_homogeneous`` ids, so heads are shifted by
``offsets[0]`` and targets back by ``offsets[1]`` (``graph.offsets()[s]``,
``graph.offsets()[d]``). PyG's own ``NegativeSampling``
is not used: it draws uniformly and does not filter. All ``2B`` pairs go to the sampler's
``sample_from_edges`` as seed links (PyG's ``edge_sample``): both endpoints of every pair are
seeds, so a batch is what ``LinkNeighborLoader`` gives:

  batch.n_id              (M,) global ids, the seeds (pair endpoints) first
  batch.edge_index        (2, E) local ids, sampled from the message graph passed in only
  batch.edge_label_index  (2, 2B) local ids: B positives, then their B negatives
  batch.edge_label        (2B,) float 1 / 0
  batch.input_id          (2B,) supervision position of each pair (a negative: its positive's)

and on a typed graph the same per type: ``batch[t].n_id`` (type-local ids; the pair endpoints
are the seeds of types s and d, first), ``batch[e].edge_index`` and ``batch[e].e_id`` (CSR
position in the message graph's ``csr[e]``) per edge type, ``batch[E].edge_label_index`` (row 0
local ids into ``batch[s]``, row 1 into ``batch[d]``), ``batch[E].edge_label``,
``batch[E].input_id``, and ``num_sampled_nodes`` / ``num_sampled_edges`` per hop.

Which edges a rank trains on and with which negatives depends only on ``(seed, epoch)``
(``set_epoch``): every rank draws the same permutation of all supervision edges and the same
negative for each, then takes its stride of the permutation, padded to equal shares
(``gnnpipe.training.distributed.shard``, as DDP splits seeds elsewhere), so every rank takes the
same number of steps. Step ``g`` of ``W`` ranks with ``batch_size`` B covers exactly the pairs of
step
``g`` of one process with ``batch_size`` W * B (and DDP's gradient average is that batch's mean).
The neighbour sampler restarts its stream at ``(seed, epoch)`` too, so a resumed run draws
exactly what an uninterrupted one would. Workers are not persistent: each epoch's workers get
that epoch's state.
"""

from __future__ import annotations

from typing import Mapping, Optional

import numpy as np
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import LinkLoader
from torch_geometric.sampler import EdgeSamplerInput

from gnnpipe.config import NeighborParams
from gnnpipe.training.distributed import SINGLE, DistContext, shard
from gnnpipe.data.graph import Csr
from gnnpipe.io.csr_blocks import edge_index_of
from gnnpipe.splitting.negatives import NegativeSampler
from gnnpipe.sampling.neighbor import CsrNeighborSampler, HeteroNeighborSampler
from gnnpipe.sampling.typed_csr import EdgeType


def check_supervision(supervision: torch.Tensor) -> None:
    """Positives must be a non-empty (2, P) tensor."""
    if supervision.dim() != 2 or supervision.shape[0] != 2 or supervision.shape[1] == 0:
        raise ValueError("no train supervision edges to learn from; re-run the split stage")


class SupervisionLoader(LinkLoader):
    """PyG ``LinkLoader`` over one rank's supervision edges, with per-epoch negatives.

    Args:
        data: PyG ``Data`` with ``x`` (N, F) and the message graph's ``edge_index``, or a
            ``HeteroData`` with ``x`` per node type and the message graph's edges.
        link_sampler: the ``CsrNeighborSampler`` (``HeteroNeighborSampler``) over that same
            message graph.
        supervision: int64 (2, P) positives ``(head, target)`` (typed: of s, of d, type-local).
        negatives: draws the targets of the negatives (forbids only visible edges).
        batch_size: positives per batch (each batch has twice as many labelled pairs).
        seed: fixes the per-epoch permutation and negatives, with the epoch.
        ctx: this rank; ranks get equal shares, so every rank takes the same number of steps.
        edge_type: None for a homogeneous graph; on a typed one the supervised edge type
            ``(s, r, d)``, the ``input_type`` of every batch.
        offsets: typed: ``(first homogeneous id of s, of d)`` for ``negatives``: (0, 0) when
            it already works on type-local ids.
    """

    def __init__(self, data: Data | HeteroData,
                 link_sampler: CsrNeighborSampler | HeteroNeighborSampler,
                 supervision: torch.Tensor, negatives: NegativeSampler, batch_size: int,
                 seed: int, *, ctx: DistContext = SINGLE, num_workers: int = 0,
                 edge_type: Optional[EdgeType] = None, offsets: tuple[int, int] = (0, 0)):
        check_supervision(supervision)
        self.edge_type = None if edge_type is None else tuple(edge_type)
        self.num_targets = self._check_range(link_sampler, supervision)  # nodes of d
        self.offsets = (int(offsets[0]), int(offsets[1]))
        self.supervision = supervision.long()
        self.negative_sampler = negatives
        self.seed, self.ctx = int(seed), ctx
        self.epoch = 0
        share = shard(torch.arange(supervision.shape[1]), ctx)  # (ceil(P / W),) placeholder
        self._negatives = torch.empty(0, dtype=torch.int64)
        super().__init__(data, link_sampler=link_sampler,
                         edge_label_index=self.supervision[:, share] if edge_type is None
                         else (edge_type, self.supervision[:, share]),
                         batch_size=batch_size, shuffle=False, num_workers=num_workers,
                         persistent_workers=False)
        self.set_epoch(0)

    def _check_range(self, link_sampler, supervision: torch.Tensor) -> int:
        """The number of target nodes; typed: the edge type and the ids checked first."""
        if self.edge_type is None:
            return link_sampler.num_nodes
        src, _, dst = self.edge_type
        if self.edge_type not in link_sampler.edge_types:
            raise ValueError(f"edge_type={self.edge_type!r} is not an edge type of the "
                             "sampler's message graph")
        n_src, n_dst = link_sampler.num_nodes[src], link_sampler.num_nodes[dst]
        if bool((supervision < 0).any()) or int(supervision[0].max()) >= n_src or int(
                supervision[1].max()) >= n_dst:
            raise ValueError(f"supervision holds ids outside the {src!r} / {dst!r} node ranges "
                             f"({n_src}, {n_dst})")
        return n_dst

    def _draw_targets(self, rng: np.random.Generator) -> np.ndarray:
        """The negative target of every supervision edge: int (P,), type-local ids (the
        negative sampler works on ``to_homogeneous`` ids: ``offsets``)."""
        heads = self.supervision[0].numpy() + self.offsets[0]
        drawn = self.negative_sampler.sample(heads, 1, rng)[:, 0] - self.offsets[1]
        if self.edge_type is not None and drawn.size and (
                drawn.min() < 0 or drawn.max() >= self.num_targets):
            raise ValueError(f"the negative sampler drew targets outside node type "
                             f"{self.edge_type[2]!r}; check offsets={self.offsets} and its "
                             "weights")
        return drawn

    def set_epoch(self, epoch: int) -> None:
        """This epoch's order of the rank's positives, their negatives and the sampler stream."""
        rng = np.random.default_rng([self.seed, epoch])  # the same draws on every rank
        perm = torch.from_numpy(rng.permutation(self.supervision.shape[1]))
        # one negative target per supervision edge, for all of them: a positive gets the same
        # negative whichever rank trains on it (O(P) per rank, as one full-graph step)
        drawn = self._draw_targets(rng)  # (P,)
        order = shard(perm, self.ctx)  # (ceil(P / W),) this rank's stride, padded
        self._negatives = torch.from_numpy(np.ascontiguousarray(drawn, dtype=np.int64))[order]
        self.input_data = EdgeSamplerInput(input_id=order, row=self.supervision[0, order],
                                           col=self.supervision[1, order],
                                           input_type=self.edge_type)
        self.link_sampler.set_epoch(epoch)
        self.epoch = epoch

    def collate_fn(self, index) -> object:
        """The batch of slots ``index``: its positives, their negatives, sampled together."""
        index = torch.as_tensor(index, dtype=torch.long)
        pos = self.input_data[index]
        b = index.numel()
        pairs = EdgeSamplerInput(
            input_id=torch.cat([pos.input_id, pos.input_id]),
            row=torch.cat([pos.row, pos.row]),
            col=torch.cat([pos.col, self._negatives[index]]),
            label=torch.cat([torch.ones(b), torch.zeros(b)]),
            input_type=self.edge_type)
        out = self.link_sampler.sample_from_edges(pairs)
        return self.filter_fn(out) if self.filter_per_worker else out


def link_neighbor_loader(x: torch.Tensor, csr: Csr, supervision: torch.Tensor,
                         negatives: NegativeSampler, cfg: NeighborParams, seed: int, *,
                         batch_size: int, num_workers: int = 0, ctx: DistContext = SINGLE,
                         edge_index: torch.Tensor | None = None) -> SupervisionLoader:
    """Batches of ``batch_size`` supervision edges and their negatives, neighbourhoods
    sampled in ``csr`` only (pass the train phase's message graph: nothing held out is in it).

    ``x`` (N, F) is gathered per batch (``batch.x``); ``edge_index`` may pass
    ``csr.edge_index()`` when the caller already holds it. The fan-outs, ``replace``,
    ``subgraph_type`` and ``disjoint`` come from ``cfg`` (``train.neighbor``) as for ``neighbor``.
    """
    sampler = CsrNeighborSampler(csr, cfg.num_neighbors, replace=cfg.replace,
                                 subgraph_type=cfg.subgraph_type, disjoint=cfg.disjoint, seed=seed)
    data = Data(x=x, edge_index=csr.edge_index() if edge_index is None else edge_index,
                num_nodes=csr.num_nodes)
    return SupervisionLoader(data, sampler, supervision, negatives, batch_size, seed, ctx=ctx,
                             num_workers=num_workers)


def typed_link_loader(x: Mapping[str, torch.Tensor], csr: Mapping[EdgeType, Csr],
                      edge_type: EdgeType, supervision: torch.Tensor,
                      negatives: NegativeSampler, cfg: NeighborParams, seed: int, *,
                      batch_size: int, offsets: tuple[int, int] = (0, 0), num_workers: int = 0,
                      ctx: DistContext = SINGLE) -> SupervisionLoader:
    """Batches of ``batch_size`` supervision edges of ``edge_type`` and their negatives,
    neighbourhoods sampled in ``csr`` only (pass the train phase's typed message graph:
    nothing held out is in it).

    ``x`` node type -> (N_t, F_t) is gathered per batch (``batch[t].x``); every node type of
    ``csr`` needs one. The fan-outs (one list for every edge type), ``replace``,
    ``subgraph_type`` and ``disjoint`` come from ``cfg`` (``train.neighbor``).
    """
    missing = sorted({t for e in csr for t in (e[0], e[2])} - set(x))
    if missing:
        raise ValueError(f"x has no features for node type {missing[0]!r}")
    num_nodes = {t: int(v.shape[0]) for t, v in x.items()}
    sampler = HeteroNeighborSampler(num_nodes, csr, list(cfg.num_neighbors), replace=cfg.replace,
                                    subgraph_type=cfg.subgraph_type, disjoint=cfg.disjoint,
                                    seed=seed)
    data = HeteroData()
    for t, v in x.items():
        data[t].x = v
    for e, graph in csr.items():  # CSR order: the sampler's edge ids as they are; in a stage
        data[e].edge_index = edge_index_of(graph)  # a mapped scratch table (16 B an edge)
    return SupervisionLoader(data, sampler, supervision, negatives, batch_size, seed, ctx=ctx,
                             num_workers=num_workers, edge_type=edge_type, offsets=offsets)
