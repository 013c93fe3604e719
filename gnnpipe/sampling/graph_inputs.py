"""The graphs gnnpipe's neighbor samplers accept, as the CSR arrays they sample.

``CsrNeighborSampler`` takes a ``gnnpipe.data.graph.Csr``, a PyG ``Data`` or PyG's remote
backend ``(FeatureStore, GraphStore)`` (``homogeneous_input``); ``HeteroNeighborSampler
.from_hetero_data`` a PyG ``HeteroData`` (``hetero_data_input``). Both convert to CSC once, as
PyG's sampler does, keep the permutation back to the caller's edge order, and re-order per-edge
weights and times to CSR order.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler.utils import to_csc, to_hetero_csc

from gnnpipe.data.graph import Csr
from gnnpipe.sampling.edge_plan import check_weights
from gnnpipe.sampling.store import csc_of_stores
from gnnpipe.sampling.typed_csr import EdgeType


class HomogeneousInput(NamedTuple):
    """``csr`` (in-edges per node, or out-edges when ``transposed``), ``perm`` (E,) the
    caller's edge id of each CSR position (None: the CSR order is the caller's), and the edge
    weights / times in CSR order (or None)."""

    csr: Csr
    perm: Optional[Tensor]
    transposed: bool
    edge_weight: Optional[np.ndarray | Tensor]
    edge_time: Optional[np.ndarray | Tensor]


def homogeneous_input(graph: Csr | Data | tuple, *, backward: bool, sampler: str,
                      weight_attr: str | None = None, edge_weight=None,
                      edge_time=None) -> HomogeneousInput:
    """``graph`` as the arrays ``CsrNeighborSampler`` samples (its arguments of the same
    names). A ``Data`` or stores are read transposed for ``backward`` (PyG's
    ``to_transpose``; a ``Csr`` is transposed by the plan); ``sampler`` names the class in
    PyG's refusal of ``weight_attr`` on stores."""
    perm, transposed = None, False
    if isinstance(graph, (tuple, list)):  # PyG's remote backend: (FeatureStore, GraphStore)
        if weight_attr is not None:  # as PyG's NeighborSampler, same exception
            raise NotImplementedError("'weight_attr' argument not yet supported within "
                                      f"'{sampler}' for '(FeatureStore, GraphStore)' inputs; "
                                      "pass edge_weight")
        # (backward: graph_store.csr(), as PyG); perm: position -> stored edge id
        indptr, indices, perm = csc_of_stores(graph, to_transpose=backward)
        transposed = backward
    elif isinstance(graph, Csr):
        if weight_attr is not None:
            raise ValueError(f"weight_attr={weight_attr!r} names a Data edge attribute; "
                             "for a Csr pass edge_weight (E,) in CSR order")
        indptr, indices = graph.indptr, graph.indices
    else:  # PyG Data: colptr over targets, row = sources, perm back to data.edge_index order
        # (backward: rowptr over sources, col = targets, as PyG's to_transpose)
        indptr, indices, perm = to_csc(graph, device="cpu", to_transpose=backward)
        transposed = backward
        if weight_attr is not None:
            if edge_weight is not None:
                raise ValueError("give weight_attr or edge_weight, not both")
            if weight_attr not in graph:
                raise ValueError(f"weight_attr={weight_attr!r} is not an attribute of the "
                                 "graph")
            edge_weight = graph[weight_attr]
    csr = Csr(torch.as_tensor(indptr), torch.as_tensor(indices))
    if perm is not None:  # edge_index order -> CSR order
        order = perm.numpy()
        if edge_weight is not None:
            edge_weight = check_weights(edge_weight, order.size)[order]
        if edge_time is not None and np.shape(edge_time) == order.shape:
            edge_time = np.asarray(edge_time)[order]
    return HomogeneousInput(csr, perm, transposed, edge_weight, edge_time)


def hetero_data_input(data: HeteroData, time_attr: str | None = None,
                      weight_attr: str | None = None):
    """``data`` as ``HeteroNeighborSampler`` arguments: ``num_nodes``, ``csr`` (CSC per edge
    type), ``edge_permutation`` and a dict of the ``edge_weight`` / ``node_time`` /
    ``edge_time`` that ``weight_attr`` / ``time_attr`` name (edge-level ones in CSR order).

    ``time_attr`` names a node-level or edge-level attribute, as ``NeighborLoader``'s;
    ``weight_attr`` an edge-level one (edge types without it are sampled uniformly, as PyG).
    """
    colptr, row, perm = to_hetero_csc(data, device="cpu")
    csr = {e: Csr(colptr[e], row[e]) for e in data.edge_types if e in colptr}
    num_nodes = {t: data[t].num_nodes for t in data.node_types}
    options: dict[str, dict] = {}

    def csr_order(values: dict[EdgeType, Tensor]) -> dict[EdgeType, Tensor]:
        return {e: v if perm.get(e) is None else v[perm[e]] for e, v in values.items()}

    if weight_attr is not None:
        weight = {e: data[e][weight_attr] for e in data.edge_types if weight_attr in data[e]}
        if not weight:
            raise ValueError(f"weight_attr={weight_attr!r} is not an attribute of any edge "
                             "type")
        options["edge_weight"] = csr_order(weight)
    if time_attr is not None:
        node_time = {t: data[t][time_attr] for t in data.node_types if time_attr in data[t]}
        edge_time = {e: data[e][time_attr] for e in data.edge_types if time_attr in data[e]}
        if node_time and edge_time:
            raise ValueError(f"time_attr={time_attr!r} is both a node-level and an "
                             "edge-level attribute")
        if not node_time and not edge_time:
            raise ValueError(f"time_attr={time_attr!r} is neither a node-level nor an "
                             "edge-level attribute")
        if node_time:
            options["node_time"] = node_time
        else:
            options["edge_time"] = csr_order(edge_time)
    return num_nodes, csr, perm, options
