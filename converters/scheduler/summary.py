"""Where an iteration's time goes: per-rank breakdown, traffic per group kind, critical path.

Per rank: `compute_ns` is the time at least one compute or memory node runs; `exposed_comm_ns`
the time communication runs while nothing computes; `idle_ns` the rest up to the rank's
finish (waiting for peers: the pipeline bubble, collective skew). The three add up to
`finish_ns`. A collective counts from its instance start (when the last member issued it); a
receive from when its data starts to move.
"""

from __future__ import annotations

from functools import partial
from operator import itemgetter
from typing import Any

from ..model import BUSY_KINDS, NodeKind
from .engine import IS_COLL_OR_SEND, IS_TALK, T_OTHER, Engine, _loop, indices

TOP_CONTRIBUTORS = 10
_MEMORY_KINDS = (NodeKind.MEM_LOAD, NodeKind.MEM_STORE)


def summarize(engine: Engine, starts: list[list[int]], ends: list[list[int]], cause: list[list[int]]) -> dict[str, Any]:
    ranks_out: dict[str, dict[str, int]] = {}
    comm: dict[str, dict[str, int]] = {}
    cache: dict[int, dict[str, int]] = {}  # ranks sharing timelines share their breakdown
    finishes = []  # per position: its latest end
    # Programs of one structure share their types (engine.Program): their communication
    # nodes are found once, and only where the engine's C loop did not already merge and sum them.
    found: dict[tuple[int, int], list[int]] = {}

    def nodes_of(prog, table: bytes) -> list[int]:
        key = (id(prog.types), id(table))
        places = found.get(key)
        if places is None:
            places = found[key] = indices(prog.types, table)
        return places

    for r in range(len(engine.ranks)):
        prog = engine.progs[r]
        st, en = starts[r], ends[r]
        key = id(st)
        if key not in cache:
            if engine.talking is not None:
                talking = engine.talking[r]
            else:
                talking = _merge([(st[i], en[i]) for i in nodes_of(prog, IS_TALK) if en[i] > st[i]])
            cache[key] = _breakdown(prog, st, en, engine.computing[r], talking)
        finishes.append(cache[key]["finish_ns"])
        members = engine.class_members(r)
        for rank in members:
            ranks_out[str(rank)] = dict(cache[key])
        if engine.traffic is not None:
            gathered = engine.traffic[r]
        else:
            gathered = _gather_traffic(prog, st, en, nodes_of(prog, IS_COLL_OR_SEND))
        _add_traffic(comm, engine, r, gathered, len(members))
    ranks_out = dict(sorted(ranks_out.items(), key=lambda kv: int(kv[0])))
    iteration = max((row["finish_ns"] for row in ranks_out.values()), default=0)
    return {
        "iteration_time_ns": iteration,
        "ranks": ranks_out,
        "comm": dict(sorted(comm.items())),
        "critical_path": critical_path(engine, starts, ends, cause, finishes),
    }


def _breakdown(prog, st: list[int], en: list[int], computing: list[list[int]],
               talking: list[tuple[int, int]]) -> dict[str, int]:
    """`computing`: the engine's record of when the rank's compute stream was busy (sorted,
    touching stretches joined); memory nodes, which run beside it, are added when there are any.
    `talking`: when its communication nodes ran, merged and sorted."""
    memory_nodes = _memory_nodes(prog)
    busy = computing
    if memory_nodes:
        busy = _merge([(a, b) for a, b in computing] + [(st[i], en[i]) for i in memory_nodes if en[i] > st[i]])
    finish = max(en, default=0)
    compute = sum(b - a for a, b in busy)
    exposed = _measure_outside(talking, busy)
    return {"finish_ns": finish, "compute_ns": compute, "exposed_comm_ns": exposed,
            "idle_ns": max(0, finish - compute - exposed)}


def _memory_nodes(prog) -> list[int]:
    """Indices of a program's memory nodes (busy beside the compute stream)."""
    types, nodes = prog.types, prog.nodes
    if T_OTHER not in types:
        return []
    return [i for i, typ in enumerate(types) if typ == T_OTHER and nodes[i].kind in _MEMORY_KINDS]


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    intervals.sort()
    out: list[tuple[int, int]] = []
    for a, b in intervals:
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _measure_outside(talk: list[tuple[int, int]], busy: list[tuple[int, int]]) -> int:
    """Length of the union `talk` not covered by the union `busy` (both merged and sorted)."""
    total = 0
    j = 0
    for a, b in talk:
        covered = 0
        while j < len(busy) and busy[j][1] <= a:
            j += 1
        k = j
        while k < len(busy) and busy[k][0] < b:
            covered += min(b, busy[k][1]) - max(a, busy[k][0])
            k += 1
        total += (b - a) - covered
    return total


def _add_traffic(comm: dict[str, dict[str, int]], engine: Engine, r: int,
                 gathered: list[tuple[int, int, int, int]], copies: int) -> None:
    """Collectives and sends per group kind: node count, bytes and busy time (summed over ranks;
    `copies` ranks share this timeline). `gathered`: position r's (first node, count, bytes,
    busy ns) per (group, type), from the C loop or _gather_traffic."""
    rank = engine.ranks[r]
    nodes = engine.progs[r].nodes
    for first, count, size, busy in gathered:
        node = nodes[first]
        kind = engine.kind_of(rank.group_of(node), node)
        row = comm.get(kind)
        if row is None:
            row = comm[kind] = {"ops": 0, "bytes": 0, "busy_ns": 0}
        row["ops"] += count * copies
        row["bytes"] += size * copies
        row["busy_ns"] += busy * copies


def _gather_traffic(prog, st: list[int], en: list[int], coll_or_send: list[int]) -> list[tuple[int, int, int, int]]:
    """(first node, count, bytes, busy ns) of the collectives and sends of each (group, type): the
    kind depends on the rank's group for the node's and on sending or not only, so the nodes are
    gathered by those first, then each gathering is summed at once (the C loop gives the same)."""
    nodes, types = prog.nodes, prog.types
    gathered: dict[tuple, list[int]] = {}
    for i in coll_or_send:
        key = (nodes[i].group, types[i])
        places = gathered.get(key)
        if places is None:
            gathered[key] = [i]
        else:
            places.append(i)
    return [(places[0], len(places), sum([nodes[i].size for i in places]),
             sum(map(en.__getitem__, places)) - sum(map(st.__getitem__, places))) for places in gathered.values()]


def critical_path(engine: Engine, starts, ends, cause, finishes: list[int] | None = None) -> dict[str, Any]:
    """Walk back from the last node to finish along each node's cause; credit each node with
    the time from its cause's end to its own end (so the credits add up to the iteration).
    `finishes`: each position's latest end, when known."""
    if finishes is None:
        finishes = [max(en, default=0) for en in ends]
    last_rank = None  # the first position with the latest end
    for r, finish in enumerate(finishes):
        if ends[r] and (last_rank is None or finish > finishes[last_rank]):
            last_rank = r
    last = None if last_rank is None else (last_rank, ends[last_rank].index(finishes[last_rank]))
    if last is None:
        return {"length_ns": 0, "nodes": 0, "by_category": {}, "top": []}
    steps, by_category, top = _credit_path(engine, ends, cause, last)
    if len(top) > TOP_CONTRIBUTORS:  # the rows of the ten largest credits and their equals, sorted below
        cut = sorted(map(itemgetter(2), top), reverse=True)[TOP_CONTRIBUTORS - 1]
        top = [row for row in top if row[2] >= cut]
    ranked = sorted(top, key=lambda row: (-row[2], row[0], row[1]))[:TOP_CONTRIBUTORS]
    return {
        "length_ns": ends[last[0]][last[1]],
        "nodes": steps,
        "by_category": dict(sorted(by_category.items(), key=lambda kv: (-kv[1], kv[0]))),
        "top": [{"name": name, "category": cat, "ns": ns, "count": count} for cat, name, ns, count in ranked if ns > 0],
    }


def _credit_path(engine: Engine, ends, cause, last: tuple[int, int]) -> tuple[int, dict[str, int], list[tuple[str, str, int, int]]]:
    """Walk back from `last` along the causes, crediting each node with the time from its cause's
    end to its own end: the nodes on the path, the credit per category, and (category, name,
    credit, count) per category and name; in the order first met. In C where _loop.c was built
    (the same sums); this is its specification."""
    progs = engine.progs
    limit = sum(len(p.nodes) for p in progs) + 1  # (a cycle of causes would be a bug)
    if _loop is not None:
        done = _loop.credit_path(cause, ends, engine.stride, *last, [p.nodes for p in progs], limit,
                                 partial(_category, engine))
        if done is not None:
            return done
    stride = engine.stride
    by_category: dict[str, int] = {}
    top: dict[tuple[str, str], list[int]] = {}
    category_of: dict[tuple, str] = {}  # (position, kind, group) -> the category of such nodes
    r, i = last
    end = ends[r][i]
    steps = 0
    while steps < limit:
        steps += 1
        c = cause[r][i]
        before = ends[c // stride][c % stride] if c >= 0 else 0
        credit = end - before if end > before else 0
        node = progs[r].nodes[i]
        key = (r, node.kind, node.group)
        category = category_of.get(key)
        if category is None:
            category = category_of[key] = _category(engine, r, node)
        by_category[category] = by_category.get(category, 0) + credit
        entry = top.get((category, node.name))
        if entry is None:
            top[(category, node.name)] = [credit, 1]
        else:
            entry[0] += credit
            entry[1] += 1
        if c < 0:
            break
        r, i, end = c // stride, c % stride, before
    return steps, by_category, [(category, name, ns, count) for (category, name), (ns, count) in top.items()]


def _category(engine: Engine, r: int, node) -> str:
    if node.kind in BUSY_KINDS:
        return "compute"
    if node.is_comm:
        return engine.kind_of(engine.ranks[r].group_of(node), node)
    return "other"


def headline(summary: dict[str, Any]) -> str:
    """The summary in one line, for the converter to print after writing a scheduled timeline:
    the iteration time and where the slowest rank's time went (lowest rank among equals)."""
    iteration = summary["iteration_time_ns"]
    rank, row = max(summary["ranks"].items(), key=lambda kv: (kv[1]["finish_ns"], -int(kv[0])))
    unit, scale = _unit_for(iteration)
    whole = unit == "ns"  # integer ns need no decimals
    parts = ", ".join(f"{label} {row[field] / scale:.{0 if whole else 2}f} {unit}" for label, field in
                      (("compute", "compute_ns"), ("exposed comm", "exposed_comm_ns"), ("idle", "idle_ns")))
    return (f"iteration {iteration / scale:.{0 if whole else 3}f} {unit} (scheduled; slowest rank {rank}: {parts}); "
            "et-convert stats for more")


def _unit_for(ns: int) -> tuple[str, float]:
    """The largest unit in which `ns` is at least 1 (ns below 1 µs)."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return unit, scale
    return "ns", 1.0
