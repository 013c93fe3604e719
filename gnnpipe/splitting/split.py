"""The node split, by blocks, for every graph (``gnnpipe.data.graph.Graph``; a homogeneous
graph is its one-type case), on either engine: block tasks run in the stage process
(``cluster.engine: local``, ``run_blocks(None, ...)``) or on Dask workers, read only their rows
and write into ``.npy`` files of a scratch folder; no process holds all node ids or all edges
(strategy cluster aside: METIS and the components need its relation whole, local only).

Only the target type (``paper``; the one type of a homogeneous graph) carries labels, so only
its nodes get roles (int8 codes into ``ROLES``: 0 train, 1 val, 2 test, 3 unused). Message
graphs are per edge type: a phase's graph drops, in **every** edge type, each edge with an
endpoint of the target type the phase may not see, so no val/test paper reaches training
through an author either.

Roles. Strategies random / stratified rank each group (the labelled nodes; one class) by the
seeded key of (seed, node id) (gnnpipe/splitting/hash_assign.py), strategy time the labelled
nodes by the key of their timestamp, ties by node id (gnnpipe/splitting/ordered_split.py);
a phase takes the ranks up to its cumulative count, found as key thresholds by radix
selection (``thresholds``), each node then coded alone from its key (``write_codes``).
Strategy public copies the dataset's official split; cluster cuts a shuffled order of clusters.

``transductive``: labels are split, every phase passes messages over the whole graph.
``inductive``: the train phase sees only edges among train nodes, the val phase edges among
train and val nodes, the test phase the whole graph; nodes keep their global ids throughout.
``time`` (strategy time; what ``mode: auto`` resolves to there): inductive, and unlabelled
carriers obey the same clock: the train phase sees the train nodes and the unlabelled nodes no
later than the train cut (the latest train timestamp), the val phase the train and val nodes and
the unlabelled nodes no later than the val cut, the test phase the whole graph.

Unlabelled nodes (``y == UNLABELLED``) are never in train/val/test: their role is "unused", and
sizes (fractions or counts) are of the *labelled* nodes. They stay in the graph as ordinary
message carriers and belong to **every** phase's message graph (time mode: every phase at or
after their timestamp). A labelled node that no split took ("unused" by size) stays hidden.

Waves: ``label_counts`` (labelled nodes per class -> phase counts per group); ``key_histogram``
(radix rounds of the thresholds); strategy time ``tie_counts`` (keys below and at each
threshold, per block); ``write_codes`` (or ``write_public``) into ``roles.npy``; modes
inductive / time ``restrict_rows`` per edge type touching the target and row block, then
``place_rows`` (gnnpipe/data/block_graph.py) into each phase's CSR memory maps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import numpy as np
import torch

from gnnpipe.config import NodeSplitParams
from gnnpipe.data.block_graph import place_rows
from gnnpipe.data.graph import UNLABELLED, Csr, EdgeType, Graph, edge_type_name
from gnnpipe.io.blocks import create_memmap, open_memmap, open_tensor, save_array, write_rows
from gnnpipe.io.csr_blocks import row_ranges, rows_by_edges
from gnnpipe.io.prepared import GRAPH_SCHEMA
from gnnpipe.io.tensors import load_tensors
from gnnpipe.runtime.engine import run_blocks
from gnnpipe.runtime.rng import make_rng, mix
from gnnpipe.splitting.hash_assign import (NODE_STEP, PHASES, UNUSED, phase_codes,
                                           radix_counts, thresholds)
from gnnpipe.splitting.ordered_split import (cluster_codes, no_later, ordered_sizes,
                                             time_keys)

MessageGraphs = dict[str, dict[EdgeType, Csr]]  # phase -> edge type -> CSR
# strategies whose roles need a whole relation in one process (refused on cluster.engine dask)
WHOLE = ("cluster",)


@dataclass(frozen=True)
class BlockSizes:
    """Targets of the block sizes (tests make them tiny to get many blocks)."""

    rows: int = 1 << 20  # nodes per block
    edges: int = 1 << 22  # stored edges per block


SIZES = BlockSizes()

# Where a task reads an array: the array itself (in this process only), an ``.npy`` file, or
# (graph.pt, tensor name); the paths are what a Dask task gets, every worker maps them.
Handle = Union[np.ndarray, str, tuple]


def open_array(handle: Handle) -> np.ndarray:
    """The array of a ``Handle``, memory-mapped where it is a file."""
    if isinstance(handle, np.ndarray):
        return handle
    if isinstance(handle, str):
        return open_memmap(Path(handle))
    path, name = handle
    return load_tensors(path, GRAPH_SCHEMA, {}, mmap=True)[name].numpy()


@dataclass(frozen=True)
class Source:
    """The arrays the node split and its audit read: the target's labels ``y`` (N,), node
    times (N,) and official split (N,) int8 where the graph has them, ``csr`` edge type ->
    (indptr, indices) handles; the graph's types and sizes, the target type's own relation
    (``Graph.own_relation``)."""

    target: str
    sizes: dict[str, int]
    edge_types: tuple[EdgeType, ...]
    own: EdgeType | None
    num_classes: int
    y: Handle
    csr: dict[EdgeType, tuple[Handle, Handle]]
    time: Handle | None = None
    public: Handle | None = None

    @property
    def num_nodes(self) -> int:
        return self.sizes[self.target]


def graph_source(graph: Graph, graph_file: Path | None = None) -> Source:
    """``graph``'s arrays for the tasks: names in ``graph_file`` (its prepared graph.pt, for
    Dask workers) or, None, the graph's own arrays (tasks in this process)."""
    def handle(name: str, tensor: torch.Tensor) -> Handle:
        return (str(graph_file), name) if graph_file is not None else tensor.numpy()

    time = graph.node_time.get(graph.target)
    return Source(
        target=graph.target, sizes=graph.num_nodes_dict, edge_types=graph.edge_types,
        own=graph.own_relation(), num_classes=graph.num_classes, y=handle("y", graph.y),
        csr={e: (handle(f"{edge_type_name(e)}.indptr", c.indptr),
                 handle(f"{edge_type_name(e)}.indices", c.indices)) for e, c in graph.csr.items()},
        time=None if time is None else handle(f"time.{graph.target}", time),
        public=None if graph.public_roles is None else handle("public_roles", graph.public_roles))


def save_rows(folder: Path, block: int, lo: int, hi: int, sources: np.ndarray,
              rows: np.ndarray) -> int:
    """Rows ``[lo, hi)`` of a CSR as block ``block`` in ``<folder>/rows/`` (what ``place_rows``
    reads): the ``sources`` (m,) of its edges, their ``rows`` (m,) ascending; returns m."""
    out = Path(folder) / "rows" / f"r{block:06d}"
    save_array(out / "sources.npy", sources)
    save_array(out / "ends.npy", np.cumsum(np.bincount(rows - lo, minlength=hi - lo)))
    return int(sources.size)


def place_csr(client, folder: Path, blocks: list[tuple[int, int]], kept: list[int],
              num_nodes: int) -> tuple[Path, Path]:
    """The CSR of ``folder``'s row blocks as ``indptr.npy`` / ``indices.npy`` in ``folder``."""
    indptr, indices = folder / "indptr.npy", folder / "indices.npy"
    create_memmap(indptr, (num_nodes + 1,), np.int64)
    create_memmap(indices, (int(sum(kept)),), np.int64)
    offsets = np.concatenate([[0], np.cumsum(kept)[:-1]]).astype(np.int64)
    run_blocks(client, place_rows, [(i, lo, hi, int(offsets[i])) for i, (lo, hi) in
                                    enumerate(blocks)],
               folder=str(folder), indptr_file=str(indptr), indices_file=str(indices))
    return indptr, indices


# ------------------------------------------------------------------------------------ sizes
def resolve_sizes(cfg: NodeSplitParams, num_nodes: int) -> dict[str, int]:
    """Node count per split. Fractions are rounded at cumulative boundaries, so fractions that
    add up to 1 never round past ``num_nodes`` (0.5/0.25/0.25 of 203 is 102/50/51, not 204)."""
    sizes, fraction_so_far, boundary = {}, 0.0, 0
    for key in PHASES:
        value = getattr(cfg, key)
        if isinstance(value, float):
            if not 0.0 < value < 1.0:
                raise ValueError(f"split.node.{key}={value} must be a fraction in (0, 1) or a "
                                 "count >= 1")
            fraction_so_far += value
            next_boundary = int(round(fraction_so_far * num_nodes))
            sizes[key], boundary = next_boundary - boundary, next_boundary
        else:
            sizes[key] = int(value)
    return sizes


def _apportion(total: int, sizes: np.ndarray) -> np.ndarray:
    """Split ``total`` over groups in proportion to ``sizes`` (largest remainder), <= sizes."""
    if sizes.sum() == 0 or total == 0:
        return np.zeros_like(sizes)
    quota = total * sizes / sizes.sum()
    counts = np.floor(quota).astype(np.int64)
    order = np.argsort(-(quota - counts), kind="stable")
    counts[order[: total - counts.sum()]] += 1
    return np.minimum(counts, sizes)


def checked_sizes(cfg: NodeSplitParams, labelled: int, num_nodes: int) -> dict[str, int]:
    """``resolve_sizes`` of the ``labelled`` nodes (of ``num_nodes``), after the checks every
    strategy shares."""
    if labelled == 0:
        raise ValueError("the prepared graph has no labelled node (every label is missing): "
                         "nothing to split; give the dataset a label column with values")
    sizes = resolve_sizes(cfg, labelled)
    if cfg.per_class:
        if not isinstance(cfg.train, int):
            raise ValueError(f"split.node.per_class=true needs split.node.train as a count per "
                             f"class (e.g. 20), got {cfg.train}")
        if cfg.strategy != "stratified":
            raise ValueError("split.node.per_class=true needs split.node.strategy=stratified")
    return sizes


def phase_counts(cfg: NodeSplitParams, sizes: dict[str, int], class_sizes: np.ndarray,
                 num_nodes: int) -> np.ndarray:
    """Nodes each phase takes from each group, int64 (3, G): strategy random one group (the
    labelled nodes, ``class_sizes`` (1,)), stratified one per class (``class_sizes`` (C,),
    labelled nodes per class) so every split keeps the label distribution."""
    m = int(class_sizes.sum())
    if cfg.strategy == "random":
        need = sum(sizes.values())
        if need > m:
            raise ValueError(f"split.node train+val+test = {need} nodes exceeds the graph's {m}"
                             + ("" if m == num_nodes else f" labelled nodes (of {num_nodes})"))
        return np.array([[sizes[key]] for key in PHASES], dtype=np.int64)
    remaining = np.asarray(class_sizes, dtype=np.int64).copy()
    if cfg.per_class:
        short = [c for c in range(remaining.size) if 0 < remaining[c] < sizes["train"]]
        if short:
            raise ValueError(f"split.node.train={sizes['train']} per class, but class {short[0]} "
                             f"has only {remaining[short[0]]} nodes")
    counts = np.zeros((len(PHASES), remaining.size), dtype=np.int64)
    for i, key in enumerate(PHASES):
        if key == "train" and cfg.per_class:
            counts[i] = np.minimum(sizes["train"], remaining)
        else:
            if sizes[key] > remaining.sum():
                raise ValueError(f"split.node.{key}={sizes[key]} nodes, but only "
                                 f"{int(remaining.sum())} remain after the earlier splits")
            counts[i] = _apportion(sizes[key], remaining)
        if key == "train":
            counts[i] = _one_each(counts[i], remaining)
        remaining -= counts[i]
    return counts


def _one_each(counts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Train counts (G,) where every group with a node has at least one: a class whose few
    nodes all went to val / test could never be learnt. Each is taken from the group with the
    most (ties: the lowest id), so a split whose groups all have one is unchanged."""
    counts = counts.copy()
    for group in np.flatnonzero((sizes > 0) & (counts == 0)):
        donor = int(np.argmax(counts))
        if counts[donor] <= 1:
            break  # fewer train nodes than groups: nothing to move
        counts[donor] -= 1
        counts[group] = 1
    return counts


# ------------------------------------------------------------------------------ role tasks
def label_counts(lo: int, hi: int, source: Source) -> np.ndarray:
    """Labelled nodes per class among target rows ``[lo, hi)``: int64 (C,)."""
    y = np.asarray(open_array(source.y)[lo:hi])
    return np.bincount(y[y != UNLABELLED], minlength=source.num_classes)


def _keys(lo: int, hi: int, source: Source, strategy: str, seed: int
          ) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``[lo, hi)``: their keys uint64 and groups int64 (a class when stratified, else 0;
    -1: unlabelled, in none)."""
    y = np.asarray(open_array(source.y)[lo:hi])
    labelled = y != UNLABELLED
    if strategy == "time":
        return time_keys(open_array(source.time)[lo:hi]), np.where(labelled, 0, -1)
    groups = np.where(labelled, y if strategy == "stratified" else 0, -1)
    return mix(seed, NODE_STEP, np.arange(lo, hi)), groups


def key_histogram(lo: int, hi: int, source: Source, strategy: str, seed: int,
                  wanted: np.ndarray, prefixes: np.ndarray, shift: int, gather: bool):
    """``radix_counts`` of rows ``[lo, hi)``."""
    keys, groups = _keys(lo, hi, source, strategy, seed)
    return radix_counts(keys, groups, wanted, prefixes, shift, gather)


def tie_counts(lo: int, hi: int, source: Source, strategy: str, seed: int,
               limits: np.ndarray, has: np.ndarray) -> np.ndarray:
    """int64 (2, 3, G): per phase and group, the keys of rows ``[lo, hi)`` below its
    threshold (0) and at it (1)."""
    keys, groups = _keys(lo, hi, source, strategy, seed)
    out = np.zeros((2, *limits.shape), dtype=np.int64)
    member = groups >= 0
    k, g = keys[member], groups[member]
    for p in range(limits.shape[0]):
        lim = limits[p, g]
        np.add.at(out[0, p], g[k < lim], 1)
        np.add.at(out[1, p], g[k == lim], 1)
    return out


def write_codes(lo: int, hi: int, before: np.ndarray | None, source: Source, strategy: str,
                seed: int, limits: np.ndarray, has: np.ndarray, rank: np.ndarray | None,
                roles_file: str) -> np.ndarray:
    """``phase_codes`` of rows ``[lo, hi)`` into ``roles_file``; returns nodes per code int64
    (4,)."""
    keys, groups = _keys(lo, hi, source, strategy, seed)
    code = phase_codes(keys, groups, limits, has, rank, before)
    write_rows(Path(roles_file), lo, code)
    return np.bincount(code, minlength=UNUSED + 1)


def write_public(lo: int, hi: int, source: Source, roles_file: str) -> np.ndarray:
    """The official split's codes of rows ``[lo, hi)`` into ``roles_file``, an unlabelled node
    unused; returns int64 (2, 4): nodes per code, and per official code the unlabelled ones."""
    code = np.asarray(open_array(source.public)[lo:hi]).astype(np.int8)
    unlabelled = np.asarray(open_array(source.y)[lo:hi]) == UNLABELLED
    dropped = np.bincount(code[unlabelled], minlength=UNUSED + 1)
    code[unlabelled] = UNUSED
    write_rows(Path(roles_file), lo, code)
    return np.stack([np.bincount(code, minlength=UNUSED + 1), dropped])


# --------------------------------------------------------------------- message graph tasks
def phase_sees(code: np.ndarray, labelled: np.ndarray, keys: np.ndarray | None = None,
               cuts: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """bool per node and phase "train" / "val": the nodes whose edges its message graph keeps
    (modes inductive / time; the test phase keeps the whole graph): its roles plus the
    unlabelled nodes, in mode time (``cuts``: the train and val cut as time keys, ``keys`` the
    nodes' time keys) only those no later than the phase's cut."""
    carriers = ~labelled
    train_carriers = val_carriers = carriers
    if cuts is not None:
        train_carriers = carriers & no_later(keys, cuts[0])
        val_carriers = carriers & no_later(keys, cuts[1])
    return {"train": (code == 0) | train_carriers, "val": (code <= 1) | val_carriers}


def _sees(nodes: np.ndarray, source: Source, roles_file: str, cuts: np.ndarray | None
          ) -> dict[str, np.ndarray]:
    """``phase_sees`` of target ``nodes`` (int64, any order)."""
    code = np.asarray(open_memmap(Path(roles_file))[nodes])
    labelled = np.asarray(open_array(source.y)[nodes]) != UNLABELLED
    keys = None if cuts is None else time_keys(np.asarray(open_array(source.time)[nodes]))
    return phase_sees(code, labelled, keys, cuts)


def block_edges(indptr: np.ndarray, indices: np.ndarray, lo: int, hi: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Sources and targets int64 (E_block,) of rows ``[lo, hi)``."""
    ptr = np.asarray(indptr[lo:hi + 1])
    return np.asarray(indices[ptr[0]:ptr[-1]]), np.repeat(np.arange(lo, hi), np.diff(ptr))


def restrict_rows(block: int, lo: int, hi: int, edge_type: EdgeType, source: Source,
                  roles_file: str, cuts: np.ndarray | None, folder: str) -> dict[str, int]:
    """Rows ``[lo, hi)`` of ``edge_type`` in the train and val message graphs: the edges whose
    target-type ends the phase sees, as ``place_rows`` reads them from
    ``<folder>/<phase>/<edge type>/``; returns the kept edges per phase."""
    src, dst = block_edges(*map(open_array, source.csr[edge_type]), lo, hi)
    keep = {phase: np.ones(src.size, dtype=bool) for phase in ("train", "val")}
    s, _, d = edge_type
    if s == source.target:
        unique, inverse = np.unique(src, return_inverse=True)  # each source read once
        for phase, seen in _sees(unique, source, roles_file, cuts).items():
            keep[phase] &= seen[inverse]
    if d == source.target:
        for phase, seen in _sees(np.arange(lo, hi), source, roles_file, cuts).items():
            keep[phase] &= seen[dst - lo]
    return {phase: save_rows(Path(folder) / phase / edge_type_name(edge_type), block, lo, hi,
                             src[kept], dst[kept]) for phase, kept in keep.items()}


# ----------------------------------------------------------------------------------- split
@dataclass(frozen=True)
class NodeBlocks:
    """What ``split_node_blocks`` wrote into its scratch folder: ``roles`` int8 (N_target,)
    phase codes, per phase the (indptr, indices) ``.npy`` files of the edge types its message
    graph restricts (the others: the prepared CSR), the target row ``blocks`` of the tasks,
    the resolved ``mode``; strategy public: per role the official nodes left unlabelled."""

    roles: Path
    message: dict[str, dict[EdgeType, tuple[Path, Path]]]
    blocks: list[tuple[int, int]]
    mode: str
    dropped: dict[str, int] = field(default_factory=dict)

    def message_graphs(self, graph: Graph) -> MessageGraphs:
        """Phase -> edge type -> the memory-mapped files, or ``graph``'s CSR (the same object:
        phases holding only those share one file)."""
        return {phase: {e: Csr(*map(open_tensor, files[e])) if e in files else graph.csr[e]
                        for e in graph.edge_types} for phase, files in self.message.items()}


def split_node_blocks(client, graph: Graph, cfg: NodeSplitParams, seed: int, scratch: Path,
                      graph_file: Path | None = None, sizes: BlockSizes | None = None
                      ) -> NodeBlocks:
    """Roles and message graphs of ``graph``'s node split into ``scratch``, on ``client``
    (None: in this process, reading ``graph``'s arrays; a client: the tasks map
    ``graph_file``, its prepared graph.pt). Raises ``ValueError`` when the sizes do not fit,
    a split would be empty, or the graph lacks what the strategy needs."""
    source = graph_source(graph, graph_file if client is not None else None)
    sizes = sizes or SIZES
    if cfg.strategy == "cluster" and source.own is None:
        raise ValueError(f"split.node.strategy=cluster keeps clusters of the {graph.target!r} "
                         f"type's own relation together, and this graph has no {graph.target} "
                         f"-> {graph.target} edge type; use random, stratified, time or public")
    n = source.num_nodes
    blocks = row_ranges(n, sizes.rows)
    roles = scratch / "roles.npy"
    create_memmap(roles, (n,), np.int8)
    dropped = _roles(client, graph, source, cfg, seed, blocks, roles)
    if cfg.mode == "time" and cfg.strategy != "time":  # params files are refused in config
        raise ValueError(f"split.node.mode=time needs split.node.strategy=time (found "
                         f"{cfg.strategy!r})")
    message: dict[str, dict[EdgeType, tuple[Path, Path]]] = {phase: {} for phase in PHASES}
    if cfg.mode != "transductive":
        cuts = None
        if cfg.mode == "time":  # the latest train (train + val) time: the phases' cuts
            found = run_blocks(client, latest_keys, blocks, source=source, roles_file=str(roles))
            cuts = np.array([max(f[i] for f in found if f[i] is not None) for i in (0, 1)],
                            dtype=np.uint64)
        for e in source.edge_types:
            if graph.target not in (e[0], e[2]):
                continue
            rows = rows_by_edges(open_array(source.csr[e][0]), sizes.edges, sizes.rows)
            kept = run_blocks(client, restrict_rows, [(i, *b) for i, b in enumerate(rows)],
                              edge_type=e, source=source, roles_file=str(roles), cuts=cuts,
                              folder=str(scratch))
            for phase in ("train", "val"):
                message[phase][e] = place_csr(client, scratch / phase / edge_type_name(e), rows,
                                              [k[phase] for k in kept], source.sizes[e[2]])
    return NodeBlocks(roles=roles, message=message, blocks=blocks, mode=cfg.mode,
                      dropped=dropped)


def latest_keys(lo: int, hi: int, source: Source, roles_file: str) -> list[np.uint64 | None]:
    """The largest time key of rows ``[lo, hi)`` coded train, and coded train or val (None: no
    such row)."""
    code = np.asarray(open_memmap(Path(roles_file))[lo:hi])
    keys = time_keys(np.asarray(open_array(source.time)[lo:hi]))
    return [keys[code <= last].max() if (code <= last).any() else None for last in (0, 1)]


def _roles(client, graph: Graph, source: Source, cfg: NodeSplitParams, seed: int,
           blocks: list[tuple[int, int]], roles: Path) -> dict[str, int]:
    """Every target node's phase code into ``roles``; strategy public: the official nodes
    left unlabelled per role (else empty)."""
    per_class = sum(run_blocks(client, label_counts, blocks, source=source))
    labelled, n = int(per_class.sum()), source.num_nodes
    phase_sizes = checked_sizes(cfg, labelled, n)
    dropped: dict[str, int] = {}
    if cfg.strategy == "public":
        if source.public is None:
            raise ValueError("split.node.strategy=public needs a dataset with an official split "
                             "(dataset.source planetoid, ogb, or pyg with train/val/test masks); "
                             "the prepared graph has none")
        found = sum(run_blocks(client, write_public, blocks, source=source,
                               roles_file=str(roles)))
        dropped = {key: int(found[1, i]) for i, key in enumerate(PHASES)}
        taken = found[0]
        empty = [key for i, key in enumerate(PHASES) if not taken[i]]
        if empty:
            raise ValueError(f"split.node.strategy=public: the dataset's official split has no "
                             f"labelled {empty[0]} nodes" + (
                                 f" ({dropped[empty[0]]} are unlabelled)"
                                 if dropped[empty[0]] else ""))
        return dropped
    if cfg.strategy == "cluster":  # the whole relation in this process (refused on dask)
        codes = cluster_codes(graph.target_view(), cfg,
                              ordered_sizes(cfg, phase_sizes, labelled, n),
                              make_rng(seed, "split"))
        write_rows(roles, 0, codes)
        taken = np.bincount(codes, minlength=UNUSED + 1)
    else:
        taken = _ranked(client, source, cfg, seed, blocks, roles, per_class, phase_sizes)
    for code, key in enumerate(PHASES):
        if not taken[code]:
            raise ValueError(f"split.node.{key} resolves to 0 nodes; give a larger "
                             f"split.node.{key} (fraction or count)")
    return dropped


def _ranked(client, source: Source, cfg: NodeSplitParams, seed: int,
            blocks: list[tuple[int, int]], roles: Path, per_class: np.ndarray,
            phase_sizes: dict[str, int]) -> np.ndarray:
    """Strategies random / stratified / time: codes by key thresholds; nodes per code (4,)."""
    labelled, n = int(per_class.sum()), source.num_nodes
    if cfg.strategy == "time":
        phase_sizes = ordered_sizes(cfg, phase_sizes, labelled, n)
        if source.time is None:
            raise ValueError("split.node.strategy=time needs node timestamps, but the prepared "
                             "graph has none; give the dataset a timestamp column (or "
                             "dataset.synthetic.timestamps: true), or use another strategy")
        counts = np.array([[phase_sizes[key]] for key in PHASES], dtype=np.int64)
    else:
        class_sizes = per_class if cfg.strategy == "stratified" else np.array([labelled])
        counts = phase_counts(cfg, phase_sizes, class_sizes, n)
    common = dict(source=source, strategy=cfg.strategy, seed=seed)
    limits, has = thresholds(client, key_histogram, blocks, counts, **common)
    rank, before = None, [None] * len(blocks)  # hash keys never tie: the threshold's is its rank
    if cfg.strategy == "time":  # keys tie: the threshold's ties are taken in node id order
        found = run_blocks(client, tie_counts, blocks, limits=limits, has=has, **common)
        below = sum(f[0] for f in found)
        rank = np.cumsum(counts, axis=0) - below
        before = np.cumsum([np.zeros_like(below)] + [f[1] for f in found[:-1]], axis=0)
    return sum(run_blocks(client, write_codes, [(lo, hi, before[i]) for i, (lo, hi) in
                                                enumerate(blocks)],
                          limits=limits, has=has, rank=rank, roles_file=str(roles), **common))
