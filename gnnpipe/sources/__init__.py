"""Dataset sources of the prepare stage: local files in, one ``RawGraph`` out (no network): node
types and relations, one of each for a homogeneous source (``RawGraph.homogeneous``).

``load`` dispatches on ``dataset.layout`` and ``dataset.source``; each reader lives in its own
module and raises a one-line ``ValueError`` naming the file and column of any bad input.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from gnnpipe.config import DatasetParams
from gnnpipe.sources import builtin
from gnnpipe.sources.base import RawGraph

READERS = {"parquet": "tables", "csv": "tables", "planetoid": "planetoid", "ogb": "ogb",
           "pyg": "pyg"}
TYPED_READERS = {"parquet": "tables", "csv": "tables", "ogb": "ogb_mag"}
INPUT = {"parquet": "a folder with the node and edge tables",
         "csv": "a folder with the node and edge tables",
         "planetoid": "the folder with the ind.<name>.* files",
         "ogb": "the OGB dataset folder (raw/, split/)", "pyg": "the .pt file"}


def load(cfg: DatasetParams, seed: int, feature_sink=None) -> RawGraph:
    """The raw graph of ``cfg.source``; ``seed`` only drives the synthetic generator.
    ``feature_sink`` (homogeneous synthetic only; ``gnnpipe.io.FeatureFileWriter``) takes the
    features in row blocks; ``x`` is then its memory-mapped file."""
    typed = cfg.layout == "typed"
    if cfg.source == "synthetic":
        return builtin.read(cfg, seed, feature_sink)
    if cfg.path == DatasetParams.path and not Path(cfg.path).exists():  # the default, absent
        if typed:
            raise ValueError(f"dataset.layout=typed needs dataset.path: the folder of the typed "
                             f"tables (dataset.source={cfg.source})")
        raise ValueError(f"dataset.source={cfg.source} needs dataset.path: "
                         f"{INPUT[cfg.source]}")
    module = importlib.import_module(
        f"gnnpipe.sources.{(TYPED_READERS if typed else READERS)[cfg.source]}")
    return module.read_typed(cfg) if typed else module.read(cfg)
