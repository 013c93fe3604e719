"""Node splits and the per-phase message graphs that make them leak-free, for every graph
(``gnnpipe.data.graph.Graph``; a homogeneous graph is its one-type case).

Only the target type (``paper``; the one type of a homogeneous graph) carries labels, so only
its nodes get roles, drawn on the target type alone over its own relation
(``Graph.target_view``: labels, node times, official split). Message graphs are per edge
type: a phase's graph drops, in **every** edge type, each edge with an endpoint of the target
type the phase may not see, so no val/test paper reaches training through an author either.

``transductive``: labels are split, every phase passes messages over the whole graph.
``inductive``: the train phase sees only edges among train nodes, the val phase edges among
train and val nodes, the test phase the whole graph; nodes keep their global ids throughout.
``time`` (strategy time; what ``mode: auto`` resolves to there): inductive, and unlabelled
carriers obey the same clock: the train phase sees the train nodes and the unlabelled nodes no
later than the train cut (the latest train timestamp), the val phase the train and val nodes and
the unlabelled nodes no later than the val cut, the test phase the whole graph. So no train-phase
message edge touches a node later than the train cut (the audit's ``time_respecting`` check).

Unlabelled nodes (``y == UNLABELLED``) are never in train/val/test: their role is "unused", and
sizes (fractions or counts) are of the *labelled* nodes. They stay in the graph as ordinary
message carriers and, having no phase of their own, belong to **every** phase's message graph
(time mode: every phase at or after their timestamp): inductive mode adds them to the nodes the
train and val phases see (no label or feature of a val/test node reaches training through them,
since every edge touching a val/test node is still dropped). A labelled node that no split took
("unused" by size) stays hidden as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gnnpipe.config import NodeSplitParams
# ROLES: code order of public_roles
from gnnpipe.data.graph import ROLES, UNLABELLED, Csr, EdgeType, Graph, TargetView
from gnnpipe.data.edges import csr_from_edges, edge_pairs
from gnnpipe.splitting.hash_assign import key_order, node_keys
from gnnpipe.splitting.ordered_split import ordered_roles

PHASES = ("train", "val", "test")
MessageGraphs = dict[str, dict[EdgeType, Csr]]  # phase -> edge type -> CSR


@dataclass(frozen=True)
class NodeSplit:
    roles: np.ndarray  # str (N_target,): "train" | "val" | "test" | "unused"
    message_graphs: MessageGraphs  # phases may share one dict, edge types one CSR
    mode: str
    # strategy public: official train/val/test nodes that are unlabelled, per role (now unused)
    unlabelled_dropped: dict[str, int] = field(default_factory=dict)

    def nodes(self, role: str) -> np.ndarray:
        """Node ids with ``role``: int64 (n_role,), ascending."""
        return np.flatnonzero(self.roles == role)


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


def split_nodes(graph: Graph, cfg: NodeSplitParams, rng: np.random.Generator,
                hash_seed: int | None = None) -> NodeSplit:
    """Assign every target node a role and build the message graph of each phase and edge type.

    Sizes are fractions of the labelled nodes or counts (``per_class``: the train count is per
    class); unlabelled nodes are always "unused". Strategies random and stratified rank their
    nodes by ``rng.permutation``, or (``hash_seed``, split.assign: hash) by the key of
    (hash_seed, node id) (gnnpipe/splitting/hash_assign.py). Raises ``ValueError`` when the
    sizes do not fit or a split would be empty.
    """
    if cfg.strategy == "cluster" and graph.own_relation() is None:
        raise ValueError(f"split.node.strategy=cluster keeps clusters of the {graph.target!r} "
                         f"type's own relation together, and this graph has no {graph.target} "
                         f"-> {graph.target} edge type; use random, stratified, time or public")
    target = graph.target_view()
    roles, dropped = _roles(target, cfg, rng, hash_seed)
    if cfg.mode == "time" and cfg.strategy != "time":  # params files are refused in config.py
        raise ValueError(f"split.node.mode=time needs split.node.strategy=time (found "
                         f"{cfg.strategy!r})")
    times = (target.timestamps.numpy() if cfg.mode == "time" and target.timestamps is not None
             else None)
    return NodeSplit(roles=roles, message_graphs=message_graphs(graph, roles, cfg.mode, times),
                     mode=cfg.mode, unlabelled_dropped=dropped)


def _roles(graph: TargetView, cfg: NodeSplitParams, rng: np.random.Generator,
           hash_seed: int | None) -> tuple[np.ndarray, dict[str, int]]:
    """Role of every node of the target type alone: str (N,), and (strategy public) the
    official split's unlabelled nodes per role."""
    y = graph.y.numpy()
    labelled = y != UNLABELLED
    sizes = checked_sizes(cfg, int(labelled.sum()), graph.num_nodes)
    roles = np.full(graph.num_nodes, "unused", dtype=object)
    dropped: dict[str, int] = {}

    def ranked(ids: np.ndarray) -> np.ndarray:  # ids in the order that takes them
        if hash_seed is None:
            return ids[rng.permutation(ids.size)]
        return ids[key_order(node_keys(hash_seed, ids))]

    if cfg.strategy in ("random", "stratified"):
        stratified = cfg.strategy == "stratified"
        class_sizes = (np.bincount(y[labelled], minlength=graph.num_classes) if stratified
                       else np.array([int(labelled.sum())]))
        counts = phase_counts(cfg, sizes, class_sizes, graph.num_nodes)
        # stratified: class members (y == c) never include an unlabelled node
        pools = ([np.flatnonzero(y == c) for c in range(graph.num_classes)] if stratified
                 else [np.flatnonzero(labelled)])  # every node when all are labelled: arange(n)
        for group, pool in enumerate(pools):
            order, bounds = ranked(pool), np.cumsum(counts[:, group])
            for key, lo, hi in zip(PHASES, np.r_[0, bounds[:-1]], bounds):
                roles[order[lo:hi]] = key
    elif cfg.strategy in ("cluster", "time"):  # graph-aware: see gnnpipe/splitting/ordered_split.py
        ordered_roles(graph, cfg, sizes, rng, roles, labelled)
    else:  # public: the dataset's official split; sizes do not apply
        dropped = _public_roles(graph, roles, labelled)
    for key in PHASES:
        if not (roles == key).any():
            raise ValueError(empty_role(key))
    return roles.astype(str), dropped


def empty_role(key: str) -> str:
    return (f"split.node.{key} resolves to 0 nodes; give a larger split.node.{key} (fraction "
            "or count)")


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
        remaining -= counts[i]
    return counts


def _public_roles(graph: TargetView, roles: np.ndarray, labelled: np.ndarray) -> dict[str, int]:
    """Fill ``roles`` from ``graph.public_roles`` (planetoid, ogb, pyg masks; see prepare).

    An official train/val/test node without a label becomes "unused"; returns how many per role.
    """
    if graph.public_roles is None:
        raise ValueError("split.node.strategy=public needs a dataset with an official split "
                         "(dataset.source planetoid, ogb, or pyg with train/val/test masks); "
                         "the prepared graph has none")
    roles[:] = np.asarray(ROLES, dtype=object)[graph.public_roles.numpy()]
    dropped = {key: int(((roles == key) & ~labelled).sum()) for key in PHASES}
    roles[~labelled] = "unused"
    empty = [key for key in PHASES if not (roles == key).any()]
    if empty:
        raise ValueError(f"split.node.strategy=public: the dataset's official split has no "
                         f"labelled {empty[0]} nodes" + (f" ({dropped[empty[0]]} are unlabelled)"
                                                         if dropped[empty[0]] else ""))
    return dropped


def message_graphs(graph: Graph, roles: np.ndarray, mode: str,
                   timestamps: np.ndarray | None = None) -> MessageGraphs:
    """The graph each phase may pass messages over, per edge type (see the module docstring).

    ``roles`` str (N_target,); ``timestamps`` (N_target,), needed by mode ``time``. Unlabelled
    target nodes (``graph.y``) keep their edges in the inductive train and val graphs.
    """
    if mode == "transductive":
        return {phase: graph.csr for phase in PHASES}
    seen = phase_visible(roles, mode, graph.y.numpy() != UNLABELLED, timestamps)
    return {"train": restrict_to(graph, graph.csr, seen["train"]),
            "val": restrict_to(graph, graph.csr, seen["val"]), "test": graph.csr}


def restrict_to(graph: Graph, csrs: dict[EdgeType, Csr], visible: np.ndarray
                ) -> dict[EdgeType, Csr]:
    """Every edge type without the edges that touch a target node outside ``visible`` (bool
    (N_target,)); an edge type not touching the target type is kept as the same object."""
    out = {}
    for edge_type, csr in csrs.items():
        s, _, d = edge_type
        if graph.target not in (s, d):
            out[edge_type] = csr
            continue
        src, dst = edge_pairs(csr)
        keep = np.ones(src.size, dtype=bool)
        if s == graph.target:
            keep &= visible[src]
        if d == graph.target:
            keep &= visible[dst]
        out[edge_type] = csr_from_edges(src[keep], dst[keep], graph.num_nodes_dict[d],
                                        graph.num_nodes_dict[s])
    return out


def phase_visible(roles: np.ndarray, mode: str, labelled: np.ndarray | None = None,
                  timestamps: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """bool (N_target,) per phase "train" / "val": the target nodes whose edges its message
    graph keeps in mode ``inductive`` or ``time`` (the test phase keeps the whole graph).

    ``roles`` str (N,); ``labelled`` bool (N,) (None: every node): the train and val graphs keep
    the edges of the unlabelled nodes too (time: only those no later than the phase's cut);
    ``timestamps`` (N,), needed by mode ``time``."""
    carriers = np.zeros(roles.size, dtype=bool) if labelled is None else ~labelled
    is_train, is_val = roles == "train", roles == "val"
    carriers_train = carriers_val = carriers
    if mode == "time":
        if timestamps is None:
            raise ValueError("split.node.mode=time needs node timestamps; the prepared graph "
                             "has none")
        t = np.asarray(timestamps)
        carriers_train = carriers & (t <= t[is_train].max())  # NaN compares False: hidden
        carriers_val = carriers & (t <= t[is_train | is_val].max())
    return {"train": is_train | carriers_train, "val": is_train | is_val | carriers_val}
