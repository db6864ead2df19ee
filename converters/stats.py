"""`et-convert stats`: where an iteration's time goes, without writing a trace.

Text: the iteration time, a per-rank table (ranks with the same numbers share one row),
traffic per group kind and the critical path's top contributors. `--json`: one object with
`iteration_time_ns`, `timing`, `ranks` {"<rank>": {finish_ns, compute_ns, exposed_comm_ns,
idle_ns}}, `comm`, `critical_path`, when scheduled `network`, when measured `groups` (per group:
collective instances, bytes, summed span) and `slowest_collectives` (span, last rank, wait), and when modelled from a log
that also measured the iteration `measured` {ns, what, source, gap_ns}: the model's iteration
is only as good as that gap says, so the two are printed side by side.
"""

from __future__ import annotations

import heapq
import sys
from dataclasses import dataclass
from itertools import compress, count, repeat
from operator import eq, itemgetter, sub
from pathlib import Path
from typing import Any

import orjson

from .diagnostics import Diagnostics
from .options import Options

_FIELDS = ("finish_ns", "compute_ns", "exposed_comm_ns", "idle_ns")


def run(inputs: list[Path], from_: str, options: Options, diagnostics: Diagnostics, as_json: bool = False) -> int:
    from .gc_pause import paused_gc

    # Everything made here (the trace, its schedule) stays alive until the numbers are printed
    # and forms no garbage worth collecting: with the cyclic GC on, it would rescan the nodes
    # again and again (0.4 s of CPU on benchmark 7's Chakra set, 2.0 s; same peak RSS).
    with paused_gc():
        stats = stats_for(inputs, from_, options, diagnostics)
        if as_json:
            sys.stdout.write(orjson.dumps(stats, option=orjson.OPT_INDENT_2).decode() + "\n")
        else:
            sys.stdout.write(render(stats))
    return 0


def stats_for(inputs, from_: str, options: Options, diagnostics: Diagnostics) -> dict[str, Any]:
    """The stats object of `inputs` (what `stats --json` prints): a Chakra set declared measured
    from its node columns (measured_set_stats), any other input read, timed (its own times, or
    a schedule) and summed (stats_of)."""
    from .api import read
    from .timeline import timeline_for

    stats = measured_set_stats(inputs, from_, options, diagnostics)
    if stats is None:
        trace = read(inputs, from_, options, diagnostics)
        stats = stats_of(trace, timeline_for(trace, options))
    return stats


def stats_of(trace, timeline) -> dict[str, Any]:
    """The stats object; computed here for measured timelines, taken from the scheduler's summary otherwise."""
    summary = timeline.summary
    if not summary:
        summary = measured_summary(trace, timeline)
    out: dict[str, Any] = {
        "iteration_time_ns": summary["iteration_time_ns"],
        "timing": timeline.kind,
        "world": len(trace.ranks),
        "ranks": summary["ranks"],
        "comm": summary.get("comm", {}),
        "critical_path": summary.get("critical_path", {}),
    }
    if timeline.kind == "scheduled":
        out["network"] = timeline.parameters
    reference = measured_reference(trace, timeline)
    if reference is not None:
        out["measured"] = reference
    if timeline.kind == "measured" and not trace.metadata.get("scaling_mode"):
        instances = _collective_instances(trace, timeline)  # (one pass over every node for both)
        out["groups"] = traffic_by_group(trace, timeline, instances)
        out["slowest_collectives"] = slowest_collectives(trace, timeline, instances=instances)
    return out


def measured_set_stats(inputs: list[Path], from_: str, options: Options, diagnostics: Diagnostics) -> dict | None:
    """stats_of a Chakra set every rank of which declares measured times, from its nodes as
    columns (readers/chakra.load_measured_columns) and their numbers in C (_stats.c), without
    a Node per message: a measured run's set has a different graph on every rank. None for
    any other input, or where either step declines (`run` then reads Nodes, with the same
    numbers: tests/test_stats_columns.py)."""
    if _numbers is None or from_ not in ("auto", "chakra"):
        return None
    from .api import _as_paths, _note_reading
    from .diagnostics import InputError, UsageError
    from .formats import detect
    from .options import check
    from .readers.chakra import load_measured_columns

    try:
        check(options)
        paths = _as_paths(inputs)
        if detect(paths) != "chakra":
            return None
    except (InputError, UsageError):
        return None  # (said by `read`)
    loaded = load_measured_columns(paths, options)
    stats = None if loaded is None else columns_stats(*loaded)
    if stats is not None:  # what api.read says of what it read
        _note_reading(paths, "chakra", diagnostics)
        diagnostics.list_assumptions(loaded[0].assumptions)
    return stats


try:  # the numbers over columns in C; without it `stats` reads Nodes
    from ._stats import numbers as _numbers
except ImportError:
    _numbers = None

_OTHER, _BUSY, _TALK, _RECV = range(4)  # what a template's nodes are to the breakdown (as in _stats.c)


def columns_stats(trace, found, limit: int = 5) -> dict[str, Any] | None:
    """stats_of(trace, its measured timeline) of a measured set read as columns (`found`:
    model.MeasuredColumns), its numbers from _stats.numbers; None when a value is beyond 64 bits."""
    tables = _template_tables(trace, found.facts)
    if tables is None:
        return None
    row_of, group_of = tables[-2:]
    ranks = list(found.ranks)  # (ascending)
    numbers = _numbers([(c.start_ns, c.duration_ns, c.parent, c.template) for c in found.ranks.values()],
                       *tables[:5], len(row_of), len(group_of), limit)
    if numbers is None:
        return None
    per_rank, traffic, per_group = numbers
    comm = {label: dict(zip(("ops", "bytes", "busy_ns"), traffic[k])) for label, k in row_of.items() if traffic[k][0]}
    out: dict[str, Any] = {
        "iteration_time_ns": max((finish for finish, _, _ in per_rank), default=0),
        "timing": "measured",
        "world": len(trace.ranks),
        "ranks": {str(r): {"finish_ns": finish, "compute_ns": compute, "exposed_comm_ns": exposed,
                           "idle_ns": max(0, finish - compute - exposed)}
                  for r, (finish, compute, exposed) in zip(ranks, per_rank)},
        "comm": dict(sorted(comm.items())),
        "critical_path": {},
    }
    gids = list(group_of)
    labels = {gids[g]: trace.groups[gids[g]].label if gids[g] in trace.groups else "world" for _, g, *_ in per_group}
    out["groups"] = by_group = {}  # traffic_by_group
    for _, g, instances, size, span, _ in sorted(per_group, key=lambda met: gids[met[1]] or 0):
        row = by_group.setdefault(labels[gids[g]], {"instances": 0, "bytes": 0, "span_ns": 0})
        row["instances"] += instances
        row["bytes"] += size
        row["span_ns"] += span
    candidates = [(negative, labels[gids[g]], k, r, i, wait, size)  # slowest_collectives'
                  for _, g, _, _, _, best in per_group for negative, k, r, i, wait, size in best]
    slowest = heapq.nsmallest(limit, candidates, key=itemgetter(0, 1, 2))
    names = _names_of(trace, found, ranks, [(r, i) for _, _, _, r, i, _, _ in slowest])
    out["slowest_collectives"] = [
        {"group": label, "seq": k, "name": names[r, i], "bytes": size, "span_ns": -negative,
         "last_rank": ranks[r], "wait_ns": wait, "source": ""}  # (a Chakra file's nodes name no source line)
        for negative, label, k, r, i, wait, size in slowest]
    return out


def _template_tables(trace, facts: list[tuple]) -> tuple | None:
    """_stats.numbers' per-template tables (codes, sizes, traffic rows, groups, waits), with the
    traffic rows' labels and the collectives' group ids, each -> its number; None when a size
    or a wait is beyond 64 bits."""
    from array import array

    from ._proto.wire import INT_RANGES  # (imported with the reader of the columns)
    from .model import BUSY_KINDS, NodeKind

    low, high = INT_RANGES["int64"]
    int64 = range(low, high + 1)
    codes, sizes, rows, groups, waits = bytearray(), array("q"), array("q"), array("q"), array("q")
    row_of: dict[str, int] = {}  # traffic by group kind, as measured_summary names it
    group_of: dict[Any, int] = {}  # group id (None: all ranks) of the collectives
    for kind, size, gid, wait in facts:
        if size not in int64 or wait not in int64:
            return None
        if kind in BUSY_KINDS:
            code = _BUSY
        else:
            code = _RECV if kind == NodeKind.RECV else _TALK if kind in (NodeKind.SEND, NodeKind.COLLECTIVE) else _OTHER
        label = traffic_label(trace, kind == NodeKind.COLLECTIVE, gid)
        codes.append(code)
        sizes.append(size)
        rows.append(row_of.setdefault(label, len(row_of)) if code == _TALK else -1)
        groups.append(group_of.setdefault(gid, len(group_of)) if kind == NodeKind.COLLECTIVE else -1)
        waits.append(wait)
    return bytes(codes), sizes, rows, groups, waits, row_of, group_of


def _names_of(trace, found, ranks: list[int], nodes: list[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """The names of these nodes ((position in `ranks`, node index)) of a set read as columns,
    read again from their files (MeasuredColumns keeps where each message is, not its name)."""
    from ._proto.wire import node_head, short_frame
    from .readers.text import gunzipped, read_bytes

    names = {}
    for r in dict.fromkeys(r for r, _ in nodes):
        path = Path(trace.ranks[ranks[r]].source)
        data = gunzipped(read_bytes(path), path)
        for i in (i for q, i in nodes if q == r):
            start, end = short_frame(data, found.ranks[ranks[r]].offset[i])
            names[r, i] = node_head(data[start:end], {})[1]
    return names


@dataclass(slots=True)
class GroupInstances:
    """The collective instances of one group: its k-th instance is the k-th collective in that
    group of each member (`members`: (rank, its collectives in the group, in node order), in
    ascending rank order). Columns by k: how many members have it, the bytes of the lowest
    rank's, the earliest start, the latest start, who started last (the lowest rank on a tie;
    an index into `members`), the latest end."""

    members: list[tuple[int, list]]
    counts: list[int]
    sizes: list[int]
    first_starts: list[int]
    last_starts: list[int]
    last_members: list[int]
    last_ends: list[int]


def _collective_instances(trace, timeline) -> dict[Any, GroupInstances]:
    """Group id -> its collective instances (GroupInstances). A log's collectives are nearly
    every node, so each rank's are sorted into their groups by comprehensions and each group's
    instances are summed column by column over its members."""
    from .model import NodeKind

    members_of: dict[Any, list] = {}  # group id -> [(rank, nodes, starts, ends)] in ascending ranks
    collective = NodeKind.COLLECTIVE
    for rank in trace.sorted_ranks():
        st, en, nodes = timeline.starts[rank.rank], timeline.ends[rank.rank], rank.nodes
        where = [i for i, node in enumerate(nodes) if node.kind == collective]
        groups = [nodes[i].group for i in where]
        if rank.group_map:  # (Rank.group_of, for the whole list)
            groups = list(map(rank.group_map.get, groups, groups))
        for gid in dict.fromkeys(groups):
            mine = list(compress(where, map(eq, groups, repeat(gid))))
            members_of.setdefault(gid, []).append((rank.rank, list(map(nodes.__getitem__, mine)),
                                                   list(map(st.__getitem__, mine)), list(map(en.__getitem__, mine))))
    return {gid: _instances_of(members) for gid, members in members_of.items()}


def _instances_of(members: list) -> GroupInstances:
    """A group's GroupInstances from its members' (rank, nodes, starts, ends), ascending ranks."""
    lengths = {len(nodes) for _, nodes, _, _ in members}
    kept = [(rank, nodes) for rank, nodes, _, _ in members]
    if len(lengths) == 1:  # every member has every instance: whole columns, folded member by member
        _, nodes, first_starts, last_ends = members[0]
        last_starts, last_members = first_starts, [0] * len(nodes)
        for m, (_, _, starts, ends) in enumerate(members[1:], 1):
            first_starts = [a if a <= b else b for a, b in zip(first_starts, starts)]
            last_members = [w if a >= b else m for w, a, b in zip(last_members, last_starts, starts)]
            last_starts = [a if a >= b else b for a, b in zip(last_starts, starts)]
            last_ends = [a if a >= b else b for a, b in zip(last_ends, ends)]
        return GroupInstances(kept, [len(members)] * len(nodes), [node.size for node in nodes],
                              first_starts, last_starts, last_members, last_ends)
    found = GroupInstances(kept, [], [], [], [], [], [])
    for k in range(max(lengths)):
        present = [(m, nodes[k], starts[k], ends[k])
                   for m, (_, nodes, starts, ends) in enumerate(members) if len(nodes) > k]
        first_start = min(start for _, _, start, _ in present)
        last = max(present, key=lambda member: (member[2], -member[0]))  # the lowest rank on a tie
        found.counts.append(len(present))
        found.sizes.append(present[0][1].size)
        found.first_starts.append(first_start)
        found.last_starts.append(last[2])
        found.last_members.append(last[0])
        found.last_ends.append(max(end for _, _, _, end in present))
    return found


def _labels(trace, instances: dict) -> dict:
    """Each group id of `instances`: its label ("world" for all ranks, or a group not defined)."""
    return {gid: trace.groups[gid].label if gid in trace.groups else "world" for gid in instances}


def traffic_by_group(trace, timeline, instances: dict | None = None) -> dict[str, dict[str, int]]:
    """Per group (label): collective instances, bytes per member and the instances' total span.
    `instances`: `_collective_instances`, when already found."""
    if instances is None:
        instances = _collective_instances(trace, timeline)
    labels = _labels(trace, instances)
    out: dict[str, dict[str, int]] = {}
    for gid in sorted(instances, key=lambda gid: gid or 0):
        group = instances[gid]
        row = out.setdefault(labels[gid], {"instances": 0, "bytes": 0, "span_ns": 0})
        row["instances"] += len(group.counts)
        row["bytes"] += sum(group.sizes)
        row["span_ns"] += sum(group.last_ends) - sum(group.first_starts)
    return out


def slowest_collectives(trace, timeline, limit: int = 5, instances: dict | None = None) -> list[dict[str, Any]]:
    """The collective instances whose members spent longest from the first start to the last end,
    with the rank that started last (the one everyone waited for) and how long the first waited."""
    if instances is None:
        instances = _collective_instances(trace, timeline)
    labels = _labels(trace, instances)
    # (-span, group, seq, group id) of every instance of two members or more, each group's slowest
    candidates = []
    for gid, group in instances.items():
        shared = [members >= 2 for members in group.counts]
        negative_spans = map(sub, group.first_starts, group.last_ends)
        candidates += heapq.nsmallest(limit, compress(zip(negative_spans, repeat(labels[gid]), count(), repeat(gid)),
                                                      shared))
    rows = []
    for negative_span, label, k, gid in heapq.nsmallest(limit, candidates, key=itemgetter(0, 1, 2)):
        group = instances[gid]
        rank, nodes = group.members[group.last_members[k]]
        last = nodes[k]
        rows.append({
            "group": label, "seq": k, "name": last.name, "bytes": last.size, "span_ns": -negative_span,
            "last_rank": rank, "wait_ns": group.last_starts[k] - group.first_starts[k], "source": last.source or "",
        })
    return rows


def measured_reference(trace, timeline) -> dict[str, Any] | None:
    """What the input measured for the iteration a modelled timeline predicts, and the gap.

    A builder that models times (timing "modelled") sets `trace.metadata["measured_iteration"]`
    = {"ns", "what", "source"} when its input also timed the whole iteration (OptimusPrime's
    ms/batch). `gap_ns` is measured minus modelled: what the model leaves out.
    """
    measured = trace.metadata.get("measured_iteration")
    if timeline.kind != "modelled" or not measured:
        return None
    return {**measured, "gap_ns": measured["ns"] - timeline.end_ns}


def traffic_label(trace, collective: bool, gid) -> str:
    """The row of the traffic by group kind a sending node counts in: a collective's group's kind
    (`gid`), "pp" for a send, or "default" when that is not known."""
    return (trace.group_kind(gid) if collective else "pp") or "default"


def measured_summary(trace, timeline) -> dict[str, Any]:
    """Per-rank breakdown of measured or modelled times (logs): same definitions as the scheduler's."""
    from .scheduler.summary import _merge, _measure_outside
    from .model import BUSY_KINDS, NodeKind

    ranks: dict[str, dict[str, int]] = {}
    comm: dict[str, dict[str, int]] = {}
    for rank in trace.sorted_ranks():
        st, en = timeline.starts[rank.rank], timeline.ends[rank.rank]
        busy, talk = [], []
        for i, node in enumerate(rank.nodes):
            if en[i] <= st[i] or node.parent is not None:
                continue  # sub-operations run inside their parent step
            if node.kind in BUSY_KINDS:
                busy.append((st[i], en[i]))
            elif node.is_comm:
                # as the scheduler counts it, a receive talks from when its data starts to move:
                # the wait before (args wait_ns, set by the log builders) is the pipeline bubble
                waited = node.args.get("wait_ns", 0) if node.kind == NodeKind.RECV and node.args else 0
                if st[i] + waited < en[i]:
                    talk.append((st[i] + waited, en[i]))
                if node.kind != NodeKind.RECV:
                    label = traffic_label(trace, node.kind == NodeKind.COLLECTIVE, rank.group_of(node))
                    row = comm.setdefault(label, {"ops": 0, "bytes": 0, "busy_ns": 0})
                    row["ops"] += 1
                    row["bytes"] += node.size
                    row["busy_ns"] += en[i] - st[i]
        finish = max(en, default=0)
        busy, talk = _merge(busy), _merge(talk)
        compute = sum(b - a for a, b in busy)
        exposed = _measure_outside(talk, busy)
        ranks[str(rank.rank)] = {"finish_ns": finish, "compute_ns": compute, "exposed_comm_ns": exposed,
                                 "idle_ns": max(0, finish - compute - exposed)}
    iteration = max((r["finish_ns"] for r in ranks.values()), default=0)
    return {"iteration_time_ns": iteration, "ranks": ranks, "comm": dict(sorted(comm.items())), "critical_path": {}}


def render(stats: dict[str, Any]) -> str:
    lines = [f"iteration time  {format_ms(stats['iteration_time_ns'])}  ({stats['timing']}, {stats['world']} ranks)"]
    if stats.get("measured"):
        lines.append(_measured_line(stats["measured"]))
    lines += [
        "",
        f"{'ranks':<24}{'finish':>14}{'compute':>14}{'exposed comm':>14}{'idle':>14}",
    ]
    for label, row in _grouped_rows(stats["ranks"]):
        lines.append(f"{label:<24}" + "".join(f"{format_ms(row[f]):>14}" for f in _FIELDS))
    if stats["comm"]:
        lines += ["", f"{'traffic by group kind':<24}{'ops':>14}{'bytes':>14}{'busy (all ranks)':>18}"]
        for kind, row in stats["comm"].items():
            lines.append(f"{kind:<24}{row['ops']:>14}{_bytes(row['bytes']):>14}{format_ms(row['busy_ns']):>18}")
    if stats.get("groups"):
        lines += ["", f"{'collectives by group':<24}{'collectives':>14}{'bytes':>14}{'span (sum)':>18}"]
        for label, row in stats["groups"].items():
            lines.append(f"{label:<24}{row['instances']:>14}{_bytes(row['bytes']):>14}{format_ms(row['span_ns']):>18}")
    if stats.get("slowest_collectives"):
        lines += ["", "slowest collectives (first start to last end; the rank that started last, and how long the first waited)"]
        for row in stats["slowest_collectives"]:
            lines.append(f"  {format_ms(row['span_ns']):>12}  {row['group']} seq {row['seq']} {row['name']} "
                         f"{_bytes(row['bytes'])}: last rank {row['last_rank']}, waited {format_ms(row['wait_ns'])}")
    path = stats.get("critical_path") or {}
    if path.get("top"):
        by_cat = ", ".join(f"{k} {format_ms(v)}" for k, v in path.get("by_category", {}).items())
        lines += ["", f"critical path  {format_ms(path['length_ns'])} over {path['nodes']} nodes: {by_cat}"]
        for item in path["top"]:
            lines.append(f"  {format_ms(item['ns']):>12}  {item['category']:<8} {item['name']}" + (f"  x{item['count']}" if item["count"] > 1 else ""))
    network = stats.get("network")
    if network:
        d = network["default"]
        lines += ["", f"network ({network['source']}): default {d['bandwidth_gbps']:g} GB/s, {d['latency_ns']:g} ns/step, "
                  f"{d['chunks']} chunk(s), {d['algorithm']}"]
    return "\n".join(lines) + "\n"


def _measured_line(measured: dict[str, Any]) -> str:
    """`measured        1613.340 ms  (ms/batch of step 5, log:492); the model leaves out 889.680 ms (55.1 %)`."""
    gap = measured["gap_ns"]
    if gap >= 0:
        share = f" ({100 * gap / measured['ns']:.1f} %)" if measured["ns"] else ""
        verdict = f"the model leaves out {format_ms(gap)}{share}"
    else:
        verdict = f"the model is {format_ms(-gap)} longer"
    return f"{'measured':<14}  {format_ms(measured['ns'])}  ({measured['what']}, {measured['source']}); {verdict}"


def _grouped_rows(ranks: dict[str, dict[str, int]]) -> list[tuple[str, dict[str, int]]]:
    """Consecutive ranks with identical numbers collapse into one row ("0-7")."""
    rows: list[tuple[list[int], dict[str, int]]] = []
    for key in sorted(ranks, key=int):
        row = ranks[key]
        if rows and rows[-1][1] == row and rows[-1][0][-1] == int(key) - 1:
            rows[-1][0].append(int(key))
        else:
            rows.append(([int(key)], row))
    out = []
    for members, row in rows:
        label = str(members[0]) if len(members) == 1 else f"{members[0]}-{members[-1]}"
        out.append((label, row))
    return out


def format_ms(ns: int) -> str:
    """`723.660 ms`, `12.500 µs`, `40 ns`: the unit that keeps 3 decimals readable."""
    if ns >= 1_000_000:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1_000:
        return f"{ns / 1e3:.3f} µs"
    return f"{ns} ns"


def _bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
