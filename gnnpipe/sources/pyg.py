"""``dataset.source: pyg``: a saved PyG ``Data``, read with ``torch.load(weights_only=True)``.

Accepted payloads: a ``Data`` object, its ``to_dict()``, or the ``(dict, slices[, cls])`` tuple
``InMemoryDataset.save`` writes (``processed/data.pt``) when it holds a single graph. Only the
classes a plain ``Data`` pickles (``Data``, its storage and attribute classes) are allowed; any
other object in the file fails the load. ``x`` (N, F), ``y`` (N,) or (N, 1) and ``edge_index``
(2, E) are required; ``train_mask`` / ``val_mask`` / ``test_mask`` become the public split
(for (N, K) masks, as WikiCS has, column 0).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from gnnpipe.config import DatasetParams
from gnnpipe.sources.base import RawGraph, check_finite, reason, roles_from_masks

MASKS = {"train": "train_mask", "val": "val_mask", "test": "test_mask"}


def _safe_globals() -> list:
    from torch_geometric.data import Data
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    return [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage]


def load(path: Path) -> object:
    if path.is_dir():
        raise ValueError(f"dataset.path={str(path)!r} is a directory; expected a file "
                         f"(dataset.source=pyg reads one file written by torch.save(data, path))")
    if not path.is_file():
        raise ValueError(f"dataset.path={str(path)!r}: file not found; dataset.source=pyg reads "
                         f"one file written by torch.save(data, path)")
    try:
        with torch.serialization.safe_globals(_safe_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        lines = [line.strip() for line in str(err).splitlines() if "GLOBAL" in line]
        detail = lines[0][:200] if lines else reason(err)  # names the refused class
        raise ValueError(f"{path}: holds objects other than a PyG Data, refused by "
                         f"weights_only=True loading ({detail})") from None
    except Exception as err:  # torch.load fails in many ways on a file it did not write
        raise ValueError(f"{path}: not a file written by torch.save ({reason(err)})") from None


def _as_mapping(obj: object, path: Path) -> dict:
    from torch_geometric.data import Data

    if isinstance(obj, Data):
        return {key: obj[key] for key in obj.keys()}
    if isinstance(obj, tuple) and len(obj) in (2, 3) and isinstance(obj[0], dict):
        slices = obj[1] if isinstance(obj[1], dict) else {}
        cuts = slices.get("x")
        if isinstance(cuts, torch.Tensor) and cuts.numel() > 2:
            raise ValueError(f"{path}: an InMemoryDataset of {cuts.numel() - 1} graphs; the pyg "
                             f"source reads a single graph")
        return obj[0]
    if isinstance(obj, dict):
        return obj
    raise ValueError(f"{path}: holds a {type(obj).__name__}; dataset.source=pyg reads a "
                     f"torch_geometric.data.Data (or its to_dict()) with x, y and edge_index")


def _tensor(mapping: dict, key: str, path: Path) -> torch.Tensor:
    value = mapping.get(key)
    if not isinstance(value, torch.Tensor):
        found = ", ".join(map(str, mapping)) or "nothing"
        raise ValueError(f"{path}: missing tensor {key!r} (found: {found})")
    return value


def read(cfg: DatasetParams) -> RawGraph:
    path = Path(cfg.path)
    mapping = _as_mapping(load(path), path)
    x, y, edge_index = (_tensor(mapping, key, path) for key in ("x", "y", "edge_index"))
    if x.layout != torch.strided or x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"{path}: 'x' must be a dense float tensor (N, F), found "
                         f"{x.dtype} {tuple(x.shape)} ({x.layout})")
    n = x.shape[0]
    if y.dim() == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.shape != (n,) or y.is_floating_point() or y.dtype == torch.bool:
        raise ValueError(f"{path}: 'y' must hold one integer class per node, shape ({n},), found "
                         f"{y.dtype} {tuple(y.shape)}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.is_floating_point():
        raise ValueError(f"{path}: 'edge_index' must be an integer tensor (2, E), found "
                         f"{edge_index.dtype} {tuple(edge_index.shape)}")
    x_np = x.float().numpy()
    check_finite(x_np, path, ["x"], "feature")
    masks = {}
    for role, key in MASKS.items():
        mask = mapping.get(key)
        if mask is None:
            continue
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape[0] != n \
                or mask.dim() not in (1, 2):
            raise ValueError(f"{path}: {key!r} must be a bool tensor ({n},) or ({n}, K)")
        masks[role] = (mask if mask.dim() == 1 else mask[:, 0]).numpy()
    public = roles_from_masks(masks, str(path)) if masks else None
    src, dst = edge_index.long().numpy()
    return RawGraph.homogeneous(x_np, y.long().numpy(), np.ascontiguousarray(src),
                                np.ascontiguousarray(dst), str(path), public_roles=public)
