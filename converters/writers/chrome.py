"""Chrome JSON trace (`.json`, `.json.gz`) for ui.perfetto.dev and chrome://tracing.

Layout, threads, slices and flows come from `layout_chrome.plan_trace` (shared with the
native Perfetto writer); this module only prints them:

    {"traceEvents": [M events, then X slices per rank], "displayTimeUnit": "ms", "metadata": {...}}

Times are µs printed from integer ns: ns / 1000 is the double nearest to the 3-decimal
value, and orjson prints the shortest text that reads back as that double, so 1234567 ns
prints as 1234.567. `dur` is taken from the same integers as `ts`, so a child never ends
after its parent (see `dur_us` for the few durations printed with more digits). Flows are v2 (`bind_id` with `flow_out` / `flow_in`, both for a middle
link of a collective chain) on the X slices themselves.
"""

from __future__ import annotations

import gzip
import math
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from ..diagnostics import Diagnostics
from ..timeline import Timeline
from .atomic import atomic_file
from .layout_chrome import FLOW_IN, FLOW_OUT, Plan, paused_gc, plan_trace

CHUNK = 20_000  # events per orjson.dumps call
BYTES_PER_SLICE = 200  # typical size of one X event with its args (measured: 196), for the size warning
LARGE_JSON = 1_000_000_000


def write(trace, output, options=None, diagnostics: Diagnostics | None = None, timeline: Timeline | None = None) -> None:
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    output = Path(output)
    plan = plan_trace(trace, options, diagnostics, timeline)
    warn_if_large(plan, output, diagnostics)
    with atomic_file(output) as raw:
        if output.name.lower().endswith(".gz"):
            # mtime=0 and no file name inside: the same trace gives the same bytes
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as gz:
                write_plan(plan, gz)
        else:
            write_plan(plan, raw)


def warn_if_large(plan: Plan, output: Path, diagnostics: Diagnostics) -> None:
    estimate = plan.slice_count * BYTES_PER_SLICE
    if estimate > LARGE_JSON:
        diagnostics.warn(
            "chrome-large",
            f"{output.name}: about {estimate / 1e9:.1f} GB of JSON ({plan.slice_count:,} slices); "
            "the Perfetto UI holds about 2 GB per tab: write a .pftrace instead, or draw fewer ranks with --ranks",
        )


def write_plan(plan: Plan, out: BinaryIO) -> None:
    out.write(b'{"traceEvents":[')
    first = True
    with paused_gc():
        for chunk in iter_event_chunks(plan):
            if not chunk:
                continue
            if not first:
                out.write(b",")
            out.write(orjson.dumps(chunk)[1:-1])
            first = False
    out.write(b'],"displayTimeUnit":"ms","metadata":')
    # metadata comes from readers (trace.metadata): allow int keys, print unknown types as text
    out.write(orjson.dumps(plan.metadata, default=str, option=orjson.OPT_NON_STR_KEYS))
    out.write(b"}\n")


def iter_event_chunks(plan: Plan):
    """Lists of event dicts: the metadata events, then about CHUNK slices at a time."""
    yield metadata_events(plan)
    durations = _Durations()
    chunk: list[dict[str, Any]] = []
    for process in plan.processes:
        pid = process.pid
        slices = process.slices
        events = [
            {"ph": "X", "pid": pid, "tid": sl.tid, "ts": sl.start / 1000, "dur": durations[sl.end - sl.start],
             "name": sl.name, "args": sl.args}
            for sl in slices
        ]
        for event, sl in zip(events, slices):
            direction = sl.flow_dir
            if direction:
                event["bind_id"] = sl.flow
                if direction != FLOW_IN:
                    event["flow_out"] = True  # FLOW_OUT, or FLOW_STEP: in and out
                if direction != FLOW_OUT:
                    event["flow_in"] = True
        chunk.extend(events)
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    yield chunk


class _Durations(dict):
    """ns -> printed µs (`dur_us`), remembered: ops repeat, so most lookups are hits."""

    def __missing__(self, ns: int) -> float:
        us = self[ns] = dur_us(ns)
        return us


def dur_us(ns: int) -> float:
    """`ns` in µs, printed so that both ways Perfetto reads a `dur` give back `ns`.

    Newer importers read the text (3 decimals, digits beyond ns cut off); some read it as a
    double and truncate `d * 1000`, which turns 1.001 into 1000 ns and can push a child 1 ns
    past its parent. For those values (about 0.6%) print the next double up instead
    (`1.0010000000000001`): its text still cuts to 1001 and its double no longer truncates.
    """
    us = ns / 1000
    if int(us * 1000.0) != ns:
        us = math.nextafter(us, math.inf)
    return us


def metadata_events(plan: Plan) -> list[dict[str, Any]]:
    """Process and thread names and their sort order (Perfetto ignores process labels)."""
    events: list[dict[str, Any]] = []
    for process in plan.processes:
        pid = process.pid
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": process.name, **process.args}})
        events.append({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": process.rank}})
        for thread in process.threads:
            tid = thread.tid
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": thread.name}})
            events.append(
                {"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": thread.sort_index}}
            )
    return events
