"""Chart primitives for the landing page: inline SVG strings, written server-side.

No JavaScript and no stylesheet beyond the page's own: every chart is one
``<svg class="chart" data-chart=NAME>`` element with a ``<title>``, so it is
readable without a browser script and testable by parsing. Sizes are in a
fixed viewBox; the page scales the SVG to its column width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from typing import Final

#: Colours of the series, in order (readable on white, distinct in greyscale too).
PALETTE: Final = ("#3b6fb6", "#e08a2c", "#4f9d69", "#b5475b", "#7e5fb0", "#8a8a8a")
_AXIS: Final = "#999"
_TEXT: Final = "#333"
Fmt = Callable[[float], str]


def _open(name: str, title: str, width: int, height: int) -> str:
    """The opening tag and title of one chart."""
    return (f'<svg class="chart" data-chart="{escape(name)}" role="img" '
            f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" '
            f'preserveAspectRatio="xMidYMid meet"><title>{escape(title)}</title>')


def _num(x: float) -> str:
    """A coordinate with at most one decimal."""
    return f"{x:.1f}".rstrip("0").rstrip(".")


def bars(name: str, title: str, points: Sequence[tuple[str, float]], *, fmt: Fmt,
         width: int = 480, height: int = 200, label_every: int = 7,
         limit: float | None = None) -> str:
    """Vertical bars, one per point (label, value); every ``label_every``-th label shown.

    ``limit`` draws a dashed horizontal line (a budget) at that value.
    """
    left, right, top, bottom = 56, 8, 12, 26
    plot_w, plot_h = width - left - right, height - top - bottom
    top_value = max([v for _, v in points] + [limit or 0.0, 0.0]) or 1.0
    slot = plot_w / max(len(points), 1)
    parts = [_open(name, title, width, height)]
    parts.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{width - right}" '
                 f'y2="{top + plot_h}" stroke="{_AXIS}"/>')
    parts.append(f'<text x="{left - 4}" y="{top + 8}" text-anchor="end" font-size="12" '
                 f'fill="{_TEXT}">{escape(fmt(top_value))}</text>')
    for i, (label, value) in enumerate(points):
        h = plot_h * value / top_value
        x = left + i * slot
        parts.append(f'<rect class="bar" x="{_num(x + slot * 0.1)}" y="{_num(top + plot_h - h)}" '
                     f'width="{_num(slot * 0.8)}" height="{_num(h)}" fill="{PALETTE[0]}">'
                     f'<title>{escape(label)}: {escape(fmt(value))}</title></rect>')
        if i % label_every == 0:
            parts.append(f'<text x="{_num(x + slot / 2)}" y="{height - 8}" font-size="12" '
                         f'text-anchor="middle" fill="{_TEXT}">{escape(label)}</text>')
    if limit is not None and limit > 0:
        y = top + plot_h - plot_h * limit / top_value
        parts.append(f'<line class="limit" x1="{left}" y1="{_num(y)}" x2="{width - right}" '
                     f'y2="{_num(y)}" stroke="{PALETTE[3]}" stroke-dasharray="4 3"/>')
    parts.append("</svg>")
    return "".join(parts)


def hbars(name: str, title: str, rows: Sequence[tuple[str, float]], *, fmt: Fmt,
          width: int = 480, row_height: int = 22) -> str:
    """Horizontal bars, one row per (label, value), label left, value right."""
    label_w, value_w = 160, 76
    height = max(len(rows), 1) * row_height + 4
    plot_w = width - label_w - value_w
    top_value = max([v for _, v in rows] + [0.0]) or 1.0
    parts = [_open(name, title, width, height)]
    for i, (label, value) in enumerate(rows):
        y = 2 + i * row_height
        w = plot_w * value / top_value
        shown = label if len(label) <= 20 else label[:19] + "…"
        parts.append(f'<text x="{label_w - 6}" y="{y + row_height * 0.68:.1f}" font-size="12" '
                     f'text-anchor="end" fill="{_TEXT}">{escape(shown)}</text>')
        parts.append(f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{_num(max(w, 1.0))}" '
                     f'height="{row_height - 6}" fill="{PALETTE[i % len(PALETTE)]}">'
                     f'<title>{escape(label)}: {escape(fmt(value))}</title></rect>')
        parts.append(f'<text x="{width - 4}" y="{y + row_height * 0.68:.1f}" font-size="12" '
                     f'text-anchor="end" fill="{_TEXT}">{escape(fmt(value))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def stacked(name: str, title: str, parts_in: Sequence[tuple[str, float]], *, fmt: Fmt,
            width: int = 480) -> str:
    """One horizontal bar split into its parts (label, value), with a wrapping legend below."""
    total = sum(v for _, v in parts_in) or 1.0
    bar, row = 22, 18
    legend: list[tuple[float, int, str]] = []  # x, row, text
    x, line_no = 0.0, 0
    for label, value in parts_in:
        text = f"{label} {value / total:.0%}"
        w = 14 + 7.2 * len(text) + 12  # swatch, text at about 7.2 px a character, space
        if x and x + w > width:
            x, line_no = 0.0, line_no + 1
        legend.append((x, line_no, text))
        x += w
    height = bar + 10 + row * (line_no + 1)
    parts = [_open(name, title, width, height)]
    x = 0.0
    for i, (label, value) in enumerate(parts_in):
        w = width * value / total
        parts.append(f'<rect class="part" x="{_num(x)}" y="0" width="{_num(w)}" height="{bar}" '
                     f'fill="{PALETTE[i % len(PALETTE)]}"><title>{escape(label)}: '
                     f'{escape(fmt(value))} ({value / total:.1%})</title></rect>')
        x += w
    for i, (lx, ln, text) in enumerate(legend):
        y = bar + 10 + ln * row
        parts.append(f'<rect x="{_num(lx)}" y="{y}" width="10" height="10" '
                     f'fill="{PALETTE[i % len(PALETTE)]}"/>')
        parts.append(f'<text x="{_num(lx + 14)}" y="{y + 10}" font-size="12" fill="{_TEXT}">'
                     f'{escape(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def line(name: str, title: str, points: Sequence[tuple[str, float]], *, fmt: Fmt,
         width: int = 480, height: int = 160, limit: float | None = None) -> str:
    """A polyline through the points (evenly spaced), first and last label below.

    ``limit`` draws a dashed horizontal line (a budget) at that value.
    """
    left, right, top, bottom = 56, 8, 12, 26
    plot_w, plot_h = width - left - right, height - top - bottom
    top_value = max([v for _, v in points] + [limit or 0.0, 0.0]) or 1.0
    step = plot_w / max(len(points) - 1, 1)

    def y(v: float) -> str:
        return _num(top + plot_h - plot_h * v / top_value)

    coords = " ".join(f"{_num(left + i * step)},{y(v)}" for i, (_, v) in enumerate(points))
    parts = [_open(name, title, width, height)]
    parts.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{width - right}" '
                 f'y2="{top + plot_h}" stroke="{_AXIS}"/>')
    parts.append(f'<text x="{left - 4}" y="{top + 8}" text-anchor="end" font-size="12" '
                 f'fill="{_TEXT}">{escape(fmt(top_value))}</text>')
    parts.append(f'<polyline class="line" points="{coords}" fill="none" '
                 f'stroke="{PALETTE[0]}" stroke-width="2"/>')
    if limit is not None and limit > 0:
        parts.append(f'<line class="limit" x1="{left}" y1="{y(limit)}" x2="{width - right}" '
                     f'y2="{y(limit)}" stroke="{PALETTE[3]}" stroke-dasharray="4 3"/>')
    if points:
        parts.append(f'<text x="{left}" y="{height - 8}" font-size="12" fill="{_TEXT}">'
                     f'{escape(points[0][0])}</text>')
        parts.append(f'<text x="{width - right}" y="{height - 8}" font-size="12" '
                     f'text-anchor="end" fill="{_TEXT}">{escape(points[-1][0])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def meter(name: str, title: str, ratio: float, *, width: int = 240, height: int = 14) -> str:
    """A progress bar filled to ``ratio`` (clamped to 0..1); red from 0.9."""
    shown = min(max(ratio, 0.0), 1.0)
    colour = PALETTE[3] if ratio >= 0.9 else PALETTE[2]
    return (_open(name, title, width, height)
            + f'<rect x="0" y="0" width="{width}" height="{height}" fill="#e6e6e6" rx="3"/>'
            + f'<rect class="fill" x="0" y="0" width="{_num(width * shown)}" height="{height}" '
            + f'fill="{colour}" rx="3"/></svg>')
