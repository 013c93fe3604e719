"""prepare by blocks: the user's node and edge tables (``dataset.source: parquet | csv``), or any
other source's graph written as such tables (``gnnpipe.data.source_tables``), to the prepared
files, with no process holding all edges or all features of a type. A homogeneous graph is the
one-type case: one node table (type ``node``) and one edge table (``node to node``); a
typed graph (``dataset.layout: typed``) has one table per node type and one per relation.

The work runs on an executor (``gnnpipe.runtime.engine.run_blocks``: ``client=None`` runs the
block functions in this process, a ``distributed.Client`` on its workers), in waves whose results
are small summaries:

1. node blocks of every type (Parquet row groups; CSV converted to scratch Parquet parts,
   streaming): ids, features (``x_<type>.npy``), times and, for the target, label sets checked
   with global rows (``gnnpipe.data.table_blocks``);
2. ids joined per node type (hash buckets under ``ids/<type>``, ``gnnpipe.data.block_ids``);
   every relation's rows follow one another as scratch rows (``Block.base``), so the dense ends
   of all relations come back to their edge blocks in one routed folder; edge weights / times
   checked and stored per input row;
3. label codes from the union of the blocks' label sets (sorted: the local rule) to ``y.npy``;
   each stored edge type's CSR (a relation and, with ``dataset.undirected``, its reverse
   ``rev_<rel>`` or both directions of a relation inside one type) built per row block of its
   targets with each stored edge's attributes from its input row, and featureless types'
   features from the in-degree maps (``gnnpipe.data.block_relations``);
4. this process streams the Parquet files and saves graph.pt over memory maps
   (``gnnpipe.io.prepared_maps``): a one-type graph keeps its edge weight / timestamp columns as
   read (edge_attrs_node__to__node.parquet), a typed graph int64 edge times in graph.pt.

Every failed check is a ``Finding`` keyed in the order a reader of whole tables meets it (the
tests' oracle, tests/graph_oracle.py, is one): node types in order (ids, repeats, features,
times), then the target's labels, then the relations in order (ids per batch, weights,
times), then the build's checks (layout, no nodes, fractional times, a reverse name taken, the
link edge type); the smallest is raised with the reader's message.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gnnpipe.config import DatasetParams
from gnnpipe.data.block_ids import join_bucket, scatter_edges, scatter_nodes
from gnnpipe.data.block_relations import (NodeTable, RelationTable, build_csrs, edge_types_of,
                                          featureless_blocks, received)
from gnnpipe.data.graph import (EDGE, HOMOGENEOUS, NODE, ROLES, TYPED, EdgeType,
                                edge_type_name, layout_of, parse_edge_type, reverse_edge_type)
from gnnpipe.data.source_tables import SourceTables
from gnnpipe.data.table_blocks import (SIZES, STORED_NUMPY, Block, BlockSizes, Finding,
                                       NodeSpec, csv_blocks, edge_attrs, label_codes_block,
                                       node_columns, node_id_column, node_spec, parquet_blocks,
                                       raise_first, read_block, scan_nodes, time_dtype)
from gnnpipe.io.blocks import create_memmap, open_memmap, table_stream
from gnnpipe.io.prepared import edge_attrs_file, external_features, node_ids_file, stream_edges
from gnnpipe.io.prepared_maps import PreparedMaps, raw_dtype, write_prepared_maps
from gnnpipe.runtime.engine import run_blocks
from gnnpipe.sources.base import is_timestamp_type, label_codes, no_edges_warning
from gnnpipe.sources.tables import (TableLayout, check_table_path, edge_tables, relation_of,
                                    table_layout, typed_target)

LAST = 10**9  # node times are checked after every relation
STEPS = 4  # waves ``prepare_tables`` reports: nodes scanned, ids joined, CSRs built, files


# ------------------------------------------------------------------------------------ tables
def list_width(blocks: list[Block], spec: NodeSpec) -> int:
    """The spec's feature width: the length of row 0's feature list (the local reader's
    reference; 0 when null), or the number of scalar feature columns."""
    first = next((b for b in blocks if b.rows), None)
    if first is None or not spec.is_list:
        return len(spec.features)
    cell = read_block(first, [spec.features[0]]).column(0)[0]
    return len(cell) if cell.is_valid else 0


def id_type_of(cfg: DatasetParams, blocks: list[Block], spec: NodeSpec, canonical: bool
               ) -> pa.DataType:
    """The node table's id type: CSV ids are int64 when every one is a canonical integer."""
    if cfg.source == "csv":
        return pa.int64() if canonical else pa.string()
    if not blocks:
        return pa.string()
    id_type = read_block(blocks[0], [spec.id]).schema.field(spec.id).type
    return id_type.value_type if pa.types.is_dictionary(id_type) else id_type


def label_classes(scans, where: str, spec: NodeSpec, total: int, max_classes: int) -> pa.Array:
    """The sorted union of the blocks' labels, checked as ``label_codes`` checks a whole column
    (its own messages, from a column of the same counts)."""
    labelled = sum(s.labelled for s in scans)
    found = [s.classes for s in scans if s.classes is not None and len(s.classes)]
    label_type = next((s.label_type for s in scans if s.label_type is not None), pa.int64())
    classes = (pc.unique(pa.concat_arrays(found)).sort() if found
               else pa.array([], label_type))
    if total and (labelled == 0 or len(classes) > max_classes or len(classes) < 2):
        column = pa.concat_arrays([classes, pa.array([classes[0].as_py()] * (labelled - 1)
                                                     if len(classes) == 1 else [], label_type),
                                   pa.nulls(total - max(labelled, len(classes)), label_type)])
        label_codes(column, where, spec.label, (), max_classes)
    return classes


def link_edge_type(cfg: DatasetParams, relations: list[EdgeType], edge_types: list[EdgeType],
                   target: str) -> EdgeType:
    """``dataset.typed.link_edge_type`` (one of ``edge_types``, the stored ones), or the first of
    the given ``relations`` touching the ``target`` type (else the first relation)."""
    wanted = cfg.typed.link_edge_type
    if wanted:
        try:
            edge_type = parse_edge_type(wanted)
        except ValueError:
            edge_type = None
        if edge_type not in edge_types:
            raise ValueError(f"dataset.typed.link_edge_type={wanted!r} is not an edge type of "
                             f"the graph ({', '.join(edge_type_name(e) for e in edge_types)})")
        return edge_type
    touching = [e for e in relations if target in (e[0], e[2])]
    return (touching or relations)[0]


def reverse_taken(where, rev: EdgeType, other) -> str:
    """The one line for a relation whose added reverse ``rev`` is a given table's name too
    (``where``, ``other``: the two tables)."""
    return (f"{where}: dataset.undirected=true adds its reverse {edge_type_name(rev)}, but "
            f"{other} already has that name; rename one table or set dataset.undirected: false")


def _rekey(finding: Finding, key: tuple) -> Finding:
    return dataclasses.replace(finding, key=key)


def _node_key(finding: Finding, index: int) -> Finding:
    """A node scan's finding in the reader's order: labels after every type, fractional times
    last."""
    if finding.key[0] == 4:
        return _rekey(finding, (1, 1) + finding.key)
    if finding.key[0] == 99:
        return _rekey(finding, (3, LAST, index))
    return _rekey(finding, (0, index) + finding.key)


def _text(key: tuple, text: str) -> Finding:
    return Finding(key, 0, "text", (text,))


def _node_types(cfg: DatasetParams, layout: TableLayout, scratch: Path, sizes: BlockSizes
                ) -> tuple[list[NodeTable], list[Finding]]:
    """Every node type's spec and blocks (labels read on every type); findings of tables that
    cannot be opened."""
    types, findings = [], []
    for index, (name, path) in enumerate(layout.paths.items()):
        x_file, time_file = scratch / f"x_{name}.npy", scratch / f"time_{name}.npy"
        try:
            spec = node_spec(layout.tables.schema(path), cfg, path, typed=cfg.layout == TYPED)
            blocks = (parquet_blocks(path, node_columns(spec)) if cfg.source == "parquet" else
                      csv_blocks(path, node_columns(spec), {spec.id: pa.string()},
                                 scratch / "csv-nodes" / name, sizes.node_csv_bytes))
        except ValueError as err:
            findings.append(_text((0, index, -1), str(err)))
            types.append(NodeTable(name, path, None, [], x_file, time_file))
            continue
        spec = dataclasses.replace(spec, width=list_width(blocks, spec))
        types.append(NodeTable(name, path, spec, blocks, x_file, time_file))
    return types, findings


def _relations(cfg: DatasetParams, layout: TableLayout, stems: tuple[str, ...] | None,
               scratch: Path, sizes: BlockSizes
               ) -> tuple[list[RelationTable], list[Finding]]:
    """Every relation's edge type and blocks (scratch rows one after another), its attribute
    files; findings (relations that cannot be listed or opened)."""
    typed = cfg.layout == TYPED
    if not typed:
        paths = {"": layout.root / (cfg.edges.file or f"edges.{cfg.source}")}
    else:
        try:
            paths = edge_tables(layout, cfg.source)
        except ValueError as err:
            return [], [_text((2, 0), str(err))]
        if stems is not None:
            paths = {stem: paths[stem] for stem in stems}
    relations, findings, base = [], [], 0
    for index, (stem, path) in enumerate(paths.items()):
        try:
            if not typed:
                edge_type, timed = EDGE, bool(cfg.edges.timestamp)
                check_table_path(path, "edges", cfg)
            else:  # its table was found in its folder; a timestamp column is optional
                edge_type = relation_of(stem, path, layout)
                timed = (bool(cfg.edges.timestamp)
                         and cfg.edges.timestamp in layout.tables.schema(path).names)
            key_of = {cfg.edges.src: "src", cfg.edges.dst: "dst"}
            if cfg.edges.weight:  # a typed graph has none (params rule)
                key_of[cfg.edges.weight] = "weight"
            if timed:
                key_of[cfg.edges.timestamp] = "timestamp"
            blocks = (parquet_blocks(path, list(key_of), key_of) if cfg.source == "parquet" else
                      csv_blocks(path, list(key_of), {cfg.edges.src: pa.string(),
                                                      cfg.edges.dst: pa.string()},
                                 scratch / "csv-edges" / str(index), sizes.csv_block_bytes, key_of))
            blocks = [dataclasses.replace(b, batch=(index, *b.batch), base=base)
                      for b in blocks]
            relation = _attr_files(cfg, RelationTable(index, edge_type, path, blocks, timed),
                                   typed, scratch)
        except ValueError as err:
            findings.append(_text((2, 6, (index,)), str(err)))
            continue
        base += relation.rows
        relations.append(relation)
    return relations, findings


def _attr_files(cfg: DatasetParams, r: RelationTable, typed: bool, scratch: Path
                ) -> RelationTable:
    """The relation with its per-input-row files: ``weight`` float32 and ``timestamp`` (the
    column's bits) of a one-type graph, or a typed graph's int64 ``time``; ``order``: the sortable
    times dedup and copies follow. None without rows."""
    if not r.rows or not (cfg.edges.weight or r.timed):
        return r
    attrs, order = {}, None
    if cfg.edges.weight:
        attrs["weight"] = (scratch / f"weight_{r.index}.npy", pa.float32())
        create_memmap(attrs["weight"][0], (r.rows,), np.float32)
    if r.timed:
        order = scratch / f"order_{r.index}.npy"
        time_type = read_block(r.blocks[0], [cfg.edges.timestamp]).schema.field(0).type
        if typed:
            attrs["time"] = (order, pa.int64())
            create_memmap(order, (r.rows,), np.int64)
        else:
            attrs["timestamp"] = (scratch / f"timestamp_{r.index}.npy", time_type)
            if is_timestamp_type(time_type):  # else every block finds the type
                create_memmap(attrs["timestamp"][0], (r.rows,), raw_dtype(time_type))
                create_memmap(order, (r.rows,), time_dtype(time_type))
    return dataclasses.replace(r, attrs=attrs, order=order)


def _fail(findings: list[Finding], types: list[NodeTable], relations: list[RelationTable],
          id_name: str, names: tuple[str, str]) -> None:
    """Raise the finding the reader meets first, if any (an unknown id's row is a scratch row:
    its relation's node table of that end is named)."""
    def unknown(finding: Finding) -> ValueError:
        side, row = finding.args[0], finding.first
        relation, block = next((r, b) for r in relations for b in r.blocks
                               if b.base + b.start <= row < b.base + b.start + b.rows)
        end_type = next(t for t in types if t.name == relation.edge_type[2 * side])
        value = read_block(block, [names[side]]).column(0)[row - block.base - block.start]
        return ValueError(f"{block.where}: edge column {names[side]!r} has node id "
                          f"{value.as_py()!r} (row {row - block.base}) that is not in the id "
                          f"column {id_name!r} of {end_type.path}")

    raise_first(findings, unknown)


# ---------------------------------------------------------------------------------- prepare
def prepare_tables(client, cfg: DatasetParams, out: Path, scratch: Path,
                   sizes: BlockSizes | None = None, *, source: SourceTables | None = None,
                   step=lambda n: None) -> tuple[dict, pa.Array]:
    """Read, check and build the user's tables by blocks on ``client`` (None: in this
    process); write the prepared files and node_ids_<type>.parquet (a one-type graph's edge
    attributes too) into ``out``; return ``prepare.json`` (but its ``source``) and the user's
    label of each class code (C,), for classes.parquet. ``scratch``: a folder every worker sees,
    on ``out``'s filesystem. A source's tables (``source``, ``gnnpipe.data.source_tables``) give
    their class codes and values (a superset of the labels), its official split, its order of
    node types and relations, the input its warnings name, and no node ids (node i is row i).
    ``step(1)`` after each of the ``STEPS`` waves (a progress bar's ``update``)."""
    assert cfg.source in ("parquet", "csv"), cfg.source
    sizes = sizes or SIZES
    layout, typed = table_layout(cfg), cfg.layout == TYPED
    order = (None, None) if source is None or source.order is None else source.order
    if order[0] is not None:  # a source's own order of node types and relations
        layout = dataclasses.replace(layout, paths={t: layout.paths[t] for t in order[0]})

    # 1. node blocks of every type (the target's labels with them)
    types, findings = _node_types(cfg, layout, scratch, sizes)
    # a link task's one-type graph may have no label column (as a typed graph's): one class
    target, has_labels = NODE, types[0].spec is not None and bool(
        types[0].spec.label or cfg.task == "node")
    if typed:
        labelled = [t.name for t in types if t.spec is not None and t.spec.label]
        try:
            target = typed_target(cfg, labelled, layout.paths, layout.nodes_dir)
        except ValueError as err:
            target, findings = None, findings + [_text((1, 0), str(err))]
        has_labels = target in labelled
        target = target or types[0].name
        types = [t if t.spec is None else dataclasses.replace(t, spec=dataclasses.replace(
            t.spec, label=t.spec.label if t.name == target else "")) for t in types]
    for t in types:
        if t.spec is not None and t.rows and t.spec.features:
            create_memmap(t.x_file, (t.rows, t.spec.width), STORED_NUMPY[t.spec.feature_dtype])
        if t.spec is not None and t.rows and t.spec.timestamp:
            create_memmap(t.time_file, (t.rows,), np.int64 if t.spec.whole_times else time_dtype(
                read_block(t.blocks[0], [t.spec.timestamp]).schema.field(0).type))
    calls = [(b, t.spec, str(t.x_file), str(t.time_file)) for t in types if t.spec
             for b in t.blocks]
    owner = {str(t.x_file): i for i, t in enumerate(types)}
    scans_of: list[list] = [[] for _ in types]
    for call, scan in zip(calls, run_blocks(client, scan_nodes, calls)):
        scans_of[owner[call[2]]].append(scan)
        findings += [_node_key(f, owner[call[2]]) for f in scan.findings]
    index = next(i for i, t in enumerate(types) if t.name == target)
    target_type, target_scans = types[index], scans_of[index]
    classes = pa.array(np.zeros(1, dtype=np.int64))  # a link task without labels: one class
    if has_labels:
        try:
            classes = label_classes(target_scans, str(target_type.path), target_type.spec,
                                    target_type.rows, cfg.max_classes)
        except ValueError as err:
            findings.append(_text((1, 2), str(err)))
        if source is not None:  # every code of the source's classes, present or not
            classes = pa.array(np.arange(len(source.class_values)), pa.int64())
    relations, found = _relations(cfg, layout, order[1], scratch, sizes)
    findings += found

    step(1)
    # 2. ids per type (the edges' only when every type's ids could be read), the build checks
    id_types = {t.name: id_type_of(cfg, t.blocks, t.spec, all(s.canonical for s in scans))
                for t, scans in zip(types, scans_of) if t.spec is not None}
    unread = {f.key[1] for f in findings if f.key[0] == 0 and f.key[2] in (-1, 0, 1)}
    findings += _join(client, types, unread, [] if unread else relations, id_types, cfg,
                      scratch, sizes)
    edge_types = edge_types_of(cfg, relations)
    findings += _build_checks(cfg, layout, types, relations, target_type, edge_types)
    _fail(findings, types, relations, cfg.nodes.id, (cfg.edges.src, cfg.edges.dst))

    step(1)
    # 3. labels and the CSRs; 4. featureless types and the files
    y_file = scratch / "y.npy"
    create_memmap(y_file, (target_type.rows,), np.int64)
    if has_labels:
        run_blocks(client, label_codes_block, [(b,) for b in target_type.blocks],
                   spec=target_type.spec, classes=classes, y_file=str(y_file))
    csrs, counts = build_csrs(client, cfg, types, relations, edge_types, scratch, sizes)
    step(1)
    featureless = featureless_blocks(client, cfg, types, csrs)  # type -> width
    width = {t.name: t.spec.width if t.spec.features else featureless[t.name] for t in types}
    storage = cfg.storage
    maps = PreparedMaps(
        x={t.name: (t.x_file, t.rows, width[t.name]) for t in types},
        y=y_file, target=target, num_classes=len(classes),
        csr={e: (c.indptr, c.indices) for e, c in csrs.items()},
        node_time={t.name: (t.time_file, t.rows) for t in types if t.spec.timestamp},
        edge_time={e: c.attrs["time"] for e, c in csrs.items() if "time" in c.attrs},
        reverse={e: r for e, r in edge_types.items() if r is not None} if typed
        else {EDGE: EDGE},  # a one-type graph's edges are their own reverse, directed or not
        link_edge_type=link_edge_type(cfg, [r.edge_type for r in relations], list(edge_types),
                                      target) if typed else EDGE,
        feature_dtype=storage.feature_dtype,
        external=not typed and external_features(storage.features, target_type.rows,
                                                 width[target], storage.feature_dtype),
        featureless=tuple(featureless),
        public_roles=None if source is None else source.public_roles)
    write_prepared_maps(out, maps, storage.compression)
    step(1)
    for t in types if source is None else ():
        write_node_ids(out, t.name, t.blocks, t.spec, id_types[t.name], storage.compression)
    if not typed and relations and relations[0].attrs:
        _write_edge_attrs(out, relations[0], csrs[EDGE], storage.compression)
    isolated, max_degree = received(csrs, target, target_type.rows)
    num_edges = sum(c.edges for c in csrs.values())
    report = {"source": cfg.source, "nodes": sum(t.rows for t in types), "edges": num_edges,
              "features": width[target], "classes": maps.num_classes,
              "undirected": cfg.undirected, **counts, "isolated_nodes": isolated}
    if typed:
        report.update({
            "layout": TYPED, "target": target, "node_types": {t.name: t.rows for t in types},
            "edge_types": {edge_type_name(e): c.edges for e, c in csrs.items()},
            "link_edge_type": edge_type_name(maps.link_edge_type),
            "featureless": {t: cfg.typed.featureless for t in featureless},
            "node_time": list(maps.node_time),
            "edge_time": [edge_type_name(e) for e in maps.edge_time], "labelled": has_labels})
    else:
        report.update(max_degree=max_degree, mean_degree=round(num_edges / target_type.rows, 4))
    if has_labels and pa.types.is_string(classes.type):
        report["class_names"] = [str(v) for v in classes.to_pylist()]
    where = {} if source is None else source.where  # a source's tables: name its input
    empty = [where.get(str(r.path), str(r.path)) for r in relations if r.rows == 0]
    if empty:
        report["warnings"] = [no_edges_warning(where) for where in empty]
    if source is not None and source.public_roles is not None:
        report["public_split"] = {role: int((source.public_roles == code).sum())
                                  for code, role in enumerate(ROLES)}
    labelled = sum(s.labelled for s in target_scans) if has_labels else target_type.rows
    report["labelled_nodes"] = labelled
    # the split audit's overall shape, so report and users read one layout
    report["label_coverage"] = {"labelled": labelled, "unlabelled": target_type.rows - labelled,
                                "labelled_fraction": round(labelled / max(target_type.rows, 1), 6)}
    return report, classes if source is None else source.class_values


def _join(client, types: list[NodeTable], unread: set[int], relations: list[RelationTable],
          id_types: dict, cfg: DatasetParams, scratch: Path, sizes: BlockSizes
          ) -> list[Finding]:
    """Every type's ids (but the ``unread`` types', whose ids failed a check) scattered to its
    buckets under ``ids/<type>``, every relation's ends to the buckets of its end types (and its
    weights / times checked and stored per input row), each bucket joined (dense ends routed to
    ``ids/mapped``); findings in the reader's order."""
    ids = scratch / "ids"
    names = (cfg.edges.src, cfg.edges.dst)
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
    checked = [(b, cfg.edges.weight, cfg.edges.timestamp if r.timed else "",
                str(r.attrs.get("weight", ("",))[0]), str(r.attrs.get("timestamp", ("",))[0]),
                str(r.order or ""), r.timed and "time" in r.attrs)
               for r in relations if r.attrs for b in r.blocks]
    for call, found in zip(checked, run_blocks(client, edge_attrs, checked)):
        findings += [_rekey(f, (3, call[0].batch[0], 0)) if f.key[0] == 99
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


def _build_checks(cfg: DatasetParams, layout: TableLayout, types: list[NodeTable],
                  relations: list[RelationTable], target: NodeTable, edge_types: dict
                  ) -> list[Finding]:
    """``build``'s checks before its edge policies (the homogeneous names, no nodes, a reverse
    name already taken) and after (the link edge type)."""
    if cfg.layout != TYPED:
        return ([] if target.spec is None or target.rows else
                [_text((3, -1), f"{layout.root}: the graph has no nodes")])
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
        if given:  # none: a finding says why
            link_edge_type(cfg, given, list(edge_types), target.name)
    except ValueError as err:
        findings.append(_text((3, LAST + 1), str(err)))
    return findings


def _write_edge_attrs(out: Path, relation: RelationTable, csr, compression: str) -> None:
    """edge_attrs_node__to__node.parquet: each stored edge's weight / timestamp as read (the
    bytes of the whole-table writer ``tests/prepared_oracle.write_edge_attrs``)."""
    indices = open_memmap(csr.indices) if csr.edges else np.zeros(0, dtype=np.int64)
    stream_edges(out / edge_attrs_file(EDGE), "gnnpipe.edge_attrs/1", open_memmap(csr.indptr),
                 indices, {name: (open_memmap(csr.attrs[name]) if csr.edges
                                  else np.zeros(0, raw_dtype(column_type)), column_type)
                           for name, (_, column_type) in relation.attrs.items()}, compression)


def write_node_ids(out: Path, node_type: str, blocks: list[Block], spec: NodeSpec,
                   id_type: pa.DataType, compression: str) -> None:
    """node_ids_<node_type>.parquet in ``out``: node ``i``, its id in the user's table and its
    timestamp cell as read (with ``dataset.nodes.timestamp``), a block at a time."""
    fields = [("node_id", pa.int64()), ("original_id", id_type)]
    if spec.timestamp:
        fields.append(("timestamp", read_block(blocks[0], [spec.timestamp]).schema.field(0).type))
    with table_stream(Path(out) / node_ids_file(node_type), pa.schema(fields),
                      "gnnpipe.node_ids/1", compression) as add:
        for block in blocks:
            columns = {"node_id": np.arange(block.start, block.start + block.rows),
                       "original_id": node_id_column(block, spec, id_type)}
            if spec.timestamp:
                columns["timestamp"] = read_block(block, [spec.timestamp]).column(0)
            add(pa.table(columns))
