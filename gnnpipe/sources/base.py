"""What every source returns (``RawGraph``: node types and relations before the edge
policies) and the checks they share.

Each check raises a one-line ``ValueError`` that names the file and the column, so a user can
find the bad value without a traceback (``gnnpipe prepare`` prints only the message).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gnnpipe.data.graph import EDGE, NODE, ROLES, check_name

# Rows per edge chunk: large enough that per-chunk overhead (id lookups) stays small, small
# enough that a chunk of int64 ids is a few tens of MB.
EDGE_BATCH_ROWS = 1 << 21


def require_file(path: Path, hint: str) -> None:
    """``path`` is a file, else one line naming it and ``hint`` (the key or what belongs
    there): not found, or a directory where a file belongs."""
    if path.is_dir():
        raise ValueError(f"{path} is a directory; expected a file ({hint})")
    if not path.is_file():
        raise ValueError(f"{path}: file not found ({hint})")


def no_edges_warning(where: str) -> str:
    """The warning for an input with no edge rows: legal, almost always a mistake."""
    return (f"{where}: no edge rows (a header only?); the graph has no edges here, so a GNN "
            "sees only node features")


def reason(err: BaseException, limit: int = 160) -> str:
    """The first line of an exception from a reader library, for a one-line message."""
    text = str(err).strip()
    return text.splitlines()[0][:limit] if text else type(err).__name__


def combine(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def first_null(column: pa.Array) -> int:
    return int(np.argmax(column.is_null().to_numpy(zero_copy_only=False)))


def check_no_nulls(column: pa.Array, file: Path | str, name: str, what: str,
                   offset: int = 0) -> None:
    """No nulls in ``column``, else name it; ``offset``: file row of the column's first row."""
    if column.null_count:
        raise ValueError(f"{file}: {what} column {name!r} has {column.null_count} nulls "
                         f"(first: row {offset + first_null(column)})")


def check_finite(values: np.ndarray, file: Path | str, names: list[str], what: str,
                 offset: int = 0) -> None:
    """``values`` (R,) or (R, len(names)): no NaN/inf, else name the first bad column and row."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return
    if values.ndim == 1 or len(names) == 1:
        rows = bad if values.ndim == 1 else bad.any(axis=1)
        column = names[0]
    else:
        col = int(np.argmax(bad.any(axis=0)))
        rows, column = bad[:, col], names[col]
    raise ValueError(f"{file}: {what} column {column!r} has NaN or inf in {int(rows.sum())} "
                     f"rows (first: row {offset + int(np.argmax(rows))})")


def is_numeric(dtype: pa.DataType) -> bool:
    return pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_boolean(dtype)


# Label cells that mean "no label" whatever the column (compared stripped, case-insensitive)
MISSING_LABELS = ("", "nan", "na", "n/a", "none", "null")


class RowError(ValueError):
    """A column's failed check: ``step`` orders the column's checks, ``row`` is the file row the
    message names."""

    def __init__(self, text: str, step: int, row: int):
        super().__init__(text)
        self.step, self.row = step, row


def label_values(column: pa.Array | pa.ChunkedArray, file: Path | str, name: str,
                 unlabeled_values: tuple = (), offset: int = 0) -> tuple[np.ndarray, pa.Array]:
    """Missing rows bool (R,) of an integer, integral float or string label column (null, NaN,
    blank or ``MISSING_LABELS`` strings, and ``unlabeled_values``) and the labels of the others,
    int64 or string (L,); else a ``RowError`` (``offset``: file row of the column's row 0; steps:
    0 the column type, 1 an unlabeled value of the other kind, 2 a non-integer class, 3 a
    negative class)."""
    column = combine(column)
    dtype = column.type
    if pa.types.is_dictionary(dtype):
        column, dtype = column.cast(dtype.value_type), dtype.value_type
    if pa.types.is_large_string(dtype):
        column, dtype = column.cast(pa.string()), pa.string()
    if pa.types.is_null(dtype):  # every cell empty: Arrow could not even infer a type
        column, dtype = column.cast(pa.int64()), pa.int64()
    is_string = pa.types.is_string(dtype)
    if not (is_string or pa.types.is_integer(dtype) or pa.types.is_floating(dtype)):
        raise RowError(f"{file}: label column {name!r} is {dtype}; expected integer or "
                       f"string classes", 0, offset)
    for value in unlabeled_values:
        if is_string != isinstance(value, str):
            raise RowError(f"dataset.nodes.unlabeled_values holds {value!r}, but label column "
                           f"{name!r} of {file} holds {'strings' if is_string else 'numbers'}",
                           1, offset)
    missing = column.is_null().to_numpy(zero_copy_only=False)
    if is_string:
        text = pc.utf8_lower(pc.utf8_trim_whitespace(column.fill_null("")))
        missing |= pc.is_in(text, value_set=pa.array(MISSING_LABELS)).to_numpy(
            zero_copy_only=False)
        if unlabeled_values:
            missing |= pc.is_in(column.fill_null(""), value_set=pa.array(
                [str(v) for v in unlabeled_values])).to_numpy(zero_copy_only=False)
        return missing, column.filter(pa.array(~missing))
    floating = pa.types.is_floating(dtype)
    raw = column.fill_null(0).to_numpy(zero_copy_only=False).astype(
        np.float64 if floating else np.int64)
    if floating:
        missing |= np.isnan(raw)
        bad = ~missing & (~np.isfinite(raw) | (raw != np.round(raw)))
        if bad.any():
            row = offset + int(np.argmax(bad))
            raise RowError(f"{file}: label column {name!r} holds a non-integer class "
                           f"{raw[row - offset]} (row {row}); expected integer or string "
                           f"classes", 2, row)
    raw = np.where(missing, 0, raw).astype(np.int64)
    if unlabeled_values:
        missing |= np.isin(raw, np.asarray(unlabeled_values, dtype=np.int64)) & ~missing
    negative = ~missing & (raw < 0)
    if negative.any():
        row = offset + int(np.argmax(negative))
        value = int(raw[row - offset])
        raise RowError(f"{file}: label column {name!r} has negative class {value} (row {row}); "
                       f"if it means 'unlabelled', list it in dataset.nodes.unlabeled_values "
                       f"(e.g. [{value}])", 3, row)
    return missing, pa.array(raw[~missing], pa.int64())


def class_codes(missing: np.ndarray, values: pa.Array, classes: pa.Array) -> np.ndarray:
    """int64 (R,) codes into the sorted ``classes`` (C,) of ``values`` (L,), the labels of the
    rows not ``missing`` (bool (R,)); -1 (``UNLABELLED``) where missing."""
    codes = np.full(missing.size, -1, dtype=np.int64)
    if pa.types.is_string(classes.type):
        codes[~missing] = pc.index_in(values, value_set=classes).to_numpy().astype(np.int64)
    else:  # never a bincount over raw values
        codes[~missing] = np.searchsorted(classes.to_numpy(), values.to_numpy())
    return codes


def label_codes(column: pa.Array | pa.ChunkedArray, file: Path | str, name: str,
                unlabeled_values: tuple = (), max_classes: int | None = None,
                trainable: bool = True) -> tuple[np.ndarray, pa.Array]:
    """Class codes int64 (N,) from an integer, integral float or string label column, -1
    (``UNLABELLED``) where the label is missing (``label_values``); and the user's value of
    each class code, int64 or string (C,).

    The present values are remapped to dense codes 0..C-1 in sorted order, so sparse integer
    codes never make empty classes. ``trainable`` False (a graph a trained model scores): no
    label, or a single class, is allowed.
    """
    column = combine(column)
    if len(column) == 0:  # no nodes at all: validate_arrays says so
        return np.zeros(0, dtype=np.int64), pa.array([], type=pa.int64())
    missing, kept = label_values(column, file, name, unlabeled_values)
    values = pc.unique(kept).sort()
    codes = class_codes(missing, kept, values)
    if not trainable:
        return codes, values
    if missing.all():
        raise ValueError(f"{file}: label column {name!r} has no labelled rows (all "
                         f"{missing.size} are missing: null, NaN, blank, NA, ...)")
    if max_classes is not None and len(values) > max_classes:
        raise ValueError(f"{file}: label column {name!r} has {len(values)} distinct classes, "
                         f"more than dataset.max_classes={max_classes}")
    if len(values) < 2:
        raise ValueError(f"{file}: label column {name!r} holds a single class "
                         f"{values[0].as_py()!r} among its {int((~missing).sum())} labelled rows "
                         f"({int(missing.sum())} more look unlabelled: null, NaN, blank, NA, "
                         f"None, ...); node classification needs >= 2")
    return codes, values


def feature_columns(schema: pa.Schema, spec: str, exclude: set[str], file: Path | str
                    ) -> tuple[list[str], bool]:
    """Columns named by ``spec`` and whether it is one list/array column.

    ``spec`` is the name of a list column, or comma-separated names / globs of numeric scalar
    columns, matched in file order (``exclude``: the id, label and timestamp columns).
    """
    if spec in schema.names:
        dtype = schema.field(spec).type
        if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) \
                or pa.types.is_fixed_size_list(dtype):
            return [spec], True
    names: list[str] = []
    for pattern in (part.strip() for part in spec.split(",")):
        matched = [c for c in schema.names if fnmatch.fnmatchcase(c, pattern)
                   and c not in exclude and c not in names]
        if not matched:
            raise ValueError(f"{file}: missing feature column {pattern!r} "
                             f"(dataset.nodes.features); columns: {', '.join(schema.names)}")
        names += matched
    for name in names:
        if not is_numeric(schema.field(name).type):
            raise ValueError(f"{file}: feature column {name!r} is {schema.field(name).type}; "
                             f"features must be numeric (or one list column)")
    return names, False


def time_key(column: pa.Array) -> np.ndarray:
    """A sortable number per row of a timestamp column: int64 for ints/dates/times, else float64."""
    dtype = column.type
    if pa.types.is_date32(dtype):  # days since the epoch; Arrow casts date32 only to int32
        column = column.cast(pa.int32())
    elif pa.types.is_timestamp(dtype) or pa.types.is_date64(dtype):  # in the column's unit
        column = column.cast(pa.int64())
    values = column.to_numpy(zero_copy_only=False)
    return values.astype(np.int64 if np.issubdtype(values.dtype, np.integer) else np.float64)


def is_timestamp_type(dtype: pa.DataType) -> bool:
    """Whether a timestamp column may be of ``dtype``: ints, floats, dates, times."""
    return (pa.types.is_integer(dtype) or pa.types.is_floating(dtype)
            or pa.types.is_timestamp(dtype) or pa.types.is_date(dtype))


def int_times(values: np.ndarray, where: str, offset: int = 0) -> np.ndarray:
    """``time_key`` values (R,) as int64, as typed graphs store them; else a ``RowError`` naming
    the first that is not a whole number (``offset``: file row of row 0)."""
    if values.dtype == np.int64:
        return values
    frac = values != np.round(values)
    if frac.any():
        row = offset + int(np.argmax(frac))
        raise RowError(f"{where}: timestamp {values[row - offset]} (row {row}) is not a whole "
                       "number; typed graphs store int64 times (use integers, dates or "
                       "timestamps)", 0, row)
    return values.astype(np.int64)


def split_edge_type(name: str, sep: str, path: Path | str, naming: str, node_types,
                    unknown: str) -> tuple[str, str, str]:
    """``(src, relation, dst)`` of a relation's file or folder ``name``, ``src<sep>rel<sep>dst``:
    each part a valid name, both node types in ``node_types``. ``naming`` (how such a name is
    made) and ``unknown`` (where the node types are listed) end the two error lines."""
    parts = name.split(sep)
    if len(parts) != 3:
        raise ValueError(f"{path}: {naming}, not {name!r}")
    for part, what in zip(parts, ("source node type", "relation", "target node type")):
        check_name(part, f"{path}: {what}")
    for node_type in (parts[0], parts[2]):
        if node_type not in node_types:
            raise ValueError(f"{path}: names node type {node_type!r}, which {unknown}")
    return parts[0], parts[1], parts[2]


def roles_from_indices(num_nodes: int, index: dict[str, np.ndarray], where: str) -> np.ndarray:
    """int8 (N,) codes into ``ROLES`` from node ids per role (``train``/``val``/``test``)."""
    codes = np.full(num_nodes, ROLES.index("unused"), dtype=np.int8)
    for role, ids in index.items():
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
            bad = ids[(ids < 0) | (ids >= num_nodes)][0]
            raise ValueError(f"{where}: {role} split has node id {int(bad)} outside "
                             f"[0, {num_nodes})")
        clash = codes[ids] != ROLES.index("unused")
        if clash.any():
            node = int(ids[np.argmax(clash)])
            raise ValueError(f"{where}: node {node} is in both the {ROLES[codes[node]]} and the "
                             f"{role} split")
        codes[ids] = ROLES.index(role)
    return codes


def roles_from_masks(masks: dict[str, np.ndarray], where: str) -> np.ndarray:
    """int8 (N,) codes into ``ROLES`` from bool masks (N,) per role."""
    num_nodes = next(iter(masks.values())).shape[0]
    return roles_from_indices(num_nodes, {r: np.flatnonzero(m) for r, m in masks.items()}, where)


@dataclass(frozen=True)
class RawNodeType:
    """One node type as a source read it: ``x`` float32 (N, F) or None (no feature
    columns: prepare gives it ``dataset.typed.featureless``), ``time`` (N,) the timestamp column
    as read; node ``i`` is row ``i`` of the source."""

    num_nodes: int
    x: np.ndarray | None
    where: str  # the file, for messages
    time: pa.Array | None = None


@dataclass(frozen=True)
class RawRelation:
    """One relation's input rows: ``src`` / ``dst`` int64 (E,) type-local ids."""

    src: np.ndarray
    dst: np.ndarray
    where: str


@dataclass(frozen=True)
class RawGraph:
    """A source's graph before the edge policies (the prepare applies them).
    Node types and relations in the source's order; ``y`` int64 (N_target,) (all zeros and one
    class when a link-task graph has no labels); ``public_roles`` int8 (N_target,) codes into
    ``ROLES`` (the dataset's official split). A homogeneous source's graph is the one-type case
    (``RawGraph.homogeneous``)."""

    nodes: dict[str, RawNodeType]
    relations: dict[tuple[str, str, str], RawRelation]
    target: str
    y: np.ndarray
    where: str  # names the input in error messages
    public_roles: np.ndarray | None = None
    labelled: bool = True  # False: no label column anywhere (dataset.task link only)
    class_values: pa.Array | None = None  # (C,) the user's label of each code, int64 or string
    # the relation the link task holds out when dataset.typed.link_edge_type is unset (None:
    # prepare's rule, the first relation with the target type at one end)
    link_relation: tuple[str, str, str] | None = None

    @classmethod
    def homogeneous(cls, x: np.ndarray, y: np.ndarray, src: np.ndarray, dst: np.ndarray,
                    where: str, *, public_roles: np.ndarray | None = None,
                    class_values: pa.Array | None = None) -> "RawGraph":
        """One node type ``NODE`` (``x`` float32 (N, F), ``y`` int64 (N,)) and one relation
        ``EDGE`` (``src`` / ``dst`` int64 (E,) in ``[0, N)``), both read from ``where``;
        labelled, as every homogeneous source is."""
        node = RawNodeType(num_nodes=len(x), x=x, where=where)
        return cls(nodes={NODE: node}, relations={EDGE: RawRelation(src, dst, where)}, target=NODE,
                   y=y, where=where, public_roles=public_roles, class_values=class_values)
