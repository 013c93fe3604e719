"""Schemas and checks shared by the artifact families of gnnpipe/io."""

from __future__ import annotations

import contextlib
import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gnnpipe import LazyModule
from gnnpipe.data.graph import ROLES, Csr
from gnnpipe.io.tensors import error_reason

torch = LazyModule("torch", globals())  # the report and `gnnpipe --help` start without it

PHASES = ("train", "val", "test")

EDGES_SCHEMA = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
SPLIT_SCHEMA = pa.schema([("node_id", pa.int64()), ("split", pa.string())])
PARTS_SCHEMA = pa.schema([("node_id", pa.int64()), ("part", pa.int32())])


class TorchDtypes(Mapping):
    """``{name: torch.<name>}`` for ``names``, looked up (torch imported) on first use, so that
    a module holding such a table imports without torch."""

    def __init__(self, *names: str):
        self._names = names

    def __getitem__(self, name: str):
        if name not in self._names:
            raise KeyError(name)
        return getattr(torch, name)

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


# graph.pt may hold x in these (dataset.storage.feature_dtype); read_graph returns float32
FEATURE_DTYPES = TorchDtypes("float32", "float16", "bfloat16")


# what pyarrow, torch and the OS raise on a damaged or unreadable file (pyarrow's OSError is
# raised lazily too: a corrupted data page fails when its row group is read, not on open)
READ_ERRORS = (OSError, EOFError, RuntimeError, pa.ArrowException, pickle.UnpicklingError,
               zipfile.BadZipFile)


@contextlib.contextmanager
def reading(path: str | Path, what: str) -> Iterator[None]:
    """Errors of the reader libraries in the body become one ``ValueError`` naming ``path``:
    ``"<path>: not a readable <what> (<first line of the reason>)"``. Messages of our own
    checks (plain ``ValueError``) pass through unchanged."""
    try:
        yield
    except READ_ERRORS as err:
        # from err: with GNNPIPE_DEBUG the reader's own error shows as the cause
        raise ValueError(f"{path}: not a readable {what} ({error_reason(err)})") from err


def role_codes(names: pa.Array | pa.ChunkedArray | np.ndarray, where: str = "roles"
               ) -> np.ndarray:
    """int8 role codes (N,) (``gnnpipe.data.graph.ROLE_CODES``) of role ``names`` (N,), matched
    in Arrow (no Python string per node); a name outside ``ROLES`` is a one-line ValueError
    naming ``where``."""
    names = pa.array(names) if isinstance(names, np.ndarray) else names
    codes = pc.index_in(names, value_set=pa.array(ROLES))
    if codes.null_count:
        unknown = pc.unique(pc.filter(names, pc.is_null(codes))).to_pylist()
        raise ValueError(f"{where} has unknown roles {sorted(map(str, unknown))}; allowed: "
                         f"{', '.join(ROLES)}")
    return pc.cast(codes, pa.int8()).to_numpy(zero_copy_only=False).copy()  # writable


def role_names(codes: np.ndarray) -> pa.Array:
    """The role names (B,) of int8 role ``codes`` (B,): one block of rows, one Arrow take."""
    return pa.array(ROLES).take(pa.array(codes))


def check_csr(csr: Csr, num_nodes: int, where: Path | str, num_sources: int | None = None,
              ids: str = "node") -> Csr:
    """``csr`` after checking it has ``num_nodes`` rows, valid offsets and column ids of ``ids``
    nodes in ``[0, num_sources)`` (None: ``num_nodes``); a one-line ValueError naming ``where``."""
    indptr, indices = csr.indptr, csr.indices
    sources = num_nodes if num_sources is None else num_sources
    if indptr.numel() != num_nodes + 1:
        raise ValueError(f"{where}: indptr has {indptr.numel()} entries, expected {num_nodes + 1}")
    if indptr[0] != 0 or indptr[-1] != indices.numel() or bool((indptr[1:] < indptr[:-1]).any()):
        raise ValueError(f"{where}: indptr is not a valid CSR offset array")
    if indices.numel() and (indices.min() < 0 or indices.max() >= sources):
        raise ValueError(f"{where}: indices hold {ids} ids outside [0, {sources})")
    return csr
