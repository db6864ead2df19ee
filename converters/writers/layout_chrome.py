"""What a timeline view shows: processes, threads, slices, args and flows, for both writers.

The Chrome JSON writer and the native Perfetto writer draw exactly the same picture; this
module decides it once so the two cannot drift apart.

Processes. One per drawn rank: pid = rank + 1 (pid 0 is special in Perfetto), named by
`Rank.label` ("rank 12 · stage 1"), sorted by rank. A modelled timeline whose input also
measured the iteration gets one more process after the ranks, "measured vs modelled": the
two iteration times as bars from the same start, so the gap shows without reading metadata.

Threads. One per stream, in the order compute, tp, dp, ep, dp_ep, pp send, pp recv, other,
then any other stream names alphabetically. tid = pid * 1000 + slot, where slot (1..999) is
the thread's position in its process: never 0 (Perfetto turns tid 0 into the pid), never
equal to its pid, unique across the trace, and stable when other ranks are added or left
out. Perfetto's JSON importer reads only `process_name` / `thread_name` among M events; the
`*_sort_index` events serve chrome://tracing, and pids and tids grow in the same order.
(With more than 1000 ranks a tid can equal another rank's pid; Perfetto matches threads by
(tid, pid), so that is harmless.)

Slices. One per node, on its thread; start/end in integer ns from the trace origin.
Slices on one thread must nest (Perfetto drops or mis-parents partial overlaps), so an op
that overlaps another on its thread without nesting moves to an overflow thread
("tp 2", "tp 3", ...) listed right after its base thread. A sub-operation (`node.parent`)
goes on its parent's thread when it lies inside the parent, else on its own comm thread.
A receive that waited for its sender (`wait_ns` in its args, set by the log builders) gets a
child slice "waiting for rank N" over its first `wait_ns` (args: `wait_basis`), on measured
timelines only: the wait was measured against the log's own times.

Ranks that run one node list with the same times and threads (the ranks of a stage in a
scheduled trace) share one `Layout`: the writers encode it once and vary only the pid,
group-specific args and flows.

Flows. Perfetto binds a flow to slices and processes events in time order, and it always
draws a flow from the slice that starts first to the one that starts later. So every flow
starts on whichever end begins first:
- each SEND and its matching RECV (k-th send from a to b with tag t ↔ k-th such recv):
  one flow id, FLOW_OUT on the earlier slice, FLOW_IN on the later one;
- each collective instance (the k-th collective of a group on every member): one flow id
  chaining the drawn members in the order they entered (start time, then rank): FLOW_OUT on
  the first, FLOW_STEP (in and out) on each middle one, FLOW_IN on the last. A chain needs
  only one flow id per slice, which is all a Chrome JSON v2 slice (`bind_id`) can carry; a
  fan-out from one member would need several ids on one slice.
Flow ids count from 1 in a deterministic order and are unique across the trace. No flows are
drawn when the ranks' clocks are unrelated (measured scaling-mode logs, see `one_clock`).
"""

from __future__ import annotations

import functools
import math
import operator
from array import array
from collections import Counter
from dataclasses import dataclass, field
from itertools import compress, count, islice, repeat, zip_longest
from typing import Any, Callable, Iterable, Iterator

import orjson

from ..diagnostics import Diagnostics, UsageError
from ..gc_pause import paused_gc
from ..model import ExecutionTrace, NodeKind, Rank
from ..ranks import compact_ranks, parse_rank_list
from ..stats import format_ms, measured_reference
from ..timeline import Timeline, timeline_for

THREAD_ORDER = ("compute", "tp", "dp", "ep", "dp_ep", "pp send", "pp recv", "other")
COMM_THREADS = frozenset({"tp", "dp", "ep", "dp_ep"})
TID_STRIDE = 1000  # tid = pid * TID_STRIDE + slot
MAX_THREADS = TID_STRIDE - 1
DEFAULT_RANK_LIMIT = 64  # above this many ranks, draw a readable subset unless --ranks says otherwise

FLOW_NONE, FLOW_OUT, FLOW_IN, FLOW_STEP = 0, 1, 2, 3
MAX_FLOW_ID = 2**53 - 1

_UNITS = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


@dataclass(slots=True)
class Slice:
    """One drawn slice; `Process.slices()` builds them on demand (tests, small traces)."""

    tid: int
    start: int  # ns from the trace origin
    end: int
    name: str
    args: dict[str, Any]  # shared between slices with the same args: never modify
    flow: int = 0  # flow id, 0 = none
    flow_dir: int = FLOW_NONE


def flow_of(code: int) -> tuple[int, int]:
    """(flow id, direction) from a `Process.flows` value (one int: a million tuples cost 50 MB)."""
    return code >> 2, code & 3


@dataclass(slots=True)
class Thread:
    tid: int
    name: str
    sort_index: int


@dataclass(slots=True)
class Layout:
    """Where and when every slice of one node list is drawn, for one set of times.

    Shared by every rank that runs the same node list with the same times and thread
    kinds (ranks of one stage in a scheduled trace): only the pid, names, args and flows
    differ between them, so writers encode a layout once (`cache`) and reuse the bytes.
    Positions are node indices, then the rank-independent extra slices (waiting parts of
    receives) after them.
    """

    order: list[int] | None  # positions in drawing order (start, longest first, parents first); None: as they are
    slots: list[int]  # thread slot per position: tid = pid * TID_STRIDE + slot
    starts: list[int]  # ns from the trace origin, per position
    ends: list[int]  # per position, never before its start
    threads: list[tuple[int, str]]  # (slot, name) in display order
    cache: dict[str, Any] = field(default_factory=dict)  # writers' encodings of this layout

    def drawn(self, values: list, start: int = 0, stop: int | None = None) -> list:
        """`values` (one per position) in drawing order; from `start` to `stop` in that order."""
        if self.order is None:
            return values[start:stop]
        return list(map(values.__getitem__, self.order[start:stop]))


# Values that vary from slice to slice, each printed from a column (`ArgsRows.columns`): the
# node's own fields, then args whose values differ between dicts otherwise alike (`VARYING_ARGS`).
NODE_FIELDS = ("node", "bytes", "tag", "microbatch", "source")
# A log's op args say their iteration, a receive's how long it waited, a profiler trace's collective
# its sequence number and a launch the node it launched: a shape per value would make thousands of
# shapes per rank (benchmark 6: 3,944 on a rank, 258 without them).
VARYING_ARGS = ("iteration", "wait_ns", "sequence", "launched_node")
OWN_FIELDS = NODE_FIELDS + VARYING_ARGS


class ArgsShape:
    """The args of the slices that differ only in the values of their nodes' own fields.

    `items`: (key, value, field) in the args' order; `field` is the index in OWN_FIELDS of
    a value each slice takes from its `ArgsRows.columns`, or -1 for `value`, the same in
    every slice of the shape. Fields increase along the items (writers fill them in order).
    A log's args are a distinct dict per node, but only a few hundred shapes per rank:
    writers encode a shape once and fill in the values.
    """

    __slots__ = ("items", "chrome_format")

    def __init__(self, items: list[tuple[str, Any, int]]):
        self.items = items
        self.chrome_format: bytes | None = None  # the Chrome writer's, made once: ranks share shapes

    def args(self, values: tuple) -> dict[str, Any]:
        """The args dict of a slice with these OWN_FIELDS values."""
        return {key: value if f < 0 else values[f] for key, value, f in self.items}


@dataclass(slots=True)
class ArgsRows:
    """Every slice's args as a shape and the values of its node's own fields (no dict per slice)."""

    shapes: list[ArgsShape]  # per position
    columns: tuple[list, ...]  # per OWN_FIELDS: the value per position (None past the nodes)

    def drawn(self, layout: Layout, start: int, stop: int) -> "ArgsRows":
        """The rows of the slices from `start` to `stop` in the layout's drawing order."""
        return ArgsRows(layout.drawn(self.shapes, start, stop),
                        tuple(layout.drawn(column, start, stop) for column in self.columns))


@dataclass(slots=True)
class Process:
    rank: int
    pid: int
    name: str
    args: dict[str, Any]
    layout: Layout
    names: list[str]  # slice name per position
    make_args: Callable[[], list[dict[str, Any]]]  # builds `slice_args`
    flow_pairs: array = field(default_factory=lambda: array("q"))  # position, code, position, code ... (see `flows`)
    made_args: list[dict[str, Any]] | None = None
    made_flows: dict[int, int] | None = None
    # builds `arg_rows`, or returns None when the args are better shared as dicts (ranks of one node list)
    make_rows: Callable[[], ArgsRows | None] | None = None

    @property
    def slice_args(self) -> list[dict[str, Any]]:
        """Args per position; dicts shared between slices and ranks: never modify.

        Built when first asked for and kept until `release`: a log's args are a dict per
        node and most of a plan's memory, so a writer that prints one process at a time
        holds them for that process only.
        """
        if self.made_args is None:
            self.made_args = self.make_args()
        return self.made_args

    @property
    def flows(self) -> dict[int, int]:
        """Position -> flow id << 2 | FLOW_OUT/IN/STEP (see `flow_of`), built from `flow_pairs`
        when first asked for (a dict costs about 100 B per flow, the pairs 16)."""
        if self.made_flows is None:
            pairs = iter(self.flow_pairs)
            self.made_flows = dict(zip(pairs, pairs))
        return self.made_flows

    def flow_codes(self) -> array:
        """The `flows` value per position, 0 for none: 8 B a slice, for a writer that keeps every process."""
        codes = array("q", bytes(8 * self.slice_count))
        pairs = self.flow_pairs
        for k in range(0, len(pairs), 2):
            codes[pairs[k]] = pairs[k + 1]
        return codes

    def arg_rows(self) -> ArgsRows | None:
        """The args as shapes and values (equal to `slice_args`), or None: then use `slice_args`.

        Not kept: a writer asks once per process. Used where every node has its own args
        dict (each rank of a log its own node list); dicts shared by ranks are encoded once
        from `slice_args` instead.
        """
        if self.made_args is not None or self.make_rows is None:
            return None
        return self.make_rows()

    def release(self) -> None:
        """Free the args and flows once printed; asking again builds equal ones."""
        self.made_args = None
        self.made_flows = None

    @property
    def threads(self) -> list[Thread]:
        base = self.pid * TID_STRIDE
        return [Thread(base + slot, name, slot) for slot, name in self.layout.threads]

    @property
    def slice_count(self) -> int:
        return len(self.layout.starts)

    def positions(self) -> list[int]:
        """Positions in drawing order."""
        order = self.layout.order
        return list(range(len(self.layout.starts))) if order is None else order

    def slices(self) -> list[Slice]:
        """Every slice in drawing order (sorted by (start, -end): parents first)."""
        layout, base, out = self.layout, self.pid * TID_STRIDE, []
        for i in self.positions():
            flow, direction = flow_of(self.flows.get(i, FLOW_NONE))
            out.append(Slice(base + layout.slots[i], layout.starts[i], layout.ends[i], self.names[i],
                             self.slice_args[i], flow, direction))
        return out


@dataclass(slots=True)
class ProcessHead:
    """What the metadata events and the track descriptors need of a Process placed elsewhere
    (a forked worker's): no layout, names or args."""

    rank: int
    pid: int
    name: str
    args: dict[str, Any]
    thread_slots: list[tuple[int, str]]  # its layout's threads
    slice_count: int

    @classmethod
    def of(cls, process: Process) -> "ProcessHead":
        return cls(process.rank, process.pid, process.name, process.args, process.layout.threads, process.slice_count)

    @property
    def threads(self) -> list[Thread]:
        base = self.pid * TID_STRIDE
        return [Thread(base + slot, name, slot) for slot, name in self.thread_slots]


@dataclass
class Plan:
    processes: list[Process]
    origin_ns: int  # absolute time of ts 0 (trace.time_origin_ns + shift)
    flow_count: int
    drawn: list[int]  # ranks drawn
    world: int  # ranks in the trace
    metadata: dict[str, Any]

    @property
    def slice_count(self) -> int:
        return sum(p.slice_count for p in self.processes)


# ---------------------------------------------------------------- small formatting helpers


def format_bytes(size: int) -> str:
    """`64 MiB`, `1.5 GiB`, `4096 B`: binary units, at most one decimal."""
    for unit, suffix in _UNITS:
        if size >= unit:
            value = size / unit
            text = f"{value:.1f}".removesuffix(".0")
            return f"{text} {suffix}"
    return f"{size} B"


def parse_ranks(spec: str, known: list[int]) -> list[int]:
    """`0-15,1008` -> those ranks; `all` -> every rank. Unknown ranks are a usage error."""
    spec = spec.strip()
    if spec.lower() == "all":
        return list(known)
    try:
        chosen = parse_rank_list(spec)
    except ValueError as e:
        raise UsageError(f"--ranks {spec}: {e}; expected e.g. 0-15,1008 or all") from None
    present = set(known)
    missing = sorted(chosen - present)
    if missing:
        raise UsageError(
            f"--ranks {spec}: no rank {compact_ranks(missing)} in this trace (it has ranks {compact_ranks(known)})"
        )
    return sorted(chosen)


def clean_arg(value: Any) -> Any:
    """A flat, typed, JSON-safe arg value, or None to drop it (nulls and NaN are not allowed)."""
    if value is None:
        return None
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def lookup_encoded(cache: dict, keys: list, values: list, encode) -> list[bytes]:
    """`cache[key]` for every key, encoding `values[j]` for the keys not cached yet.

    Lookups run in C (`map`); only the misses, a few per rank, go through Python.
    """
    texts = list(map(cache.get, keys))
    for j in compress(count(), map(operator.is_, texts, repeat(None))):
        key = keys[j]
        text = cache.get(key)  # an earlier miss in this list may have encoded it
        if text is None:
            text = cache[key] = encode(values[j])
        texts[j] = text
    return texts


WRITE_PARTS = 1 << 14  # pieces joined per write: a process's whole text (megabytes for a log's rank) is never made


def encoder_by_process(processes: list[Process], encode_one: Callable[[Process, int], Iterable[list[bytes]]],
                       finished: Callable[[Layout], None]) -> Callable[[Process], Iterator[list[bytes]]]:
    """`encode(process)` for each of `processes` in turn, each read to its end before the next:
    the blocks of pieces of `encode_one(process, how many later processes among them share its
    layout)`, then the process's args are freed (a log has a dict per node) and, after a
    layout's last process, `finished(layout)` frees its encoding."""
    left = Counter(id(process.layout) for process in processes)

    def encode(process: Process) -> Iterator[list[bytes]]:
        layout = process.layout
        left[id(layout)] -= 1
        yield from encode_one(process, left[id(layout)])
        process.release()
        if not left[id(layout)]:
            finished(layout)

    return encode


def write_parts(out, blocks: Iterable[list[bytes]]) -> None:
    """Write a process's events: each block of pieces (the writers' `process_parts`) as it is
    made, joined a batch at a time."""
    for parts in blocks:
        for k in range(0, len(parts), WRITE_PARTS):
            out.write(b"".join(parts[k:k + WRITE_PARTS]))


# ---------------------------------------------------------------- which ranks to draw


def choose_ranks(trace: ExecutionTrace, options, diagnostics: Diagnostics) -> list[int]:
    known = sorted(trace.ranks)
    spec = getattr(options, "ranks", None) if options is not None else None
    if spec:
        return parse_ranks(spec, known)
    if len(known) <= DEFAULT_RANK_LIMIT:
        return known
    subset, how = default_subset(trace)
    diagnostics.warn(
        "chrome-rank-subset",
        f"drawing {len(subset)} of {len(known)} ranks ({compact_ranks(subset)}: {how}); "
        "use --ranks all for every rank or --ranks 0-15,1008 to choose",
    )
    return subset


def default_subset(trace: ExecutionTrace) -> tuple[list[int], str]:
    """A readable subset and how it was chosen: the first rank's TP group plus the lowest
    rank of each pipeline stage, or the first 64 ranks when the trace knows neither."""
    known = sorted(trace.ranks)
    first = known[0]
    chosen: set[int] = {first}
    parts = []
    for group in sorted(trace.groups.values(), key=lambda g: g.id):
        if group.kind == "tp" and first in group.members:
            chosen.update(r for r in group.members if r in trace.ranks)
            parts.append(f"rank {first}'s tp group")
            break
    seen_stages: set[int] = set()
    for r in known:
        stage = trace.ranks[r].stage
        if stage is not None and stage not in seen_stages:
            seen_stages.add(stage)
            chosen.add(r)
    if seen_stages:
        parts.append("the first rank of each pipeline stage")
    if len(chosen) == 1:
        return known[:DEFAULT_RANK_LIMIT], f"the first {DEFAULT_RANK_LIMIT} ranks"
    return sorted(chosen), " and ".join(parts)


# ---------------------------------------------------------------- the plan


def plan_trace(
    trace: ExecutionTrace,
    options=None,
    diagnostics: Diagnostics | None = None,
    timeline: Timeline | None = None,
) -> Plan:
    return plan_from(start_plan(trace, options, diagnostics, timeline))


def plan_from(start: PlanStart) -> Plan:
    """Place every drawn rank and draw the flows between them, in this process."""
    planner = start.planner
    with paused_gc():
        processes = [planner.place_rank(start.trace.ranks[r]) for r in start.drawn]
        flow_count = planner.assign_flows() if start.flows else 0
        planner.forget_comm()  # the processes keep the planner to build their args later
    return start.plan(processes, flow_count)


@dataclass
class PlanStart:
    """What `plan_trace` decides before placing any rank; the rest is per drawn rank
    (`_Planner.place_rank`), then across them (`_Planner.assign_flows`). Forked workers
    (`forked.draw_in_workers`, for `chrome.write` and `perfetto.write`) place their share
    of the ranks with a copy of `planner`."""

    trace: ExecutionTrace
    timeline: Timeline
    drawn: list[int]
    shift: int
    planner: _Planner
    flows: bool  # whether flows are drawn (`one_clock`)
    beside: Process | None  # `measured_vs_modelled_process`, after the ranks

    def rank_weight(self, r: int) -> int:
        """The work of placing and printing rank `r`: its slices, about."""
        rank = self.trace.ranks[r]
        return len(rank.nodes) + len(rank.display)

    def drawn_work(self) -> int:
        """`rank_weight` of every drawn rank: what decides whether to fork workers (`forked.workers_for`)."""
        return sum(map(self.rank_weight, self.drawn))

    def number_flows(self, placed) -> int:
        """The flows between drawn processes placed elsewhere (`placed`: their (ProcessHead,
        `comm_slices`) pairs, in drawn order), numbered as one process numbers them into
        `planner.flows_of_pid`; returns their count."""
        planner = self.planner
        for head, comm in placed:
            planner.flows_of_pid[head.pid] = array("q")
            planner.add_comm(head.rank, comm)
        return planner.assign_flows() if self.flows else 0

    def plan(self, processes: list, flow_count: int) -> Plan:
        """The plan of these processes (the drawn ranks', in drawn order) and the one beside them."""
        trace, origin = self.trace, self.trace.time_origin_ns + self.shift
        return Plan(
            processes=processes + ([self.beside] if self.beside is not None else []),
            origin_ns=origin,
            flow_count=flow_count,
            drawn=self.drawn,
            world=len(trace.ranks),
            metadata=output_metadata(trace, self.timeline, origin, self.drawn),
        )


def start_plan(trace: ExecutionTrace, options=None, diagnostics: Diagnostics | None = None,
               timeline: Timeline | None = None) -> PlanStart:
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    if timeline is None:
        timeline = timeline_for(trace, options)
    drawn = choose_ranks(trace, options, diagnostics)
    shift = min((min(s) for s in timeline.starts.values() if s), default=0)
    shift = display_shift(trace, drawn, shift)
    planner = _Planner(trace, timeline, shift, diagnostics)
    return PlanStart(trace, timeline, drawn, shift, planner, one_clock(trace, timeline),
                     measured_vs_modelled_process(trace, timeline, shift))


def measured_vs_modelled_process(trace: ExecutionTrace, timeline: Timeline, shift: int) -> Process | None:
    """A process after the ranks that sets the log's measured iteration beside the modelled one.

    A modelled timeline (OptimusPrime) looks as precise as a measured one; the measured
    ms/batch, drawn as a bar from the same start, shows at a glance how much the model leaves
    out. Threads: `modelled` (the modelled iteration, then what it leaves out) and `measured`.
    """
    reference = measured_reference(trace, timeline)
    if reference is None:
        return None
    # both bars start where the plan's times start (0: `shift` is subtracted from every time)
    modelled_end, measured_end = timeline.end_ns - shift, reference["ns"]
    gap = measured_end - modelled_end  # from the drawn bars (the timeline need not start at 0)
    common = {"measured_ns": measured_end, "modelled_ns": modelled_end, "gap_ns": gap, "source": reference["source"]}
    slices = [  # (slot, start, end, name, args)
        (1, 0, modelled_end, f"modelled iteration {format_ms(modelled_end)}",
         {**common, "basis": "et-convert's model of the log (assumptions in each slice's args and in the metadata)"}),
        (2, 0, measured_end, f"measured {reference['what']}: {format_ms(measured_end)}", common),
    ]
    if gap > 0:
        slices.append((1, modelled_end, measured_end, f"not modelled: {format_ms(gap)}",
                       {**common, "basis": "measured minus modelled: what the log timed that the model leaves out"}))
    starts, ends = [s[1] for s in slices], [s[2] for s in slices]
    order = drawing_order(starts, ends, [-1] * len(slices))
    pid = max(trace.ranks, default=-1) + 2  # after every rank's pid (rank + 1)
    return Process(
        rank=pid - 1, pid=pid, name="measured vs modelled",
        args={"what": f"the log's measured {reference['what']} beside the modelled iteration"},
        layout=Layout(order=None if order == list(range(len(order))) else order, slots=[s[0] for s in slices],
                      starts=starts, ends=ends, threads=[(1, "modelled"), (2, "measured")]),
        names=[s[3] for s in slices], make_args=lambda: [s[4] for s in slices],
    )


def display_shift(trace: ExecutionTrace, drawn: list[int], shift: int) -> int:
    """`shift`, or the start of the earliest display-only span (model.DisplaySpan) of a drawn
    rank when that is earlier: every drawn time stays >= 0."""
    return min([shift, *(span.start_ns for r in drawn for span in trace.ranks[r].display)])


def display_args(rank: Rank) -> list[dict[str, Any]]:
    """Args of a rank's display-only spans: theirs, and the node each launched."""
    out = []
    for span in rank.display:
        args = {str(k): v for k, v in ((k, clean_arg(v)) for k, v in span.args.items()) if v is not None}
        if span.node is not None:
            args["launched_node"] = span.node
        out.append(args)
    return out


def one_clock(trace: ExecutionTrace, timeline: Timeline) -> bool:
    """Whether all ranks' times are on one clock, so arrows between ranks mean something.

    The ranks of a scaling-mode log ran one after another, each timed on its own: an arrow
    from a send to its receive would draw a timing relation that never happened.
    """
    return not (timeline.kind == "measured" and trace.metadata.get("scaling_mode"))


def output_metadata(trace: ExecutionTrace, timeline: Timeline, origin_ns: int, drawn: list[int]) -> dict[str, Any]:
    """STYLE.md "Output metadata"."""
    from .. import __version__

    meta: dict[str, Any] = {
        "et_convert.version": __version__,
        "source.format": trace.source.format,
        "source.files": list(trace.source.files),
        "source.sha256": trace.source.sha256,
        "units": dict(trace.units),
        "parallel": trace.parallel.as_dict(),
        "timing": timeline.kind,
    }
    if timeline.kind == "scheduled":
        meta["network"] = timeline.parameters
    meta["time_origin_ns"] = origin_ns
    meta["assumptions"] = list(trace.assumptions)
    meta["ranks_drawn"] = compact_ranks(drawn)
    if not one_clock(trace, timeline):
        meta["flows"] = "none drawn: each rank was timed on its own clock (scaling-mode log)"
    if timeline.summary:
        meta["summary"] = timeline.summary
    if trace.metadata:
        meta["details"] = trace.metadata
    return meta


class _Template:
    """What a node list looks like on every rank that runs it (ranks may share one list).

    Rank-specific parts (group labels, peers, the stage, collective threads, times) are
    filled in per rank; everything else is computed once per list. The args are kept only
    while a rank drawn with this list still has to build its own (`users`).
    """

    def __init__(self, nodes, draw_waits: bool, cleaned: _CleanedArgs):
        self.nodes = nodes
        self.cleaned = cleaned
        n = len(nodes)
        self.names: list[str | None] = [None] * n  # None: depends on the rank (comm node without a name)
        comm_names: dict[tuple[str, int], str] = {}  # one string per distinct name and size
        self.threads: list[str | None] = [None] * n  # None: a collective's thread follows its group kind
        # comm nodes keyed by what a rank remaps: the group id; (kind, peer, tag) for send/recv
        self.collectives: dict[int | None, list[int]] = {}
        self.p2p: dict[tuple, list[int]] = {}
        for i, node in enumerate(nodes):
            kind = node.kind
            if kind == NodeKind.COLLECTIVE:
                self.collectives.setdefault(node.group, []).append(i)
                self.threads[i] = node.stream or None
                if node.name:
                    self.names[i] = _shared_comm_name(comm_names, node)
            elif kind == NodeKind.SEND or kind == NodeKind.RECV:
                self.p2p.setdefault((kind, node.peer, node.tag), []).append(i)
                self.threads[i] = node.stream or ("pp send" if kind == NodeKind.SEND else "pp recv")
                if node.name:
                    self.names[i] = _shared_comm_name(comm_names, node)
            else:
                self.threads[i] = node.stream or "compute"
                self.names[i] = node.name or f"node {node.id}"
        # extra slices after the nodes: the waiting part of each receive that waited
        self.waits = receive_waits(nodes) if draw_waits else []
        self.wait_args = [args for _, _, args in self.waits]
        self.parents = parent_positions(nodes) + [p for p, _, _ in self.waits]
        # (id(starts), id(ends)) -> [(starts, ends, thread kinds, layout)]: ranks with the same times share a layout
        self.layouts: dict[tuple[int, int], list[tuple]] = {}
        self.users = 0  # drawn ranks with this node list whose args are not built yet
        self.drawn = 0  # drawn ranks with this node list
        self.forget_args()

    def forget_args(self) -> None:
        """Drop the args built so far (equal ones are built again if asked)."""
        self.base_args: list[dict[str, Any]] | None = None
        self.stage_args: dict[int | None, list[dict[str, Any]]] = {}
        # args with the rank-specific part merged in, shared by ranks that map to the same values
        self.coll_args: dict[tuple, list[dict[str, Any]]] = {}  # (stage, raw group, group) -> per position
        self.p2p_args: dict[tuple, dict[str, Any]] = {}  # (stage, index, peer, group) -> args

    def args_with_stage(self, stage: int | None) -> list[dict[str, Any]]:
        """Rank-independent args plus the stage (shared by every rank of that stage)."""
        found = self.stage_args.get(stage)
        if found is None:
            if self.base_args is None:
                self.base_args = [node_args(node, self.cleaned) for node in self.nodes]
            found = self.base_args if stage is None else [with_stage(base, stage) for base in self.base_args]
            self.stage_args[stage] = found
        return found


def with_stage(args: dict[str, Any], stage: int) -> dict[str, Any]:
    """`args` plus the stage; `args` itself when it already says that stage (log nodes do)."""
    current = args.get("stage")
    if current == stage and type(current) is type(stage):  # True == 1, but prints differently
        return args
    return {**args, "stage": stage}


def _shared_comm_name(names: dict[tuple[str, int], str], node) -> str:
    """`comm_name` of the node, one string for all nodes with the same name and size."""
    key = (node.name, node.size)
    name = names.get(key)
    if name is None:
        name = names[key] = comm_name(node.name, node.size)
    return name


def receive_waits(nodes) -> list[tuple[int, int, dict[str, Any]]]:
    """(position, ns, args) of every receive whose args say it waited (`wait_ns` > 0) for its sender."""
    kinds = map(operator.attrgetter("kind"), nodes)  # the receives found in C: a few among 100,000s of nodes
    waits = []
    for i in compress(count(), map(operator.eq, kinds, repeat(NodeKind.RECV))):
        node = nodes[i]
        wait = node.args.get("wait_ns")
        if isinstance(wait, int) and not isinstance(wait, bool) and wait > 0:
            basis = node.args.get("wait_basis")
            waits.append((i, wait, {"wait_basis": str(basis)} if basis else {}))
    return waits


def waiting_name(peer: int | None) -> str:
    return "waiting for the sender" if peer is None else f"waiting for rank {peer}"


def _remap(items: dict, remap) -> dict:
    """Re-key `items` (key -> node indices) for one rank; keys that merge keep program order."""
    out: dict = {}
    for key, positions in items.items():
        mapped = remap(key)
        if mapped in out:
            out[mapped] = sorted(out[mapped] + positions)
        else:
            out[mapped] = positions
    return out


class _Planner:
    def __init__(self, trace: ExecutionTrace, timeline: Timeline, shift: int, diagnostics: Diagnostics):
        self.trace = trace
        self.timeline = timeline
        self.shift = shift
        self.diagnostics = diagnostics
        # a receive's wait was found against the input's own times (measured, or modelled by its
        # builder): drawn only on those, not on the scheduler's
        self.draw_waits = timeline.kind in ("measured", "modelled")
        self.group_thread: dict[int | None, str] = {}
        self.group_extra: dict[int | None, dict[str, Any]] = {}  # group and members args of a group
        self.templates: dict[int, _Template] = {}  # id(node list) -> template
        self.cleaned = _CleanedArgs()  # node.args made flat and typed, shared by the templates
        self.shapes: dict[tuple, ArgsShape] = {}  # args shapes by content, shared by ranks (`slice_rows`)
        self.shapes_stage: int | None = None  # the stage of the ranks `shapes` were made for
        # comm slices for flows (ints, see _POSITION_BITS), filled by place_rank in program order
        self.sends: dict[tuple, list[int]] = {}  # (src, dst, tag) -> sends
        self.recvs: dict[tuple, list[int]] = {}  # (src, dst, tag) -> receives
        self.instances: dict[int | None, list[list[int]]] = {}  # group -> each member's collectives, in drawn order
        self.flows_of_pid: dict[int, array] = {}  # pid -> its Process.flow_pairs
        # set: collect_comm appends each rank's comm_slices here instead (COMM_SENT: they were sent already)
        self.comm_out: list | None = None

    def template(self, nodes) -> _Template:
        found = self.templates.get(id(nodes))
        if found is None or found.nodes is not nodes:
            found = self.templates[id(nodes)] = _Template(nodes, self.draw_waits, self.cleaned)
        return found

    # -- per rank

    def forget_rank(self, rank: Rank) -> None:
        """Let go of what placing `rank` kept for later ranks with its node list (the list's
        template, which holds the layouts made from it) and of its times; for a planner that
        places no later rank with that list. Its process keeps what it needs."""
        self.templates.pop(id(rank.nodes), None)
        self.timeline.starts.pop(rank.rank, None)
        self.timeline.ends.pop(rank.rank, None)

    def place_rank(self, rank: Rank) -> Process:
        pid = rank.rank + 1
        nodes = rank.nodes
        starts = self.timeline.starts.get(rank.rank)
        ends = self.timeline.ends.get(rank.rank)
        if starts is None or ends is None or len(starts) != len(nodes) or len(ends) != len(nodes):
            raise ValueError(f"timeline has no times for rank {rank.rank}'s {len(nodes)} nodes")
        tpl = self.template(nodes)
        gmap, pmap = rank.group_map, rank.peer_map
        collectives = tpl.collectives
        if gmap is not None:
            collectives = _remap(collectives, lambda g: g if g is None else gmap.get(g, g))
        p2p = tpl.p2p
        if pmap is not None:
            p2p = _remap(p2p, lambda key: (key[0], key[1] if key[1] is None else pmap.get(key[1], key[1]), key[2]))
        bases = self.base_threads(tpl, collectives)
        if rank.display:  # drawn-only spans: this rank's own layout
            layout = self.new_layout(tpl, starts, ends, bases, rank.rank, rank.display)
        else:
            layout = self.layout(tpl, starts, ends, bases, rank.rank)
        names = tpl.names
        if None in names:  # comm nodes without a name: named from this rank's group or peer
            names = [name if name is not None else slice_name(self.trace, rank, node) for name, node in zip(names, nodes)]
        if tpl.waits:
            names = names + [waiting_name(rank.peer_of(nodes[p])) for p, _, _ in tpl.waits]
        if rank.display:
            names = names + [span.name for span in rank.display]
        tpl.users += 1
        tpl.drawn += 1
        process = Process(
            rank=rank.rank,
            pid=pid,
            name=rank.label,
            args={"rank": rank.rank, **{k: v for k, v in sorted(rank.coords.items())}},
            layout=layout,
            names=names,
            make_args=lambda: self.slice_args(tpl, rank, p2p),
            make_rows=lambda: self.slice_rows(tpl, rank, p2p),
        )
        self.collect_comm(rank.rank, process, collectives, p2p)
        return process

    def base_threads(self, tpl: _Template, collectives: dict) -> list[str]:
        bases = list(tpl.threads)
        for gid, positions in collectives.items():
            thread = self.group_thread.get(gid)
            if thread is None:
                kind = self.trace.group_kind(gid)
                thread = self.group_thread[gid] = kind if kind in COMM_THREADS else "other"
            for i in positions:
                if bases[i] is None:
                    bases[i] = thread
        return bases  # type: ignore[return-value]

    def layout(self, tpl: _Template, starts: list[int], ends: list[int], bases: list[str], rank: int) -> Layout:
        """The layout of these times and thread kinds; shared by every rank that has the same."""
        entries = tpl.layouts.setdefault((id(starts), id(ends)), [])
        for s, e, b, layout in entries:
            if s is starts and e is ends and b == bases:
                return layout
        layout = self.new_layout(tpl, starts, ends, bases, rank)
        entries.append((starts, ends, bases, layout))
        return layout

    def new_layout(self, tpl: _Template, starts: list[int], ends: list[int], bases: list[str], rank: int,
                   display: list | tuple = ()) -> Layout:
        if any(map(operator.lt, ends, starts)):  # a negative duration is drawn as zero
            ends = [max(s, e) for s, e in zip(starts, ends)]
        if tpl.waits:  # waiting parts start with their receive and end within it
            starts = starts + [starts[p] for p, _, _ in tpl.waits]
            ends = ends + [min(starts[p] + wait, ends[p]) for p, wait, _ in tpl.waits]
            bases = bases + [bases[p] for p, _, _ in tpl.waits]
        parents = tpl.parents
        if display:  # display-only spans (model.DisplaySpan) after the nodes and waits, on their own threads
            starts = starts + [span.start_ns for span in display]
            ends = ends + [span.start_ns + span.duration_ns for span in display]
            bases = bases + [span.thread for span in display]
            parents = parents + [-1] * len(display)
        order = drawing_order(starts, ends, parents)
        lane_of, lanes = place_lanes(order, starts, ends, parents, bases)
        threads, slot_of = thread_slots(lanes, rank)
        shift = self.shift
        if shift:
            starts = [s - shift for s in starts]
            ends = [e - shift for e in ends]
        return Layout(
            order=None if order == list(range(len(order))) else order,
            slots=list(map(slot_of.__getitem__, lane_of)),
            starts=starts,
            ends=ends,
            threads=threads,
        )

    # -- args

    def slice_args(self, tpl: _Template, rank: Rank, p2p: dict) -> list[dict[str, Any]]:
        """Args of every slice of this rank: its nodes', then its receives' waiting parts."""
        args = self.rank_args(tpl, rank, p2p)
        if tpl.waits:
            args = args + tpl.wait_args
        if rank.display:
            args = args + display_args(rank)
        tpl.users -= 1
        if tpl.users <= 0:  # no other rank will share them: free them with this rank's
            tpl.forget_args()
        return args

    def rank_args(self, tpl: _Template, rank: Rank, p2p: dict) -> list[dict[str, Any]]:
        """Args of every node on this rank.

        The node's own args (with the stage) plus what depends on the rank: group and members
        for collectives, peer and group for sends and receives. Equal args are one shared
        dict: ranks of one group reuse the same dicts, and the writers encode each distinct
        one once.
        """
        stage = rank.stage
        args = tpl.args_with_stage(stage)
        out = list(args)
        gmap = rank.group_map
        for raw, positions in tpl.collectives.items():
            gid = raw if gmap is None or raw is None else gmap.get(raw, raw)
            key = (stage, raw, gid)
            shared = tpl.coll_args.get(key)
            if shared is None:
                extra = self.collective_extra(gid)
                shared = tpl.coll_args[key] = [{**args[i], **extra} for i in positions]  # rank-specific keys win
            for i, merged in zip(positions, shared):
                out[i] = merged
        nodes = rank.nodes
        for (_, peer, _), positions in p2p.items():
            for i in positions:
                gid = rank.group_of(nodes[i])
                key = (stage, i, peer, gid)
                merged = tpl.p2p_args.get(key)
                if merged is None:
                    merged = tpl.p2p_args[key] = {**args[i], **self.p2p_extra(peer, gid)}
                out[i] = merged
        return out

    def collective_extra(self, gid: int | None) -> dict[str, Any]:
        """What a collective's args say of its group: label and members."""
        extra = self.group_extra.get(gid)
        if extra is None:
            extra = self.group_extra[gid] = dict(zip(("group", "members"), self.group_strings(gid)))
        return extra

    def p2p_extra(self, peer: int | None, gid: int | None) -> dict[str, Any]:
        """What a send's or receive's args say of its peer and group."""
        extra: dict[str, Any] = {}
        if peer is not None:
            extra["peer"] = peer
        if gid is not None:
            extra["group"] = self.group_strings(gid)[0]
        return extra

    MAX_SHAPES = 1 << 14  # distinct shapes kept for later ranks (a log has a few thousand)

    def slice_rows(self, tpl: _Template, rank: Rank, p2p: dict) -> ArgsRows | None:
        """`slice_args` as shapes and values, for a rank with a node list of its own (None otherwise).

        Nodes share a shape when they share their `node.args` dict, kind, op, which own
        fields they have and what the rank adds (group, peer); each shape is made once from
        its first node by the functions that make `slice_args`, so both give equal args.
        """
        if tpl.drawn != 1:
            return None
        nodes, stage = tpl.nodes, rank.stage
        gmap = rank.group_map
        adds: list = [None] * len(nodes)  # per node: what the rank adds (its group, its peer and group)
        for raw, positions in tpl.collectives.items():
            gid = raw if gmap is None or raw is None else gmap.get(raw, raw)
            for i in positions:
                adds[i] = (gid,)
        for (_, peer, _), positions in p2p.items():
            for i in positions:
                adds[i] = (peer, rank.group_of(nodes[i]))
        columns = tuple(list(map(operator.attrgetter(name), nodes)) for name in ("id", "size", "tag", "microbatch", "source"))
        keys = list(zip(
            map(id, map(operator.attrgetter("args"), nodes)),
            map(operator.attrgetter("kind"), nodes),
            map(operator.attrgetter("coll"), nodes),
            map(operator.is_, columns[2], repeat(None)),  # no tag
            map(operator.is_, columns[3], repeat(None)),  # no microbatch
            map(operator.not_, columns[4]),  # no source
            adds,
        ))

        shared = self.shapes
        if len(shared) >= self.MAX_SHAPES or stage != self.shapes_stage:
            shared.clear()  # shapes carry the stage: only ranks of this one share them
            self.shapes_stage = stage

        own_of: dict[tuple, list[str]] = {}  # a node's own keys follow from its key's flags

        def shape_of(i: int) -> ArgsShape:
            # ranks of a log have equal args in distinct dicts: a shape is made once per content
            node = nodes[i]
            flags = keys[i][1:6]  # kind, coll, and whether it has no tag, microbatch, source
            own = own_of.get(flags)
            if own is None:
                own = own_of[flags] = own_keys(node)
            text = args_key(node.args, own)
            if text is None:
                return make_shape(i)
            key = (text, keys[i][1:], stage)
            shape = shared.get(key)
            if shape is None:
                shape = shared[key] = make_shape(i)
            return shape

        def make_shape(i: int) -> ArgsShape:
            args = node_args(nodes[i], tpl.cleaned)
            if stage is not None:
                args = with_stage(args, stage)
            add = adds[i]
            if add is not None:
                extra = self.collective_extra(add[0]) if len(add) == 1 else self.p2p_extra(*add)
                args = {**args, **extra}
            return node_shape(nodes[i], args)

        shapes: list[ArgsShape] = lookup_encoded({}, keys, range(len(nodes)), shape_of)
        extra_args: list[dict[str, Any]] = []
        if tpl.waits:
            extra_args += tpl.wait_args
        if rank.display:
            extra_args += display_args(rank)
        if extra_args:
            shapes += [self.dict_shape(args) for args in extra_args]
            for column in columns:
                column += [None] * len(extra_args)
        columns += self.varying_columns(shapes, nodes, extra_args)
        tpl.users -= 1
        if tpl.users <= 0:
            tpl.forget_args()
        return ArgsRows(shapes, columns)

    def dict_shape(self, args: dict[str, Any]) -> ArgsShape:
        """The shape of an args dict already cleaned (a wait's, a display span's), shared by content."""
        key = ("dict", args_key(args, []))
        shape = self.shapes.get(key) if key[1] is not None else None
        if shape is None:
            shape = ArgsShape(_with_varying([(k, v, -1) for k, v in args.items()], 0))
            if key[1] is not None:
                self.shapes[key] = shape
        return shape

    @staticmethod
    def varying_columns(shapes: list[ArgsShape], nodes, extra_args: list[dict[str, Any]]) -> tuple[list, ...]:
        """The VARYING_ARGS columns: the values of the nodes' args, then of the extra rows' (only
        for the keys some shape prints from a column: the others are all None)."""
        used = {f for shape in dict.fromkeys(shapes) for _, _, f in shape.items if f >= len(NODE_FIELDS)}
        count = len(nodes) + len(extra_args)
        return tuple(varying_column(nodes, key) + [args.get(key) for args in extra_args]
                     if len(NODE_FIELDS) + k in used else [None] * count for k, key in enumerate(VARYING_ARGS))

    def group_strings(self, gid: int | None) -> tuple[str, str]:
        group = self.trace.groups.get(gid) if gid is not None else None
        if group is None:
            return ("world" if gid is None else f"group#{gid}", compact_ranks(self.trace.ranks) if gid is None else "")
        return group.label, compact_ranks(group.members)

    # -- flows

    def collect_comm(self, r: int, process: Process, collectives: dict, p2p: dict) -> None:
        """Remember this rank's collective instances, sends and receives, in program order."""
        if self.comm_out is not None:  # a forked worker: the parent assigns the flows
            if self.comm_out is not COMM_SENT:
                self.comm_out.append(comm_slices(process, collectives, p2p))
            return
        self.flows_of_pid[process.pid] = process.flow_pairs
        self.add_comm(r, comm_slices(process, collectives, p2p))

    def add_comm(self, r: int, comm: tuple[list, list]) -> None:
        """Add one rank's `comm_slices` (drawn ranks in drawn order: flow ids follow this order)."""
        coll_members, p2p_ends = comm
        for gid, members in coll_members:
            of_members = self.instances.get(gid)
            if of_members is None:
                self.instances[gid] = [members]
            else:
                of_members.append(members)
        for kind, peer, tag, ends in p2p_ends:
            if kind == NodeKind.SEND:
                self.sends[(r, peer, tag)] = ends
            else:
                self.recvs[(peer, r, tag)] = ends

    def set_flow(self, comm: int, flow: int, direction: int) -> None:
        tid, i = comm >> _POSITION_BITS & _TID_MASK, comm & _POSITION_MASK
        self.flows_of_pid[tid // TID_STRIDE].extend((i, flow << 2 | direction))

    def assign_flows(self) -> int:
        """Flow ids and directions on the collected comm slices (all between drawn ranks)."""
        next_id = 1
        for key, sends in self.sends.items():
            recvs = self.recvs.get(key)
            if not recvs:
                continue
            for send, recv in zip(sends, recvs):
                first, second = (send, recv) if send <= recv else (recv, send)  # by (start, tid)
                self.set_flow(first, next_id, FLOW_OUT)
                self.set_flow(second, next_id, FLOW_IN)
                next_id += 1
        flows_of_pid = self.flows_of_pid
        for of_members in self.instances.values():
            for members in k_th_collectives(of_members):
                if len(members) == 2:  # a TP-2 log's rule (100,000s of pairs): no sort and no chain
                    first, second = members
                    if second < first:
                        first, second = second, first
                    flows_of_pid[(first >> _POSITION_BITS & _TID_MASK) // TID_STRIDE].extend(
                        (first & _POSITION_MASK, next_id << 2 | FLOW_OUT))
                    flows_of_pid[(second >> _POSITION_BITS & _TID_MASK) // TID_STRIDE].extend(
                        (second & _POSITION_MASK, next_id << 2 | FLOW_IN))
                    next_id += 1
                    continue
                if len(members) < 2:
                    continue
                members = sorted(members)  # by entry time, then rank (tids grow with the rank)
                for member, direction in zip(members, _chain(len(members))):  # set_flow, inlined: 100,000s of members
                    tid = member >> _POSITION_BITS & _TID_MASK
                    flows_of_pid[tid // TID_STRIDE].extend((member & _POSITION_MASK, next_id << 2 | direction))
                next_id += 1
        if next_id > MAX_FLOW_ID:
            raise ValueError("more than 2^53 flows")
        return next_id - 1

    def forget_comm(self) -> None:
        """Drop the comm slices collected for the flows."""
        self.sends, self.recvs, self.instances, self.flows_of_pid = {}, {}, {}, {}


# `_Planner.comm_out` of a worker placing a rank again to print it: its comm slices went to the
# parent when it was first placed.
COMM_SENT: list = []


def k_th_collectives(of_members: list[list[int]]):
    """The members of each collective instance of a group, k = 0, 1, ...: the k-th collective of
    each member (`of_members`: each member's collectives, in drawn order), in that order. Made as
    the flows are assigned, so no list per instance is kept (a TP-2 log has 100,000s)."""
    if len(of_members) == 1:
        return zip(of_members[0])
    counts = set(map(len, of_members))
    if len(counts) == 1:
        return zip(*of_members)
    # a member drawn with fewer collectives (a log cut short): the instances it lacks go without it
    return ([m for m in members if m is not None] for members in zip_longest(*of_members))


def comm_slices(process: Process, collectives: dict, p2p: dict) -> tuple[list, list]:
    """A rank's comm slices as plain values (ints, see _POSITION_BITS), in program order:
    [(group, members of its 1st, 2nd... collective)], [(kind, peer, tag, slices)]."""
    layout = process.layout
    starts, slots = layout.starts, layout.slots
    base = process.pid * TID_STRIDE
    coll_members = [
        (gid, [((starts[i] << _TID_BITS | base + slots[i]) << _POSITION_BITS) | i for i in positions])
        for gid, positions in collectives.items()
    ]
    p2p_ends = [
        (kind, peer, tag, [((starts[i] << _TID_BITS | base + slots[i]) << _POSITION_BITS) | i for i in positions])
        for (kind, peer, tag), positions in p2p.items()
    ]
    return coll_members, p2p_ends


@functools.cache
def _chain(members: int) -> tuple[int, ...]:
    """The flow direction of each member of a collective chain: out, then in and out, then in."""
    return (FLOW_OUT,) + (FLOW_STEP,) * (members - 2) + (FLOW_IN,)


# A comm slice waiting for its flow is one int, start << 72 | tid << 32 | position: it sorts
# as (start, tid) would (both unique together), and a million ints, unlike a million tuples,
# cost the cyclic GC nothing. Starts are >= 0 (shifted to the trace's first start).
_POSITION_BITS = 32
_TID_BITS = 40
_POSITION_MASK = (1 << _POSITION_BITS) - 1
_TID_MASK = (1 << _TID_BITS) - 1



def place_lanes(order: list[int], starts: list[int], ends: list[int], parents: list[int], bases: list[str]):
    """The lane of every position, and the lanes of each thread kind (lane numbers, in order).

    A sub-operation goes on its parent's lane when it lies inside the parent and nests there;
    anything else goes on the first lane of its kind where it nests, or on a new lane.
    One loop with no calls per slice: a log's rank has 100,000s (steps and their sub-operations).
    """
    # per lane: end times of the slices still open on it, innermost last. Slices arrive sorted
    # by (start, -end): one nests on a lane when, after closing what ended by its start, it
    # ends within the innermost open slice.
    stacks: list[list[int]] = []
    lanes: dict[str, list[int]] = {}  # base thread -> its lanes
    lane_of = [-1] * len(starts)
    for i in order:
        start = starts[i]
        end = ends[i]
        p = parents[i]
        if p >= 0:
            lane = lane_of[p]
            if lane >= 0 and starts[p] <= start and end <= ends[p]:
                stack = stacks[lane]
                while stack and stack[-1] <= start:
                    stack.pop()
                if not stack or end <= stack[-1]:
                    stack.append(end)
                    lane_of[i] = lane
                    continue
        base = bases[i]
        own = lanes.get(base)
        if own is None:
            own = lanes[base] = []
        else:
            for lane in own:
                stack = stacks[lane]
                while stack and stack[-1] <= start:
                    stack.pop()
                if not stack or end <= stack[-1]:
                    stack.append(end)
                    lane_of[i] = lane
                    break
            if lane_of[i] >= 0:
                continue
        lane_of[i] = len(stacks)
        own.append(len(stacks))
        stacks.append([end])
    return lane_of, lanes


def thread_slots(lanes: dict[str, list[int]], rank: int) -> tuple[list[tuple[int, str]], list[int]]:
    """(slot, name) of every thread in the documented order, and the slot of each lane."""
    known = [b for b in THREAD_ORDER if b in lanes]
    extra = sorted(b for b in lanes if b not in THREAD_ORDER)
    threads: list[tuple[int, str]] = []
    slot_of = [0] * sum(map(len, lanes.values()))
    for base in known + extra:
        for k, lane in enumerate(lanes[base]):
            slot = len(threads) + 1
            if slot > MAX_THREADS:
                raise ValueError(f"rank {rank} needs more than {MAX_THREADS} threads")
            threads.append((slot, base if k == 0 else f"{base} {k + 1}"))
            slot_of[lane] = slot
    return threads, slot_of


def parent_positions(nodes) -> list[int]:
    """Index of each node's parent in `nodes`, or -1."""
    if not any(n.parent is not None for n in nodes):
        return [-1] * len(nodes)
    index = dict(zip(map(operator.attrgetter("id"), nodes), count()))
    index.pop(None, None)  # a parent of None is no parent
    return list(map(index.get, map(operator.attrgetter("parent"), nodes), repeat(-1)))


def drawing_order(starts: list[int], ends: list[int], parents: list[int]) -> list[int]:
    """Node indices by (start, longest first, parents before sub-ops, program order).

    Sorted by start alone first (in C; nearly sorted already: a log's or a schedule's nodes
    come in start order, with a rank's extra slices after them), then only the runs of equal
    starts (a step and its first sub-operation) are sorted by the rest of the key.
    """
    n = len(starts)
    if all(map(operator.le, starts, islice(starts, 1, None))):
        order = list(range(n))
        by_start = starts
    else:
        order = sorted(range(n), key=starts.__getitem__)  # stable: program order among equal starts
        by_start = list(map(starts.__getitem__, order))
    ties = list(compress(count(), map(operator.eq, by_start, islice(by_start, 1, None))))  # k: equal start at k + 1
    k = 0
    while k < len(ties):
        first = last = ties[k]
        k += 1
        while k < len(ties) and ties[k] == last + 1:
            last = ties[k]
            k += 1
        order[first:last + 2] = sorted(order[first:last + 2], key=lambda i: (starts[i] - ends[i], parents[i] >= 0))
    return order


def slice_name(trace: ExecutionTrace, rank: Rank, node) -> str:
    """What ran: the node's name, with the size for communication (`all_reduce tp 64 MiB`)."""
    name = node.name
    kind = node.kind
    if kind == NodeKind.COLLECTIVE:
        if not name:
            coll = node.coll.name.lower() if node.coll is not None else "collective"
            name = f"{coll} {trace.group_kind(rank.group_of(node)) or 'group'}"
    elif kind == NodeKind.SEND:
        name = name or f"send to {rank.peer_of(node)}"
    elif kind == NodeKind.RECV:
        name = name or f"recv from {rank.peer_of(node)}"
    else:
        return name or f"node {node.id}"
    return comm_name(name, node.size)


def comm_name(name: str, size: int) -> str:
    return f"{name} {format_bytes(size)}" if size > 0 else name


@functools.cache
def op_name(coll) -> str:
    """`all_reduce` for CollType.ALL_REDUCE: one string per type, not one per node."""
    return coll.name.lower()


def node_args(node, cleaned: _CleanedArgs | None = None) -> dict[str, Any]:
    """Args that are the same for every rank sharing this node.

    `cleaned`: `node.args` made flat and typed once per dict (builders share one dict
    between many nodes) instead of once per node.
    """
    args: dict[str, Any] = {"node": node.id}
    if node.is_comm:
        args["bytes"] = node.size
        if node.coll is not None:
            args["op"] = op_name(node.coll)
        if node.tag is not None:
            args["tag"] = node.tag
    if node.microbatch is not None:
        args["microbatch"] = node.microbatch
    if node.source:
        args["source"] = node.source
    extra = cleaned(node.args) if cleaned is not None and node.args else None
    if extra is None:  # not cached: item by item (keys of any type)
        for key, value in node.args.items():
            if key in args:
                continue
            value = clean_arg(value)
            if value is not None:
                args[str(key)] = value
    elif args.keys().isdisjoint(extra):
        args.update(extra)
    else:  # the node's own fields come first and win
        args.update({key: value for key, value in extra.items() if key not in args})
    return args


def own_fields(node) -> list[int]:
    """The OWN_FIELDS `node_args` puts first for this node, in its order (op, the one between, is not one)."""
    fields = [0]
    if node.is_comm:
        fields.append(1)
        if node.tag is not None:
            fields.append(2)
    if node.microbatch is not None:
        fields.append(3)
    if node.source:
        fields.append(4)
    return fields


def own_keys(node) -> list[str]:
    """The keys `node_args` takes from the node's own fields (and `op`), which no arg replaces."""
    keys = [OWN_FIELDS[f] for f in own_fields(node)]
    if node.is_comm and node.coll is not None:
        keys.append("op")
    return keys


def node_shape(node, args: dict[str, Any]) -> ArgsShape:
    """The shape of `args`, the args of `node`: its own fields' values vary, and those of the
    VARYING_ARGS after them (in OWN_FIELDS order: a later one out of that order stays fixed);
    the rest is fixed.

    `node_args` puts the own fields first (with `op` among them, fixed for a shape), and
    nothing merged later replaces them.
    """
    items: list[tuple[str, Any, int]] = [(key, value, -1) for key, value in args.items()]
    fields = own_fields(node)
    head = len(fields) + (node.is_comm and node.coll is not None)
    j = 0
    for k in range(head):
        key = items[k][0]
        if key == "op" and node.is_comm:
            continue
        if key != OWN_FIELDS[fields[j]]:
            raise AssertionError(f"node {node.id}: args {list(args)} do not start with its own fields")
        items[k] = (key, None, fields[j])
        j += 1
    return ArgsShape(_with_varying(items, head))


def _with_varying(items: list[tuple[str, Any, int]], start: int) -> list[tuple[str, Any, int]]:
    """`items` with those of VARYING_ARGS from `start` on taken from columns, while their fields
    increase (a later one out of OWN_FIELDS order stays fixed)."""
    last = max((f for _, _, f in items[:start]), default=-1)
    for k in range(start, len(items)):
        f = _VARYING_FIELD.get(items[k][0], -1)
        if f > last:
            items[k] = (items[k][0], None, f)
            last = f
    return items


_VARYING_FIELD = {key: OWN_FIELDS.index(key) for key in VARYING_ARGS}


def varying_column(nodes, key: str) -> list:
    """The value `node_args` prints for `key` of each node's args (None: it prints none)."""
    values = list(map(operator.methodcaller("get", key), map(operator.attrgetter("args"), nodes)))
    kinds = set(map(type, values))
    if kinds <= {int, _NONE}:
        ints = [v for v in values if v is not None] if _NONE in kinds else values
        if not ints or (-(2**63) <= min(ints) and max(ints) < 2**63):
            return values  # what clean_arg would give
    return list(map(clean_arg, values))


_NONE = type(None)
_SCALARS = frozenset({str, int, float, bool, _NONE})


def args_key(raw: dict, own: list[str]) -> bytes | None:
    """What `node_args` takes from `raw` as JSON, for a node whose own fields fill `own`
    (they hide these keys of `raw`), when that says it all; else None (then no key).

    The VARYING_ARGS' values are printed from columns: the key says only where they are and
    whether they are printed. Only for str keys and scalar values of exactly these types: JSON
    then tells apart every two dicts `node_args` would print differently (1, 1.0, true; -0.0;
    NaN and inf are null, as None, and all three dropped), which it does not for nested lists
    or subclasses.
    """
    if not _SCALARS.issuperset(map(type, raw.values())):
        return None
    if not raw.keys().isdisjoint(own) or not raw.keys().isdisjoint(VARYING_ARGS):
        raw = {key: (0 if clean_arg(value) is not None else None) if key in _VARYING_FIELD else value
               for key, value in raw.items() if key not in own}
    try:
        # a copy: orjson's own result keeps its whole write buffer (kilobytes) allocated
        return bytes(memoryview(orjson.dumps(raw)))
    except TypeError:  # a key that is not a str, an int beyond 64 bits
        return None


class _CleanedArgs(dict):
    """id(node.args) -> (that dict, its items with `clean_arg` values, Nones dropped).

    Only dicts with str keys are cleaned this way (None for others: `node_args` then goes
    item by item); each dict is kept with its entry, so its id cannot be another's.
    """

    MAX_ENTRIES = 1 << 16

    def __call__(self, raw: dict) -> dict[str, Any] | None:
        found = self.get(id(raw))
        if found is not None and found[0] is raw:
            return found[1]
        if len(self) >= self.MAX_ENTRIES:
            self.clear()
        extra: dict[str, Any] | None = None
        if all(type(key) is str for key in raw):
            extra = {}
            for key, value in raw.items():
                value = clean_arg(value)
                if value is not None:
                    extra[key] = value
        self[id(raw)] = (raw, extra)
        return extra


def report_iteration(plan: Plan, diagnostics: Diagnostics) -> None:
    """One line with the scheduled iteration time, so a conversion shows what the model predicts.

    Measured timelines (logs) carry no summary: their times are the input's, not a prediction.
    """
    summary = plan.metadata.get("summary")
    if summary and summary.get("ranks"):
        from ..scheduler.summary import headline  # (a scheduled trace: the scheduler is loaded already)

        diagnostics.result(headline(summary))
