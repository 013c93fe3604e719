"""``dataset.source: planetoid``: the raw ``ind.<name>.*`` files, read by PyG's own reader.

``torch_geometric.io.read_planetoid_data`` is the reader behind PyG's ``Planetoid`` dataset, so the
graph, features, labels and the public split (20 labelled nodes per class for training, the next
500 for validation, the 1000 ``test.index`` nodes for testing) are exactly PyG's. It already drops
self-loops and repeated edges and stores both directions.

The raw ``x``/``y``/``graph`` files are Python pickles: only read folders you trust.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from gnnpipe.config import DatasetParams
from gnnpipe.sources.base import RawGraph, check_finite, reason, roles_from_masks

FILES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
KNOWN = ("Cora", "CiteSeer", "PubMed")


def read(cfg: DatasetParams) -> RawGraph:
    folder = Path(cfg.path)
    if not cfg.name:
        raise ValueError(f"dataset.source=planetoid needs dataset.name (one of "
                         f"{', '.join(KNOWN)}): the files are ind.<name>.x, ...")
    prefix = cfg.name.lower()
    if not folder.is_dir():
        raise ValueError(f"dataset.path={cfg.path!r} is not a folder; dataset.source=planetoid "
                         f"reads ind.{prefix}.x, ... from a folder")
    missing = [f"ind.{prefix}.{name}" for name in FILES
               if not (folder / f"ind.{prefix}.{name}").is_file()]
    if missing:
        raise ValueError(f"{folder}: missing Planetoid file {missing[0]} (dataset.name="
                         f"{cfg.name!r}; all of ind.{prefix}.{{{','.join(FILES)}}} are needed)")
    from torch_geometric.io import read_planetoid_data  # unpickles scipy matrices (required)

    try:
        data = read_planetoid_data(str(folder), prefix)
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, RuntimeError, OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{folder}: PyG could not read the Planetoid files ind.{prefix}.* "
                         f"({type(err).__name__}: {reason(err)})") from None
    if data.x.layout != torch.strided:
        raise ValueError(f"{folder}: ind.{prefix}.* has sparse features (NELL); only Cora, "
                         f"CiteSeer and PubMed style dense features are supported")
    x = data.x.numpy().astype(np.float32, copy=False)
    check_finite(x, folder / f"ind.{prefix}.allx", ["features"], "feature")
    src, dst = data.edge_index.numpy().astype(np.int64)
    masks = {role: getattr(data, f"{role}_mask").numpy()
             for role in ("train", "val", "test")}
    return RawGraph.homogeneous(x, data.y.numpy().astype(np.int64), src, dst, str(folder),
                                public_roles=roles_from_masks(masks, str(folder)))
