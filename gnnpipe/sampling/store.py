"""PyG's remote backend over gnnpipe's graphs: a ``FeatureStore`` and a ``GraphStore``.

PyG's ``NodeLoader`` / ``LinkLoader`` (so ``NeighborLoader`` / ``LinkNeighborLoader``) accept
``data=(feature_store, graph_store)`` instead of a ``Data``: the sampler reads the structure
from the graph store once, and every batch gathers its rows from the feature store
(``multi_get_tensor`` with ``index`` = the batch's node ids). Here:

- ``GnnpipeFeatureStore``: tensors keyed ``(group_name, attr_name)`` (``group_name`` None on a
  homogeneous graph, the node type on a typed one), as PyG's ``MyFeatureStore``: a put with
  ``index=None`` stores rows ``0..n-1``; a put with an index stores the rows of those node ids,
  and a get with an index returns the rows of the ids asked, in that order (a missing id is a
  KeyError). ``from_graph`` / ``from_hetero`` hold the graph's ``x`` and ``y`` as they are, so
  a graph read with ``mmap=True`` (``open_prepared``) stays memory-mapped: a get of ``k`` rows
  reads those rows and returns a fresh ``(k, F)`` tensor, never the whole matrix.
  ``from_source`` (and ``open_prepared`` of a homogeneous graph) holds ``x`` as a
  ``gnnpipe.io.rows.FeatureSource``: a get of ``k`` rows is ``FeatureSource.rows`` (one
  ``pread`` per row, float32), so the file never enters the resident set; ``read_node_rows``
  is how each ``train.dist.shard: partition`` rank reads the rows of its shards' nodes
  through it.
- ``CsrGraphStore``: edge indices keyed ``(edge_type, layout)``, each with its ``EdgeAttr``
  (``size``, ``is_sorted``); a get in a layout that was not put is a KeyError (as PyG's
  ``MyGraphStore``; ``csr()`` / ``csc()`` / ``coo()`` convert, PyG's own code). A gnnpipe
  ``Csr`` (row ``v`` = the sources of the edges into ``v``) is PyG's CSC as it is:
  ``from_csr`` / ``from_typed`` put ``(indices, indptr)`` in layout ``csc`` without a copy, so
  ``csc()`` gives edge ids = CSR positions (``Csr.edge_index()`` order).

``CsrNeighborSampler((fs, gs), ...)`` and ``HeteroNeighborSampler.from_stores((fs, gs), ...)``
read any pair of stores (PyG's ``MyFeatureStore`` / ``MyGraphStore`` too) through
``csc_of_stores`` / ``typed_csc_of_stores``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Mapping, Optional

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, FeatureStore, GraphStore, TensorAttr
from torch_geometric.data import remote_backend_utils
from torch_geometric.data.graph_store import EdgeLayout
from torch_geometric.index import index2ptr, ptr2index

from gnnpipe import io
from gnnpipe.data.graph import HOMOGENEOUS, Csr, EdgeType, Graph, TargetView
from gnnpipe.io.rows import FeatureSource, GraphRows, open_node_source

Key = tuple[Optional[str], Optional[str]]


# ------------------------------------------------------------------------------ features
class GnnpipeFeatureStore(FeatureStore):
    """Node features by ``(group_name, attr_name)``; see the module docstring."""

    def __init__(self):
        super().__init__()
        self._tensors: dict[Key, Tensor] = {}  # rows in the order of ``_ids`` (None: 0..n-1)
        self._ids: dict[Key, Optional[np.ndarray]] = {}  # sorted node ids of the rows, or None
        self._order: dict[Key, Optional[np.ndarray]] = {}  # row of each sorted id

    @classmethod
    def from_graph(cls, graph: TargetView) -> "GnnpipeFeatureStore":
        """``x`` (N, F) and ``y`` (N,) of a homogeneous graph's view, group ``None``, not
        copied."""
        store = cls()
        store.put_tensor(graph.x, group_name=None, attr_name="x", index=None)
        store.put_tensor(graph.y, group_name=None, attr_name="y", index=None)
        return store

    @classmethod
    def from_source(cls, source: FeatureSource, y: Tensor) -> "GnnpipeFeatureStore":
        """``x`` (N, F) read through ``source`` (gets of rows: float32 copies, nothing of the
        file resident) and ``y`` (N,), group ``None``."""
        store = cls()
        store.put_tensor(source, group_name=None, attr_name="x", index=None)
        store.put_tensor(y, group_name=None, attr_name="y", index=None)
        return store

    @classmethod
    def from_hetero(cls, graph: Graph) -> "GnnpipeFeatureStore":
        """``x`` of every node type (group = the type) and ``y`` of the target type."""
        store = cls()
        for node_type, x in graph.x.items():
            store.put_tensor(x, group_name=node_type, attr_name="x", index=None)
        store.put_tensor(graph.y, group_name=graph.target, attr_name="y", index=None)
        return store

    # ------------------------------------------------------------------------ PyG interface
    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        tensor = torch.from_numpy(tensor) if isinstance(tensor, np.ndarray) else tensor
        key = (attr.group_name, attr.attr_name)
        index = attr.index
        if index is None or _whole(index):
            self._tensors[key], self._ids[key], self._order[key] = tensor, None, None
            return True
        if isinstance(tensor, FeatureSource):
            raise ValueError(f"put_tensor of {key}: a FeatureSource holds rows 0..n-1; "
                             "put it with index=None")
        ids = _ids_of(index, tensor.shape[0])
        if ids.size != tensor.shape[0]:
            raise ValueError(f"put_tensor of {key}: {ids.size} node ids for "
                             f"{tensor.shape[0]} rows")
        order = np.argsort(ids, kind="stable")
        if ids.size > 1 and (ids[order][1:] == ids[order][:-1]).any():
            raise ValueError(f"put_tensor of {key}: the index repeats node ids")
        self._tensors[key], self._ids[key], self._order[key] = tensor, ids[order], order
        return True

    def _get_tensor(self, attr: TensorAttr) -> Tensor:
        key = (attr.group_name, attr.attr_name)
        if key not in self._tensors:
            raise KeyError(f"Could not find tensor for '{attr}'")
        tensor, index = self._tensors[key], attr.index
        if isinstance(tensor, FeatureSource):  # pread of the rows asked for, as the model reads
            if index is None or _whole(index):
                return tensor.x.float()  # the memory map itself when stored as float32
            one = isinstance(index, (int, np.integer))
            ids = np.array([int(index)]) if one else _ids_of(index, self._size(key)[0])
            rows = tensor.rows(torch.from_numpy(self._rows(key, ids))).float()
            return rows[0] if one else rows
        if index is None or _whole(index):
            return tensor  # the stored tensor itself (a memory map stays one)
        if isinstance(index, (int, np.integer)):
            return tensor[self._rows(key, np.array([int(index)]))[0]]
        ids = _ids_of(index, self._size(key)[0])
        # index_select reads only the rows asked for: a fresh (k, ...) tensor
        return tensor.index_select(0, torch.from_numpy(self._rows(key, ids)))

    def _rows(self, key: Key, ids: np.ndarray) -> np.ndarray:
        """Row of each node id in ``ids`` (k,), or a KeyError naming one that has none."""
        stored = self._ids[key]
        if stored is None:
            rows, n = ids, self._tensors[key].shape[0]
            bad = (rows < 0) | (rows >= n)
        else:
            at = np.minimum(np.searchsorted(stored, ids), max(stored.size - 1, 0))
            bad = stored[at] != ids if stored.size else np.ones(ids.size, dtype=bool)
            rows = self._order[key][at] if stored.size else ids
        if bad.any():
            raise KeyError(f"no rows of {key} for node id {int(ids[np.argmax(bad)])}")
        return np.ascontiguousarray(rows, dtype=np.int64)

    def _size(self, key: Key) -> tuple[int, ...]:
        tensor = self._tensors[key]
        rows = tensor.shape[0] if self._ids[key] is None else self._ids[key].size
        return (rows, *tensor.shape[1:])

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        key = (attr.group_name, attr.attr_name)
        self._ids.pop(key, None)
        self._order.pop(key, None)
        return self._tensors.pop(key, None) is not None

    def _get_tensor_size(self, attr: TensorAttr) -> Optional[tuple[int, ...]]:
        """The stored tensor's size (``index`` None) or that of the rows ``index`` selects;
        None when there is no such tensor."""
        key = (attr.group_name, attr.attr_name)
        if key not in self._tensors:
            return None
        size = self._size(key)
        if attr.index is None or _whole(attr.index):
            return size
        if isinstance(attr.index, (int, np.integer)):
            return size[1:]
        return (_ids_of(attr.index, size[0]).size, *size[1:])

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        return [TensorAttr(group, name) for group, name in self._tensors]

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}()"


def _whole(index) -> bool:
    return isinstance(index, slice) and index == slice(None, None, None)


def _ids_of(index, num_rows: int) -> np.ndarray:
    """Node ids (k,) int64 of a Tensor / ndarray / list / slice index (bool: a mask)."""
    if isinstance(index, slice):
        return np.arange(num_rows, dtype=np.int64)[index]
    ids = index.numpy() if isinstance(index, Tensor) else np.asarray(index)
    if ids.dtype == bool:
        return np.flatnonzero(ids)
    return np.ascontiguousarray(ids.reshape(-1), dtype=np.int64)


# --------------------------------------------------------------------------------- edges
class CsrGraphStore(GraphStore):
    """Edge indices by ``(edge_type, layout)``; see the module docstring."""

    def __init__(self):
        super().__init__()
        self._edges: dict[tuple, tuple[EdgeAttr, tuple[Tensor, Tensor]]] = {}

    @classmethod
    def from_csr(cls, csr: Csr) -> "CsrGraphStore":
        """A homogeneous graph: edge type None, CSC ``(indices, indptr)``, size (N, N)."""
        store = cls()
        store.put_edge_index((csr.indices, csr.indptr), edge_type=None, layout="csc",
                             size=(csr.num_nodes, csr.num_nodes))
        return store

    @classmethod
    def from_typed(cls, num_nodes: Mapping[str, int],
                   csr: Mapping[EdgeType, Csr]) -> "CsrGraphStore":
        """One CSC per edge type ``(src, rel, dst)``, size ``(N_src, N_dst)``, in ``csr``'s
        order (the order the sampler visits them)."""
        store = cls()
        for edge_type, graph in csr.items():
            src, _, dst = edge_type
            store.put_edge_index((graph.indices, graph.indptr), edge_type=tuple(edge_type),
                                 layout="csc", size=(int(num_nodes[src]), int(num_nodes[dst])))
        return store

    @classmethod
    def from_hetero(cls, graph: Graph) -> "CsrGraphStore":
        return cls.from_typed(graph.num_nodes_dict, graph.csr)

    # ------------------------------------------------------------------------ PyG interface
    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        if not isinstance(edge_index, (tuple, list)) or len(edge_index) != 2:
            raise ValueError(f"put_edge_index of {edge_attr.edge_type!r}: expected a pair "
                             "(row, col) of 1-D tensors")
        row, col = (torch.as_tensor(v) for v in edge_index)
        _check_layout(row, col, edge_attr)
        self._edges[(edge_attr.edge_type, edge_attr.layout)] = (edge_attr, (row, col))
        return True

    def _get_edge_index(self, edge_attr: EdgeAttr):
        found = self._edges.get((edge_attr.edge_type, edge_attr.layout))
        if found is None:
            return None
        stored, edge_index = found
        if edge_attr.size is not None and stored.size is not None and (
                tuple(edge_attr.size) != tuple(stored.size)):
            return None  # another size is another edge set
        return edge_index

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        return self._edges.pop((edge_attr.edge_type, edge_attr.layout), None) is not None

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        return [EdgeAttr(a.edge_type, a.layout, a.is_sorted, a.size)
                for a, _ in self._edges.values()]

    def _edge_to_layout(self, attr: EdgeAttr, layout: EdgeLayout, store: bool = False):
        """PyG's conversion, except CSC -> CSR, which sorts stably: each source keeps its
        out-edges in CSC order, as gnnpipe's ``transpose_csr`` (PyG's sort is not stable)."""
        if attr.layout != EdgeLayout.CSC or layout != EdgeLayout.CSR:
            return super()._edge_to_layout(attr, layout, store)
        row, colptr = self.get_edge_index(attr)
        num_rows = attr.size[0] if attr.size is not None else int(row.max()) + 1
        perm = torch.sort(row, stable=True).indices
        rowptr, col = index2ptr(row[perm], num_rows), ptr2index(colptr)[perm]
        if store:
            self.put_edge_index((rowptr, col), EdgeAttr(attr.edge_type, EdgeLayout.CSR,
                                                        False, attr.size))
        return rowptr, col, perm


def _check_layout(row: Tensor, col: Tensor, attr: EdgeAttr) -> None:
    """One-line ValueErrors for a pair that cannot be ``attr.layout`` of ``attr.size``."""
    what = f"put_edge_index of {attr.edge_type!r} ({attr.layout.value})"
    if row.dim() != 1 or col.dim() != 1:
        raise ValueError(f"{what}: row and col must be 1-D")
    ptr, other, side = {EdgeLayout.CSR: (row, col, 0), EdgeLayout.CSC: (col, row, 1)}.get(
        attr.layout, (None, None, None))
    if ptr is None:
        if row.numel() != col.numel():
            raise ValueError(f"{what}: row has {row.numel()} entries, col {col.numel()}")
        return
    if attr.size is not None and ptr.numel() != attr.size[side] + 1:
        raise ValueError(f"{what}: the pointer has {ptr.numel()} entries; size {attr.size} "
                         f"needs {attr.size[side] + 1}")
    if ptr.numel() == 0 or int(ptr[-1]) != other.numel():
        raise ValueError(f"{what}: the pointer must end at the {other.numel()} edges")


# ------------------------------------------------------------------------- for the samplers
def check_stores(data) -> tuple[FeatureStore, GraphStore]:
    """``data`` as a ``(FeatureStore, GraphStore)`` pair, or a one-line ValueError."""
    if (not isinstance(data, (tuple, list)) or len(data) != 2
            or not isinstance(data[0], FeatureStore) or not isinstance(data[1], GraphStore)):
        raise ValueError("expected data=(FeatureStore, GraphStore), as PyG's remote backend")
    if not data[1].get_all_edge_attrs():
        raise ValueError("the GraphStore holds no edge_index")
    return data[0], data[1]


def stores_are_typed(data) -> bool:
    """Whether the graph store of ``data`` (checked as ``check_stores``) holds typed edges."""
    return any(attr.edge_type is not None for attr in check_stores(data)[1].get_all_edge_attrs())


def times_of_stores(data, time_attr: str) -> dict[str, object]:
    """The sampler's ``node_time`` or ``edge_time`` from the feature store's tensors named
    ``time_attr``, read as PyG's ``NeighborSampler`` reads them: on a homogeneous graph the one
    such tensor, node-level when ``time_attr`` is ``"time"``, else edge-level; on a typed graph
    per group, node types (str) -> ``node_time``, edge types (tuples) -> ``edge_time``. Edge
    times come (E,) in the stored edge order. None found, or both kinds: a ValueError."""
    feature_store, _ = check_stores(data)
    attrs = [copy.copy(a) for a in feature_store.get_all_tensor_attrs()
             if a.attr_name == time_attr]
    for attr in attrs:
        attr.index = None  # every row
    if not stores_are_typed(data):
        if len(attrs) != 1:
            raise ValueError(f"time_attr={time_attr!r}: the FeatureStore holds {len(attrs)} "
                             "tensors of that name; temporal sampling needs exactly one")
        key = "node_time" if time_attr == "time" else "edge_time"  # PyG decides by the name
        return {key: feature_store.get_tensor(attrs[0])}
    times = {a.group_name if isinstance(a.group_name, str) else tuple(a.group_name):
             feature_store.get_tensor(a) for a in attrs}
    kinds = {isinstance(group, str) for group in times}
    if len(kinds) != 1:
        raise ValueError(f"time_attr={time_attr!r} names " + (
            "no tensor of the FeatureStore" if not kinds else "node and edge tensors both"))
    return {"node_time" if kinds.pop() else "edge_time": times}


def csc_of_stores(data, to_transpose: bool = False
                  ) -> tuple[Tensor, Tensor, Optional[Tensor]]:
    """A homogeneous graph as PyG's ``to_csc`` gives it: ``colptr`` int64 (N + 1,), ``row``
    int64 (E,) (the sources of each target's in-edges) and the stored edge id of each position
    (E,), or None when they are the same; from ``graph_store.csc()``, or with ``to_transpose``
    from ``graph_store.csr()`` (out-edges; what PyG's sampler reads for backward sampling).

    The number of nodes: the edge attribute's ``size``, else the rows of the first feature
    tensor, else the pointer's own length.
    """
    feature_store, graph_store = check_stores(data)
    attrs = graph_store.get_all_edge_attrs()
    if stores_are_typed(data):
        raise ValueError("the GraphStore holds typed edges (edge_type is set): use "
                         "HeteroNeighborSampler.from_stores")
    if to_transpose:  # the pointer runs over sources, the indices are targets
        colptr, row, perm = graph_store.csr()
    else:
        row, colptr, perm = graph_store.csc()
    size = attrs[0].size
    if size is not None:
        num_nodes = max(size)
    else:
        sizes = [feature_store.get_tensor_size(a) for a in feature_store.get_all_tensor_attrs()]
        num_nodes = next((s[0] for s in sizes if s), colptr.numel() - 1)
    return _pad(colptr, num_nodes), row.long(), None if perm is None else perm.long()


def typed_csc_of_stores(data) -> tuple[dict[str, int], dict[EdgeType, Csr],
                                       dict[EdgeType, Optional[Tensor]]]:
    """A typed graph's sizes per node type, in-edge ``Csr`` per edge type (in the graph
    store's order) and stored edge id of each CSC position per edge type (None: the same).

    Node types: the feature store's groups in order, then edge endpoints without features;
    sizes as PyG reads them (``remote_backend_utils.num_nodes``).
    """
    feature_store, graph_store = check_stores(data)
    edge_types = []
    for attr in graph_store.get_all_edge_attrs():
        if attr.edge_type is None:
            raise ValueError("the GraphStore holds a homogeneous edge_index (edge_type None): "
                             "use CsrNeighborSampler((feature_store, graph_store), ...)")
        if tuple(attr.edge_type) not in edge_types:
            edge_types.append(tuple(attr.edge_type))
    node_types = []
    groups = [a.group_name for a in feature_store.get_all_tensor_attrs()]
    for t in groups + [t for e in edge_types for t in (e[0], e[2])]:
        if isinstance(t, str) and t not in node_types:
            node_types.append(t)
    num_nodes = {t: int(remote_backend_utils.num_nodes(feature_store, graph_store, t))
                 for t in node_types}
    row, colptr, perm = graph_store.csc(edge_types)
    csr = {e: Csr(_pad(colptr[e], num_nodes[e[2]]), row[e].long()) for e in edge_types}
    return num_nodes, csr, {e: None if perm[e] is None else perm[e].long() for e in edge_types}


def _pad(ptr: Tensor, num_rows: int) -> Tensor:
    """``ptr`` as int64 (num_rows + 1,): a CSC converted from COO ends at its last target."""
    ptr = ptr.long()
    if ptr.numel() < num_rows + 1:
        ptr = torch.cat([ptr, ptr[-1:].expand(num_rows + 1 - ptr.numel())])
    return ptr


def open_prepared(prepared: Path) -> tuple[GnnpipeFeatureStore, CsrGraphStore]:
    """The stores of a prepared graph folder, ``graph.pt`` memory-mapped (homogeneous or
    typed, by the types its ``graph.json`` lists); a homogeneous graph's ``x`` through a
    ``FeatureSource`` (x in graph.pt or features_node.npy, any stored dtype; gets are float32)."""
    graph = io.read_graph(prepared, mmap=True, stored_x=True)
    if graph.layout != HOMOGENEOUS:  # typed files: stores keyed by type
        return GnnpipeFeatureStore.from_hetero(graph), CsrGraphStore.from_hetero(graph)
    view = graph.target_view()
    source = FeatureSource(view.x, mapped=True)
    return GnnpipeFeatureStore.from_source(source, view.y), CsrGraphStore.from_csr(view.csr)


def read_node_rows(prepared: Path, node_ids: Tensor, block_rows: int = 65_536) -> GraphRows:
    """What a ``train.dist.shard: partition`` rank holds: rows ``x[node_ids]`` float32 (L, F)
    (``node_ids`` int64 (L,), distinct, ascending) got from the feature store of ``prepared``
    (x read by pread: the file is never resident, only the rows), and their labels int64 (L,)
    (from the mapped file: no array of every node). The CSR is not read (a rank's edges are its
    partition shards)."""
    source, y, num_classes = open_node_source(prepared)
    store = GnnpipeFeatureStore.from_source(source, y)
    num_nodes, num_features = source.shape
    if node_ids.numel() and (node_ids.min() < 0 or node_ids.max() >= num_nodes
                             or bool((node_ids[1:] <= node_ids[:-1]).any())):
        raise ValueError(f"{Path(prepared) / 'graph.pt'}: node ids must be distinct, ascending "
                         f"and in [0, {num_nodes})")
    x = torch.empty(node_ids.numel(), num_features, dtype=torch.float32)
    # one block of rows in the stored dtype at a time, besides x
    for lo in range(0, node_ids.numel(), block_rows):
        x[lo:lo + block_rows] = store.get_tensor(None, "x", index=node_ids[lo:lo + block_rows])
    return GraphRows(num_nodes=num_nodes, num_classes=num_classes, x=x, y=y[node_ids])
