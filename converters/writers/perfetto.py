"""Native Perfetto trace (`.pftrace`, `--to perfetto`): the Chrome view in Perfetto's protobuf.

Same processes, threads, slices, args and flows as the Chrome JSON writer (both come from
`layout_chrome.plan_trace`). The first packets are built with the `perfetto` package's
schema and `TraceProtoBuilder`; the millions of slice events are framed from bytes that
protobuf encoded once per distinct begin (see "slice events" below), written in chunks
(concatenated Trace messages are one Trace), so packets never all sit in memory at once.

Packet stream (one trusted sequence):
1. a packet that clears incremental state and interns every slice name and arg name;
2. a track descriptor per process (pid, name, sort index; uuid 2^40 + pid) and per thread
   (pid, tid, name, sort index; uuid pid | slot << 21, see `thread_uuid`);
3. TYPE_SLICE_BEGIN / TYPE_SLICE_END events in time order, begins and ends of one thread in
   proper nesting order (an end at t comes before a begin at t). Args are debug annotations;
   flows are `flow_ids` on the begin event (a chain's start and middle links) and
   `terminating_flow_ids` (its end), so Perfetto draws the same arrows as from the JSON.
Timestamps are integer ns from the trace origin. No wall-clock or hash order: same trace,
same bytes.
"""

from __future__ import annotations

import heapq
import struct
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

from ..diagnostics import Diagnostics
from ..timeline import Timeline
from .atomic import atomic_file
from .layout_chrome import FLOW_IN, Layout, Plan, Process, flow_of, paused_gc, plan_trace, report_iteration

SEQUENCE_ID = 1
CHUNK = 60_000  # pieces of packets per write
_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_END = pb.TrackEvent.TYPE_SLICE_END
_NEEDS_STATE = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


def write(trace, output, options=None, diagnostics: Diagnostics | None = None, timeline: Timeline | None = None) -> None:
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    plan = plan_trace(trace, options, diagnostics, timeline)
    with atomic_file(Path(output)) as out:
        write_plan(plan, out)
    report_iteration(plan, diagnostics)


def write_plan(plan: Plan, out: BinaryIO) -> None:
    with paused_gc():
        write_packets(plan, out)


def write_packets(plan: Plan, out: BinaryIO) -> None:
    names, arg_names = intern_tables(plan)
    builder = TraceProtoBuilder()
    fill_interning_packet(builder.add_packet(), names, arg_names)
    add_descriptor_packets(builder, plan)
    out.write(builder.serialize())
    encoder = _EventEncoder(names, arg_names)
    buffer: list[bytes] = []
    for ts, runs in ordered_runs(plan, encoder):
        stamp = b"\x40" + varint(ts)
        encoder.new_timestamp()
        for member, run, shared in runs:
            encoder.add_run(buffer, member, stamp, run, shared)
        if len(buffer) >= CHUNK:
            out.write(b"".join(buffer))
            buffer.clear()
    out.write(b"".join(buffer))


# ---------------------------------------------------------------- slice events, encoded by hand
#
# Millions of begin/end packets through protobuf objects cost several µs each, but they come
# in few shapes: ranks drawn with one layout have the same events at the same times, and
# most of their packets differ only in the track. So protobuf encodes each distinct begin
# (name and args) once, and the packets are framed here from those bytes, in the field
# order protobuf itself writes. Track uuids are chosen so that the track_uuid varint is the
# pid's 3 bytes followed by the slot's (`thread_uuid`): one packet's bytes then serve every
# rank of a layout, with only those 3 bytes spliced in (`shared` pieces). Packets that do
# differ between ranks (a flow, or group-specific args) are encoded for their rank.
#
# Tags are (field number << 3) | wire type, from perfetto_trace.proto: Trace.packet = 1
# (message); TracePacket: timestamp = 8 (varint), trusted_packet_sequence_id = 10 (varint),
# track_event = 11 (message), sequence_flags = 13 (varint); TrackEvent: type = 9 (varint),
# track_uuid = 11 (varint), flow_ids = 47 (fixed64), terminating_flow_ids = 48 (fixed64).

_PACKET = b"\x0a"  # Trace.packet
_SEQUENCE = b"\x50" + bytes([SEQUENCE_ID])  # trusted_packet_sequence_id
_TRACK_EVENT = b"\x5a"
_FLAGS = b"\x68" + bytes([_NEEDS_STATE])  # sequence_flags
_END_TYPE = b"\x48" + bytes([_END])  # TrackEvent.type = TYPE_SLICE_END
_TRACK_UUID = b"\x58"
_FLOW_IDS = b"\xf9\x02"  # varint 377 = 47 << 3 | 1
_TERMINATING_FLOW_IDS = b"\x81\x03"  # varint 385 = 48 << 3 | 1
_SMALL_VARINTS = [bytes([n]) for n in range(128)]
PID_BITS = 21  # thread track uuid = pid | slot << PID_BITS
PID_FIELD_SIZE = PID_BITS // 7  # bytes of the pid part of a thread uuid's varint


def varint(n: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int."""
    if n < 128:
        return _SMALL_VARINTS[n]
    out = bytearray()
    while n >= 128:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def thread_uuid(pid: int, slot: int) -> int:
    """A thread's track uuid: unique, and its varint is `pid_bytes(pid) + varint(slot)`."""
    return pid | slot << PID_BITS


def pid_bytes(pid: int) -> bytes:
    """The first 3 bytes of any thread uuid varint of this pid (slot >= 1 sets the later bits)."""
    if not 0 < pid < 1 << PID_BITS:
        raise ValueError(f"pid {pid}: the .pftrace writer draws ranks below {(1 << PID_BITS) - 1}")
    return bytes([pid & 0x7F | 0x80, pid >> 7 & 0x7F | 0x80, pid >> 14 & 0x7F | 0x80])


def packet_pieces(stamp: bytes, head: bytes, tail: bytes) -> tuple[bytes, bytes]:
    """A framed TracePacket as (before, after) its 3 pid bytes.

    `head`: the TrackEvent fields before track_uuid; `tail`: the slot varint and any flow.
    """
    event_size = len(head) + 1 + PID_FIELD_SIZE + len(tail)
    event_len = varint(event_size)
    packet_size = len(stamp) + len(_SEQUENCE) + 1 + len(event_len) + event_size + len(_FLAGS)
    before = b"".join((_PACKET, varint(packet_size), stamp, _SEQUENCE, _TRACK_EVENT, event_len, head, _TRACK_UUID))
    return before, tail + _FLAGS


BEGIN_CACHE_BYTES = 32 << 20  # encoded begins kept for reuse by the next ranks


class _Member:
    """A process being written: its pid bytes, and which of its begins its layout's shared
    packets do not describe (`own`: 1 per position with a flow, or a name or args of its own)."""

    __slots__ = ("process", "pid", "own", "flows")

    def __init__(self, process: Process, reference: Process | None):
        self.process = process
        self.pid = pid_bytes(process.pid)
        self.flows = process.flow_codes()  # 8 B a slice: every process is kept while writing
        n = process.slice_count
        if reference is None:
            self.own = b"\x01" * n
            return
        own = bytearray(n)
        for i in process.flow_pairs[::2]:  # positions with a flow
            own[i] = 1
        for mine, theirs in ((process.names, reference.names), (process.slice_args, reference.slice_args)):
            if mine is not theirs:
                for i, (a, b) in enumerate(zip(mine, theirs)):
                    if a is not b:
                        own[i] = 1
        self.own = bytes(own)


class _EventEncoder:
    def __init__(self, names: dict[str, int], arg_names: dict[str, int]):
        self.names = names
        self.arg_names = arg_names
        self.begins: dict[tuple[str, int], bytes] = {}  # (name, id(args)) -> TrackEvent type, name, args
        self.begin_bytes = 0
        self.at_stamp: dict[tuple, tuple[bytes, bytes]] = {}  # see `own_begin`

    def add_run(self, buffer: list[bytes], member: _Member, stamp: bytes, run: list, shared: list | None) -> None:
        """Packets of one process's events at one timestamp (`stamp`: the encoded timestamp field).

        `shared`: pieces for each event of the run as its layout's reference rank has them
        (None when no other rank has this layout).
        """
        pid, own, process = member.pid, member.own, member.process
        for j, (kind, slot, i) in enumerate(run):
            if shared is not None and not (kind and own[i]):
                before, after = shared[j]
            elif kind:
                before, after = self.own_begin(member, stamp, slot, i)
            else:
                before, after = packet_pieces(stamp, _END_TYPE, varint(slot))
            buffer += (before, pid, after)

    def new_timestamp(self) -> None:
        self.at_stamp.clear()

    def own_begin(self, member: _Member, stamp: bytes, slot: int, i: int) -> tuple[bytes, bytes]:
        """A begin as this rank has it: its own args or flow.

        The ranks of a group have the same args and a flow of the same direction at the same
        time, and their packets are written one after the other: all but the flow id is
        encoded once per timestamp (`at_stamp`).
        """
        process = member.process
        name, args = process.names[i], process.slice_args[i]
        code = member.flows[i]
        tag = b"" if not code else _TERMINATING_FLOW_IDS if flow_of(code)[1] == FLOW_IN else _FLOW_IDS
        key = (slot, name, id(args), tag)
        found = self.at_stamp.get(key)
        if found is None:
            middle = varint(slot) + tag
            flow_size = b"\0" * 8 if tag else b""  # the fixed64 flow id that follows
            before = packet_pieces(stamp, self.begin_head(name, args), middle + flow_size)[0]
            found = self.at_stamp[key] = (before, middle)
        before, middle = found
        if not code:
            return before, middle + _FLAGS
        return before, middle + struct.pack("<Q", flow_of(code)[0]) + _FLAGS

    def shared_pieces(self, reference: Process, runs: list) -> list[list[tuple[bytes, bytes]]]:
        """Pieces of every event of a layout, as a rank with the reference's names and args and no flows has them."""
        out = []
        for ts, run in runs:
            stamp = b"\x40" + varint(ts)
            pieces = []
            for kind, slot, i in run:
                head = self.begin_head(reference.names[i], reference.slice_args[i]) if kind else _END_TYPE
                pieces.append(packet_pieces(stamp, head, varint(slot)))
            out.append(pieces)
        return out

    def begin_head(self, name: str, args: dict[str, Any]) -> bytes:
        head = self.begins.get((name, id(args)))
        if head is not None:
            return head
        # ranks that share args dicts are close in rank order: a cache that starts over
        # when large keeps the hits and bounds the memory
        if self.begin_bytes > BEGIN_CACHE_BYTES:
            self.begins.clear()
            self.begin_bytes = 0
        # fields 4 (debug annotations), 9 (type), 10 (name_iid), in the order protobuf writes them;
        # all before track_uuid
        head = annotation_bytes(args, self.arg_names) + _BEGIN_TYPE + b"\x50" + varint(self.names[name])
        self.begins[(name, id(args))] = head
        self.begin_bytes += len(head)
        return head


def intern_tables(plan: Plan) -> tuple[dict[str, int], dict[str, int]]:
    """iids for slice names and arg names, numbered in first-use order (deterministic)."""
    names: dict[str, int] = {}
    arg_names: dict[str, int] = {}
    seen_args: set[int] = set()  # arg dicts are shared between slices: look at each once
    seen_names: set[tuple[int, int]] = set()  # (name list, drawing order) already numbered
    for process in plan.processes:
        positions = process.positions()
        key = (id(process.names), id(positions))
        if key not in seen_names:
            seen_names.add(key)
            for i in positions:
                name = process.names[i]
                if name not in names:
                    names[name] = len(names) + 1
        slice_args = process.slice_args
        for i in positions:
            args = slice_args[i]
            if id(args) not in seen_args:
                seen_args.add(id(args))
                for key in args:
                    if key not in arg_names:
                        arg_names[key] = len(arg_names) + 1
    return names, arg_names


def fill_interning_packet(packet, names: dict[str, int], arg_names: dict[str, int]) -> None:
    packet.trusted_packet_sequence_id = SEQUENCE_ID
    packet.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    interned = packet.interned_data
    for name, iid in names.items():
        entry = interned.event_names.add()
        entry.iid = iid
        entry.name = name
    for name, iid in arg_names.items():
        entry = interned.debug_annotation_names.add()
        entry.iid = iid
        entry.name = name


PROCESS_UUID_BASE = 1 << 40  # thread track uuids are their tids (< 2^32): process uuids sit above them


def process_uuid(process: Process) -> int:
    return PROCESS_UUID_BASE + process.pid


def add_descriptor_packets(builder: TraceProtoBuilder, plan: Plan) -> None:
    for process in plan.processes:
        packet = builder.add_packet()
        packet.trusted_packet_sequence_id = SEQUENCE_ID
        track = packet.track_descriptor
        track.uuid = process_uuid(process)
        track.process.pid = process.pid
        track.process.process_name = process.name
        track.process.legacy_sort_index = process.rank
        for thread in process.threads:
            packet = builder.add_packet()
            packet.trusted_packet_sequence_id = SEQUENCE_ID
            track = packet.track_descriptor
            track.uuid = thread_uuid(process.pid, thread.sort_index)  # sort_index is the slot
            track.thread.pid = process.pid
            track.thread.tid = thread.tid
            track.thread.thread_name = thread.name
            track.thread.legacy_sort_index = thread.sort_index


def ordered_runs(plan: Plan, encoder: _EventEncoder) -> Iterator[tuple[int, list[tuple[_Member, list, list | None]]]]:
    """Every begin and end in time order: (ts, [(process, its events at ts, shared pieces)]).

    The order is (ts, tid, seq) as a sort of every event would give: a process's events
    at one timestamp are one run of its layout (`layout_runs`), and processes that share a
    layout have runs at the same timestamps, so merging the few layouts' runs by time, and
    each run over its processes in pid order, is that sort without sorting millions.
    """
    groups: dict[int, list[Process]] = {}
    for process in plan.processes:
        groups.setdefault(id(process.layout), []).append(process)
    members: list[list[_Member]] = []
    runs_of: list[list] = []
    shared_of: list[list | None] = []
    for procs in groups.values():
        procs.sort(key=_pid)
        runs = layout_runs(procs[0].layout)
        reference = procs[0] if len(procs) > 1 else None
        members.append([_Member(p, reference) for p in procs])
        runs_of.append(runs)
        shared_of.append(encoder.shared_pieces(reference, runs) if reference is not None else None)
    streams = [[(ts, k, r) for r, (ts, _) in enumerate(runs)] for k, runs in enumerate(runs_of)]
    current, at = None, []  # at: (layout index, run index) at the current timestamp
    for ts, k, r in heapq.merge(*streams):
        if ts != current:
            if at:
                yield current, _by_pid(at, members, runs_of, shared_of)
            current, at = ts, []
        at.append((k, r))
    if at:
        yield current, _by_pid(at, members, runs_of, shared_of)


def _pid(process: Process) -> int:
    return process.pid


def _by_pid(at: list[tuple[int, int]], members, runs_of, shared_of) -> list[tuple[_Member, list, list | None]]:
    out = []
    for k, r in at:
        run = runs_of[k][r][1]
        shared = shared_of[k][r] if shared_of[k] is not None else None
        out.extend((member, run, shared) for member in members[k])
    if len(at) > 1:
        out.sort(key=lambda entry: entry[0].process.pid)
    return out


def layout_runs(layout: Layout) -> list[tuple[int, list[tuple[int, int, int]]]]:
    """(ts, [(kind, slot, position)]) of a layout: begins (kind 1) and ends (kind 0) grouped by time.

    Within a timestamp, events are in (slot, seq) order, where `seq` numbers the events in
    the order they were generated: per thread that is proper nesting order (an end at t
    before a begin at t, a parent's begin before its child's). Cached on the layout.
    """
    cached = layout.cache.get("perfetto")
    if cached is not None:
        return cached
    starts, ends, slots = layout.starts, layout.ends, layout.slots
    events: list[tuple[int, int, int, int, int]] = []
    stacks: dict[int, list[int]] = {}
    for i in range(len(starts)) if layout.order is None else layout.order:
        slot = slots[i]
        stack = stacks.get(slot)
        if stack is None:
            stack = stacks[slot] = []
        start = starts[i]
        while stack and ends[stack[-1]] <= start:
            top = stack.pop()
            events.append((ends[top], slot, len(events), 0, top))
        events.append((start, slot, len(events), 1, i))
        stack.append(i)
    for slot, stack in stacks.items():
        while stack:
            top = stack.pop()
            events.append((ends[top], slot, len(events), 0, top))
    events.sort()
    runs: list[tuple[int, list[tuple[int, int, int]]]] = []
    for ts, slot, _, kind, i in events:
        if not runs or runs[-1][0] != ts:
            runs.append((ts, []))
        runs[-1][1].append((kind, slot, i))
    layout.cache["perfetto"] = runs
    return runs


# One DebugAnnotation (TrackEvent field 4) per arg: name_iid = 1 (varint), then the value:
# bool_value = 2 (varint), int_value = 4 (varint, negatives as 64-bit two's complement),
# double_value = 5 (fixed64), string_value = 6 (bytes). Encoded here, not through protobuf
# objects (a log has a distinct args dict per slice); `add_annotations` is the reference the
# tests compare with. Pieces repeat (stage, op, dtype, ...): each distinct one is encoded once.
_BEGIN_TYPE = b"\x48" + bytes([_BEGIN])
_ANNOTATION = b"\x22"
_INT64 = (-(1 << 63), 1 << 63)
_annotation_pieces: dict[tuple, bytes] = {}
MAX_ANNOTATION_PIECES = 1 << 16


def annotation_bytes(args: dict[str, Any], arg_names: dict[str, int]) -> bytes:
    pieces = []
    cached = _annotation_pieces
    for key, value in args.items():
        iid = arg_names[key]
        kind = value.__class__
        if kind is not str and kind is not int and kind is not bool:  # floats: 0.0 == -0.0
            pieces.append(_annotation(iid, value))
            continue
        cache_key = (iid, kind, value)  # the type is part of the key: True == 1
        piece = cached.get(cache_key)
        if piece is None:
            if len(cached) >= MAX_ANNOTATION_PIECES:
                cached.clear()
            piece = cached[cache_key] = _annotation(iid, value)
        pieces.append(piece)
    return b"".join(pieces)


def _annotation(name_iid: int, value: Any) -> bytes:
    if isinstance(value, bool):
        body = b"\x10" + (b"\x01" if value else b"\x00")
    elif isinstance(value, int) and _INT64[0] <= value < _INT64[1]:
        body = b"\x20" + varint(value & 0xFFFF_FFFF_FFFF_FFFF)
    elif isinstance(value, int):  # out of int64: as protobuf has it (it refuses)
        event = pb.TrackEvent()
        add_annotations(event, {"": value}, {"": name_iid})
        return event.SerializeToString()
    elif isinstance(value, float):
        body = b"\x29" + struct.pack("<d", value)
    else:
        text = str(value).encode("utf-8")
        body = b"\x32" + varint(len(text)) + text
    body = b"\x08" + varint(name_iid) + body
    return _ANNOTATION + varint(len(body)) + body


def add_annotations(event, args: dict[str, Any], arg_names: dict[str, int]) -> None:
    for key, value in args.items():
        annotation = event.debug_annotations.add()
        annotation.name_iid = arg_names[key]
        if isinstance(value, bool):
            annotation.bool_value = value
        elif isinstance(value, int):
            annotation.int_value = value
        elif isinstance(value, float):
            annotation.double_value = value
        else:
            annotation.string_value = str(value)
