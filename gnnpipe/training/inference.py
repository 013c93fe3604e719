"""Memory-bounded full-graph inference: layer by layer over blocks of destination rows.

A full-graph forward materialises one message per edge and layer, E x width floats (about
10 GB for 20M edges and 128 features). Layer-wise inference (the recipe of PyG's scaling docs,
``BasicGNN.inference``) computes layer ``l`` for every node before layer ``l + 1``, one block of
destination rows at a time: the block's rows with *all* their in-edges (no sampling, so every
output is exact).

One engine for both graph kinds: a graph is a dict of per-edge-type CSRs (rows: destinations)
with a row count per node type; a homogeneous graph is its one-node-type, one-edge-type case
(``csr_view``). Each node type's rows are cut into blocks of at most ``block_edges`` in-edges
(summed over the edge types into it) + rows; ``_layer`` fills every type's next table block
by block, so peak memory is the layer tables (every node x hidden: the one being read and the
one being filled; all L under jk; GCN adds its N x hidden ``lin`` table, sep an N x hidden/2
one) plus one block. Inside a stage those tables, the outputs too, are pages of memory-mapped
scratch files beside the stage's outputs (``gnnpipe.io.temps.scratch_array``: unlinked once
mapped, so nothing outlives the run or a kill), not anonymous memory, and so is the block cost
prefix (8 bytes a node); what the process holds per node is, for GCN, the normalisation
(4 bytes). Under DDP the ranks split each type's rows and broadcast each one's share of a
layer's table into every rank's, so every rank ends with all rows.

A block's rows per conv:
* mean SAGE (homogeneous, and each edge type's conv of ``to_hetero(GraphSAGE)``, summed over
  the edge types into a type as ``to_hetero`` does): the neighbour mean as one sparse-dense
  product of the block's CSR rows with the whole source table, no per-edge messages; over
  features read per batch (the first layer) that narrow, the mean of the rows projected once by
  ``lin_l`` (equal to float rounding: the product's order differs from PyG's mean-then-project);
* GCN: the same product weighted with D^-1/2 (A + I) D^-1/2 of the whole graph (as
  ``gcn_norm``: stored self-loops dropped, one loop per node added): GCNConv on a block would
  normalise with the block's degrees, wrong for every source outside it;
* sep (``SepConv``): the block's own rows through the ego weights beside the neighbour mean of
  the whole table's projected rows, one sparse-dense product as for mean SAGE;
* GAT (attention is per edge) and other SAGE aggregations: the block's sources and edges
  gathered into local ids (``Block``, cached for later layers and calls; predict's one call,
  ``reuse=False``, keeps a block only while a later layer gathers it and none after);
* R-GCN: ``RGCNConv`` on the homogeneous view, (every source, the block's rows) bipartite.
``hgt`` normalises attention over every in-edge of a node across edge types inside one conv
call and is not blocked (full forward only; ``config._check_layerwise``).

PyG's own ``inference`` insists on a ``NeighborLoader`` (which needs pyg-lib or torch-sparse)
and has no jk; here the blocks are cut straight from the CSRs and each homogeneous layer ends
in ``gnnpipe.training.models.finish_layer`` (the forward's activation / residual code), then jk.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpipe.config import TYPED_LAYERWISE_MODELS  # sage, rgcn
from gnnpipe.io.temps import scratch_or_memory
from gnnpipe.runtime.progress import progress
from gnnpipe.runtime.resources import large_blocks_mapped, release_memory
from gnnpipe.training.distributed import SINGLE, DistContext
from gnnpipe.training.embeddings import input_table
from gnnpipe.data.graph import EDGE, NODE, Csr, EdgeType, edge_type_name
from gnnpipe.training.models import FeatureMLP, SepConv, finish_layer, forward_with_hidden

# A full forward whose per-layer messages (num_edges x max(in_dim, hidden) float32) pass 1 GiB
# goes layer-wise under train.inference.mode=auto; the default 20k-node graph is ~50x below.
AUTO_MESSAGE_FLOATS = 2**28
AUTO_MODELS = ("gcn", "sage", "gat", "sep", "rgcn")  # message-passing models auto may block
BLOCK_CONVS = (GCNConv, SAGEConv, GATConv, SepConv)
# Row-wise maps (GCN's lin over every node) run this many rows at a time: ~32 MB at 128 floats.
ROW_STEP = 1 << 16
# Gathered blocks kept between layers and calls up to this many bytes (a constant, not a share of
# the graph's edges); blocks past it are gathered again when read (the same ids either way).
GATHER_CACHE_BYTES = 256 << 20


def _table(rows: int, width: int) -> torch.Tensor:
    """An uninitialised float32 (rows, width) table of per-node rows: the pages of a mapped
    scratch file beside the stage's outputs (``scratch_or_memory``), anonymous memory outside a
    stage."""
    return torch.from_numpy(scratch_or_memory((rows, width), np.float32))


def csr_view(csr: Csr) -> tuple[dict[EdgeType, Csr], dict[str, int]]:
    """A homogeneous CSR as a typed graph: ``({EDGE: csr}, {NODE: N})``."""
    return {EDGE: csr}, {NODE: csr.num_nodes}


# --------------------------------------------------------------------------------- row blocks
def cost_prefix(csrs: list[Csr], num_rows: int) -> torch.Tensor:
    """Work up to each row of one destination type, int64 (num_rows + 1,): its in-edges summed
    over ``csrs`` (the edge types into it) plus one per row (isolated rows cost too). Inside a
    stage a mapped scratch table (``scratch_or_memory``), filled ``ROW_STEP`` rows at a time."""
    prefix = torch.from_numpy(scratch_or_memory((num_rows + 1,), np.int64))
    for a in range(0, num_rows + 1, ROW_STEP):
        b = min(a + ROW_STEP, num_rows + 1)
        block = prefix[a:b]
        torch.arange(a, b, dtype=torch.int64, out=block)
        for csr in csrs:
            block += csr.indptr[a:b]
    return prefix


def rank_rows(prefix: torch.Tensor, ctx: DistContext) -> tuple[int, int]:
    """This rank's contiguous rows ``[lo, hi)``: an equal share of ``prefix``'s edges + rows."""
    if ctx.world_size == 1:
        return 0, prefix.numel() - 1
    total = int(prefix[-1])
    cuts = torch.tensor([total * r // ctx.world_size for r in (ctx.rank, ctx.rank + 1)])
    lo, hi = torch.searchsorted(prefix, cuts).tolist()  # every row costs >= 1: prefix rises
    return lo, hi


def row_blocks(prefix: torch.Tensor, block_cost: int, lo: int = 0, hi: int | None = None
               ) -> list[tuple[int, int]]:
    """Consecutive row ranges ``[start, stop)`` tiling ``[lo, hi)``, each costing at most
    ``block_cost`` by ``prefix`` (``cost_prefix``); a row costing more is a block of its own."""
    hi = prefix.numel() - 1 if hi is None else hi
    bounds, start = [], lo
    while start < hi:  # one step per block, not per node
        stop = int(torch.searchsorted(prefix, prefix[start] + block_cost, right=True)) - 1
        stop = min(max(stop, start + 1), hi)
        bounds.append((start, stop))
        start = stop
    return bounds


def block_edges(csr: Csr, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The in-edges of rows ``[start, stop)``, in CSR order: sources (E_b,) (global ids of the
    source type, a view of ``csr.indices``) and destinations (E_b,) local to the block."""
    indptr = csr.indptr
    e0, e1 = int(indptr[start]), int(indptr[stop])
    counts = indptr[start + 1:stop + 1] - indptr[start:stop]
    return csr.indices[e0:e1], torch.repeat_interleave(torch.arange(stop - start), counts)


@dataclass(frozen=True)
class Block:
    """Rows ``[start, stop)`` of a CSR whose sources are its rows' type, with every in-edge, in
    local ids.

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


def gather_block(csr: Csr, start: int, stop: int) -> Block:
    """The ``Block`` of rows ``[start, stop)``, from the block's edges alone (no per-node
    table: memory in the block's edges, whatever the graph's size)."""
    src, dst = block_edges(csr, start, stop)  # (E_b,) global sources, grouped by target
    src = src.long()
    inside = (src >= start) & (src < stop)
    others = torch.unique(src[~inside])  # (S,) distinct outside sources, ascending
    n_id = torch.cat([torch.arange(start, stop, dtype=torch.int64), others])
    # global -> local: a row of the block is itself less start, another source follows them
    local = torch.where(inside, src - start, torch.searchsorted(others, src) + (stop - start))
    return Block(start, stop, n_id, torch.stack([local, dst]))


def gcn_inv_sqrt_degree(csr: Csr, fill: float = 1.0, chunk_edges: int = 1 << 22) -> torch.Tensor:
    """(d_i + fill)^-1/2 for every node, float32 (N,), d_i = in-edges of i that are not loops.

    What ``gcn_norm`` computes on the whole graph: it drops stored self-loops and adds one loop
    of weight ``fill`` (2 for ``improved``) per node. Computed in row chunks of at most
    ``chunk_edges`` edges: the output is the one per-node table.
    """
    out = torch.empty(csr.num_nodes, dtype=torch.float32)
    indptr, step = csr.indptr, max(1, chunk_edges)
    start = 0
    while start < csr.num_nodes:  # chunks of about chunk_edges edges, one searchsorted each
        stop = int(torch.searchsorted(indptr, indptr[start] + step, right=True)) - 1
        stop = min(max(stop, start + 1), csr.num_nodes)
        src, dst = block_edges(csr, start, stop)
        loops = torch.bincount(dst[src == dst + start], minlength=stop - start)
        degree = indptr[start + 1:stop + 1] - indptr[start:stop] - loops
        out[start:stop] = (degree.to(torch.float32) + fill).pow(-0.5)
        start = stop
    return out


# ------------------------------------------------------------------------------------- engine
class WeightMemo:
    """The last evaluation's output, reused while the model's weights, the input and the world
    size are unchanged (the loop evaluates val and test on the same weights)."""

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
    """Layer-wise outputs of a model on one message graph, memoised on the weights.

    ``graph``: edge type -> CSR (rows: destination nodes, indices: source ids); ``num_nodes``:
    node type -> rows (a homogeneous graph: ``csr_view(csr)``). Phases that share a graph share
    one object; as long as the model's parameters and buffers are equal to the last call's
    (train and val accuracy of one epoch, the final predictions of the best epoch), the last
    output is returned without recomputing.
    """

    def __init__(self, graph: dict[EdgeType, Csr], num_nodes: dict[str, int], block_edges: int,
                 aligned: bool = False, reuse: bool = True):
        self.graph, self.num_nodes, self.block_edges = graph, dict(num_nodes), block_edges
        # aligned: under DDP each rank takes whole blocks of the one-process cut, so every row
        # is computed in the same block as by one process (bit-identical outputs: predict)
        self.aligned = aligned
        # reuse: later calls may read the gathered blocks again (train evaluates every epoch);
        # False (predict's one call): blocks are kept only while a later layer of the call
        # gathers, and dropped when it ends
        self.reuse = reuse
        self._keep = True  # whether gather() caches now (set per layer by the caller)
        self.into = {t: [e for e in graph if e[2] == t] for t in self.num_nodes}  # in-edge types
        self._prefix: dict[str, torch.Tensor] = {}
        self._blocks: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
        # (edge type, start, stop) -> (n_id, int32 edge_index): about 8 bytes per edge plus 8
        # per n_id entry; later layers and calls skip rebuilding them (~15% of a layer,
        # measured), up to GATHER_CACHE_BYTES
        self._gathered: dict[tuple[EdgeType, int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self._cached_bytes = 0
        self._builds = 0
        self._inv_sqrt: dict[tuple[EdgeType, float], torch.Tensor] = {}
        self._memo = WeightMemo()

    def cost(self, node_type: str) -> torch.Tensor:
        """``cost_prefix`` of ``node_type``'s rows over the edge types into it (cached)."""
        if node_type not in self._prefix:
            self._prefix[node_type] = cost_prefix([self.graph[e] for e in self.into[node_type]],
                                                  self.num_nodes[node_type])
        return self._prefix[node_type]

    def blocks(self, node_type: str, ctx: DistContext = SINGLE) -> list[tuple[int, int]]:
        """This rank's row blocks ``[(start, stop), ...]`` of ``node_type`` (all of them
        outside DDP), cached."""
        prefix = self.cost(node_type)
        lo, hi = rank_rows(prefix, ctx)
        if self.aligned and ctx.world_size > 1:
            lo, hi = self._snap(node_type, lo, hi)
        if (node_type, lo, hi) not in self._blocks:
            self._blocks[node_type, lo, hi] = row_blocks(prefix, self.block_edges, lo, hi)
        return self._blocks[node_type, lo, hi]

    def _snap(self, node_type: str, lo: int, hi: int) -> tuple[int, int]:
        """``[lo, hi)`` moved to the first block start of the one-process cut at or after each
        end (a greedy cut from a block start repeats that cut, so the rank's blocks are those)."""
        bounds = self.blocks(node_type)
        starts = torch.tensor([b[0] for b in bounds] + [self.num_nodes[node_type]])
        lo, hi = starts[torch.searchsorted(starts, torch.tensor([lo, hi]))].tolist()
        return lo, hi

    def gather(self, edge_type: EdgeType, start: int, stop: int) -> Block:
        """The ``Block`` of rows ``[start, stop)`` of ``edge_type`` (sources of the rows' type),
        cached after the first build while the cache holds under ``GATHER_CACHE_BYTES``."""
        key = (edge_type, start, stop)
        if key in self._gathered:
            n_id, edge_index = self._gathered[key]
            return Block(start, stop, n_id, edge_index.long())
        block = gather_block(self.graph[edge_type], start, stop)
        self._builds += 1
        nbytes = block.n_id.numel() * 8 + block.edge_index.numel() * 4
        if self._keep and self._cached_bytes + nbytes <= GATHER_CACHE_BYTES:
            self._gathered[key] = (block.n_id, block.edge_index.int())
            self._cached_bytes += nbytes
        return block

    def keep_gathered(self, later: bool) -> None:
        """Whether the blocks gathered from now on are cached: when a later call may read them
        (``reuse``) or ``later``, a later layer of this call gathers."""
        self._keep = self.reuse or later

    def end_call(self) -> None:
        """One call is done: without ``reuse`` nothing reads its gathered blocks again."""
        if not self.reuse:
            self._gathered.clear()
            self._cached_bytes = 0

    @property
    def cached_bytes(self) -> int:
        """Bytes of the gathered blocks kept now (at most ``GATHER_CACHE_BYTES``)."""
        return self._cached_bytes

    @property
    def num_gathered(self) -> int:
        """Blocks gathered into local ids so far, cached or not (GCN and mean SAGE never
        gather)."""
        return self._builds

    def inv_sqrt_degree(self, edge_type: EdgeType, fill: float) -> torch.Tensor:
        """``gcn_inv_sqrt_degree`` of ``edge_type``'s CSR (cached)."""
        if (edge_type, fill) not in self._inv_sqrt:
            self._inv_sqrt[edge_type, fill] = gcn_inv_sqrt_degree(self.graph[edge_type], fill)
        return self._inv_sqrt[edge_type, fill]

    @torch.no_grad()
    def __call__(self, model: nn.Module, x, ctx: DistContext = SINGLE) -> torch.Tensor:
        """What ``model`` returns in eval mode on the whole graph (``layerwise_logits``)."""
        return self._memo.get(model, x, ctx, lambda: layerwise_logits(model, x, self, ctx))


def plan(graph: dict[EdgeType, Csr], num_nodes: dict[str, int], in_dim: int,
         cfg, world_size: int = 1) -> LayerwiseInference | None:
    """The layer-wise engine for a phase graph if ``cfg.inference.mode`` (TrainParams) asks
    for one, else None (a full forward; also for a ``cfg`` without an inference section).
    ``auto``: layer-wise for ``AUTO_MODELS`` once a full forward's per-layer messages, all edge
    types' edges x max(in_dim, hidden) floats, pass ``AUTO_MESSAGE_FLOATS``, and always when
    ``world_size`` > 1 DDP ranks share the graph's blocks: a whole-graph forward would run on
    every rank, each holding every edge's messages (2M nodes: 1.43 GiB a rank against 0.58,
    bench/rank_memory.py), where the engine gives each rank its share of the blocks. A rank
    evaluating only its own graph (a partition shard) passes 1."""
    inference = getattr(cfg, "inference", None)
    mode = "full" if inference is None else inference.mode
    if mode == "full":
        return None
    edges = sum(csr.num_edges for csr in graph.values())
    if mode == "auto" and (cfg.model not in AUTO_MODELS or (
            world_size <= 1 and edges * max(in_dim, cfg.hidden) <= AUTO_MESSAGE_FLOATS)):
        return None
    return LayerwiseInference(graph, num_nodes, inference.block_edges)


# ---------------------------------------------------------------------------- the layer loop
def _all_rows(mine: torch.Tensor, ctx: DistContext, num_rows: int) -> torch.Tensor:
    """Every rank's contiguous rows (M_r, C), concatenated in rank order: (num_rows, C), a
    ``_table``. Each rank's share is broadcast into every rank's table ``ROW_STEP`` rows at a
    time, so no rank holds a second copy of the layer in memory."""
    if ctx.world_size == 1:
        return mine
    sizes = torch.zeros(ctx.world_size, dtype=torch.int64)
    sizes[ctx.rank] = mine.shape[0]
    dist.all_reduce(sizes)
    assert int(sizes.sum()) == num_rows, "ranks' target rows must tile the graph"
    out = _table(num_rows, mine.shape[1])
    starts = [0] + sizes.cumsum(0).tolist()[:-1]
    for rank, (start, size) in enumerate(zip(starts, sizes.tolist())):
        if rank == ctx.rank:
            out[start:start + size] = mine
        for a in range(start, start + size, ROW_STEP):
            dist.broadcast(out[a:min(a + ROW_STEP, start + size)], src=rank)
    return out


def _layer(engine: LayerwiseInference, ctx: DistContext, widths: dict[str, int], rows
           ) -> dict[str, torch.Tensor]:
    """One layer: for each node type ``t`` of ``widths``, ``rows(t, start, stop)`` (B, width)
    of this rank's blocks of ``t`` filled into one table, then all ranks' rows: type ->
    (N_t, width). The table is allocated once; a rank without rows still sends its width."""
    out = {}
    for node_type, width in widths.items():
        bounds = engine.blocks(node_type, ctx)
        lo, hi = (bounds[0][0], bounds[-1][1]) if bounds else (0, 0)  # this rank's rows
        mine = _table(hi - lo, width)
        # a line every 30 s off a terminal: a layer over a big graph takes minutes
        blocks = (progress(bounds, unit=" blocks", desc=f"layer-wise inference ({node_type})")
                  if ctx.is_main and len(bounds) > 1 else bounds)
        for start, stop in blocks:
            mine[start - lo:stop - lo] = rows(node_type, start, stop)
        out[node_type] = _all_rows(mine, ctx, engine.num_nodes[node_type])
        del mine
    return out


# ----------------------------------------------------------------------------- rows per conv
def _adjacency_rows(csr: Csr, start: int, stop: int, num_cols: int,
                    values: torch.Tensor | None = None) -> torch.Tensor:
    """Rows ``[start, stop)`` of the adjacency, sparse CSR float32 (B, num_cols): row = target,
    column = source id (a view of ``csr.indices``, no copy); ``values`` (E_b,), ones without."""
    e0, e1 = int(csr.indptr[start]), int(csr.indptr[stop])
    col = csr.indices[e0:e1]
    crow = (csr.indptr[start:stop + 1] - e0).to(col.dtype)
    if values is None:
        values = torch.ones(e1 - e0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta state"
        return torch.sparse_csr_tensor(crow, col, values, size=(stop - start, num_cols),
                                       check_invariants=False)


def _is_mean_sage(conv: nn.Module) -> bool:
    """A SAGEConv whose aggregation ``_sage_rows`` computes (gnnpipe builds only these)."""
    return isinstance(conv, SAGEConv) and conv.aggr == "mean" and not conv.project


def _mean_rows(src: torch.Tensor, csr: Csr, start: int, stop: int) -> torch.Tensor:
    """The in-neighbour mean of targets ``[start, stop)`` over the whole source table ``src``
    (N_src, F): (B, F), one sparse-dense product, never a per-edge message tensor; a row
    without in-edges gets 0 (PyG's mean: sum / max(n, 1))."""
    total = torch.sparse.mm(_adjacency_rows(csr, start, stop, src.shape[0]), src)
    count = (csr.indptr[start + 1:stop + 1] - csr.indptr[start:stop]).clamp(min=1)
    return total / count.unsqueeze(1).to(total.dtype)


def _sage_rows(conv: SAGEConv, src: torch.Tensor, dst: torch.Tensor, csr: Csr, start: int,
               stop: int, projected: bool = False) -> torch.Tensor:
    """``conv`` on targets ``[start, stop)`` (B, out) from the whole source table ``src``
    (N_src, F) and the targets' own rows ``dst`` (B, F), float32 (``_mean_rows``).
    ``projected``: ``src`` holds every row through ``lin_l`` without its bias (N_src, out); the
    mean of projected rows is the projection of the mean (``lin_l`` is linear; a row without
    in-edges gets the bias alone, as PyG's 0-mean does), equal up to float rounding."""
    mean = _mean_rows(src, csr, start, stop)
    if not projected:
        out = conv.lin_l(mean)
    else:
        out = mean if conv.lin_l.bias is None else mean + conv.lin_l.bias
    if conv.root_weight:
        out = out + conv.lin_r(dst)
    if conv.normalize:
        out = torch.nn.functional.normalize(out, p=2.0, dim=-1)
    return out


def _sep_rows(conv: SepConv, znbr: torch.Tensor, dst: torch.Tensor, csr: Csr, start: int,
              stop: int) -> torch.Tensor:
    """``conv`` on targets ``[start, stop)`` (B, out) from ``znbr``, every node's rows through
    the neighbour weights without bias (N, out - out // 2), and the targets' own rows ``dst``
    (B, F): ``[ego | neighbour mean + bias]`` as ``SepConv.forward``."""
    nbr = _mean_rows(znbr, csr, start, stop) + conv.lin_nbr.bias
    return torch.cat([conv.lin_ego(dst), nbr], dim=-1)


def _gcn_rows(conv: GCNConv, xlin: torch.Tensor, csr: Csr, start: int, stop: int,
              inv_sqrt: torch.Tensor, fill: float) -> torch.Tensor:
    """``conv`` on targets ``[start, stop)`` (B, out) from ``xlin`` = ``conv.lin`` of every node
    (N, out), weighted D^-1/2 (A + I) D^-1/2 of the whole graph as ``gcn_norm``: stored loops
    weigh 0, the one added loop per target weighs ``fill * d_i^-1``."""
    src, dst = block_edges(csr, start, stop)
    dst = dst + start
    weight = inv_sqrt[src] * inv_sqrt[dst]  # (E_b,): gcn_norm's dis[row] * w * dis[col]
    weight[src == dst] = 0.0
    out = torch.sparse.mm(_adjacency_rows(csr, start, stop, xlin.shape[0], weight), xlin)
    targets = inv_sqrt[start:stop]
    out = out + (targets * fill * targets).unsqueeze(1) * xlin[start:stop]
    return out + conv.bias if conv.bias is not None else out


def _row_map(fn, h, width: int, step: int = ROW_STEP) -> torch.Tensor:
    """``fn`` applied to every row of ``h`` (N, F) in row blocks, into one (N, width) table."""
    out = _table(h.shape[0], width)
    for a in range(0, h.shape[0], step):
        out[a:a + step] = fn(h[a:a + step].float())
    return out


# ------------------------------------------------------------------------------------- models
def check_supported(model: nn.Module, typed: bool = False) -> None:
    """Raise ValueError unless ``layerwise_logits`` reproduces ``model``'s forward (``typed``:
    a typed model, called on a dict of features)."""
    if typed:
        if getattr(model, "name", None) not in TYPED_LAYERWISE_MODELS:
            raise ValueError(f"train.inference.mode='layerwise' evaluates typed "
                             f"{' and '.join(TYPED_LAYERWISE_MODELS)} models, not "
                             f"train.model={getattr(model, 'name', type(model).__name__)!r}")
        return
    if isinstance(model, FeatureMLP):
        return
    if not isinstance(model, BasicGNN) or not all(isinstance(c, BLOCK_CONVS) for c in model.convs):
        raise ValueError(f"train.inference.mode=layerwise supports gnnpipe's mlp, gcn, sage, gat "
                         f"and sep, not {type(model).__name__}; set train.inference.mode: full")
    if model.supports_norm_batch:
        raise ValueError("train.inference.mode=layerwise cannot run graph-wise norms per block; "
                         "set train.inference.mode: full")
    for conv in model.convs:
        # improved: PyG drops its loop weight 2 without edge weights; blocks would apply it
        if isinstance(conv, GCNConv) and (conv.improved or not (conv.normalize
                                                               and conv.add_self_loops)):
            raise ValueError("train.inference.mode=layerwise expects GCNConv with its default "
                             "normalisation; set train.inference.mode: full")


@torch.no_grad()
def layerwise_logits(model: nn.Module, x, engine: LayerwiseInference,
                     ctx: DistContext = SINGLE, with_hidden: bool = False):
    """``model``'s eval-mode output on ``engine.graph``, computed one layer and one block of
    destination rows at a time; under DDP every rank computes its share of the blocks and ends
    with all rows.

    Homogeneous models (mlp, gcn, sage, gat, sep on ``csr_view`` graphs): ``x`` (N, F), logits
    (N, C). Typed models (sage, rgcn; ``gnnpipe.hetero.models``): ``x`` type -> (N_t, F_t),
    what ``model(x, edge_index_dict)`` returns (the target's rows, or all types' for
    ``out="all"``).

    ``with_hidden``: ``(output, hidden)``, hidden the input of the model's last layer as the
    model's ``forward_with_hidden`` defines it ((N, H), or type -> (N_t, H) for typed models),
    captured on the way at no extra pass."""
    typed = isinstance(x, dict)
    check_supported(model, typed)
    release_memory()  # the epoch's freed batches: give them back before the blocks allocate
    was_training = model.training
    model.eval()
    try:
        with large_blocks_mapped():  # each block's temporaries leave no heap behind
            x = input_table(model, x)  # learnt node embeddings (train.embeddings) join x
            if typed:
                run = _typed_sage if model.name == "sage" else _rgcn
            else:
                run = _mlp if isinstance(model, FeatureMLP) else _basic_gnn
            return run(model, x, engine, ctx, with_hidden)
    finally:
        model.train(was_training)


def _mlp(model: FeatureMLP, x, engine: LayerwiseInference, ctx: DistContext,
         with_hidden: bool):
    """No edges: row blocks of ``block_edges`` rows (identical on every rank), each written
    into the output tables as it comes."""
    (num_nodes,) = engine.num_nodes.values()
    step = engine.block_edges
    out = hidden = None
    for a in range(0, num_nodes, step):
        rows = x[a:a + step].float()
        got = forward_with_hidden(model, rows) if with_hidden else (model(rows), None)
        if out is None:  # widths are known once a block ran
            out = _table(num_nodes, got[0].shape[1])
            hidden = None if got[1] is None else _table(num_nodes, got[1].shape[1])
        out[a:a + rows.shape[0]] = got[0]
        if hidden is not None:
            hidden[a:a + rows.shape[0]] = got[1]
    if out is None:  # no rows: the widths of an empty forward, as torch.cat of none gave
        got = forward_with_hidden(model, x[:0].float()) if with_hidden else (model(x[:0].float()),)
        out, hidden = got[0], (got[1] if with_hidden else None)
    return (out, hidden) if with_hidden else out


def _conv_rows(conv: nn.Module, h, engine: LayerwiseInference):
    """``(start, stop) -> conv output (B, out)`` of a homogeneous layer reading table ``h``."""
    (edge_type,) = engine.graph
    csr = engine.graph[edge_type]
    if isinstance(conv, GCNConv):
        fill = 2.0 if conv.improved else 1.0
        inv_sqrt = engine.inv_sqrt_degree(edge_type, fill)
        xlin = _row_map(conv.lin, h, conv.out_channels)  # the full forward's lin, once
        return lambda a, b: _gcn_rows(conv, xlin, csr, a, b, inv_sqrt, fill)
    if isinstance(conv, SepConv):  # the forward's narrow projection, once over every row
        znbr = _row_map(lambda r: torch.nn.functional.linear(r, conv.lin_nbr.weight), h,
                        conv.lin_nbr.out_features)
        return lambda a, b: _sep_rows(conv, znbr, h[a:b].float(), csr, a, b)
    if _projects_first(conv, h):  # one sequential pass over the features, no block gathers
        zl = _row_map(lambda r: torch.nn.functional.linear(r, conv.lin_l.weight), h,
                      conv.out_channels)
        return lambda a, b: _sage_rows(conv, zl, h[a:b].float(), csr, a, b, projected=True)
    if not _gathers(conv, h):  # mean SAGE on a table: one sparse-dense product per block
        table = h if h.dtype == torch.float32 else h.float()
        return lambda a, b: _sage_rows(conv, table, table[a:b], csr, a, b)

    def gathered(a: int, b: int) -> torch.Tensor:  # bipartite: sources -> the B targets
        block = engine.gather(edge_type, a, b)
        xb = h[block.n_id].float()  # (B + S, width): targets first (GAT adds loops on those)
        return conv((xb, xb[:block.batch_size]), block.edge_index)
    return gathered


def _projects_first(conv: nn.Module, h) -> bool:
    """Whether ``conv`` is mean SAGE narrowing features read per batch (``h`` not a tensor):
    its ``lin_l`` projection of every row, one sequential read, then the table path. Gathering
    each block's source rows instead read a row per distinct source of every block (about 16
    reads a node at 20 edges a node) and held the block's E_b x F messages (1 GiB at 2M edges
    and 128 features)."""
    return (_is_mean_sage(conv) and not isinstance(h, torch.Tensor)
            and conv.out_channels < conv.lin_l.in_channels)


def _gathers(conv: nn.Module, h) -> bool:
    """Whether ``_conv_rows`` gathers each block of ``conv``'s layer into local ids (GAT, other
    SAGE aggregations, mean SAGE widening features read per batch) rather than reading whole
    tables (GCN, sep, mean SAGE over a table or narrowing features read per batch)."""
    if isinstance(conv, (GCNConv, SepConv)) or _projects_first(conv, h):
        return False
    return not (_is_mean_sage(conv) and isinstance(h, torch.Tensor))


def _basic_gnn(model: BasicGNN, x, engine: LayerwiseInference, ctx: DistContext,
               with_hidden: bool):
    """gcn, sage, gat, sep: each conv's rows, then ``finish_layer``; jk and the linear head
    over row blocks at the end (``jk="last"``, sep's head: on the last layer's table).

    Memory: the previous table is dropped once the next exists (unless it is ``hidden`` or jk
    keeps it); GCN, mean SAGE and sep make no (B + S, F) gather and no E_b x F messages."""
    (node_type,) = engine.num_nodes
    num_nodes = engine.num_nodes[node_type]
    jk, head = hasattr(model, "jk"), hasattr(model, "lin")
    h, tables, hidden = x, [], None
    # layers after the first read tables (tensors): whether each gathers is known up front
    gathers = [_gathers(conv, x if layer == 0 else torch.empty(0))
               for layer, conv in enumerate(model.convs)]
    for layer, conv in enumerate(model.convs):
        if layer == model.num_layers - 1 and not head:
            hidden = h  # (N, width): what the last conv reads
        engine.keep_gathered(any(gathers[layer + 1:]))
        rows = _conv_rows(conv, h, engine)

        def finished(_, a, b, layer=layer, rows=rows, h=h):
            return finish_layer(model, layer, rows(a, b), h[a:b].float())
        h = _layer(engine, ctx, {node_type: _width(model, layer)}, finished)[node_type]
        del rows, finished  # the layer's scratch (GCN's lin table) goes before the next table
        if jk:
            tables.append(h)
    engine.end_call()
    if not head:
        return (h, hidden.float()) if with_hidden else h
    tables = tables if jk else [h]
    combine = model.jk if jk else (lambda ts: ts[-1])
    h = None
    step = engine.block_edges  # jk and its linear map are row-wise: row blocks
    logits = _table(num_nodes, model.lin.out_features)
    jks = None
    for a in range(0, num_nodes, step):
        z = combine([t[a:a + step] for t in tables])
        logits[a:a + z.shape[0]] = model.lin(z)
        if with_hidden:
            if jks is None:
                jks = _table(num_nodes, z.shape[1])
            jks[a:a + z.shape[0]] = z
    if with_hidden and jks is None:  # no rows at all
        jks = torch.empty(0, model.lin.in_features)
    return (logits, jks) if with_hidden else logits


def _width(model: BasicGNN, layer: int) -> int:
    """Output channels of conv ``layer``."""
    conv = model.convs[layer]
    heads = getattr(conv, "heads", 1) if getattr(conv, "concat", False) else 1
    return conv.out_channels * heads


def _input_rows(model: nn.Module, x: dict[str, torch.Tensor]) -> dict:
    """ReLU of a typed model's per-type input maps, (N_t, hidden) per type, in blocks of
    ``ROW_STEP`` rows (a (ROW_STEP, hidden) map is the one temporary, not (N_t, hidden))."""
    out, step = {}, ROW_STEP
    for t, lin in zip(model.inputs.types, model.inputs.maps):
        rows = x[t]
        out[t] = _table(rows.shape[0], lin.out_features)
        for a in range(0, rows.shape[0], step):
            out[t][a:a + step] = lin(rows[a:a + step].float()).relu_()
    return out


def _typed_sage(model: nn.Module, x: dict[str, torch.Tensor], engine: LayerwiseInference,
                ctx: DistContext, with_hidden: bool):
    """``to_hetero(GraphSAGE)``: per destination type, each in-edge type's conv summed in
    edge-type order (types without in-edges drop out, as in to_hetero), ReLU between layers."""
    h = _input_rows(model, x)
    convs = model.body.convs
    hidden = h
    for layer, layer_convs in enumerate(convs):
        if layer == len(convs) - 1:
            hidden = h  # what the last layer reads
        width = next(iter(layer_convs.values())).out_channels

        def rows(d, a, b, layer_convs=layer_convs, h=h):
            acc = None
            for e in engine.into[d]:
                if e[0] in h:
                    conv = layer_convs[edge_type_name(e)]
                    assert _is_mean_sage(conv), "gnnpipe's typed sage is mean SAGEConv"
                    y = _sage_rows(conv, h[e[0]], h[d][a:b], engine.graph[e], a, b)
                    # to_hetero sums in edge-type order; in place: no third (B, C) block
                    acc = y if acc is None else acc.add_(y)
            return acc
        last = layer == len(convs) - 1
        # the last layer computes only the rows model.select returns: a (N_t, C) table and
        # (B, C) block temporaries per other type are never read
        h = _layer(engine, ctx, {d: width for d, into in engine.into.items() if into and d in h
                                 and not (last and model.out == "target" and d != model.target)},
                   rows)
        if not last:  # GraphSAGE: act (dropout: eval) between layers
            h = {t: v.relu_() for t, v in h.items()}  # in place: no second table
    return (model.select(h), hidden) if with_hidden else model.select(h)


def _rgcn(model: nn.Module, x: dict[str, torch.Tensor], engine: LayerwiseInference,
          ctx: DistContext, with_hidden: bool):
    """R-GCN on the homogeneous view (types concatenated in ``model.node_types`` order): per
    destination type and block, every in-edge (source offset by its type's start, relation =
    edge type index), ReLU before every conv (the forward's order)."""
    h = _input_rows(model, x)
    types = model.node_types
    sizes = [h[t].shape[0] for t in types]
    start_of = dict(zip(types, torch.tensor([0] + sizes[:-1]).cumsum(0).tolist()))
    relation = {e: i for i, e in enumerate(model.edge_types)}
    z, hidden = _cat_rows([h[t] for t in types]), None
    for i, conv in enumerate(model.convs):
        hidden = _table(*z.shape)  # after the loop: what the last conv read
        for a in range(0, z.shape[0], ROW_STEP):
            hidden[a:a + ROW_STEP] = z[a:a + ROW_STEP]
            hidden[a:a + ROW_STEP].relu_()

        def rows(d, a, b, conv=conv, view=hidden):
            srcs, dsts, rels = [], [], []
            for e in model.edge_types:
                if e[2] == d:
                    src, dst = block_edges(engine.graph[e], a, b)
                    srcs.append(src + start_of[e[0]])
                    dsts.append(dst)
                    rels.append(torch.full((src.numel(),), relation[e], dtype=torch.int64))
            ei = torch.stack([torch.cat(srcs), torch.cat(dsts)]) if srcs else torch.empty(
                2, 0, dtype=torch.int64)
            rel = torch.cat(rels) if rels else torch.empty(0, dtype=torch.int64)
            return conv((view, view[start_of[d] + a:start_of[d] + b]), ei, rel)
        if i == len(model.convs) - 1 and model.out == "target":
            # the last conv computes only the rows model.select returns: no (N_t, C) table
            # and (B, C) blocks of the other types
            out = _layer(engine, ctx, {model.target: conv.out_channels}, rows)[model.target]
            return (out, dict(zip(types, hidden.split(sizes)))) if with_hidden else out
        z = _cat_rows(list(_layer(engine, ctx, {t: conv.out_channels for t in types},
                                  rows).values()))
    out = model.select(dict(zip(types, z.split(sizes))))
    return (out, dict(zip(types, hidden.split(sizes)))) if with_hidden else out


def _cat_rows(tables: list[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(tables)`` of (N_i, W) tables into one ``_table``."""
    return torch.cat(tables, out=_table(sum(t.shape[0] for t in tables), tables[0].shape[1]))
