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
(``gnnpipe.training.models.TypedMLP``). Typed sampled steps are not trimmed (``train.aggregation``
stays scatter): the typed batches (gnnpipe/hetero/loader.py) drop the per-type hop counts, so
``gnnpipe.training.models.trim_kwargs`` finds no ``trims`` here and every layer runs on the whole
sampled subgraph.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import HGTConv, RGCNConv, to_hetero
from torch_geometric.nn.models import GraphSAGE

from gnnpipe.config import FitParams, TrainParams
from gnnpipe.training.models import Metadata, TypedMLP, TypedModel
from gnnpipe.data.graph import EdgeType, edge_type_name


class HeteroModel(TypedModel):
    """The input maps, a multi-type message-passing body and the output of ``out``."""

    def __init__(self, name: str, metadata: Metadata, in_dims: dict[str, int], out_dim: int,
                 target: str, cfg: FitParams, out: str = "target"):
        super().__init__(name, metadata, in_dims, target, cfg, out)
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

    def forward(self, x_dict: dict[str, torch.Tensor],
                edge_index_dict: dict[EdgeType, torch.Tensor]) -> torch.Tensor:
        h = self.inputs(x_dict)  # type -> (N_t, hidden)
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
        h = self.inputs(x_dict)
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
                       target: str, cfg: FitParams, out: str = "target") -> TypedModel:
    """A freshly initialised model of a typed graph: ``mlp`` (``TypedMLP``) or a
    ``HeteroModel`` (uses torch's global RNG: call under ``fork_rng``)."""
    if name == "mlp":
        return TypedMLP(metadata, in_dims, out_dim, target, cfg, out)
    return HeteroModel(name, metadata, in_dims, out_dim, target, cfg, out)
