"""The filesystem layer: one module per artifact family, every reader and writer exported here.

A family is imported on the first use of one of its names (``io.read_classes`` imports
``gnnpipe.io.prepared`` alone), so a stage that reads JSON and Parquet, the report, starts
without torch (issue 46); ``io.<name>`` is the same object the family defines.
"""

import ast
import functools
import importlib
from pathlib import Path

from gnnpipe.io.atomic import (  # noqa: F401 (re-exported; atomic imports no torch)
    atomic_dir, atomic_path, read_json, remove_on_publish, write_csv, write_json, write_text)

# the families whose names are exported here (what `from gnnpipe.io.<family> import *` of each,
# in turn, gave)
FAMILIES = ("common", "description", "features", "models", "partitions", "predictions",
            "prepared", "propagated", "splits", "typed")


@functools.cache
def owners() -> dict[str, str]:
    """Name -> the family it is looked up in, read from the families' source with ast (nothing
    imported): the family that defines it, else the first that imports it (the same object);
    a family's ``__all__``, where it has one, else its public top-level names."""
    defined: dict[str, str] = {}
    imported: dict[str, str] = {}
    for family in FAMILIES:
        names: dict[str, bool] = {}  # top-level name -> whether the family defines it
        for node in ast.parse((Path(__file__).parent / f"{family}.py").read_text()).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((alias.asname or alias.name.split(".")[0], False)
                             for alias in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names[node.name] = True
            elif isinstance(node, ast.Assign):
                names.update((n.id, True) for target in node.targets for n in ast.walk(target)
                             if isinstance(n, ast.Name))
                if getattr(node.targets[0], "id", None) == "__all__":
                    public = set(ast.literal_eval(node.value))
        exported = public if "__all__" in names else {n for n in names if not n.startswith("_")}
        for name in exported:
            (defined if names[name] else imported).setdefault(name, family)
    return {**imported, **defined}


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if (Path(__file__).parent / f"{name}.py").exists():  # a submodule: `io.splits`
        value = importlib.import_module(f"gnnpipe.io.{name}")
    elif name in owners():
        value = getattr(importlib.import_module(f"gnnpipe.io.{owners()[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *owners()})
