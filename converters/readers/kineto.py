"""Reader for PyTorch profiler (Kineto) traces: one rank's Chrome-trace JSON -> `RankTrace`.

A trace is `{"traceEvents": [...], "distributedInfo": {...}, "baseTimeNanoseconds": ...,
"deviceProperties": [...], "traceName": ..., "schemaVersion": ...}`, plain or gzip
(README "PyTorch profiler traces" lists the fields per version). `ts`/`dur` are µs with ns
decimals on the host's clock; they become integer ns here, still on that clock (the builder
aligns ranks).

`read_rank(path)` reads one file on its own, so ranks can be read in parallel (`--jobs`) and a
rank's file is freed once its events are kept. Only what the builder uses is kept: complete
(`X`) events of the categories in KEPT_CATEGORIES, with their index in `traceEvents` (errors
say `file: event N`), and the thread names. The arguments kept are the collective ones;
compute ops keep none.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ..diagnostics import InputError
from .text import gunzipped, head_gunzipped, json_error, read_bytes

KEPT_CATEGORIES = frozenset({
    "kernel", "gpu_memcpy", "gpu_memset", "cpu_op", "user_annotation", "cuda_sync", "cuda_runtime",
})
# The CUDA runtime calls kept (the others are dropped): launches, drawn beside the communication
# kernels they launch, and the event record / stream wait calls that order streams. Kineto writes
# only `cbid` and `correlation` on them (README "PyTorch profiler traces").
LAUNCH_CALLS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cuLaunchKernel", "cuLaunchKernelEx",
})
EVENT_CALLS = frozenset({"cudaEventRecord", "cudaEventRecordWithFlags", "cudaStreamWaitEvent"})
# Arguments the builder reads (collective metadata, sizes, links); every other one is dropped.
KEPT_ARGS = frozenset({
    "Collective name", "In msg nelems", "Out msg nelems", "dtype", "In split size", "Out split size",
    "Group size", "Process Group Name", "Process Group Description", "Process Group Ranks",
    "Global rank start", "Global rank stride", "Seq", "Src Rank", "Dst Rank", "Rank",
    "Input Dims", "Input type", "Concrete Inputs", "External id", "stream", "device", "wait_on_stream",
    "wait_on_cuda_event_record_corr_id",
})
LINK_ARGS = frozenset({"wait_on_stream", "wait_on_cuda_event_record_corr_id"})
# Names of the events whose collective arguments are kept.
COMM_PREFIXES = ("c10d::", "gloo:", "nccl:", "record_param_comms", "ncclDevKernel", "ncclKernel")
_TEXT, _INT, _LIST = (str,), (int,), (list,)
# PyTorch writes some numbers as text (`std::to_string` of a peer's rank, the sequence number)
_NUMBER = (int, str)
ARG_TYPES = {
    "Collective name": _TEXT, "dtype": _TEXT, "Process Group Description": _TEXT,
    "In msg nelems": _NUMBER, "Out msg nelems": _NUMBER, "Group size": _NUMBER, "Global rank start": _NUMBER,
    "Global rank stride": _NUMBER, "Seq": _NUMBER, "Src Rank": _NUMBER, "Dst Rank": _NUMBER, "Rank": _NUMBER,
    "stream": _INT, "device": _INT, "wait_on_stream": _INT, "wait_on_cuda_event_record_corr_id": _INT,
    "In split size": (str, list), "Out split size": (str, list), "Process Group Name": (str, int),
    "Process Group Ranks": (str, list), "External id": (int, str),
    "Input Dims": _LIST, "Input type": _LIST, "Concrete Inputs": _LIST,
}
INTEGER = re.compile(r"-?\d{1,18}")
ARG_TYPE_WORDS = {str: "a string", int: "an integer", list: "a list"}
ID_TYPES = (int, str)
NUMBERS = (int, float)  # ts and dur
NO_ARGS: dict = {}  # shared by every event that keeps no argument (never written to)
MAX_RANKS = 1 << 20
FILE_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
SNIFF_KEYS = (b'"traceEvents"',)
SNIFF_KINETO = (b'"distributedInfo"', b'"baseTimeNanoseconds"', b'"deviceProperties"', b'"schemaVersion"')


@dataclass(slots=True)
class Event:
    """One complete event of a trace, times in integer ns on the rank's host clock."""

    index: int  # position in traceEvents
    cat: str
    name: str
    pid: int | str
    tid: int | str
    ts_ns: int
    dur_ns: int
    args: dict  # the collective arguments (empty for compute)
    external: int | str | None = None  # "External id": links a kernel to the CPU op that launched it
    correlation: int | None = None  # CUPTI's: links a kernel or a cuda_sync event to its runtime call

    @property
    def end_ns(self) -> int:
        return self.ts_ns + self.dur_ns


@dataclass
class RankTrace:
    """What one rank's trace says, as the builder needs it."""

    file: str
    rank: int
    rank_from: str  # "distributedInfo" or "file name"
    world_size: int | None
    backend: str
    pg_config: list[dict] | None
    base_time_ns: int | None
    events: list[Event]  # sorted by (ts, -dur, index)
    thread_names: dict[tuple, str] = field(default_factory=dict)
    size_bytes: int = 0
    host: str | None = None  # host_name: ranks of one host share a clock
    launches: LaunchCalls = field(default_factory=lambda: LaunchCalls())

    def where(self, event: Event) -> str:
        return f"{self.file}: event {event.index}"


class LaunchCalls:
    """The kernel launch calls of a trace by correlation (the kernel's), in flat arrays: there is
    one per kernel, and a dict of tuples would cost about 300 bytes each."""

    def __init__(self):
        self.correlations, self.starts, self.durations = array("q"), array("q"), array("q")
        self.threads: list = []
        self.names: list[str] = []

    def add(self, correlation: int, ts_ns: int, dur_ns: int, tid, name: str) -> None:
        self.correlations.append(correlation)
        self.starts.append(ts_ns)
        self.durations.append(dur_ns)
        self.threads.append(tid)
        self.names.append(name)

    def seal(self) -> None:
        """Sort by correlation for `get` (Kineto numbers them in order, so usually already sorted)."""
        keys = self.correlations
        if all(a < b for a, b in zip(keys, keys[1:])):
            return
        order = sorted(range(len(keys)), key=keys.__getitem__)
        for column in ("correlations", "starts", "durations"):
            values = getattr(self, column)
            setattr(self, column, array("q", (values[i] for i in order)))
        self.threads = [self.threads[i] for i in order]
        self.names = [self.names[i] for i in order]

    def get(self, correlation) -> tuple | None:
        """(ts_ns, dur_ns, tid, name) of the call with this correlation, or None."""
        if correlation is None:
            return None
        i = bisect_left(self.correlations, correlation)
        if i == len(self.correlations) or self.correlations[i] != correlation:
            return None
        return self.starts[i], self.durations[i], self.threads[i], self.names[i]

    def __len__(self) -> int:
        return len(self.correlations)


def sniff(head: bytes, path: Path | None = None) -> bool:
    """A Chrome trace with Kineto's top-level keys (gzip is looked into)."""
    head = head_gunzipped(head)
    if head is None:
        return False
    return head.lstrip().startswith(b"{") and b'"traceEvents"' in head and any(k in head for k in SNIFF_KINETO)


def read_rank(path: Path) -> RankTrace:
    """One rank's trace file: parsed, checked, and cut down to the events the builder uses."""
    name = str(path)
    data = _bytes_of(path)
    size = len(data)
    parsed = _in_batches(data, name)
    if parsed is None:  # not laid out as expected: parse it whole (errors then say where)
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise json_error(path, e) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
            raise InputError(name, "expected a PyTorch profiler trace: a JSON object with a traceEvents array")
        parsed = doc, *_events(name, [doc.pop("traceEvents")])
    del data
    doc, events, threads, launches = parsed
    info = doc.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    rank, rank_from = _rank_of(path, info)
    world = info.get("world_size")
    if world is not None and (not _is_int(world) or not 1 <= world <= MAX_RANKS):
        raise InputError(name, f"distributedInfo.world_size must be an integer from 1 to {MAX_RANKS}, found {world!r}")
    if world is not None and rank >= world:
        raise InputError(name, f"rank {rank} is not below distributedInfo.world_size {world}")
    pg_config = _pg_config(name, info.get("pg_config"))
    base = doc.get("baseTimeNanoseconds")
    host = doc.get("host_name")
    return RankTrace(name, rank, rank_from, world, str(info.get("backend") or ""), pg_config,
                     base if _is_int(base) else None, events, threads, size,
                     host if isinstance(host, str) and host else None, launches)


def _bytes_of(path: Path) -> bytes:
    data = read_bytes(path)
    if not data:
        raise InputError(str(path), "file is empty")
    return gunzipped(data, path)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rank_of(path: Path, info: dict) -> tuple[int, str]:
    rank = info.get("rank")
    if rank is not None:
        if not _is_int(rank) or not 0 <= rank < MAX_RANKS:
            raise InputError(str(path), f"distributedInfo.rank must be an integer from 0 to {MAX_RANKS - 1}, "
                                        f"found {rank!r}")
        return rank, "distributedInfo"
    match = FILE_RANK.search(path.name)
    if match is None:
        raise InputError(str(path), "no distributedInfo.rank and no rank in the file name (e.g. rank-3.json); "
                                    "cannot tell which rank this trace is")
    rank = int(match.group(1))
    if rank >= MAX_RANKS:
        raise InputError(str(path), f"rank {rank} in the file name is beyond the {MAX_RANKS} ranks et-convert handles")
    return rank, "file name"


def _pg_config(name: str, config) -> list[dict] | None:
    if config is None:
        return None
    if not isinstance(config, list):
        raise InputError(name, "distributedInfo.pg_config must be a list of process groups")
    groups = []
    for i, entry in enumerate(config):
        ranks = entry.get("ranks") if isinstance(entry, dict) else None
        if not isinstance(ranks, list) or not ranks or not all(_is_int(r) and 0 <= r < MAX_RANKS for r in ranks):
            raise InputError(name, f"distributedInfo.pg_config[{i}]: expected pg_name and a list of ranks")
        groups.append({"pg_name": str(entry.get("pg_name", i)), "pg_desc": str(entry.get("pg_desc") or ""),
                       "ranks": sorted(set(ranks))})
    return groups


# Where traceEvents' array starts, and where one event may end and the next begin.
EVENTS_START = re.compile(rb'"traceEvents"\s*:\s*\[')
BETWEEN_EVENTS = re.compile(rb"\}\s*,\s*\{")
ARRAY_END = re.compile(rb"\}\s*\]")
BATCH_BYTES = 1 << 20


def _in_batches(data: bytes, name: str):
    """(document without its events, events, threads), parsing traceEvents about 1 MB at a time so
    a big trace is never held as Python objects whole; None when the text does not split cleanly
    (the caller parses it whole). A candidate cut inside a string fails to parse and the next
    candidate is tried: a JSON value has no shorter valid prefix."""
    start = EVENTS_START.search(data)
    if start is None:
        return None
    first = start.end()
    while first < len(data) and data[first] in b" \t\r\n":
        first += 1
    if data[first:first + 1] == b"]":  # no events at all
        head = _head(data, start.start(), first + 1)
        return None if head is None else (head, [], {}, LaunchCalls())

    array_end = None

    def batches():
        nonlocal array_end
        begin = first
        while begin is not None:
            batch, begin, array_end = _batch(data, begin)
            if batch is None:
                raise _NotSplittable
            yield batch

    try:
        events, threads, launches = _events(name, batches())
    except _NotSplittable:
        return None
    head = _head(data, start.start(), array_end)
    if head is None:
        return None
    return head, events, threads, launches


class _NotSplittable(Exception):
    pass


def _batch(data: bytes, begin: int) -> tuple[list | None, int | None, int | None]:
    """The events from `begin` (a '{') up to a cut about BATCH_BYTES on; where the next batch
    begins, or after the last event None and the index just past the array's `]`."""
    if len(data) - begin > 2 * BATCH_BYTES:
        for cut in BETWEEN_EVENTS.finditer(data, begin + BATCH_BYTES):
            try:
                return orjson.loads(b"[" + data[begin:cut.start() + 1] + b"]"), cut.end() - 1, None
            except orjson.JSONDecodeError:
                continue
    for end in ARRAY_END.finditer(data, begin):
        try:
            return orjson.loads(b"[" + data[begin:end.start() + 1] + b"]"), None, end.end()
        except orjson.JSONDecodeError:
            continue
    return None, None, None


def _head(data: bytes, key_start: int, array_end: int | None) -> dict | None:
    """The document with an empty traceEvents: the text before it and after its array."""
    if array_end is None:
        return None
    try:
        doc = orjson.loads(data[:key_start] + b'"traceEvents": []' + data[array_end:])
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _events(name: str, batches) -> tuple[list[Event], dict[tuple, str], LaunchCalls]:
    """The kept events of `batches` (lists of raw events, in order), the thread names, the launch calls."""
    events: list[Event] = []
    threads: dict[tuple, str] = {}
    launches = LaunchCalls()
    index = -1
    names: dict = {}
    for raw in batches:
        index = _keep(name, raw, index, events, threads, names, launches)
    events.sort(key=lambda ev: (ev.ts_ns, -ev.dur_ns, ev.index))
    launches.seal()
    return events, threads, launches


def _keep(name: str, raw: list, index: int, events: list[Event], threads: dict, names: dict,
          launches: LaunchCalls) -> int:
    """Append the events of one batch the builder uses; returns the index of the last one seen."""
    setdefault = names.setdefault
    for e in raw:
        index += 1
        try:
            ph, cat = e.get("ph"), e.get("cat")
        except AttributeError:
            raise InputError(f"{name}: event {index}", "expected an object") from None
        if ph != "X" or type(cat) is not str or cat not in KEPT_CATEGORIES:
            if ph == "M" and e.get("name") == "thread_name" and isinstance(e.get("args"), dict):
                key = (e.get("pid"), e.get("tid"))
                if type(key[0]) in ID_TYPES and type(key[1]) in ID_TYPES:
                    threads.setdefault(key, str(e["args"].get("name", "")))
            continue
        ts, dur = e.get("ts"), e.get("dur", 0)
        # numbers in µs within ±1e15 (false for NaN), dur not negative; spelled out: every event passes here
        if not (type(ts) in NUMBERS and type(dur) in NUMBERS and -1e15 < ts < 1e15 and 0 <= dur < 1e15):
            raise InputError(f"{name}: event {index}", f"{e.get('name')!r}: ts and dur must be numbers (dur >= 0)")
        label, pid, tid = e.get("name", ""), e.get("pid"), e.get("tid")
        if type(label) is not str or type(pid) not in ID_TYPES or type(tid) not in ID_TYPES:
            raise InputError(f"{name}: event {index}", "name must be a string, pid and tid integers or strings")
        if cat == "cuda_runtime" and label not in EVENT_CALLS:
            _keep_launch(e, setdefault(label, label), setdefault(tid, tid), ts, dur, launches)
            continue
        # one object per distinct name and id: a big trace repeats a few thousand
        label, pid, tid = setdefault(label, label), setdefault(pid, pid), setdefault(tid, tid)
        args = e.get("args")
        if not isinstance(args, dict) or cat == "cuda_runtime":  # an event record / wait call: only its ids
            kept = NO_ARGS
        elif label.startswith(COMM_PREFIXES):  # one object per distinct text or number: args repeat on every call
            kept = _checked({k: setdefault(v, v) if type(v) in ID_TYPES else v for k, v in args.items() if k in KEPT_ARGS},
                            name, index)
        else:  # compute: only what links it (a wait to its stream; the External id is a field)
            kept = _checked({k: args[k] for k in LINK_ARGS.intersection(args)}, name, index) or NO_ARGS
        external = args.get("External id") if isinstance(args, dict) else None
        if type(external) not in ID_TYPES:
            external = None
        correlation = args.get("correlation") if isinstance(args, dict) and cat != "cpu_op" else None
        if not _is_int(correlation):
            correlation = None
        # µs with ns decimals -> integer ns (rounded: the decimals are whole ns)
        events.append(Event(index, cat, label, pid, tid, round(ts * 1000), round(dur * 1000), kept, external,
                            correlation))
    return index


def _keep_launch(e: dict, label: str, tid, ts, dur, launches: LaunchCalls) -> None:
    """A kernel launch call, by its correlation (the kernel's): only its time and thread."""
    if label in LAUNCH_CALLS:
        args = e.get("args")
        correlation = args.get("correlation") if isinstance(args, dict) else None
        if _is_int(correlation) and 0 <= correlation < 1 << 62:
            launches.add(correlation, round(ts * 1000), round(dur * 1000), tid, label)


def _checked(args: dict, name: str, index: int) -> dict:
    """`args` when every kept argument has the JSON type the builder reads, else an InputError."""
    for key, value in args.items():
        types = ARG_TYPES[key]
        if types is _NUMBER and type(value) is str and INTEGER.fullmatch(value):
            value = args[key] = int(value)
        if type(value) not in types or (type(value) is int and not -(1 << 62) < value < 1 << 62) or (
                types is _NUMBER and type(value) is str):
            expected = "an integer" if types is _NUMBER else " or ".join(ARG_TYPE_WORDS[t] for t in types)
            raise InputError(f"{name}: event {index}", f"arg {key!r} is {value!r}; expected {expected}")
    return args

