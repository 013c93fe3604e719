"""The built-in heterogeneous graph (``dataset.synthetic.hetero: true``): papers, authors, venues.

* **paper** (``num_nodes``): class, features and the ``cites`` relation exactly as the
  homogeneous generator draws them (``gnnpipe.synthetic.generate``: a contextual
  degree-corrected SBM with ``homophily``, ``feature_signal``, ``degree_skew``, ...).
* **author** (``num_authors``): each has a field (a class); features are its field's own mean
  (norm ``feature_signal``) plus unit noise, ``max(num_features // 2, 1)`` wide. ``writes``:
  about ``authors_per_paper`` authorships per paper, each from an author of the paper's class
  with probability ``homophily``, otherwise from any author.
* **venue** (``num_venues``): venue ``v`` has class ``v mod C``; features are pure noise
  (``max(num_features // 4, 1)`` wide), so a venue carries information only through its papers.
  ``published_in``: one venue per paper, of the paper's class with probability ``homophily``.

Edge types: ``paper cites paper`` (undirected, both directions stored, its own reverse),
``author writes paper``, ``paper published_in venue`` and their reverses ``paper rev_writes
author`` / ``venue rev_published_in paper``, so every node type both sends and receives
messages. ``dataset.dedup`` / ``self_loops`` apply to ``cites``; repeated authorships are merged.
Deterministic for a given seed.
"""

from __future__ import annotations

import numpy as np
import torch

from gnnpipe.config import DatasetParams
from gnnpipe.graph import normalize_edges
from gnnpipe.typed_graph import HeteroGraph, typed_csr
from gnnpipe.synthetic import generate

CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")
REV_WRITES = ("paper", "rev_writes", "author")
PUBLISHED_IN = ("paper", "published_in", "venue")
REV_PUBLISHED_IN = ("venue", "rev_published_in", "paper")
REVERSE = {CITES: CITES, WRITES: REV_WRITES, REV_WRITES: WRITES,
           PUBLISHED_IN: REV_PUBLISHED_IN, REV_PUBLISHED_IN: PUBLISHED_IN}


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


def generate_hetero(cfg: DatasetParams, rng: np.random.Generator) -> tuple[HeteroGraph, dict]:
    """The graph and the counts for ``metrics/prepare.json``."""
    syn = cfg.synthetic
    c = syn.num_classes
    papers = generate(syn, rng)  # x (P, F), y (P,), cites src/dst (draws, before edge policies)
    num_papers = papers["y"].size
    cites, cites_report = normalize_edges(papers["src"], papers["dst"], num_papers,
                                          undirected=True, dedup=cfg.dedup,
                                          remove_self_loops=cfg.self_loops == "remove")
    y = papers["y"]

    def class_features(classes: np.ndarray, width: int) -> np.ndarray:
        means = rng.standard_normal((c, width))
        means *= syn.feature_signal / np.maximum(np.linalg.norm(means, axis=1, keepdims=True),
                                                 1e-12)
        return (means[classes] + rng.standard_normal((classes.size, width))).astype(np.float32)

    num_authors, num_venues = syn.num_authors, syn.num_venues
    field = rng.integers(0, c, size=num_authors)
    x_author = class_features(field, max(syn.num_features // 2, 1))
    draws = int(round(num_papers * syn.authors_per_paper))
    paper = rng.integers(0, num_papers, size=draws)
    same = rng.random(draws) < syn.homophily
    author = np.where(same, _pick_in_class(field, y[paper], c, rng),
                      rng.integers(0, num_authors, size=draws))
    keys = np.unique(author * num_papers + paper)  # repeated authorships merged
    w_src, w_dst = keys // num_papers, keys % num_papers

    venue_class = np.arange(num_venues) % c
    x_venue = rng.standard_normal((num_venues, max(syn.num_features // 4, 1))).astype(np.float32)
    same = rng.random(num_papers) < syn.homophily
    venue = np.where(same, _pick_in_class(venue_class, y, c, rng),
                     rng.integers(0, num_venues, size=num_papers))
    p_ids = np.arange(num_papers, dtype=np.int64)

    sizes = {"paper": num_papers, "author": num_authors, "venue": num_venues}
    pairs = {CITES: (cites.indices.numpy(), cites.targets().numpy()),
             WRITES: (w_src, w_dst), REV_WRITES: (w_dst, w_src),
             PUBLISHED_IN: (p_ids, venue), REV_PUBLISHED_IN: (venue, p_ids)}
    csr = {et: typed_csr(s, d, sizes[et[0]], sizes[et[2]]) for et, (s, d) in pairs.items()}
    num_classes = int(y.max()) + 1
    if syn.label_rate < 1.0:  # drawn last, so a fully labelled graph's draws are unchanged
        from gnnpipe.synthetic import keep_labels

        y = keep_labels(y, syn.label_rate, np.random.default_rng(rng.integers(2**63)))
    graph = HeteroGraph(
        x={"paper": torch.from_numpy(papers["x"]), "author": torch.from_numpy(x_author),
           "venue": torch.from_numpy(x_venue)},
        csr=csr, target="paper", y=torch.from_numpy(y), num_classes=num_classes,
        reverse=dict(REVERSE), link_edge_type=WRITES)
    report = {"cites_duplicates_removed": cites_report.duplicates_removed,
              "cites_self_loops_removed": cites_report.self_loops_removed,
              "writes_duplicates_removed": int(draws - keys.size)}
    return graph, report
