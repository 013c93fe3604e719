"""Inline SVG charts of the report's at-a-glance section: the gap's interval bars and the reach
plot. Plain markup, no script, no font or file fetched, so the page stays one self-contained
file; each chart scales to the page width by its viewBox. Every drawn value is also an attribute
(``data-gain``, ``data-accuracy``, ...) so a test reads the chart without rendering it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

FONT = 'font-family="system-ui, sans-serif"'
OUTCOME_COLOURS = {"helps": "#188038", "hurts": "#d93025", "inconclusive": "#5f6368",
                   "collapsed": "#e37400"}
GNN_COLOUR, BASELINE_COLOUR = "#1f77b4", "#ff7f0e"  # the PNG figures' (matplotlib) colours
GRID = "#dddddd"


@dataclass(frozen=True)
class Bar:
    """One comparison: ``gain`` with its interval [``low``, ``high``]; ``outcome`` colours it
    (None: grey)."""

    label: str
    gain: float
    low: float
    high: float
    outcome: str | None = None


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """About ``count`` round tick values (steps of 1, 2 or 5 x 10^k) covering [low, high]."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(count - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    return [round(first + i * step, 10)
            for i in range(int(math.ceil((high - first) / step - 1e-9)) + 1)]


def _size(width: int, height: int) -> str:
    """Drawn at its own size, narrowed (never widened) to the page."""
    return f'width="{width}" height="{height}" style="max-width: 100%; height: auto"'


def _text(x: float, y: float, value: str, size: int = 13, anchor: str = "start",
          colour: str = "#222", weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" {FONT} text-anchor="{anchor}" '
            f'fill="{colour}" font-weight="{weight}">{escape(value, quote=False)}</text>')


def interval_bars(bars: list[Bar], metric: str, title: str) -> str:
    """One row per bar: the interval as a horizontal line with end caps, the gain as a dot,
    the label on the left and the figures on the right, over a shared axis with 0 dashed.

    ``metric`` names the axis (``test accuracy``); rows are ``<g class="interval">`` with
    ``data-label``, ``data-gain``, ``data-low``, ``data-high`` and ``data-outcome``."""
    # the label column fits the longest label (about 7.5 px per character at 13 px)
    left = max(140, 24 + round(7.5 * max((len(b.label) for b in bars), default=0)))
    plot_w, right_w, row_h, top = 470, 330, 30, 44
    width = left + plot_w + right_w
    height = top + row_h * len(bars) + 46
    ticks = nice_ticks(min([0.0, *(b.low for b in bars)]), max([0.0, *(b.high for b in bars)]))
    lo, hi = ticks[0], ticks[-1]
    digits = max(0, -math.floor(math.log10(ticks[1] - ticks[0]) + 1e-9))  # 0.005 -> 3
    x = lambda v: left + (v - lo) / (hi - lo) * plot_w  # noqa: E731
    bottom = top + row_h * len(bars)
    out = [f'<svg class="interval-bars" xmlns="http://www.w3.org/2000/svg" '
           f'viewBox="0 0 {width} {height}" {_size(width, height)} role="img" '
           f'aria-label="{escape(title)}">',
           _text(8, 20, title, 15, weight="bold")]
    for t in ticks:
        out.append(f'<line x1="{x(t):.1f}" y1="{top - 6}" x2="{x(t):.1f}" y2="{bottom}" '
                   f'stroke="{GRID}"/>')
        out.append(_text(x(t), bottom + 18, f"{t:+.{digits}f}" if t else "0", 12, "middle", "#555"))
    out.append(f'<line x1="{x(0):.1f}" y1="{top - 10}" x2="{x(0):.1f}" y2="{bottom + 4}" '
               'stroke="#222" stroke-dasharray="4 3"/>')
    out.append(_text(left + plot_w / 2, bottom + 38,
                     f"GNN minus baseline, {metric} (dot: gain; bar: 95% interval)", 12,
                     "middle", "#555"))
    for i, bar in enumerate(bars):
        y = top + row_h * i + row_h / 2
        colour = OUTCOME_COLOURS.get(bar.outcome or "", "#5f6368")
        out.append(f'<g class="interval" data-label="{escape(bar.label)}" '
                   f'data-gain="{bar.gain:.6f}" data-low="{bar.low:.6f}" '
                   f'data-high="{bar.high:.6f}" data-outcome="{escape(bar.outcome or "")}">')
        out.append(_text(left - 12, y + 4, bar.label, 13, "end"))
        out.append(f'<line x1="{x(bar.low):.1f}" y1="{y:.1f}" x2="{x(bar.high):.1f}" '
                   f'y2="{y:.1f}" stroke="{colour}" stroke-width="4" stroke-linecap="butt"/>')
        for end in (bar.low, bar.high):
            out.append(f'<line x1="{x(end):.1f}" y1="{y - 7:.1f}" x2="{x(end):.1f}" '
                       f'y2="{y + 7:.1f}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<circle cx="{x(bar.gain):.1f}" cy="{y:.1f}" r="6" fill="{colour}" '
                   'stroke="white" stroke-width="1.5"/>')
        figures = f"{bar.gain:+.4f}  [{bar.low:+.4f}, {bar.high:+.4f}]"
        out.append(_text(left + plot_w + 14, y + 4, figures, 13))
        if bar.outcome:
            out.append(_text(left + plot_w + 236, y + 4, bar.outcome, 12, colour=colour,
                             weight="bold"))
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def reach_plot(bins: list[dict], gnn: str, baseline: str) -> str:
    """Test accuracy by hops to the nearest train node (evaluate's ``reach.bins``): one line
    per model over the bins, each point's node count under its bin, the last bin (beyond the
    GNN's layers) shaded. Points are ``<circle class="point">`` with ``data-model``,
    ``data-bin``, ``data-accuracy`` and ``data-count``; an empty bin has none."""
    left, top, plot_w, plot_h = 64, 44, 560, 230
    width, height = left + plot_w + 210, top + plot_h + 66
    step = plot_w / max(len(bins), 1)
    x = lambda i: left + step * (i + 0.5)  # noqa: E731
    y = lambda a: top + (1.0 - a) * plot_h  # noqa: E731
    title = "Test accuracy by hops to the nearest train node"
    out = [f'<svg class="reach-plot" xmlns="http://www.w3.org/2000/svg" '
           f'viewBox="0 0 {width} {height}" {_size(width, height)} role="img" '
           f'aria-label="{title}">',
           _text(8, 20, title, 15, weight="bold")]
    if bins and bins[-1].get("hops") is None:  # beyond the GNN's layers: no message arrives
        out.append(f'<rect x="{left + step * (len(bins) - 1):.1f}" y="{top}" '
                   f'width="{step:.1f}" height="{plot_h}" fill="#f1f1f1"/>')
        out.append(_text(x(len(bins) - 1), top + 16, "beyond the GNN's layers", 11, "middle",
                         "#555"))
    for a in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<line x1="{left}" y1="{y(a):.1f}" x2="{left + plot_w}" y2="{y(a):.1f}" '
                   f'stroke="{GRID}"/>')
        out.append(_text(left - 8, y(a) + 4, f"{a:.2f}", 12, "end", "#555"))
    for i, b in enumerate(bins):
        out.append(_text(x(i), top + plot_h + 18, str(b["bin"]), 13, "middle"))
        out.append(_text(x(i), top + plot_h + 34, f"n={b['count']}", 11, "middle", "#555"))
    out.append(_text(left + plot_w / 2, top + plot_h + 56, "hops to the nearest train node",
                     12, "middle", "#555"))
    out.append(f'<text x="16" y="{top + plot_h / 2:.1f}" font-size="12" {FONT} fill="#555" '
               f'text-anchor="middle" transform="rotate(-90 16 {top + plot_h / 2:.1f})">'
               "test accuracy</text>")
    for name, key, colour, dash in ((gnn, "gnn_accuracy", GNN_COLOUR, ""),
                                    (baseline, "baseline_accuracy", BASELINE_COLOUR, "6 4")):
        points = [(x(i), y(b[key]), b) for i, b in enumerate(bins) if b[key] is not None]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _ in points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                       f'stroke-width="2.5"' + (f' stroke-dasharray="{dash}"' if dash else "")
                       + "/>")
        for px, py, b in points:
            out.append(f'<circle class="point" cx="{px:.1f}" cy="{py:.1f}" r="5" '
                       f'fill="{colour}" data-model="{escape(name)}" '
                       f'data-bin="{escape(str(b["bin"]))}" data-accuracy="{b[key]:.6f}" '
                       f'data-count="{b["count"]}"/>')
    for row, (name, colour, dash) in enumerate(((gnn, GNN_COLOUR, ""),
                                                (baseline, BASELINE_COLOUR, "6 4"))):
        ly = top + 14 + row * 24
        out.append(f'<line x1="{left + plot_w + 20}" y1="{ly}" x2="{left + plot_w + 50}" '
                   f'y2="{ly}" stroke="{colour}" stroke-width="2.5"'
                   + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        out.append(_text(left + plot_w + 58, ly + 4, name, 13))
    out.append("</svg>")
    return "\n".join(out)
