"""The user's node ids read from text (CSV): kept as text unless every id is a canonical integer.

A CSV cell ``00042`` is not the integer 42: turning it into one would merge it with a node ``42``
and break the join of ``original_id`` back to the user's table. So ids are read as strings and
become int64 only when every one is written canonically (``0`` or ``-?[1-9][0-9]*``: no leading
zeros, ``+``, spaces or decimal point; fits int64), and a text id meets an integer id only when it
is that integer's canonical form. Node tables, edge endpoints and ``predict.pairs`` all follow it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CANONICAL_INT = r"^(0|-?[1-9][0-9]{0,18})$"  # 19 digits may still overflow: checked below
INT64_MAX = 2**63 - 1


def canonical_ints(column: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """``column`` (R,) of strings -> (int64 (R,), bool (R,)): the integer of each cell written
    canonically, and which cells are (elsewhere the int64 is 0; nulls are not canonical)."""
    if pa.types.is_large_string(column.type) or pa.types.is_dictionary(column.type):
        column = column.cast(pa.string())
    try:  # fast path, all digits: Arrow's parse refuses '+', spaces, '1.0', overflow ...
        ints = column.cast(pa.int64())
        # ... but reads '007', '-0' and '0x10': a leading zero marks them
        lead = pc.or_(pc.and_(pc.starts_with(column, "0"),
                              pc.greater(pc.binary_length(column), 1)),
                      pc.starts_with(column, "-0"))
        ok = pc.invert(lead).fill_null(False)
        if column.null_count == 0 and not pc.any(lead).as_py():  # the usual case: all canonical
            return ints, np.ones(len(column), dtype=bool)
    except pa.ArrowInvalid:  # some cell is no integer at all: match every cell
        ok = pc.match_substring_regex(column, CANONICAL_INT).fill_null(False).to_numpy(
            zero_copy_only=False)
        long = ok & (pc.utf8_length(column).fill_null(0).to_numpy(zero_copy_only=False) >= 19)
        for row in np.flatnonzero(long):  # rare: Python ints settle the int64 bounds exactly
            ok[row] = -INT64_MAX - 1 <= int(column[int(row)].as_py()) <= INT64_MAX
        ok = pa.array(ok)
        ints = pc.if_else(ok, column, pa.scalar("0")).cast(pa.int64())
    return pc.if_else(ok, ints, pa.scalar(0, pa.int64())), ok.to_numpy(zero_copy_only=False)


def blanks_as_nulls(column: pa.Array) -> pa.Array:
    """Blank or whitespace text cells as nulls (the id checks name them); other types as is."""
    if not pa.types.is_string(column.type) and not pa.types.is_large_string(column.type):
        return column
    blank = pc.equal(pc.utf8_trim_whitespace(column), "").fill_null(False)
    return pc.if_else(blank, pa.scalar(None, column.type), column) if pc.any(blank).as_py() \
        else column


def to_id_type(column: pa.Array, id_type: pa.DataType) -> tuple[pa.Array, np.ndarray | None]:
    """``column`` as ``id_type`` (the node ids' type) and the rows that cannot be any node id
    (None: all can). Text meets integer ids only in canonical form; integers meet text ids as
    their decimal text; anything else is refused by the caller (``pa.ArrowInvalid``)."""
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if column.type == id_type:
        return column, None
    is_text = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
    if is_text and pa.types.is_integer(id_type):
        ints, ok = canonical_ints(column)
        if column.null_count == 0:
            return ints.cast(id_type), None if ok.all() else ~ok
        null = column.is_null()
        bad = ~ok & ~null.to_numpy(zero_copy_only=False)  # nulls: the caller's null check
        ints = pc.if_else(null, pa.scalar(None, pa.int64()), ints).cast(id_type)
        return ints, bad if bad.any() else None
    return column.cast(id_type), None
