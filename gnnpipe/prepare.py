"""The prepare stage: a dataset source in, one validated ``Graph`` and a report out."""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe import synthetic
from gnnpipe.config import DatasetParams
from gnnpipe.graph import Graph, normalize_edges
from gnnpipe.rng import make_rng


def validate_arrays(x: np.ndarray, y: np.ndarray, src: np.ndarray, dst: np.ndarray,
                    where: str) -> int:
    """Check raw arrays before they become a graph; return the number of classes.

    ``x`` (N, F) float, ``y`` (N,) int in ``[0, C)``, ``src``/``dst`` (M,) int in ``[0, N)``.
    Raises ``ValueError`` naming ``where`` (the source) and the offending column.
    """
    if x.ndim != 2:
        raise ValueError(f"{where}: features must be a 2-D (nodes, features) array, got shape {x.shape}")
    n = x.shape[0]
    if n == 0:
        raise ValueError(f"{where}: the graph has no nodes")
    if y.shape != (n,):
        raise ValueError(f"{where}: labels have shape {y.shape} but there are {n} feature rows")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"{where}: labels must be integers, got {y.dtype}")
    if y.min() < 0:
        raise ValueError(f"{where}: label column has negative value {int(y.min())}")
    bad_rows = ~np.isfinite(x).all(axis=1)
    if bad_rows.any():
        raise ValueError(f"{where}: features contain NaN or inf in {int(bad_rows.sum())} rows "
                         f"(first: node {int(np.argmax(bad_rows))})")
    if src.shape != dst.shape or src.ndim != 1:
        raise ValueError(f"{where}: edge src and dst must be 1-D of equal length, got "
                         f"{src.shape} and {dst.shape}")
    for name, ids in (("src", src), ("dst", dst)):
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad = ids[(ids < 0) | (ids >= n)][0]
            raise ValueError(f"{where}: edge column {name!r} has node id {int(bad)} outside "
                             f"[0, {n}) ({n} nodes)")
    num_classes = int(y.max()) + 1
    if num_classes < 2:
        raise ValueError(f"{where}: labels hold a single class; node classification needs >= 2")
    return num_classes


def prepare(cfg: DatasetParams, seed: int) -> tuple[Graph, dict]:
    """Load ``cfg.source``, apply the edge policies and return the graph and ``prepare.json``."""
    if cfg.source != "synthetic":  # config validation only admits implemented sources
        raise ValueError(f"dataset.source={cfg.source!r} is not supported")
    raw = synthetic.generate(cfg.synthetic, make_rng(seed, "prepare"))
    num_classes = validate_arrays(raw["x"], raw["y"], raw["src"], raw["dst"], "dataset.synthetic")
    n = raw["x"].shape[0]
    csr, edge_report = normalize_edges(raw["src"], raw["dst"], n, undirected=cfg.undirected,
                                       dedup=cfg.dedup,
                                       remove_self_loops=cfg.self_loops == "remove")
    graph = Graph(csr=csr, x=torch.from_numpy(raw["x"]), y=torch.from_numpy(raw["y"]),
                  num_classes=num_classes)
    degrees = csr.degrees()
    report = {
        "source": cfg.source,
        "nodes": n,
        "features": int(raw["x"].shape[1]),
        "classes": num_classes,
        "undirected": cfg.undirected,
        "input_edges": edge_report.input_edges,
        "self_loops_removed": edge_report.self_loops_removed,
        "duplicates_removed": edge_report.duplicates_removed,
        "edges": edge_report.output_edges,
        "isolated_nodes": int((degrees == 0).sum()),
        "max_degree": int(degrees.max()),
        "mean_degree": round(float(degrees.double().mean()), 4),
    }
    return graph, report
