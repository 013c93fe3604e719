"""The built-in datasets: a contextual, degree-corrected stochastic block model, alone
(``generate``, drawn by blocks with a stream per block) or as the papers of a papers / authors /
venues graph (``generate_typed``).

Node ``v`` gets class ``y[v]``, a degree propensity ``theta[v]`` (log-normal, ``degree_skew`` is
its sigma) and features ``x[v] = mu[y[v]] + noise``. Each edge picks a source with probability
proportional to ``theta``; with probability ``homophily`` its target is drawn from the source's
class, otherwise from another class, again proportionally to ``theta`` within that class.

The typed graph (``dataset.layout: typed``):

* **paper** (``num_nodes``): class, features and the ``cites`` relation exactly as ``generate``
  draws them.
* **author** (``num_authors``): each has a field (a class); features are its field's own mean
  (norm ``feature_signal``) plus unit noise, ``max(num_features // 2, 1)`` wide. ``writes``:
  about ``authors_per_paper`` authorships per paper, each from an author of the paper's class
  with probability ``homophily``, otherwise from any author.
* **venue** (``num_venues``): venue ``v`` has class ``v mod C``; features are pure noise
  (``max(num_features // 4, 1)`` wide), so a venue carries information only through its papers.
  ``published_in``: one venue per paper, of the paper's class with probability ``homophily``.

Relations: ``paper cites paper``, ``author writes paper`` and ``paper published_in venue``,
drawn as raw rows: prepare applies the dataset's edge policies to them as to any input
(gnnpipe/data/prepare_tables.py), so by default ``cites`` is stored both ways (its own reverse)
and the other two get their reverses ``paper rev_writes author`` / ``venue rev_published_in
paper``, and every node type both sends and receives messages. Deterministic for a given seed.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from gnnpipe.config import SyntheticParams


# values per streamed feature block: 16M float64 draws (128 MiB) whatever the width
BLOCK_VALUES = 1 << 24
NODE_BLOCK = 1 << 16  # nodes per block of node draws (class, propensity, features, time)
EDGE_BLOCK = 1 << 20  # edge draws per block
NODES, FEATURES, TIMES, EDGES, MEANS = range(5)  # the parts of a graph's streams


def block_rng(key: int, part: int, block: int) -> np.random.Generator:
    """The stream of one block of one ``part`` of the graph drawn under ``key``: each block's
    draws are its own, whatever is drawn before it or how many blocks there are."""
    return np.random.default_rng([key, part, block])


def _blocks(total: int, size: int) -> list[tuple[int, int, int]]:
    """(block, lo, hi) of ``total`` rows in blocks of ``size``."""
    return [(b, lo, min(lo + size, total)) for b, lo in enumerate(range(0, total, size))]


def generate(cfg: SyntheticParams, rng: np.random.Generator,
             feature_sink: Callable[[np.ndarray], None] | None = None,
             edge_sink: Callable[[np.ndarray, np.ndarray], None] | None = None
             ) -> dict[str, np.ndarray]:
    """Raw graph arrays: ``x`` float32 (N, F), ``y`` int64 (N,), ``src``/``dst`` int64 (M,),
    plus ``timestamps`` float64 (N,) when ``cfg.timestamps``.

    Drawn by blocks, each from its own stream (``block_rng`` under one key from ``rng``):
    ``NODE_BLOCK`` nodes' classes and propensities, then ``EDGE_BLOCK`` edge draws at a time,
    then the nodes' features and times. Per node the generator holds a few numbers (class,
    propensity, the two cumulative propensities an edge end is drawn from), never a feature
    row or the edge list: ``feature_sink`` takes x in consecutive row blocks (float32 (B, F),
    about ``BLOCK_VALUES`` values each; the output then has no ``x``), ``edge_sink`` the edges
    as (src, dst) int64 blocks (no ``src`` / ``dst`` then). The values are the same either way.

    ``M = round(N * avg_degree / 2)`` undirected edge draws; duplicates and self-loops may occur
    and are left to the dataset's edge policies, as with any real input.
    """
    n, c, f = cfg.num_nodes, cfg.num_classes, cfg.num_features
    key = int(rng.integers(2**63))
    weights = (np.arange(c) + 1.0) ** -cfg.class_imbalance
    y, theta = np.empty(n, dtype=np.int64), np.empty(n)
    for b, lo, hi in _blocks(n, NODE_BLOCK):
        draw = block_rng(key, NODES, b)
        y[lo:hi] = draw.choice(c, size=hi - lo, p=weights / weights.sum())
        theta[lo:hi] = np.exp(cfg.degree_skew * draw.standard_normal(hi - lo))

    # Nodes grouped by class with cumulative propensity, so "a node of class k drawn
    # proportionally to theta" is one searchsorted into that class's slice.
    by_class = np.argsort(y, kind="stable")
    cum = np.cumsum(theta[by_class])
    class_end = np.searchsorted(y[by_class], np.arange(c), side="right")
    class_start = np.concatenate([[0], class_end[:-1]])
    low = np.where(class_start > 0, cum[np.maximum(class_start - 1, 0)], 0.0)
    high = cum[np.maximum(class_end - 1, 0)]
    populated = class_end > class_start
    src_cum = np.cumsum(theta, out=theta)  # (N,): a source is drawn proportionally to theta

    parts = None if edge_sink is not None else ([], [])  # kept: (src, dst) blocks
    edge_sink = edge_sink or (lambda src, dst: (parts[0].append(src), parts[1].append(dst)))
    for b, lo, hi in _blocks(int(round(n * cfg.avg_degree / 2)), EDGE_BLOCK):
        draw = block_rng(key, EDGES, b)
        src = np.minimum(np.searchsorted(src_cum, draw.random(hi - lo) * src_cum[-1],
                                         side="right"), n - 1)
        same = draw.random(hi - lo) < cfg.homophily
        shift = draw.integers(1, c, size=hi - lo)  # another class, uniformly
        target_class = np.where(same, y[src], (y[src] + shift) % c)
        target_class = np.where(populated[target_class], target_class, y[src])
        u = low[target_class] + draw.random(hi - lo) * (high[target_class] - low[target_class])
        pos = np.searchsorted(cum, u, side="right")
        pos = np.clip(pos, class_start[target_class], class_end[target_class] - 1)
        edge_sink(src.astype(np.int64, copy=False), by_class[pos].astype(np.int64, copy=False))
    del theta, src_cum, by_class, cum

    means = class_means(block_rng(key, MEANS, 0), c, f, cfg.feature_signal)
    rows = max(1, BLOCK_VALUES // max(f, 1))  # a node block's features, a slice at a time
    x = [] if feature_sink is None else None  # kept: the feature blocks
    feature_sink = feature_sink or x.append
    for b, lo, hi in _blocks(n, NODE_BLOCK):
        draw = block_rng(key, FEATURES, b)
        for start in range(lo, hi, rows):
            classes = y[start:min(start + rows, hi)]  # unit noise around the class mean
            block = (means[classes] + draw.standard_normal((classes.size, f))).astype(np.float32)
            feature_sink(block)
    out = {"y": y}
    if parts is not None:
        out["src"], out["dst"] = (np.concatenate(p) if p else np.zeros(0, dtype=np.int64)
                                  for p in parts)
    if x is not None:
        out["x"] = np.concatenate(x) if x else np.zeros((0, f), dtype=np.float32)
    if cfg.timestamps:  # float64 (N,): arrival time of every node, a block at a time
        out["timestamps"] = np.concatenate(
            [block_rng(key, TIMES, b).random(hi - lo) for b, lo, hi in _blocks(n, NODE_BLOCK)])
    return out


def class_means(rng: np.random.Generator, num_classes: int, width: int, signal: float
                ) -> np.ndarray:
    """One random mean per class, float64 (C, width), each of norm ``signal``."""
    means = rng.standard_normal((num_classes, width))
    return means * (signal / np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12))


def keep_labels(y: np.ndarray, rate: float, rng: np.random.Generator) -> np.ndarray:
    """``y`` (N,) with all but ``rate`` of each class set to -1 (unlabelled): per class
    ``max(1, round(rate * n_c))`` labels kept, drawn by ``rng``. ``rate`` 1.0 returns ``y``."""
    if rate >= 1.0:
        return y
    out = np.full_like(y, -1)
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        keep = rng.choice(members, size=max(1, int(round(rate * members.size))), replace=False)
        out[keep] = c
    return out


# ------------------------------------------------------------------------------ typed graph
CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")  # the link task's relation
PUBLISHED_IN = ("paper", "published_in", "venue")


def _pick_in_class(classes: np.ndarray, wanted: np.ndarray, num_classes: int,
                   rng: np.random.Generator) -> np.ndarray:
    """For each entry of ``wanted`` (M,), a uniformly drawn index ``i`` with ``classes[i]`` equal
    to it (a random index where that class is empty): int64 (M,)."""
    by_class = np.argsort(classes, kind="stable")
    end = np.searchsorted(classes[by_class], np.arange(num_classes), side="right")
    start = np.concatenate([[0], end[:-1]])
    size = end - start
    pick = start[wanted] + np.floor(rng.random(wanted.size) * np.maximum(size[wanted], 1))
    out = by_class[np.minimum(pick.astype(np.int64), classes.size - 1)]
    empty = size[wanted] == 0
    out[empty] = rng.integers(0, classes.size, size=int(empty.sum()))
    return out.astype(np.int64)


def generate_typed(syn: SyntheticParams, rng: np.random.Generator,
                   feature_sink: Callable[[np.ndarray], None] | None = None) -> dict:
    """The typed graph's raw arrays, before the dataset's edge policies
    (``gnnpipe.sources.builtin.typed_graph`` makes them a ``RawGraph`` for the prepare):
    ``x`` node type -> float32 (N_t, F_t) (``feature_sink``: the papers' handed over in row
    blocks, as ``generate`` does, and ``x["paper"]`` None), ``y`` int64 (P,) paper labels (-1:
    unlabelled, by ``label_rate``; every class drawn keeps a label), ``relations`` edge type ->
    (src, dst) int64 (E,) type-local ids, in the order ``cites``, ``writes``, ``published_in``
    (``cites``: the undirected draws of ``generate``; repeats and self-loops are left to the
    policies, as with any input)."""
    c = syn.num_classes
    # x (P, F), y (P,), cites src/dst (draws, before edge policies)
    papers = generate(syn, rng, feature_sink)
    num_papers = papers["y"].size
    y = papers["y"]

    def class_features(classes: np.ndarray, width: int) -> np.ndarray:
        means = class_means(rng, c, width, syn.feature_signal)
        return (means[classes] + rng.standard_normal((classes.size, width))).astype(np.float32)

    num_authors, num_venues = syn.num_authors, syn.num_venues
    field = rng.integers(0, c, size=num_authors)
    x_author = class_features(field, max(syn.num_features // 2, 1))
    draws = int(round(num_papers * syn.authors_per_paper))
    paper = rng.integers(0, num_papers, size=draws)
    same = rng.random(draws) < syn.homophily
    author = np.where(same, _pick_in_class(field, y[paper], c, rng),
                      rng.integers(0, num_authors, size=draws))

    venue_class = np.arange(num_venues) % c
    x_venue = rng.standard_normal((num_venues, max(syn.num_features // 4, 1))).astype(np.float32)
    same = rng.random(num_papers) < syn.homophily
    venue = np.where(same, _pick_in_class(venue_class, y, c, rng),
                     rng.integers(0, num_venues, size=num_papers))
    if syn.label_rate < 1.0:  # drawn last, so a fully labelled graph's draws are unchanged
        y = keep_labels(y, syn.label_rate, np.random.default_rng(rng.integers(2**63)))
    return {"x": {"paper": papers.get("x"), "author": x_author, "venue": x_venue}, "y": y,
            "relations": {CITES: (papers["src"], papers["dst"]),
                          WRITES: (author.astype(np.int64), paper.astype(np.int64)),
                          PUBLISHED_IN: (np.arange(num_papers, dtype=np.int64),
                                         venue.astype(np.int64))}}
