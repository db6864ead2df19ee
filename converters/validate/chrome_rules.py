"""Rules a Chrome JSON trace must follow to import cleanly into Perfetto.

`check_chrome_trace(obj)` takes the parsed trace (object form or bare event array) and
returns findings as plain strings, `"<rule>: <what>"`, empty when the trace is clean.
`check_chrome_bytes(data)` parses strictly first (orjson: no NaN, no Infinity), accepting
gzip. The rules come from how Perfetto's JSON importer behaves (FORMATS.md §6):

- json: strict JSON; no NaN or Infinity anywhere.
- pid: every event with a pid has an integer pid >= 1 (pid 0 is special).
- tid: tids are integers, never 0 (replaced by the pid) and never equal to their pid.
- names: every process and thread that has slices is named by a `process_name` /
  `thread_name` M event with a non-empty `args.name`.
- dur: X slices have numeric ts and dur >= 0.
- nesting: X slices on one (pid, tid) nest properly; a partial overlap is mis-parented.
- flow: v2 flow ids (`bind_id`) are integers in [1, 2^53); each id has exactly one start
  (`flow_out` only) and one end (`flow_in` only), any number of middle links (both), and
  the start begins no later than every other link (Perfetto binds flows in time order);
  v1 flow events (`s`/`f`) have one start and one end per (cat, name, id).
- args: `args` is a flat object with no null values.

A trace a profiler wrote (PyTorch's Kineto: `distributedInfo`, `deviceProperties`,
`baseTimeNanoseconds`, `traceName` or `schemaVersion` at the top) is held only to what
breaks its import, not to our writers' conventions: tid == pid is the main thread, pids and
tids may be strings (Kineto's "Spans"), pid 0 is a GPU, metadata events carry tid 0, tracks
may be unnamed and args nested (Perfetto flattens them). Perfetto imports its
partly overlapping slices as recorded (gloo's `gloo:send` ends after the `c10d::send` that
issued it). What still counts: strict JSON, times, flows, null args, and slices on tid 0 beside slices on tid == pid (Perfetto
puts both on one track).
"""

from __future__ import annotations

import gc
import gzip
import math
from collections import defaultdict
from typing import Any

import orjson

MAX_FLOW_ID = 2**53
PROFILER_KEYS = ("distributedInfo", "deviceProperties", "baseTimeNanoseconds", "traceName", "schemaVersion")


def check_chrome_bytes(data: bytes, max_per_rule: int | None = 20) -> list[str]:
    """Parse `data` (JSON, or gzip of JSON) strictly, then check it."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            return [f"json: cannot decompress gzip: {e}"]
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        return [f"json: not strict JSON: {e}"]
    return check_chrome_trace(obj, max_per_rule)


def check_chrome_trace(obj: Any, max_per_rule: int | None = 20) -> list[str]:
    """Findings for a parsed Chrome trace; `max_per_rule` caps how many of each rule are listed."""
    checker = _Checker(max_per_rule, profiler=is_profiler_trace(obj))
    # no cycles among parsed JSON: keep the cyclic GC from rescanning millions of events
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        checker.run(obj)
    finally:
        if was_enabled:
            gc.enable()
    return checker.report()


def is_profiler_trace(obj: Any) -> bool:
    """True for a trace a profiler wrote (Kineto's top-level keys), not one of our writers'."""
    return isinstance(obj, dict) and any(key in obj for key in PROFILER_KEYS)


def _describe(index: int, event: dict) -> str:
    name = event.get("name")
    where = f"event {index}"
    if "pid" in event:
        where += f" (pid {event.get('pid')}, tid {event.get('tid')}"
        where += f", {name!r})" if name is not None else ")"
    return where


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(value)


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


def _ns(us: float | int) -> int:
    """µs as printed -> integer ns, the way Perfetto reads 3-decimal timestamps."""
    return round(us * 1000)


class _Checker:
    def __init__(self, max_per_rule: int | None, profiler: bool = False):
        self.max_per_rule = max_per_rule
        self.profiler = profiler
        self.main_thread_slices: set = set()  # profiler traces: pids with slices on tid == pid
        self.tid0_slices: dict = {}  # ... and the first slice on tid 0 of each pid
        self.found: dict[str, list[str]] = defaultdict(list)
        self.counts: dict[str, int] = defaultdict(int)

    def add(self, rule: str, message: str) -> None:
        self.counts[rule] += 1
        if self.max_per_rule is None or len(self.found[rule]) < self.max_per_rule:
            self.found[rule].append(f"{rule}: {message}")

    def report(self) -> list[str]:
        out: list[str] = []
        for rule, messages in self.found.items():
            out.extend(messages)
            extra = self.counts[rule] - len(messages)
            if extra > 0:
                out.append(f"{rule}: ... and {extra} more")
        return out

    def run(self, obj: Any) -> None:
        if isinstance(obj, dict):
            events = obj.get("traceEvents")
            if not isinstance(events, list):
                self.add("json", "no traceEvents array")
                return
        elif isinstance(obj, list):
            events = obj
        else:
            self.add("json", f"top level is {type(obj).__name__}, expected an object or an array")
            return
        if isinstance(obj, dict) and _has_non_finite({k: v for k, v in obj.items() if k != "traceEvents"}):
            self.add("json", "NaN or Infinity outside traceEvents (Perfetto rejects the file)")
        named_processes: set = set()
        named_threads: set = set()
        used_threads: set = set()
        slices: dict[tuple, list[tuple[int, int, int]]] = defaultdict(list)
        flows_v2: dict[int, list[tuple[int, int, str]]] = defaultdict(list)  # id -> (ts ns, index, dir)
        flows_v1: dict[tuple, list[tuple[str, int]]] = defaultdict(list)
        for index, event in enumerate(events):
            if not isinstance(event, dict):
                self.add("json", f"event {index} is not an object")
                continue
            self.check_ids(index, event)
            self.check_args(index, event)
            ph = event.get("ph")
            pid, tid = event.get("pid"), event.get("tid", event.get("pid"))
            if ph == "M":
                self.check_metadata(index, event, named_processes, named_threads)
            elif ph == "X":
                used_threads.add((pid, tid))
                span = self.check_slice(index, event)
                if span is not None:
                    slices[(pid, tid)].append((span[0], span[1], index))
                    self.collect_flow_v2(index, event, span[0], flows_v2)
            elif ph in ("B", "E", "i", "I"):
                used_threads.add((pid, tid))
            elif ph in ("s", "t", "f"):
                flows_v1[(event.get("cat"), event.get("name"), event.get("id"))].append((ph, index))
        for pid in sorted(self.main_thread_slices & set(self.tid0_slices), key=repr):
            self.add("tid", f"{_describe(self.tid0_slices[pid], events[self.tid0_slices[pid]])}: slices on tid 0 and on "
                            "tid == pid share one track in Perfetto")
        for pid, tid in sorted(used_threads, key=repr):
            if self.profiler:
                break  # a profiler's unnamed tracks are shown by number
            if pid not in named_processes:
                self.add("names", f"pid {pid} has slices but no process_name")
            if (pid, tid) not in named_threads:
                self.add("names", f"thread (pid {pid}, tid {tid}) has slices but no thread_name")
        for key, spans in slices.items():
            if not self.profiler:  # Perfetto imports a profiler's overlaps as recorded (e.g. gloo:send past c10d::send)
                self.check_nesting(key, spans, events)
        self.check_flows_v2(flows_v2)
        self.check_flows_v1(flows_v1)

    def check_ids(self, index: int, event: dict) -> None:
        if self.profiler:
            self.check_profiler_ids(index, event)
            return
        if "pid" in event:
            pid = event["pid"]
            if not _is_int(pid) or pid < 1:
                self.add("pid", f"{_describe(index, event)}: pid must be an integer >= 1")
        if "tid" in event:
            tid, pid = event["tid"], event.get("pid")
            if not _is_int(tid) or tid == 0:
                self.add("tid", f"{_describe(index, event)}: tid must be a non-zero integer (tid 0 becomes the pid)")
            elif tid == pid:
                self.add("tid", f"{_describe(index, event)}: tid equals pid (the process's main thread)")

    def check_profiler_ids(self, index: int, event: dict) -> None:
        """A profiler's ids: integers >= 0 or strings; slices on tid 0 and on tid == pid merge."""
        pid, tid = event.get("pid"), event.get("tid")
        for what, value in (("pid", pid), ("tid", tid)):
            if value is not None and not (isinstance(value, str) or (_is_int(value) and value >= 0)):
                self.add(what, f"{_describe(index, event)}: {what} must be an integer >= 0 or a string")
        if event.get("ph") in ("X", "B", "E") and _is_int(pid):
            if tid == pid:
                self.main_thread_slices.add(pid)
            elif tid == 0:
                self.tid0_slices.setdefault(pid, index)

    def check_args(self, index: int, event: dict) -> None:
        if "args" not in event:
            return
        args = event["args"]
        if not isinstance(args, dict):
            self.add("args", f"{_describe(index, event)}: args is not an object")
            return
        for key, value in args.items():
            if isinstance(value, float) and not math.isfinite(value):
                self.add("json", f"{_describe(index, event)}: arg {key!r} is NaN or Infinity (Perfetto rejects the file)")
            elif value is None:
                self.add("args", f"{_describe(index, event)}: arg {key!r} is null (Perfetto drops it)")
            elif isinstance(value, (dict, list)) and not self.profiler:
                self.add("args", f"{_describe(index, event)}: arg {key!r} is nested; keep args flat")

    def check_metadata(self, index: int, event: dict, processes: set, threads: set) -> None:
        name = event.get("name")
        if name not in ("process_name", "thread_name"):
            return
        args = event.get("args")
        label = args.get("name") if isinstance(args, dict) else None
        if not isinstance(label, str) or not label:
            self.add("names", f"{_describe(index, event)}: {name} without a non-empty args.name")
            return
        if name == "process_name":
            processes.add(event.get("pid"))
        else:
            threads.add((event.get("pid"), event.get("tid", event.get("pid"))))

    def check_slice(self, index: int, event: dict) -> tuple[int, int] | None:
        ts, dur = event.get("ts"), event.get("dur")
        if not _is_number(ts):
            self.add("dur", f"{_describe(index, event)}: ts is not a finite number")
            return None
        if not _is_number(dur):
            self.add("dur", f"{_describe(index, event)}: X slice without a finite dur")
            return None
        if dur < 0:
            self.add("dur", f"{_describe(index, event)}: negative dur {dur}")
            return None
        start = _ns(ts)
        return start, start + _ns(dur)

    def check_nesting(self, key: tuple, spans: list[tuple[int, int, int]], events: list) -> None:
        spans.sort(key=lambda s: (s[0], -s[1], s[2]))
        stack: list[tuple[int, int, int]] = []
        for start, end, index in spans:
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                outer = stack[-1]
                self.add(
                    "nesting",
                    f"{_describe(index, events[index])} [{start}, {end}] ns overlaps "
                    f"event {outer[2]} ({events[outer[2]].get('name')!r}) [{outer[0]}, {outer[1]}] ns without nesting",
                )
                continue
            stack.append((start, end, index))

    def collect_flow_v2(self, index: int, event: dict, start: int, flows: dict) -> None:
        if "bind_id" not in event:
            return
        bind_id = event["bind_id"]
        if not _is_int(bind_id) or not (1 <= bind_id < MAX_FLOW_ID):
            self.add("flow", f"{_describe(index, event)}: bind_id {bind_id!r} is not an integer in [1, 2^53)")
            return
        out, into = bool(event.get("flow_out")), bool(event.get("flow_in"))
        if not (out or into):
            self.add("flow", f"{_describe(index, event)}: bind_id {bind_id} without flow_in or flow_out")
            return
        direction = "step" if out and into else "out" if out else "in"
        flows[bind_id].append((start, index, direction))

    def check_flows_v2(self, flows: dict) -> None:
        for bind_id, links in flows.items():
            starts = [link for link in links if link[2] == "out"]
            ends = [link for link in links if link[2] == "in"]
            if len(starts) != 1 or len(ends) != 1:
                self.add(
                    "flow",
                    f"flow {bind_id}: {len(starts)} start(s) and {len(ends)} end(s); "
                    "expected exactly one flow_out and one flow_in",
                )
                continue
            first = starts[0]
            for link in links:
                if link is not first and (link[0], link[1]) < (first[0], first[1]):
                    self.add(
                        "flow",
                        f"flow {bind_id}: event {link[1]} starts before the flow's start (event {first[1]}); "
                        "Perfetto would see the end before the start and drop it",
                    )
                    break

    def check_flows_v1(self, flows: dict) -> None:
        for (cat, name, flow_id), links in flows.items():
            phases = [ph for ph, _ in links]
            if phases.count("s") != 1 or phases.count("f") != 1:
                self.add(
                    "flow",
                    f"v1 flow id {flow_id!r} (cat {cat!r}, name {name!r}): {phases.count('s')} start(s) "
                    f"and {phases.count('f')} end(s); expected one of each",
                )
            if _is_int(flow_id) and not (0 <= flow_id < MAX_FLOW_ID):
                self.add("flow", f"v1 flow id {flow_id} is not below 2^53")
