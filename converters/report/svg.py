"""The charts of the report, drawn as inline SVG by Python: no script, no library, no fetch.

Two shapes cover every chart on the page:
- `bar_chart`: horizontal bars, each a stack of segments (per-rank compute / exposed comm /
  idle, traffic, critical path, collectives, sweep points), with an axis on one common scale;
- `timeline_chart`: lanes of pieces over time (the compact timeline of representative ranks).

Every bar and segment carries its exact numbers as `data-*` attributes (integers: ns, bytes)
and a `<title>` the browser shows on hover, so a reader can check a bar and a test can read it
back from the DOM. Sizes are in SVG user units; the page scales the SVG to its column.
"""

from __future__ import annotations

from html import escape
from typing import Any, Callable

# Colour-blind-safe palette (Tableau 10): one colour per meaning across every chart.
COLORS = {
    "compute_ns": "#4e79a7", "exposed_comm_ns": "#f28e2b", "idle_ns": "#bab0ac",
    "compute": "#4e79a7", "tp": "#e15759", "dp": "#76b7b2", "pp": "#59a14f", "ep": "#edc948",
    "dp_ep": "#b07aa1", "all": "#ff9da7", "world": "#ff9da7", "embedding": "#9c755f", "other": "#8c8c8c",
    "value": "#4e79a7",
}
LABEL_W = 230  # room for a bar's label, left of the bars
BAR_W = 520  # the longest bar
VALUE_W = 110  # room for the number right of the bars
ROW_H = 20
AXIS_H = 22


def color(key: str) -> str:
    return COLORS.get(key, COLORS["other"])


def nice_ticks(maximum: float, count: int = 5, binary: bool = False) -> list[float]:
    """Round tick values from 0 to at least `maximum` (steps of 1, 2 or 5 times a power of ten;
    `binary`: of KiB, MiB, GiB or TiB, so byte axes read 2 GiB, 4 GiB rather than 1.9 GiB)."""
    if maximum <= 0:
        return [0.0]
    if binary:
        unit = next((u for u in (1 << 40, 1 << 30, 1 << 20, 1 << 10) if maximum >= u), 1)
        return [t * unit for t in nice_ticks(maximum / unit, count)]
    raw = maximum / count
    power = _power_of_ten(raw)
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    ticks = [0.0]
    while ticks[-1] < maximum:
        ticks.append(ticks[-1] + step)
    return ticks


def _power_of_ten(x: float) -> float:
    power = 1.0
    while power * 10 <= x:
        power *= 10
    while power > x:
        power /= 10
    return power


def bar_chart(rows: list[dict[str, Any]], segments: list[tuple[str, str]], scale: float,
              fmt: Callable[[float], str], chart: str, binary: bool = False) -> str:
    """Horizontal stacked bars on a common scale.

    rows: {"label", "values": {segment key: number}, "data": {attr: value}, "title": hover text};
    segments: (key, legend label) in stacking order; scale: the value of a full-length bar;
    fmt: a value as text (axis, hover, the number after each bar); chart: the `data-chart` name;
    binary: byte values (ticks at round KiB, MiB, GiB).
    """
    ticks = nice_ticks(scale, binary=binary)
    top = ticks[-1] or 1
    height = AXIS_H + ROW_H * len(rows) + 4
    width = LABEL_W + BAR_W + VALUE_W
    out = [f'<svg class="chart" data-chart="{chart}" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" xmlns="http://www.w3.org/2000/svg">']
    out.append(_axis(ticks, top, fmt, height))
    for i, row in enumerate(rows):
        y = AXIS_H + i * ROW_H
        data = "".join(f' data-{k}="{escape(str(v))}"' for k, v in row.get("data", {}).items())
        out.append(f'<g class="bar"{data}><title>{escape(row.get("title") or row["label"])}</title>')
        out.append(f'<text class="label" x="{LABEL_W - 6}" y="{y + 14}" text-anchor="end">{escape(_clip(row["label"]))}</text>')
        x = 0.0
        for key, name in segments:
            value = row["values"].get(key, 0)
            w = BAR_W * value / top
            if value > 0:
                out.append(f'<rect class="seg" data-segment="{key}" data-value="{value}" x="{LABEL_W + x:.2f}" '
                           f'y="{y + 3}" width="{max(w, 0.5):.2f}" height="{ROW_H - 6}" fill="{color(key)}">'
                           f'<title>{escape(name)}: {escape(fmt(value))}</title></rect>')
            x += w
        total = sum(row["values"].get(k, 0) for k, _ in segments)
        out.append(f'<text class="value" x="{LABEL_W + x + 5:.2f}" y="{y + 14}">{escape(fmt(total))}</text></g>')
    out.append("</svg>")
    return "".join(out)


def _axis(ticks: list[float], top: float, fmt: Callable[[float], str], height: int) -> str:
    parts = ['<g class="axis">']
    for t in ticks:
        x = LABEL_W + BAR_W * t / top
        parts.append(f'<line x1="{x:.2f}" x2="{x:.2f}" y1="{AXIS_H - 4}" y2="{height}"/>')
        parts.append(f'<text x="{x:.2f}" y="{AXIS_H - 8}" text-anchor="middle">{escape(fmt(t))}</text>')
    parts.append("</g>")
    return "".join(parts)


def _clip(text: str, limit: int = 34) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def legend(items: list[tuple[str, str]]) -> str:
    """Colour keys as HTML (wraps with the page, unlike SVG text)."""
    return '<div class="legend">' + "".join(
        f'<span><i style="background:{color(key)}"></i>{escape(name)}</span>' for key, name in items) + "</div>"


def timeline_chart(timeline: dict[str, Any], span: int, fmt: Callable[[float], str]) -> str:
    """Lanes of pieces: per rank a compute strip above a communication strip.

    `timeline` is `data.timeline_lanes`' output; `span` the time a full-width lane stands for
    (the longer run's, when two runs are compared), so both pages share one time axis.
    """
    columns = timeline["columns"]
    scale = BAR_W * timeline["span_ns"] / max(span, 1) / columns  # SVG units per column
    lane_h = 18
    ticks = nice_ticks(span)
    top = ticks[-1] or 1
    height = AXIS_H + lane_h * len(timeline["lanes"]) + 4
    width = LABEL_W + BAR_W + VALUE_W  # as wide as the bar charts, so both scale alike on the page
    out = [f'<svg class="chart" data-chart="timeline" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" xmlns="http://www.w3.org/2000/svg">']
    axis_width = BAR_W * top / span  # ticks run past the lane end up to the next round value
    out.append('<g class="axis">')
    for t in ticks:
        x = LABEL_W + axis_width * t / top
        if x > LABEL_W + BAR_W + 1:
            break
        out.append(f'<line x1="{x:.2f}" x2="{x:.2f}" y1="{AXIS_H - 4}" y2="{height}"/>'
                   f'<text x="{x:.2f}" y="{AXIS_H - 8}" text-anchor="middle">{escape(fmt(t))}</text>')
    out.append("</g>")
    for i, lane in enumerate(timeline["lanes"]):
        y = AXIS_H + i * lane_h
        out.append(f'<g class="lane" data-rank="{lane["rank"]}"><title>{escape(lane["label"])}: last node ends at '
                   f'{escape(fmt(lane["end_ns"]))}</title><text class="label" x="{LABEL_W - 6}" y="{y + 13}" '
                   f'text-anchor="end">{escape(lane["label"])}</text>')
        for strip, dy in (("compute", 2), ("comm", 9)):  # the strip is told by its y
            for a, b, category in lane[strip]:  # short: a lane may have hundreds of pieces
                out.append(f'<rect x="{LABEL_W + a * scale:.1f}" y="{y + dy}" width="{(b - a) * scale:.1f}" '
                           f'height="6" fill="{color(category)}"/>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)
