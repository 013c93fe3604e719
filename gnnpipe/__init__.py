"""gnnpipe: a reproducible, cached pipeline for training GNNs on large graphs.

Python API: ``gnnpipe.load_model(path).predict(tables)`` scores a new graph with a trained
model.pt (gnnpipe/training/new_graph.py).
"""

import importlib

__version__ = "0.1.0"

# name -> its module, imported on first use: `import gnnpipe` (which every stage runs) stays
# cheap, without torch. No stage touches these names, so the import graph of dvc.yaml's deps
# (gnnpipe/dvc_yaml.py) rightly does not follow them into every stage's closure.
API = {"load_model": "gnnpipe.training.new_graph"}


def __getattr__(name: str):
    if name in API:
        return getattr(importlib.import_module(API[name]), name)
    raise AttributeError(f"module 'gnnpipe' has no attribute {name!r}")
