"""One self-contained HTML page from the data of one run (or two, compared) and a sweep.

The page has no script and loads nothing: styles are inline, charts are inline SVG
(`svg.py`), links only jump inside the page. Sections, in order: the headline, per-rank
bars, the timeline overview, traffic by group kind, the critical path, the slowest
collective instances, the sweep (when given), the validator's findings and the assumptions.
With two runs, a table of differences comes first and every section shows the runs side by
side on one scale, so equal lengths mean equal times.
"""

from __future__ import annotations

from html import escape
from typing import Any, Callable

from ..writers.layout_chrome import format_bytes
from .svg import bar_chart, legend, timeline_chart

BREAKDOWN = [("compute_ns", "compute"), ("exposed_comm_ns", "exposed communication"), ("idle_ns", "idle (waiting)")]
CHANGE = 0.005  # a difference under 0.5 % is not highlighted

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:0;background:#fafafa}
header{background:#fff;border-bottom:1px solid #ddd;padding:16px 28px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}h3{font-size:14px;margin:8px 0}
.sub{color:#555;margin:0}nav{margin-top:8px}nav a{margin-right:14px;color:#2a5db0;text-decoration:none}
main{padding:4px 28px 28px}section{background:#fff;border:1px solid #e2e2e2;border-radius:6px;padding:4px 16px 12px;margin-top:18px}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #e2e2e2;border-radius:6px;padding:8px 12px;min-width:150px}
.card b{display:block;font-size:18px}.card span{color:#555;font-size:12px}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:18px}.pair>div{min-width:0}
svg.chart{width:100%;max-width:1000px;height:auto;font-size:11px}svg .axis line{stroke:#e5e5e5}svg .axis text{fill:#777}
svg .label{fill:#333}svg .value{fill:#333}svg g.bar:hover rect{opacity:.8}
.legend{font-size:12px;color:#444;margin:4px 0 6px}.legend span{margin-right:14px;white-space:nowrap}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:-1px;border-radius:2px}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}
td:first-child,th:first-child{text-align:left}.worse{background:#fde2e1}.better{background:#dff3e3}.changed{background:#fff4cc}
.note{color:#555;font-size:12px}.findings li{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;margin:2px 0}
.error{color:#b00020}.warning{color:#8a5a00}.info{color:#555}
"""


def fmt_time(ns: float) -> str:
    """`723.66 ms`, `1.5 s`, `40 ns`: three significant decimals at most, for axes and labels."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{ns:.0f} ns" if ns else "0"


def fmt_bytes(n: float) -> str:
    return format_bytes(int(n))


def render_page(runs: list[dict[str, Any]], sweep: dict[str, Any] | None = None, version: str = "") -> str:
    """The HTML of the page: one run, or two side by side (`runs[0]` is the base)."""
    title = "et-convert report · " + (" vs ".join(r["label"] for r in runs))
    sections: list[tuple[str, str, str]] = []  # (anchor, heading, html)
    if len(runs) > 1:
        sections.append(("differences", "Differences", differences(runs[0], runs[1])))
    for anchor, heading, draw in SECTIONS:
        scale = _common_scale(anchor, runs)
        parts = [draw(run, scale) for run in runs]
        if len(runs) == 1:
            sections.append((anchor, heading, parts[0]))
        else:
            sections.append((anchor, heading, '<div class="pair">' + "".join(
                f'<div data-run="{i}"><h3>{"AB"[i]}: {escape(run["label"])}</h3>{part}</div>'
                for i, (run, part) in enumerate(zip(runs, parts))) + "</div>"))
        if anchor == "collectives" and sweep:
            sections.append(("sweep", "What if: network sweep", sweep_section(sweep)))
    nav = "".join(f'<a href="#{a}">{escape(h)}</a>' for a, h, _ in sections)
    body = "".join(f'<section id="{a}"><h2>{escape(h)}</h2>{html}</section>' for a, h, html in sections)
    subtitle = " · ".join(dict.fromkeys(_subtitle(run) for run in runs))  # once when both runs share it
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<meta name="generator" content="et-convert {escape(version)}"><title>{escape(title)}</title>'
        f"<style>{CSS}</style></head><body><header><h1>{escape(title)}</h1><p class=\"sub\">{escape(subtitle)}</p>"
        f"<nav>{nav}</nav></header><main>{body}</main>"
        f'<footer class="note" style="padding:0 28px 20px">et-convert {escape(version)} · everything on this page is '
        "in this one file; it loads nothing.</footer></body></html>\n"
    )


def _subtitle(run: dict[str, Any]) -> str:
    p = run["parallel"]
    layout = ", ".join(f"{k} {p[k]}" for k in ("tp", "dp", "pp", "ep") if p.get(k, 1) > 1)
    return f"{run['format']}: {run['stats']['world']} ranks" + (f" ({layout})" if layout else "")


def _common_scale(anchor: str, runs: list[dict[str, Any]]) -> Any:
    """The value a full-length bar stands for in this section, shared by the compared runs
    (traffic: one per chart)."""
    if anchor == "traffic":
        return {field: max((row[field] for r in runs for row in r["stats"]["comm"].values()), default=0)
                for field in ("bytes", "busy_ns")}
    if anchor in ("ranks", "timeline", "headline"):
        return max(max(r["stats"]["iteration_time_ns"], r["timeline"]["span_ns"]) for r in runs)
    if anchor == "critical":
        return max((i["ns"] for r in runs for i in (r["stats"]["critical_path"] or {}).get("top", [])), default=0)
    if anchor == "collectives":
        return max((c["ns"] for r in runs for c in r["collectives"]), default=0)
    return 0.0


# ---------------------------------------------------------------- sections of one run


def headline(run: dict[str, Any], scale: float) -> str:
    stats = run["stats"]
    iteration = stats["iteration_time_ns"]
    cards = [_card("iteration time", fmt_time(iteration), run["basis"], "iteration_time_ns", iteration)]
    slowest = run["slowest"]
    if slowest is not None:
        row = stats["ranks"][str(slowest)]
        stage = run["stages"].get(str(slowest))
        cards.append(_card("slowest rank", str(slowest), "finishes last" + (f" · stage {stage}" if stage is not None else ""),
                           "slowest_rank", slowest))
        for key, name in BREAKDOWN:
            share = f"{100 * row[key] / row['finish_ns']:.1f} % of its time" if row["finish_ns"] else ""
            cards.append(_card(f"{name}, slowest rank", fmt_time(row[key]), share, key, row[key]))
    html = f'<div class="cards">{"".join(cards)}</div>'
    measured = stats.get("measured")
    if measured:
        gap = measured["gap_ns"]
        verdict = f"the model leaves out {fmt_time(gap)}" if gap >= 0 else f"the model is {fmt_time(-gap)} longer"
        html += (f'<p class="note">The log measured {escape(measured["what"])}: {fmt_time(measured["ns"])} '
                 f'({escape(measured["source"])}); {verdict}.</p>')
    network = stats.get("network")
    if network:
        d = network["default"]
        html += (f'<p class="note">Network ({escape(network["source"])}): default {d["bandwidth_gbps"]:g} GB/s, '
                 f'{d["latency_ns"]:g} ns per step, {d["chunks"]} chunk(s), {escape(d["algorithm"])}; '
                 f'tp {network["tp"]["bandwidth_gbps"]:g} GB/s.</p>')
    return html


def _card(title: str, value: str, note: str, key: str, raw: int) -> str:
    return (f'<div class="card" data-metric="{key}" data-value="{raw}"><span>{escape(title)}</span>'
            f"<b>{escape(value)}</b><span>{escape(note)}</span></div>")


def ranks_section(run: dict[str, Any], scale: float) -> str:
    rows = []
    for bar in run["bars"]:
        values = bar["values"]
        title = (f"{bar['label']}: finish {fmt_time(values['finish_ns'])}; " +
                 ", ".join(f"{name} {fmt_time(values[k])}" for k, name in BREAKDOWN))
        rows.append({"label": bar["label"], "values": values, "title": title,
                     "data": {"ranks": bar["ranks"], "rank": bar["rank"], "stands-for": bar["stands_for"],
                              **{k.replace("_", "-"): values[k] for k in ("finish_ns", *dict(BREAKDOWN))}}})
    world = run["stats"]["world"]
    note = ("one bar per rank" if all(b["count"] == 1 and b["stands_for"] == 1 for b in run["bars"])
            else f"{world} ranks grouped by pipeline stage; ranks with the same numbers share a bar, and a stage "
                 "whose ranks differ more shows its slowest, median and fastest rank")
    return (legend([(k, n) for k, n in BREAKDOWN]) + f'<p class="note">{escape(note)}; a bar ends where its rank '
            "finishes.</p>" + bar_chart(rows, BREAKDOWN, scale, fmt_time, "ranks"))


def timeline_section(run: dict[str, Any], scale: float) -> str:
    timeline = run["timeline"]
    kinds = sorted({p[2] for lane in timeline["lanes"] for p in lane["comm"]})
    return (legend([("compute", "compute")] + [(k, f"{k} communication") for k in kinds]) +
            f'<p class="note">{escape(timeline["how"])} (ranks {escape(timeline["ranks"])}), the ranks the Chrome '
            "output draws by default; in each lane compute above, communication below.</p>" +
            timeline_chart(timeline, int(scale), fmt_time))


def traffic_section(run: dict[str, Any], scale: dict[str, int]) -> str:
    comm = run["stats"]["comm"]
    if not comm:
        return '<p class="note">No communication.</p>'
    rows_bytes = [{"label": kind, "values": {kind: row["bytes"]}, "data": {"kind": kind, "bytes": row["bytes"]},
                   "title": f"{kind}: {row['ops']} operations, {fmt_bytes(row['bytes'])}"} for kind, row in comm.items()]
    rows_busy = [{"label": kind, "values": {kind: row["busy_ns"]}, "data": {"kind": kind, "busy-ns": row["busy_ns"]},
                  "title": f"{kind}: busy {fmt_time(row['busy_ns'])} summed over ranks"} for kind, row in comm.items()]
    segments = [(kind, kind) for kind in comm]
    return ('<h3>bytes sent (all ranks)</h3>' +
            bar_chart(rows_bytes, segments, scale["bytes"], fmt_bytes, "traffic-bytes", binary=True) +
            '<h3>busy time (summed over ranks)</h3>' +
            bar_chart(rows_busy, segments, scale["busy_ns"], fmt_time, "traffic-busy"))


def critical_section(run: dict[str, Any], scale: float) -> str:
    path = run["stats"]["critical_path"] or {}
    if not path.get("top"):
        return ('<p class="note">No critical path: it is found by the scheduler, and this timeline is '
                f'{escape(run["timing"])}.</p>')
    by_cat = ", ".join(f"{k} {fmt_time(v)}" for k, v in path["by_category"].items())
    rows = [{"label": item["name"] + (f" ×{item['count']}" if item["count"] > 1 else ""),
             "values": {item["category"]: item["ns"]}, "data": {"category": item["category"], "ns": item["ns"]},
             "title": f"{item['name']} ({item['category']}): {fmt_time(item['ns'])} over {item['count']} node(s)"}
            for item in path["top"]]
    segments = [(k, k) for k in dict.fromkeys(item["category"] for item in path["top"])]
    return (f'<p class="note">{fmt_time(path["length_ns"])} over {path["nodes"]} nodes: {escape(by_cat)}. '
            "Largest items (time each adds to the iteration):</p>" + legend(segments) +
            bar_chart(rows, segments, scale, fmt_time, "critical-path"))


def collectives_section(run: dict[str, Any], scale: float) -> str:
    items = run["collectives"]
    if not items:
        return '<p class="note">No collectives.</p>'
    rows = [{"label": f"{c['name']} ({fmt_bytes(c['bytes'])})", "values": {c["kind"]: c["ns"]},
             "data": {"kind": c["kind"], "ns": c["ns"], "bytes": c["bytes"], "instances": c["instances"]},
             "title": (f"{c['op']} in {c['kind']}, {fmt_bytes(c['bytes'])}: {fmt_time(c['ns'])} from the last member's "
                       f"start; first member waited {fmt_time(c['skew_ns'])}; {c['instances']} such instance(s), "
                       f"e.g. {c['example']}")} for c in items]
    segments = [(k, k) for k in dict.fromkeys(c["kind"] for c in items)]
    table = "".join(f"<tr><td>{escape(c['name'])}</td><td>{escape(c['kind'])}</td><td>{fmt_bytes(c['bytes'])}</td>"
                    f"<td>{fmt_time(c['ns'])}</td><td>{fmt_time(c['skew_ns'])}</td><td>{c['instances']}</td>"
                    f"<td>{escape(c['example'])}</td></tr>" for c in items)
    return (legend(segments) + bar_chart(rows, segments, scale, fmt_time, "collectives") +
            "<table><tr><th>collective</th><th>group</th><th>size</th><th>time</th><th>first member waited</th>"
            f"<th>instances</th><th>e.g.</th></tr>{table}</table>")


def findings_section(run: dict[str, Any], scale: float) -> str:
    findings = run["findings"]
    if findings is None:
        return '<p class="note">The validator was not run.</p>'
    c = findings["counts"]
    head = (f'<p data-errors="{c["error"]}" data-warnings="{c["warning"]}">{c["error"]} error(s), '
            f'{c["warning"]} warning(s), {c["info"]} note(s) from {len(findings["ran"])} checks.</p>')
    lists = []
    for check in findings["checks"]:
        items = "".join(f'<li class="{f["severity"]}">{escape(f["text"])}</li>' for f in check["shown"])
        more = check["count"] - len(check["shown"])
        tail = f'<li class="note">... {more} more (et-convert validate lists them)</li>' if more > 0 else ""
        lists.append(f"<h3>{escape(check['check'])}: {check['count']}</h3><ul class=\"findings\">{items}{tail}</ul>")
    return head + "".join(lists)


def assumptions_section(run: dict[str, Any], scale: float) -> str:
    if not run["assumptions"]:
        return '<p class="note">The reader made no assumptions.</p>'
    return "<ul>" + "".join(f"<li>{escape(a)}</li>" for a in run["assumptions"]) + "</ul>"


SECTIONS: list[tuple[str, str, Callable[[dict[str, Any], Any], str]]] = [
    ("headline", "Headline", headline),
    ("ranks", "Where each rank's time goes", ranks_section),
    ("timeline", "Timeline overview", timeline_section),
    ("traffic", "Traffic by group kind", traffic_section),
    ("critical", "Critical path", critical_section),
    ("collectives", "Slowest collective instances", collectives_section),
    ("findings", "Validator findings", findings_section),
    ("assumptions", "Assumptions", assumptions_section),
]


# ---------------------------------------------------------------- the sweep and the comparison


def sweep_section(sweep: dict[str, Any]) -> str:
    keys = sweep["keys"]
    rows = []
    for point in sweep["sweep"]:
        # one key: "tp.bandwidth_gbps=100"; a grid: the values in key order, the keys named above the chart
        label = f"{keys[0]}={point[keys[0]]}" if len(keys) == 1 else ", ".join(str(point[k]) for k in keys)
        rows.append({"label": label, "values": {k: point[k] for k, _ in BREAKDOWN},
                     "data": {"point": label, "iteration-time-ns": point["iteration_time_ns"],
                              "slowest-rank": point["slowest_rank"]},
                     "title": f"{label}: iteration {fmt_time(point['iteration_time_ns'])} (slowest rank {point['slowest_rank']})"})
    scale = max(p["iteration_time_ns"] for p in sweep["sweep"])
    named = "" if len(keys) == 1 else f" Bars are labelled {', '.join(keys)}."
    for timing in ("measured", "modelled"):
        if f"{timing}_iteration_time_ns" in sweep:
            named += f" The log's {timing} iteration: {fmt_time(sweep[f'{timing}_iteration_time_ns'])}."
    return (f'<p class="note">{len(rows)} network settings, {escape(sweep["basis"])}; each bar is the iteration, split '
            f"as its slowest rank spends it.{escape(named)}</p>" + legend(BREAKDOWN) +
            bar_chart(rows, BREAKDOWN, scale, fmt_time, "sweep"))


def differences(a: dict[str, Any], b: dict[str, Any]) -> str:
    """A table of the numbers that matter, B against A; longer times red, shorter green."""
    rows = []
    sa, sb = a["stats"], b["stats"]
    rows.append(("iteration time", sa["iteration_time_ns"], sb["iteration_time_ns"], "time"))
    for key, name in BREAKDOWN:
        rows.append((f"{name}, all ranks", _total(sa, key), _total(sb, key), "time"))
    for kind in sorted(set(sa["comm"]) | set(sb["comm"])):
        ra, rb = sa["comm"].get(kind, {}), sb["comm"].get(kind, {})
        rows.append((f"{kind} busy time", ra.get("busy_ns", 0), rb.get("busy_ns", 0), "time"))
        rows.append((f"{kind} bytes", ra.get("bytes", 0), rb.get("bytes", 0), "bytes"))
    ca = (sa["critical_path"] or {}).get("by_category", {})
    cb = (sb["critical_path"] or {}).get("by_category", {})
    for cat in sorted(set(ca) | set(cb)):
        rows.append((f"critical path: {cat}", ca.get(cat, 0), cb.get(cat, 0), "time"))
    body = "".join(_difference_row(*row) for row in rows)
    return (f'<p class="note">A: {escape(a["label"])} ({escape(a["basis"])}). B: {escape(b["label"])} '
            f'({escape(b["basis"])}). Red: B takes longer; green: B is shorter; yellow: different bytes.</p>'
            f"<table><tr><th></th><th>A</th><th>B</th><th>B − A</th><th>change</th></tr>{body}</table>")


def _total(stats: dict[str, Any], key: str) -> int:
    return sum(row[key] for row in stats["ranks"].values())


def _difference_row(name: str, a: int, b: int, unit: str) -> str:
    fmt = fmt_time if unit == "time" else fmt_bytes
    delta = b - a
    relative = delta / a if a else (0.0 if b == 0 else float("inf"))
    mark = ""
    if abs(relative) > CHANGE:
        mark = "changed" if unit == "bytes" else ("worse" if delta > 0 else "better")
    change = "—" if not a else f"{100 * relative:+.{2 if abs(relative) < 0.01 else 1}f} %"
    sign = "+" if delta > 0 else ("−" if delta < 0 else "")
    return (f'<tr class="{mark}" data-metric="{escape(name)}" data-a="{a}" data-b="{b}"><td>{escape(name)}</td>'
            f"<td>{fmt(a)}</td><td>{fmt(b)}</td><td>{sign}{fmt(abs(delta))}</td><td>{change}</td></tr>")
