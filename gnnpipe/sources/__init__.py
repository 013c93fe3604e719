"""Dataset sources read whole by their own readers: local files in, one ``RawGraph`` out (no
network): node types and relations, one of each for a homogeneous source
(``RawGraph.homogeneous``). The prepare writes their graph as tables for its block path
(``gnnpipe.data.source_tables.raw_tables``); the user's parquet / csv tables are read by blocks
(gnnpipe/sources/tables.py: their layout), the built-in graphs drawn by gnnpipe/sources/builtin.py.

``load`` dispatches on ``dataset.layout`` and ``dataset.source``; each reader lives in its own
module and raises a one-line ``ValueError`` naming the file and column of any bad input.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from gnnpipe.config import DatasetParams
from gnnpipe.sources.base import RawGraph

READERS = {"planetoid": "planetoid", "ogb": "ogb", "pyg": "pyg"}
TYPED_READERS = {"ogb": "ogb_mag"}
INPUT = {"planetoid": "the folder with the ind.<name>.* files",
         "ogb": "the OGB dataset folder (raw/, split/)", "pyg": "the .pt file"}


def load(cfg: DatasetParams) -> RawGraph:
    """The raw graph of ``cfg.source`` (planetoid, ogb, pyg; typed: ogb)."""
    typed = cfg.layout == "typed"
    if cfg.path == DatasetParams.path and not Path(cfg.path).exists():  # the default, absent
        if typed:
            raise ValueError(f"dataset.layout=typed needs dataset.path: the folder of the typed "
                             f"tables (dataset.source={cfg.source})")
        raise ValueError(f"dataset.source={cfg.source} needs dataset.path: "
                         f"{INPUT[cfg.source]}")
    module = importlib.import_module(
        f"gnnpipe.sources.{(TYPED_READERS if typed else READERS)[cfg.source]}")
    return module.read_typed(cfg) if typed else module.read(cfg)
