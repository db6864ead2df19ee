"""PyTorch profiler (Kineto) traces -> the model (README "PyTorch profiler traces").

Per rank (`rank_items`, needs that rank's file alone):
- GPU traces: every kernel / memcpy / memset on pid = device, tid = stream is an item on
  stream `stream <tid>`; NCCL kernels are communication, with their metadata from the
  kernel's args, else from the `record_param_comms` CPU op or `nccl:<coll>` annotation that
  shares its `External id`.
- CPU (gloo) traces: `c10d::<coll>` ops on the launching thread; the collective's work is the
  `gloo:<coll>` annotation on a process group's worker thread (the first one of the same kind
  starting after the op), sends and receives are the `gloo:send/recv` on the launching
  thread; the compute is the launching thread's top-level CPU ops.
- `--merge-compute` (default on): consecutive compute items of one stream with nothing between
  them that another stream waits for become one node (names in args).
- dependencies: stream order; a `cuda_sync` wait (stream S waits for stream W at t): S's first
  node after t waits for W's last node started before t, or, when the trace has the runtime calls
  (`cudaEventRecord` named by the wait's `wait_on_cuda_event_record_corr_id`, `cudaStreamWaitEvent`
  by its correlation) and the kernels' launch calls, host program order picks both ends: W's last
  kernel launched before the record call, S's first kernel launched after the wait call; gloo:
  the collective waits for the launching thread's work before it, and the launching thread's
  first op after the collective ends waits for it (the calls are synchronous).
- display only (`model.DisplaySpan`): the CPU ops that launched each NCCL kernel, for timelines.
- send/recv numbering (in `build_file`): the k-th transfer from a to b is tag k on both sides,
  so each rank numbers its own.

Across ranks (small): process groups from `pg_config` and the ops' `Process Group *` args,
the group of gloo and older NCCL collectives from the worker thread or stream (and
cross-rank matching of each group's sequence when that leaves a choice), clock alignment.

The phases follow `builders/per_rank.py` (`KINETO`), so `--jobs` and `--cluster` run the
per-rank work: `survey_file` reads a rank into its items and keeps them, sending on only its
facts and communication items; `plan` resolves groups and clocks from those; `build_file` makes the
rank's nodes where its items are; `merge` puts the ranks into the trace.
"""

from __future__ import annotations

import ast
import functools
import re
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import NamedTuple

from ..diagnostics import Diagnostics, InputError
from ..model import CollType, DisplaySpan, ExecutionTrace, Group, Node, NodeKind, Parallel, Rank
from ..options import Options
from ..readers.kineto import MAX_RANKS, Event, LaunchCalls, RankTrace, read_rank
from .per_rank import PerRankFormat, run as run_per_rank

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
COLLECTIVE_NAMES = {
    "allreduce": CollType.ALL_REDUCE, "all_reduce": CollType.ALL_REDUCE, "allreduce_coalesced": CollType.ALL_REDUCE,
    "allgather": CollType.ALL_GATHER, "all_gather": CollType.ALL_GATHER, "_allgather_base": CollType.ALL_GATHER,
    "allgather_into_tensor_coalesced": CollType.ALL_GATHER, "allgather_coalesced": CollType.ALL_GATHER,
    "all_gather_into_tensor": CollType.ALL_GATHER, "_all_gather_base": CollType.ALL_GATHER,
    "reduce_scatter": CollType.REDUCE_SCATTER, "_reduce_scatter_base": CollType.REDUCE_SCATTER,
    "reduce_scatter_tensor_coalesced": CollType.REDUCE_SCATTER, "reduce_scatter_tensor": CollType.REDUCE_SCATTER,
    "all_to_all": CollType.ALL_TO_ALL, "alltoall": CollType.ALL_TO_ALL, "alltoall_base": CollType.ALL_TO_ALL,
    "all_to_allv": CollType.ALL_TO_ALL, "broadcast": CollType.BROADCAST, "reduce": CollType.REDUCE,
    "gather": CollType.GATHER, "scatter": CollType.SCATTER, "barrier": CollType.BARRIER,
}
P2P_NAMES = {"send": NodeKind.SEND, "recv": NodeKind.RECV, "recv_": NodeKind.RECV, "recvanysource": NodeKind.RECV}
KERNEL_COLLECTIVES = (
    ("AllReduce", CollType.ALL_REDUCE), ("AllGather", CollType.ALL_GATHER), ("ReduceScatter", CollType.REDUCE_SCATTER),
    ("Broadcast", CollType.BROADCAST), ("Reduce", CollType.REDUCE), ("AllToAll", CollType.ALL_TO_ALL),
)
# dtype names of record_param_comms ("Float", "BFloat16") and of "Input type" ("float", "c10::BFloat16")
DTYPE_BYTES = {
    "float": 4, "float32": 4, "bfloat16": 2, "c10::bfloat16": 2, "half": 2, "c10::half": 2, "float16": 2,
    "double": 8, "float64": 8, "int": 4, "int32": 4, "long": 8, "long int": 8, "int64": 8, "short": 2,
    "short int": 2, "int16": 2, "byte": 1, "unsigned char": 1, "uint8": 1, "char": 1, "signed char": 1,
    "int8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
    "complexfloat": 8, "c10::complex<float>": 8,
}
# c10d op names -> the name of gloo's annotation of the same work
GLOO_WORK_NAMES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "_allgather_base": "all_gather",
    "alltoall": "all_to_all", "alltoall_base": "all_to_all", "recvanysource": "recv",
}
GROUP_KINDS = {"tp": "tp", "dp": "dp", "pp": "pp", "ep": "ep", "default_pg": "world"}
MAX_BYTES = (1 << 63) - 1  # Chakra's comm_size is an int64
STEP_NAME = re.compile(r"ProfilerStep#(\d+)$")
# Ranks whose aligned ends of one collective instance differ by more than this disagree.
ALIGNMENT_TOLERANCE_NS = 1_000_000


@dataclass(slots=True)
class Comm:
    """What a communication item says about itself (its group may be known only later)."""

    kind: NodeKind
    coll: CollType | None
    op: str  # the collective name as the trace spells it
    size: int
    dtype: str
    channel: tuple  # the stream or worker thread it ran on
    pg_name: str | None = None
    pg_ranks: tuple[int, ...] | None = None
    pg_desc: str = ""
    peer: int | None = None  # SEND: destination, RECV: source (global ranks)
    peer_in_group: bool = False  # gloo: `peer` as written, the rank in a process group not named (`_gloo_peers`)
    user_tag: int | None = None
    seq: int | None = None
    group: Group | None = None  # the model's group, once resolved


class StreamWait(NamedTuple):
    """`stream` waits for `other`: its first item starting at or after `at` waits for the last item
    of `other` starting before `before`; `other`'s compute is not merged across `cut`."""

    stream: str
    other: str
    at: int
    before: int
    cut: int


@dataclass(slots=True)
class Item:
    """One node-to-be of a rank, on its host clock."""

    name: str
    stream: str
    start: int
    end: int
    event: int  # its index in the file's traceEvents
    comm: Comm | None = None
    host_ts: int = 0  # when the host issued it (steps are host-side annotations)
    names: list[str] | None = None  # merged compute
    busy: int = 0
    waits: list | None = None  # items it waits for (indices into the rank's items once linked)
    node: Node | None = None
    # drawn only (model.DisplaySpan): (thread, name, start, end, args) of the CPU ops that launched it
    display: list[tuple] | None = None

    def wait_for(self, other) -> None:
        if self.waits is None:
            self.waits = [other]
        elif other not in self.waits:
            self.waits.append(other)


@dataclass
class RankItems:
    """One rank's part: its file's facts (`info`, events dropped) and its items; `waits` of each
    item are indices into `items`, so the part pickles flat (worker processes send it back)."""

    info: RankTrace
    items: list[Item]
    channels: dict[tuple, str]  # channel -> its thread or stream name, for group resolution
    runloop_threads: list[int]  # gloo worker threads, by tid
    assumptions: list[str] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def file(self) -> str:
        return self.info.file


def load(paths: list[Path], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    return run_per_rank(KINETO, paths, options, diagnostics)


# ---------------------------------------------------------------- per file, and across ranks (builders/per_rank.py)

@dataclass
class RankSurvey:
    """One rank's file as the other ranks need to know it (small): `plan_view` holds its facts and
    its communication items (for group resolution and clock alignment: the plan sets their groups,
    but `build` takes groups from the plan, so it does not matter whether these are the records'
    own items, as in the process that read the file, or copies); `records` is the whole part,
    kept for `build` in the process that read the file (None once the survey crossed processes:
    `build` then reads the file again)."""

    file: str  # the name as given (what messages and node sources say)
    path: str  # where to read it again (absolute when a worker elsewhere reads it)
    plan_view: RankItems
    earliest: int | None  # its first item's start, on its host clock
    peerless: tuple[int, int] | None  # sends/receives naming no peer: (count, first one's event)
    diagnostics: Diagnostics
    records: RankItems | None = None


@dataclass
class Plan:
    """What crosses ranks: the trace so far (groups, metadata, assumptions; merge adds the ranks),
    per rank the ns to subtract from its clock and the group id of each (channel, pg_name) its
    collectives use."""

    trace: ExecutionTrace
    shifts: dict[int, int]
    group_ids: dict[int, dict[tuple, int]]
    gloo_peers: dict[int, dict[int, int]]  # rank -> event of a gloo send/recv -> its peer (`_gloo_peers`)


@dataclass
class RankPart:
    rank: Rank
    has_barrier: bool


def survey_file(path: Path, options: Options, name: str) -> RankSurvey:
    """One rank's file -> its items (the per-rank work: reading, linking, merging); the events are
    freed, the communication items are what the plan sees."""
    rt = _read_named(path, name)
    part = rank_items(rt, options)
    rt.events = []
    rt.launches = LaunchCalls()
    communication = [it for it in part.items if it.comm is not None]
    view = RankItems(rt, communication, part.channels, part.runloop_threads, part.assumptions)
    earliest = min((it.start for it in part.items), default=None)
    return RankSurvey(name, str(path), view, earliest, _peerless(communication), Diagnostics(), part)


def _read_named(path: Path, name: str) -> RankTrace:
    """`read_rank`, with the file named as the user gave it: a Dask worker opens the absolute path,
    but messages and node sources say the given name, as a local run does."""
    try:
        rt = read_rank(path)
    except InputError as e:
        if e.where is None or not e.where.startswith(str(path)):
            raise
        raise InputError(name + e.where[len(str(path)):], e.message) from None
    rt.file = name
    return rt


def plan(surveys: list[RankSurvey], paths: list[Path], options: Options, diagnostics: Diagnostics) -> Plan:
    """Groups, clock offsets and the time origin, from every rank's survey; two files of one rank are an error."""
    per_rank = _by_rank(surveys)
    traces = [view.info for view in per_rank.values()]
    trace = ExecutionTrace()
    trace.timing = "measured"
    trace.units = {"time": "µs with ns decimals (converted exactly to integer ns)",
                   "size": "message elements x dtype bytes"}
    world = max((t.world_size or 0 for t in traces), default=0) or (max(t.rank for t in traces) + 1)
    for view in per_rank.values():
        for sentence in view.assumptions:
            trace.assume(sentence)
    trace.metadata["backend"] = ",".join(sorted({t.backend for t in traces if t.backend}))
    groups = _Groups(trace, _pg_configs(traces), world)
    groups.resolve(per_rank, traces, diagnostics)
    _gloo_peers(per_rank, trace)
    hosts = {t.rank: t.host or f"rank {t.rank}" for t in traces}
    offsets = _align_clocks(per_rank, hosts, trace, diagnostics)
    _warn_peerless(sorted(surveys, key=lambda s: s.plan_view.rank), trace, diagnostics)
    earliest = [s.earliest - offsets[s.plan_view.rank] for s in surveys if s.earliest is not None]
    origin = min(earliest, default=0)
    trace.time_origin_ns = origin
    trace.parallel = groups.parallel()
    trace.metadata["ranks_in_job"] = world
    trace.source.files = [Path(t.file).name for t in traces]
    group_ids = {r: {(it.comm.channel, it.comm.pg_name): it.comm.group.id for it in view.items if it.comm.group}
                 for r, view in per_rank.items()}
    gloo_peers = {r: {it.event: it.comm.peer for it in view.items if it.comm.peer_in_group}
                  for r, view in per_rank.items()}
    return Plan(trace, {r: offsets[r] + origin for r in per_rank}, group_ids, gloo_peers)


def _by_rank(surveys: list[RankSurvey]) -> dict[int, RankItems]:
    """Every survey's plan view by rank, in rank order; a rank given twice is an error naming both files."""
    seen: dict[int, RankItems] = {}
    for survey in surveys:
        view = survey.plan_view
        other = seen.get(view.rank)
        if other is not None:
            raise InputError(view.file, f"rank {view.rank} (from its {view.info.rank_from}) is also in {other.file}; "
                                        "give each rank's trace once")
        seen[view.rank] = view
    return dict(sorted(seen.items()))


def build_file(survey: RankSurvey, plan: Plan, options: Options) -> list[RankPart]:
    """The rank's nodes on the common clock, with the plan's groups."""
    part = survey.records
    if part is None:
        part = survey_file(Path(survey.path), options, survey.file).records
    survey.records = None
    _settle_gloo_peers(part, plan.gloo_peers[part.rank])
    _number_transfers(part)
    rank = _rank_nodes(part, plan.shifts[part.rank], plan.group_ids[part.rank])
    has_barrier = any(it.comm is not None and it.comm.coll == CollType.BARRIER for it in part.items)
    return [RankPart(rank, has_barrier)]


def merge(plan: Plan, parts: list[RankPart], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    """The model from every rank's part, in rank order whatever order the parts came in."""
    joined = join(plan, [summarize(part) for part in parts], options, diagnostics)
    for part in sorted(parts, key=lambda p: p.rank.rank):
        joined.trace.ranks[part.rank.rank] = finish(part, joined)
    return joined.trace


# The merge in two (builders/per_rank.py), so that workers keep and finish their own parts: the
# plan already holds everything across ranks, so a part tells only whether it has a barrier.

@dataclass
class Joined:
    trace: ExecutionTrace  # the model without its ranks


def summarize(part: RankPart) -> bool:
    return part.has_barrier


def join(plan: Plan, has_barrier: list[bool], options: Options, diagnostics: Diagnostics) -> Joined:
    if any(has_barrier):  # ASTRA-sim cannot simulate a barrier; NCCL and gloo reduce
        plan.trace.assume("barriers are written as all-reduces of their message (how NCCL and gloo run them)")
    return Joined(plan.trace)


def finish(part: RankPart, joined: Joined) -> Rank:
    return part.rank


KINETO = PerRankFormat(survey_file, plan, build_file, merge, summarize, join, finish)
PER_RANK_FORMAT = KINETO  # what `converters.api` looks for to let workers draw a timeline or write a Chakra set


# ---------------------------------------------------------------- one rank

def rank_items(rt: RankTrace, options: Options) -> RankItems:
    """The rank's items (compute, communication) with their in-rank dependencies."""
    notes: list[str] = []
    if rt.rank_from == "file name":
        notes.append(f"rank of {Path(rt.file).name} read from its file name (no distributedInfo.rank)")
    steps = _steps(rt)
    if any(e.cat in GPU_CATEGORIES for e in rt.events):
        items, waits = _gpu_items(rt, notes)
        runloop = []
    else:
        items, waits = _cpu_items(rt)
        runloop = _gloo_workers(rt, {it.comm.channel[1] for it in items if it.comm and it.stream == "cpu"})
    if options.step is not None:
        items = _in_step(items, steps, options.step, rt)
        notes.append(f"only ProfilerStep#{options.step} is converted (--step)")
    if options.merge_compute:
        items = _merged(items, waits)
    items = _link(items, waits)
    channels = {it.comm.channel: it.stream for it in items if it.comm is not None}
    return RankItems(rt, items, channels, runloop, notes)


def _gloo_workers(rt: RankTrace, launching: set) -> list[int]:
    """gloo's worker threads by id: named pt_gloo_runloop, or doing gloo collectives (Kineto sometimes
    names a worker after the process instead)."""
    named = {tid for (_, tid), name in rt.thread_names.items() if "gloo" in name}
    working = {e.tid for e in rt.events if e.cat == "user_annotation" and e.name.startswith("gloo:")}
    return sorted(tid for tid in named | working if isinstance(tid, int) and tid not in launching)


def _steps(rt: RankTrace) -> dict[int, tuple[int, int]]:
    steps = {}
    for e in rt.events:
        if e.cat == "user_annotation":
            m = STEP_NAME.match(e.name)
            if m:
                steps[int(m.group(1))] = (e.ts_ns, e.end_ns)
    return steps


def _in_step(items: list[Item], steps, step: int, rt: RankTrace) -> list[Item]:
    if step not in steps:
        known = ", ".join(map(str, sorted(steps))) or "none"
        raise InputError(rt.file, f"no ProfilerStep#{step} in this trace (steps: {known})")
    low, high = steps[step]
    return [it for it in items if low <= it.host_ts <= high]


def _gpu_items(rt: RankTrace, notes: list[str]) -> tuple[list[Item], list[StreamWait]]:
    by_external: dict[object, list[Event]] = defaultdict(list)
    calls: dict[int, Event] = {}  # correlation -> a cudaEventRecord or cudaStreamWaitEvent call
    for e in rt.events:
        if e.cat in ("cpu_op", "user_annotation") and e.external is not None:
            by_external[e.external].append(e)
        elif e.cat == "cuda_runtime" and e.correlation is not None:
            calls[e.correlation] = e
    launches = rt.launches  # correlation -> (ts, dur, tid, name) of the call that launched a kernel
    items, syncs, launched = [], [], []
    for e in rt.events:
        if e.cat == "cuda_sync" and "wait_on_stream" in e.args:
            syncs.append(e)
            continue
        if e.cat not in GPU_CATEGORIES:
            continue
        host = by_external.get(e.external, [])
        item = Item(e.name, _stream(e.tid), e.ts_ns, e.end_ns, e.index,
                    host_ts=host[0].ts_ns if host else e.ts_ns, busy=e.dur_ns)
        if e.cat == "kernel" and "nccl" in e.name.lower():
            item.comm = _nccl_comm(e, host, rt, notes)
            item.name = _comm_name(item.comm)
            item.display = _launch_spans(item, host, launches.get(e.correlation))
        items.append(item)
        if calls:  # host launch order places the ends of waits (`_stream_waits`)
            launch = launches.get(e.correlation)
            if launch is not None:
                launched.append((launch[0], item))
    return items, _stream_waits(syncs, launched, calls, notes)


def _stream_waits(syncs: list[Event], launched: list[tuple[int, Item]], calls: dict[int, Event],
                  notes: list[str]) -> list[StreamWait]:
    """The cross-stream waits of `cuda_sync` "Stream Wait Event"s (README "PyTorch profiler traces").

    Kineto writes no stream on the runtime calls (only `cbid` and `correlation`): the streams come
    from the `cuda_sync` event (`stream` waits for `wait_on_stream`); the calls, when present, only
    place both ends in host program order, which the GPU times cannot (the host runs ahead)."""
    by_stream: dict[str, list[tuple[int, Item]]] = defaultdict(list)  # launch call time, item
    for launch_ts, item in sorted(launched, key=lambda pair: pair[0]):
        by_stream[item.stream].append((launch_ts, item))
    waits, unknown = [], 0
    for e in syncs:
        if type(e.tid) is int and e.tid < 0:  # the host waits (Event Sync): no stream does
            continue
        if e.args["wait_on_stream"] < 0:  # Kineto did not see which stream recorded the event
            unknown += 1
            continue
        stream, other = _stream(e.tid), _stream(e.args["wait_on_stream"])
        at = before = cut = e.ts_ns
        record = calls.get(e.args.get("wait_on_cuda_event_record_corr_id"))
        producer = _launched_next_to(by_stream.get(other, []), record.ts_ns, after=False) if record else None
        if producer is not None:
            before, cut = producer.start + 1, producer.end
        call = calls.get(e.correlation)
        consumer = _launched_next_to(by_stream.get(stream, []), call.ts_ns, after=True) if call else None
        if consumer is not None:
            at = consumer.start
        waits.append(StreamWait(stream, other, at, before, cut))
    if unknown:
        notes.append("cross-stream waits whose cuda_sync event names no recording stream (wait_on_stream -1) "
                     "are not kept as dependencies (Kineto writes no stream on the runtime calls)")
    if not syncs and any(c.name == "cudaStreamWaitEvent" for c in calls.values()):
        notes.append("cudaStreamWaitEvent calls without cuda_sync events (profile with enable_cuda_sync_events): "
                     "the runtime calls name no stream, so those cross-stream waits are not known; "
                     "streams are ordered only within themselves")
    return waits


def _launched_next_to(launched: list[tuple[int, Item]], ts: int, after: bool) -> Item | None:
    """Of items sorted by launch call time, the first launched after `ts` or the last launched before it."""
    k = bisect_left(launched, ts, key=lambda pair: pair[0])
    if after:
        while k < len(launched) and launched[k][0] <= ts:
            k += 1
        return launched[k][1] if k < len(launched) else None
    return launched[k - 1][1] if k > 0 else None


def _launch_spans(item: Item, host: list[Event], launch: tuple | None) -> list[tuple]:
    """The CPU ops (same External id) and runtime call (same correlation) that launched a
    communication kernel, each on its CPU thread: drawn beside the kernel, never nodes."""
    args = {"launched": f"{item.name} on {item.stream}"}  # one dict for the kernel's spans
    spans = [(_cpu_thread(e.tid), e.name, e.ts_ns, e.end_ns, args) for e in host]
    if launch is not None:
        ts, dur, tid, name = launch
        spans.append((_cpu_thread(tid), name, ts, ts + dur, args))
    return spans


@functools.lru_cache(maxsize=1 << 10)
def _cpu_thread(tid) -> str:
    return f"cpu thread {tid}"


def _display_spans(items: list[Item], shift: int) -> list[DisplaySpan]:
    """The rank's display-only spans, on the model's clock, each naming the node it launched."""
    return [DisplaySpan(thread, name, start - shift, max(0, end - start), args, node=it.node.id)
            for it in items for thread, name, start, end, args in it.display or ()]


@functools.lru_cache(maxsize=1 << 10)
def _stream(tid) -> str:
    return f"stream {tid}"


def _nccl_comm(kernel: Event, host: list[Event], rt: RankTrace, notes: list[str]) -> Comm:
    meta = kernel.args if "Collective name" in kernel.args else next(
        (h.args for h in host if "Collective name" in h.args), None)
    channel = ("stream", kernel.tid)
    if meta is not None:
        return _comm_from_meta(meta, channel, rt, kernel)
    # older traces: the type from the kernel name, the size from the nccl:<coll> annotation
    annotation = next((h for h in host if h.name.startswith("nccl:")), None)
    op = annotation.name.removeprefix("nccl:") if annotation else _kernel_op(kernel.name)
    kind, coll = _kind_of(op, kernel.name)
    size, dtype = _size_from_inputs(annotation, rt, kernel) if annotation else (1, "")
    if annotation is None:
        notes.append("NCCL kernels without collective args or an nccl:<coll> annotation are written with size 1 byte")
    return Comm(kind, coll, op, size, dtype, channel)


def _kernel_op(name: str) -> str:
    for word, coll in KERNEL_COLLECTIVES:
        if f"_{word}_" in name or name.endswith(f"_{word}"):
            return word.lower()
    return "sendrecv" if "SendRecv" in name else "unknown"


def _kind_of(op: str, what: str) -> tuple[NodeKind, CollType | None]:
    key = op.lower()
    if key in P2P_NAMES:
        return P2P_NAMES[key], None
    coll = COLLECTIVE_NAMES.get(key)
    if coll is None:
        if key == "sendrecv":
            return NodeKind.SEND, None  # direction unknown: a peerless transfer, reported later
        return NodeKind.COLLECTIVE, None
    return NodeKind.COLLECTIVE, coll


def _comm_from_meta(meta: dict, channel: tuple, rt: RankTrace, event: Event) -> Comm:
    op = str(meta.get("Collective name", ""))
    kind, coll = _kind_of(op, event.name)
    dtype = str(meta.get("dtype", ""))
    width = _width(dtype, rt, event)
    elems_in, elems_out = _int(meta.get("In msg nelems")), _int(meta.get("Out msg nelems"))
    elems = elems_out if kind == NodeKind.RECV and elems_out else elems_in or elems_out
    comm = Comm(kind, coll, op, _bytes(elems, width, rt, event), dtype, channel)
    if meta.get("Process Group Name") is not None:
        comm.pg_name = str(meta["Process Group Name"])
    comm.pg_desc = str(meta.get("Process Group Description") or "")
    comm.pg_ranks = _rank_tuple(meta.get("Process Group Ranks"))
    comm.seq = _int(meta.get("Seq"), None)
    peer = meta.get("Dst Rank") if kind == NodeKind.SEND else meta.get("Src Rank")
    comm.peer = _int(peer, None)
    return comm


def _int(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _rank_tuple(text) -> tuple[int, ...] | None:
    """The ranks of "Process Group Ranks" (a list, or its text); None when unreadable (then pg_config says)."""
    if isinstance(text, list):
        return _ranks_or_none(text)
    if not isinstance(text, str) or not text.startswith("["):
        return None
    return _parsed_ranks(text)


@functools.lru_cache(maxsize=1 << 12)
def _parsed_ranks(text: str) -> tuple[int, ...] | None:
    """A "Process Group Ranks" string as ranks (each group's string repeats on every collective)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None  # Kineto shortens long rank lists ("[0, 1, ...]")
    return _ranks_or_none(value) if isinstance(value, (list, tuple)) else None


def _ranks_or_none(values) -> tuple[int, ...] | None:
    if values and all(type(r) is int and 0 <= r < MAX_RANKS for r in values):
        return tuple(values)
    return None


def _width(dtype: str, rt: RankTrace, event: Event) -> int:
    width = DTYPE_BYTES.get(dtype.lower())
    if width is None:
        raise InputError(rt.where(event), f"unknown dtype {dtype!r} for {event.name!r}; "
                                          f"known: {', '.join(sorted(DTYPE_BYTES))}")
    return width


def _size_from_inputs(event: Event, rt: RankTrace, where: Event) -> tuple[int, str]:
    """Bytes of the first input tensor: `Input Dims` x the `Input type` width."""
    dims, types = event.args.get("Input Dims") or [], event.args.get("Input type") or []
    for shape, dtype in zip(dims, types):
        while isinstance(shape, list) and shape and isinstance(shape[0], list):  # a TensorList
            shape = shape[0]
        if isinstance(shape, list) and shape and dtype:
            if not all(type(d) is int and 0 <= d < 1 << 40 for d in shape):
                raise InputError(rt.where(event), f"Input Dims {shape} are not sizes")
            return _bytes(prod(shape), _width(str(dtype), rt, where), rt, event), str(dtype)
    return 1, ""


def _bytes(elements: int, width: int, rt: RankTrace, event: Event) -> int:
    """A message's bytes (at least 1), within what Chakra's int64 comm_size holds."""
    size = max(1, elements * width)
    if size > MAX_BYTES:
        raise InputError(rt.where(event), f"a message of {size} bytes is more than a Chakra size holds")
    return size


def _comm_name(comm: Comm) -> str:
    """The op as the trace names it (writers add the size)."""
    if comm.kind == NodeKind.COLLECTIVE:
        return comm.op
    peer = "?" if comm.peer is None else comm.peer
    return f"send to {peer}" if comm.kind == NodeKind.SEND else f"recv from {peer}"


def _cpu_items(rt: RankTrace) -> tuple[list[Item], list]:
    """gloo (CPU) traces: the c10d ops, the work their groups' worker threads did, and the compute."""
    launches = [e for e in rt.events if e.cat == "cpu_op" and e.name.startswith("c10d::")]
    main_threads = {e.tid for e in launches} or {_busiest_thread(rt)}
    work = _WorkQueue(e for e in rt.events if e.cat == "user_annotation" and e.name.startswith("gloo:"))
    items: list[Item] = []
    for launch in launches:
        op = launch.name.removeprefix("c10d::").rstrip("_").lower()
        if op in ("wait", "monitored_barrier"):
            continue
        kind, coll = _kind_of(op, launch.name)
        done = work.claim(launch, op, kind)
        source = done or launch
        size, dtype = _size_from_inputs(source, rt, source)
        channel = ("thread", source.tid)
        comm = Comm(kind, coll, op, size, dtype, channel)
        if kind != NodeKind.COLLECTIVE:
            inputs = launch.args.get("Concrete Inputs") or []
            comm.peer = _int(inputs[2], None) if len(inputs) > 2 else None
            comm.peer_in_group = comm.peer is not None
            comm.user_tag = _int(inputs[3], None) if len(inputs) > 3 else None
        stream = "cpu" if source.tid in main_threads else f"gloo thread {source.tid}"
        start = min(launch.ts_ns, source.ts_ns)
        items.append(Item(_comm_name(comm), stream, start, max(source.end_ns, launch.end_ns), launch.index,
                          comm, host_ts=launch.ts_ns))
    items.extend(_top_level_compute(rt, main_threads, launches, work))
    items.sort(key=lambda it: (it.start, it.end))
    return items, []


def _busiest_thread(rt: RankTrace):
    counts: dict = defaultdict(int)
    for e in rt.events:
        if e.cat == "cpu_op":
            counts[e.tid] += 1
    return max(counts, key=lambda t: (counts[t], str(t))) if counts else None


class _WorkQueue:
    """The gloo:<op> annotations by name, in time order, each claimed by one c10d op."""

    def __init__(self, events):
        self.by_name: dict[str, list[Event]] = defaultdict(list)
        for e in events:
            self.by_name[e.name].append(e)
        self.claimed: set[int] = set()
        self.first_open: dict[str, int] = defaultdict(int)

    def claim(self, launch: Event, op: str, kind: NodeKind) -> Event | None:
        """The annotation that did this c10d op's work: the first unclaimed one of its kind that
        starts after the op started (on the launching thread for sends and receives)."""
        wanted = "gloo:" + GLOO_WORK_NAMES.get(op, op)
        queue = self.by_name.get(wanted, [])
        i = self.first_open[wanted]
        while i < len(queue) and queue[i].index in self.claimed:
            i += 1
        self.first_open[wanted] = i
        for e in queue[i:]:
            if e.index in self.claimed or e.ts_ns < launch.ts_ns:
                continue
            if kind != NodeKind.COLLECTIVE and e.tid != launch.tid:
                continue
            self.claimed.add(e.index)
            return e
        return None


def _top_level_compute(rt: RankTrace, threads: set, launches: list[Event], work: list[Event]) -> list[Item]:
    """The launching threads' outermost CPU ops (not inside another op, a c10d op or gloo work)."""
    items = []
    for tid in sorted(threads, key=str):
        open_until = -1
        for e in rt.events:
            if e.tid != tid or e.cat != "cpu_op":
                continue
            if e.ts_ns < open_until:
                continue  # inside the previous top-level op
            open_until = e.end_ns
            if e.name.startswith("c10d::"):
                continue
            items.append(Item(e.name, "cpu", e.ts_ns, e.end_ns, e.index, host_ts=e.ts_ns, busy=e.dur_ns))
    return items


def _merged(items: list[Item], waits: list[StreamWait]) -> list[Item]:
    """Consecutive compute items of one stream as one node, unless a communication item, or a
    point another stream waits at, lies between them."""
    cuts: dict[str, list[int]] = defaultdict(list)
    for wait in waits:
        cuts[wait.stream].append(wait.at)
        cuts[wait.other].append(wait.cut)
    for it in items:
        if it.comm is not None:
            cuts["cpu" if it.stream.startswith("gloo") else it.stream].append(it.start)
    for stream in cuts:
        cuts[stream].sort()
    out: list[Item] = []
    open_by_stream: dict[str, Item] = {}
    for it in items:
        if it.comm is not None:
            out.append(it)
            continue
        prev = open_by_stream.get(it.stream)
        if prev is not None and not _cut_between(prev.end, it.start, cuts[it.stream]):
            prev.names.append(it.name)
            prev.end = max(prev.end, it.end)
            prev.busy += it.busy
            continue
        it.names = [it.name]
        open_by_stream[it.stream] = it
        out.append(it)
    for it in out:
        if it.names and len(it.names) > 1:
            it.name = f"{it.names[0]} +{len(it.names) - 1}"
    return out


def _cut_between(low: int, high: int, cuts: list[int]) -> bool:
    """True when a cut (sorted) lies in [low, high]."""
    i = bisect_left(cuts, low)
    return i < len(cuts) and cuts[i] <= high


def _link(items: list[Item], waits: list[StreamWait]) -> list[Item]:
    """Dependencies inside the rank: stream order, cuda_sync waits, synchronous gloo calls.
    Returns the items in time order, each item's `waits` as indices into that list."""
    by_stream: dict[str, list[Item]] = defaultdict(list)
    for it in sorted(items, key=lambda i: (i.start, i.end)):
        by_stream[it.stream].append(it)
    for stream, its in by_stream.items():
        for before, after in zip(its, its[1:]):
            after.wait_for(before)
    starts = {stream: [i.start for i in its] for stream, its in by_stream.items()}
    for stream, other, at, before, _ in waits:
        if stream not in by_stream or other not in by_stream:
            continue
        k = bisect_left(starts[stream], at)
        j = bisect_left(starts[other], before) - 1
        if k < len(by_stream[stream]) and j >= 0:
            by_stream[stream][k].wait_for(by_stream[other][j])
    main = by_stream.get("cpu", [])
    main_starts = [i.start for i in main]
    for it in items:
        if it.comm is None or not it.stream.startswith("gloo"):
            continue
        j = bisect_left(main_starts, it.host_ts) - 1
        if j >= 0:
            it.wait_for(main[j])
        k = bisect_left(main_starts, it.end)
        if k < len(main):
            main[k].wait_for(it)
    ordered = sorted(items, key=lambda i: (i.start, i.end, i.stream))
    position = {id(it): index for index, it in enumerate(ordered)}
    for it in ordered:
        if it.waits:
            it.waits = [position[id(w)] for w in it.waits]
    return ordered


# ---------------------------------------------------------------- groups

def _pg_configs(traces: list[RankTrace]) -> dict[str, dict]:
    """pg_name -> {desc, ranks} over every rank's pg_config; one name with two member lists is an error."""
    configs: dict[str, dict] = {}
    for rt in traces:
        for entry in rt.pg_config or []:
            known = configs.get(entry["pg_name"])
            if known is None:
                configs[entry["pg_name"]] = {"desc": entry["pg_desc"], "ranks": tuple(entry["ranks"]), "file": rt.file}
            elif known["ranks"] != tuple(entry["ranks"]):
                raise InputError(rt.file, f"process group {entry['pg_name']!r} has ranks {entry['ranks']} here but "
                                          f"{list(known['ranks'])} in {known['file']}")
    return configs


class _Groups:
    """The job's process groups in the model, and which one each communication item used."""

    def __init__(self, trace: ExecutionTrace, configs: dict[str, dict], world: int):
        self.trace, self.configs, self.world = trace, configs, world
        self.by_name: dict[str, Group] = {}
        for name in sorted(configs, key=_name_order):
            self._group(name, configs[name]["desc"], configs[name]["ranks"])

    def _group(self, pg_name: str, desc: str, members: tuple[int, ...]) -> Group:
        group = self.by_name.get(pg_name)
        if group is None:
            kind = GROUP_KINDS.get(desc.lower(), "")
            if len(members) == self.world and not kind:
                kind = "world"
            group = self.trace.add_group(kind, members, name=f"{desc or 'pg'}#{pg_name}")
            self.by_name[pg_name] = group
        return group

    def resolve(self, per_rank: dict[int, RankItems], traces: list[RankTrace], diagnostics: Diagnostics) -> None:
        unresolved: dict[int, dict[tuple, list[Item]]] = defaultdict(lambda: defaultdict(list))
        for r, ri in per_rank.items():
            for it in ri.items:
                comm = it.comm
                if comm is None or comm.kind != NodeKind.COLLECTIVE:
                    continue
                if comm.pg_name is not None:
                    members = comm.pg_ranks or self.configs.get(comm.pg_name, {}).get("ranks")
                    if members is None:
                        raise InputError(f"{ri.file}: event {it.event}", f"process group {comm.pg_name!r} is not in "
                                         "any pg_config and its ranks are not written")
                    comm.group = self._group(comm.pg_name, comm.pg_desc, tuple(sorted(members)))
                    continue
                unresolved[r][comm.channel].append(it)
        if unresolved:
            self._resolve_channels(unresolved, per_rank, {t.rank: t for t in traces}, diagnostics)

    def _candidates(self, rank: int, rt: RankTrace, channels: int) -> list[Group]:
        """The groups rank's collectives may have used: its pg_config groups; without pg_config
        the world group when the rank uses one channel (with more, the others are unknown)."""
        if rt.pg_config is not None:
            return [self.by_name[e["pg_name"]] for e in rt.pg_config if rank in e["ranks"]]
        world = self._group("0", "default_pg", tuple(range(self.world)))
        if channels == 1:
            self.trace.assume("no pg_config in the traces and one collective stream per rank: the world group")
            return [world]
        return [world, Group(0, "", (), "unknown groups (no pg_config)")]

    def _resolve_channels(self, unresolved, per_rank, traces, diagnostics) -> None:
        """Each channel (worker thread, stream) serves one process group; find which."""
        chosen: dict[tuple[int, tuple], Group] = {}
        signatures = {(r, ch): _signature(its) for r, chans in unresolved.items() for ch, its in chans.items()}
        for r, chans in sorted(unresolved.items()):
            candidates = self._candidates(r, traces[r], len(chans))
            by_thread = _by_thread_order(per_rank[r].runloop_threads, candidates)
            for ch in chans:
                if len(candidates) == 1:
                    chosen[(r, ch)] = candidates[0]
                elif ch[0] == "thread" and ch[1] in by_thread:
                    chosen[(r, ch)] = by_thread[ch[1]]
        if any(ch[0] == "thread" for chans in unresolved.values() for ch in chans) and chosen:
            self.trace.assume("gloo collectives: each process group's worker threads were created together, in "
                              "pg_config order, so the worker thread (by thread id) tells the group")
        for r, chans in sorted(unresolved.items()):
            for ch in chans:
                if (r, ch) in chosen:
                    continue
                candidates = self._candidates(r, traces[r], len(chans))
                fits = [g for g in candidates
                        if all(any(signatures.get((m, c)) == signatures[(r, ch)] for c in unresolved.get(m, {}))
                               for m in g.members if m in per_rank)]
                if len(fits) != 1:
                    names = ", ".join(f"{g.label} {list(g.members)}" for g in (fits or candidates))
                    raise InputError(per_rank[r].file, f"cannot tell which process group rank {r}'s collectives on "
                                     f"{per_rank[r].channels.get(ch, ch)} used: candidates {names}; the trace writes "
                                     "no group (use traces of PyTorch with record_param_comms metadata)")
                chosen[(r, ch)] = fits[0]
        for (r, ch), group in chosen.items():
            for it in unresolved[r][ch]:
                it.comm.group = group

    def parallel(self) -> Parallel:
        sizes: dict[str, set[int]] = defaultdict(set)
        for g in self.trace.groups.values():
            sizes[g.kind].add(len(g.members))
        tp = _only(sizes.get("tp"))
        pp = _only(sizes.get("pp"))
        dp = _only(sizes["dp"]) if "dp" in sizes else self.world // (tp * pp)  # the rest, when no group says
        if tp * dp * pp != self.world:
            for g in self.trace.groups.values():  # kinds that do not multiply to the world are only names
                if g.kind in ("tp", "dp", "pp", "ep"):
                    g.kind = ""
            return Parallel(world=self.world, dp=self.world)
        return Parallel(world=self.world, tp=tp, dp=dp, pp=pp)


def _only(values: set[int] | None) -> int:
    return next(iter(values)) if values and len(values) == 1 else 1


def _name_order(name: str):
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def _signature(items: list[Item]) -> tuple:
    return tuple((it.comm.coll, it.comm.size) for it in items)


def _by_thread_order(threads: list[int], candidates: list[Group]) -> dict[int, Group]:
    """gloo worker threads by id, cut into equal runs in pg_config order (one run per group)."""
    if not threads or not candidates or len(threads) % len(candidates):
        return {}
    per = len(threads) // len(candidates)
    return {tid: candidates[i // per] for i, tid in enumerate(threads)}


# ---------------------------------------------------------------- across ranks

def _instances(per_rank: dict[int, RankItems]) -> dict[str, dict[int, list[Item]]]:
    """Group label -> rank -> its collectives in that group, in order (the k-th is instance k)."""
    out: dict[str, dict[int, list[Item]]] = defaultdict(lambda: defaultdict(list))
    for r, ri in per_rank.items():
        for it in sorted(ri.items, key=lambda i: (i.start, i.end)):
            if it.comm is not None and it.comm.kind == NodeKind.COLLECTIVE and it.comm.group is not None:
                out[it.comm.group.label][r].append(it)
    return out


def _align_clocks(per_rank: dict[int, RankItems], hosts: dict[int, str], trace: ExecutionTrace,
                  diagnostics: Diagnostics) -> dict[int, int]:
    """Per rank, the ns to subtract from its clock so that the first collective of the largest
    group ends at the same time on every member (then the next groups, for ranks outside it).
    Ranks of one host (the trace's host_name) share a clock and one offset."""
    instances = _instances(per_rank)
    ranks = sorted(per_rank)
    by_host: dict[str, list[int]] = defaultdict(list)
    for r in ranks:
        by_host[hosts[r]].append(r)
    offsets: dict[int, int] = {r: 0 for r in by_host[hosts[ranks[0]]]}
    order = sorted(instances, key=lambda name: (-len(instances[name]), name))
    used: list[str] = []
    changed = True
    while changed and len(offsets) < len(ranks):
        changed = False
        for name in order:
            members = instances[name]
            anchor = next((r for r in sorted(members) if r in offsets and members[r]), None)
            if anchor is None:
                continue
            end = members[anchor][0].end - offsets[anchor]
            for r, its in sorted(members.items()):
                if r not in offsets and its:
                    for same in by_host[hosts[r]]:
                        offsets[same] = its[0].end - end
                    changed = True
                    if name not in used:
                        used.append(name)
    alone = [r for r in ranks if r not in offsets]
    for r in alone:
        offsets[r] = 0
    if alone:
        diagnostics.warn("kineto-unaligned", f"ranks {', '.join(map(str, alone))} share no collective with the "
                                             "others; their clocks are not aligned")
    spread, where = _disagreement(instances, offsets, hosts)
    one_host = len(by_host) == 1
    trace.metadata["clock_alignment"] = {
        "method": "one host: one clock" if one_host else
                  "the first collective of each group ends at the same time on every member; "
                  "ranks of one host share a clock",
        "groups_used": used,
        "offsets_ns": {str(r): offsets[r] for r in ranks},
        "max_disagreement_ns": spread,
    }
    if not one_host:
        trace.assume("ranks' clocks aligned: the first collective of the largest group (then of each group in turn) "
                     "ends at the same time on every member; ranks with the same host_name share a clock")
    if spread > ALIGNMENT_TOLERANCE_NS:
        diagnostics.warn("kineto-clock-disagreement", f"after clock alignment, the members of {where} on different "
                         f"hosts end {spread / 1e6:.3f} ms apart (more than {ALIGNMENT_TOLERANCE_NS / 1e6:g} ms): "
                         "the hosts' clocks drift or a collective is missing; cross-rank times are approximate")
    return offsets


def _disagreement(instances, offsets, hosts) -> tuple[int, str]:
    """The largest spread of one collective instance's aligned ends between ranks of different hosts."""
    worst, where = 0, ""
    for name, members in instances.items():
        count = min((len(its) for its in members.values()), default=0)
        for k in range(count):
            ends: dict[str, list[int]] = defaultdict(list)
            for r, its in members.items():
                ends[hosts[r]].append(its[k].end - offsets[r])
            if len(ends) < 2:
                continue
            latest = [max(e) for e in ends.values()]
            spread = max(latest) - min(latest)
            if spread > worst:
                worst, where = spread, f"{name} collective {k}"
    return worst, where


def _gloo_peers(per_rank: dict[int, RankItems], trace: ExecutionTrace) -> None:
    """gloo send/recv peers as global ranks. A c10d op's `Concrete Inputs` hold the peer's rank in
    the process group the op used, which the trace does not name: each of the rank's `pg_config`
    groups gives a reading (member at that index); when they differ, the reading whose peer has the
    matching op (the opposite kind, naming this rank's index in that group, same tag) decides; when
    none or several do, the default-group reading stays, said as an assumption."""
    written: dict[int, set[tuple]] = defaultdict(set)  # rank -> (kind, peer as written, tag) of its gloo p2p ops
    for r, ri in per_rank.items():
        for it in ri.items:
            if it.comm is not None and it.comm.peer_in_group:
                written[r].add((it.comm.kind, it.comm.peer, it.comm.user_tag))
    unresolved = 0
    for r in sorted(written):
        if per_rank[r].info.pg_config is None:
            trace.assume("gloo send/recv peers are read as default-group ranks (no pg_config names the groups)")
        groups = [tuple(e["ranks"]) for e in per_rank[r].info.pg_config or [] if r in e["ranks"]]
        for it in per_rank[r].items:
            comm = it.comm
            if comm is None or not comm.peer_in_group:
                continue
            readings = {g[comm.peer]: g for g in groups if comm.peer < len(g) and g[comm.peer] != r}
            if len(readings) > 1:
                other = NodeKind.RECV if comm.kind == NodeKind.SEND else NodeKind.SEND
                matched = [q for q, g in readings.items() if (other, g.index(r), comm.user_tag) in written.get(q, ())]
                if len(matched) == 1:
                    comm.peer = matched[0]
                else:
                    unresolved += 1
            elif readings:
                comm.peer = next(iter(readings))
            it.name = _comm_name(comm)
    if unresolved:
        trace.assume(f"{unresolved} gloo send/recv name a peer that reads as a different rank in each of their "
                     "process groups and no matching op on a peer tells which: read as default-group ranks")


def _settle_gloo_peers(ri: RankItems, peers: dict[int, int]) -> None:
    """The peers `_gloo_peers` chose in the plan, on the rank's own items (elsewhere, the plan saw copies)."""
    for it in ri.items:
        if it.comm is not None and it.comm.peer_in_group:
            it.comm.peer = peers[it.event]
            it.name = _comm_name(it.comm)


def _peerless(items: list[Item]) -> tuple[int, int] | None:
    """Sends and receives that name no peer (kept as compute): their count and the first one's event."""
    unknown = sorted((it.start, it.end, it.event) for it in items
                     if it.comm is not None and it.comm.kind != NodeKind.COLLECTIVE and it.comm.peer is None)
    return (len(unknown), unknown[0][2]) if unknown else None


def _number_transfers(ri: RankItems) -> None:
    """The k-th transfer from a to b is tag k on both sides: rank a numbers its sends to b and
    rank b its receives from a, each in time order, so every rank numbers its own (once the plan
    has settled the peers). Transfers without a peer stay compute (`_peerless` counts them)."""
    counters: dict[tuple[int, str], int] = defaultdict(int)
    unknown = []
    for it in sorted(ri.items, key=lambda i: (i.start, i.end)):
        comm = it.comm
        if comm is None or comm.kind == NodeKind.COLLECTIVE:
            continue
        if comm.peer is None:
            unknown.append(it)
            continue
        key = (comm.peer, "s" if comm.kind == NodeKind.SEND else "r")
        comm.seq = counters[key]
        counters[key] += 1
    for it in unknown:
        it.comm = None
        it.name = f"{it.name} (peer unknown)"


def _warn_peerless(surveys: list[RankSurvey], trace: ExecutionTrace, diagnostics: Diagnostics) -> None:
    """One warning for every rank's peerless sends and receives (`surveys` in rank order)."""
    peerless = [(s.file, s.peerless) for s in surveys if s.peerless is not None]
    if not peerless:
        return
    file, (_, event) = peerless[0]
    trace.assume("sends and receives whose peer the trace does not write are kept as compute "
                 "(older PyTorch writes no Src/Dst Rank)")
    diagnostics.warn("kineto-p2p-peer", f"{file}: event {event}: {{count}} send/recv kernel(s) name no peer rank "
                     "(older PyTorch); kept as compute, not paired", count=sum(count for _, (count, _) in peerless))


def _rank_nodes(ri: RankItems, shift: int, group_ids: dict[tuple, int]) -> Rank:
    rank = Rank(ri.rank, source=Path(ri.file).name)
    ordered = ri.items  # in time order (`_link`)
    for index, it in enumerate(ordered):
        node = Node(id=index, name=it.name, kind=NodeKind.COMPUTE, duration_ns=max(0, it.end - it.start),
                    start_ns=it.start - shift, stream=it.stream, source=f"{ri.file}: event {it.event}")
        it.node = node
        if it.names and len(it.names) > 1:
            node.args["merged"] = len(it.names)
            node.args["merged_names"] = ", ".join(_first_names(it.names))
            node.args["busy_ns"] = it.busy
        comm = it.comm
        if comm is not None:
            node.kind = comm.kind
            node.size = comm.size
            node.args["dtype"] = comm.dtype
            if comm.kind == NodeKind.COLLECTIVE:
                node.coll = comm.coll
                node.group = group_ids[(comm.channel, comm.pg_name)]
                if comm.coll == CollType.BARRIER:  # its assumption is said in `merge`
                    node.coll = CollType.ALL_REDUCE
                if comm.seq is not None:
                    node.args["sequence"] = comm.seq
            else:
                node.peer = comm.peer
                node.tag = comm.seq
                if comm.user_tag is not None:
                    node.args["user_tag"] = comm.user_tag
        rank.nodes.append(node)
    for it in ordered:
        waited = (ri.items[w].node for w in it.waits or ())
        it.node.deps = sorted({n.id for n in waited if n is not None and n.id < it.node.id})
    rank.display = _display_spans(ordered, shift)  # drawn only: not nodes
    return rank


def _first_names(names: list[str], limit: int = 8) -> list[str]:
    seen: list[str] = []
    for name in names:
        if name not in seen:
            seen.append(name)
    return seen[:limit] + ([f"... {len(seen) - limit} more"] if len(seen) > limit else [])
