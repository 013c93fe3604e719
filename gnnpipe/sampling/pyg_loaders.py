"""PyG's subgraph loaders under PyG's names and arguments, without torch-sparse or pyg-lib.

A PyG training script switches by changing its import line only::

    from gnnpipe.sampling.pyg_loaders import (ClusterData, ClusterLoader, GraphSAINTNodeSampler,
        GraphSAINTEdgeSampler, GraphSAINTRandomWalkSampler, HGTLoader, LinkNeighborLoader,
        NeighborLoader, ShaDowKHopSampler)

- ``GraphSAINT{Node,Edge,RandomWalk}Sampler(data, batch_size, ...)``: DataLoaders of
  ``num_steps`` subgraphs, as PyG's: nodes ascending by id, edges sorted by (source, target),
  every node-level and edge-level attribute of ``data`` gathered, ``node_norm`` / ``edge_norm``
  from PyG's ``_compute_norm`` when ``sample_coverage > 0``. Sampling rules:
  ``gnnpipe.sampling.saint``, except the edge sampler's weights, which follow PyG's code
  (``in_deg(u) + out_deg(v)``, not the paper's ``1/out_deg(u) + 1/in_deg(v)``); the random
  walks start at uniform nodes and follow out-edges, as PyG's. Randomness from torch's global
  RNG, as PyG's (one draw per subgraph).
- ``ClusterData``: PyG's own class, METIS through pymetis (or the ``parts`` you pass: e.g. the
  partition stage's), so ``keep_inter_cluster_edges`` and PyG's ``ClusterLoader`` (re-exported
  here, unchanged, with ``shuffle`` and ``batch_size``) behave exactly as PyG's.
- ``ShaDowKHopSampler(data, depth, num_neighbors, node_idx, replace, **kwargs)``: PyG's ``Batch``
  layout (``gnnpipe.sampling.shadow.pyg_layout``) over gnnpipe's sampler.
- ``HGTLoader(data, num_samples, input_nodes, ...)``: PyG's ``NodeLoader`` on
  ``gnnpipe.sampling.hetero.HeteroBudgetSampler`` with PyG's batch layout: the node attributes,
  ``n_id``, and ``input_id`` / ``batch_size`` on the input type; no ``num_sampled_nodes``.
- ``NeighborLoader`` / ``LinkNeighborLoader``: PyG's classes (same arguments) whose sampler, unless
  ``neighbor_sampler`` is given, is gnnpipe's (``neighbor_sampler_for``, PyG's
  ``NeighborSampler`` arguments): ``CsrNeighborSampler`` for a ``Data`` or homogeneous
  ``(FeatureStore, GraphStore)``, ``HeteroNeighborSampler`` for a ``HeteroData`` or typed stores
  (``gnnpipe.sampling.store``); seeded from torch's global RNG. ``subgraph_type`` is PyG's
  ``SubgraphType`` or its name.

Refused (NotImplementedError, listed in docs/samplers.md): a ``Data`` holding ``adj_t`` instead of
``edge_index``, except a torch-sparse ``SparseTensor`` in the neighbor loaders (PyG's code reads
it; PyG's ShaDow reads it too, this one does not); stores in ``HGTLoader`` (as PyG's).

gnnpipe extras in every batch: ``n_id`` (global node ids) and ``e_id`` (columns of the user's
``data.edge_index``), unless ``data`` already has attributes of those names.
"""

from __future__ import annotations

import os.path as osp

import numpy as np
import torch
import torch_geometric.loader as pyg_loader
from torch_geometric.data import Data, HeteroData
from torch_geometric.io import fs
from torch_geometric.loader import ClusterLoader, NodeLoader
from torch_geometric.sampler import HeteroSamplerOutput, NodeSamplerInput
from torch_geometric.sampler.base import SubgraphType
from torch_geometric.sampler.utils import to_csc
from torch_geometric.typing import SparseTensor

from gnnpipe.config import PartitionParams
from gnnpipe.data.graph import Csr
from gnnpipe.data.edges import csr_from_edges
from gnnpipe.graphops.partition import assign_parts
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sampling.hetero import HeteroBudgetSampler
from gnnpipe.sampling.neighbor import CsrNeighborSampler, HeteroNeighborSampler
from gnnpipe.sampling.saint import (MAX_EDGE_NORM, ZERO_COUNT, SaintEdgeSampler, SaintNodeSampler,
                                    SaintSampler)
from gnnpipe.sampling.shadow import ShadowKHopSampler, pyg_layout
from gnnpipe.sampling.store import stores_are_typed, times_of_stores, typed_csc_of_stores
from gnnpipe.sampling.subgraph import subgraph_type_name

__all__ = ["ClusterData", "ClusterLoader", "GraphSAINTEdgeSampler", "GraphSAINTNodeSampler",
           "GraphSAINTRandomWalkSampler", "GraphSAINTSampler", "HGTLoader", "LinkNeighborLoader",
           "NeighborLoader", "PygSaintEdgeSampler", "ShaDowKHopSampler", "neighbor_sampler_for"]


def refuse_adj_t(data, loader: str, sparse_tensor_ok: bool = False) -> None:
    """NotImplementedError for a graph given as ``adj_t`` instead of ``edge_index``, unless
    ``sparse_tensor_ok`` and ``adj_t`` is a torch-sparse ``SparseTensor`` (which PyG's
    ``to_csc`` reads; only possible with torch-sparse installed)."""
    if getattr(data, "edge_index", None) is not None or "adj_t" not in data:
        return
    if sparse_tensor_ok and isinstance(data.adj_t, SparseTensor):
        return
    unless = " unless adj_t is a torch-sparse SparseTensor" if sparse_tensor_ok else ""
    raise NotImplementedError(f"{loader} on a graph with adj_t ({type(data.adj_t).__name__}) "
                              f"instead of edge_index is not supported by gnnpipe's drop-in"
                              f"{unless}; give data.edge_index, see docs/samplers.md")


def _csr_of(data: Data, loader: str = "this loader") -> tuple[Csr, np.ndarray]:
    """In-edge CSR of ``data`` and, per CSR position, its column in ``data.edge_index`` (E,)."""
    refuse_adj_t(data, loader)
    if getattr(data, "edge_index", None) is None:
        raise ValueError(f"{loader} needs data.edge_index")
    indptr, indices, perm = to_csc(data, device="cpu")
    perm = np.arange(indices.numel()) if perm is None else perm.numpy()
    return Csr(indptr.long(), indices.long()), perm


# ------------------------------------------------------------------------------ GraphSAINT
class GraphSAINTSampler(torch.utils.data.DataLoader):
    """PyG's ``GraphSAINTSampler`` (same arguments); subclasses pick the node sampler."""

    def __init__(self, data: Data, batch_size: int, num_steps: int = 1, sample_coverage: int = 0,
                 save_dir: str | None = None, log: bool = True, **kwargs):
        kwargs.pop("dataset", None)  # as PyG: PyTorch Lightning passes these
        kwargs.pop("collate_fn", None)
        if "node_norm" in data or "edge_norm" in data:
            raise ValueError("data already has node_norm / edge_norm: the sampler writes them")
        self.num_steps, self._batch_size = num_steps, batch_size
        self.sample_coverage, self.save_dir, self.log = sample_coverage, save_dir, log
        self.N, self.E = data.num_nodes, data.num_edges
        self.data = data
        self.csr, self.perm = _csr_of(data, type(self).__name__)
        self.subgraphs = self._make_sampler()  # not "sampler": the DataLoader owns that name
        super().__init__(self, batch_size=1, collate_fn=self._collate, **kwargs)
        if sample_coverage > 0:
            path = osp.join(save_dir or "", self._filename)
            if save_dir is not None and osp.exists(path):
                self.node_norm, self.edge_norm = fs.torch_load(path)
            else:
                self.node_norm, self.edge_norm = self._compute_norm()
                if save_dir is not None:
                    torch.save((self.node_norm, self.edge_norm), path)

    def _make_sampler(self):
        raise NotImplementedError

    @property
    def _filename(self) -> str:
        return f"{self.__class__.__name__.lower()}_{self.sample_coverage}.pt"

    def __len__(self) -> int:
        return self.num_steps

    def __getitem__(self, idx: int):
        """``n_id`` (B,) ascending, ``edge_index`` (2, E') local sorted by (source, target) and
        ``e_id`` (E',) columns of ``data.edge_index``; one draw of torch's RNG seeds it."""
        rng = np.random.default_rng(int(torch.randint(2**62, ())))
        n_id, (src, dst), pos = self.subgraphs.sample(rng, ordered=False)
        order = np.argsort(src * n_id.size + dst, kind="stable")
        return (torch.from_numpy(n_id), torch.from_numpy(np.stack([src[order], dst[order]])),
                torch.from_numpy(self.perm[pos[order]]))

    def _collate(self, data_list) -> Data:
        (n_id, edge_index, e_id), = data_list
        out = self.data.__class__()
        out.num_nodes = n_id.numel()
        out.edge_index = edge_index
        for key, item in self.data:
            if key in ("edge_index", "num_nodes"):
                continue
            if isinstance(item, torch.Tensor) and item.size(0) == self.N:
                out[key] = item[n_id]
            elif isinstance(item, torch.Tensor) and item.size(0) == self.E:
                out[key] = item[e_id]
            else:
                out[key] = item
        if self.sample_coverage > 0:
            out.node_norm = self.node_norm[n_id]
            out.edge_norm = self.edge_norm[e_id]
        if "n_id" not in self.data:
            out.n_id = n_id
        if "e_id" not in self.data:
            out.e_id = e_id
        return out

    def _compute_norm(self) -> tuple[torch.Tensor, torch.Tensor]:
        """PyG's ``_compute_norm``: passes of ``num_steps`` subgraphs until they hold
        ``sample_coverage * N`` nodes; ``node_norm = S / C_v / N`` and ``edge_norm[e] =
        C_{source(e)} / C_e`` (clipped to [0, 1e4], 0 / 0 = 0.1), float32 (N,), (E,)."""
        node_count = np.zeros(self.N, dtype=np.int64)
        edge_count = np.zeros(self.E, dtype=np.int64)
        num_samples = total = 0
        while total < self.N * self.sample_coverage:
            for _ in range(self.num_steps):
                n_id, _, e_id = self[0]
                node_count[n_id.numpy()] += 1
                edge_count[e_id.numpy()] += 1
                total += n_id.numel()
            num_samples += self.num_steps
        nodes, edges = torch.from_numpy(node_count).float(), torch.from_numpy(edge_count).float()
        edge_norm = (nodes[self.data.edge_index[0]] / edges).clamp_(0, MAX_EDGE_NORM)
        edge_norm[torch.isnan(edge_norm)] = ZERO_COUNT
        nodes[nodes == 0] = ZERO_COUNT
        return num_samples / nodes / self.N, edge_norm


class GraphSAINTNodeSampler(GraphSAINTSampler):
    """PyG's ``GraphSAINTNodeSampler``: ``batch_size`` nodes drawn with probability
    proportional to their out-degree (sources of uniform edges), with replacement."""

    def _make_sampler(self):
        return SaintNodeSampler(self.csr, self._batch_size, self.N)


class GraphSAINTEdgeSampler(GraphSAINTSampler):
    """PyG's ``GraphSAINTEdgeSampler``: both endpoints of ``batch_size`` edges ``u -> v``,
    each drawn (with replacement) with probability proportional to PyG's
    ``1 / deg_in[u] + 1 / deg_out[v]`` where PyG's ``deg_in = 1 / in-degree`` and
    ``deg_out = 1 / out-degree`` are already inverted: ``in_deg(u) + out_deg(v) + 1e-10``.
    (The GraphSAINT paper's ``1 / out_deg(u) + 1 / in_deg(v)`` is ``train.saint.sampler:
    edge``.)"""

    def _make_sampler(self):
        return PygSaintEdgeSampler(self.csr, self._batch_size, self.N)


class PygSaintEdgeSampler(SaintEdgeSampler):
    """``SaintEdgeSampler`` with the edge weights of PyG 2.8's ``GraphSAINTEdgeSampler``
    (``torch_geometric/loader/graph_saint.py``): ``prob[u -> v] = in_deg(u) + out_deg(v) +
    1e-10`` (E,), unnormalised (PyG's float32 rounding aside)."""

    def __init__(self, csr: Csr, batch_size: int, num_loss_nodes: int):
        super().__init__(csr, batch_size, num_loss_nodes)
        in_deg = np.diff(self.indptr)  # (N,): PyG's adj.storage.colcount()
        out_deg = np.bincount(self.indices, minlength=self.num_nodes)  # (N,): rowcount()
        self.prob = in_deg[self.indices] + out_deg[self.targets] + 1e-10  # PyG's "+ 1e-10"
        self._cdf = np.cumsum(self.prob)


class GraphSAINTRandomWalkSampler(GraphSAINTSampler):
    """PyG's ``GraphSAINTRandomWalkSampler``: ``batch_size`` uniform roots, one walk of
    ``walk_length`` steps along out-edges from each."""

    def __init__(self, data: Data, batch_size: int, walk_length: int, num_steps: int = 1,
                 sample_coverage: int = 0, save_dir: str | None = None, log: bool = True,
                 **kwargs):
        self.walk_length = walk_length
        super().__init__(data, batch_size, num_steps, sample_coverage, save_dir, log, **kwargs)

    @property
    def _filename(self) -> str:
        return (f"{self.__class__.__name__.lower()}_{self.walk_length}_"
                f"{self.sample_coverage}.pt")

    def _make_sampler(self):
        src, dst = self.data.edge_index.numpy()
        out_edges = csr_from_edges(dst, src, self.N)  # row u lists the targets of u's out-edges
        return SaintSampler(self.csr, torch.arange(self.N), self._batch_size, self.walk_length,
                            walk_csr=out_edges)


# ------------------------------------------------------------------------------- ClusterGCN
class ClusterData(pyg_loader.ClusterData):
    """PyG's ``ClusterData`` (same arguments), partitioned by pymetis instead of torch-sparse /
    pyg-lib, or by ``parts`` (int (N,), e.g. ``io.read_partition`` of the partition stage).

    ``recursive=True`` is refused (gnnpipe's METIS runs k-way). ``self.data`` gains ``n_id``
    and ``e_id`` (unless ``data`` has them), so ``cluster_data[i]`` and ``ClusterLoader`` batches
    say which nodes and which columns of the user's ``edge_index`` they hold.
    """

    def __init__(self, data: Data, num_parts: int, recursive: bool = False,
                 save_dir: str | None = None, filename: str | None = None, log: bool = True,
                 keep_inter_cluster_edges: bool = False, sparse_format: str = "csr", *,
                 parts: np.ndarray | torch.Tensor | None = None, seed: int = 0):
        if recursive:
            raise ValueError("ClusterData(recursive=True): gnnpipe partitions with k-way METIS "
                             "(pymetis); use recursive=False or pass parts=")
        refuse_adj_t(data, "ClusterData")
        self._parts, self._seed = parts, seed
        data = data.clone()
        for key, size in (("n_id", data.num_nodes), ("e_id", data.num_edges)):
            if key not in data:
                data[key] = torch.arange(size)
        super().__init__(data, num_parts, recursive, save_dir, filename, log,
                         keep_inter_cluster_edges, sparse_format)

    def _metis(self, edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
        if self._parts is not None:
            parts = torch.as_tensor(np.asarray(self._parts), dtype=torch.long)
            if parts.shape != (num_nodes,) or parts.min() < 0 or parts.max() >= self.num_parts:
                raise ValueError(f"parts must give each of the {num_nodes} nodes a part in "
                                 f"[0, {self.num_parts})")
            return parts
        src, dst = edge_index.numpy()
        parts = assign_parts(csr_from_edges(src, dst, num_nodes),
                             PartitionParams(num_parts=self.num_parts, backend="pymetis"),
                             make_rng(self._seed, "partition"))
        return torch.from_numpy(parts.astype(np.int64))


# ----------------------------------------------------------------------------------- ShaDow
class ShaDowKHopSampler(NodeLoader):
    """PyG's ``ShaDowKHopSampler(data, depth, num_neighbors, node_idx, replace, **kwargs)``:
    a ``Batch`` of one induced subgraph per node of ``node_idx`` (None: all; bool or ids),
    with ``batch``, ``ptr``, ``root_n_id`` and ``y`` of the roots only. ``kwargs`` go to the
    DataLoader (``batch_size``, ``shuffle`` (default False, as PyG's), ``num_workers``, ...).
    Sampling draws from torch's global RNG at construction (``seed=`` fixes it)."""

    def __init__(self, data: Data, depth: int, num_neighbors: int,
                 node_idx: torch.Tensor | None = None, replace: bool = False,
                 seed: int | None = None, **kwargs):
        _csr_of(data, "ShaDowKHopSampler")  # the one-line errors for a Data without edge_index
        sampler = ShadowKHopSampler(data, depth, num_neighbors, replace=replace, seed=seed)
        kwargs.pop("transform", None)
        super().__init__(data, node_sampler=sampler, input_nodes=node_idx,
                         transform=pyg_layout, **kwargs)


# --------------------------------------------------------------------------------------- HGT
class PygHgtSampler(HeteroBudgetSampler):
    """``HeteroBudgetSampler`` with the output of PyG's ``HGTSampler``: no
    ``num_sampled_nodes``, so the batches carry no per-type attribute PyG's lack."""

    def sample_from_nodes(self, inputs: NodeSamplerInput, **kwargs) -> HeteroSamplerOutput:
        out = super().sample_from_nodes(inputs, **kwargs)
        out.num_sampled_nodes = None
        return out


class HGTLoader(NodeLoader):
    """PyG's ``HGTLoader(data, num_samples, input_nodes, is_sorted, transform,
    transform_sampler_output, filter_per_worker, **kwargs)`` on ``PygHgtSampler``: per node
    type ``x``..., ``n_id`` and, on the input type, ``input_id`` and ``batch_size`` (seeds
    first); per edge type ``edge_index`` local and ``e_id``. ``num_samples``: one list for
    every node type or a dict node type -> list (the same number of hops each). Draws from
    torch's global RNG, as PyG's; a ``(FeatureStore, GraphStore)`` is refused, as PyG's.
    ``is_sorted`` changes nothing here (the CSC is built sorted)."""

    def __init__(self, data: HeteroData, num_samples, input_nodes, is_sorted: bool = False,
                 transform=None, transform_sampler_output=None,
                 filter_per_worker: bool | None = None, **kwargs):
        if not isinstance(data, HeteroData):  # PyG's HGTSampler refuses Data and stores alike
            raise NotImplementedError(f"HGTLoader does not support a data object of type "
                                      f"{type(data)}.")
        sampler = PygHgtSampler.from_hetero_data(data, num_samples)
        super().__init__(data, node_sampler=sampler, input_nodes=input_nodes,
                         transform=transform, transform_sampler_output=transform_sampler_output,
                         filter_per_worker=filter_per_worker, **kwargs)


# ------------------------------------------------------------------------------- neighbors
def neighbor_sampler_for(data, num_neighbors, *, replace: bool = False,
                         subgraph_type: SubgraphType | str = "directional",
                         disjoint: bool = False, temporal_strategy: str = "uniform",
                         time_attr: str | None = None, weight_attr: str | None = None,
                         is_sorted: bool = False, share_memory: bool = False,
                         directed: bool = True, sample_direction: str = "forward"):
    """gnnpipe's sampler where PyG builds ``NeighborSampler(data, ...)`` (same arguments):
    ``CsrNeighborSampler`` for a ``Data`` or homogeneous stores, ``HeteroNeighborSampler``
    for a ``HeteroData`` or typed stores. ``time_attr`` on stores is read as PyG reads it
    (``store.times_of_stores``); ``weight_attr`` on stores raises NotImplementedError, as PyG's.
    ``is_sorted`` and ``share_memory`` change nothing here (the CSC is built sorted, in this
    process's memory)."""
    options = dict(replace=replace, disjoint=disjoint, temporal_strategy=temporal_strategy,
                   subgraph_type="induced" if not directed else subgraph_type_name(subgraph_type),
                   sample_direction=sample_direction)
    if isinstance(data, HeteroData):
        for edge_type in data.edge_types:
            refuse_adj_t(data[edge_type], f"NeighborSampler {edge_type}", sparse_tensor_ok=True)
        return HeteroNeighborSampler.from_hetero_data(data, num_neighbors, time_attr=time_attr,
                                                      weight_attr=weight_attr, **options)
    if isinstance(data, Data):
        refuse_adj_t(data, "NeighborSampler", sparse_tensor_ok=True)
        if time_attr is not None:  # as PyG: a node-level or an edge-level attribute
            if data.is_node_attr(time_attr):
                options["node_time"] = data[time_attr]
            elif data.is_edge_attr(time_attr):
                options["edge_time"] = data[time_attr]
            else:
                raise ValueError(f"The time attribute '{time_attr}' is neither a node-level or "
                                 "edge-level attribute")
        return CsrNeighborSampler(data, num_neighbors, weight_attr=weight_attr, **options)
    if time_attr is not None:  # stored edge order: CsrNeighborSampler re-orders, typed below
        options.update(times_of_stores(data, time_attr))
    if not stores_are_typed(data):
        return CsrNeighborSampler(data, num_neighbors, weight_attr=weight_attr, **options)
    if weight_attr is not None:
        raise NotImplementedError("'weight_attr' argument not yet supported within "
                                  "'HeteroNeighborSampler' for '(FeatureStore, GraphStore)' "
                                  "inputs")
    num_nodes, csr, perm = typed_csc_of_stores(data)
    if "edge_time" in options:  # stored edge order -> CSC positions
        options["edge_time"] = {e: t if perm.get(e) is None else t[perm[e]]
                                for e, t in options["edge_time"].items()}
    return HeteroNeighborSampler(num_nodes, csr, num_neighbors, edge_permutation=perm,
                                 **options)


class NeighborLoader(pyg_loader.NeighborLoader):
    """PyG's ``NeighborLoader`` (same arguments) on ``neighbor_sampler_for``'s sampler."""

    def __init__(self, data, num_neighbors, input_nodes=None, input_time=None,
                 replace: bool = False, subgraph_type: SubgraphType | str = "directional",
                 disjoint: bool = False, temporal_strategy: str = "uniform",
                 time_attr: str | None = None, weight_attr: str | None = None, transform=None,
                 transform_sampler_output=None, is_sorted: bool = False,
                 filter_per_worker: bool | None = None, neighbor_sampler=None,
                 directed: bool = True, **kwargs):
        if neighbor_sampler is None:
            neighbor_sampler = neighbor_sampler_for(
                data, num_neighbors, replace=replace, subgraph_type=subgraph_type,
                disjoint=disjoint, temporal_strategy=temporal_strategy, time_attr=time_attr,
                weight_attr=weight_attr, directed=directed)
        super().__init__(data, num_neighbors, input_nodes, input_time, replace, subgraph_type,
                         disjoint, temporal_strategy, time_attr, weight_attr, transform,
                         transform_sampler_output, is_sorted, filter_per_worker,
                         neighbor_sampler, **kwargs)


class LinkNeighborLoader(pyg_loader.LinkNeighborLoader):
    """PyG's ``LinkNeighborLoader`` (same arguments) on ``neighbor_sampler_for``'s sampler."""

    def __init__(self, data, num_neighbors, edge_label_index=None, edge_label=None,
                 edge_label_time=None, replace: bool = False,
                 subgraph_type: SubgraphType | str = "directional", disjoint: bool = False,
                 temporal_strategy: str = "uniform", neg_sampling=None,
                 neg_sampling_ratio=None, time_attr: str | None = None,
                 weight_attr: str | None = None, transform=None, transform_sampler_output=None,
                 is_sorted: bool = False, filter_per_worker: bool | None = None,
                 neighbor_sampler=None, directed: bool = True, **kwargs):
        if neighbor_sampler is None:
            neighbor_sampler = neighbor_sampler_for(
                data, num_neighbors, replace=replace, subgraph_type=subgraph_type,
                disjoint=disjoint, temporal_strategy=temporal_strategy, time_attr=time_attr,
                weight_attr=weight_attr, directed=directed)
        super().__init__(data, num_neighbors, edge_label_index, edge_label, edge_label_time,
                         replace, subgraph_type, disjoint, temporal_strategy, neg_sampling,
                         neg_sampling_ratio, time_attr, weight_attr, transform,
                         transform_sampler_output, is_sorted, filter_per_worker,
                         neighbor_sampler, **kwargs)
