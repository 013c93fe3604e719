"""The variant of a run, decided once per stage: graph kind x task.

A stage command reads the kind (homogeneous or typed) and the task (node or link) once, from
its input artifact or params, and ``pick`` returns its run function from the command's
``RUNS`` table. Nothing below that table asks again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from gnnpipe.io import read_description, read_split_meta

TASKS = ("node", "link")


def prepared_kind(prepared: Path) -> str:
    """The kind of the graph in ``data/prepared``: the layout its ``graph.json`` types give."""
    return read_description(prepared)["layout"]


def split_variant(split: Path) -> tuple[str, str]:
    """(kind, task) of the split in ``data/split``, from its ``meta.json`` (the kind: the
    layout its node and edge types give)."""
    meta = read_split_meta(split)
    task = meta.get("task", "node")
    if task not in TASKS:
        raise ValueError(f"{Path(split) / 'meta.json'}: unknown task {task!r}; re-run the split "
                         "stage")
    return meta["layout"], task


def pick(runs: Mapping[tuple[str, str], Callable], kind: str, task: str, stage: str) -> Callable:
    """The run function of ``stage`` for (kind, task); a one-line error when there is none."""
    try:
        return runs[kind, task]
    except KeyError:
        have = ", ".join(f"{k}/{t}" for k, t in runs)
        raise ValueError(f"the {stage} stage has no {kind} {task} variant (it has: {have})"
                         ) from None
