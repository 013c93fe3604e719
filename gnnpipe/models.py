"""Node classifiers behind one call signature: ``model(x, edge_index) -> logits (N, C)``.

The GNNs are PyG's own ``GCN`` / ``GraphSAGE`` / ``GAT``; ``mlp`` ignores the edges (the honest
structure-free baseline); ``sign`` takes the precomputed hops concatenated along features.
``train.residual`` swaps in subclasses of the same PyG models (same parameters and state_dict
keys) whose hidden layers add their input back: ``h_{i+1} = dropout(act(conv_i(h_i))) + h_i``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import MLP
from torch_geometric.nn.models import GAT, GCN, GraphSAGE
from torch_geometric.nn.models.basic_gnn import BasicGNN

from gnnpipe.config import BaselineParams, TrainParams



def finish_layer(model: BasicGNN, layer: int, h: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
    """What follows conv ``layer`` in ``model``'s forward: ``h`` (M, H) is the conv output and
    ``prev`` (M, H_in) its input rows, the same nodes in the same order.

    Hidden layers (and every layer under jk) get activation, norm and dropout as in PyG's
    ``BasicGNN.forward``; a residual model then adds ``prev`` from the second layer on (the
    first layer's input is the raw features, the last layer without jk writes the classes).
    Shared by the models' forward and the layer-wise inference (gnnpipe/inference.py), so both
    compute the same thing.
    """
    last = layer == model.num_layers - 1
    if last and model.jk_mode is None:
        return h
    if model.act is not None and model.act_first:
        h = model.act(h)
    h = model.norms[layer](h)  # gnnpipe builds no norm: Identity (no batch-wise norms)
    if model.act is not None and not model.act_first:
        h = model.act(h)
    h = model.dropout(h)
    if getattr(model, "residual", False) and layer > 0 and h.shape == prev.shape:
        h = h + prev
    return h


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


class ResidualGCN(_Residual, GCN):
    pass


class ResidualGraphSAGE(_Residual, GraphSAGE):
    pass


class ResidualGAT(_Residual, GAT):
    pass


GRAPH_MODELS = {"gcn": GCN, "sage": GraphSAGE, "gat": GAT}
RESIDUAL_MODELS = {"gcn": ResidualGCN, "sage": ResidualGraphSAGE, "gat": ResidualGAT}


class FeatureMLP(nn.Module):
    """PyG ``MLP`` that accepts and ignores ``edge_index``."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float):
        super().__init__()
        self.mlp = MLP(in_channels=in_dim, hidden_channels=hidden, out_channels=out_dim,
                       num_layers=num_layers, dropout=dropout, norm=None)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        return self.mlp(x)


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


def forward_with_hidden(model: nn.Module, x: torch.Tensor, edge_index: torch.Tensor | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``model(x, edge_index)`` (N, C) and the input of its last layer (N, H), the node
    embedding of the predict stage, in one pass.

    PyG ``BasicGNN`` without jk: the output of layer L-2 after activation (norm, dropout,
    residual: ``finish_layer``), i.e. what the last conv reads; with jk: the jk output before
    ``lin``. ``mlp``: the MLP's last hidden (its input with one layer); ``sign``: the hidden
    before the final linear. Call in eval mode for the inference embedding.
    """
    if isinstance(model, FeatureMLP):
        out, emb = model.mlp(x, return_emb=True)
        return out, x if emb is None else emb
    if isinstance(model, SIGN):
        return model.forward_with_hidden(x)
    assert isinstance(model, BasicGNN), f"no hidden-layer accessor for {type(model).__name__}"
    jk, h, xs, hidden = hasattr(model, "jk"), x, [], x
    for layer, conv in enumerate(model.convs):
        if layer == model.num_layers - 1 and not jk:
            hidden = h  # what the last conv reads
        h = finish_layer(model, layer, conv(h, edge_index), h)
        if jk:
            xs.append(h)
    if not jk:
        return h, hidden
    hidden = model.jk(xs)
    return (model.lin(hidden) if hasattr(model, "lin") else hidden), hidden


def build_model(name: str, in_dim: int, num_classes: int, cfg: BaselineParams,
                num_hops: int = 0) -> nn.Module:
    """A freshly initialised model (uses torch's global RNG: call under ``fork_rng``)."""
    if name == "mlp":
        return FeatureMLP(in_dim, cfg.hidden, num_classes, cfg.num_layers, cfg.dropout)
    assert isinstance(cfg, TrainParams), "graph models are configured by the train section"
    if name == "sign":
        return SIGN(in_dim, num_hops, cfg.hidden, num_classes, cfg.num_layers, cfg.dropout)
    kwargs = {}
    if name == "gat":
        assert cfg.hidden % cfg.heads == 0, "config._check_heads refuses this train section"
        kwargs["heads"] = cfg.heads
    models = RESIDUAL_MODELS if cfg.residual else GRAPH_MODELS
    return models[name](in_channels=in_dim, hidden_channels=cfg.hidden,
                        num_layers=cfg.num_layers, out_channels=num_classes,
                        dropout=cfg.dropout, jk=None if cfg.jk == "none" else cfg.jk, **kwargs)
