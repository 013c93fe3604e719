"""Models of heterogeneous graphs behind one call: ``model(x_dict, edge_index_dict) -> out``.

Every model first maps each node type's features to ``hidden`` channels with its own linear
layer (types have different widths, and venues may carry no signal at all), then:

* ``sage``: PyG's ``GraphSAGE`` turned heterogeneous by ``to_hetero`` (one SAGEConv per edge
  type per layer, summed over the edge types into each node type);
* ``hgt``: ``num_layers`` PyG ``HGTConv`` layers (Hu et al. 2020; ``heads`` attention heads);
* ``rgcn``: ``num_layers`` PyG ``RGCNConv`` layers (Schlichtkrull et al. 2018) on the
  homogeneous view (``to_homogeneous`` ids: types concatenated in order, ``edge_type`` the
  index of each edge's type);
* ``mlp``: the per-type input maps and an MLP, no edges (the structure-free baseline).

``out="target"`` returns the logits of the target node type, (N_target, C) (node
classification); ``out="all"`` returns embeddings of every node, the types concatenated in
order into (N_total, C) with ``HeteroGraph.offsets()`` ids (link prediction: a pair of any two
types scores ``z_u . z_v``).

Typed sampled steps are not trimmed (``train.aggregation`` stays scatter): the typed batches
(gnnpipe/hetero/loader.py) drop the per-type hop counts, so ``gnnpipe.models.trim_kwargs`` finds
no ``trims`` here and every layer runs on the whole sampled subgraph, as before.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import MLP, HGTConv, RGCNConv, to_hetero
from torch_geometric.nn.models import GraphSAGE

from gnnpipe.config import BaselineParams, TrainParams
from gnnpipe.typed_graph import EdgeType

Metadata = tuple[list[str], list[EdgeType]]


class _Inputs(nn.Module):
    """One ``Linear(F_t, hidden)`` per node type."""

    def __init__(self, in_dims: dict[str, int], hidden: int):
        super().__init__()
        self.types = list(in_dims)
        self.maps = nn.ModuleList(nn.Linear(in_dims[t], hidden) for t in self.types)

    def forward(self, x_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {t: m(x_dict[t]) for t, m in zip(self.types, self.maps)}


class HeteroModel(nn.Module):
    """The input maps, a typed message-passing body and the output of ``out`` (module doc)."""

    # out="target" never uses the last layer's convs into the other node types (DDP: skip them)
    ddp_find_unused_parameters = True

    def __init__(self, name: str, metadata: Metadata, in_dims: dict[str, int], out_dim: int,
                 target: str, cfg: BaselineParams, out: str = "target"):
        super().__init__()
        self.name, self.target, self.out = name, target, out
        self.node_types, self.edge_types = list(metadata[0]), list(metadata[1])
        hidden, layers, dropout = cfg.hidden, cfg.num_layers, cfg.dropout
        self.inputs = _Inputs(in_dims, hidden)
        self.dropout = nn.Dropout(dropout)
        if name == "mlp":
            self.body = MLP(in_channels=hidden, hidden_channels=hidden, out_channels=out_dim,
                            num_layers=layers, dropout=dropout, norm=None)
        elif name == "sage":
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
            raise AssertionError(f"no heterogeneous model {name!r}")  # config._check_typed_train

    def _select(self, h: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.out == "target":
            return h[self.target]
        return torch.cat([h[t] for t in self.node_types])  # (N_total, C), offsets order

    def forward(self, x_dict: dict[str, torch.Tensor],
                edge_index_dict: dict[EdgeType, torch.Tensor]) -> torch.Tensor:
        h = self.inputs(x_dict)  # type -> (N_t, hidden)
        if self.name == "mlp":
            return self._select({t: self.body(torch.relu(v)) for t, v in h.items()})
        if self.name == "sage":
            h = {t: self.dropout(torch.relu(v)) for t, v in h.items()}
            return self._select(self.body(h, edge_index_dict))
        if self.name == "hgt":
            for i, conv in enumerate(self.convs):
                h = {t: self.dropout(torch.relu(v)) for t, v in h.items()} if i else h
                h = conv(h, edge_index_dict)  # (gelu inside, skip connections per type)
            return self._select({t: self.head(self.dropout(torch.relu(v))) for t, v in h.items()})
        # rgcn: homogeneous view, node v of type t at sizes[:t].sum() + v
        sizes = [h[t].shape[0] for t in self.node_types]
        start = dict(zip(self.node_types, torch.tensor([0] + sizes[:-1]).cumsum(0).tolist()))
        x = torch.cat([h[t] for t in self.node_types])
        edge_index, edge_type = [], []
        for i, (s, rel, d) in enumerate(self.edge_types):
            ei = edge_index_dict[(s, rel, d)]
            edge_index.append(ei + torch.tensor([[start[s]], [start[d]]]))
            edge_type.append(torch.full((ei.shape[1],), i, dtype=torch.int64))
        edge_index, edge_type = torch.cat(edge_index, dim=1), torch.cat(edge_type)
        for i, conv in enumerate(self.convs):
            x = conv(self.dropout(torch.relu(x)), edge_index, edge_type)
        out = dict(zip(self.node_types, x.split(sizes)))
        return self._select(out)

    def forward_with_hidden(self, x_dict: dict[str, torch.Tensor],
                            edge_index_dict: dict[EdgeType, torch.Tensor]
                            ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``forward``'s output and, per node type, the input of the last layer (N_t, H): the
        predict stage's embeddings. ``sage``: the last hidden SAGE layer after ReLU (the input
        maps after ReLU with one layer), computed as ``to_hetero`` does (each edge type's conv,
        summed in edge-type order into its destination; types without in-edges drop out);
        ``hgt``: the last conv's output after ReLU (what ``head`` reads); ``rgcn``: the ReLU
        input of the last conv; ``mlp``: the MLP's last hidden. Call in eval mode."""
        h = self.inputs(x_dict)
        if self.name == "mlp":
            outs, hidden = {}, {}
            for t, v in h.items():
                v = torch.relu(v)
                outs[t], emb = self.body(v, return_emb=True)
                hidden[t] = v if emb is None else emb
            return self._select(outs), hidden
        if self.name == "sage":
            from gnnpipe.typed_graph import edge_type_name

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
            return self._select(h), hidden
        if self.name == "hgt":
            for i, conv in enumerate(self.convs):
                h = {t: self.dropout(torch.relu(v)) for t, v in h.items()} if i else h
                h = conv(h, edge_index_dict)
            hidden = {t: self.dropout(torch.relu(v)) for t, v in h.items()}
            return self._select({t: self.head(v) for t, v in hidden.items()}), hidden
        sizes = [h[t].shape[0] for t in self.node_types]
        start = dict(zip(self.node_types, torch.tensor([0] + sizes[:-1]).cumsum(0).tolist()))
        x = torch.cat([h[t] for t in self.node_types])
        edge_index, edge_type = [], []
        for i, (s, rel, d) in enumerate(self.edge_types):
            ei = edge_index_dict[(s, rel, d)]
            edge_index.append(ei + torch.tensor([[start[s]], [start[d]]]))
            edge_type.append(torch.full((ei.shape[1],), i, dtype=torch.int64))
        edge_index, edge_type = torch.cat(edge_index, dim=1), torch.cat(edge_type)
        hidden = x
        for conv in self.convs:
            hidden = self.dropout(torch.relu(x))
            x = conv(hidden, edge_index, edge_type)
        return (self._select(dict(zip(self.node_types, x.split(sizes)))),
                dict(zip(self.node_types, hidden.split(sizes))))


def build_hetero_model(name: str, metadata: Metadata, in_dims: dict[str, int], out_dim: int,
                       target: str, cfg: BaselineParams, out: str = "target") -> HeteroModel:
    """A freshly initialised model (uses torch's global RNG: call under ``fork_rng``)."""
    return HeteroModel(name, metadata, in_dims, out_dim, target, cfg, out)
