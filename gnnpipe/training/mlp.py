"""The MLP of every structure-free model (the baseline, ``train.model: mlp``, SIGN's head, the
typed MLP), in torch alone: the baseline stage then starts without PyG and its
``torch._dynamo`` chain (about 2 s; issue 46).

It is PyG's ``torch_geometric.nn.MLP`` with ``norm=None`` (ReLU after every hidden layer, then
dropout; a plain last layer), parameter for parameter: the same ``lins.<i>.weight`` / ``bias``
names, the same random draws at construction (each ``Linear`` draws its init, then the MLP
draws them all once more, as PyG's does) and the same operations in the same order, so a model
and its outputs are byte-identical to PyG's (tests/training/test_mlp.py checks it against PyG).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Module):
    """PyG's ``Linear`` with its default init: weight (out, in) Kaiming-uniform with
    ``a = sqrt(5)`` and bias (out,) uniform in ``±1/sqrt(in)``, both drawn by PyG's formulas
    (``torch_geometric.nn.inits``: the bounds must be computed the same way to be the same
    floats). ``in_channels`` must be known (no lazy ``-1``)."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels))
        self.bias = nn.Parameter(torch.empty(out_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        a = math.sqrt(5)
        bound = math.sqrt(6 / ((1 + a**2) * self.in_channels))  # inits.kaiming_uniform
        self.weight.data.uniform_(-bound, bound)
        bound = 1.0 / math.sqrt(self.in_channels)  # inits.uniform
        self.bias.data.uniform_(-bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)  # (B, in) -> (B, out)


class MLP(nn.Module):
    """``num_layers`` linear maps ``in_channels -> hidden_channels ... -> out_channels``; ReLU
    and dropout after each but the last. PyG's keyword arguments (``norm`` must be None)."""

    def __init__(self, *, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int, dropout: float = 0.0, norm: None = None):
        super().__init__()
        assert norm is None, "gnnpipe's MLP has no normalisation layers"
        channels = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.lins = nn.ModuleList(Linear(i, o) for i, o in zip(channels[:-1], channels[1:]))
        self.dropout = [float(dropout)] * (num_layers - 1) + [0.0]  # plain last layer
        self.reset_parameters()  # PyG's MLP draws every layer's init a second time

    def reset_parameters(self) -> None:
        for lin in self.lins:
            lin.reset_parameters()

    def forward(self, x: torch.Tensor, return_emb: bool | None = None):
        """``x`` (B, in) -> (B, out); with ``return_emb=True`` also the last hidden (B, hidden)
        (None with one layer), as PyG's."""
        emb = None
        for lin, p in zip(self.lins[:-1], self.dropout):
            x = F.dropout(F.relu(lin(x)), p=p, training=self.training)
            emb = x if return_emb is True else None
        x = F.dropout(self.lins[-1](x), p=self.dropout[-1], training=self.training)
        return (x, emb) if isinstance(return_emb, bool) else x


class FeatureMLP(nn.Module):
    """The MLP on node features that accepts and ignores ``edge_index``."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int, dropout: float):
        super().__init__()
        self.mlp = MLP(in_channels=in_dim, hidden_channels=hidden, out_channels=out_dim,
                       num_layers=num_layers, dropout=dropout, norm=None)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        return self.mlp(x)
