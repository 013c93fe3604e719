"""Model files: predictions.pt (node logits, or link scores), model.pt, and the training
checkpoint keyed by a fingerprint of its params and inputs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from gnnpipe.io.splits import LINK_EVAL_PHASES
from gnnpipe.io.tensors import load_tensors, save_payload, save_state_dict, save_tensors


def write_predictions(out: Path, node_id: torch.Tensor, logits: torch.Tensor) -> None:
    save_tensors(out / "predictions.pt", "gnnpipe.predictions/1",
                 {"node_id": node_id, "logits": logits})


def read_predictions(model_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """``node_id`` int64 (M,), ``logits`` float32 (M, C)."""
    path = Path(model_dir) / "predictions.pt"
    payload = load_tensors(path, "gnnpipe.predictions/1",
                           {"node_id": (torch.int64, 1), "logits": (torch.float32, 2)})
    if payload["node_id"].numel() != payload["logits"].shape[0]:
        raise ValueError(f"{path}: node_id and logits disagree in length")
    return payload["node_id"], payload["logits"]


def write_link_predictions(out: Path, scores: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
    """``scores`` phase ("val", "test") -> (positives float (P,), fixed negatives float (P, K))."""
    tensors = {}
    for phase in LINK_EVAL_PHASES:
        tensors[f"{phase}_pos"], tensors[f"{phase}_neg"] = scores[phase]
    save_tensors(out / "predictions.pt", "gnnpipe.link_predictions/1", tensors)


def read_link_predictions(model_dir: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Phase -> (positive scores float32 (P,), negative scores float32 (P, K))."""
    path = Path(model_dir) / "predictions.pt"
    spec = {}
    for phase in LINK_EVAL_PHASES:
        spec[f"{phase}_pos"], spec[f"{phase}_neg"] = (torch.float32, 1), (torch.float32, 2)
    payload = load_tensors(path, "gnnpipe.link_predictions/1", spec)
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


def save_model(out: Path, state_dict: dict, meta: dict) -> None:
    """Weights plus what is needed to rebuild the model; loadable with ``weights_only=True``."""
    save_state_dict(out / "model.pt", "gnnpipe.model/1", state_dict, meta)


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
