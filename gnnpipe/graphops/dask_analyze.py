"""analyze on ``cluster.engine: dask``: the graph report by aggregation over blocks of rows.

The graph lies in a folder of memory-mapped arrays (gnnpipe/io/csr_blocks.py: the in-edge CSR,
its transpose, the labels); every task reads one block of rows, so no process holds the edges.

* Homophily, label coverage and degrees: each task returns the integer ``RowCounts`` of its
  rows; the client adds them (``add_counts``) and finishes as the local engine does
  (``graph_report``), so every figure is equal: sums of integers do not depend on their order,
  and the one sum of fractions (node homophily) is an exact ``math.fsum`` per distinct degree.
* Components: the local union-find's rounds, with the edges read by blocks. Every node's label
  is the root of its tree (a node of its component, never above its own id). A sweep gives
  every node the least label among itself and its in- and out-neighbours (by blocks); on the
  client every root then hooks onto the least label found next to its tree, and pointer
  jumping (``label = label[label]``) takes every node to its new root. When a sweep finds no
  smaller label every edge lies inside one tree, and the labels are every component's least
  node, as the local union-find numbers them. The client holds the labels, int32 (N,), as
  partition.method lp does.
* Per-phase figures: offsets only (``phase_sizes``) plus ``train_label_homophily`` from the
  counts of the train graph's blocks.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from gnnpipe.config import AnalyzeParams
from gnnpipe.data.graph import Csr
from gnnpipe.graphops.analyze import (RowCounts, add_counts, component_stats, graph_report,
                                      homophily_of, phase_sizes, row_counts, train_label_y)
from gnnpipe.io.csr_blocks import (block_graph, gather_labels, num_block_nodes, read_block_rows,
                                   read_in_rows, remove_labels, save_node_array, write_labels)
from gnnpipe.io.mapped_rows import gather_npy

BLOCK_ROWS = 1 << 16  # rows per task
INT32_NODES = 2**31 - 1  # labels are stored int32 (gnnpipe/io/csr_blocks.py)


def count_block(block: tuple[int, int], folder: str, labels: str, num_classes: int
                ) -> RowCounts:
    """``RowCounts`` of rows ``block = (start, stop)`` of the graph in ``folder``, with the
    node array ``labels`` as the labels."""
    start, stop = block
    indptr, indices = read_in_rows(Path(folder), start, stop)
    y = Path(folder) / f"{labels}.npy"
    return row_counts(indptr, gather_npy(y, slice(start, stop)), gather_npy(y, indices),
                      num_classes)


def min_label_sweep(block: tuple[int, int], folder: str, step: int) -> np.ndarray:
    """The least label among every row of ``block`` and its in- and out-neighbours, from
    ``labels_<step>``: int32 (stop - start,)."""
    start, stop = block
    row, neighbour = read_block_rows(Path(folder), start, stop)
    new = gather_labels(Path(folder), step, slice(start, stop))
    np.minimum.at(new, row, gather_labels(Path(folder), step, neighbour))
    return new


def _blocks(n: int) -> list[tuple[int, int]]:
    return [(lo, min(n, lo + BLOCK_ROWS)) for lo in range(0, n, BLOCK_ROWS)]


def _counts(client, folder: Path, n: int, labels: str, num_classes: int) -> RowCounts:
    task = functools.partial(count_block, folder=str(folder), labels=labels,
                             num_classes=num_classes)
    parts = client.gather(client.map(task, _blocks(n), pure=False))
    empty = np.zeros(0, dtype=np.int64)
    return add_counts(parts) if parts else row_counts(np.zeros(1, dtype=np.int64), empty, empty,
                                                      num_classes)


def min_label_components(client, folder: Path, n: int) -> np.ndarray:
    """Every node's component, as its least member: int32 (N,) (module doc)."""
    labels, step = np.arange(n, dtype=np.int32), 0
    write_labels(folder, step, labels)
    while n:
        sweep = functools.partial(min_label_sweep, folder=str(folder), step=step)
        least = np.concatenate(client.gather(client.map(sweep, _blocks(n), pure=False)))
        hooks = least < labels
        if not hooks.any():
            break
        # every tree's root hooks onto the least root next to it (a smaller id: no cycles)
        parent = labels.copy()
        np.minimum.at(parent, labels[hooks], least[hooks])
        while True:  # pointer jumping to the roots
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent = grand
        write_labels(folder, step + 1, parent)
        remove_labels(folder, step)
        labels, step = parent, step + 1
    remove_labels(folder, step)
    return labels


def analyze_blocks(client, folder: Path, y: np.ndarray, num_classes: int, cfg: AnalyzeParams,
                   message_graphs: dict[str, Csr] | None = None,
                   roles: np.ndarray | None = None) -> tuple[dict, list[dict]]:
    """``analyze_graph``'s ``(report, degree_histogram_rows)``, equal to it, computed by block
    tasks on ``client`` from the graph in the block files of ``folder`` (``y`` int64 (N,) its
    labels); the train graph's block files go in a temp folder inside it."""
    n, c = num_block_nodes(folder), num_classes
    if n > INT32_NODES:
        raise ValueError(f"analyze on cluster.engine=dask stores component labels as int32: "
                         f"{n} nodes is too many; use cluster.engine: local")
    save_node_array(folder, "y", y)
    counts = _counts(client, folder, n, "y", c)
    # numbered 0.. by least member, as connected_components numbers them
    _, components = np.unique(min_label_components(client, folder, n), return_inverse=True)
    components = component_stats(components)
    phases = None
    if message_graphs is not None and roles is not None:
        with block_graph(message_graphs["train"], folder, transpose=False,
                         name="analyze-train") as train_folder:
            save_node_array(train_folder, "y_train", train_label_y(roles, y))
            train = _counts(client, train_folder, n, "y_train", c)
        phases = {**phase_sizes(message_graphs, roles),
                  "train_label_homophily": homophily_of(train, c)["edge"]}
    return graph_report(n, y, c, counts, components, phases, cfg)
