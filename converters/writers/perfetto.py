"""Native Perfetto trace (`.pftrace`, `--to perfetto`): the Chrome view in Perfetto's protobuf.

Same processes, threads, slices, args and flows as the Chrome JSON writer (both come from
`layout_chrome.plan_trace`), built with the `perfetto` package's schema and
`TraceProtoBuilder`, one builder per chunk of packets (serialized Trace messages
concatenate into one Trace), so the packets never all sit in memory at once.

Packet stream (one trusted sequence):
1. a packet that clears incremental state and interns every slice name and arg name;
2. a track descriptor per process (pid, name, sort index) and per thread (pid, tid, name,
   sort index);
3. TYPE_SLICE_BEGIN / TYPE_SLICE_END events in time order, begins and ends of one thread in
   proper nesting order (an end at t comes before a begin at t). Args are debug annotations;
   flows are `flow_ids` on the begin event (a chain's start and middle links) and
   `terminating_flow_ids` (its end), so Perfetto draws the same arrows as from the JSON.
Timestamps are integer ns from the trace origin. No wall-clock or hash order: same trace,
same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO, Iterator

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

from ..diagnostics import Diagnostics
from ..timeline import Timeline
from .atomic import atomic_file
from .layout_chrome import FLOW_IN, FLOW_OUT, FLOW_STEP, Plan, paused_gc, Process, plan_trace

SEQUENCE_ID = 1
CHUNK = 20_000  # packets per serialized Trace chunk
_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_END = pb.TrackEvent.TYPE_SLICE_END
_NEEDS_STATE = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


def write(trace, output, options=None, diagnostics: Diagnostics | None = None, timeline: Timeline | None = None) -> None:
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    plan = plan_trace(trace, options, diagnostics, timeline)
    with atomic_file(Path(output)) as out:
        write_plan(plan, out)


def write_plan(plan: Plan, out: BinaryIO) -> None:
    with paused_gc():
        write_packets(plan, out)


def write_packets(plan: Plan, out: BinaryIO) -> None:
    names, arg_names = intern_tables(plan)
    builder = TraceProtoBuilder()
    fill_interning_packet(builder.add_packet(), names, arg_names)
    add_descriptor_packets(builder, plan)
    out.write(builder.serialize())
    # Slices: serialized in chunks (concatenated Trace messages are one Trace). Begin packets
    # of one node on ranks that share its args dict differ only in timestamp, track and
    # flows, so each distinct (name, args) is encoded once and merged in as bytes; an end
    # packet differs only in its timestamp. Protobuf does the encoding either way.
    begins: dict[tuple, bytes] = {}  # (name, id(args)) -> begin packet without timestamp and track
    ends = {thread.tid: end_packet(thread.tid) for process in plan.processes for thread in process.threads}
    builder, count = TraceProtoBuilder(), 0
    for ts, track_uuid, _, kind, sl in ordered_events(plan):
        packet = builder.add_packet()
        if kind == 0:
            packet.MergeFromString(ends[track_uuid])
            packet.timestamp = ts
        else:
            key = (sl.name, id(sl.args))
            begin = begins.get(key)
            if begin is None:
                begin = begins[key] = begin_packet(sl, names, arg_names)
            packet.MergeFromString(begin)
            packet.timestamp = ts
            packet.track_event.track_uuid = track_uuid
            if sl.flow_dir in (FLOW_OUT, FLOW_STEP):
                packet.track_event.flow_ids.append(sl.flow)
            elif sl.flow_dir == FLOW_IN:
                packet.track_event.terminating_flow_ids.append(sl.flow)
        count += 1
        if count == CHUNK:
            out.write(builder.serialize())
            builder, count = TraceProtoBuilder(), 0
    if count:
        out.write(builder.serialize())


def end_packet(track_uuid: int) -> bytes:
    """A serialized slice-end packet for one track, without its timestamp."""
    packet = pb.TracePacket()
    packet.trusted_packet_sequence_id = SEQUENCE_ID
    packet.sequence_flags = _NEEDS_STATE
    packet.track_event.type = _END
    packet.track_event.track_uuid = track_uuid
    return packet.SerializeToString()


def begin_packet(sl, names: dict[str, int], arg_names: dict[str, int]) -> bytes:
    """A serialized slice-begin packet (name, args), without timestamp, track and flows."""
    packet = pb.TracePacket()
    packet.trusted_packet_sequence_id = SEQUENCE_ID
    packet.sequence_flags = _NEEDS_STATE
    event = packet.track_event
    event.type = _BEGIN
    event.name_iid = names[sl.name]
    add_annotations(event, sl.args, arg_names)
    return packet.SerializeToString()


def intern_tables(plan: Plan) -> tuple[dict[str, int], dict[str, int]]:
    """iids for slice names and arg names, numbered in first-use order (deterministic)."""
    names: dict[str, int] = {}
    arg_names: dict[str, int] = {}
    seen_args: set[int] = set()  # arg dicts are shared between slices: look at each once
    for process in plan.processes:
        for sl in process.slices:
            if sl.name not in names:
                names[sl.name] = len(names) + 1
            if id(sl.args) not in seen_args:
                seen_args.add(id(sl.args))
                for key in sl.args:
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
            track.uuid = thread.tid
            track.thread.pid = process.pid
            track.thread.tid = thread.tid
            track.thread.thread_name = thread.name
            track.thread.legacy_sort_index = thread.sort_index


def ordered_events(plan: Plan) -> list[tuple]:
    """Every begin and end as (ts, track, seq, kind, slice), sorted; see `process_events`.

    One sort of tuples is several times faster than merging per-thread streams in Python.
    """
    events: list[tuple] = []
    for process in plan.processes:
        events.extend(process_events(process))
    events.sort()  # (ts, track, seq) is unique, so the slices themselves are never compared
    return events


def process_events(process: Process) -> Iterator[tuple]:
    """Begins (kind 1) and ends (kind 0) of one process's slices, in nesting order per thread.

    `seq` numbers each thread's events, so sorting by (ts, tid, seq) keeps every thread's
    nesting order, and at one timestamp lower ranks come first (a flow starts on the lower
    rank when both ends start together). Slices arrive sorted by (start, -end).
    """
    stacks: dict[int, list] = {}
    seq = 0
    for sl in process.slices:
        tid = sl.tid
        stack = stacks.get(tid)
        if stack is None:
            stack = stacks[tid] = []
        while stack and stack[-1].end <= sl.start:
            top = stack.pop()
            yield (top.end, tid, seq, 0, top)
            seq += 1
        yield (sl.start, tid, seq, 1, sl)
        seq += 1
        stack.append(sl)
    for tid, stack in stacks.items():
        while stack:
            top = stack.pop()
            yield (top.end, tid, seq, 0, top)
            seq += 1


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
