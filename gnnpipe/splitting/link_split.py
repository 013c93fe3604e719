"""Edge hold-out for link prediction by blocks, with per-phase message graphs that cannot leak,
for every graph (a homogeneous graph is the one-type case), on either engine: the tasks run in
the stage process (``cluster.engine: local``) or on Dask workers, and write the same files.

One edge type ``E`` (``graph.link_edge_type``: ``author writes paper``; the one edge type of a
homogeneous graph) is held out together with its reverse ``R`` (``paper rev_writes author``).
The unit of the split is the **node pair** ``(a, p)``, present in ``E`` as ``a -> p`` and/or in
``R`` as ``p -> a``; for a relation that is its own reverse (``cites``; a homogeneous graph) the
**unordered** pair, so all stored copies of an edge, its reverse edge and (in a directed graph)
a reciprocal edge go to the same split together, and no held-out edge can reach a message graph
through its other direction. Self-loops are never positives and stay in every message graph.
Other edge types are kept whole in every phase (the prepared CSRs themselves).

Every pair gets its role from a seeded hash of its id (gnnpipe/splitting/hash_assign.py): the
``val``, ``test`` and supervision-only counts (``pair_counts``; with ``disjoint_train_ratio``
a share of the training pairs is supervision-only, as PyG's ``RandomLinkSplit``) are key
thresholds found by radix selection, so a pair's role never depends on which block reads it.

  message            training pairs that pass messages in the train phase
  train_supervision  training pairs the loss is computed on (= message when the ratio is 0)
  val, test          held-out positives, each with fixed negatives

Message graph of each phase (the same choice as PyG's ``RandomLinkSplit``): train holds the
message pairs, val every training pair, test the training and val pairs; so no phase's graph
holds an edge of the split it is evaluated on or of a later one (gnnpipe/splitting/link_audit.py
recomputes this from the files). A symmetric relation (its own reverse with a symmetric CSR: an
undirected graph) stores each positive pair once, in a hashed orientation; a directed one every
directed edge of the pair. Positives within a role are ordered by a hash of their ids. Fixed
val/test negatives keep the head (an ``E[0]`` node) and draw a target of type ``E[2]`` that is
in no pair of any split, either direction (``negatives.hashed_negatives``: hashes of the
positive, the slot and the round, so the same on any blocks); hard negatives are
gnnpipe/splitting/hard_negatives.py's.

Tasks map the prepared graph.pt (a path every worker sees) and read their rows; rows of a
relation's CSR are its target nodes. Waves over the row blocks of ``E`` and ``R``:

1. ``scan_pairs``: the pairs counted in the block (each pair at one stored edge: an ``E`` edge
   ``a -> p``, else the ``R`` edge ``p -> a``; a self-reverse relation at ``u -> v`` with
   ``u < v``, else ``v -> u``), their keys saved; edges whose reverse is not stored;
2. ``pair_histogram``: radix selection of the key thresholds of val, test and supervision-only;
3. ``link_rows``: every edge's pair role from its key alone; the rows of each phase's message
   graph (laid into memory maps by ``place_csr``), the positives routed to buckets of their
   row-order key per role;
4. ``sort_bucket`` (per role and bucket): positives sorted by row-order key, val / test
   negatives drawn (pairs looked up in the mapped CSRs); the stage process streams the buckets
   in order into edges_<role>.parquet / negatives_<phase>.parquet.
"""

from __future__ import annotations

from collections.abc import Iterator
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gnnpipe.config import LinkSplitParams
from gnnpipe.data.edges import sorted_unique
from gnnpipe.data.graph import Csr, EdgeType, Graph, edge_type_name
from gnnpipe.io.blocks import load_routed, open_memmap, open_tensor, save_array, save_routed
from gnnpipe.io.prepared import GRAPH_SCHEMA
from gnnpipe.io.tensors import load_tensors
from gnnpipe.runtime.engine import run_blocks
from gnnpipe.runtime.rng import mix
from gnnpipe.splitting import split as split_module
from gnnpipe.io.csr_blocks import rows_by_edges
from gnnpipe.splitting.split import BlockSizes, block_edges, place_csr, save_rows
from gnnpipe.splitting.hash_assign import (FLIP_STEP, ORDER_STEP, PAIR_STEP, PHASES, phase_codes,
                                           radix_counts, thresholds)
from gnnpipe.splitting.negatives import hashed_negatives

EDGE_ROLES = ("message", "train_supervision", "val", "test")
HELD_OUT = ("val", "test")

# Codes of a pair's role while splitting: which message graphs may hold it.
_MESSAGE, _SUPERVISION_ONLY, _VAL, _TEST = 0, 1, 2, 3
_VISIBLE_CODES = {"train": (_MESSAGE,), "val": (_MESSAGE, _SUPERVISION_ONLY),
                  "test": (_MESSAGE, _SUPERVISION_ONLY, _VAL)}
# Pair codes in the order pairs are taken: [val | test | supervision-only | message].
TAKEN_CODES = np.array([_VAL, _TEST, _SUPERVISION_ONLY, _MESSAGE], dtype=np.int8)
ROLE_CODES = {"message": _MESSAGE, "train_supervision": _SUPERVISION_ONLY, "val": _VAL,
              "test": _TEST}


def _resolve(value: int | float, total: int, key: str) -> int:
    count = int(round(value * total)) if isinstance(value, float) else int(value)
    if isinstance(value, float) and not 0.0 < value < 1.0:
        raise ValueError(f"split.link.{key}={value} must be a fraction in (0, 1) or a count >= 1")
    if count == 0:
        raise ValueError(f"split.link.{key}={value} resolves to 0 of the graph's {total} edges; "
                         f"give a larger split.link.{key} (fraction or count)")
    return count


def pair_counts(num_pairs: int, cfg: LinkSplitParams, what: str) -> tuple[int, int, int]:
    """Pairs held out for val and test, and supervision-only pairs, from the sizes in ``cfg``;
    ``what`` ("... {n} ...") names the pairs in the error for empty roles."""
    n_val = _resolve(cfg.val, num_pairs, "val")
    n_test = _resolve(cfg.test, num_pairs, "test")
    n_train = num_pairs - n_val - n_test
    if n_train < 1:
        raise ValueError(f"split.link.val + split.link.test = {n_val + n_test} edges leaves none "
                         f"of {what.format(n=num_pairs)} for training")
    n_disjoint = int(round(cfg.disjoint_train_ratio * n_train))
    if cfg.disjoint_train_ratio > 0 and not 0 < n_disjoint < n_train:
        raise ValueError(f"split.link.disjoint_train_ratio={cfg.disjoint_train_ratio} of "
                         f"{n_train} training edges leaves no supervision or no message edge")
    return n_val, n_test, n_disjoint


@dataclass(frozen=True)
class Held:
    """The held-out relation ``edge_type`` (E) and its ``reverse`` (R; None: none stored) of
    the prepared ``graph_file``, with E's source and target node counts: what every task of the
    link split and its audit reads. Relation 0 is E, relation 1 (where R is another edge type)
    R; ``offsets`` are E's source and target types' first homogeneous ids (the audit's)."""

    graph_file: str
    edge_type: EdgeType
    reverse: EdgeType | None
    num_src: int
    num_dst: int
    offsets: tuple[int, int] = (0, 0)
    num_nodes: int = 0  # every type's nodes (the audit's homogeneous ids)
    homogeneous: bool = True
    symmetric: bool = False  # E is its own reverse and every edge's reverse is stored
    reverse_in_e: bool = False  # every R edge p -> a has its E edge a -> p (R adds no pair)

    @classmethod
    def of(cls, graph: Graph, graph_file: Path) -> "Held":
        e = graph.link_edge_type
        offsets = graph.offsets()
        return cls(str(graph_file), e, graph.reverse.get(e), graph.num_nodes_dict[e[0]],
                   graph.num_nodes_dict[e[2]], (offsets[e[0]], offsets[e[2]]),
                   graph.num_nodes, graph.is_homogeneous)

    @property
    def own_reverse(self) -> bool:
        """E is its own reverse (one node type): pairs are unordered."""
        return self.reverse == self.edge_type

    @property
    def one_type(self) -> bool:
        """E joins nodes of one type: a negative may not be its head."""
        return self.edge_type[0] == self.edge_type[2]

    @property
    def relations(self) -> tuple[EdgeType, ...]:
        """E, and R where it is another edge type."""
        return ((self.edge_type,) if self.reverse in (None, self.edge_type)
                else (self.edge_type, self.reverse))

    def open(self) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
        """Per relation its ``indptr`` and ``indices``, memory mapped (once per task)."""
        names = [edge_type_name(e) for e in self.relations]
        payload = load_tensors(self.graph_file, GRAPH_SCHEMA, {
            f"{name}.{part}": (torch.int64, 1) for name in names
            for part in ("indptr", "indices")}, mmap=True)
        return tuple((payload[f"{name}.indptr"].numpy(), payload[f"{name}.indices"].numpy())
                     for name in names)

    def pair_keys(self, a: np.ndarray, p: np.ndarray) -> np.ndarray:
        """Pair id of ``(a, p)`` (an E[0] node, an E[2] node): ``a * N_dst + p``, unordered
        (``min * N + max``) for a relation that is its own reverse."""
        if self.own_reverse:
            return np.minimum(a, p) * self.num_dst + np.maximum(a, p)
        return a * self.num_dst + p


def is_pair(held: Held, rels, a: np.ndarray, p: np.ndarray) -> np.ndarray:
    """bool (n,): ``a -> p`` is in E or ``p -> a`` in R (``rels``: ``Held.open``; binary
    search in the mapped rows)."""
    found = csr_contains(*rels[0], p, a)
    if len(rels) == 2 and not held.reverse_in_e:
        found |= csr_contains(*rels[1], a, p)
    return found


def refused(held: Held, rels, a: np.ndarray, t: np.ndarray) -> np.ndarray:
    """bool (n,): ``t`` (an E[2] node) may not be a negative of the head ``a``: a pair of the
    graph in either direction, or ``a`` itself."""
    if not held.one_type:
        return is_pair(held, rels, a, t)
    if held.symmetric:  # a pair is stored both ways: one search
        return (a == t) | is_pair(held, rels, a, t)
    return (a == t) | is_pair(held, rels, a, t) | is_pair(held, rels, t, a)


def csr_contains(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray,
                 values: np.ndarray) -> np.ndarray:
    """bool (n,): whether row ``rows[i]`` of a CSR with sorted rows holds ``values[i]`` (one
    branchless binary search over the queries still searching; a mapped CSR is read only
    where searched)."""
    base = np.asarray(indptr[rows]).astype(np.int64)
    end = np.asarray(indptr[rows + 1]).astype(np.int64)
    last = max(int(indices.shape[0]) - 1, 0)
    live = np.flatnonzero(end > base)
    lo, length, wanted = base[live], (end - base)[live], values[live]
    while live.size:  # lo: the first slot of the row at or past the value so far
        half = length >> 1
        less = np.take(indices, np.minimum(lo + half, last)) < wanted
        lo = np.where(less, lo + half + 1, lo)
        length = np.where(less, length - half - 1, half)
        going = length > 0
        if not going.any():
            break
        if 2 * int(going.sum()) < going.size:  # most searches ended: go on with the rest
            base[live] = lo
            live, lo, length, wanted = live[going], lo[going], length[going], wanted[going]
    base[live] = lo
    found = base < end
    found[found] = np.take(indices, base[found]) == values[found]
    return found


def pair_ends(rel: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each edge of relation ``rel`` (0: E, 1: R) as its pair ends ``(a, p)`` (an E[0] node,
    an E[2] node): an R edge ``p -> a`` turned around."""
    return (src, dst) if rel == 0 else (dst, src)


def loops(held: Held, a: np.ndarray, p: np.ndarray) -> np.ndarray:
    """bool (m,): the pair ``(a, p)`` is a self-loop (only within one node type)."""
    return (a == p) if held.one_type else np.zeros(a.size, dtype=bool)


def _counted(held: Held, rels, rel: int, a: np.ndarray, p: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """Which edges of a block count their pair (each pair at exactly one stored edge), and
    whether each edge's reverse is stored (a self-reverse relation; else all True)."""
    proper = ~loops(held, a, p)
    everywhere = np.ones(a.size, dtype=bool)
    if rel == 1:  # an R edge counts a pair E does not hold
        return proper & ~csr_contains(*rels[0], p, a), everywhere
    if not held.own_reverse:
        return proper, everywhere
    reverse = csr_contains(*rels[0], a, p)  # p -> a: row a holds p
    return proper & ((a < p) | ~reverse), reverse


def scan_pairs(block: int, rel: int, local: int, lo: int, hi: int, held: Held, seed: int,
               folder: str) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of relation ``rel``: the keys of the pairs counted here into
    ``pairs/e<block>.npy``; returns (pairs, edges whose reverse is not stored)."""
    rels = held.open()
    a, p = pair_ends(rel, *block_edges(*rels[rel], lo, hi))
    counted, reverse = _counted(held, rels, rel, a, p)
    pairs = sorted_unique(held.pair_keys(a[counted], p[counted]))
    save_array(Path(folder) / "pairs" / f"e{block:06d}.npy", mix(seed, PAIR_STEP, pairs))
    return int(pairs.size), int((~reverse).sum())


def pair_histogram(block: int, rel: int, local: int, lo: int, hi: int, folder: str,
                   wanted: np.ndarray, prefixes: np.ndarray, shift: int, gather: bool):
    """``radix_counts`` of the pair keys ``scan_pairs`` saved for ``block``."""
    keys = np.load(Path(folder) / "pairs" / f"e{block:06d}.npy")
    return radix_counts(keys, np.zeros(keys.size, dtype=np.int64), wanted, prefixes, shift,
                        gather)


def bucket_bits(items: int, target: int) -> int:
    """Bits of a key that cut ``items`` into buckets of about ``target`` (a power of two)."""
    return max(0, int(np.ceil(np.log2(max(1.0, items / target)))))


def bucket_of(keys: np.ndarray, bits: int) -> np.ndarray:
    """Bucket int64 (n,) of uint64 ``keys``: their top ``bits`` bits (0 bits: one bucket)."""
    return (np.zeros(keys.size, dtype=np.int64) if bits == 0
            else (keys >> np.uint64(64 - bits)).astype(np.int64))


def link_rows(block: int, rel: int, local: int, lo: int, hi: int, held: Held, seed: int,
              limits: np.ndarray, has: np.ndarray, undirected: bool, phases: tuple[str, ...],
              bits: dict[str, int], folder: str) -> dict[str, int]:
    """Rows ``[lo, hi)`` of relation ``rel``: each of ``phases``' message rows into
    ``<folder>/m<rel>/<phase>/``, the positives of each role of ``bits`` routed to its buckets
    in ``<folder>/pos/<role>/``; returns the kept edges per phase."""
    rels = held.open()
    src, dst = block_edges(*rels[rel], lo, hi)
    a, p = pair_ends(rel, src, dst)
    loop = loops(held, a, p)
    keys = mix(seed, PAIR_STEP, held.pair_keys(a, p))  # a pair's role: from its key
    code = np.where(loop, np.int8(-1), TAKEN_CODES[phase_codes(
        keys, np.zeros(keys.size, dtype=np.int64), limits, has)])
    kept = {}
    for phase in phases:
        keep = loop | np.isin(code, _VISIBLE_CODES[phase])
        kept[phase] = save_rows(Path(folder) / f"m{rel}" / phase, local, lo, hi, src[keep],
                                dst[keep])
    if held.own_reverse:  # every directed edge of a pair; undirected: each pair once
        take = ~loop & (a < p) if undirected else ~loop
    else:  # each pair once, at the edge that counts it
        take = _counted(held, rels, rel, a, p)[0]
    n = held.num_dst
    edges, first = np.unique(a[take] * n + p[take], return_index=True)
    pos_src, pos_dst, pos_code = edges // n, edges % n, code[take][first]
    if undirected:  # stored low -> high here; the pair's orientation bit may turn it
        flip = (mix(seed, FLIP_STEP, edges) & np.uint64(1)).astype(bool)
        pos_src, pos_dst = np.where(flip, pos_dst, pos_src), np.where(flip, pos_src, pos_dst)
    for role, width in bits.items():
        chosen = pos_code == ROLE_CODES[role]
        pairs = np.stack([pos_src[chosen], pos_dst[chosen]], axis=1)
        bucket = bucket_of(mix(seed, ORDER_STEP, pairs[:, 0] * n + pairs[:, 1]), width)
        save_routed(Path(folder) / "pos" / role, f"e{block:06d}", pairs, bucket, 1 << width)
    return kept


def sort_bucket(role: str, bucket: int, held: Held, seed: int, negatives: dict[str, int],
                cumulative: str | None, folder: str) -> None:
    """A role's bucket sorted by row-order key into ``<folder>/sorted/<role>/b<bucket>.npy``,
    with ``negatives[role]`` negatives per positive (val / test) into ``n<bucket>.npy``.
    ``cumulative``: the file of the train graph's E indptr (negatives by in-degree)."""
    n = held.num_dst
    pairs = load_routed(Path(folder) / "pos" / role, bucket, np.int64, 2)
    pairs = pairs[np.argsort(mix(seed, ORDER_STEP, pairs[:, 0] * n + pairs[:, 1]), kind="stable")]
    out = Path(folder) / "sorted" / role
    save_array(out / f"b{bucket:06d}.npy", pairs)
    per_head = negatives.get(role, 0)
    if per_head:
        weights = None if cumulative is None else open_memmap(Path(cumulative))[1:]
        rels = held.open()
        drawn = hashed_negatives(pairs[:, 0], pairs[:, 0] * n + pairs[:, 1], per_head, seed, n,
                                 weights, lambda h, t: refused(held, rels, h, t))
        save_array(out / f"n{bucket:06d}.npy", drawn)


@dataclass(frozen=True)
class LinkBlocks:
    """What ``split_links`` wrote into its scratch folder: per phase and held relation the
    (indptr, indices) files of its message graph (val shares train's without supervision-only
    pairs), per role the folder of its sorted buckets (``b<k>.npy`` (m, 2) src, dst; val /
    test also ``n<k>.npy`` (m, K) negatives) and their count; the row blocks per relation and
    the block ``sizes`` they were cut by (what its audit and hard negatives cut by too)."""

    held: Held
    message: dict[str, tuple[tuple[Path, Path], ...]]
    positives: dict[str, tuple[Path, int]]
    undirected: bool
    disjoint: bool
    blocks: tuple[list[tuple[int, int]], ...]
    scratch: Path
    sizes: BlockSizes

    def message_graphs(self, graph: Graph) -> dict[str, dict[EdgeType, Csr]]:
        """Phase -> edge type -> its message graph: the held relations' memory-mapped files
        (phases sharing files share one ``Csr``), every other edge type's prepared CSR."""
        opened: dict[tuple, Csr] = {}
        held = dict(zip(self.held.relations, range(2)))
        return {phase: {e: graph.csr[e] if e not in held else opened.setdefault(
                    files[held[e]], Csr(*map(open_tensor, files[held[e]])))
                        for e in graph.edge_types}
                for phase, files in self.message.items()}

    def edge_parts(self, role: str) -> Iterator[np.ndarray]:
        """The sorted buckets (m, 2) of ``role``'s pairs, in order."""
        folder, buckets = self.positives[role]
        return (np.load(folder / f"b{k:06d}.npy") for k in range(buckets))

    def negative_parts(self, phase: str, name: str = "n") -> Iterator[tuple[np.ndarray,
                                                                            np.ndarray]]:
        """Per bucket of ``phase`` (val / test): its pairs' sources (m,) and negatives (m, K)
        (``name`` "n": the random ones; "h": the hard ones)."""
        folder, buckets = self.positives[phase]
        return ((np.load(folder / f"b{k:06d}.npy")[:, 0], np.load(folder / f"{name}{k:06d}.npy"))
                for k in range(buckets))


def split_links(client, graph: Graph, graph_file: Path, cfg: LinkSplitParams, seed: int,
                scratch: Path, sizes: BlockSizes | None = None) -> LinkBlocks:
    """The link split of ``graph`` (its prepared ``graph_file``, which the tasks map) into
    ``scratch``, on ``client`` (None: in this process). Raises ``ValueError`` when the sizes
    leave a role empty or the held-out edge type has no pair of two distinct nodes."""
    sizes = sizes or split_module.SIZES  # read here: tests set smaller blocks
    held = Held.of(graph, graph_file)
    e = held.edge_type
    blocks = tuple(rows_by_edges(indptr, sizes.edges, sizes.rows) for indptr, _ in held.open())
    numbered = [(i, rel, j, lo, hi) for i, (rel, j, lo, hi) in enumerate(
        (rel, j, lo, hi) for rel, bounds in enumerate(blocks) for j, (lo, hi) in enumerate(bounds))]
    scanned = run_blocks(client, scan_pairs, numbered, held=held, seed=seed, folder=str(scratch))
    num_pairs = sum(count for count, _ in scanned)
    undirected = held.own_reverse and sum(missing for _, missing in scanned) == 0
    # R blocks count the pairs E does not hold: none, and a pair is found in E alone
    r_only = sum(count for (count, _), call in zip(scanned, numbered) if call[1] == 1)
    held = dataclasses.replace(held, symmetric=undirected, reverse_in_e=r_only == 0)
    if num_pairs == 0:
        raise ValueError("dataset.task=link needs edges between distinct nodes; "
                         + ("the graph" if held.homogeneous else f"edge type {edge_type_name(e)}")
                         + " has none")
    n_val, n_test, n_disjoint = pair_counts(
        num_pairs, cfg, "the graph's {n} edges (undirected pairs)" if held.homogeneous
        else "the {n} " + edge_type_name(e) + " pairs")
    limits, has = thresholds(client, pair_histogram, numbered,
                             np.array([[n_val], [n_test], [n_disjoint]]), folder=str(scratch))
    disjoint = n_disjoint > 0
    phases = PHASES if disjoint else ("train", "test")
    # per role: sort buckets of about sizes.edges numbers (a pair: at most two directed
    # positives; a val / test positive also holds its negatives)
    negatives = {"val": cfg.num_val_negatives, "test": cfg.num_test_negatives}
    per_role = {"val": n_val, "test": n_test, "message": num_pairs - n_val - n_test - n_disjoint,
                **({"train_supervision": n_disjoint} if disjoint else {})}
    bits = {role: bucket_bits(2 * count * (2 + negatives.get(role, 0)), sizes.edges)
            for role, count in per_role.items()}
    kept = run_blocks(client, link_rows, numbered, held=held, seed=seed, limits=limits,
                      has=has, undirected=undirected, phases=phases, bits=bits,
                      folder=str(scratch))
    message = {phase: tuple(
        place_csr(client, scratch / f"m{rel}" / phase, blocks[rel],
                  [k[phase] for k, call in zip(kept, numbered) if call[1] == rel],
                  held.num_dst if rel == 0 else held.num_src)
        for rel in range(len(blocks))) for phase in phases}
    message.setdefault("val", message["train"])
    cumulative = None if cfg.negative_strategy == "uniform" else str(message["train"][0][0])
    calls = [(role, k) for role, width in bits.items() for k in range(1 << width)]
    run_blocks(client, sort_bucket, calls, held=held, seed=seed, negatives=negatives,
               cumulative=cumulative, folder=str(scratch))
    positives = {role: (scratch / "sorted" / role, 1 << bits[role]) for role in bits}
    positives.setdefault("train_supervision", positives["message"])
    return LinkBlocks(held=held, message=message, positives=positives, undirected=undirected,
                      disjoint=disjoint, blocks=blocks, scratch=scratch, sizes=sizes)


def negative_weights(graph: Graph, edge_type: EdgeType, strategy: str,
                     train_csr: Csr) -> np.ndarray:
    """Training negatives' target weights over the homogeneous ids (``graph.offsets()``): only
    nodes of the edge type's target type can be drawn; uniformly, or by their in-degree in
    ``train_csr`` (the train phase's CSR of ``edge_type``) for ``negative_strategy: degree``.
    float64 (total,)."""
    weights = np.zeros(graph.num_nodes)
    start = graph.offsets()[edge_type[2]]
    n = graph.num_nodes_dict[edge_type[2]]
    weights[start:start + n] = 1.0 if strategy == "uniform" else train_csr.degrees().numpy()
    return weights
