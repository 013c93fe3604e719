"""Node classifiers behind one call signature: ``model(x, edge_index) -> logits (N, C)``;
on typed graphs ``model(x_dict, edge_index_dict)`` (``TypedModel``).

The GNNs are PyG's own ``GCN`` / ``GraphSAGE`` / ``GAT``, and ``sep`` (``SepGNN``, a PyG
``BasicGNN`` too: ego / neighbour separation for heterophilous graphs, docs/models.md); ``mlp``
ignores the edges (the honest structure-free baseline); ``sign`` takes the precomputed hops
concatenated along features.
``train.residual`` swaps in subclasses of the same PyG models (same parameters and state_dict
keys) whose hidden layers add their input back: ``h_{i+1} = dropout(act(conv_i(h_i))) + h_i``.

Every graph model also takes a sampled batch's per-hop counts, as PyG's ``BasicGNN`` does
(``num_sampled_nodes_per_hop`` / ``num_sampled_edges_per_hop``, ``trim_to_layer``): layer ``i``
reads only the nodes and edges that later layers still need, so the seeds' logits are those of
the untrimmed forward. Beyond PyG: GCN is normalised once on the whole sampled subgraph (PyG's
trim would renormalise on the trimmed one and change the seeds' logits), and jk / residual cut
the layer outputs to common rows. ``aggregation = "csr"`` (gcn, sage) aggregates by a sparse
CSR product over target rows (``adj_t``) instead of gathering and scattering per-edge messages.

Typed graphs: every ``TypedModel`` maps each node type's features to ``hidden`` with its own
linear layer (types have different widths, and venues may carry no signal at all); ``mlp``
(``TypedMLP``) then runs one MLP on every type's rows, no edges (the structure-free baseline).
The models that pass messages between several types (to_hetero SAGE, HGT, R-GCN) are
``gnnpipe.hetero.models``.
"""

from __future__ import annotations

import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GCNConv, MessagePassing, SAGEConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.nn.models import GAT, GCN, GraphSAGE
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpipe.config import FitParams, TrainParams
from gnnpipe.data.graph import EdgeType
from gnnpipe.training.embeddings import attach, input_rows, node_inputs
from gnnpipe.training.mlp import MLP, FeatureMLP  # PyG's MLP in torch alone (the baseline's)

Metadata = tuple[list[str], list[EdgeType]]



def finish_layer(model: BasicGNN, layer: int, h: torch.Tensor, prev: torch.Tensor,
                 fast_dropout: bool = False) -> torch.Tensor:
    """What follows conv ``layer`` in ``model``'s forward: ``h`` (M, H) is the conv output and
    ``prev`` (M, H_in) its input rows, the same nodes in the same order.

    Hidden layers (and every layer under jk) get activation, norm and dropout as in PyG's
    ``BasicGNN.forward``; a residual model then adds ``prev`` from the second layer on (the
    first layer's input is the raw features, the last layer without jk writes the classes).
    Shared by the models' forward and the layer-wise inference (gnnpipe/training/inference.py), so
    both compute the same thing. ``fast_dropout`` (training only) draws the mask by ``dropout``
    instead of ``nn.Dropout``: the same distribution, another random stream.
    """
    last = layer == model.num_layers - 1
    if last and model.jk_mode is None:
        return h
    if model.act is not None and model.act_first:
        h = model.act(h)
    h = model.norms[layer](h)  # Identity, or sep's per-node LayerNorm (never batch-wise)
    if model.act is not None and not model.act_first:
        h = model.act(h)
    h = dropout(h, model.dropout.p) if fast_dropout and model.training else model.dropout(h)
    if getattr(model, "residual", False) and layer > 0 and h.shape == prev.shape:
        h = h + prev
    return h


def dropout(h: torch.Tensor, p: float) -> torch.Tensor:
    """Inverted dropout of ``h`` (any shape): each entry kept with probability ``1 - p`` and
    scaled by ``1 / (1 - p)``, as ``F.dropout`` in training, with the mask drawn by
    ``torch.rand`` (float32, torch's global RNG) instead of ``bernoulli_``, whose CPU kernel
    costs ~2x more: on sampled steps it was a third of the trimmed forward."""
    if p <= 0.0:
        return h
    if p >= 1.0:
        return h * 0.0
    keep = torch.rand(h.shape, device=h.device) >= p  # P(keep) = 1 - p (to 2^-24)
    return h * keep.to(h.dtype).mul_(1.0 / (1.0 - p))


# torch warns once per process that CSR tensors are "beta"; they are what train.aggregation=csr is
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
CSR_MODELS = ("gcn", "sage")  # models whose convs aggregate by a sparse product (train.aggregation)


def _csr_rows(edge_index: torch.Tensor, values: torch.Tensor | None, num_nodes: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``rowptr`` (N+1,), source ``col`` (E,) and ``values`` (E,) with the edges grouped by
    target (``adj_t``'s rows); the samplers already emit target-sorted edges (no sort then)."""
    target = edge_index[1]
    if target.numel() > 1 and not bool((target[1:] >= target[:-1]).all()):
        order = torch.argsort(target, stable=True)  # a full-graph edge list in any order
        edge_index = edge_index[:, order]
        values = None if values is None else values[order]
        target = edge_index[1]
    rowptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=target.device)
    rowptr[1:] = torch.bincount(target, minlength=num_nodes).cumsum(0)
    return rowptr, edge_index[0], values


def _adj_t(csr: tuple, rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """The first ``rows`` target rows of ``csr`` (``_csr_rows``) over ``cols`` sources as a
    ``torch.sparse_csr`` tensor (rows, cols) of ``dtype``; unweighted edges count 1."""
    rowptr, col, values = csr
    nnz = int(rowptr[rows])
    values = torch.ones(nnz, dtype=dtype, device=col.device) if values is None else (
        values[:nnz].to(dtype))
    return torch.sparse_csr_tensor(rowptr[:rows + 1], col[:nnz], values, size=(rows, cols),
                                   check_invariants=False)  # built sorted above: no O(E) check


def _sage_csr(conv: SAGEConv, prev: torch.Tensor, n_out: int, csr: tuple) -> torch.Tensor:
    """``conv`` on the first ``n_out`` target rows of ``csr`` over sources ``prev`` (rows, F):
    (n_out, H). A mean layer that narrows enough (the last layer: 64 -> classes) projects the
    sources first, ``mean(x_j) W = mean(x_j W)``: the spmm and its backward then move H-wide
    rows instead of F-wide ones; the same up to float rounding."""
    lin, rows, nnz = conv.lin_l, prev.shape[0], int(csr[0][n_out])
    # dense MACs of projecting every source row vs the sparse row reads saved (rows = n_out
    # full-batch: any narrowing layer; a sampled hop with many more sources than targets: no)
    first = (conv.aggr == "mean" and not conv.project and not conv.normalize
             and (rows - n_out) * lin.in_channels * lin.out_channels
             < nnz * (lin.in_channels - lin.out_channels))
    if not first:
        return conv((prev, prev[:n_out]), _adj_t(csr, n_out, rows, prev.dtype))
    z = F.linear(prev, lin.weight)  # (rows, H)
    out = torch.sparse.mm(_adj_t(csr, n_out, rows, z.dtype), z, "mean")  # (n_out, H)
    out = out if lin.bias is None else out + lin.bias.to(out.dtype)  # bfloat16 under autocast
    return out + conv.lin_r(prev[:n_out]) if conv.root_weight else out


def kept_per_layer(total: int, per_hop: list[int] | None, layers: int) -> list[int]:
    """Rows (or edges) each layer 0..layers reads: ``total`` less the last ``i`` hops' counts
    (``trim_to_layer``); ``per_hop`` None keeps all of them."""
    if per_hop is None:
        return [total] * (layers + 1)
    return [total - sum(per_hop[len(per_hop) - i:]) if i else total for i in range(layers + 1)]


def sampled_forward(model: BasicGNN, x: torch.Tensor, edge_index: torch.Tensor,
                    edge_weight: torch.Tensor | None = None,
                    num_sampled_nodes_per_hop: list[int] | None = None,
                    num_sampled_edges_per_hop: list[int] | None = None) -> torch.Tensor:
    """``model``'s forward (x (N, F), edge_index (2, E)), trimmed per layer to what the later
    layers need and/or aggregated through CSR (``model.aggregation``): out (M, C), M <= N rows,
    the first ones (the seeds, hop 0) equal to the untrimmed scatter forward's.

    Trimming follows PyG's ``trim_to_layer``: nodes are stored hop by hop (counts
    ``num_sampled_nodes_per_hop``, hop 0 first) and edges too, so layer ``i`` reads the first
    ``N - sum(last i node counts)`` rows and ``E - sum(last i edge counts)`` edges. gcn and
    sage (scatter or csr) and sep then compute only the target rows the next layer reads
    (bipartite: sources ``x[:n_in]``, targets ``x[:n_out]``); gat computes every input row, as
    PyG does.
    """
    layers, csr = model.num_layers, model.aggregation == "csr"
    n_in = kept_per_layer(x.shape[0], num_sampled_nodes_per_hop, layers)
    e_in = kept_per_layer(edge_index.shape[1], num_sampled_edges_per_hop, layers)
    gcn = isinstance(model.convs[0], GCNConv)
    sage = isinstance(model.convs[0], (SAGEConv, SepConv))  # both bipartite: sources, targets
    if gcn:  # normalised once, on the whole sampled subgraph (degrees as in the untrimmed forward)
        conv = model.convs[0]
        edge_index, edge_weight = gcn_norm(edge_index, edge_weight, x.shape[0], conv.improved,
                                           conv.add_self_loops, conv.flow, x.dtype)
    adj = _csr_rows(edge_index, edge_weight if gcn else None, x.shape[0]) if csr else None
    xs, h = [], x
    for layer, conv in enumerate(model.convs):
        rows, n_out = n_in[layer], n_in[layer + 1]
        prev = h[:rows]  # (n_in, F): this layer's input rows
        if csr and gcn:  # GCNConv.forward with the normalised adjacency: lin, propagate, bias
            z = conv.lin(prev)  # (n_in, H); bfloat16 under autocast
            # reduce="sum": the row-parallel kernel (bfloat16 too, unlike MKL's CSR addmm)
            out = torch.sparse.mm(_adj_t(adj, n_out, rows, z.dtype), z, "sum")
            out = out if conv.bias is None else out + conv.bias
        elif csr:  # SAGEConv: mean of the sources by a CSR product, root weight on the targets
            out = _sage_csr(conv, prev, n_out, adj)
        elif gcn:  # the edges into the n_out target rows (their sources are input rows)
            keep = (edge_index[1] < n_out) if n_out < x.shape[0] else slice(None)
            out = conv.propagate(edge_index[:, keep], x=conv.lin(prev),
                                 edge_weight=edge_weight[keep], size=(rows, n_out))
            out = out if conv.bias is None else out + conv.bias
        elif sage:  # sage, sep: bipartite as under csr, the first e_in edges all point into
            # the n_out rows
            out = conv((prev, prev[:n_out]), edge_index[:, :e_in[layer]], size=(rows, n_out))
        else:  # gat: PyG's trim, the first e_in edges, every input row an output row
            out = conv(prev, edge_index[:, :e_in[layer]])
        # the sampled step's dropout by torch.rand (``dropout``): PyG's forward keeps nn.Dropout
        h = finish_layer(model, layer, out, prev[:out.shape[0]], fast_dropout=True)
        if hasattr(model, "jk"):
            xs.append(h)
    if hasattr(model, "jk"):  # only the rows every layer computed (the seeds among them)
        h = model.jk([t[:xs[-1].shape[0]] for t in xs])
    return model.lin(h) if hasattr(model, "lin") else h


class _Sampled:
    """Mixin over a PyG ``BasicGNN``: the forward also takes the per-hop counts of a sampled
    batch (``sampled_forward``); without them and with ``aggregation = "scatter"`` it is the
    model's own forward, bit for bit. A model with ``node_inputs`` (``train.embeddings``,
    gnnpipe/training/embeddings.py) first turns ``x`` and the batch's ``n_id`` into its input
    rows."""

    trims = True  # gnnpipe.training.models.trim_kwargs passes the counts
    aggregation = "scatter"  # scatter | csr (CSR_MODELS) | timed (resolved on the first batch)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                edge_weight: torch.Tensor | None = None,
                num_sampled_nodes_per_hop: list[int] | None = None,
                num_sampled_edges_per_hop: list[int] | None = None,
                n_id: torch.Tensor | None = None) -> torch.Tensor:
        # train.embeddings: [x | the rows' embeddings] (n_id: the batch's global ids)
        x = input_rows(self, x, n_id)
        if num_sampled_nodes_per_hop is None and self.aggregation != "csr":
            return super().forward(x, edge_index, edge_weight)
        return sampled_forward(self, x, edge_index, edge_weight, num_sampled_nodes_per_hop,
                               num_sampled_edges_per_hop)


def trim_kwargs(model: nn.Module, batch) -> dict:
    """The batch's per-hop counts as keyword arguments of ``model`` (the user's module), or
    none: the model does not trim, or the batch has no counts (induced, bidirectional, shadow,
    cluster, saint, hgt) or fewer hops than the model has layers. Typed batches count per
    node type and per edge type (dicts of lists), passed as dicts. A model with embeddings
    (``node_inputs``) also gets the batch's global node ids ``n_id`` ((n,) or type -> (n_t,))."""
    ids = ({"n_id": batch.n_id} if getattr(model, "node_inputs", None) is not None
           and getattr(batch, "n_id", None) is not None else {})
    return {**_count_kwargs(model, batch), **ids}


def _count_kwargs(model: nn.Module, batch) -> dict:
    """``trim_kwargs``' per-hop counts."""
    nodes = getattr(batch, "num_sampled_nodes", None)
    edges = getattr(batch, "num_sampled_edges", None)
    if not getattr(model, "trims", False) or nodes is None or edges is None:
        return {}
    typed = isinstance(nodes, dict)
    node_lists, edge_lists = (list(nodes.values()), list(edges.values())) if typed else (
        [nodes], [edges])
    hops = len(edge_lists[0]) if edge_lists else -1
    if hops < model.num_layers or any(len(e) != hops for e in edge_lists) or any(
            len(n) != hops + 1 for n in node_lists):
        return {}
    if typed:
        return {"num_sampled_nodes_per_hop": {t: [int(n) for n in v] for t, v in nodes.items()},
                "num_sampled_edges_per_hop": {e: [int(n) for n in v] for e, v in edges.items()}}
    return {"num_sampled_nodes_per_hop": [int(n) for n in nodes],
            "num_sampled_edges_per_hop": [int(e) for e in edges]}


def choose_aggregation(model: nn.Module, step, repeats: int = 3) -> dict[str, float]:
    """Resolve ``model.aggregation = "timed"``: time ``step()`` (a loss of one batch: forward
    and backward) with scatter and with csr, keep the faster, leave no gradients behind and
    torch's RNG untouched. Returns the best seconds of each."""
    best = {"scatter": float("inf"), "csr": float("inf")}
    with torch.random.fork_rng():
        # interleaved, best of each: a load change on a shared machine hits both alike, and
        # the first call of each (one-time allocations) does not decide
        for _ in range(repeats):
            for aggregation in best:
                model.aggregation = aggregation
                tick = time.perf_counter()
                step().backward()
                best[aggregation] = min(best[aggregation], time.perf_counter() - tick)
    seconds = {aggregation: round(t, 6) for aggregation, t in best.items()}
    for p in model.parameters():
        p.grad = None
    model.aggregation = min(seconds, key=seconds.get)
    return seconds


class _Residual:
    """Mixin over a PyG ``BasicGNN``: the forward with ``finish_layer``'s skip connections."""

    residual = True

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        kwargs = {"edge_weight": edge_weight} if self.supports_edge_weight else {}
        xs = []
        for layer, conv in enumerate(self.convs):
            x = finish_layer(self, layer, conv(x, edge_index, **kwargs), x)
            if hasattr(self, "jk"):
                xs.append(x)
        x = self.jk(xs) if hasattr(self, "jk") else x
        return self.lin(x) if hasattr(self, "lin") else x


class SampledGCN(_Sampled, GCN):
    pass


class SampledGraphSAGE(_Sampled, GraphSAGE):
    pass


class SampledGAT(_Sampled, GAT):
    pass


class ResidualGCN(_Sampled, _Residual, GCN):
    pass


class ResidualGraphSAGE(_Sampled, _Residual, GraphSAGE):
    pass


class ResidualGAT(_Sampled, _Residual, GAT):
    pass


GRAPH_MODELS = {"gcn": SampledGCN, "sage": SampledGraphSAGE, "gat": SampledGAT}
RESIDUAL_MODELS = {"gcn": ResidualGCN, "sage": ResidualGraphSAGE, "gat": ResidualGAT}


class SepConv(MessagePassing):
    """Ego / neighbour separation (the "-sep" layers of Platonov et al. 2023; H2GCN's first
    design): ``out_v = [x_v W_ego + b_ego | mean_{u -> v} x_u W_nbr + b_nbr]``, (N_dst, out).

    A node's own state and its in-neighbours' mean go through separate weights and are
    concatenated, never summed, so a neighbourhood unlike the node (heterophily) cannot wash
    out its own features, and the next layer can weigh the two apart (even with opposite
    signs). The ego half has ``out // 2`` channels, the neighbour half the rest: the width stays
    ``out``. A node without in-edges gets ``b_nbr`` in its neighbour half (PyG's empty mean is 0).

    The neighbour half projects the sources before the mean, ``mean(x_u) W = mean(x_u W)``: the
    per-edge messages are ``out - out // 2`` wide instead of ``in`` (the same up to rounding).
    Called as PyG convs are: ``x`` (N, in) or bipartite ``(x_src (N_src, in), x_dst (N_dst,
    in))`` with ``edge_index`` (2, E) of (source, target) ids and ``size=(N_src, N_dst)``.
    """

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__(aggr="mean")
        assert out_channels >= 2, "config rules refuse train.hidden < 2 for sep"
        self.in_channels, self.out_channels = in_channels, out_channels
        self.lin_ego = nn.Linear(in_channels, out_channels // 2)
        self.lin_nbr = nn.Linear(in_channels, out_channels - out_channels // 2)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self.lin_ego.reset_parameters()
        self.lin_nbr.reset_parameters()

    def forward(self, x, edge_index: torch.Tensor,
                size: tuple[int, int] | None = None) -> torch.Tensor:
        src, dst = (x, x) if isinstance(x, torch.Tensor) else x
        z = F.linear(src, self.lin_nbr.weight)  # (N_src, out - out // 2): narrow messages
        nbr = self.propagate(edge_index, x=(z, None), size=size or (src.shape[0], dst.shape[0]))
        return torch.cat([self.lin_ego(dst), nbr + self.lin_nbr.bias], dim=-1)

    def message(self, x_j: torch.Tensor) -> torch.Tensor:
        return x_j

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


class SepGNN(_Sampled, _Residual, BasicGNN):
    """``sep``: ``SepConv`` layers in PyG's ``BasicGNN``, always with skip connections
    (``finish_layer``: ``h_{i+1} = dropout(relu(norm(conv_i(h_i)))) + h_i`` from the second
    layer on) and a linear head, as the "-sep" models of Platonov et al. 2023.

    Every conv writes ``hidden`` channels; the head reads the last layer's output
    (``jk="last"``, train.jk none) or, H2GCN's final combination, every layer's (``jk="cat"``;
    ``"max"`` too), so a class decision can use each hop's ego and neighbour halves apart.
    """

    supports_edge_weight = False
    supports_edge_attr = False

    def init_conv(self, in_channels: int, out_channels: int, **kwargs) -> MessagePassing:
        return SepConv(in_channels, out_channels)


class SIGN(nn.Module):
    """SIGN (Frasca et al. 2020): one linear map per hop, concatenated, then an MLP.

    Input ``x`` is (B, (K + 1) * F): ``[X_0 | X_1 | ... | X_K]`` rows for B nodes.
    """

    def __init__(self, in_dim: int, num_hops: int, hidden: int, out_dim: int, num_layers: int,
                 dropout: float):
        super().__init__()
        self.in_dim = in_dim
        self.hop_maps = nn.ModuleList(nn.Linear(in_dim, hidden) for _ in range(num_hops + 1))
        self.dropout = nn.Dropout(dropout)
        self.head = MLP(in_channels=hidden * (num_hops + 1), hidden_channels=hidden,
                        out_channels=out_dim, num_layers=max(num_layers - 1, 1),
                        dropout=dropout, norm=None)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        hops = x.split(self.in_dim, dim=1)  # (B, F) each
        h = torch.cat([hop_map(hop) for hop_map, hop in zip(self.hop_maps, hops)], dim=1)
        return self.head(self.dropout(torch.relu(h)))

    def forward_with_hidden(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``forward`` and the hidden before the final linear map (B, H): the head MLP's last
        hidden, or its input (the hops' maps) when the head is a single linear layer."""
        hops = x.split(self.in_dim, dim=1)
        h = self.dropout(torch.relu(torch.cat([m(hop) for m, hop in zip(self.hop_maps, hops)],
                                              dim=1)))
        out, emb = self.head(h, return_emb=True)
        return out, h if emb is None else emb


class TypeInputs(nn.Module):
    """One ``Linear(F_t, hidden)`` per node type: type -> (N_t, F_t) in, (N_t, hidden) out."""

    def __init__(self, in_dims: dict[str, int], hidden: int):
        super().__init__()
        self.types = list(in_dims)
        self.maps = nn.ModuleList(nn.Linear(in_dims[t], hidden) for t in self.types)

    def forward(self, x_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {t: m(x_dict[t]) for t, m in zip(self.types, self.maps)}


class TypedModel(nn.Module):
    """Base of the models of typed graphs, ``model(x_dict, edge_index_dict) -> out``: the
    per-type input maps (``inputs``), a body (subclasses) and the output ``out`` selects.

    ``out="target"``: the target type's rows (N_target, C) (node classification); ``out="all"``:
    every type's rows concatenated in node-type order into (N_total, C), the
    ``Graph.offsets()`` ids (link prediction scores any two types' pair ``z_u . z_v``).
    ``num_nodes`` (type -> N_t) gives the types ``cfg.embeddings`` names a learnable row per
    node (``node_inputs``, gnnpipe/training/embeddings.py) before their input map.
    """

    # out="target" leaves the other types' last maps unused (DDP must not wait for them)
    ddp_find_unused_parameters = True

    def __init__(self, name: str, metadata: Metadata, in_dims: dict[str, int], target: str,
                 cfg: FitParams, out: str = "target", num_nodes: dict[str, int] | None = None):
        super().__init__()
        self.name, self.target, self.out = name, target, out
        self.node_types, self.edge_types = list(metadata[0]), list(metadata[1])
        # train.embeddings (num_nodes: type -> N_t): the chosen types' maps read [x | rows]
        inputs = node_inputs(num_nodes, cfg)
        widths = in_dims if inputs is None else {t: inputs.width(t, d) for t, d in in_dims.items()}
        self.inputs = TypeInputs(widths, cfg.hidden)
        attach(self, inputs)
        self.dropout = nn.Dropout(cfg.dropout)

    def select(self, h: dict[str, torch.Tensor]) -> torch.Tensor:
        """The rows ``out`` asks for from type -> (N_t, C)."""
        if self.out == "target":
            return h[self.target]
        return torch.cat([h[t] for t in self.node_types])  # (N_total, C), offsets order


class TypedMLP(TypedModel):
    """``mlp`` on a typed graph: the input maps, ReLU, then one MLP on every type's rows."""

    def __init__(self, metadata: Metadata, in_dims: dict[str, int], out_dim: int, target: str,
                 cfg: FitParams, out: str = "target"):
        super().__init__("mlp", metadata, in_dims, target, cfg, out)
        self.body = MLP(in_channels=cfg.hidden, hidden_channels=cfg.hidden, out_channels=out_dim,
                        num_layers=cfg.num_layers, dropout=cfg.dropout, norm=None)

    def forward(self, x_dict: dict[str, torch.Tensor],
                edge_index_dict: dict[EdgeType, torch.Tensor] | None = None) -> torch.Tensor:
        h = self.inputs(x_dict)  # type -> (N_t, hidden)
        return self.select({t: self.body(torch.relu(v)) for t, v in h.items()})

    def forward_with_hidden(self, x_dict: dict[str, torch.Tensor],
                            edge_index_dict: dict[EdgeType, torch.Tensor] | None = None
                            ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``forward``'s output and, per type, the MLP's last hidden (N_t, H) (its input, the
        input maps after ReLU, with one layer). Call in eval mode."""
        outs, hidden = {}, {}
        for t, v in self.inputs(x_dict).items():
            v = torch.relu(v)
            outs[t], emb = self.body(v, return_emb=True)
            hidden[t] = v if emb is None else emb
        return self.select(outs), hidden


def forward_with_hidden(model: nn.Module, x: torch.Tensor, edge_index: torch.Tensor | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``model(x, edge_index)`` (N, C) and the input of its last layer (N, H), the node
    embedding of the predict stage, in one pass.

    PyG ``BasicGNN`` without jk: the output of layer L-2 after activation (norm, dropout,
    residual: ``finish_layer``), i.e. what the last conv reads; with jk: the jk output before
    ``lin`` (``jk="last"``, sep's head over its last layer: that layer's output). ``mlp``: the
    MLP's last hidden (its input with one layer); ``sign``: the hidden before the final
    linear. Call in eval mode for the inference embedding.
    """
    if isinstance(model, FeatureMLP):
        out, emb = model.mlp(x, return_emb=True)
        return out, x if emb is None else emb
    if isinstance(model, SIGN):
        return model.forward_with_hidden(x)
    assert isinstance(model, BasicGNN), f"no hidden-layer accessor for {type(model).__name__}"
    x = input_rows(model, x)  # train.embeddings: every node's rows, in id order
    jk, head, h, xs, hidden = hasattr(model, "jk"), hasattr(model, "lin"), x, [], x
    for layer, conv in enumerate(model.convs):
        if layer == model.num_layers - 1 and not head:
            hidden = h  # what the last conv reads
        h = finish_layer(model, layer, conv(h, edge_index), h)
        if jk:
            xs.append(h)
    if not head:
        return h, hidden
    hidden = model.jk(xs) if jk else h  # what the head reads
    return model.lin(hidden), hidden


def build_model(name: str, in_dim: int, num_classes: int, cfg: FitParams,
                num_hops: int = 0, num_nodes: dict[str, int] | None = None) -> nn.Module:
    """A freshly initialised model (uses torch's global RNG: call under ``fork_rng``).
    ``num_nodes`` ({node type: N}, the graph's one type): graph models get ``cfg.embeddings``'
    tables (``gnnpipe.training.embeddings.node_inputs``) and read ``in_dim`` features plus
    them; None (the baseline, shards) or embeddings off: no tables."""
    if name == "mlp":
        return FeatureMLP(in_dim, cfg.hidden, num_classes, cfg.num_layers, cfg.dropout)
    assert isinstance(cfg, TrainParams), "graph models are configured by the train section"
    if name == "sign":
        return SIGN(in_dim, num_hops, cfg.hidden, num_classes, cfg.num_layers, cfg.dropout)
    inputs = node_inputs(num_nodes, cfg)  # mlp / sign: refused with embeddings (config rules)
    if inputs is not None:
        (node_type,) = num_nodes
        in_dim = inputs.width(node_type, in_dim)
    return attach(_graph_model(name, in_dim, num_classes, cfg), inputs)


def _graph_model(name: str, in_dim: int, num_classes: int, cfg: TrainParams) -> nn.Module:
    """``build_model``'s message-passing models over ``in_dim`` input channels."""
    kwargs = {}
    if name == "gat":
        assert cfg.hidden % cfg.heads == 0, "config._check_heads refuses this train section"
        kwargs["heads"] = cfg.heads
    if name == "sep":  # a head always: every conv keeps both halves (train.jk none: "last")
        return SepGNN(in_channels=in_dim, hidden_channels=cfg.hidden, num_layers=cfg.num_layers,
                      out_channels=num_classes, dropout=cfg.dropout,
                      jk="last" if cfg.jk == "none" else cfg.jk, norm=nn.LayerNorm(cfg.hidden))
    models = RESIDUAL_MODELS if cfg.residual else GRAPH_MODELS
    model = models[name](in_channels=in_dim, hidden_channels=cfg.hidden,
                         num_layers=cfg.num_layers, out_channels=num_classes,
                         dropout=cfg.dropout, jk=None if cfg.jk == "none" else cfg.jk, **kwargs)
    model.aggregation = aggregation_of(name, cfg.aggregation)
    return model


def aggregation_of(name: str, setting: str) -> str:
    """The aggregation a homogeneous ``name`` model runs with ``train.aggregation``: auto is
    csr for ``CSR_MODELS``; gat aggregates per-edge attention, so scatter only
    (config._check_aggregation refuses an explicit csr)."""
    if name not in CSR_MODELS:
        return "scatter"
    return "csr" if setting == "auto" else setting
