"""gnnpipe's MLP is PyG's ``MLP(norm=None)`` byte for byte: parameters from the same seed,
outputs with dropout in training, gradients, the last hidden, under the same names."""

import pytest
import torch
from torch_geometric.nn import MLP as PygMLP

from gnnpipe.training.mlp import MLP


@pytest.mark.parametrize("num_layers", [1, 2, 3])
def test_mlp_is_pygs_byte_for_byte(num_layers):
    kwargs = dict(in_channels=7, hidden_channels=5, out_channels=3, num_layers=num_layers,
                  dropout=0.5, norm=None)
    torch.manual_seed(0)
    ours = MLP(**kwargs)
    after_ours = torch.rand(1)  # the generator's state after building: the same draws
    torch.manual_seed(0)
    pyg = PygMLP(**kwargs)
    assert torch.equal(torch.rand(1), after_ours)
    assert ours.state_dict().keys() == pyg.state_dict().keys()
    for name, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[name], value), name
    x = torch.randn(11, 7)
    outs = []
    for model in (ours, pyg):
        model.train()
        torch.manual_seed(1)  # the same dropout masks
        out = model(x)
        out.square().sum().backward()
        model.eval()
        outs.append((out.detach(), [p.grad for p in model.parameters()],
                     model(x, return_emb=True)))
    (o1, g1, (e1, h1)), (o2, g2, (e2, h2)) = outs
    assert torch.equal(o1, o2) and all(torch.equal(a, b) for a, b in zip(g1, g2))
    assert torch.equal(e1, e2)
    assert (h1 is None and h2 is None) if num_layers == 1 else torch.equal(h1, h2)
