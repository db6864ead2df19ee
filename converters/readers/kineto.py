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

import gzip
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ..diagnostics import InputError
from .text import json_error

KEPT_CATEGORIES = frozenset({
    "kernel", "gpu_memcpy", "gpu_memset", "cpu_op", "user_annotation", "cuda_sync",
})
# Arguments the builder reads (collective metadata, sizes, links); every other one is dropped.
KEPT_ARGS = frozenset({
    "Collective name", "In msg nelems", "Out msg nelems", "dtype", "In split size", "Out split size",
    "Group size", "Process Group Name", "Process Group Description", "Process Group Ranks",
    "Global rank start", "Global rank stride", "Seq", "Src Rank", "Dst Rank", "Rank",
    "Input Dims", "Input type", "Concrete Inputs", "External id", "stream", "device", "wait_on_stream",
})
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
    args: dict

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

    def where(self, event: Event) -> str:
        return f"{self.file}: event {event.index}"


def sniff(head: bytes, path: Path | None = None) -> bool:
    """A Chrome trace with Kineto's top-level keys (gzip is looked into)."""
    if head.startswith(b"\x1f\x8b"):
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 1 << 16)
        except zlib.error:
            return False
    return head.lstrip().startswith(b"{") and b'"traceEvents"' in head and any(k in head for k in SNIFF_KINETO)


def read_rank(path: Path) -> RankTrace:
    """One rank's trace file: parsed, checked, and cut down to the events the builder uses."""
    name = str(path)
    data = _bytes_of(path)
    size = len(data)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise json_error(path, e) from None
    del data
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError(name, "expected a PyTorch profiler trace: a JSON object with a traceEvents array")
    info = doc.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    rank, rank_from = _rank_of(path, info)
    world = info.get("world_size")
    if world is not None and (not _is_int(world) or world < 1):
        raise InputError(name, f"distributedInfo.world_size must be a positive integer, found {world!r}")
    if world is not None and rank >= world:
        raise InputError(name, f"rank {rank} is not below distributedInfo.world_size {world}")
    pg_config = _pg_config(name, info.get("pg_config"))
    base = doc.get("baseTimeNanoseconds")
    host = doc.get("host_name")
    events, threads = _events(name, doc["traceEvents"])
    doc.clear()
    return RankTrace(name, rank, rank_from, world, str(info.get("backend") or ""), pg_config,
                     base if _is_int(base) else None, events, threads, size,
                     host if isinstance(host, str) and host else None)


def _bytes_of(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror}") from None
    if not data:
        raise InputError(str(path), "file is empty")
    if data.startswith(b"\x1f\x8b"):
        try:
            data = gzip.decompress(data)
        except EOFError:
            raise InputError(f"{path}: byte {len(data)}", "gzip data cut off (the file is truncated)") from None
        except (OSError, zlib.error) as e:
            raise InputError(str(path), f"broken gzip data: {e}") from None
    return data


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rank_of(path: Path, info: dict) -> tuple[int, str]:
    rank = info.get("rank")
    if rank is not None:
        if not _is_int(rank) or rank < 0:
            raise InputError(str(path), f"distributedInfo.rank must be an integer >= 0, found {rank!r}")
        return rank, "distributedInfo"
    match = FILE_RANK.search(path.name)
    if match is None:
        raise InputError(str(path), "no distributedInfo.rank and no rank in the file name (e.g. rank-3.json); "
                                    "cannot tell which rank this trace is")
    return int(match.group(1)), "file name"


def _pg_config(name: str, config) -> list[dict] | None:
    if config is None:
        return None
    if not isinstance(config, list):
        raise InputError(name, "distributedInfo.pg_config must be a list of process groups")
    groups = []
    for i, entry in enumerate(config):
        ranks = entry.get("ranks") if isinstance(entry, dict) else None
        if not isinstance(ranks, list) or not ranks or not all(_is_int(r) and r >= 0 for r in ranks):
            raise InputError(name, f"distributedInfo.pg_config[{i}]: expected pg_name and a list of ranks")
        groups.append({"pg_name": str(entry.get("pg_name", i)), "pg_desc": str(entry.get("pg_desc") or ""),
                       "ranks": sorted(set(ranks))})
    return groups


def _events(name: str, raw: list) -> tuple[list[Event], dict[tuple, str]]:
    events: list[Event] = []
    threads: dict[tuple, str] = {}
    for index, e in enumerate(raw):
        if not isinstance(e, dict):
            raise InputError(f"{name}: event {index}", "expected an object")
        ph = e.get("ph")
        if ph == "M":
            if e.get("name") == "thread_name" and isinstance(e.get("args"), dict):
                threads.setdefault((e.get("pid"), e.get("tid")), str(e["args"].get("name", "")))
            continue
        if ph != "X" or e.get("cat") not in KEPT_CATEGORIES:
            continue
        ts, dur = e.get("ts"), e.get("dur", 0)
        if not _is_number(ts) or not _is_number(dur) or dur < 0:
            raise InputError(f"{name}: event {index}", f"{e.get('name')!r}: ts and dur must be numbers (dur >= 0)")
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        kept = {k: v for k, v in args.items() if k in KEPT_ARGS}
        events.append(Event(index, e["cat"], str(e.get("name", "")), e.get("pid"), e.get("tid"),
                            _ns(ts), _ns(dur), kept))
    events.sort(key=lambda ev: (ev.ts_ns, -ev.dur_ns, ev.index))
    return events, threads


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) < 1e15


def _ns(us: float) -> int:
    """µs with ns decimals -> integer ns (rounded: the decimals are whole ns)."""
    return round(us * 1000)


def _read_or_error(path: Path) -> RankTrace | tuple:
    """`read_rank` for a worker process: an InputError comes back as (where, message)."""
    try:
        return read_rank(path)
    except InputError as e:
        return (e.where, e.message)


PARALLEL_FROM_BYTES = 32 << 20  # below this, starting worker processes costs more than it saves


def read_ranks(paths: list[Path], jobs: int | None = None) -> list[RankTrace]:
    """Every file's rank, read in `jobs` worker processes (default: every core, once the files
    hold 32 MB); two files of one rank are an error."""
    if jobs is None:
        total = sum(p.stat().st_size for p in paths if p.exists())
        jobs = (os.cpu_count() or 1) if total >= PARALLEL_FROM_BYTES else 1
    if jobs > 1 and len(paths) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(jobs, len(paths))) as pool:
            results = list(pool.map(_read_or_error, paths))
        for result in results:
            if isinstance(result, tuple):  # an InputError in a worker, raised here
                raise InputError(*result)
        traces = results
    else:
        traces = [read_rank(path) for path in paths]
    seen: dict[int, RankTrace] = {}
    for trace in traces:
        other = seen.get(trace.rank)
        if other is not None:
            raise InputError(trace.file, f"rank {trace.rank} (from its {trace.rank_from}) is also in {other.file}; "
                                         "give each rank's trace once")
        seen[trace.rank] = trace
    return sorted(traces, key=lambda t: t.rank)
