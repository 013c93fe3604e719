"""Which implementation samples: gnnpipe's own, or pyg-lib's when PyG could import it."""

from __future__ import annotations

import torch_geometric.typing

BACKENDS = ("auto", "gnnpipe", "pyg-lib")


def pyg_lib_available() -> bool:
    """True when ``import pyg_lib`` worked for PyG (it tried at import; a broken build is False)."""
    return bool(torch_geometric.typing.WITH_PYG_LIB)


def resolve_backend(backend: str, subgraph_type: str = "directional") -> str:
    """``gnnpipe`` or ``pyg-lib`` for a requested backend (``auto`` picks pyg-lib when present).

    pyg-lib builds no induced subgraphs (PyG falls back to torch-sparse for those), so
    ``induced`` stays with gnnpipe's sampler.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not valid; expected one of: "
                         f"{', '.join(BACKENDS)}")
    if backend == "auto":
        return "pyg-lib" if pyg_lib_available() and subgraph_type != "induced" else "gnnpipe"
    if backend == "pyg-lib":
        if not pyg_lib_available():
            raise ValueError("backend='pyg-lib' needs the pyg-lib package, which is not installed")
        if subgraph_type == "induced":
            raise ValueError("pyg-lib does not sample induced subgraphs; use backend='gnnpipe'")
    return backend
