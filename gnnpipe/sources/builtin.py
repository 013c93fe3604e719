"""The built-in synthetic graphs (gnnpipe/data/synthetic.py) as raw graphs, so prepare's
``build`` validates them and applies the ``dataset.*`` edge policies as for any input: the
homogeneous graph (``dataset.layout: homogeneous``) and the papers / authors / venues graph
(``typed``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gnnpipe.config import DatasetParams, SyntheticParams
from gnnpipe.data import synthetic
from gnnpipe.runtime.rng import make_rng
from gnnpipe.sources.base import RawGraph, RawNodeType, RawRelation

WHERE = "dataset.synthetic"


def read(cfg: DatasetParams, seed: int, feature_sink=None) -> RawGraph:
    """The built-in graph of ``cfg.layout``, drawn from ``seed``'s prepare stream.
    ``feature_sink`` (homogeneous only): the features handed over in row blocks, ``x`` then
    its memory-mapped file."""
    if cfg.layout == "typed":
        return typed_graph(cfg.synthetic, make_rng(seed, "prepare"))
    raw = synthetic.generate(cfg.synthetic, make_rng(seed, "prepare"),
                             None if feature_sink is None else feature_sink.write)
    x = raw["x"] if feature_sink is None else feature_sink.close()
    y = synthetic.keep_labels(raw["y"], cfg.synthetic.label_rate, make_rng(seed, "labels"))
    time = raw.get("timestamps")
    return RawGraph.homogeneous(x, y, raw["src"], raw["dst"], WHERE,
                                time=None if time is None else pa.array(time))


def typed_graph(syn: SyntheticParams, rng: np.random.Generator, feature_sink=None) -> RawGraph:
    """``synthetic.generate_typed``'s arrays drawn by ``rng``: node types paper (the target),
    author, venue; relations cites, writes (the link task's), published_in. ``feature_sink``:
    the papers' features handed over in row blocks (paper's ``x`` then None)."""
    raw = synthetic.generate_typed(syn, rng, feature_sink)
    nodes = {t: RawNodeType(num_nodes=raw["y"].size if x is None else len(x), x=x, where=WHERE)
             for t, x in raw["x"].items()}
    relations = {e: RawRelation(src, dst, WHERE) for e, (src, dst) in raw["relations"].items()}
    return RawGraph(nodes=nodes, relations=relations, target="paper", y=raw["y"], where=WHERE,
                    link_relation=synthetic.WRITES)
