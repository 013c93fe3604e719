"""The built-in synthetic graphs (gnnpipe/data/synthetic.py) drawn from a seed's named streams,
the one place their draws are made (``gnnpipe.data.source_tables.synthetic_tables`` writes them
as tables for the prepare, which validates them and applies the ``dataset.*`` edge policies as
for any input): the homogeneous graph (``dataset.layout: homogeneous``) and the papers / authors
/ venues graph (``typed``)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from gnnpipe.config import SyntheticParams
from gnnpipe.data import synthetic
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sources.base import RawGraph, RawNodeType, RawRelation

WHERE = "dataset.synthetic"


def homogeneous(syn: SyntheticParams, seed: int,
                feature_sink: Callable[[np.ndarray], None] | None = None,
                edge_sink: Callable[[np.ndarray, np.ndarray], None] | None = None) -> dict:
    """``synthetic.generate``'s arrays drawn by ``seed``'s prepare stream, ``y`` with all but
    ``label_rate`` of each class unlabelled (-1) by its labels stream; ``feature_sink`` /
    ``edge_sink``: the features / edges handed over in blocks (no ``x`` / ``src``, ``dst``)."""
    raw = synthetic.generate(syn, make_rng(seed, "prepare"), feature_sink, edge_sink)
    return {**raw, "y": synthetic.keep_labels(raw["y"], syn.label_rate, make_rng(seed, "labels"))}


def typed_graph(syn: SyntheticParams, seed: int,
                feature_sink: Callable[[np.ndarray], None] | None = None) -> RawGraph:
    """``synthetic.generate_typed``'s arrays drawn by ``seed``'s prepare stream: node types
    paper (the target), author, venue; relations cites, writes (the link task's),
    published_in. ``feature_sink``: the papers' features handed over in row blocks (paper's
    ``x`` then None)."""
    raw = synthetic.generate_typed(syn, make_rng(seed, "prepare"), feature_sink)
    nodes = {t: RawNodeType(num_nodes=raw["y"].size if x is None else len(x), x=x, where=WHERE)
             for t, x in raw["x"].items()}
    relations = {e: RawRelation(src, dst, WHERE) for e, (src, dst) in raw["relations"].items()}
    return RawGraph(nodes=nodes, relations=relations, target="paper", y=raw["y"], where=WHERE,
                    link_relation=synthetic.WRITES)
