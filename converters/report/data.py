"""The numbers one run's page shows, gathered from the model, its timeline and the validator.

Everything here is plain data (dicts, lists, ints in ns and bytes), so the page renders it
without looking at the model again and tests can compare it with `stats --json`.

- `bars`: per-rank compute / exposed communication / idle. Up to `PER_RANK_LIMIT` ranks one
  row each; above, ranks are grouped by pipeline stage and, inside a stage, by identical
  numbers (a role: ranks that do the same work the same way). A stage with more than
  `ROLES_PER_STAGE` different rows shows its slowest, median and fastest rank instead, each
  saying how many ranks it stands for.
- `timeline`: the ranks the Chrome output draws by default (`default_subset`), each as a
  compute strip and a communication strip, cut into `TIMELINE_COLUMNS` columns so a lane
  has at most that many pieces whatever the node count.
- `collectives`: the slowest collective instances (the k-th collective of a group on every
  member is one instance), instances with the same name, group kind, size and time merged.
"""

from __future__ import annotations

from typing import Any

from ..model import BUSY_KINDS, ExecutionTrace, NodeKind
from ..ranks import compact_ranks
from ..stats import stats_of
from ..sweep import slowest_of
from ..timeline import Timeline

PER_RANK_LIMIT = 64
ROLES_PER_STAGE = 8
TIMELINE_COLUMNS = 800  # about a pixel each on a wide screen; bounds a lane's size
SLOWEST_COLLECTIVES = 10
FINDINGS_PER_CHECK = 5
BREAKDOWN = ("compute_ns", "exposed_comm_ns", "idle_ns")

TIMING_WORDS = {
    "scheduled": "scheduled by et-convert's network model",
    "measured": "measured (the log's own times)",
    "modelled": "modelled from the log's per-layer times",
}


def run_data(trace: ExecutionTrace, timeline: Timeline, report=None, label: str = "", basis: str = "") -> dict[str, Any]:
    """Everything one run's page shows. `report` is the validator's `Report` (None: not run)."""
    stats = stats_of(trace, timeline)
    return {
        "label": label or source_label(trace),
        "format": trace.source.format,
        "timing": timeline.kind,
        "basis": basis or TIMING_WORDS.get(timeline.kind, timeline.kind),
        "parallel": trace.parallel.as_dict(),
        "stats": stats,
        "slowest": slowest_of(stats["ranks"]),
        "stages": {str(r.rank): r.stage for r in trace.ranks.values() if r.stage is not None},
        "bars": rank_rows(trace, stats["ranks"]),
        "timeline": timeline_lanes(trace, timeline),
        "collectives": slowest_collectives(trace, timeline),
        "findings": findings_of(report),
        "assumptions": list(trace.assumptions),
    }


def source_label(trace: ExecutionTrace) -> str:
    """`w.txt`, or `workload.0.et and 3 more` for a set of files."""
    files = trace.source.files
    if len(files) <= 1:
        return files[0] if files else trace.source.format
    return f"{files[0]} and {len(files) - 1} more"


# ---------------------------------------------------------------- per-rank bars


def rank_rows(trace: ExecutionTrace, ranks: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """Rows of the per-rank chart: {label, ranks, rank (whose numbers are shown), values, stands_for}."""
    if len(ranks) <= PER_RANK_LIMIT:
        return [_row(_rank_label(trace, int(r)), [int(r)], int(r), values) for r, values in ranks.items()]
    rows: list[dict[str, Any]] = []
    for stage, members in _by_stage(trace, ranks).items():
        where = "all ranks" if stage is None else f"stage {stage}"
        roles: dict[tuple[int, ...], list[int]] = {}
        for r in members:
            roles.setdefault(tuple(ranks[str(r)][f] for f in ("finish_ns", *BREAKDOWN)), []).append(r)
        if len(roles) <= ROLES_PER_STAGE:
            for same in roles.values():
                rows.append(_row(f"{where} · {_ranks_words(same)}", same, same[0], ranks[str(same[0])]))
            continue
        by_finish = sorted(members, key=lambda r: (ranks[str(r)]["finish_ns"], r))
        for what, r in (("slowest", by_finish[-1]), ("median", by_finish[len(by_finish) // 2]), ("fastest", by_finish[0])):
            rows.append(_row(f"{where} · {what} of {len(members)}: rank {r}", [r], r, ranks[str(r)],
                             stands_for=len(members)))
    return rows


def _row(label: str, members: list[int], shown: int, values: dict[str, int], stands_for: int = 0) -> dict[str, Any]:
    return {"label": label, "ranks": compact_ranks(members), "rank": shown, "count": len(members),
            "stands_for": stands_for or len(members),
            "values": {f: values[f] for f in ("finish_ns", *BREAKDOWN)}}


def _by_stage(trace: ExecutionTrace, ranks: dict[str, dict[str, int]]) -> dict[int | None, list[int]]:
    stages: dict[int | None, list[int]] = {}
    for key in sorted(ranks, key=int):
        rank = trace.ranks.get(int(key))
        stages.setdefault(rank.stage if rank is not None else None, []).append(int(key))
    return dict(sorted(stages.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))


def _rank_label(trace: ExecutionTrace, r: int) -> str:
    rank = trace.ranks.get(r)
    return rank.label if rank is not None else f"rank {r}"


def _ranks_words(members: list[int]) -> str:
    return f"rank {members[0]}" if len(members) == 1 else f"ranks {compact_ranks(members)}"


# ---------------------------------------------------------------- the timeline overview


def timeline_lanes(trace: ExecutionTrace, timeline: Timeline) -> dict[str, Any]:
    """Lanes of the ranks Chrome draws by default; pieces as (first column, last column + 1, category)."""
    from ..writers.layout_chrome import DEFAULT_RANK_LIMIT, default_subset

    if len(trace.ranks) <= DEFAULT_RANK_LIMIT:
        drawn, how = sorted(trace.ranks), "every rank"
    else:
        drawn, how = default_subset(trace)
    origin = min((min(s) for s in timeline.starts.values() if s), default=0)
    span = max(timeline.end_ns - origin, 1)
    lanes = []
    for r in drawn:
        rank = trace.ranks[r]
        compute: dict[str, list[tuple[int, int]]] = {}
        comm: dict[str, list[tuple[int, int]]] = {}
        for node, start, end in zip(rank.nodes, timeline.starts[r], timeline.ends[r]):
            if end <= start:
                continue
            if node.kind in BUSY_KINDS:
                if node.parent is None:  # a step's sub-operations are drawn on the comm strip
                    compute.setdefault("compute", []).append((start, end))
            elif node.is_comm:
                kind = trace.group_kind(rank.group_of(node)) if node.kind == NodeKind.COLLECTIVE else "pp"
                if node.kind == NodeKind.RECV and node.args:  # a logged wait for the sender is idle, as in stats
                    start = min(end, start + node.args.get("wait_ns", 0))
                comm.setdefault(kind or "other", []).append((start, end))
        lanes.append({"rank": r, "label": rank.label, "end_ns": max(timeline.ends[r], default=origin) - origin,
                      "compute": _columns(compute, origin, span), "comm": _columns(comm, origin, span)})
    return {"ranks": compact_ranks(drawn), "how": how, "span_ns": span, "columns": TIMELINE_COLUMNS, "lanes": lanes}


def _columns(by_category: dict[str, list[tuple[int, int]]], origin: int, span: int) -> list[tuple[int, int, str]]:
    """Intervals as column ranges, pieces of one category that touch in columns merged."""
    pieces: list[tuple[int, int, str]] = []
    for category in sorted(by_category):
        merged: list[list[int]] = []
        for start, end in sorted(by_category[category]):
            a = (start - origin) * TIMELINE_COLUMNS // span
            b = max(a + 1, -(-(end - origin) * TIMELINE_COLUMNS // span))
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        pieces.extend((a, b, category) for a, b in merged)
    return pieces


# ---------------------------------------------------------------- collective instances


def slowest_collectives(trace: ExecutionTrace, timeline: Timeline, limit: int = SLOWEST_COLLECTIVES) -> list[dict[str, Any]]:
    """The longest collective instances: from the last member's start to the last member's end.

    `skew_ns` is how long the first member waited for the last (0 in a scheduled timeline, where
    an instance starts for all members together).
    """
    instances: dict[tuple[int | None, int], list] = {}  # (group id, k) -> [first start, last start, end, node]
    for members in _alike(trace, timeline):
        first = members[0]
        by_group: dict[int | None, list[tuple[int, int, Any]]] = {}  # the k-th item is seq k of that group
        for node, start, end in zip(first.nodes, timeline.starts[first.rank], timeline.ends[first.rank]):
            if node.kind == NodeKind.COLLECTIVE:
                by_group.setdefault(node.group, []).append((start, end, node))
        for shared_gid, items in by_group.items():
            probe = items[0][2]
            # each member's own group for this list's group id
            for gid in sorted({rank.group_of(probe) for rank in members}, key=lambda g: (g is None, g or 0)):
                for k, (start, end, node) in enumerate(items):
                    entry = instances.get((gid, k))
                    if entry is None:
                        instances[(gid, k)] = [start, start, end, node]
                    else:
                        entry[0] = min(entry[0], start)
                        entry[1] = max(entry[1], start)
                        entry[2] = max(entry[2], end)
    merged: dict[tuple, dict[str, Any]] = {}
    for (gid, k), (first_start, last_start, end, node) in instances.items():
        duration = end - last_start
        if duration <= 0:
            continue
        kind = trace.group_kind(gid) or "group"
        op = node.coll.name.lower() if node.coll is not None else "collective"
        key = (-duration, node.name, kind, op, node.size, last_start - first_start)
        item = merged.get(key)
        if item is None:
            group = trace.groups.get(gid)
            merged[key] = {"name": node.name or op, "op": op, "kind": kind, "bytes": node.size, "ns": duration,
                           "skew_ns": last_start - first_start, "instances": 1,
                           "example": f"{group.label if group else 'all ranks'} seq {k}"}
        else:
            item["instances"] += 1
    return [merged[key] for key in sorted(merged)[:limit]]


def _alike(trace: ExecutionTrace, timeline: Timeline) -> list[list]:
    """Ranks that run one node list with one list of times (a scheduled stage's ranks): their
    collectives are read once. Members differ only in which groups they use."""
    classes: dict[tuple[int, int], list] = {}
    for rank in trace.sorted_ranks():
        classes.setdefault((id(rank.nodes), id(timeline.starts[rank.rank])), []).append(rank)
    return list(classes.values())


# ---------------------------------------------------------------- validator findings


def findings_of(report) -> dict[str, Any] | None:
    """Counts by severity and the first findings of each check, as text lines."""
    if report is None:
        return None
    checks = []
    for check, found in report.by_check().items():
        if found:
            checks.append({"check": check, "count": len(found),
                           "shown": [{"severity": f.severity, "code": f.code, "text": f.text()}
                                     for f in found[:FINDINGS_PER_CHECK]]})
    return {"counts": report.counts(), "checks": checks, "ran": list(report.checks)}
