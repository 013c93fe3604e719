"""The link split by blocks (``cluster.engine: dask``, ``split.assign: hash``, a homogeneous
graph): the edges, negatives and message graphs ``gnnpipe.splitting.link_split.split_links``
gives with ``hash_seed``, byte for byte, with no process holding all edges.

Tasks map the prepared graph.pt (``dask_split.graph_arrays``) and read their rows. Waves:

1. ``scan_pairs`` (per row block): the distinct unordered pairs of distinct nodes, each counted
   at one stored edge (``a -> b`` with ``a < b``, else ``b -> a`` when ``a -> b`` is absent),
   their keys saved; edges without their reverse (none: an undirected graph);
2. ``pair_histogram``: radix selection of the key thresholds of val, test and supervision-only
   pairs (gnnpipe/splitting/hash_assign.py);
3. ``link_rows`` (per row block): every edge's pair role from its key alone; the rows of each
   phase's message graph (placed into memory maps as in dask_split), and the positives routed
   to buckets of their row-order key per role;
4. ``sort_bucket`` (per role and bucket): positives sorted by row-order key, val / test
   negatives drawn (``negatives.hashed_negatives``, pairs looked up in the mapped CSR); the
   stage process streams the buckets in order into edges_<role>.parquet / negatives_<phase>.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnpipe.config import LinkSplitParams
from gnnpipe.data.edges import sorted_unique
from gnnpipe.data.graph import Csr, EdgeType
from gnnpipe.io.blocks import load_routed, open_memmap, open_tensor, save_array, save_routed
from gnnpipe.runtime.engine import run_blocks
from gnnpipe.splitting import hash_assign
from gnnpipe.splitting import dask_split
from gnnpipe.splitting.dask_split import BlockSizes, graph_arrays, place_csr, row_blocks
from gnnpipe.splitting.hash_assign import (key_order, phase_codes, radix_counts, summed,
                                           thresholds)
from gnnpipe.splitting.link_split import (_MESSAGE, _SUPERVISION_ONLY, _TEST, _VAL,
                                          _VISIBLE_CODES, TAKEN_CODES, pair_counts)
from gnnpipe.splitting.negatives import hashed_negatives


@dataclass(frozen=True)
class LinkBlocks:
    """What ``split_link_blocks`` wrote into its scratch folder: per phase the (indptr,
    indices) files of its message graph (val shares train's without supervision-only pairs),
    per role the folder of its sorted buckets (``b<k>.npy`` (m, 2) src, dst; val / test also
    ``n<k>.npy`` (m, K) negatives) and their count."""

    message: dict[str, tuple[Path, Path]]
    positives: dict[str, tuple[Path, int]]
    undirected: bool
    disjoint: bool
    blocks: list[tuple[int, int]]

    def message_graphs(self, edge_type: EdgeType) -> dict[str, dict[EdgeType, Csr]]:
        """Phase -> ``edge_type`` -> its memory-mapped message graph (phases sharing files
        share one ``Csr``)."""
        opened: dict[tuple, Csr] = {}
        return {phase: {edge_type: opened.setdefault(files, Csr(*map(open_tensor, files)))}
                for phase, files in self.message.items()}

    def edge_parts(self, role: str) -> Iterator[np.ndarray]:
        """The sorted buckets (m, 2) of ``role``'s pairs, in order."""
        folder, buckets = self.positives[role]
        return (np.load(folder / f"b{k:06d}.npy") for k in range(buckets))

    def negative_parts(self, phase: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Per bucket of ``phase`` (val / test): its pairs' sources (m,) and negatives (m, K)."""
        folder, buckets = self.positives[phase]
        return ((np.load(folder / f"b{k:06d}.npy")[:, 0], np.load(folder / f"n{k:06d}.npy"))
                for k in range(buckets))


def csr_contains(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray,
                 values: np.ndarray) -> np.ndarray:
    """bool (n,): whether row ``rows[i]`` of a CSR with sorted rows holds ``values[i]`` (binary
    search in every row at once; a mapped CSR is read only where searched)."""
    lo = np.asarray(indptr[rows]).astype(np.int64)
    end = np.asarray(indptr[rows + 1]).astype(np.int64)
    hi = end.copy()
    live = np.flatnonzero(lo < hi)
    while live.size:
        mid = (lo[live] + hi[live]) // 2
        below = np.asarray(indices[mid]) < values[live]
        lo[live] = np.where(below, mid + 1, lo[live])
        hi[live] = np.where(below, hi[live], mid)
        live = live[lo[live] < hi[live]]
    found = lo < end
    found[found] = np.asarray(indices[lo[found]]) == values[found]
    return found


def _edges(indptr, indices, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.asarray(indptr[lo:hi + 1])
    return np.asarray(indices[ptr[0]:ptr[-1]]), np.repeat(np.arange(lo, hi), np.diff(ptr))


def scan_pairs(block: int, lo: int, hi: int, graph_file: str, seed: int,
               folder: str) -> tuple[int, int]:
    """Rows ``[lo, hi)``: the keys of the pairs counted here into ``pairs/e<block>.npy``;
    returns (pairs, edges whose reverse is not stored)."""
    indptr, indices, y = graph_arrays(graph_file)
    src, dst = _edges(indptr, indices, lo, hi)
    reverse = csr_contains(indptr, indices, src, dst)  # dst -> src: row src holds dst
    counted = (src != dst) & ((src < dst) | ~reverse)
    n = y.size
    pairs = sorted_unique(np.minimum(src, dst)[counted] * n + np.maximum(src, dst)[counted])
    save_array(Path(folder) / "pairs" / f"e{block:06d}.npy", hash_assign.pair_keys(seed, pairs))
    return int(pairs.size), int((~reverse).sum())


def pair_histogram(block: int, lo: int, hi: int, folder: str, wanted: np.ndarray,
                   prefixes: np.ndarray, shift: int, gather: bool):
    """``radix_counts`` of the pair keys ``scan_pairs`` saved for ``block``."""
    keys = np.load(Path(folder) / "pairs" / f"e{block:06d}.npy")
    return radix_counts(keys, np.zeros(keys.size, dtype=np.int64), wanted, prefixes, shift,
                        gather)


def pair_codes(pairs: np.ndarray, seed: int, limits: np.ndarray, has: np.ndarray) -> np.ndarray:
    """The link role code int8 (n,) of every pair id from its key and the thresholds."""
    keys = hash_assign.pair_keys(seed, pairs)
    return TAKEN_CODES[phase_codes(keys, np.zeros(keys.size, dtype=np.int64), limits, has)]


def bucket_bits(items: int, target: int) -> int:
    """Bits of a key that cut ``items`` into buckets of about ``target`` (a power of two)."""
    return max(0, int(np.ceil(np.log2(max(1.0, items / target)))))


def _bucket(keys: np.ndarray, bits: int) -> np.ndarray:
    return (np.zeros(keys.size, dtype=np.int64) if bits == 0
            else (keys >> np.uint64(64 - bits)).astype(np.int64))


def link_rows(block: int, lo: int, hi: int, graph_file: str, seed: int, limits: np.ndarray,
              has: np.ndarray, undirected: bool, phases: tuple[str, ...],
              bits: dict[str, int], folder: str) -> dict[str, int]:
    """Rows ``[lo, hi)``: each of ``phases``' message rows into ``<folder>/<phase>/``, the
    positives of each role of ``bits`` routed to its buckets in ``<folder>/pos/<role>/``;
    returns the kept edges per phase."""
    indptr, indices, y = graph_arrays(graph_file)
    n = y.size
    src, dst = _edges(indptr, indices, lo, hi)
    loop = src == dst
    pair = np.minimum(src, dst) * n + np.maximum(src, dst)
    code = np.where(loop, np.int8(-1), pair_codes(pair, seed, limits, has))
    kept = {}
    for phase in phases:
        keep = loop | np.isin(code, _VISIBLE_CODES[phase])
        out = Path(folder) / phase / "rows" / f"r{block:06d}"
        save_array(out / "sources.npy", src[keep])
        save_array(out / "ends.npy", np.cumsum(np.bincount(dst[keep] - lo, minlength=hi - lo)))
        kept[phase] = int(keep.sum())
    take = ~loop & (src < dst) if undirected else ~loop  # undirected: each pair once
    edges, first = np.unique(src[take] * n + dst[take], return_index=True)
    pos_src, pos_dst, pos_code = edges // n, edges % n, code[take][first]
    if undirected:  # stored low -> high here; the pair's orientation bit may turn it
        flip = hash_assign.flipped(seed, edges)
        pos_src, pos_dst = np.where(flip, pos_dst, pos_src), np.where(flip, pos_src, pos_dst)
    role_codes = {"message": _MESSAGE, "train_supervision": _SUPERVISION_ONLY, "val": _VAL,
                  "test": _TEST}
    for role, width in bits.items():
        chosen = pos_code == role_codes[role]
        pairs = np.stack([pos_src[chosen], pos_dst[chosen]], axis=1)
        bucket = _bucket(hash_assign.row_keys(seed, pairs[:, 0] * n + pairs[:, 1]), width)
        save_routed(Path(folder) / "pos" / role, f"e{block:06d}", pairs, bucket, 1 << width)
    return kept


def sort_bucket(role: str, bucket: int, graph_file: str, seed: int, negatives: dict[str, int],
                cumulative: str | None, folder: str) -> None:
    """A role's bucket sorted by row-order key into ``<folder>/sorted/<role>/b<bucket>.npy``,
    with ``negatives[role]`` negatives per positive (val / test) into ``n<bucket>.npy``.
    ``cumulative``: the file of the train graph's indptr (negatives by degree)."""
    indptr, indices, y = graph_arrays(graph_file)
    n = y.size
    pairs = load_routed(Path(folder) / "pos" / role, bucket, np.int64, 2)
    pairs = pairs[key_order(hash_assign.row_keys(seed, pairs[:, 0] * n + pairs[:, 1]))]
    out = Path(folder) / "sorted" / role
    save_array(out / f"b{bucket:06d}.npy", pairs)
    per_head = negatives.get(role, 0)
    if per_head:
        weights = None if cumulative is None else open_memmap(Path(cumulative))[1:]
        drawn = hashed_negatives(
            pairs[:, 0], pairs[:, 0] * n + pairs[:, 1], per_head, seed, n, weights,
            lambda h, t: csr_contains(indptr, indices, t, h) | csr_contains(indptr, indices, h, t))
        save_array(out / f"n{bucket:06d}.npy", drawn)


def split_link_blocks(client, graph_file: Path, num_nodes: int, cfg: LinkSplitParams, seed: int,
                      scratch: Path, sizes: BlockSizes | None = None) -> LinkBlocks:
    """The link split of a homogeneous graph into ``scratch``, on ``client`` (None: here)."""
    sizes = sizes or dask_split.SIZES  # read here: tests set smaller blocks
    graph = str(graph_file)
    blocks = row_blocks(graph_arrays(graph)[0], sizes)
    numbered = [(i, *b) for i, b in enumerate(blocks)]
    scanned = run_blocks(client, scan_pairs, numbered, graph_file=graph, seed=seed,
                         folder=str(scratch))
    num_pairs = sum(count for count, _ in scanned)
    undirected = sum(missing for _, missing in scanned) == 0
    if num_pairs == 0:
        raise ValueError("dataset.task=link needs edges between distinct nodes; the graph has "
                         "none")
    n_val, n_test, n_disjoint = pair_counts(num_pairs, cfg,
                                            "the graph's {n} edges (undirected pairs)")

    def count(wanted: np.ndarray, prefixes: np.ndarray, shift: int, gather: bool = False):
        return summed(run_blocks(client, pair_histogram, numbered, folder=str(scratch),
                                 wanted=wanted, prefixes=prefixes, shift=shift, gather=gather),
                      gather)

    limits, has = thresholds(count, np.array([[n_val], [n_test], [n_disjoint]]))
    disjoint = n_disjoint > 0
    phases = ("train", "val", "test") if disjoint else ("train", "test")
    # per role: sort buckets of about sizes.edges numbers (a pair: at most two directed
    # positives; a val / test positive also holds its negatives)
    negatives = {"val": cfg.num_val_negatives, "test": cfg.num_test_negatives}
    per_role = {"val": n_val, "test": n_test, "message": num_pairs - n_val - n_test - n_disjoint,
                **({"train_supervision": n_disjoint} if disjoint else {})}
    bits = {role: bucket_bits(2 * count * (2 + negatives.get(role, 0)), sizes.edges)
            for role, count in per_role.items()}
    kept = run_blocks(client, link_rows, numbered, graph_file=graph, seed=seed, limits=limits,
                      has=has, undirected=undirected, phases=phases, bits=bits,
                      folder=str(scratch))
    message = {phase: place_csr(client, scratch / phase, blocks, [k[phase] for k in kept],
                                num_nodes) for phase in phases}
    message.setdefault("val", message["train"])
    cumulative = None if cfg.negative_strategy == "uniform" else str(message["train"][0])
    calls = [(role, k) for role, width in bits.items() for k in range(1 << width)]
    run_blocks(client, sort_bucket, calls, graph_file=graph, seed=seed, negatives=negatives,
               cumulative=cumulative, folder=str(scratch))
    positives = {role: (scratch / "sorted" / role, 1 << bits[role]) for role in bits}
    positives.setdefault("train_supervision", positives["message"])
    return LinkBlocks(message=message, positives=positives, undirected=undirected,
                      disjoint=disjoint, blocks=blocks)

