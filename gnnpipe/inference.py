"""Memory-bounded full-graph inference: layer by layer over blocks of target nodes.

A full-graph forward materialises one message per edge and layer, E x width floats (about
10 GB for 20M edges and 128 features). Layer-wise inference (the recipe of PyG's scaling docs,
``BasicGNN.inference``) computes layer ``l`` for every node before layer ``l + 1``, one block
of target rows at a time: the block's targets, *all* their in-neighbours (no sampling, so every
output is exact). GCN and mean-SAGE aggregate a block as one sparse-dense product of its CSR
rows with the whole layer table, so neither the neighbours' rows nor per-edge messages are
materialised; GAT (attention is per edge) gathers the block's sources and edges
(``TargetBlocks``). Peak memory is the layer tables (N x hidden: the one being read and the
one being filled; all L under jk; GCN adds its N x hidden ``lin`` table) plus one block.

PyG's own ``inference`` insists on a ``NeighborLoader`` (which needs pyg-lib or torch-sparse)
and has no jk; here the blocks are cut straight from the CSR and ``layerwise_logits`` runs
each conv, then ``gnnpipe.models.finish_layer`` (the same activation / residual code as the
forward), then jk.

GCN normalises with the degrees of the graph it is handed, which inside a block are wrong for
every source outside it; a block's edges are therefore weighted with D^-1/2 (A + I) D^-1/2 of
the whole graph (as ``gcn_norm``: stored self-loops dropped, one loop per node added) and
propagated without re-normalising. Under DDP the ranks split the target rows and all-gather
each layer's table, so every rank ends with all N rows.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpipe.distributed import SINGLE, DistContext
from gnnpipe.graph import Csr
from gnnpipe.models import FeatureMLP, finish_layer

# A full forward whose per-layer messages (num_edges x max(in_dim, hidden) float32) pass 1 GiB
# goes layer-wise under train.inference.mode=auto; the default 20k-node graph is ~50x below.
AUTO_MESSAGE_FLOATS = 2**28
BLOCK_CONVS = (GCNConv, SAGEConv, GATConv)
# Row-wise maps (GCN's lin over every node) run this many rows at a time: ~32 MB at 128 floats.
ROW_STEP = 1 << 16


@dataclass(frozen=True)
class Block:
    """Target rows ``[start, stop)`` of a CSR with every in-edge, in local ids.

    ``n_id`` int64 (B + S,): global ids, the B = ``batch_size`` targets first (in order), then
    their S other in-neighbours ascending. ``edge_index`` int64 (2, E_b): (source, target) local
    ids, targets in ``[0, B)``, edges in CSR order.
    """

    start: int
    stop: int
    n_id: torch.Tensor
    edge_index: torch.Tensor

    @property
    def batch_size(self) -> int:
        return self.stop - self.start


def cost_prefix(csr: Csr) -> torch.Tensor:
    """Work up to each row, int64 (N + 1,): edges plus rows (isolated rows cost too)."""
    return csr.indptr + torch.arange(csr.num_nodes + 1, dtype=torch.int64)


def rank_rows(csr: Csr, ctx: DistContext) -> tuple[int, int]:
    """This rank's contiguous target rows ``[lo, hi)``: an equal share of edges + rows."""
    prefix = cost_prefix(csr)
    total = int(prefix[-1])
    cuts = torch.tensor([total * r // ctx.world_size for r in (ctx.rank, ctx.rank + 1)])
    lo, hi = torch.searchsorted(prefix, cuts).tolist()  # every row costs >= 1: prefix rises
    return lo, hi


class TargetBlocks:
    """Blocks of consecutive target rows ``[lo, hi)`` of ``csr``, each holding at most
    ``block_cost`` edges + rows (a row with more edges than that is a block of its own).

    ``cache``: keep the blocks after the first pass (int32 local ids, about 8 bytes per edge
    plus 8 per ``n_id`` entry), so later layers and calls skip rebuilding them (~15% of a
    SAGE layer's time, measured). Building reuses two (N,) scratch tables: one pass at a time.
    """

    def __init__(self, csr: Csr, block_cost: int, lo: int = 0, hi: int | None = None,
                 cache: bool = False):
        self.csr = csr
        self.cache = cache
        self._cached: list[tuple[int, int, torch.Tensor, torch.Tensor]] | None = None
        hi = csr.num_nodes if hi is None else hi
        prefix = cost_prefix(csr)
        bounds, start = [], lo
        while start < hi:  # one step per block, not per node
            stop = int(torch.searchsorted(prefix, prefix[start] + block_cost, right=True)) - 1
            stop = min(max(stop, start + 1), hi)
            bounds.append((start, stop))
            start = stop
        self.bounds = bounds
        self._seen = torch.zeros(csr.num_nodes, dtype=torch.bool)
        self._local = torch.empty(csr.num_nodes, dtype=torch.int64)

    def __len__(self) -> int:
        return len(self.bounds)

    def __iter__(self):
        if self._cached is not None:
            for start, stop, n_id, edge_index in self._cached:
                yield Block(start, stop, n_id, edge_index.long())
            return
        kept = []
        for start, stop in self.bounds:
            block = self.block(start, stop)
            if self.cache:
                kept.append((start, stop, block.n_id, block.edge_index.int()))
            yield block
        if self.cache and len(kept) == len(self.bounds):  # a pass run to its end
            self._cached = kept

    def block(self, start: int, stop: int) -> Block:
        indptr = self.csr.indptr
        e0, e1 = int(indptr[start]), int(indptr[stop])
        src = self.csr.indices[e0:e1]  # (E_b,) global sources, grouped by target
        outside = src[(src < start) | (src >= stop)]
        # distinct outside sources, ascending, without a sort: mark, then scan the marks
        self._seen[outside] = True
        others = self._seen.nonzero().squeeze(1)
        self._seen[others] = False
        n_id = torch.cat([torch.arange(start, stop, dtype=torch.int64), others])
        self._local[n_id] = torch.arange(n_id.numel())  # global -> local for this block only
        dst = torch.repeat_interleave(torch.arange(stop - start), indptr[start + 1:stop + 1]
                                      - indptr[start:stop])
        return Block(start, stop, n_id, torch.stack([self._local[src], dst]))


def gcn_inv_sqrt_degree(csr: Csr, fill: float = 1.0, chunk_edges: int = 1 << 22) -> torch.Tensor:
    """(d_i + fill)^-1/2 for every node, float32 (N,), d_i = in-edges of i that are not loops.

    What ``gcn_norm`` computes on the whole graph: it drops stored self-loops and adds one loop
    of weight ``fill`` (2 for ``improved``) per node. Loops are counted in row chunks.
    """
    loops = torch.zeros(csr.num_nodes, dtype=torch.int64)
    for block in TargetBlocks(csr, chunk_edges):
        src_local, dst_local = block.edge_index
        is_loop = src_local == dst_local  # targets come first: a loop has equal local ids
        loops[block.start:block.stop] = torch.bincount(dst_local[is_loop],
                                                       minlength=block.batch_size)
    degree = (csr.degrees() - loops).to(torch.float32) + fill
    return degree.pow(-0.5)


def check_supported(model: nn.Module) -> None:
    """Raise ValueError unless ``layerwise_logits`` reproduces ``model``'s forward."""
    if isinstance(model, FeatureMLP):
        return
    if not isinstance(model, BasicGNN) or not all(isinstance(c, BLOCK_CONVS) for c in model.convs):
        raise ValueError(f"train.inference.mode=layerwise supports gnnpipe's mlp, gcn, sage and "
                         f"gat, not {type(model).__name__}; set train.inference.mode: full")
    if model.supports_norm_batch:
        raise ValueError("train.inference.mode=layerwise cannot run graph-wise norms per block; "
                         "set train.inference.mode: full")
    for conv in model.convs:
        # improved: PyG drops its loop weight 2 without edge weights; blocks would apply it
        if isinstance(conv, GCNConv) and (conv.improved or not (conv.normalize
                                                               and conv.add_self_loops)):
            raise ValueError("train.inference.mode=layerwise expects GCNConv with its default "
                             "normalisation; set train.inference.mode: full")


class WeightMemo:
    """The last evaluation's output, reused while the model's weights, the input tensor and the
    world size are unchanged (the loop evaluates val and test on the same weights)."""

    def __init__(self):
        self._last: tuple | None = None  # (key, weights, output)

    def get(self, model: nn.Module, x, ctx: DistContext, compute):
        """``compute()``'s output, or the memo of it when nothing it depends on changed."""
        weights = [t.detach().clone() for t in model.state_dict().values()]
        key = (id(model), id(x), ctx.world_size)
        last = self._last
        if last is not None and last[0] == key and len(last[1]) == len(weights) and all(
                torch.equal(a, b) for a, b in zip(last[1], weights)):
            return last[2]
        out = compute()
        self._last = (key, weights, out)
        return out


class LayerwiseInference:
    """Layer-wise logits of a model on one message graph ``csr``, memoised on the weights.

    Phases that share a graph share one object; as long as the model's parameters and buffers
    are equal to the last call's (train and val accuracy of one epoch, the final predictions
    of the best epoch), the last logits are returned without recomputing.
    """

    def __init__(self, csr: Csr, block_edges: int, aligned: bool = False):
        self.csr = csr
        self.block_edges = block_edges
        # aligned: under DDP each rank takes whole blocks of the one-process cut, so every row
        # is computed in the same block as by one process (bit-identical outputs: predict)
        self.aligned = aligned
        self._blocks: dict[tuple[int, int], TargetBlocks] = {}
        self._inv_sqrt: dict[float, torch.Tensor] = {}
        self._memo = WeightMemo()

    def blocks(self, ctx: DistContext = SINGLE) -> TargetBlocks:
        """This rank's target blocks (all of them outside DDP)."""
        rows = rank_rows(self.csr, ctx) if ctx.world_size > 1 else (0, self.csr.num_nodes)
        if self.aligned and ctx.world_size > 1:
            rows = self._snap(rows)
        if rows not in self._blocks:
            self._blocks[rows] = TargetBlocks(self.csr, self.block_edges, *rows, cache=True)
        return self._blocks[rows]

    def _snap(self, rows: tuple[int, int]) -> tuple[int, int]:
        """``rows`` moved to the first block start of the one-process cut at or after each end
        (a greedy cut from a block start repeats that cut, so the rank's blocks are those)."""
        if (0, self.csr.num_nodes) not in self._blocks:
            self._blocks[0, self.csr.num_nodes] = TargetBlocks(self.csr, self.block_edges,
                                                               cache=True)
        bounds = self._blocks[0, self.csr.num_nodes].bounds
        starts = torch.tensor([b[0] for b in bounds] + [self.csr.num_nodes])
        lo, hi = starts[torch.searchsorted(starts, torch.tensor(rows))].tolist()
        return lo, hi

    def inv_sqrt_degree(self, fill: float) -> torch.Tensor:
        if fill not in self._inv_sqrt:
            self._inv_sqrt[fill] = gcn_inv_sqrt_degree(self.csr, fill)
        return self._inv_sqrt[fill]

    @torch.no_grad()
    def __call__(self, model: nn.Module, x: torch.Tensor, ctx: DistContext = SINGLE,
                 ) -> torch.Tensor:
        """Logits (N, C) of every node, equal to ``model(x, csr.edge_index())`` in eval mode."""
        return self._memo.get(model, x, ctx, lambda: layerwise_logits(model, x, self, ctx))


def _all_rows(mine: torch.Tensor, ctx: DistContext, num_rows: int) -> torch.Tensor:
    """Every rank's contiguous rows (M_r, C), concatenated in rank order: (num_rows, C)."""
    if ctx.world_size == 1:
        return mine
    sizes = torch.zeros(ctx.world_size, dtype=torch.int64)
    sizes[ctx.rank] = mine.shape[0]
    dist.all_reduce(sizes)
    padded = torch.zeros(int(sizes.max()), mine.shape[1], dtype=mine.dtype)
    padded[:mine.shape[0]] = mine  # all_gather wants equal shapes
    parts = [torch.empty_like(padded) for _ in range(ctx.world_size)]
    dist.all_gather(parts, padded)
    out = torch.cat([part[:size] for part, size in zip(parts, sizes.tolist())])
    assert out.shape[0] == num_rows, "ranks' target rows must tile the graph"
    return out


def _adjacency_rows(csr: Csr, start: int, stop: int,
                    values: torch.Tensor | None = None) -> torch.Tensor:
    """Rows ``[start, stop)`` of the adjacency, sparse CSR float32 (B, N): row = target, column
    = global source id (a view of ``csr.indices``, no copy); ``values`` (E_b,), ones without."""
    e0, e1 = int(csr.indptr[start]), int(csr.indptr[stop])
    col = csr.indices[e0:e1]
    crow = (csr.indptr[start:stop + 1] - e0).to(col.dtype)
    if values is None:
        values = torch.ones(e1 - e0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta state"
        return torch.sparse_csr_tensor(crow, col, values, size=(stop - start, csr.num_nodes),
                                       check_invariants=False)


def _is_mean_sage(conv: nn.Module) -> bool:
    """A SAGEConv whose aggregation ``_sage_rows`` computes (gnnpipe builds only these)."""
    return isinstance(conv, SAGEConv) and conv.aggr == "mean" and not conv.project


def _sage_rows(conv: SAGEConv, h: torch.Tensor, csr: Csr, start: int, stop: int
               ) -> torch.Tensor:
    """``conv`` on targets ``[start, stop)`` (B, out) from the whole table ``h`` (N, F) float32:
    the neighbour mean as one sparse-dense product (B, F), never a per-edge message tensor."""
    total = torch.sparse.mm(_adjacency_rows(csr, start, stop), h)
    count = (csr.indptr[start + 1:stop + 1] - csr.indptr[start:stop]).clamp(min=1)
    out = conv.lin_l(total / count.unsqueeze(1).to(total.dtype))  # PyG's mean: sum / max(n, 1)
    if conv.root_weight:
        out = out + conv.lin_r(h[start:stop])
    if conv.normalize:
        out = torch.nn.functional.normalize(out, p=2.0, dim=-1)
    return out


def _gcn_rows(conv: GCNConv, xlin: torch.Tensor, csr: Csr, start: int, stop: int,
              inv_sqrt: torch.Tensor, fill: float) -> torch.Tensor:
    """``conv`` on targets ``[start, stop)`` (B, out) from ``xlin`` = ``conv.lin`` of every node
    (N, out), weighted D^-1/2 (A + I) D^-1/2 of the whole graph as ``gcn_norm``: stored loops
    weigh 0, the one added loop per target weighs ``fill * d_i^-1``."""
    indptr = csr.indptr
    src = csr.indices[int(indptr[start]):int(indptr[stop])]
    dst = torch.repeat_interleave(torch.arange(start, stop), indptr[start + 1:stop + 1]
                                  - indptr[start:stop])
    weight = inv_sqrt[src] * inv_sqrt[dst]  # (E_b,): gcn_norm's dis[row] * w * dis[col]
    weight[src == dst] = 0.0
    out = torch.sparse.mm(_adjacency_rows(csr, start, stop, weight), xlin)
    targets = inv_sqrt[start:stop]
    out = out + (targets * fill * targets).unsqueeze(1) * xlin[start:stop]
    return out + conv.bias if conv.bias is not None else out


def _row_map(fn, h: torch.Tensor, width: int, step: int = ROW_STEP) -> torch.Tensor:
    """``fn`` applied to every row of ``h`` (N, F) in row blocks, into one (N, width) table."""
    out = torch.empty(h.shape[0], width)
    for a in range(0, h.shape[0], step):
        out[a:a + step] = fn(h[a:a + step].float())
    return out


@torch.no_grad()
def layerwise_logits(model: nn.Module, x: torch.Tensor, engine: LayerwiseInference,
                     ctx: DistContext = SINGLE, with_hidden: bool = False):
    """``model``'s eval-mode logits (N, C) on ``engine.csr`` from features ``x`` (N, F),
    computed one layer and one block of targets at a time; under DDP every rank computes its
    share of the blocks and ends with all N rows.

    ``with_hidden``: ``(logits, hidden)``, hidden (N, H) the input of the model's last layer
    as ``gnnpipe.models.forward_with_hidden`` defines it (the layer L-2 table without jk, the
    jk output with it; for mlp the last hidden), captured on the way at no extra pass.

    Memory: each layer's table (this rank's rows) is allocated once and filled block by
    block; the previous table is dropped once the next exists (unless it is ``hidden`` or jk
    keeps it). GCN and mean-SAGE aggregate with a sparse-dense product over the CSR rows of
    the block (no (B + S, F) gather, no E_b x F messages); GAT gathers per block."""
    check_supported(model)
    was_training = model.training
    model.eval()
    try:
        num_nodes = engine.csr.num_nodes
        if isinstance(model, FeatureMLP):  # no edges: row blocks (identical on every rank)
            step = engine.block_edges
            if not with_hidden:
                return torch.cat([model(x[a:a + step].float())
                                  for a in range(0, num_nodes, step)])
            from gnnpipe.models import forward_with_hidden

            pairs = [forward_with_hidden(model, x[a:a + step].float())
                     for a in range(0, num_nodes, step)]
            return torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])
        csr, blocks = engine.csr, engine.blocks(ctx)
        bounds = blocks.bounds
        lo, hi = (bounds[0][0], bounds[-1][1]) if bounds else (0, 0)  # this rank's rows
        jk = hasattr(model, "jk")
        h, tables, hidden = x, [], None
        for layer, conv in enumerate(model.convs):
            if layer == model.num_layers - 1 and not jk:
                hidden = h  # (N, width): what the last conv reads
            mine = torch.empty(hi - lo, _width(model, layer))
            rows = None  # (start, stop) -> conv output of those targets, or a gather per block
            if isinstance(conv, GCNConv):
                fill = 2.0 if conv.improved else 1.0
                inv_sqrt = engine.inv_sqrt_degree(fill)
                xlin = _row_map(conv.lin, h, conv.out_channels)  # the full forward's lin, once

                def rows(a, b, conv=conv, xlin=xlin, inv_sqrt=inv_sqrt, fill=fill):
                    return _gcn_rows(conv, xlin, csr, a, b, inv_sqrt, fill)
                del xlin  # the closure holds it until ``rows`` goes below
            elif _is_mean_sage(conv) and isinstance(h, torch.Tensor):  # else rows per block
                table = h if h.dtype == torch.float32 else h.float()

                def rows(a, b, conv=conv, table=table):
                    return _sage_rows(conv, table, csr, a, b)
                del table
            if rows is not None:
                for start, stop in bounds:
                    mine[start - lo:stop - lo] = finish_layer(model, layer, rows(start, stop),
                                                              h[start:stop].float())
            else:  # bipartite: sources -> the B targets (GAT adds loops on those only)
                for block in blocks:
                    xb = h[block.n_id].float()  # (B + S, width): targets first
                    out = conv((xb, xb[:block.batch_size]), block.edge_index)
                    mine[block.start - lo:block.stop - lo] = finish_layer(
                        model, layer, out, xb[:block.batch_size])
                    del xb, out  # before the next block's gather
            rows = None  # the layer's scratch (GCN's lin table) goes before the next table
            h = _all_rows(mine, ctx, num_nodes)  # (N, width of this layer); the old h drops
            del mine
            if jk:
                tables.append(h)
        if not jk:
            return (h, hidden.float()) if with_hidden else h
        h = None
        step = engine.block_edges  # jk and its linear map are row-wise: row blocks
        logits = torch.empty(num_nodes, model.lin.out_features)
        jks = None
        for a in range(0, num_nodes, step):
            z = model.jk([t[a:a + step] for t in tables])
            logits[a:a + z.shape[0]] = model.lin(z)
            if with_hidden:
                if jks is None:
                    jks = torch.empty(num_nodes, z.shape[1])
                jks[a:a + z.shape[0]] = z
        if with_hidden and jks is None:  # no rows at all
            jks = torch.empty(0, sum(t.shape[1] for t in tables) if model.jk_mode == "cat"
                              else tables[0].shape[1])
        return (logits, jks) if with_hidden else logits
    finally:
        model.train(was_training)


def _width(model: BasicGNN, layer: int) -> int:
    """Output channels of conv ``layer`` (a rank with no target rows still sends its shape)."""
    conv = model.convs[layer]
    heads = getattr(conv, "heads", 1) if getattr(conv, "concat", False) else 1
    return conv.out_channels * heads


def plan(csr: Csr, in_dim: int, cfg) -> LayerwiseInference | None:
    """The layer-wise engine for ``csr`` if ``cfg.inference.mode`` (TrainParams) asks for one,
    else None (a full forward; also for a ``cfg`` without an inference section). ``auto``: layer-wise for graph models once a full forward's
    per-layer messages, num_edges x max(in_dim, hidden) floats, pass ``AUTO_MESSAGE_FLOATS``."""
    inference = getattr(cfg, "inference", None)
    mode = "full" if inference is None else inference.mode
    if mode == "full":
        return None
    if mode == "auto" and (cfg.model not in ("gcn", "sage", "gat") or
                           csr.num_edges * max(in_dim, cfg.hidden) <= AUTO_MESSAGE_FLOATS):
        return None
    return LayerwiseInference(csr, inference.block_edges)
