"""Mini-batch samplers behind PyG's sampler interface, and which backend runs them.

``HeteroNeighborSampler`` is gnnpipe's own vectorized neighbor sampler and
``CsrNeighborSampler`` its homogeneous case; when pyg-lib is importable the homogeneous one hands
the work to PyG's ``NeighborSampler`` (which calls ``torch.ops.pyg.neighbor_sample``), except for
``induced`` subgraphs, which pyg-lib does not build. ``neighbor_loader`` wraps it in PyG's
``NodeLoader`` as configured by the ``train:`` params; ``hetero_neighbor_loader`` /
``hetero_link_neighbor_loader`` are PyG's ``NeighborLoader`` / ``LinkNeighborLoader`` on it, and
``SupervisionLoader`` / ``typed_link_loader`` its leak-free link training batches.

Exports load on first use (PEP 562): importing one module of the package (the data-only
``table`` the params rules read, the ``batch`` type) loads no sampler and no PyG.
"""

import importlib

_EXPORTS = {
    "BACKENDS": "backend", "pyg_lib_available": "backend", "resolve_backend": "backend",
    "HeteroNeighborSampler": "neighbor", "hetero_link_neighbor_loader": "loader",
    "hetero_neighbor_loader": "loader", "SupervisionLoader": "link",
    "typed_link_loader": "link", "neighbor_loader": "loader",
    "CsrNeighborSampler": "neighbor", "pick_edges": "pick",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gnnpipe.sampling' has no attribute {name!r}")
    return getattr(importlib.import_module(f"gnnpipe.sampling.{_EXPORTS[name]}"), name)
