"""Node classifiers behind one call signature: ``model(x, edge_index) -> logits (N, C)``.

The GNNs are PyG's own ``GCN`` / ``GraphSAGE`` / ``GAT``; ``mlp`` ignores the edges (the honest
structure-free baseline); ``sign`` takes the precomputed hops concatenated along features.
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import MLP
from torch_geometric.nn.models import GAT, GCN, GraphSAGE

from gnnpipe.config import BaselineParams, TrainParams

GRAPH_MODELS = {"gcn": GCN, "sage": GraphSAGE, "gat": GAT}


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
        if cfg.hidden % cfg.heads:
            raise ValueError(f"train.hidden={cfg.hidden} must be divisible by train.heads="
                             f"{cfg.heads} for gat (each head gets hidden / heads channels)")
        kwargs["heads"] = cfg.heads
    return GRAPH_MODELS[name](in_channels=in_dim, hidden_channels=cfg.hidden,
                              num_layers=cfg.num_layers, out_channels=num_classes,
                              dropout=cfg.dropout, jk=None if cfg.jk == "none" else cfg.jk,
                              **kwargs)
