"""Model files: predictions.pt (node logits, or link scores), model.pt, and the training
checkpoint keyed by a fingerprint of its params and inputs.

``model.pt`` (``gnnpipe.model/2``) is self-contained for inference, loaded with
``weights_only=True`` (plain containers and tensors only)::

    {"schema": "gnnpipe.model/2",
     "meta": {"model", "task", "in_dim", "num_classes" | "embedding_dim", ...},  # rebuilds it
     "state_dict": {name: tensor},
     "inference": {"params": {"seed", "dataset": {the keys that shape the graph}, "train"},
                   "features": the data/features/transform.pt payload (features.normalize),
                   "feature_dtype": "float32" | "float16" | "bfloat16",  # x as stored
                   "feature_widths": {node type: F},
                   "classes": [the user's label value of each class code], "class_type":
                   "int64" | "string", "ids": {node type: "int64" | "string" | "node_id"},
                   "graph": {"layout", "target", "node_types": [...], "edge_types": [...]}}}

``gnnpipe.model/1`` (no ``inference``) is still read by the predict stage, which takes those
from data/; scoring a new graph refuses it (``read_model_file(..., inference=True)``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from gnnpipe.io.splits import LINK_EVAL_PHASES
from gnnpipe.io.tensors import load_tensors, save_payload, save_tensors

MODEL_SCHEMA = "gnnpipe.model/2"
MODEL_SCHEMAS = ("gnnpipe.model/1", MODEL_SCHEMA)
# inference key -> the type it must have (checked on read: a stale or foreign file, one line)
INFERENCE_KEYS = {"params": dict, "features": dict, "feature_dtype": str, "feature_widths": dict,
                  "classes": list, "class_type": str, "ids": dict, "graph": dict}


def write_predictions(out: Path, node_id: torch.Tensor, logits: torch.Tensor) -> None:
    save_tensors(out / "predictions.pt", "gnnpipe.predictions/1",
                 {"node_id": node_id, "logits": logits})


def read_predictions(model_dir: Path, mmap: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``node_id`` int64 (M,), ``logits`` float32 (M, C); ``mmap``: views of the mapped file."""
    path = Path(model_dir) / "predictions.pt"
    payload = load_tensors(path, "gnnpipe.predictions/1",
                           {"node_id": (torch.int64, 1), "logits": (torch.float32, 2)}, mmap=mmap)
    if payload["node_id"].numel() != payload["logits"].shape[0]:
        raise ValueError(f"{path}: node_id and logits disagree in length")
    return payload["node_id"], payload["logits"]


def write_link_predictions(out: Path, scores: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
    """``scores`` phase ("val", "test") -> (positives float (P,), fixed negatives float (P, K))."""
    save_tensors(out / "predictions.pt", "gnnpipe.link_predictions/1",
                 {f"{phase}_{kind}": t for phase in LINK_EVAL_PHASES
                  for kind, t in zip(("pos", "neg"), scores[phase])})


def read_link_predictions(model_dir: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Phase -> (positive scores float32 (P,), negative scores float32 (P, K))."""
    path = Path(model_dir) / "predictions.pt"
    payload = load_tensors(path, "gnnpipe.link_predictions/1", {
        f"{phase}_{kind}": (torch.float32, ndim) for phase in LINK_EVAL_PHASES
        for kind, ndim in (("pos", 1), ("neg", 2))})
    out = {}
    for phase in LINK_EVAL_PHASES:
        pos, neg = payload[f"{phase}_pos"], payload[f"{phase}_neg"]
        if neg.shape[0] != pos.numel():
            raise ValueError(f"{path}: {phase} has {pos.numel()} positive scores but "
                             f"{neg.shape[0]} rows of negative scores")
        out[phase] = (pos, neg)
    return out


def write_hard_link_scores(out: Path, scores: dict[str, torch.Tensor]) -> None:
    """``scores`` phase ("val", "test") -> float (P, K_hard): the split's hard negatives, beside
    predictions.pt (which keeps the positives and the random negatives)."""
    save_tensors(out / "hard_scores.pt", "gnnpipe.hard_link_scores/1",
                 {f"{phase}_neg": scores[phase] for phase in LINK_EVAL_PHASES})


def read_hard_link_scores(model_dir: Path) -> dict[str, torch.Tensor] | None:
    """Phase -> hard-negative scores float32 (P, K_hard); None when the model scored none."""
    path = Path(model_dir) / "hard_scores.pt"
    if not path.exists():
        return None
    payload = load_tensors(path, "gnnpipe.hard_link_scores/1",
                           {f"{phase}_neg": (torch.float32, 2) for phase in LINK_EVAL_PHASES})
    return {phase: payload[f"{phase}_neg"] for phase in LINK_EVAL_PHASES}


def save_model(out: Path, state_dict: dict, meta: dict, inference: dict) -> None:
    """Weights, what rebuilds the model (``meta``) and what scoring a new graph needs
    (``inference``, module docstring): loadable with ``weights_only=True``."""
    missing = [key for key in INFERENCE_KEYS if key not in inference]
    assert not missing, f"model.pt inference lacks {missing}"
    save_payload(out / "model.pt", {"schema": MODEL_SCHEMA, "meta": dict(meta),
                                    "state_dict": dict(state_dict), "inference": inference})


def model_file(path: Path) -> Path:
    """``path`` itself when a file, else the ``model.pt`` in that folder (data/model)."""
    path = Path(path)
    return path / "model.pt" if path.is_dir() else path


def read_model_file(path: Path, *, inference: bool = False) -> dict:
    """The checked payload of a ``model.pt`` (or of the one in folder ``path``): ``state_dict``
    name -> tensor, ``meta``, and for ``gnnpipe.model/2`` ``inference``. ``inference``: the
    caller scores a new graph, so a ``gnnpipe.model/1`` file is refused in one line."""
    path = model_file(path)
    if not path.exists():
        raise ValueError(f"{path}: file not found; run the train stage (dvc repro train) or "
                         "fetch the model (dvc artifacts get ... gnn-model)")
    payload = load_tensors(path, MODEL_SCHEMAS, {})  # readable, a model schema, a meta mapping
    schema = payload["schema"]
    if inference and schema != MODEL_SCHEMA:
        raise ValueError(f"{path}: a {schema} model file lacks the feature transform and classes "
                         f"scoring a new graph needs; re-run the train stage (dvc repro train)")
    state = payload.get("state_dict")
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise ValueError(f"{path}: 'state_dict' must map parameter names to tensors")
    if schema == MODEL_SCHEMA:
        given = payload.get("inference")
        bad = ([] if isinstance(given, dict) else ["inference"]) or [
            key for key, kind in INFERENCE_KEYS.items() if not isinstance(given.get(key), kind)]
        if bad:
            raise ValueError(f"{path}: missing or malformed {bad[0]!r} in the inference part of "
                             f"the {schema!r} schema; re-run the train stage")
    return payload


def input_fingerprint(params_section: dict, seed: int, inputs: list[Path]) -> str:
    """Identity of a training run: its params, seed and input files (size and mtime).

    A checkpoint is resumed only under the same fingerprint, so changed params or re-made
    upstream artifacts start a fresh run instead of continuing a different one.
    """
    files = []
    for root in inputs:
        for path in sorted(Path(root).rglob("*")) if Path(root).is_dir() else [Path(root)]:
            if path.is_file():
                stat = path.stat()
                files.append([str(path), stat.st_size, stat.st_mtime_ns])
    blob = json.dumps({"params": params_section, "seed": seed, "files": files}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def write_checkpoint(path: Path, payload: dict, fingerprint: str) -> None:
    """``payload``: tensors and plain containers only, so it loads with weights_only=True."""
    save_payload(path, {"schema": "gnnpipe.checkpoint/1", "meta": {"fingerprint": fingerprint},
                        **payload}, now=True)  # on disk when the stage is killed: resume reads it


def read_checkpoint(path: Path, fingerprint: str) -> dict | None:
    """The checkpoint at ``path`` if it belongs to this run, else None (also when absent)."""
    if not Path(path).exists():
        return None
    payload = load_tensors(path, "gnnpipe.checkpoint/1", {})
    if payload["meta"].get("fingerprint") != fingerprint:
        return None
    return payload
