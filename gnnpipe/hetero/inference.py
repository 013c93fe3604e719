"""Memory-bounded evaluation of typed models: layer by layer over blocks of destination nodes.

A full forward of a typed model materialises one message per edge of every edge type and
layer. ``HeteroLayerwise`` computes layer ``l`` for every node of every type before layer
``l + 1``: for each destination type ``d``, consecutive rows of ``d`` are cut into blocks of at
most ``train.inference.block_edges`` in-edges + rows summed over the edge types into ``d``;
each block runs every edge type's conv on the whole source table and the block's rows, with
all of the block's in-edges (no sampling, so every output is exact). Peak memory is the layer
tables (every node x hidden, two of them) plus one block's gather (block edges x width).

Supported: ``sage`` (the ``to_hetero(GraphSAGE)`` convs, summed over edge types, ReLU between
layers, as the transformed forward) and ``rgcn`` (``RGCNConv`` on the homogeneous view with a
bipartite (all sources, block rows) input). ``hgt`` normalises attention over every in-edge
of a node across edge types inside one conv call and is not blocked here (full forward only;
``config._check_layerwise``). Under DDP the ranks split each destination type's rows and
all-gather each layer's table (``gnnpipe.inference._all_rows``), so every rank ends with all
rows.
"""

from __future__ import annotations

import torch
from torch import nn

from gnnpipe.config import TYPED_LAYERWISE_MODELS as LAYERWISE_MODELS  # sage, rgcn
from gnnpipe.distributed import SINGLE, DistContext
from gnnpipe.graph import Csr
from gnnpipe.inference import AUTO_MESSAGE_FLOATS, WeightMemo, _all_rows
from gnnpipe.typed_graph import EdgeType


def dst_blocks(csrs: list[Csr], num_rows: int, block_cost: int, lo: int = 0,
               hi: int | None = None) -> list[tuple[int, int]]:
    """Row ranges ``[start, stop)`` of one destination type covering ``[lo, hi)``, each with at
    most ``block_cost`` in-edges (summed over ``csrs``, the edge types into it) + rows; a row
    with more is a block of its own."""
    prefix = torch.arange(num_rows + 1, dtype=torch.int64)  # every row costs 1 (isolated too)
    for csr in csrs:
        prefix = prefix + csr.indptr
    hi = num_rows if hi is None else hi
    bounds, start = [], lo
    while start < hi:  # one step per block, not per node
        stop = int(torch.searchsorted(prefix, prefix[start] + block_cost, right=True)) - 1
        stop = min(max(stop, start + 1), hi)
        bounds.append((start, stop))
        start = stop
    return bounds


def rank_share(csrs: list[Csr], num_rows: int, ctx: DistContext) -> tuple[int, int]:
    """This rank's contiguous rows ``[lo, hi)`` of a destination type: equal edges + rows."""
    if ctx.world_size == 1:
        return 0, num_rows
    prefix = torch.arange(num_rows + 1, dtype=torch.int64)
    for csr in csrs:
        prefix = prefix + csr.indptr
    total = int(prefix[-1])
    cuts = torch.tensor([total * r // ctx.world_size for r in (ctx.rank, ctx.rank + 1)])
    lo, hi = torch.searchsorted(prefix, cuts).tolist()
    return lo, hi


def block_edges(csr: Csr, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources (E_b,) (global ids of the source type) and destinations (E_b,) local to
    ``[start, stop)`` of the block's in-edges, in CSR order."""
    e0, e1 = int(csr.indptr[start]), int(csr.indptr[stop])
    counts = csr.indptr[start + 1:stop + 1] - csr.indptr[start:stop]
    return csr.indices[e0:e1], torch.repeat_interleave(torch.arange(stop - start), counts)


class HeteroLayerwise:
    """Layer-wise target logits of a ``HeteroModel`` on one typed message graph, memoised on
    the weights (phases sharing a graph share one object; train and val accuracy of an epoch
    and the final predictions reuse one pass)."""

    def __init__(self, graph: dict[EdgeType, Csr], num_nodes: dict[str, int], block_edges: int):
        self.graph, self.num_nodes, self.block_edges = graph, dict(num_nodes), block_edges
        self.into = {t: [e for e in graph if e[2] == t] for t in num_nodes}  # in-edge types
        self._blocks: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
        self._memo = WeightMemo()

    def rows(self, node_type: str, ctx: DistContext) -> tuple[int, int]:
        return rank_share([self.graph[e] for e in self.into[node_type]],
                          self.num_nodes[node_type], ctx)

    def blocks(self, node_type: str, ctx: DistContext = SINGLE) -> list[tuple[int, int]]:
        """This rank's row blocks of ``node_type`` (all of them outside DDP), cached."""
        lo, hi = self.rows(node_type, ctx)
        key = (node_type, lo, hi)
        if key not in self._blocks:
            self._blocks[key] = dst_blocks([self.graph[e] for e in self.into[node_type]],
                                           self.num_nodes[node_type], self.block_edges, lo, hi)
        return self._blocks[key]

    @torch.no_grad()
    def __call__(self, model: nn.Module, x: dict[str, torch.Tensor],
                 ctx: DistContext = SINGLE) -> torch.Tensor:
        """What ``model(x, edge_index_dict)`` returns in eval mode: target logits (N_target, C)
        (or every type's rows concatenated for ``out="all"``)."""
        return self._memo.get(model, x, ctx, lambda: hetero_layerwise_logits(model, x, self, ctx))


def _input_rows(model: nn.Module, x: dict[str, torch.Tensor], step: int) -> dict:
    """ReLU of the per-type input maps, (N_t, hidden) per type, in row blocks of ``step``."""
    out = {}
    for t, lin in zip(model.inputs.types, model.inputs.maps):
        rows = x[t]
        out[t] = torch.cat([torch.relu(lin(rows[a:a + step].float()))
                            for a in range(0, rows.shape[0], step)]) if rows.shape[0] else \
            torch.empty(0, lin.out_features)
    return out


def _sage_layer(convs: nn.ModuleDict, h: dict[str, torch.Tensor], engine: HeteroLayerwise,
                ctx: DistContext, width: int) -> dict[str, torch.Tensor]:
    """One to_hetero SAGE layer: per destination type, the sum over its in-edge types of each
    conv on (whole source table, block rows); types without in-edges drop out, as in to_hetero."""
    from gnnpipe.typed_graph import edge_type_name

    out = {}
    for d, edge_types in engine.into.items():
        if not edge_types or d not in h:
            continue
        parts = []
        for start, stop in engine.blocks(d, ctx):
            acc = None
            for e in edge_types:
                if e[0] not in h:
                    continue
                src, dst = block_edges(engine.graph[e], start, stop)
                y = convs[edge_type_name(e)]((h[e[0]], h[d][start:stop]),
                                             torch.stack([src, dst]))
                acc = y if acc is None else acc + y  # to_hetero sums in edge-type order
            parts.append(acc)
        mine = torch.cat(parts) if parts else torch.empty(0, width)
        out[d] = _all_rows(mine, ctx, engine.num_nodes[d])
    return out


def _rgcn_layer(conv: nn.Module, x: torch.Tensor, engine: HeteroLayerwise, ctx: DistContext,
                types: list[str], edge_types: list[EdgeType], start_of: dict[str, int],
                width: int) -> torch.Tensor:
    """One RGCNConv over the homogeneous view ``x`` (N_total, F): per destination type and block,
    every in-edge (source offset by its type's start, relation = edge type index)."""
    tables = []
    for d in types:
        parts = []
        for start, stop in engine.blocks(d, ctx):
            srcs, dsts, rels = [], [], []
            for i, e in enumerate(edge_types):
                if e[2] != d:
                    continue
                src, dst = block_edges(engine.graph[e], start, stop)
                srcs.append(src + start_of[e[0]])
                dsts.append(dst)
                rels.append(torch.full((src.numel(),), i, dtype=torch.int64))
            ei = torch.stack([torch.cat(srcs), torch.cat(dsts)]) if srcs else torch.empty(
                2, 0, dtype=torch.int64)
            rel = torch.cat(rels) if rels else torch.empty(0, dtype=torch.int64)
            rows = x[start_of[d] + start:start_of[d] + stop]
            parts.append(conv((x, rows), ei, rel))
        mine = torch.cat(parts) if parts else torch.empty(0, width)
        tables.append(_all_rows(mine, ctx, engine.num_nodes[d]))
    return torch.cat(tables)


@torch.no_grad()
def hetero_layerwise_logits(model: nn.Module, x: dict[str, torch.Tensor],
                            engine: HeteroLayerwise, ctx: DistContext = SINGLE,
                            with_hidden: bool = False):
    """``model``'s eval-mode output on ``engine.graph`` from ``x`` (type -> (N_t, F_t)), one
    layer and one block of destination rows at a time (sage, rgcn; see the module doc).

    ``with_hidden``: ``(output, hidden)``, hidden type -> (N_t, H) the input of the last layer
    (as ``HeteroModel.forward_with_hidden``), captured on the way."""
    if model.name not in LAYERWISE_MODELS:
        raise ValueError(f"train.inference.mode='layerwise' evaluates typed "
                         f"{' and '.join(LAYERWISE_MODELS)} models, not "
                         f"train.model={model.name!r}")
    was_training = model.training
    model.eval()
    try:
        h = _input_rows(model, x, engine.block_edges)
        if model.name == "sage":
            convs = model.body.convs
            hidden = h
            for layer, layer_convs in enumerate(convs):
                if layer == len(convs) - 1:
                    hidden = h  # what the last layer reads
                width = next(iter(layer_convs.values())).out_channels
                h = _sage_layer(layer_convs, h, engine, ctx, width)
                if layer < len(convs) - 1:  # GraphSAGE: act (dropout: eval) between layers
                    h = {t: torch.relu(v) for t, v in h.items()}
            return (model._select(h), hidden) if with_hidden else model._select(h)
        types = model.node_types
        sizes = [h[t].shape[0] for t in types]
        starts = torch.tensor([0] + sizes[:-1]).cumsum(0).tolist()
        start_of = dict(zip(types, starts))
        z = torch.cat([h[t] for t in types])
        hidden = None
        for conv in model.convs:  # rgcn: relu before every conv (the forward's order)
            hidden = torch.relu(z)  # after the loop: what the last conv read
            z = _rgcn_layer(conv, hidden, engine, ctx, types, model.edge_types,
                            start_of, conv.out_channels)
        out = model._select(dict(zip(types, z.split(sizes))))
        return (out, dict(zip(types, hidden.split(sizes)))) if with_hidden else out
    finally:
        model.train(was_training)


def plan(graph: dict[EdgeType, Csr], num_nodes: dict[str, int], in_dim: int,
         cfg) -> HeteroLayerwise | None:
    """The layer-wise engine for a typed phase graph if ``cfg.inference.mode`` asks for one,
    else None (full forward; also for a cfg without an inference section). ``auto``: for sage
    and rgcn once all edge types' messages, edges x max(in_dim, hidden) floats, pass
    ``gnnpipe.inference.AUTO_MESSAGE_FLOATS``."""
    inference = getattr(cfg, "inference", None)
    mode = "full" if inference is None else inference.mode
    if mode == "full" or cfg.model not in LAYERWISE_MODELS:
        return None  # config._check_layerwise refuses layerwise for the other models
    edges = sum(csr.num_edges for csr in graph.values())
    if mode == "auto" and edges * max(in_dim, cfg.hidden) <= AUTO_MESSAGE_FLOATS:
        return None
    return HeteroLayerwise(graph, num_nodes, inference.block_edges)
