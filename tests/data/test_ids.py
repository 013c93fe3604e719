"""gnnpipe/data/ids.py: a text id is an integer only when written canonically, on both paths (all
cells parse as integers: Arrow's parser plus the leading-zero test; some do not: the regex)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from gnnpipe.data.ids import canonical_ints, to_id_type
from table_oracle import from_text  # the whole-table reader's rule

# (text, canonical int or None)
CELLS = [("42", 42), ("0", 0), ("-12", -12), ("9223372036854775807", 2**63 - 1),
         ("-9223372036854775808", -2**63), ("00042", None), ("-0", None), ("-007", None),
         ("0x10", None)]  # Arrow's parser reads the last four as integers
NOT_INTS = [("+5", None), (" 7", None), ("7 ", None), ("1.0", None), ("1e3", None),
            ("9223372036854775808", None), ("-9223372036854775809", None), ("abc", None),
            ("", None)]


@pytest.mark.parametrize("cells", [CELLS, CELLS + NOT_INTS], ids=["parse path", "regex path"])
def test_canonical_ints_on_both_paths(cells):
    ints, ok = canonical_ints(pa.array([text for text, _ in cells]))
    assert ok.tolist() == [want is not None for _, want in cells]
    assert ints.to_pylist() == [0 if want is None else want for _, want in cells]


def test_ids_from_text_are_ints_only_when_all_are_canonical():
    assert from_text(pa.array(["3", "-1", "20"])).type == pa.int64()
    assert from_text(pa.array(["3", "03"])).to_pylist() == ["3", "03"]
    assert from_text(pa.array(["3", " "])).to_pylist() == ["3", None]  # blank: missing
    column, foreign = to_id_type(pa.array(["3", "03", None, "x"]), pa.int64())
    assert column.to_pylist() == [3, 0, None, 0] and foreign.tolist() == [False, True, False, True]
    assert to_id_type(pa.array([3, 40]), pa.string())[0].to_pylist() == ["3", "40"]
