"""The variant of a run, decided once per stage: the task.

A stage command reads the task (node or link) once, from its split's ``meta.json``, and runs
that task's function; every graph's files follow one layout and are read as a typed graph
(gnnpipe/io/typed.py), so the graph kind is no axis of the choice.
"""

from __future__ import annotations

from pathlib import Path

from gnnpipe.io import read_description, read_split_meta

TASKS = ("node", "link")


def split_task(split: Path) -> str:
    """The task of the split in ``data/split``, from its ``meta.json``."""
    task = read_split_meta(split).get("task", "node")
    if task not in TASKS:
        raise ValueError(f"{Path(split) / 'meta.json'}: unknown task {task!r}; re-run the split "
                         "stage")
    return task


def prepared_layout(prepared: Path) -> str:
    """Whether the graph in ``data/prepared`` is homogeneous or typed, derived from the types
    graph.json lists: for capability checks (one relation), not a file format."""
    return read_description(prepared)["layout"]
