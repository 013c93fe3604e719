"""Graph-aware node splits that cut an ordering of whole units (``split.node.strategy``).

``time``: nodes ordered by timestamp (ties by node id); the earliest are train, then val, then
test, so nothing is validated or tested on a node older than one it trained on. The order is
never sorted in one place: each timestamp maps to an order-preserving uint64 key
(``time_keys``) and the cut is a key threshold found by blocks (gnnpipe/splitting/split.py),
ties at a threshold broken by node id.
``cluster``: nodes are grouped (METIS parts, or connected components of the target's own
relation), the groups are shuffled and laid end to end, and each group goes *whole* to the
split its midpoint falls in. Edges between nodes of different splits then exist only between
groups: none with components, only METIS's edge cut with parts. Sizes are met to within half a
group at each split boundary. METIS and the components need the whole relation in one process
(``cluster_codes``): the one strategy that runs only on ``cluster.engine: local``.

Both ignore labels (no stratification): the audit's class balance shows what the split did.
Only labelled nodes get a split: sizes count labelled nodes (a cluster weighs as many as it has
labelled members, a time cut runs over the labelled nodes' times), and unlabelled nodes stay
"unused" whichever cluster or time they have.
"""

from __future__ import annotations

import numpy as np

from gnnpipe.config import NodeSplitParams, PartitionParams
from gnnpipe.data.graph import TargetView
from gnnpipe.graphops.analyze import connected_components
from gnnpipe.splitting.hash_assign import PHASES, UNUSED

SIGN = np.uint64(1 << 63)
NAN_KEY = np.uint64((1 << 64) - 1)  # after every number: NaN sorts last, as numpy sorts it


def time_keys(times: np.ndarray) -> np.ndarray:
    """uint64 (n,) keys ordered as ``times`` (int64 or float): an integer with its sign bit
    flipped; a float's IEEE bits (all flipped when negative), -0.0 as 0.0, NaN last."""
    times = np.asarray(times)
    if times.dtype.kind in "iu":
        return times.astype(np.int64).view(np.uint64) ^ SIGN
    values = times.astype(np.float64) + 0.0  # -0.0 + 0.0 is 0.0: equal values, equal keys
    bits = values.view(np.uint64)
    keys = np.where(bits & SIGN, ~bits, bits | SIGN)
    return np.where(np.isnan(values), NAN_KEY, keys)


def no_later(keys: np.ndarray, cut: np.uint64) -> np.ndarray:
    """bool (n,): times (as ``time_keys``) at or before the cut's, as ``t <= cut`` compares
    floats (a NaN on either side compares False)."""
    return (keys <= cut) & (keys != NAN_KEY) & (cut != NAN_KEY)


def ordered_sizes(cfg: NodeSplitParams, sizes: dict[str, int], labelled: int,
                  num_nodes: int) -> dict[str, int]:
    """``sizes`` of the ``labelled`` nodes for a cut of an ordering: fractions that round past
    the labelled nodes give test the rest; more than there are is an error."""
    need = sum(sizes.values())
    fractions = [getattr(cfg, phase) for phase in PHASES]
    if (need > labelled and all(isinstance(f, float) for f in fractions)
            and sum(fractions) <= 1 + 1e-9):
        sizes = dict(sizes, test=labelled - sizes["train"] - sizes["val"])  # rounding overshoot
        need = labelled
    if need > labelled:
        of = "" if labelled == num_nodes else f" labelled nodes (of {num_nodes})"
        raise ValueError(f"split.node train+val+test = {need} nodes exceeds the graph's "
                         f"{labelled}{of}")
    return sizes


def cluster_labels(graph: TargetView, cfg: NodeSplitParams, rng: np.random.Generator) -> np.ndarray:
    """Cluster id of every node: int64 (N,) (METIS part or connected component)."""
    if cfg.cluster == "component":
        return connected_components(graph.csr)
    if cfg.num_clusters > graph.num_nodes:
        raise ValueError(f"split.node.num_clusters={cfg.num_clusters} exceeds the graph's "
                         f"{graph.num_nodes} nodes")
    from gnnpipe.graphops.partition import assign_parts  # imports pymetis: only this strategy needs it

    # pymetis (a dependency) always: the split must not change with the optional backends.
    parts = PartitionParams(method="metis", backend="pymetis", num_parts=cfg.num_clusters)
    return assign_parts(graph.csr, parts, rng).astype(np.int64)


def cluster_codes(graph: TargetView, cfg: NodeSplitParams, sizes: dict[str, int],
                  rng: np.random.Generator) -> np.ndarray:
    """Phase code int8 (N,) of every node for strategy ``cluster`` (3: unused; unlabelled nodes
    always), ``sizes`` from ``ordered_sizes``."""
    labelled = graph.y.numpy() != -1
    n, m = graph.num_nodes, int(labelled.sum())
    of = "" if m == n else f" labelled nodes (of {n})"
    labels = cluster_labels(graph, cfg, rng)
    clusters, member_of, counts = np.unique(labels, return_inverse=True, return_counts=True)
    if m < n:  # a cluster weighs its labelled members
        counts = np.bincount(member_of[labelled], minlength=clusters.size)
    order = rng.permutation(clusters.size)
    # clusters laid end to end in that order: each goes to the split its midpoint falls in
    weights = counts[order].astype(np.float64)
    bounds = np.cumsum([sizes[phase] for phase in PHASES])
    cluster_role = np.empty(clusters.size, dtype=np.int64)  # 0 train, 1 val, 2 test, 3 unused
    cluster_role[order] = np.searchsorted(bounds, np.cumsum(weights) - weights / 2.0,
                                          side="right")
    empty = [phase for i, phase in enumerate(PHASES)
             if sizes[phase] and not ((cluster_role == i) & (counts > 0)).any()]
    if empty:
        raise ValueError(
            f"split.node.strategy=cluster leaves split.node.{empty[0]} without nodes: the "
            f"largest of {clusters.size} clusters ({cfg.cluster}) holds {int(counts.max())} of "
            f"{m}{of or ' nodes'} and clusters are never cut; use more or smaller clusters "
            f"(split.node.cluster=metis with a larger split.node.num_clusters)")
    codes = cluster_role[member_of].astype(np.int8)
    codes[~labelled] = UNUSED
    return codes
