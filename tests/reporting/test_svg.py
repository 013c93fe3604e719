"""The report's inline SVG charts: round axis ticks that cover the data, tick labels with the
digits their step needs, and a label column as wide as the longest label."""

from __future__ import annotations

import re

import pytest

from gnnpipe.reporting.svg import Bar, interval_bars, nice_ticks


@pytest.mark.parametrize("low, high, expected", [
    (-0.0193, 0.0258, [-0.02, -0.01, 0.0, 0.01, 0.02, 0.03]),
    (0.0, 0.02, [0.0, 0.005, 0.01, 0.015, 0.02]),
    (-0.3, 0.6, [-0.4, -0.2, 0.0, 0.2, 0.4, 0.6]),
    (0.0, 0.0, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),  # nothing to span: a unit axis
])
def test_ticks_are_round_and_cover_the_range(low, high, expected):
    assert nice_ticks(low, high) == pytest.approx(expected)


def _ticks(chart: str) -> list[str]:
    return re.findall(r'text-anchor="middle" fill="#555" font-weight="normal">([^<]+)</text>',
                      chart)[:-1]  # the last one is the axis title


def test_tick_labels_carry_the_digits_of_their_step():
    chart = interval_bars([Bar("a", 0.01, 0.002, 0.018, "helps")], "test accuracy", "t")
    assert _ticks(chart) == ["0", "+0.005", "+0.010", "+0.015", "+0.020"]
    chart = interval_bars([Bar("a", 0.1, -0.3, 0.55, None)], "test accuracy", "t")
    assert _ticks(chart) == ["-0.4", "-0.2", "0", "+0.2", "+0.4", "+0.6"]
    assert 'data-outcome=""' in chart and "#5f6368" in chart  # no outcome: grey


def test_label_column_fits_the_longest_label():
    label = "hard_negatives / heuristics / resource_allocation"  # 49 characters
    chart = interval_bars([Bar(label, 0.1, 0.0, 0.2, "helps")], "test MRR", "t")
    # right-aligned at x; at ~7.5 px a character (13 px font) it starts inside the chart
    x = float(re.search(rf'<text x="([\d.]+)"[^>]*text-anchor="end"[^>]*>{label}<', chart)[1])
    assert x - 7.5 * len(label) >= 0
    short = interval_bars([Bar("sage − MLP", 0.1, 0.0, 0.2, "helps")], "test MRR", "t")
    assert 'viewBox="0 0 940 ' in short  # the minimum label column (140) + plot + figures
