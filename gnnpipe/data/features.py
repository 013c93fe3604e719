"""Feature normalization (``features.normalize``): fitted once by the split stage into
``data/features/transform.pt`` (gnnpipe/io/features.py), applied identically by every reader of
node features that feeds a model (train, baseline, propagate, predict), through
``gnnpipe.splitting.inputs.model_features``.

- ``none``: ``apply`` returns ``x`` itself (the memory-mapped tensor stays zero-copy).
- ``row``: exactly PyG's ``T.NormalizeFeatures``: ``x - x.min()`` (ONE minimum over the whole
  feature matrix of all nodes, stored), then each row divided by its sum clamped to >= 1 (so an
  all-zero row stays zero, and a row summing to less than 1 is left unscaled, as in PyG).
- ``standardize``: per column ``(x - mean) / std`` with the mean and the population std
  (ddof 0, like scikit-learn's ``StandardScaler``) of the **train nodes only**, accumulated in
  float64 over row blocks (two passes: the mean, then squared deviations); a column with std 0
  gets std 1.

Which nodes the statistics come from (``fit_rows``): the train nodes of a node split; on a typed
graph the target type's train nodes, and **all nodes** of every other type (they carry no labels
and are in no split, so no val/test statistic can leak through them); the link task (edges are
held out, every node's features are visible to training) all nodes. ``row``'s minimum is, as in
PyG, over all nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from gnnpipe.data.graph import HOMOGENEOUS, ROLES
from gnnpipe.io.features import FEATURE_KINDS, read_features, write_features

BLOCK_ROWS = 65_536


@dataclass(frozen=True, eq=False)
class FeatureTransform:
    """``kind`` none | row | standardize; ``stats`` the fitted tensors (row: ``min`` float32 ();
    standardize: ``mean``, ``std`` float32 (F,)); ``fitted_on`` none | train | all and ``nodes``
    the rows the statistics came from; ``num_features`` the width it was fitted on (None: any)."""

    kind: str = "none"
    stats: dict = field(default_factory=dict)
    num_features: int | None = None
    fitted_on: str = "none"
    nodes: int = 0

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """Rows of features (M, F) -> normalized float32 (M, F); ``none`` returns ``x`` itself.
        Row-wise, so any subset of rows (a shard, a batch) gets what the whole matrix would."""
        if self.num_features is not None and x.dim() == 2 and x.shape[1] != self.num_features:
            raise ValueError(f"features.normalize={self.kind} was fitted on "
                             f"{self.num_features} features, the input has {x.shape[1]}; "
                             "re-run the split stage")
        if self.kind == "none":
            return x
        x = x.float()
        if x.numel() == 0:  # PyG skips empty tensors
            return x.clone()
        if self.kind == "row":  # torch_geometric.transforms.NormalizeFeatures, op for op
            value = x - self.stats["min"]
            value.div_(value.sum(dim=-1, keepdim=True).clamp_(min=1.))
            return value
        value = x - self.stats["mean"]
        return value.div_(self.stats["std"])

    def entry(self) -> dict:
        """The artifact entry (gnnpipe/io/features.py)."""
        return {"num_features": int(self.num_features or 0), "fitted_on": self.fitted_on,
                "nodes": int(self.nodes), **self.stats}


def fit(kind: str, x: torch.Tensor, rows: np.ndarray | None,
        block_rows: int = BLOCK_ROWS) -> FeatureTransform:
    """Fit ``kind`` on ``x`` (N, F), possibly memory-mapped: ``rows`` the node ids the column
    statistics may use (ascending int), None = all nodes. Reads ``x`` in row blocks."""
    if kind not in FEATURE_KINDS:
        raise ValueError(f"features.normalize must be one of {', '.join(FEATURE_KINDS)}, "
                         f"found {kind!r}")
    n, width = int(x.shape[0]), int(x.shape[1])
    if kind == "none":
        return FeatureTransform("none", {}, width, "none", 0)
    if kind == "row":  # PyG: value - value.min(), the minimum over every entry of the tensor
        lows = [x[lo:lo + block_rows].float().min()  # no entry at all: a minimum of 0
                for lo in range(0, n if width else 0, block_rows)]
        low = torch.stack(lows).min() if lows else torch.zeros((), dtype=torch.float32)
        return FeatureTransform("row", {"min": low.reshape(())}, width, "all", n)
    ids = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64)
    count = int(ids.size)
    total = torch.zeros(width, dtype=torch.float64)
    for block in _blocks(x, ids, block_rows):
        total += block.sum(dim=0)
    mean = total / max(count, 1)
    squares = torch.zeros(width, dtype=torch.float64)
    for block in _blocks(x, ids, block_rows):
        squares += (block - mean).square().sum(dim=0)
    std = (squares / max(count, 1)).sqrt()
    std = std.to(torch.float32)  # 0 (a constant column, or float32 underflow) -> 1
    std = torch.where(std > 0, std, torch.ones_like(std))
    return FeatureTransform("standardize", {"mean": mean.to(torch.float32), "std": std}, width,
                            "all" if rows is None else "train", count)


def _blocks(x: torch.Tensor, ids: np.ndarray, block_rows: int):
    """float64 row blocks ``x[ids[i:i + block_rows]]`` (one block's copy at a time)."""
    for lo in range(0, ids.size, block_rows):
        chunk = ids[lo:lo + block_rows]
        if chunk.size and chunk[-1] - chunk[0] == chunk.size - 1:  # contiguous: a view
            yield x[int(chunk[0]):int(chunk[-1]) + 1].to(torch.float64)
        else:
            yield x[torch.from_numpy(chunk)].to(torch.float64)


def fit_rows(roles: np.ndarray | None) -> np.ndarray | None:
    """The nodes column statistics may use: the train nodes of ``roles`` (N,), str names or
    int8 codes of ``ROLES`` (None: all nodes)."""
    if roles is None:
        return None
    roles = np.asarray(roles)
    return np.flatnonzero(roles == (ROLES.index("train") if roles.dtype == np.int8 else "train"))


def fit_graph(kind: str, x: torch.Tensor, roles: np.ndarray | None) -> dict[str, FeatureTransform]:
    """A homogeneous graph: ``{"": transform}``; ``roles`` None for the link task (all nodes)."""
    return {"": fit(kind, x, fit_rows(roles))}


def fit_split(kind: str, graph, roles: np.ndarray | None) -> dict[str, FeatureTransform]:
    """The transforms of ``graph``'s (a ``Graph``) files: ``fit_graph`` for a homogeneous
    layout; typed files one per node type: the target's train nodes (``roles`` None: link task,
    all of them), every other type all its nodes."""
    if graph.layout == HOMOGENEOUS:
        return fit_graph(kind, graph.x[graph.target], roles)
    return {t: fit(kind, x, fit_rows(roles) if t == graph.target else None)
            for t, x in graph.x.items()}


def audit_entry(kind: str, transforms: dict[str, FeatureTransform]) -> dict:
    """What metrics/split_audit.json says about the fit."""
    if list(transforms) == [""]:
        fitted = transforms[""]
        return {"normalize": fitted.kind, "fitted_on": fitted.fitted_on, "nodes": fitted.nodes}
    return {"normalize": kind,
            "rule": "target type: its train nodes (the link task: all); other node types: all "
                    "their nodes (no labels, no split)" if kind == "standardize" else
                    "row: per node, PyG's global minimum over all nodes of the type"
                    if kind == "row" else "nothing fitted",
            "node_types": {t: {"fitted_on": tr.fitted_on, "nodes": tr.nodes}
                           for t, tr in transforms.items()}}


def write_transforms(out: Path, kind: str, transforms: dict[str, FeatureTransform]) -> None:
    write_features(out, kind, {t: tr.entry() for t, tr in transforms.items()},
                   typed=list(transforms) != [""])


def read_transform(features_dir, node_type: str | None = None,
                   num_features: int | None = None) -> FeatureTransform:
    """The fitted transform in ``features_dir`` (data/features), of ``node_type`` on typed
    graphs; ``num_features`` (the reader's feature width) is checked against the artifact."""
    payload = read_features(Path(features_dir))
    path = Path(features_dir) / "transform.pt"
    kind, typed = payload["meta"]["kind"], bool(payload["meta"]["typed"])
    if typed != (node_type is not None):
        raise ValueError(f"{path}: fitted on a {'typed' if typed else 'homogeneous'} graph, read "
                         f"for a {'typed' if node_type is not None else 'homogeneous'} one; "
                         "re-run the split stage")
    entry = payload["node_types"].get(node_type or "")
    if entry is None:
        raise ValueError(f"{path}: no node type {node_type!r} (has "
                         f"{', '.join(payload['node_types'])}); re-run the split stage")
    if num_features is not None and entry["num_features"] != num_features:
        raise ValueError(f"{path}: fitted on {entry['num_features']} features"
                         f"{f' of {node_type!r}' if node_type else ''}, the graph has "
                         f"{num_features}; re-run the split stage")
    stats = {k: v for k, v in entry.items() if isinstance(v, torch.Tensor)}
    return FeatureTransform(kind, stats, entry["num_features"], entry["fitted_on"],
                            entry["nodes"])


class ModelFeatures:
    """x as the models read it (N, F), computed for the rows asked for: ``source`` (a
    ``gnnpipe.io.rows.FeatureSource``, the stored matrix, memory-mapped) through ``transform``,
    in ``dtype`` (float32; bfloat16 to feed autocast from bfloat16 storage without a float32
    copy). ``features[ids]`` / ``features[a:b]`` gather, cast and normalize those rows only: the
    same values as normalizing the whole matrix and indexing it (``apply`` is row-wise).
    ``materialize()`` builds the whole (N, F) tensor, for the code paths that need it."""

    def __init__(self, source, transform: FeatureTransform, dtype: torch.dtype = torch.float32):
        self.source, self.transform, self.dtype = source, transform, dtype

    @property
    def shape(self) -> torch.Size:
        return self.source.shape

    def __len__(self) -> int:
        return int(self.source.shape[0])

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def __getitem__(self, index) -> torch.Tensor:
        """Rows ``index`` (int64 (B,) or a slice) -> (B, F) in ``dtype``."""
        rows = self.source.rows(index)  # (B, F) as stored
        if self.transform.kind == "none" and rows.dtype == self.dtype:
            return rows
        return self.transform.apply(rows).to(self.dtype)

    def float(self) -> torch.Tensor:
        return self.materialize(torch.float32)

    def materialize(self, dtype: torch.dtype | None = None,
                    block_rows: int = BLOCK_ROWS) -> torch.Tensor:
        """The whole (N, F) matrix in ``dtype`` (default: ``self.dtype``), built in row blocks
        (N x F x itemsize bytes: only where a whole-graph forward needs it)."""
        n = len(self)
        out = torch.empty(n, self.shape[1], dtype=dtype or self.dtype)
        for lo in range(0, n, block_rows):
            out[lo:lo + block_rows] = self[lo:lo + block_rows]
        return out
