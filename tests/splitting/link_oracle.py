"""The whole-graph link split and link audit that the block algorithm replaced
(gnnpipe/splitting/link_split.py, link_audit.py): a test oracle, and the in-memory split the
training, sampling and reporting tests build on tiny graphs. ``split_links`` with ``hash_seed``
is what the block split writes, byte for byte (hard negatives aside: the block ones rank by a
hashed priority); without it (a permutation, the rule before issue 44) the tests' tiny splits
keep the data they were written against."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gnnpipe import io
from gnnpipe.config import LinkSplitParams
from gnnpipe.data.edges import csr_from_edges, edge_pairs, homogeneous_csr, sorted_unique
from graph_oracle import edge_keys
from gnnpipe.data.graph import Csr, EdgeType, Graph, edge_type_name
from gnnpipe.graphops.heuristics import train_projection
from gnnpipe.runtime.rng import mix
from gnnpipe.splitting.hash_assign import FLIP_STEP, ORDER_STEP, PAIR_STEP
from gnnpipe.splitting.link_audit import (LinkSums, NegativeSums, found, link_compared,
                                          link_hidden, link_report)
from gnnpipe.splitting.link_split import (EDGE_ROLES, negative_weights, HELD_OUT, PHASES, TAKEN_CODES,
                                          _VISIBLE_CODES, _MESSAGE, _SUPERVISION_ONLY, _TEST,
                                          _VAL, pair_counts)
from gnnpipe.data.edges import contains
from gnnpipe.splitting.negatives import (NegativeSampler, hashed_negatives,
                                         training_sampler_of_blocks)

LINK_ROLES = EDGE_ROLES

MessageGraphs = dict[str, dict[EdgeType, Csr]]


@dataclass(frozen=True)
class LinkSplit:
    edge_type: EdgeType
    reverse: EdgeType | None
    edges: dict[str, torch.Tensor]  # role -> int64 (2, E_role) (src of E[0], dst of E[2])
    negatives: dict[str, torch.Tensor]  # "val"/"test" -> int64 (P, K) ids of E[2]
    message_graphs: MessageGraphs
    undirected: bool


def key_order(keys: np.ndarray) -> np.ndarray:
    """The order that ranks ``keys`` ascending: int64 (n,)."""
    return np.argsort(keys, kind="stable")


def _is_subset(sub: Csr, full: Csr) -> bool:
    keys, full_keys = edge_keys(sub), edge_keys(full)
    pos = torch.searchsorted(full_keys, keys)
    pos = pos.clamp(max=max(full_keys.numel() - 1, 0))
    return bool(keys.numel() == 0 or (full_keys.numel() and (full_keys[pos] == keys).all()))


def _within(sub: Csr, full: Csr, num_src: int) -> bool:
    """Every edge of ``sub`` is an edge of ``full`` (same edge type), by sets: the oracle's way."""
    return sub is full or set(edge_keys(sub).tolist()) <= set(edge_keys(full).tolist())


def _typed_checks(graph, message_graphs, roles, mode, skip=()) -> list[dict]:
    """The other edge types' ``within_graph`` checks (the link task has no roles)."""
    return [{"check": f"message_{phase}[{edge_type_name(edge_type)}]_within_graph",
             "passed": _within(message_graphs[phase][edge_type], graph.csr[edge_type],
                               graph.num_nodes_dict[edge_type[0]]),
             "detail": "every message edge is an edge of the prepared graph"}
            for phase in PHASES for edge_type in graph.edge_types if edge_type not in skip]


def _pairs(edges: torch.Tensor, n: int) -> np.ndarray:
    src, dst = edges[0].numpy(), edges[1].numpy()
    return np.minimum(src, dst) * n + np.maximum(src, dst)


def edge_keys_both_directions(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> np.ndarray:
    """Sorted unique int64 keys ``u * N + v`` of every edge in both directions: (K,) (what
    ``negatives.forbidden_keys`` builds by head buckets)."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    return sorted_unique(np.concatenate([src * num_nodes + dst, dst * num_nodes + src]))


def training_sampler(visible_src: np.ndarray, visible_dst: np.ndarray, num_nodes: int,
                     weights: np.ndarray | None = None) -> NegativeSampler:
    """``negatives.training_sampler_of_blocks`` of in-memory edges ``visible_*`` (E,), one
    block: forbids these edges (either direction) and nothing else."""
    return training_sampler_of_blocks(lambda: [(visible_src, visible_dst)], num_nodes, weights)


def typed_negative_sampler(graph: Graph, edge_type: EdgeType, src: np.ndarray,
                           dst: np.ndarray, weights: np.ndarray | None) -> NegativeSampler:
    """``training_sampler`` over homogeneous ids forbidding the type-local pairs ``src`` ->
    ``dst`` (the edges training may see)."""
    offsets = graph.offsets()
    return training_sampler(src + offsets[edge_type[0]], dst + offsets[edge_type[2]],
                            graph.num_nodes, weights)


def sample_hashed(sampler: NegativeSampler, heads, edges, per_head, seed):
    n = sampler.num_nodes
    return hashed_negatives(heads, edges, per_head, seed, n, sampler.cumulative,
                            lambda h, t: (h == t) | contains(sampler.forbidden, h * n + t))


def is_symmetric(csr: Csr) -> bool:
    """True if every stored edge's reverse is stored too (an undirected graph)."""
    keys = torch.unique(edge_keys(csr))
    n = csr.num_nodes
    reverse = torch.sort((keys % n) * n + keys // n).values
    return bool(torch.equal(keys, reverse))


def assign_pair_roles(pairs: np.ndarray, cfg: LinkSplitParams, rng: np.random.Generator,
                      what: str, hash_seed: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray, int]:
    """Role code int8 (P,) per pair id (``_VAL`` / ``_TEST`` / ``_SUPERVISION_ONLY`` /
    ``_MESSAGE``), an orientation bool (P,) and the supervision-only count: pairs taken in
    shuffled order (``rng``), or by their keys of ``hash_seed`` (split.assign: hash)."""
    num_pairs = pairs.size
    n_val, n_test, n_disjoint = pair_counts(num_pairs, cfg, what)
    code = np.empty(num_pairs, dtype=np.int8)
    order = (rng.permutation(num_pairs) if hash_seed is None
             else key_order(mix(hash_seed, PAIR_STEP, pairs)))
    bounds = np.cumsum([n_val, n_test, n_disjoint])
    code[order] = TAKEN_CODES[np.searchsorted(bounds, np.arange(num_pairs), side="right")]
    flip = (rng.random(num_pairs) < 0.5 if hash_seed is None  # orientation, if undirected
            else (mix(hash_seed, FLIP_STEP, pairs) & np.uint64(1)).astype(bool))
    return code, flip, n_disjoint


def pair_keys(edge_type: EdgeType, reverse: EdgeType | None, src: np.ndarray, dst: np.ndarray,
              num_dst: int, *, flipped: bool = False) -> np.ndarray:
    """Key of the pair behind each edge: ``E`` edges ``a -> p`` and ``R`` edges ``p -> a``
    (``flipped``) give ``a * N_p + p``; a relation that is its own reverse
    (``reverse == edge_type``) keys the unordered pair ``min * N + max``."""
    if flipped:
        src, dst = dst, src
    if reverse == edge_type:
        return np.minimum(src, dst) * num_dst + np.maximum(src, dst)
    return src * num_dst + dst


def split_links(graph: Graph, cfg: LinkSplitParams, rng: np.random.Generator,
                hash_seed: int | None = None) -> LinkSplit:
    """Hold out val/test pairs of ``graph.link_edge_type`` and its reverse together, build the
    per-phase, per-edge-type message graphs and the fixed negatives: shuffled by ``rng``, or
    (``hash_seed``, split.assign: hash) pairs, row order and negatives from hashes of ids.

    Repeated edges and self-loops are allowed. Raises ``ValueError`` when the sizes leave a role
    empty or no negative can be drawn.
    """
    e = graph.link_edge_type
    r = graph.reverse.get(e)
    n_dst = graph.num_nodes_dict[e[2]]
    src, dst = edge_pairs(graph.csr[e])
    loop = (src == dst) if e[0] == e[2] else np.zeros(src.size, dtype=bool)
    keys = pair_keys(e, r, src, dst, n_dst)
    rev_src = rev_dst = rev_keys = rev_loop = None
    if r is not None and r != e:
        rev_src, rev_dst = edge_pairs(graph.csr[r])
        rev_keys = pair_keys(e, r, rev_src, rev_dst, n_dst, flipped=True)
        rev_loop = (rev_src == rev_dst) if e[0] == e[2] else np.zeros(rev_src.size, dtype=bool)
    pairs = np.unique(np.concatenate([keys[~loop]] + ([] if rev_keys is None
                                                     else [rev_keys[~rev_loop]])))
    num_pairs = pairs.size
    if num_pairs == 0:
        raise ValueError("dataset.task=link needs edges between distinct nodes; "
                         + ("the graph" if graph.is_homogeneous else
                            f"edge type {edge_type_name(e)}") + " has none")
    code, flip, n_disjoint = assign_pair_roles(
        pairs, cfg, rng, "the graph's {n} edges (undirected pairs)" if graph.is_homogeneous
        else "the {n} " + edge_type_name(e) + " pairs", hash_seed)

    def phase_csr(edge_src, edge_dst, edge_keys, edge_loop, edge_type, phase) -> Csr:
        pos = np.searchsorted(pairs, edge_keys)
        edge_code = np.where(edge_loop, -1, code[np.minimum(pos, num_pairs - 1)])
        keep = edge_loop | np.isin(edge_code, _VISIBLE_CODES[phase])
        return csr_from_edges(edge_src[keep], edge_dst[keep], graph.num_nodes_dict[edge_type[2]],
                              graph.num_nodes_dict[edge_type[0]])

    message_graphs: MessageGraphs = {}
    for phase in PHASES:
        if phase == "val" and not n_disjoint:  # the same edges as train: stored once
            message_graphs[phase] = message_graphs["train"]
            continue
        graphs = dict(graph.csr)  # the other edge types: whole, the same objects
        graphs[e] = phase_csr(src, dst, keys, loop, e, phase)
        if rev_keys is not None:
            graphs[r] = phase_csr(rev_src, rev_dst, rev_keys, rev_loop, r, phase)
        message_graphs[phase] = graphs

    undirected = r == e and is_symmetric(graph.csr[e])
    if undirected:  # unordered pairs of one node type: a random orientation
        low, high = pairs // n_dst, pairs % n_dst
        pos_src, pos_dst = np.where(flip, high, low), np.where(flip, low, high)
        pos_code = code
    elif r == e:  # every distinct directed edge of a pair, labelled with the pair's role
        directed = np.unique(src[~loop] * n_dst + dst[~loop])
        pos_src, pos_dst = directed // n_dst, directed % n_dst
        pos_code = code[np.searchsorted(pairs, np.minimum(pos_src, pos_dst) * n_dst
                                        + np.maximum(pos_src, pos_dst))]
    else:
        pos_src, pos_dst = pairs // n_dst, pairs % n_dst
        pos_code = code
    role_codes = {"message": (_MESSAGE,), "val": (_VAL,), "test": (_TEST,),
                  "train_supervision": (_SUPERVISION_ONLY,) if n_disjoint else (_MESSAGE,)}
    edges = {}
    for role in EDGE_ROLES:  # shuffled within a role: row order carries no trace of ids
        rows = np.flatnonzero(np.isin(pos_code, role_codes[role]))
        rows = rows[rng.permutation(rows.size) if hash_seed is None else key_order(
            mix(hash_seed, ORDER_STEP, pos_src[rows] * n_dst + pos_dst[rows]))]
        edges[role] = torch.from_numpy(np.stack([pos_src[rows], pos_dst[rows]]).astype(np.int64))

    # uniform over every node needs no weights (draws integers, not floats: kept so)
    weights = (None if cfg.negative_strategy == "uniform" and graph.num_nodes == n_dst
               else negative_weights(graph, e, cfg.negative_strategy, message_graphs["train"][e]))
    sampler = typed_negative_sampler(graph, e, pairs // n_dst, pairs % n_dst, weights)
    head_offset, target_offset = graph.offsets()[e[0]], graph.offsets()[e[2]]
    counts = {"val": cfg.num_val_negatives, "test": cfg.num_test_negatives}
    negatives = {}
    for phase in HELD_OUT:
        heads = edges[phase][0].numpy() + head_offset
        drawn = (sampler.sample(heads, counts[phase], rng) if hash_seed is None else
                 sample_hashed(sampler, heads, edges[phase][0].numpy() * n_dst
                               + edges[phase][1].numpy(), counts[phase], hash_seed))
        negatives[phase] = torch.from_numpy(drawn - target_offset)
    return LinkSplit(edge_type=e, reverse=r, edges=edges, negatives=negatives,
                     message_graphs=message_graphs, undirected=undirected)


def hard_link_negatives(graph: Graph, link: LinkSplit, per_head: int, rng: np.random.Generator
                        ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """Hard negatives of the val / test positives of ``link`` for the tests' tiny graphs: per
    head the ``per_head`` targets of type E[2] of highest resource allocation on the train
    phase's undirected simple view (ties by ``rng``'s permutation), never the head, a message
    edge or a positive pair; short rows filled with uniform allowed targets. Type-local
    (P, per_head) ids per phase, and the fraction of slots the ranking filled."""
    from scipy import sparse

    e = link.edge_type
    offsets = graph.offsets()
    s_off, d_off, n_dst = offsets[e[0]], offsets[e[2]], graph.num_nodes_dict[e[2]]
    n = graph.num_nodes
    view = train_projection(graph.sizes(), link.message_graphs["train"])
    a = sparse.csr_matrix((np.ones(view.num_edges), view.indices.numpy(), view.indptr.numpy()),
                          shape=(n, n))
    a = ((a + a.T) > 0).astype(np.float64).tolil()
    a.setdiag(0)
    a = a.tocsr()
    a.eliminate_zeros()
    deg = np.asarray(a.sum(axis=1)).ravel()
    ra = (a @ sparse.diags(np.divide(1.0, deg, where=deg > 0, out=np.zeros(n))) @ a).tocsr()
    positives = torch.cat([link.edges[role] for role in EDGE_ROLES], dim=1).numpy()
    banned = set(zip((positives[0] + s_off).tolist(), (positives[1] + d_off).tolist()))
    banned |= {(v, u) for u, v in banned}
    priority = rng.permutation(n)
    out, ranked = {}, {}
    for phase in HELD_OUT:
        rows, filled = [], 0
        for head in (link.edges[phase][0].numpy() + s_off).tolist():
            row = ra.getrow(head)
            allowed = [(-score, priority[c], c) for c, score in zip(row.indices, row.data)
                       if d_off <= c < d_off + n_dst and c != head and score > 0
                       and (head, c) not in banned and not a[head, c]]
            picked = [c for _, _, c in sorted(allowed)[:per_head]]
            filled += len(picked)
            while len(picked) < per_head:
                c = int(rng.integers(d_off, d_off + n_dst))
                if c != head and (head, c) not in banned and not a[head, c]:
                    picked.append(c)
            rows.append(picked)
        out[phase] = torch.tensor(rows, dtype=torch.int64).reshape(-1, per_head) - d_off
        ranked[phase] = filled / max(len(rows) * per_head, 1)
    return out, ranked


def audit_link_split(graph: Graph, edge_type: EdgeType, edges: dict[str, torch.Tensor],
                     negatives: dict[str, torch.Tensor], message_graphs: MessageGraphs, *,
                     disjoint: bool, hard: dict[str, torch.Tensor] | None = None) -> dict:
    """Audit report of the link split of ``edge_type`` held out with its reverse (JSON-ready);
    ``report["passed"]`` False if any check failed.

    ``edges`` role -> int64 (2, E) type-local positives (LINK_ROLES); ``negatives`` "val"/"test"
    -> int64 (P, K) targets (ids of ``edge_type[2]``) whose heads are ``edges[phase][0]``;
    ``hard``: the hard negatives in the same form (None: the split drew none), checked alike;
    ``disjoint``: supervision-only edges exist and must be absent from the train graph.
    """
    reverse = graph.reverse.get(edge_type)
    names = {"edge_type": edge_type_name(edge_type),
             "reverse_edge_type": None if reverse is None else edge_type_name(reverse)}
    if graph.is_homogeneous:
        report = _link_report(graph.csr[edge_type], edges,
                              {p: message_graphs[p][edge_type] for p in PHASES}, negatives,
                              disjoint=disjoint, hard=hard)
        return {**report, **names}
    held = (edge_type,) if reverse in (None, edge_type) else (edge_type, reverse)
    offsets = graph.offsets()
    s_off, d_off = offsets[edge_type[0]], offsets[edge_type[2]]
    shifted = {role: torch.stack([pair[0] + s_off, pair[1] + d_off])
               for role, pair in edges.items()}
    report = _link_report(
        _project(graph, graph.csr, held), shifted,
        {p: _project(graph, message_graphs[p], held) for p in PHASES},
        {p: negatives[p] + d_off for p in negatives}, disjoint=disjoint,
        hard=None if hard is None else {p: hard[p] + d_off for p in hard})
    held_names = "+".join(edge_type_name(e) for e in held)
    for check in report["checks"]:  # the held-out edge types, together
        check["check"] = f"{check['check']}[{held_names}]"
    n_dst = graph.num_nodes_dict[edge_type[2]]
    for name, drawn in (("negatives", negatives), ("hard_negatives", hard or {})):
        for phase, targets in drawn.items():
            typed = bool(((targets >= 0) & (targets < n_dst)).all())
            report["checks"].append({"check": f"{name}_{phase}_are_{edge_type[2]}_nodes",
                                     "passed": typed, "detail": f"targets in [0, {n_dst}) of "
                                                                f"{edge_type[2]}"})
    report["checks"] += _typed_checks(graph, message_graphs, None, None, skip=held)
    report.update(passed=all(c["passed"] for c in report["checks"]), **names)
    return report


def _project(graph: Graph, csrs: dict[EdgeType, Csr], types: tuple[EdgeType, ...]) -> Csr:
    """``types`` edges of ``csrs`` as one square CSR over homogeneous ids."""
    return homogeneous_csr(graph.sizes(), {e: csrs[e] for e in types})


def _link_report(full: Csr, edges: dict[str, torch.Tensor], message_graphs: dict[str, Csr],
                 negatives: dict[str, torch.Tensor], *, disjoint: bool,
                 hard: dict[str, torch.Tensor] | None = None) -> dict:
    """The link audit over one square CSR ``full`` (homogeneous ids), its per-phase message
    graphs, positives and negatives (random, and ``hard`` where given). Pairs are compared
    unordered, so an edge counts as present whichever direction is stored."""
    n = full.num_nodes
    full_src, full_dst = full.indices.numpy(), full.targets().numpy()
    full_directed = sorted_unique(full_src * n + full_dst)
    not_loop = full_src != full_dst
    full_pairs = sorted_unique(np.minimum(full_src, full_dst)[not_loop] * n
                           + np.maximum(full_src, full_dst)[not_loop])
    pairs = {role: sorted_unique(_pairs(edges[role], n)) for role in LINK_ROLES}
    overlap = {f"{a}&{b}": found(np.intersect1d(pairs[a], pairs[b]))
               for a, b in link_compared(disjoint)}
    assigned = sorted_unique(np.concatenate([pairs[role] for role in LINK_ROLES]))
    leaked, within = {}, {}
    for phase in PHASES:
        seen = sorted_unique(_pairs(message_graphs[phase].edge_index(), n))
        within[phase] = _is_subset(message_graphs[phase], full)
        leaked[phase] = {role: found(np.intersect1d(seen, pairs[role]))
                         for role in link_hidden(phase, disjoint)}
    sums = LinkSums(
        sizes={role: int(edges[role].shape[1]) for role in LINK_ROLES},
        loops={role: int((edges[role][0] == edges[role][1]).sum()) for role in LINK_ROLES},
        outside={role: int((~np.isin(edges[role][0].numpy() * n + edges[role][1].numpy(),
                                     full_directed)).sum()) for role in LINK_ROLES},
        overlap={name: pair for name, pair in overlap.items() if pair[0]},
        mismatch=int(np.setxor1d(pairs["message"], pairs["train_supervision"]).size),
        lost=found(np.setdiff1d(full_pairs, assigned)),
        message_edges={phase: message_graphs[phase].num_edges for phase in PHASES},
        within=within,
        leaked={phase: {r: pair for r, pair in roles.items() if pair[0]}
                for phase, roles in leaked.items()},
        negatives=_negative_sums(negatives, edges, full_pairs, n),
        hard=None if hard is None else _negative_sums(hard, edges, full_pairs, n))
    return link_report(sums, n, disjoint=disjoint)


def _negative_sums(negatives: dict[str, torch.Tensor], edges: dict[str, torch.Tensor],
                   full_pairs: np.ndarray, n: int) -> dict[str, NegativeSums]:
    """``LinkSums.negatives`` of the fixed negatives of each held-out phase (int64 (P, K)
    targets of the heads ``edges[phase][0]``; ``full_pairs``: the graph's unordered pair keys)."""
    sums = {}
    for phase in HELD_OUT:
        targets, heads = negatives[phase], edges[phase][0]
        shape = tuple(targets.shape)
        if not (targets.dim() == 2 and targets.shape[0] == heads.numel()):
            sums[phase] = (shape, heads.numel(), False, 0, 0)
            continue
        h = heads[:, None].expand_as(targets).reshape(-1).numpy()
        t = targets.reshape(-1).numpy()
        sums[phase] = (
            shape, heads.numel(), bool(((t >= 0) & (t < n)).all()), int((h == t).sum()),
            int(np.isin(np.minimum(h, t) * n + np.maximum(h, t), full_pairs).sum()))
    return sums


def true_pairs(graph) -> set[tuple[int, int]]:
    """Every edge of the prepared graph, both directions, over homogeneous ids."""
    offsets, pairs = graph.offsets(), set()
    for (s, _, d), csr in graph.csr.items():
        a, b = edge_pairs(csr)
        for u, v in zip((a + offsets[s]).tolist(), (b + offsets[d]).tolist()):
            pairs |= {(u, v), (v, u)}
    return pairs


def write_link_split(out: Path, graph: Graph, link: LinkSplit, meta: dict) -> None:
    """``link``'s split files, as the stage writes them: its tables one part each
    (``io.stream_link_tables``), then ``io.write_split`` (``meta`` into meta.json)."""
    io.stream_link_tables(out, lambda role: [link.edges[role].numpy().T],
                          lambda phase, _: [(link.edges[phase][0].numpy(),
                                             link.negatives[phase].numpy())])
    io.write_split(out, graph, link.message_graphs, meta, num_negatives={
        phase: int(link.negatives[phase].shape[1]) for phase in io.LINK_EVAL_PHASES})
