"""``data/features/transform.pt``: the fitted feature normalization (``features.normalize``).

One payload, homogeneous or typed::

    {"schema": "gnnpipe.features/1",
     "meta": {"kind": "none" | "row" | "standardize", "typed": 0 | 1},
     "node_types": {name: {"num_features": F, "fitted_on": "none" | "train" | "all",
                           "nodes": n,                      # rows the statistics came from
                           "min": float32 ()                # row only: PyG's global minimum
                           "mean": float32 (F,), "std": float32 (F,)}}}  # standardize only

``name`` is the node type on typed graphs and ``""`` on a homogeneous graph. Written and read
with ``weights_only=True``; the reader checks the tag, the kind, every entry's keys, dtypes
and shapes (F = the feature width), and refuses anything else with one line.
"""

from __future__ import annotations

from pathlib import Path

import torch

from gnnpipe.io.tensors import load_tensors, save_payload

__all__ = ["FEATURES_SCHEMA", "FEATURE_KINDS", "write_features", "read_features"]

FEATURES_SCHEMA = "gnnpipe.features/1"
FEATURE_KINDS = ("none", "row", "standardize")
FITTED_ON = ("none", "train", "all")
# kind -> the tensors an entry holds: name -> rank (0: a scalar, 1: one value per feature)
TENSORS = {"none": {}, "row": {"min": 0}, "standardize": {"mean": 1, "std": 1}}


def write_features(out: Path, kind: str, entries: dict[str, dict], typed: bool) -> None:
    """``out/transform.pt`` (``out`` is usually an ``atomic_dir``)."""
    payload = {"schema": FEATURES_SCHEMA, "meta": {"kind": kind, "typed": int(typed)},
               "node_types": {name: {k: (v.contiguous() if isinstance(v, torch.Tensor) else v)
                                     for k, v in entry.items()}
                              for name, entry in entries.items()}}
    _check(Path(out) / "transform.pt", payload)
    save_payload(Path(out) / "transform.pt", payload)


def read_features(features: Path) -> dict:
    """The checked payload of ``features/transform.pt``."""
    path = Path(features) / "transform.pt"
    if not path.exists():
        raise ValueError(f"{path}: file not found; run the split stage (it fits "
                         "features.normalize) first")
    payload = load_tensors(path, FEATURES_SCHEMA, {})  # readable, its schema, a meta mapping
    _check(path, payload)
    return payload


def _check(path: Path, payload: dict) -> None:
    """The checks of a payload with the schema tag and a meta mapping (``load_tensors``)."""
    meta = payload["meta"]
    kind = meta.get("kind")
    if kind not in FEATURE_KINDS:
        raise ValueError(f"{path}: meta.kind must be one of {', '.join(FEATURE_KINDS)}, "
                         f"found {kind!r}")
    if meta.get("typed") not in (0, 1):
        raise ValueError(f"{path}: meta.typed must be 0 or 1, found {meta.get('typed')!r}")
    types = payload.get("node_types")
    if not isinstance(types, dict) or not types or (not meta["typed"] and list(types) != [""]):
        raise ValueError(f"{path}: 'node_types' must map each node type (\"\" on a homogeneous "
                         "graph) to its fitted statistics")
    for name, entry in types.items():
        where = f"{path}: node type {name!r}" if name else f"{path}:"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} entry must be a mapping, found {type(entry).__name__}")
        width, nodes = entry.get("num_features"), entry.get("nodes")
        if not isinstance(width, int) or width < 0 or not isinstance(nodes, int) or nodes < 0:
            raise ValueError(f"{where} num_features and nodes must be ints >= 0, found "
                             f"{width!r} and {nodes!r}")
        if entry.get("fitted_on") not in FITTED_ON:
            raise ValueError(f"{where} fitted_on must be one of {', '.join(FITTED_ON)}, found "
                             f"{entry.get('fitted_on')!r}")
        wanted = TENSORS[kind]
        extra = set(entry) - {"num_features", "fitted_on", "nodes", *wanted}
        if extra:
            raise ValueError(f"{where} unexpected keys {sorted(extra)} for kind {kind!r}")
        for key, rank in wanted.items():
            tensor = entry.get(key)
            shape = (width,) * rank
            if (not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float32
                    or tuple(tensor.shape) != shape):
                found = (f"{tensor.dtype} {tuple(tensor.shape)}" if isinstance(tensor, torch.Tensor)
                         else type(tensor).__name__)
                raise ValueError(f"{where} {key!r} must be a float32 tensor of shape {shape} "
                                 f"(the feature width), found {found}")
            if not bool(torch.isfinite(tensor).all()):
                raise ValueError(f"{where} {key!r} holds NaN or inf")
        if kind == "standardize" and bool((entry["std"] <= 0).any()):
            raise ValueError(f"{where} 'std' must be > 0 (a constant column is stored as 1)")
