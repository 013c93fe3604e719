"""Models that pass messages between several node types: ``model(x_dict, edge_index_dict)``.

Every model first maps each node type's features to ``hidden``
(``gnnpipe.training.models.TypedModel``), then:

* ``sage``: PyG's ``GraphSAGE`` turned heterogeneous by ``to_hetero`` (one SAGEConv per edge
  type per layer, summed over the edge types into each node type);
* ``hgt``: ``num_layers`` PyG ``HGTConv`` layers (Hu et al. 2020; ``heads`` attention heads);
* ``rgcn``: ``num_layers`` PyG ``RGCNConv`` layers (Schlichtkrull et al. 2018) on the
  homogeneous view (``to_homogeneous`` ids: types concatenated in order, ``edge_type`` the
  index of each edge's type).

``build_hetero_model`` builds these and the typed graph's ``mlp``
(``gnnpipe.training.models.TypedMLP``). ``sage`` with ``out="target"`` trims sampled steps as the
homogeneous models do (``gnnpipe.training.models.sampled_forward``): given a typed neighbor
batch's per-type hop counts (``gnnpipe.training.models.trim_kwargs``), layer ``i`` reads only the
rows and edges later layers still need and computes only the target rows the next layer reads,
per edge type, bipartite; the seeds' logits are the untrimmed forward's (dropout aside: the
trimmed step draws its masks by ``gnnpipe.training.models.dropout``). ``train.aggregation``
stays scatter on typed graphs.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import HGTConv, RGCNConv, to_hetero
from torch_geometric.nn.models import GraphSAGE

from gnnpipe.config import FitParams, TrainParams
from gnnpipe.training.embeddings import input_rows
from gnnpipe.training.models import Metadata, TypedMLP, TypedModel, dropout, kept_per_layer
from gnnpipe.data.graph import EdgeType, edge_type_name


class HeteroModel(TypedModel):
    """The input maps, a multi-type message-passing body and the output of ``out``."""

    def __init__(self, name: str, metadata: Metadata, in_dims: dict[str, int], out_dim: int,
                 target: str, cfg: FitParams, out: str = "target",
                 num_nodes: dict[str, int] | None = None):
        super().__init__(name, metadata, in_dims, target, cfg, out, num_nodes)
        hidden, layers, dropout = cfg.hidden, cfg.num_layers, cfg.dropout
        if name == "sage":
            sage = GraphSAGE(in_channels=hidden, hidden_channels=hidden, num_layers=layers,
                             out_channels=out_dim, dropout=dropout)
            self.body = to_hetero(sage, (self.node_types, self.edge_types), aggr="sum")
        elif name == "hgt":
            assert isinstance(cfg, TrainParams) and hidden % cfg.heads == 0  # config._check_heads
            meta = (self.node_types, self.edge_types)
            self.convs = nn.ModuleList(HGTConv(hidden, hidden, meta, heads=cfg.heads)
                                       for _ in range(layers))
            self.head = nn.Linear(hidden, out_dim)
        elif name == "rgcn":
            dims = [hidden] * layers + [out_dim]
            self.convs = nn.ModuleList(RGCNConv(dims[i], dims[i + 1], len(self.edge_types))
                                       for i in range(layers))
        else:
            raise AssertionError(f"no heterogeneous model {name!r}")  # config/samplers.py TYPED_MODELS

    @property
    def trims(self) -> bool:
        """Whether ``trim_kwargs`` passes a batch's per-hop counts (``sage`` on target rows)."""
        return self.name == "sage" and self.out == "target"

    @property
    def num_layers(self) -> int:
        return len(self.body.convs) if self.name == "sage" else len(self.convs)

    def forward(self, x_dict: dict[str, torch.Tensor],
                edge_index_dict: dict[EdgeType, torch.Tensor],
                num_sampled_nodes_per_hop: dict[str, list[int]] | None = None,
                num_sampled_edges_per_hop: dict[EdgeType, list[int]] | None = None,
                n_id: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        # train.embeddings: each type's [x | rows of its n_id] (None: every node, id order)
        h = self.inputs(input_rows(self, x_dict, n_id))  # type -> (N_t, hidden)
        if self.name == "sage" and num_sampled_nodes_per_hop is not None and self.trims:
            p = self.dropout.p if self.training else 0.0
            h = {t: dropout(torch.relu(v), p) for t, v in h.items()}
            return self._sampled_sage(h, edge_index_dict, num_sampled_nodes_per_hop,
                                      num_sampled_edges_per_hop)
        if self.name == "sage":
            h = {t: self.dropout(torch.relu(v)) for t, v in h.items()}
            return self.select(self.body(h, edge_index_dict))
        if self.name == "hgt":
            h = self._hgt(h, edge_index_dict)
            return self.select({t: self.head(self.dropout(torch.relu(v))) for t, v in h.items()})
        x, edge_index, edge_type, sizes = self._homogeneous_view(h, edge_index_dict)
        for conv in self.convs:
            x = conv(self.dropout(torch.relu(x)), edge_index, edge_type)
        return self.select(dict(zip(self.node_types, x.split(sizes))))

    def _sampled_sage(self, h: dict[str, torch.Tensor],
                      edge_index_dict: dict[EdgeType, torch.Tensor],
                      nodes: dict[str, list[int]], edges: dict[EdgeType, list[int]]
                      ) -> torch.Tensor:
        """``to_hetero(GraphSAGE)`` on a sampled batch (``h``: type -> (N_t, hidden), nodes and
        edges stored hop by hop with the counts ``nodes`` / ``edges``), trimmed: layer ``i``
        of edge type ``(s, r, d)`` reads the first ``kept_per_layer`` rows of ``s`` and edges
        and writes the ``d`` rows layer ``i + 1`` reads (none: skipped); the sum over edge
        types into each type as ``to_hetero``'s ``aggr="sum"``. Out: the target rows
        (M, C), the seeds first."""
        layers = len(self.body.convs)
        n_in = {t: kept_per_layer(v.shape[0], nodes.get(t), layers) for t, v in h.items()}
        e_in = {e: kept_per_layer(edge_index_dict[e].shape[1], edges.get(e), layers)
                for e in self.edge_types}
        p = self.dropout.p if self.training else 0.0
        for layer, convs in enumerate(self.body.convs):
            out: dict[str, torch.Tensor] = {}
            for e in self.edge_types:
                s, _, d = e
                n_out = n_in[d][layer + 1]
                if n_out == 0 or d not in h:
                    continue
                rows = n_in[s][layer] if s in h else 0
                src = h[s][:rows] if s in h else h[d][:0]  # (rows, H): this layer's sources
                y = convs[edge_type_name(e)]((src, h[d][:n_out]),
                                             edge_index_dict[e][:, :e_in[e][layer]],
                                             size=(rows, n_out))  # (n_out, H')
                out[d] = y if d not in out else out[d] + y
            h = out if layer == layers - 1 else {
                t: dropout(torch.relu(v), p) for t, v in out.items()}
        return h[self.target]

    def _hgt(self, h: dict[str, torch.Tensor], edge_index_dict: dict[EdgeType, torch.Tensor]
             ) -> dict[str, torch.Tensor]:
        """The HGT convs on the input maps (type -> (N_t, hidden)): the last conv's output."""
        for i, conv in enumerate(self.convs):
            h = {t: self.dropout(torch.relu(v)) for t, v in h.items()} if i else h
            h = conv(h, edge_index_dict)  # (gelu inside, skip connections per type)
        return h

    def _homogeneous_view(self, h: dict[str, torch.Tensor],
                          edge_index_dict: dict[EdgeType, torch.Tensor]):
        """R-GCN's input: ``x`` (N_total, hidden), node v of type t at sizes[:t].sum() + v;
        ``edge_index`` (2, E_total) in those ids; ``edge_type`` (E_total,) the index of each
        edge's type; the per-type ``sizes``."""
        sizes = [h[t].shape[0] for t in self.node_types]
        start = dict(zip(self.node_types, torch.tensor([0] + sizes[:-1]).cumsum(0).tolist()))
        x = torch.cat([h[t] for t in self.node_types])
        edge_index, edge_type = [], []
        for i, (s, rel, d) in enumerate(self.edge_types):
            ei = edge_index_dict[(s, rel, d)]
            edge_index.append(ei + torch.tensor([[start[s]], [start[d]]]))
            edge_type.append(torch.full((ei.shape[1],), i, dtype=torch.int64))
        return x, torch.cat(edge_index, dim=1), torch.cat(edge_type), sizes

    def forward_with_hidden(self, x_dict: dict[str, torch.Tensor],
                            edge_index_dict: dict[EdgeType, torch.Tensor]
                            ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``forward``'s output and, per node type, the input of the last layer (N_t, H): the
        predict stage's embeddings. ``sage``: the last hidden SAGE layer after ReLU (the input
        maps after ReLU with one layer), computed as ``to_hetero`` does (each edge type's conv,
        summed in edge-type order into its destination; types without in-edges drop out);
        ``hgt``: the last conv's output after ReLU (what ``head`` reads); ``rgcn``: the ReLU
        input of the last conv. Call in eval mode."""
        h = self.inputs(input_rows(self, x_dict))
        if self.name == "sage":
            h = {t: self.dropout(torch.relu(v)) for t, v in h.items()}
            convs = self.body.convs
            hidden = h
            for layer, layer_convs in enumerate(convs):
                if layer == len(convs) - 1:
                    hidden = h
                out: dict[str, torch.Tensor] = {}
                for e in self.edge_types:
                    if e[0] not in h or e[2] not in h:
                        continue
                    y = layer_convs[edge_type_name(e)]((h[e[0]], h[e[2]]), edge_index_dict[e])
                    out[e[2]] = y if e[2] not in out else out[e[2]] + y
                h = out if layer == len(convs) - 1 else {
                    t: self.dropout(torch.relu(v)) for t, v in out.items()}
            return self.select(h), hidden
        if self.name == "hgt":
            hidden = {t: self.dropout(torch.relu(v))
                      for t, v in self._hgt(h, edge_index_dict).items()}
            return self.select({t: self.head(v) for t, v in hidden.items()}), hidden
        x, edge_index, edge_type, sizes = self._homogeneous_view(h, edge_index_dict)
        hidden = x
        for conv in self.convs:
            hidden = self.dropout(torch.relu(x))
            x = conv(hidden, edge_index, edge_type)
        return (self.select(dict(zip(self.node_types, x.split(sizes)))),
                dict(zip(self.node_types, hidden.split(sizes))))


def build_hetero_model(name: str, metadata: Metadata, in_dims: dict[str, int], out_dim: int,
                       target: str, cfg: FitParams, out: str = "target",
                       num_nodes: dict[str, int] | None = None) -> TypedModel:
    """A freshly initialised model of a typed graph: ``mlp`` (``TypedMLP``: features only) or
    a ``HeteroModel`` with ``cfg.embeddings``' tables over ``num_nodes`` (type -> N_t; None:
    none) (uses torch's global RNG: call under ``fork_rng``)."""
    if name == "mlp":
        return TypedMLP(metadata, in_dims, out_dim, target, cfg, out)
    return HeteroModel(name, metadata, in_dims, out_dim, target, cfg, out, num_nodes)
