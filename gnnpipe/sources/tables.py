"""``dataset.source: parquet | csv``: where the user's node and edge tables are under
``dataset.path`` (the block prepare, gnnpipe/data/prepare_tables.py, reads them; which columns:
``gnnpipe.data.table_blocks.node_spec``). A homogeneous graph is the one-type case: one node
table and one edge table. With ``dataset.layout: typed`` there is one table per node type and
one per relation::

    nodes/<type>.parquet             one row per node: id, features, label (target), timestamp
    edges/<src>__<rel>__<dst>.parquet  one row per edge: src (ids of <src>), dst (ids of <dst>)

(``.csv`` / ``.csv.gz`` for ``source: csv``; a folder ``<type>.parquet/`` of parts works too;
``dataset.nodes.file`` / ``dataset.edges.file`` rename the two folders.) The column options
(``dataset.nodes.*``, ``dataset.edges.*``) apply to every table; in a typed node table the
feature, label and timestamp columns are optional (featureless, unlabelled, untimed types). The
node table with the label column is the target (``dataset.typed.target`` picks one when several
have it). Node ``i`` (of a type) is row ``i`` of its node table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gnnpipe.config import DatasetParams
from gnnpipe.sources.base import require_file, split_edge_type
from gnnpipe.sources.formats import CsvTables, ParquetTables
from gnnpipe.data.graph import NODE, TYPED, check_name

SUFFIXES = {"parquet": (".parquet",), "csv": (".csv", ".csv.gz", ".csv.bz2")}


# --------------------------------------------------------------------------------------- read
def table_folder(cfg: DatasetParams) -> Path:
    """``dataset.path``, the folder of the node and edge tables; else one line naming it."""
    if not Path(cfg.path).is_dir():
        raise ValueError(f"dataset.path={cfg.path!r} is not a folder; dataset.source="
                         f"{cfg.source} reads the node and edge tables (dataset.nodes.file, "
                         f"dataset.edges.file) from a folder")
    return Path(cfg.path)


def check_table_path(path: Path, table: str, cfg: DatasetParams) -> None:
    """The node or edge table exists and is a file (a Parquet table may be a folder of parts),
    else one line naming its key."""
    if not path.exists() or (path.is_dir() and cfg.source != "parquet"):
        require_file(path, f"dataset.{table}.file; dataset.source={cfg.source} reads the node "
                           f"and edge tables from dataset.path={cfg.path!r}")


# -------------------------------------------------------------------------------- typed
def table_entries(folder: Path, fmt: str) -> dict[str, Path]:
    """Stem -> path of every table in ``folder`` (files, or parquet folders of parts), by name."""
    found: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        suffix = next((s for s in SUFFIXES[fmt] if path.name.endswith(s)), None)
        if suffix is None or path.name.startswith("."):
            continue
        if path.is_dir() and fmt != "parquet":  # only Parquet tables may be folders of parts
            raise ValueError(f"{path} is a directory; expected a file (a table of "
                             f"{folder.name}/ with dataset.source={fmt})")
        stem = path.name[:-len(suffix)]
        if stem in found:
            raise ValueError(f"{path}: table {stem!r} given twice (also {found[stem]})")
        found[stem] = path
    return found


def typed_target(cfg: DatasetParams, labelled: list[str], paths: dict[str, Path],
                 nodes_dir: Path) -> str | None:
    """The labelled node type (``dataset.typed.target`` or the one table with the label)."""
    wanted, label = cfg.typed.target, cfg.nodes.label
    if wanted:
        if wanted not in paths:
            raise ValueError(f"dataset.typed.target={wanted!r} has no node table in {nodes_dir} "
                             f"(node types: {', '.join(paths)})")
        if wanted not in labelled and cfg.task == "node":
            raise ValueError(f"{paths[wanted]}: missing label column {label!r} "
                             f"(dataset.nodes.label) in the table of the target node type "
                             f"{wanted!r}")
        return wanted
    if len(labelled) > 1:
        raise ValueError(f"{nodes_dir}: node tables {', '.join(labelled)} all have the label "
                         f"column {label!r}; set dataset.typed.target to the labelled type")
    if labelled:
        return labelled[0]
    if cfg.task == "node":
        raise ValueError(f"{nodes_dir}: no node table has the label column {label!r} "
                         f"(dataset.nodes.label); node classification needs it on the target "
                         f"type (node types: {', '.join(paths)})")
    return None


@dataclass(frozen=True)
class TableLayout:
    """Where a graph's tables are: the reader of ``dataset.source``, each node type's table
    (name order; a homogeneous graph's one table is type ``NODE``), the input's folder and, for
    a typed graph, the folders of its node and edge tables (None: homogeneous)."""

    tables: object  # ParquetTables | CsvTables
    paths: dict[str, Path]
    root: Path
    nodes_dir: Path | None = None
    edges_dir: Path | None = None


def table_layout(cfg: DatasetParams) -> TableLayout:
    """The node tables of ``dataset.layout``, else one line (no folder, no tables, a bad type
    name)."""
    root, fmt = Path(cfg.path), cfg.source
    tables = ParquetTables() if fmt == "parquet" else CsvTables()
    if cfg.layout != TYPED:
        nodes_path = table_folder(cfg) / (cfg.nodes.file or f"nodes.{fmt}")
        check_table_path(nodes_path, "nodes", cfg)
        return TableLayout(tables, {NODE: nodes_path}, root)
    if not root.is_dir():
        raise ValueError(f"dataset.path={cfg.path!r} is not a folder; dataset.layout=typed reads "
                         f"nodes/<type>.{fmt} and edges/<src>__<rel>__<dst>.{fmt} from a folder")
    nodes_dir, edges_dir = root / (cfg.nodes.file or "nodes"), root / (cfg.edges.file or "edges")
    paths = table_entries(nodes_dir, fmt) if nodes_dir.is_dir() else {}
    if not paths:
        raise ValueError(f"{nodes_dir}: no node tables; dataset.layout=typed needs one "
                         f"<type>{SUFFIXES[fmt][0]} per node type in this folder")
    for node_type, path in paths.items():
        check_name(node_type, f"{path}: node type")
    return TableLayout(tables, paths, root, nodes_dir, edges_dir)


def edge_tables(typed: TableLayout, fmt: str) -> dict[str, Path]:
    """Stem -> path of every relation's table of a typed graph, else one line."""
    edge_paths = table_entries(typed.edges_dir, fmt) if typed.edges_dir.is_dir() else {}
    if not edge_paths:
        raise ValueError(f"{typed.edges_dir}: no edge tables; dataset.layout=typed needs one "
                         f"<src>__<relation>__<dst>{SUFFIXES[fmt][0]} per relation here")
    return edge_paths


def relation_of(stem: str, path: Path, typed: TableLayout) -> tuple[str, str, str]:
    """The edge type a relation's table name gives, else one line."""
    return split_edge_type(
        stem, "__", path, "an edge table is named <src>__<relation>__<dst> (node types and "
        "a relation joined by double underscores)", typed.paths,
        f"has no node table in {typed.nodes_dir} (node types: {', '.join(typed.paths)})")
