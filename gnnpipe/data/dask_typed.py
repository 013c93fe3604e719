"""prepare of typed tables (``dataset.layout: typed``, ``dataset.source: parquet | csv``) on
``cluster.engine: dask``: every node type's and every relation's table read in blocks, to the files
``gnnpipe.data.prepare.build_typed`` and the local writers give, byte for byte, with no process
holding all edges or all features of a type.

The waves of the homogeneous block path (``gnnpipe.data.dask_prepare``) run once for all types:

1. node blocks of every type: ids, features (``x_<type>.npy``), times (int64) and, for the
   target, label sets (``gnnpipe.data.table_blocks.scan_nodes``);
2. ids joined per node type (hash buckets under ``ids/<type>``); every relation's rows follow one
   another as scratch rows (``Block.base``), so the dense ends of all relations come back to
   their edge blocks in one routed folder; edge times checked and stored per relation;
3. each relation's CSR (and, with ``dataset.undirected``, its reverse ``rev_<rel>`` or both
   directions of a relation inside one type) built per row block of its targets, the input row of
   each stored edge carried where edge times follow it, and featureless types' features from the
   in-degree maps (``gnnpipe.data.block_relations``);
4. this process streams the Parquet files and saves graph.pt over memory maps
   (``gnnpipe.io.prepared_maps.write_prepared_maps``).

Every failed check is a ``Finding`` keyed as the local reader meets it: node types in order (ids,
repeats, features, times), then the target's labels, then the relations in order (ids per batch,
then times), then the checks of ``build_typed`` (layout, empty target, fractional times, a reverse
name taken); the smallest is raised with the local message.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pyarrow as pa

from gnnpipe.config import DatasetParams
from gnnpipe.data import dask_prepare
from gnnpipe.data.block_ids import join_bucket, scatter_edges, scatter_nodes
from gnnpipe.data.block_relations import (NodeTable, RelationTable, build_csrs, edge_types_of,
                                          featureless_blocks, featureless_width,
                                          isolated_targets, table_width)
from gnnpipe.data.dask_prepare import (BlockPrepared, BlockSizes, edge_table_blocks,
                                       id_type_of, label_classes, list_width, node_spec,
                                       refuse_unsupported, unknown_id, write_node_ids)
from gnnpipe.data.graph import (EDGE, HOMOGENEOUS, NODE, TYPED, edge_type_name, layout_of,
                                reverse_edge_type)
from gnnpipe.data.prepare import link_edge_type, reverse_taken
from gnnpipe.data.table_blocks import (Finding, csv_blocks, edge_times, label_codes_block,
                                       make_features_file, node_columns, parquet_blocks,
                                       raise_first, scan_nodes)
from gnnpipe.io.blocks import create_memmap
from gnnpipe.io.prepared_maps import PreparedMaps, write_prepared_maps
from gnnpipe.runtime.engine import run_blocks
from gnnpipe.sources.base import no_edges_warning
from gnnpipe.sources.tables import edge_tables, relation_of, typed_tables, typed_target

LAST = 10**9  # node times are checked after every relation


def _rekey(finding: Finding, key: tuple) -> Finding:
    return dataclasses.replace(finding, key=key)


def _node_key(finding: Finding, index: int) -> Finding:
    """A node scan's finding in the typed order: labels after every type, fractional times
    last."""
    if finding.key[0] == 4:
        return _rekey(finding, (1, 1) + finding.key)
    if finding.key[0] == 99:
        return _rekey(finding, (3, LAST, index))
    return _rekey(finding, (0, index) + finding.key)


def _text(key: tuple, text: str) -> Finding:
    return Finding(key, 0, "text", (text,))


def _node_types(cfg: DatasetParams, typed, scratch: Path) -> tuple[list[NodeTable], list]:
    """Every node type's spec and blocks (labels read on every type for now); findings of
    tables that cannot be opened."""
    types, findings = [], []
    for index, (name, path) in enumerate(typed.paths.items()):
        x_file, time_file = scratch / f"x_{name}.npy", scratch / f"time_{name}.npy"
        try:
            spec = node_spec(cfg, path, typed.tables, typed=True)
            blocks = (parquet_blocks(path, node_columns(spec)) if cfg.source == "parquet" else
                      csv_blocks(path, node_columns(spec), {spec.id: pa.string()},
                                 scratch / "csv-nodes" / name, 1 << 20))
        except ValueError as err:
            findings.append(_text((0, index, -1), str(err)))
            types.append(NodeTable(name, path, None, [], x_file, time_file))
            continue
        spec = dataclasses.replace(spec, width=list_width(blocks, spec))
        types.append(NodeTable(name, path, spec, blocks, x_file, time_file))
    return types, findings


def _relations(cfg: DatasetParams, typed, scratch: Path, sizes: BlockSizes
               ) -> tuple[list[RelationTable], list[Finding]]:
    """Every relation's edge type and blocks (scratch rows one after another); findings."""
    try:
        paths = edge_tables(typed, cfg.source)
    except ValueError as err:
        return [], [_text((2, 0), str(err))]
    relations, findings, base = [], [], 0
    for index, (stem, path) in enumerate(paths.items()):
        try:
            edge_type = relation_of(stem, path, typed)
            timed = (bool(cfg.edges.timestamp)
                     and cfg.edges.timestamp in typed.tables.schema(path).names)
            key_of = {cfg.edges.src: "src", cfg.edges.dst: "dst"}
            if timed:
                key_of[cfg.edges.timestamp] = "timestamp"
            blocks = edge_table_blocks(cfg, path, key_of, scratch / "csv-edges" / stem, sizes)
        except ValueError as err:
            findings.append(_text((2, 6, (index,)), str(err)))
            continue
        blocks = [dataclasses.replace(b, batch=(index, *b.batch), base=base) for b in blocks]
        relation = RelationTable(index, edge_type, path, blocks, timed,
                             scratch / f"edge_time_{index}.npy")
        base += relation.rows
        relations.append(relation)
    return relations, findings


def _fail(findings: list[Finding], types: list[NodeTable], relations: list[RelationTable],
          id_name: str, names: tuple[str, str]) -> None:
    """Raise the finding the local reader meets first, if any (an unknown id's row is a scratch
    row: its relation's node table of that end is named)."""
    def unknown(finding: Finding) -> ValueError:
        side, row = finding.args[0], finding.first
        relation, block = next((r, b) for r in relations for b in r.blocks
                               if b.base + b.start <= row < b.base + b.start + b.rows)
        end_type = next(t for t in types if t.name == relation.edge_type[2 * side])
        return unknown_id(block, row - block.base, names[side], id_name, end_type.path)

    raise_first(findings, unknown)


def prepare_typed_blocks(client, cfg: DatasetParams, out: Path, scratch: Path,
                         sizes: BlockSizes | None = None) -> BlockPrepared:
    """Read, check and build the user's typed tables by blocks on ``client`` (None: in this
    process); write the prepared files and node_ids_<type>.parquet into ``out``.
    ``scratch``: a folder every worker sees, on ``out``'s filesystem."""
    refuse_unsupported(cfg)
    sizes = sizes or dask_prepare.SIZES
    typed = typed_tables(cfg)

    # 1. node blocks of every type (the target's labels with them)
    types, findings = _node_types(cfg, typed, scratch)
    labelled = [t.name for t in types if t.spec is not None and t.spec.label]
    try:
        target = typed_target(cfg, labelled, typed.paths, typed.nodes_dir)
    except ValueError as err:
        target, findings = None, findings + [_text((1, 0), str(err))]
    has_labels = target in labelled
    target = target or types[0].name
    types = [t if t.spec is None else dataclasses.replace(t, spec=dataclasses.replace(
        t.spec, label=t.spec.label if t.name == target else "")) for t in types]
    for t in types:
        if t.spec is not None and t.rows and t.spec.features:
            make_features_file(t.x_file, t.rows, table_width(t.spec), "float32")
        if t.spec is not None and t.rows and t.spec.timestamp:
            create_memmap(t.time_file, (t.rows,), np.int64)
    calls = [(b, t.spec, str(t.x_file), str(t.time_file)) for t in types if t.spec
             for b in t.blocks]
    scans = run_blocks(client, scan_nodes, calls)
    owner = {str(t.x_file): i for i, t in enumerate(types)}
    scans_of: list[list] = [[] for _ in types]
    for call, scan in zip(calls, scans):
        scans_of[owner[call[2]]].append(scan)
        findings += [_node_key(f, owner[call[2]]) for f in scan.findings]
    index = next(i for i, t in enumerate(types) if t.name == target)
    target_type, target_scans = types[index], scans_of[index]
    classes = pa.array(np.zeros(1, dtype=np.int64))  # link task without labels: one class
    if has_labels:
        try:
            classes = label_classes(target_scans, str(target_type.path), target_type.spec,
                                    target_type.rows, cfg.max_classes)
        except ValueError as err:
            findings.append(_text((1, 2), str(err)))
    relations, found = _relations(cfg, typed, scratch, sizes)
    findings += found

    # 2. ids per type (the edges' only when every type's ids could be read), the build checks
    id_types = {t.name: id_type_of(cfg, t.blocks, t.spec, all(s.canonical for s in scans))
                for t, scans in zip(types, scans_of) if t.spec is not None}
    unread = {f.key[1] for f in findings if f.key[0] == 0 and f.key[2] in (-1, 0, 1)}
    findings += _join(client, types, unread, [] if unread else relations, id_types,
                      (cfg.edges.src, cfg.edges.dst), cfg.edges.timestamp, scratch, sizes)
    edge_types = edge_types_of(cfg, relations)
    findings += _build_checks(cfg, types, relations, target_type, edge_types)
    _fail(findings, types, relations, cfg.nodes.id, (cfg.edges.src, cfg.edges.dst))

    # 3. labels and the CSRs; 4. featureless types and the files
    y_file = scratch / "y.npy"
    create_memmap(y_file, (target_type.rows,), np.int64)
    if has_labels:
        run_blocks(client, label_codes_block, [(b,) for b in target_type.blocks],
                   spec=target_type.spec, classes=classes, y_file=str(y_file))
    csrs, counts = build_csrs(client, cfg, types, relations, edge_types, scratch, sizes)
    featureless = featureless_blocks(client, cfg, types, csrs)
    maps = PreparedMaps(
        x={t.name: (t.x_file, t.rows, table_width(t.spec) if t.spec.features
                    else featureless_width(cfg, t.name, csrs)) for t in types},
        y=y_file, target=target, num_classes=len(classes) if has_labels else 1,
        csr={e: (c.indptr, c.indices) for e, c in csrs.items()},
        node_time={t.name: (t.time_file, t.rows) for t in types if t.spec.timestamp},
        edge_time={e: c.time for e, c in csrs.items() if c.timed},
        reverse={e: r for e, r in edge_types.items() if r is not None},
        link_edge_type=link_edge_type(cfg, [r.edge_type for r in relations], list(edge_types),
                                      target),
        featureless=tuple(featureless))
    graph = write_prepared_maps(out, maps, cfg.storage.compression)
    for t, id_type in zip(types, id_types.values()):
        write_node_ids(out, t.name, t.blocks, t.spec, id_type, cfg.storage.compression)
    report = {
        "source": cfg.source, "layout": TYPED, "target": target,
        "nodes": sum(t.rows for t in types), "edges": sum(c.edges for c in csrs.values()),
        "features": int(graph.x[target].shape[1]), "classes": maps.num_classes,
        "undirected": cfg.undirected, **counts,
        "isolated_nodes": isolated_targets(csrs, target, target_type.rows),
        "node_types": {t.name: t.rows for t in types},
        "edge_types": {edge_type_name(e): c.edges for e, c in csrs.items()},
        "link_edge_type": edge_type_name(maps.link_edge_type), "featureless": featureless,
        "node_time": list(maps.node_time),
        "edge_time": [edge_type_name(e) for e in maps.edge_time], "labelled": has_labels}
    if has_labels and pa.types.is_string(classes.type):
        report["class_names"] = [str(v) for v in classes.to_pylist()]
    empty = [str(r.path) for r in relations if r.rows == 0]
    if empty:
        report["warnings"] = [no_edges_warning(where) for where in empty]
    labelled_nodes = sum(s.labelled for s in target_scans) if has_labels else target_type.rows
    return BlockPrepared(report, classes, labelled_nodes, target_type.rows)


def _join(client, types: list[NodeTable], unread: set[int], relations: list[RelationTable],
          id_types: dict, names: tuple[str, str], time_name: str, scratch: Path,
          sizes: BlockSizes) -> list[Finding]:
    """Every type's ids (but the ``unread`` types', whose ids failed a check) scattered to its
    buckets under ``ids/<type>``, every relation's ends to the buckets of its end types (and its
    times checked), each bucket joined (dense ends routed to ``ids/mapped``); findings in the
    typed order."""
    ids = scratch / "ids"
    ok = [t for i, t in enumerate(types) if i not in unread]
    ends = {t.name: t.rows for t in ok}
    for r in relations:
        ends[r.edge_type[0]] += r.rows
        ends[r.edge_type[2]] += r.rows
    buckets = {name: max(1, math.ceil(count / sizes.bucket_rows)) for name, count in ends.items()}
    run_blocks(client, scatter_nodes, [(b, t.spec, id_types[t.name], buckets[t.name],
                                        str(ids / t.name / "nodes")) for t in ok
                                       for b in t.blocks])
    findings: list[Finding] = []
    calls = [(b, names, (id_types[r.edge_type[0]], id_types[r.edge_type[2]]),
              (buckets[r.edge_type[0]], buckets[r.edge_type[2]]),
              (str(ids / r.edge_type[0] / "edges"), str(ids / r.edge_type[2] / "edges")))
             for r in relations for b in r.blocks]
    for found in run_blocks(client, scatter_edges, calls):
        findings += [_rekey(f, (2,) + f.key) for f in found]
    for r in relations:
        if r.timed and r.rows:
            create_memmap(r.time_file, (r.rows,), np.int64)
    timed = [(b, time_name, str(r.time_file)) for r in relations if r.timed for b in r.blocks]
    for (block, _, _), found in zip(timed, run_blocks(client, edge_times, timed)):
        findings += [_rekey(f, (3, block.batch[0], 0)) if f.key[0] == 99
                     else _rekey(f, (2,) + f.key) for f in found]
    edge_blocks = [b for r in relations for b in r.blocks]
    starts = np.array([b.base + b.start for b in edge_blocks], dtype=np.int64)
    join_calls = [(k, f"{t.name}-b{k:06d}", str(ids / t.name), id_types[t.name],
                   (str(t.path), t.spec.id)) for t in ok for k in range(buckets[t.name])]
    owner = {t.name: i for i, t in enumerate(types)}
    for call, found in zip(join_calls, run_blocks(
            client, join_bucket, join_calls, edge_starts=starts,
            edge_batches=[b.batch for b in edge_blocks], mapped=str(ids / "mapped"))):
        index = owner[Path(call[2]).name]
        findings += [_rekey(f, (0, index, 2)) if f.key[0] == 2 else _rekey(f, (2,) + f.key)
                     for f in found]
    return findings


def _build_checks(cfg: DatasetParams, types: list[NodeTable], relations: list[RelationTable],
                  target: NodeTable, edge_types: dict) -> list[Finding]:
    """``build_typed``'s checks before its edge policies (the homogeneous names, an empty
    target, a reverse name already taken) and after (the link edge type)."""
    findings = []
    given = [r.edge_type for r in relations]
    if relations and layout_of([t.name for t in types], given) == HOMOGENEOUS:
        findings.append(_text((3, -2), (
            f"{relations[0].path}: node type {NODE!r} with relation {edge_type_name(EDGE)!r} "
            "alone is how a homogeneous graph is described; rename the type or relation, or "
            "use dataset.layout: homogeneous")))
    if target.spec is not None and target.rows == 0:
        findings.append(_text((3, -1), f"{target.path}: the target node type {target.name!r} "
                                       "has no nodes"))
    for r in relations:
        rev = reverse_edge_type(r.edge_type)
        if cfg.undirected and r.edge_type[0] != r.edge_type[2] and rev in given:
            other = next(o for o in relations if o.edge_type == rev)
            findings.append(_text((3, r.index, 1), reverse_taken(r.path, rev, other.path)))
    try:
        link_edge_type(cfg, given, list(edge_types), target.name)
    except ValueError as err:
        findings.append(_text((3, LAST + 1), str(err)))
    return findings


