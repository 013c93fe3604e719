"""Torch artifacts: plain dicts of tensors with a schema tag, read back with ``weights_only=True``."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from gnnpipe import LazyModule
from gnnpipe.io.atomic import atomic_path, existing
from gnnpipe.io.temps import scratch_or_memory

torch = LazyModule("torch", globals())  # imported on first use: the report starts without it

# name -> (dtype, ndim); dtype None accepts any floating dtype
TensorSpec = Mapping[str, tuple["torch.dtype | None", int]]  # a string: torch stays unimported


def save_tensors(path: str | Path, schema: str, tensors: Mapping[str, torch.Tensor],
                 meta: Mapping[str, int | float | str] | None = None) -> None:
    """Write ``{"schema": schema, "meta": meta, **tensors}`` atomically."""
    save_payload(path, {"schema": schema, "meta": dict(meta or {}),
                        **{name: t.contiguous() for name, t in tensors.items()}})


def error_reason(err: BaseException) -> str:
    """An unreadable file's error in a few words for a one-line message: its first line, at
    most 200 characters (its type's name when it has no message)."""
    return (str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__)[:200]


def load_tensors(path: str | Path, schema: str | tuple[str, ...], spec: TensorSpec, *,
                 mmap: bool = False) -> dict:
    """Read a file written by ``save_tensors`` and check its schema tag (``schema``, or one of
    several versions a reader accepts), names, dtypes and ranks.

    Never unpickles arbitrary objects (``weights_only=True``). Raises ``ValueError`` naming the
    file and what was wrong.
    """
    path = existing(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # noqa: BLE001 - any file can be handed to us; torch raises many kinds
        raise ValueError(f"{path}: not a readable gnnpipe torch artifact "
                         f"({error_reason(err)})") from None
    accepted = (schema,) if isinstance(schema, str) else schema
    if not isinstance(payload, dict) or payload.get("schema") not in accepted:
        found = payload.get("schema") if isinstance(payload, dict) else type(payload).__name__
        wanted = " or ".join(repr(s) for s in accepted)
        raise ValueError(f"{path}: expected a {wanted} artifact, found {found!r}")
    if not isinstance(payload.get("meta"), dict):
        raise ValueError(f"{path}: missing the 'meta' mapping of the {payload['schema']!r} schema")
    check_tensors(path, payload, spec)
    return payload


def check_tensors(path: str | Path, payload: dict, spec: TensorSpec) -> None:
    """``payload``'s tensors named in ``spec``: present, dtype and rank; else a one-line error."""
    for name, (dtype, ndim) in spec.items():
        tensor = payload.get(name)
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{path}: missing tensor {name!r} of the {payload['schema']!r} "
                             "schema")
        if dtype is None and not tensor.is_floating_point():
            raise ValueError(f"{path}: tensor {name!r} must be floating point, found {tensor.dtype}")
        if dtype is not None and tensor.dtype != dtype:
            raise ValueError(f"{path}: tensor {name!r} must be {dtype}, found {tensor.dtype}")
        if tensor.dim() != ndim:
            raise ValueError(f"{path}: tensor {name!r} must have {ndim} dims, found shape "
                             f"{tuple(tensor.shape)}")


def save_payload(path: str | Path, payload: dict, *, now: bool = False) -> None:
    """torch.save through a file object: a path would name the archive after the random temp
    file, and the same tensors would give different bytes on every run. ``now``: in place at
    once, not at the end of the stage (``atomic_path``)."""
    with atomic_path(path, now=now) as tmp, open(tmp, "wb") as handle:
        torch.save(payload, handle)


def rows_table(like: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialised CPU tensor of ``shape`` and ``like``'s dtype whose pages belong to a
    mapped scratch file (``gnnpipe.io.temps.scratch_or_memory``: written back to disk under
    pressure, never anonymous memory, unlinked at once); in memory outside a stage or for a
    dtype numpy has not."""
    try:
        dtype = torch.empty(0, dtype=like.dtype).numpy().dtype
    except TypeError:  # bfloat16: no numpy twin
        return torch.empty(shape, dtype=like.dtype)
    return torch.from_numpy(scratch_or_memory(shape, dtype))


def gathered_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table[index]`` (T, ...) for a CPU ``table`` and int64 ``index`` (T,), the same values,
    in a ``rows_table``: inside a stage a phase's rows of millions of nodes are no anonymous
    memory."""
    return torch.index_select(table, 0, index, out=rows_table(table, (index.numel(),
                                                                      *table.shape[1:])))
