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


class LazyModule:
    """``torch = LazyModule("torch", globals())``: the module ``name``, imported on the first
    attribute access, which also rebinds the owner's global to the module itself (no proxy
    left on later calls). A module whose callers often never run torch (the report, the
    filesystem layer) names it so, and they start without it (about 1.3 s; issue 46).
    Module-level code must not touch it (that imports it at once): tests/pipeline/
    test_startup.py checks the stages that must start without torch."""

    def __init__(self, name: str, owner: dict):
        self._name, self._owner = name, owner

    def __getattr__(self, attr: str):
        if attr in ("_name", "_owner"):  # not set yet (a copy made without __init__)
            raise AttributeError(attr)
        module = importlib.import_module(self._name)
        for key, value in list(self._owner.items()):
            if value is self:
                self._owner[key] = module
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def __getattr__(name: str):
    if name in API:
        return getattr(importlib.import_module(API[name]), name)
    raise AttributeError(f"module 'gnnpipe' has no attribute {name!r}")
