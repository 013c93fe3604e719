"""Mini-batch samplers behind PyG's sampler interface, and which backend runs them.

``CsrNeighborSampler`` is gnnpipe's own vectorized sampler; when pyg-lib is importable it hands
the work to PyG's ``NeighborSampler`` (which calls ``torch.ops.pyg.neighbor_sample``), except for
``induced`` subgraphs, which pyg-lib does not build. ``neighbor_loader`` wraps it in PyG's
``NodeLoader`` as configured by the ``train:`` params. ``HeteroNeighborSampler`` is the typed
(``HeteroData``) counterpart, always gnnpipe's NumPy code; ``hetero_neighbor_loader`` /
``hetero_link_neighbor_loader`` are PyG's ``NeighborLoader`` / ``LinkNeighborLoader`` on it, and
``TypedSupervisionLoader`` / ``typed_link_loader`` its leak-free link training batches.
"""

from gnnpipe.sampling.backend import BACKENDS, pyg_lib_available, resolve_backend
from gnnpipe.sampling.hetero_neighbor import (
    HeteroNeighborSampler,
    hetero_link_neighbor_loader,
    hetero_neighbor_loader,
)
from gnnpipe.sampling.hetero_link import TypedSupervisionLoader, typed_link_loader
from gnnpipe.sampling.loader import neighbor_loader
from gnnpipe.sampling.neighbor import CsrNeighborSampler
from gnnpipe.sampling.pick import pick_edges

__all__ = ["BACKENDS", "CsrNeighborSampler", "HeteroNeighborSampler", "TypedSupervisionLoader",
           "hetero_link_neighbor_loader", "hetero_neighbor_loader", "neighbor_loader",
           "pick_edges", "pyg_lib_available", "resolve_backend", "typed_link_loader"]
