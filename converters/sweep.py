"""What-if sweeps: re-schedule one trace for every point of a grid of network settings.

    et-convert stats INPUT --sweep tp.bandwidth_gbps=100,200,400 [--sweep dp.latency_ns=1000,5000]

Each `--sweep KEY=V1,V2,...` names a network key as `--net` does (`bandwidth_gbps`,
`tp.latency_ns`, `size.8.chunks`, ...); several `--sweep` options span their grid (every
combination, the first key varying slowest). Every point is the input's network settings
(`--network`, `--net`) with the point's values on top, scheduled by the scheduler.

Measured and modelled inputs (logs) are re-scheduled too: their compute nodes keep the times
the log gave them and communication takes the network model's time, so a point says what the
same compute would take on that network. The result says which (`basis`).
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from .diagnostics import Diagnostics, InputError, UsageError
from .options import Options
from .validate.findings import rank_words
from .stats import format_ms

MAX_POINTS = 1000  # a grid larger than this is almost surely a typo; each point is a full schedule
_BREAKDOWN = ("compute_ns", "exposed_comm_ns", "idle_ns")


def parse_sweep(specs: list[str]) -> list[tuple[str, list[Any]]]:
    """`["tp.bandwidth_gbps=100,200"]` -> [("tp.bandwidth_gbps", [100, 200])]; numbers as numbers."""
    grid: list[tuple[str, list[Any]]] = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip()
        items = [v.strip() for v in values.split(",")]
        if not sep or not key or not all(items):
            raise UsageError(f"--sweep {spec}: expected KEY=V1,V2,... (e.g. tp.bandwidth_gbps=100,200,400)")
        if any(key == known for known, _ in grid):
            raise UsageError(f"--sweep {key} is given twice; give each key once with all its values")
        grid.append((key, [_number(v) for v in items]))
    points = 1
    for _, values in grid:
        points *= len(values)
    if points > MAX_POINTS:
        raise UsageError(f"--sweep: {points} points in the grid; at most {MAX_POINTS} (give fewer values)")
    return grid


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text  # e.g. algorithm=ring,direct


def grid_points(grid: list[tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, the first key varying slowest."""
    keys = [key for key, _ in grid]
    return [dict(zip(keys, combo)) for combo in itertools.product(*(values for _, values in grid))]


def basis_of(trace) -> str:
    """How the sweep's timelines were made, in a sentence for the table and the page."""
    if trace.timing in ("measured", "modelled"):
        return (f"re-scheduled from the {trace.timing} compute times: compute keeps the log's times, "
                "communication takes the network model's")
    return "scheduled with the network model"


def check_reschedulable(trace) -> None:
    """A log of only some ranks cannot be re-scheduled: the absent ranks' sends never come."""
    if trace.timing not in ("measured", "modelled"):
        return
    named = {m for g in trace.groups.values() for m in g.members}
    named |= {rank.peer_of(n) for rank in trace.ranks.values() for n in rank.nodes if n.peer is not None}
    absent = sorted(named - set(trace.ranks))
    if absent:
        raise InputError(None, f"cannot re-schedule {', '.join(trace.source.files[:3])}: it holds "
                               f"{rank_words(trace.ranks)}, and its groups and transfers also name "
                               f"{rank_words(absent)}; give every rank's log")


def sweep(trace, grid: list[tuple[str, list[Any]]], options: Options | None = None) -> dict[str, Any]:
    """`{"sweep": [{KEY: value, ..., "iteration_time_ns", "slowest_rank", "compute_ns", ...}], "basis": ...}`.

    The breakdown is the slowest rank's (lowest rank among equals), as the converter's one-line
    summary gives it. Every point's network is checked before the first is scheduled.
    """
    from .scheduler import network_for, schedule

    options = options or Options()
    points = grid_points(grid)
    settings = [replace(options, network_overrides={**options.network_overrides, **point}) for point in points]
    networks = [network_for(s) for s in settings]  # a bad key or value fails here, before any scheduling
    check_reschedulable(trace)
    rows = []
    for point, network in zip(points, networks):
        summary = schedule(trace, network=network).summary
        rows.append({**point, **slowest_rank(summary)})
    out: dict[str, Any] = {"sweep": rows, "basis": basis_of(trace), "world": len(trace.ranks)}
    if trace.timing in ("measured", "modelled"):
        from .timeline import measured_timeline

        out[f"{trace.timing}_iteration_time_ns"] = measured_timeline(trace).end_ns
    return out


def slowest_rank(summary: dict[str, Any]) -> dict[str, Any]:
    """The iteration time and the slowest rank's breakdown."""
    rank = slowest_of(summary["ranks"])
    row = summary["ranks"][str(rank)]
    return {"iteration_time_ns": summary["iteration_time_ns"], "slowest_rank": rank,
            **{field: row[field] for field in _BREAKDOWN}}


def slowest_of(ranks: dict[str, dict[str, int]]) -> int | None:
    """The rank that finishes last (lowest among equals), as the converter's one-line summary names it."""
    if not ranks:
        return None
    return int(max(ranks.items(), key=lambda kv: (kv[1]["finish_ns"], -int(kv[0])))[0])


def run(inputs: list[Path], from_: str, options: Options, diagnostics: Diagnostics, specs: list[str],
        as_json: bool = False) -> int:
    """`et-convert stats INPUT --sweep ...`: the table, or `--json`."""
    from . import progress
    from .api import read

    grid = parse_sweep(specs)
    trace = read(inputs, from_, options, diagnostics)
    with progress.bar(f"scheduling {len(grid_points(grid))} network settings"):
        result = sweep(trace, grid, options)
    if as_json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render(result, [key for key, _ in grid]))
    return 0


def render(result: dict[str, Any], keys: list[str]) -> str:
    rows = result["sweep"]
    lines = [f"sweep  {len(rows)} points, {result['world']} ranks ({result['basis']})"]
    for timing in ("measured", "modelled"):
        if f"{timing}_iteration_time_ns" in result:
            lines.append(f"{timing} iteration  {format_ms(result[f'{timing}_iteration_time_ns'])}")
    width = max([len(k) for k in keys] + [8]) + 2
    header = "".join(f"{k:>{width}}" for k in keys)
    lines += ["", header + f"{'iteration':>14}{'slowest rank':>14}{'compute':>14}{'exposed comm':>14}{'idle':>14}"]
    for row in rows:
        cells = "".join(f"{row[k]:>{width}}" for k in keys)
        cells += f"{format_ms(row['iteration_time_ns']):>14}{row['slowest_rank']:>14}"
        cells += "".join(f"{format_ms(row[f]):>14}" for f in _BREAKDOWN)
        lines.append(cells)
    return "\n".join(lines) + "\n"
