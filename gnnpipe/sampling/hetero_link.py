"""Typed link-prediction mini-batches: supervision edges of one edge type plus fresh leak-free
negatives, neighbourhoods sampled by ``HeteroNeighborSampler`` behind PyG's ``LinkLoader``.

The typed counterpart of ``gnnpipe.sampling.link.SupervisionLoader``. A batch holds
``B = batch_size`` supervision edges ``(h, t)`` of the edge type ``E = (s, r, d)`` of this rank
and one negative ``(h, t')`` per positive (head kept, target corrupted). The negative targets
come from the training ``NegativeSampler`` (``gnnpipe.link_split.typed_negative_sampler``): it
works on ``to_homogeneous`` ids, so heads are shifted by ``offsets[0]`` and targets back by
``offsets[1]`` (``graph.offsets()[s]``, ``graph.offsets()[d]``); it forbids only the pairs
training may see (message + train supervision), never a held-out one, and only ``d`` nodes
have weight. PyG's ``NegativeSampling`` is not used (uniform, unfiltered). All ``2B`` pairs go
to ``HeteroNeighborSampler.sample_from_edges`` as seed links of type ``E`` (PyG's
``edge_sample``), so a batch is what ``LinkNeighborLoader`` gives for ``E``:

  batch[t].n_id                (n_t,) type-local global ids; the pair endpoints are the seeds
                               of types s and d, first (sorted unique ids unless disjoint)
  batch[e].edge_index          (2, m_e) local ids, sampled from the message graph given only
  batch[e].e_id                (m_e,) CSR position in that message graph's ``csr[e]``
  batch[E].edge_label_index    (2, 2B) row 0 local ids into batch[s], row 1 into batch[d]:
                               B positives, then their B negatives
  batch[E].edge_label          (2B,) float 1 / 0
  batch[E].input_id            (2B,) supervision position of each pair (a negative: its
                               positive's)
  batch[t].num_sampled_nodes, batch[e].num_sampled_edges   per hop (trim_to_layer)

Which edges a rank trains on and with which negatives depends only on ``(seed, epoch)``
(``set_epoch``): every rank draws the same permutation of all supervision edges and the same
negative for each, then takes its stride of the permutation, padded to equal shares
(``gnnpipe.distributed.shard``), so every rank takes the same number of steps and step ``g`` of
``W`` ranks with ``batch_size`` B covers the pairs of step ``g`` of one process with W * B. The
neighbour sampler restarts its stream at ``(seed, epoch)`` too. Workers are not persistent:
each epoch's workers get that epoch's state.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import torch
from torch_geometric.data import HeteroData

from gnnpipe.config import NeighborParams
from gnnpipe.distributed import SINGLE, DistContext
from gnnpipe.graph import Csr
from gnnpipe.negatives import NegativeSampler
from gnnpipe.sampling.neighbor import EdgeType, HeteroNeighborSampler
from gnnpipe.sampling.link import SupervisionLoader, check_supervision


class TypedSupervisionLoader(SupervisionLoader):
    """PyG ``LinkLoader`` over one rank's supervision edges of ``edge_type``, with per-epoch
    leak-free negatives (batch layout in the module docstring): ``SupervisionLoader`` on a
    typed graph, its negatives drawn in ``to_homogeneous`` ids.

    Args:
        data: PyG ``HeteroData`` with ``x`` per node type and the message graph's edges.
        link_sampler: the ``HeteroNeighborSampler`` over that same message graph.
        edge_type: ``(s, r, d)``, the supervised edge type.
        supervision: int64 (2, P) positives ``(head of s, target of d)``, type-local ids.
        negatives: draws negative targets for heads (``to_homogeneous`` ids, see ``offsets``).
        batch_size: positives per batch (each batch has twice as many labelled pairs).
        seed: fixes the per-epoch permutation and negatives, with the epoch.
        offsets: ``(first homogeneous id of s, of d)``: (0, 0) when ``negatives`` already
            works on type-local ids.
        ctx: this rank; ranks get equal shares, so every rank takes the same number of steps.
    """

    def __init__(self, data: HeteroData, link_sampler: HeteroNeighborSampler,
                 edge_type: EdgeType, supervision: torch.Tensor, negatives: NegativeSampler,
                 batch_size: int, seed: int, *, offsets: tuple[int, int] = (0, 0),
                 ctx: DistContext = SINGLE, num_workers: int = 0):
        edge_type = tuple(edge_type)
        if edge_type not in link_sampler.edge_types:
            raise ValueError(f"edge_type={edge_type!r} is not an edge type of the sampler's "
                             "message graph")
        check_supervision(supervision)
        n_src, n_dst = (link_sampler.num_nodes[edge_type[0]],
                        link_sampler.num_nodes[edge_type[2]])
        if bool((supervision < 0).any()) or int(supervision[0].max()) >= n_src or int(
                supervision[1].max()) >= n_dst:
            raise ValueError(f"supervision holds ids outside the {edge_type[0]!r} / "
                             f"{edge_type[2]!r} node ranges ({n_src}, {n_dst})")
        self.offsets = (int(offsets[0]), int(offsets[1]))
        super().__init__(data, link_sampler, supervision, negatives, batch_size, seed, ctx=ctx,
                         num_workers=num_workers, edge_type=edge_type)

    def _draw_targets(self, rng: np.random.Generator) -> np.ndarray:
        """Type-local ``d`` targets (P,): the sampler works on ``to_homogeneous`` ids."""
        heads = self.supervision[0].numpy() + self.offsets[0]
        drawn = self.negative_sampler.sample(heads, 1, rng)[:, 0] - self.offsets[1]
        n_dst = self.link_sampler.num_nodes[self.edge_type[2]]
        if drawn.size and (drawn.min() < 0 or drawn.max() >= n_dst):
            raise ValueError(f"the negative sampler drew targets outside node type "
                             f"{self.edge_type[2]!r}; check offsets={self.offsets} and its "
                             "weights")
        return drawn


def typed_link_loader(x: Mapping[str, torch.Tensor], csr: Mapping[EdgeType, Csr],
                      edge_type: EdgeType, supervision: torch.Tensor,
                      negatives: NegativeSampler, cfg: NeighborParams, seed: int, *,
                      batch_size: int, offsets: tuple[int, int] = (0, 0), num_workers: int = 0,
                      ctx: DistContext = SINGLE) -> TypedSupervisionLoader:
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
    for e, graph in csr.items():  # CSR order: the sampler's edge ids as they are
        data[e].edge_index = graph.edge_index()
    return TypedSupervisionLoader(data, sampler, edge_type, supervision, negatives, batch_size,
                                  seed, offsets=offsets, ctx=ctx, num_workers=num_workers)
