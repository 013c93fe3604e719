"""Split files, one layout for every graph (``gnnpipe/io/typed.py`` documents them and reads them
back): the target type's node roles (``nodes_<target>.parquet``), per-phase message graphs (one
CSR per edge type in ``message_<phase>.pt``), meta.json; for the link task also the held-out
positives per role and the fixed negatives per phase. meta.json lists the target, node types
``[name, num_nodes]`` and edge types in order and the message graph file of each phase."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from gnnpipe.data.graph import (ROLES, Csr, EdgeType, Graph, check_name, edge_type_name, layout_of,
                                parse_edge_type)
from gnnpipe.io.atomic import existing, read_json, write_json
from gnnpipe.io.blocks import ROW_GROUP_ROWS, table_stream
from gnnpipe.io.common import EDGES_SCHEMA, PHASES, SPLIT_SCHEMA, reading
from gnnpipe.io.parquet import read_batches
from gnnpipe.io.temps import scratch_or_memory
from gnnpipe.io.tensors import save_tensors

MESSAGE_SCHEMA = "gnnpipe.message_graph/1"


def write_split(out: Path, graph: Graph, message_graphs: dict[str, dict[EdgeType, Csr]],
                meta: dict, *, roles: np.ndarray | None = None,
                num_negatives: dict[str, int] | None = None,
                num_hard_negatives: dict[str, int] | None = None) -> None:
    """A split of ``graph``; ``meta`` goes into meta.json after its ``task``.
    ``message_graphs`` phase -> edge type -> CSR; phases sharing their CSRs share one file.
    Node task: ``roles`` str (N_target,) in ROLES (or their int8 codes, streamed). Link task
    (its tables written by ``stream_link_tables``): ``num_negatives`` per val/test positive,
    ``num_hard_negatives`` where hard negatives were written; its roles are every target node
    "unused" (given or not)."""
    link = {} if num_negatives is None else {"num_negatives": num_negatives}
    if num_hard_negatives is not None:
        link["num_hard_negatives"] = num_hard_negatives
    files = _write_message_graphs(out, message_graphs)
    if num_negatives is not None and roles is None:  # no node carries a label role
        roles = np.full(graph.num_nodes_dict[graph.target], "unused", dtype=object)
    _write_roles(out / f"nodes_{graph.target}.parquet", roles)
    # node types and edge types in order: partition reads this folder alone
    write_json(out / "meta.json", {
        "task": "node" if num_negatives is None else "link", **meta, "target": graph.target,
        "node_types": [list(entry) for entry in graph.sizes()],
        "edge_types": [edge_type_name(e) for e in graph.edge_types], **link,
        "message_graph": files})


def _write_roles(path: Path, roles: np.ndarray) -> None:
    """``roles`` str (N,), or int8 codes (N,) of ROLES (a memory map of the block split),
    streamed a row group at a time."""
    names = np.asarray(ROLES)
    with table_stream(path, SPLIT_SCHEMA, "gnnpipe.split_nodes/1") as add:
        for lo in range(0, roles.size, ROW_GROUP_ROWS):
            part = np.asarray(roles[lo:lo + ROW_GROUP_ROWS])
            add(pa.table({"node_id": np.arange(lo, lo + part.size, dtype=np.int64),
                          "split": names[part] if part.dtype == np.int8 else part}))


def _write_message_graphs(out: Path, message_graphs: dict[str, dict[EdgeType, Csr]]
                          ) -> dict[str, str]:
    """One ``message_<phase>.pt`` per distinct graph of the phases (phases whose CSRs are the
    same objects share one file), one CSR per edge type in it; returns phase -> file."""
    files: dict[str, str] = {}
    written: dict[tuple[int, ...], str] = {}
    for phase in PHASES:
        graphs = message_graphs[phase]
        key = tuple(id(csr) for csr in graphs.values())
        if key not in written:
            written[key] = f"message_{phase}.pt"
            tensors = {}
            for edge_type, csr in graphs.items():
                name = edge_type_name(edge_type)
                tensors[f"{name}.indptr"], tensors[f"{name}.indices"] = csr.indptr, csr.indices
            save_tensors(out / written[key], MESSAGE_SCHEMA, tensors)
        files[phase] = written[key]
    return files


def read_split_meta(split: Path) -> dict:
    """``meta.json``, checked: message graph files per phase, node types ``[name, num_nodes]``
    and edge types over them. Adds ``sizes`` (``(type, num_nodes)`` in order),
    ``edge_type_list`` (parsed edge types) and ``layout`` (homogeneous | typed, derived)."""
    path = Path(split) / "meta.json"
    meta = read_json(path)
    files = meta.get("message_graph")
    if not isinstance(files, dict) or set(files) != set(PHASES):
        raise ValueError(f"{path}: 'message_graph' must map each of {', '.join(PHASES)} to a file")
    try:
        sizes = [(check_name(t, "node type"), int(n)) for t, n in meta["node_types"]]
        edge_types = [parse_edge_type(name) for name in meta["edge_types"]]
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: node_types / edge_types missing or malformed ({err}); "
                         "re-run the split stage") from None
    names = {t for t, _ in sizes}
    if meta.get("target") not in names or any(s not in names or d not in names
                                               for s, _, d in edge_types):
        raise ValueError(f"{path}: target and edge types must name node types of node_types")
    return {**meta, "sizes": sizes, "edge_type_list": edge_types,
            "layout": layout_of([t for t, _ in sizes], edge_types)}


# --------------------------------------------------------------------------------- link split
# split/ for dataset.task link, beside the files above (nodes_<target>.parquet then has every
# node "unused": no node carries a label role): edges_<role>.parquet (src, dst) positives per role,
# negatives_<phase>.parquet (positive, src, dst) K fixed negatives per val/test positive, and
# with split.link.num_hard_negatives negatives_hard_<phase>.parquet, the hard ones alike.
LINK_EDGE_ROLES = ("message", "train_supervision", "val", "test")
LINK_EVAL_PHASES = ("val", "test")
NEGATIVES_SCHEMA = pa.schema([("positive", pa.int64()), ("src", pa.int64()), ("dst", pa.int64())])


def stream_link_tables(out: Path, edge_parts: Callable[[str], Iterable[np.ndarray]],
                       negative_parts: Callable[..., Iterable[tuple[np.ndarray, np.ndarray]]],
                       hard: bool = False) -> None:
    """A link split's tables (``edges_<role>.parquet``, ``negatives_<phase>.parquet``) from
    parts in row order: ``edge_parts(role)`` int64 (m, 2) (src, dst), ``negative_parts(phase,
    "n")`` the heads (m,) and targets (m, K) of consecutive positives (``hard``: also
    ``negative_parts(phase, "h")``, the hard ones); one part in memory at a time."""
    for role in LINK_EDGE_ROLES:
        with table_stream(out / f"edges_{role}.parquet", EDGES_SCHEMA,
                          "gnnpipe.split_edges/1") as add:
            for pairs in edge_parts(role):
                add(pa.table({"src": pairs[:, 0], "dst": pairs[:, 1]}))
    for name, prefix in (("n", "negatives"), ("h", "negatives_hard"))[:2 if hard else 1]:
        for phase in LINK_EVAL_PHASES:
            _write_negatives(out / f"{prefix}_{phase}.parquet", negative_parts(phase, name))


def _write_negatives(path: Path, parts: Iterable[tuple[np.ndarray, np.ndarray]]) -> None:
    """One (positive, src, dst) row per negative, from ``parts``: the heads (m,) and targets
    int64 (m, K) of consecutive positives."""
    offset = 0
    with table_stream(path, NEGATIVES_SCHEMA, "gnnpipe.negatives/1") as add:
        for heads, targets in parts:
            rows, per = targets.shape
            add(pa.table({"positive": np.repeat(np.arange(offset, offset + rows, dtype=np.int64),
                                                per),
                          "src": np.repeat(heads, per), "dst": targets.reshape(-1)}))
            offset += rows


def read_link_meta(split: Path) -> dict:
    """``read_split_meta`` of a link split (another task: an error saying so)."""
    meta = read_split_meta(split)
    if meta.get("task") != "link":
        raise ValueError(f"{Path(split) / 'meta.json'}: task is {meta.get('task')!r}, not 'link'; "
                         "re-run the split stage with dataset.task: link")
    return meta


def read_link_negatives(split: Path, edges: dict[str, torch.Tensor], num_dst: int,
                        rows: dict[str, slice] | None = None, hard: bool = False
                        ) -> dict[str, torch.Tensor] | None:
    """Fixed negatives per val/test positive: int64 (P, K) ids (< ``num_dst``) of the held-out
    edge type's dst type, row i pairing with ``edges[phase][:, i]``; ``rows`` phase -> the
    positives whose rows to read (a DDP rank's share,
    ``gnnpipe.training.distributed.share_rows``): (len, K), the rest never in memory.
    ``hard``: the hard ones (``negatives_hard_<phase>.parquet``), None when the split drew
    none."""
    meta = read_split_meta(split)
    per = meta.get("num_hard_negatives") if hard else meta.get("num_negatives", {})
    if per is None:
        return None
    prefix = "negatives_hard" if hard else "negatives"
    return {phase: read_negatives_table(Path(split) / f"{prefix}_{phase}.parquet",
                                        per.get(phase), edges[phase][0].numpy(), num_dst, phase,
                                        None if rows is None else rows[phase])
            for phase in LINK_EVAL_PHASES}


NEGATIVE_BATCH_ROWS = 1 << 18  # rows decoded at a time (6 MiB of int64 columns)


def read_negatives_table(path: Path, k, heads: np.ndarray, num_dst: int, phase: str,
                         rows: slice | None = None) -> torch.Tensor:
    """One negatives file of ``phase``: ``k`` (meta.json's count) rows per head of ``heads``
    (P,), grouped by positive, dst ids in ``[0, num_dst)``: int64 (P, k), or with ``rows`` (a
    slice of the positives, step 1) only theirs, (len, k). Read by batches: one batch and
    the result in memory; the rows kept are checked, the row count of the whole file."""
    rows = slice(0, heads.size) if rows is None else rows
    valid_k = isinstance(k, int) and k >= 1
    lo, hi = (rows.start * k, rows.stop * k) if valid_k else (0, 0)
    dst = np.empty(hi - lo, dtype=np.int64)
    found, grouped = 0, True
    for batch in read_batches(path, NEGATIVES_SCHEMA, "gnnpipe.negatives/1",
                              NEGATIVE_BATCH_ROWS):
        a, b = max(lo, found), min(hi, found + batch.num_rows)  # file rows kept of this batch
        if a < b:
            owner = np.arange(a, b) // k  # the positive of each row kept
            positive = batch.column("positive").to_numpy()[a - found:b - found]
            src = batch.column("src").to_numpy()[a - found:b - found]
            # a wrong row count is the first thing said: checked once every row is counted
            grouped &= np.array_equal(positive, owner) and np.array_equal(src, heads[owner])
            dst[a - lo:b - lo] = batch.column("dst").to_numpy()[a - found:b - found]
        found += batch.num_rows
    if not valid_k or found != heads.size * k:
        raise ValueError(f"{path}: {found} rows do not make {k!r} negatives for each "
                         f"of the {heads.size} {phase} positives")
    if not grouped:
        raise ValueError(f"{path}: rows must be grouped by positive, each with that "
                         f"positive's source as src")
    if dst.size and (dst.min() < 0 or dst.max() >= num_dst):
        raise ValueError(f"{path}: node ids outside [0, {num_dst})")
    return torch.from_numpy(dst.reshape(rows.stop - rows.start, k))


# ------------------------------------------------------------ link edges by Parquet batches
EDGE_BATCH_ROWS = 1 << 18  # edges decoded at a time (4 MiB of int64 columns)


def link_edge_blocks(split: Path, role: str, num_src: int, num_dst: int | None = None
                     ) -> Iterable[np.ndarray]:
    """``edges_<role>.parquet`` by batches of ``EDGE_BATCH_ROWS`` edges, in file order: int64
    (2, m) (src, dst) each, ids checked against ``num_src`` / ``num_dst`` (one batch in memory)."""
    num_dst = num_src if num_dst is None else num_dst
    path = Path(split) / f"edges_{role}.parquet"
    for batch in read_batches(path, EDGES_SCHEMA, "gnnpipe.split_edges/1", EDGE_BATCH_ROWS):
        pair = np.stack([batch.column("src").to_numpy(), batch.column("dst").to_numpy()]
                        ).astype(np.int64, copy=False)
        if pair.size and (pair.min() < 0 or pair[0].max() >= num_src
                          or pair[1].max() >= num_dst):
            raise ValueError(f"{path}: node ids outside [0, {num_src}) (src) or "
                             f"[0, {num_dst}) (dst)")
        yield pair


def read_link_edges(split: Path, num_src: int, num_dst: int | None = None,
                    roles: tuple[str, ...] = LINK_EDGE_ROLES) -> dict[str, torch.Tensor]:
    """Positive edges per role of ``roles``: int64 (2, E_role), sources checked against
    ``num_src``, targets against ``num_dst`` (None: ``num_src``, one node type). Filled batch by
    batch (``link_edge_blocks``) into a mapped scratch table
    (``gnnpipe.io.temps.scratch_or_memory``: file pages the kernel writes back under pressure,
    not anonymous memory; in memory outside a stage), so only one batch is ever decoded in
    memory."""
    read_link_meta(split)
    out = {}
    for role in roles:
        path = existing(Path(split) / f"edges_{role}.parquet")
        with reading(path, "Parquet file"):  # the row count from the footer: nothing decoded
            count = pq.ParquetFile(path).metadata.num_rows
        pair = scratch_or_memory((2, count), np.int64)
        filled = 0
        for block in link_edge_blocks(split, role, num_src, num_dst):
            pair[:, filled:filled + block.shape[1]] = block
            filled += block.shape[1]
        assert filled == count, f"{path}: footer says {count} rows, batches gave {filled}"
        out[role] = torch.from_numpy(pair)
    return out


TRAINING_LINK_ROLES = ("train_supervision", "val", "test")  # the positives training holds


def visible_link_blocks(split: Path, num_src: int, num_dst: int, shift: tuple[int, int] = (0, 0)
                        ) -> Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]:
    """The edges training may see (message and train supervision) for
    ``gnnpipe.splitting.negatives.training_sampler_of_blocks``: each call yields their
    (src (m,), dst (m,)) batches anew, ``shift`` (src, dst) added (``to_homogeneous`` ids)."""

    def blocks():
        for role in ("message", "train_supervision"):
            for pair in link_edge_blocks(split, role, num_src, num_dst):
                yield pair[0] + shift[0], pair[1] + shift[1]

    return blocks
