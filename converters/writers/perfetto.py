"""Native Perfetto trace (`.pftrace`, `--to perfetto`): the Chrome view in Perfetto's protobuf.

Same processes, threads, slices, args and flows as the Chrome JSON writer (both come from
`layout_chrome.plan_trace`). Every packet is encoded by hand, as protobuf writes it (tests
compare with the `perfetto` package's protos): the track descriptors field by field, the
millions of slice events framed from bytes encoded once (see "slice events" below) and written one process (rank) at a time, so a
rank's args are built, written and freed before the next rank's (as the JSON writer does).
A rank with a node list of its own (each rank of a log) encodes its annotations from
`ArgsRows` (`row_begin_bodies`): each args shape's fixed pieces once, its nodes' own fields
per value, no dict per slice. The loops over every event of such a rank (its own fields'
annotations, its begins' bodies, the framing of its packets) run in C when the optional
module `_pftrace.c` is built, with the same bytes; the Python here is their specification.

Packet stream:
1. on sequence SEQUENCE_ID (1), a packet that clears incremental state, then a track
   descriptor per process (pid, name, sort index; uuid 2^40 + pid) and per thread (pid, tid,
   name, sort index; uuid: its varint is the slot's bytes then the pid's, see `thread_uuid`);
2. per process, in plan order, on a trusted sequence of its own (`sequence_id`: 2^14 + pid):
   a packet with SEQ_INCREMENTAL_STATE_CLEARED interning every slice name and arg name the
   process uses (iids from 1, in first-use order over its begins), then its TYPE_SLICE_BEGIN /
   TYPE_SLICE_END events (SEQ_NEEDS_INCREMENTAL_STATE) in time order, begins and ends of one
   thread in proper nesting order (an end at t comes before a begin at t). Args are debug
   annotations; flows are `flow_ids` on the begin event (a chain's start and middle links)
   and `terminating_flow_ids` (its end), so Perfetto draws the same arrows as from the JSON.

Interned data and incremental state are per sequence in Perfetto (trace processor keeps them
per trusted_packet_sequence_id, starts a new state at SEQ_INCREMENTAL_STATE_CLEARED, reads a
packet's interned_data after that flag, and drops a SEQ_NEEDS_INCREMENTAL_STATE packet seen
before any clear on its sequence). So a process's bytes depend on that process alone
(`encode_process`): processes can be encoded apart (another worker) and concatenated.
Events are in time order per process, not across processes: Perfetto's trace processor
sorts every packet by timestamp before parsing, keeping file order among equal timestamps
(its sorter compares (timestamp, position in the file)), so only the order of one track's
events matters, and interned data is read in file order, before the events that use it.
Flow ids are global to the trace. Timestamps are integer ns from the trace origin. No
wall-clock or hash order: same trace, same bytes.
"""

from __future__ import annotations

import functools
import operator
import struct
from array import array
from bisect import bisect_left
from collections import defaultdict
from itertools import accumulate, chain, compress, count, repeat
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable

from .._proto.varint import varint, varints
from ..diagnostics import Diagnostics
from ..gc_pause import paused_gc
from ..timeline import Timeline
from .atomic import atomic_file
from .forked import draw, write_processes
from .layout_chrome import (
    FLOW_IN, FLOW_NONE, FLOW_OUT, FLOW_STEP, OWN_FIELDS, ArgsRows, ArgsShape, Layout, Plan, Process,
    encoder_by_process, report_iteration, start_plan,
)

try:  # optional (setup.py): without it, the same bytes from the Python below
    from . import _pftrace
except ImportError:
    _pftrace = None

SEQUENCE_ID = 1  # the first packet and the track descriptors
# Perfetto's enum values (perfetto_trace.proto; tests compare them with its protos): this module
# encodes every packet by hand, so that drawing imports neither Perfetto's protos (their
# descriptors take about 0.08 s of CPU to load, in the client and again in each forked worker)
# nor protobuf before the first timestamps are encoded (`_timestamp_column`).
_BEGIN = 1  # TrackEvent.TYPE_SLICE_BEGIN
_END = 2  # TrackEvent.TYPE_SLICE_END
_NEEDS_STATE = 2  # TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_CLEARED = 1  # TracePacket.SEQ_INCREMENTAL_STATE_CLEARED


def __getattr__(name: str):
    """`pb`, Perfetto's trace protos, imported when first asked for (tests, `add_annotations`)."""
    if name == "pb":
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2

        return perfetto_trace_pb2
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")




def write(trace, output, options=None, diagnostics: Diagnostics | None = None, timeline: Timeline | None = None) -> None:
    """The .pftrace of `trace`; big traces are placed and encoded by forked workers
    (`forked.draw_in_workers`, `--jobs`): every process's bytes depend on it alone
    (`encode_process`), so the file is the same whatever the number of workers."""
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    output = Path(output)
    start = start_plan(trace, options, diagnostics, timeline)
    with atomic_file(output) as out:
        plan = draw(start, out, options, output.parent, write_head, process_encoder)
    report_iteration(plan, diagnostics)


def write_plan(plan: Plan, out: BinaryIO) -> None:
    with paused_gc():
        write_packets(plan, out)


def write_packets(plan: Plan, out: BinaryIO) -> None:
    write_head(plan, out)
    write_processes(out, plan.processes, process_encoder, 1)


def write_head(plan: Plan, out: BinaryIO) -> None:
    """The packets before the processes' own: one clearing the state of SEQUENCE_ID, then
    the track descriptors of every process and thread (`plan.processes` may be ProcessHeads)."""
    out.write(head_packets(plan))


def head_packets(plan: Plan) -> bytes:
    """`write_head`'s bytes, encoded by hand as protobuf writes them (fields in number order;
    proto2: every field set is written, 0 and "" too); through protobuf (`head_by_protobuf`,
    which also refuses what it refuses) when a value is not an int in its field's range or a str."""
    try:
        packets = [_packet(_SEQUENCE + varint(SEQUENCE_ID) + b"\x68" + varint(_CLEARED))]
        packets += [_packet(packet) for packet in descriptor_packets(plan)]
    except _NotPlain:
        return head_by_protobuf(plan)
    return b"".join(packets)


def head_by_protobuf(plan: Plan) -> bytes:
    """`head_packets` through Perfetto's protos."""
    from perfetto.trace_builder.proto_builder import TraceProtoBuilder

    builder = TraceProtoBuilder()
    start = builder.add_packet()
    start.trusted_packet_sequence_id = SEQUENCE_ID
    start.sequence_flags = _CLEARED
    add_descriptor_packets(builder, plan)
    return builder.serialize()


def process_encoder(processes: list[Process], encoder: _EventEncoder | None = None):
    """`encode(process)`: the packets of each of `processes` in turn (`encode_process`), as
    blocks of pieces to join (`layout_chrome.encoder_by_process`: args and layouts freed as
    they are done).
    A layout is shared when a later process has it too, or an earlier one encoded it. `encoder`:
    one kept from earlier calls (`new_encoder`), whose encodings serve these processes too (a
    worker that prints its ranks one call each, `rank_timelines`); the bytes do not depend on it."""
    encoder = encoder or _EventEncoder()

    def encode_one(process: Process, later: int) -> Iterable[list[bytes]]:
        return encode_process(process, encoder, shared=later > 0 or "perfetto" in process.layout.cache)

    return encoder_by_process(processes, encode_one, encoder.finished)


def new_encoder() -> _EventEncoder:
    """An encoder for `process_encoder` to keep from call to call."""
    return _EventEncoder()


def encode_process(process: Process, encoder: _EventEncoder | None = None, shared: bool = False) -> Iterable[list[bytes]]:
    """One process's packets, in blocks of pieces to be joined (`layout_chrome.write_parts`),
    each read before the next process is encoded: the packet interning its names and arg names
    on its own sequence, then its begins and ends.

    The bytes depend on the process alone: `encoder` (a worker's own `_EventEncoder()`, kept
    from one process to the next; None: a new one) keeps only encodings that hold for any
    process with the same content (its caches may make them faster, not different), and
    `shared` (its layout serves other processes too) only chooses how they are made. The
    layout's encoding stays in `process.layout.cache` until `encoder.finished(layout)`.
    """
    return (encoder or _EventEncoder()).process_parts(process, shared)


def sequence_id(pid: int) -> int:
    """A process's trusted_packet_sequence_id: above SEQUENCE_ID, and a 3-byte varint for every
    pid (`pid_bytes`), so framing lengths do not depend on the pid."""
    return PID_OFFSET + pid


# ---------------------------------------------------------------- slice events, encoded by hand
#
# Millions of begin/end packets through protobuf objects cost several µs each. Here each
# distinct begin (name and args) is encoded once (`begin_head`), and the packets of a process
# are framed column by column (`frame`: lengths and their varints through `map`, the pieces
# joined once), in the field order protobuf itself writes. A packet is
#   [Trace.packet tag, packet length] [timestamp field] [sequence id tag] P [track_event tag,
#   event length, TrackEvent fields before track_uuid, track_uuid tag, slot bytes] P [any flow
#   id, sequence_flags]
# where P is the pid's 3 bytes (`pid_bytes`): the sequence id's varint, and the end of the
# thread's track uuid varint (`thread_uuid`: the slot's bytes, then P). So P is the only
# thing in a packet that depends on the process, twice, and nothing but the layout's pieces
# lies between: a process is `P.join(pieces)`. `frame` cuts each packet in 3 pieces
# (packet head, timestamp, rest with P in it); an end's rest depends only on the process and
# the slot (`_EndRests`). Ranks drawn with one layout (the ranks of a stage in a scheduled
# trace) share the pieces between the P's (`member_parts`): the first of them makes them,
# the others join them with their P and replace only the pieces around the begins that differ
# (a flow, a name or args of their own).
#
# Tags are (field number << 3) | wire type, from perfetto_trace.proto: Trace.packet = 1
# (message); TracePacket: timestamp = 8 (varint), trusted_packet_sequence_id = 10 (varint),
# track_event = 11 (message), sequence_flags = 13 (varint); TrackEvent: type = 9 (varint),
# name_iid = 10 (varint), track_uuid = 11 (varint), flow_ids = 47 (fixed64),
# terminating_flow_ids = 48 (fixed64).

_PACKET = b"\x0a"  # Trace.packet
_SEQUENCE = b"\x50"  # trusted_packet_sequence_id
_TRACK_EVENT = b"\x5a"
_FLAGS = b"\x68" + bytes([_NEEDS_STATE])  # sequence_flags
_END_TYPE = b"\x48" + bytes([_END])  # TrackEvent.type = TYPE_SLICE_END
_TRACK_UUID = b"\x58"
_END_HEAD = _END_TYPE + _TRACK_UUID
_FLOW_IDS = b"\xf9\x02"  # varint 377 = 47 << 3 | 1
_TERMINATING_FLOW_IDS = b"\x81\x03"  # varint 385 = 48 << 3 | 1
# the tag of a begin's flow id, by direction (a chain's middle link goes on, as its start does)
_FLOW_TAGS = tuple({FLOW_NONE: b"", FLOW_OUT: _FLOW_IDS, FLOW_IN: _TERMINATING_FLOW_IDS, FLOW_STEP: _FLOW_IDS}[d] for d in range(4))
_FLOW_ID_AND_FLAGS = struct.Struct("<QBB")  # a flow id, then the sequence_flags field (2 bytes, see _FLAGS)
_FLOW_AFTER_SIZE = len(_FLOW_IDS) + _FLOW_ID_AND_FLAGS.size  # what follows a begin's P with a flow (either tag)
_FLOW_AFTER = struct.Struct("<%dsQBB" % len(_FLOW_IDS))  # a flow's tag, id and the sequence flags
assert len(_FLOW_IDS) == len(_TERMINATING_FLOW_IDS) and _FLOW_AFTER.size == _FLOW_AFTER_SIZE
PID_OFFSET = 1 << 14  # sequence id = PID_OFFSET + pid: a 3-byte varint from pid 1 ...
MAX_PID = (1 << 21) - PID_OFFSET - 1  # ... to this one
PID_FIELD_SIZE = 3  # bytes of `pid_bytes`
MAX_SLOT = (1 << 14) - 1  # a slot's bytes in a thread uuid: 1 or 2 (`slot_bytes`)
MAX_ONE_BYTE_SLOT = 0x7F
# a begin's flow after its head: slot byte, P and the flow's tag (`_FlowHeads`), flow id, flags
_FLOW_TAIL = struct.Struct("<%dsQBB" % (1 + PID_FIELD_SIZE + len(_FLOW_IDS)))
_PIECES_PER_PACKET = 3
EVENTS_PER_BLOCK = 8192  # packets framed at a time (`_EventEncoder.process_parts`)
# a packet's bytes besides its timestamp field, the piece between its P's and what follows the last
_PACKET_FIXED = 1 + 2 * PID_FIELD_SIZE  # the sequence id tag and both P's


class _EndPieces(dict):
    """slot -> an end's piece between its 2 P's: track_event tag, event length, type,
    track_uuid tag and the slot's bytes (the same for every process)."""

    def __missing__(self, slot: int) -> bytes:
        uuid_start = _END_HEAD + slot_bytes(slot)
        text = self[slot] = _TRACK_EVENT + varint(event_size(uuid_start, _FLAGS)) + uuid_start
        return text


class _EndRests(dict):
    """slot -> an end's packet after its timestamp, for a process (`pid`: its P)."""

    def __init__(self, pid: bytes, end_pieces: _EndPieces):
        super().__init__()
        self.before = _SEQUENCE + pid
        self.after = pid + _FLAGS
        self.end_pieces = end_pieces

    def __missing__(self, slot: int) -> bytes:
        text = self[slot] = self.before + self.end_pieces[slot] + self.after
        return text


class _SlotBytes(dict):
    """slot -> `slot_bytes(slot)`, made when first asked for."""

    def __missing__(self, slot: int) -> bytes:
        text = self[slot] = slot_bytes(slot)
        return text


class _FlowHeads(dict):
    """slot << 2 | flow direction -> the slot's bytes, P (`pid`) and the tag of the flow id that follows."""

    def __init__(self, pid: bytes):
        super().__init__()
        self.pid = pid

    def __missing__(self, key: int) -> bytes:
        text = self[key] = slot_bytes(key >> 2) + self.pid + _FLOW_TAGS[key & 3]
        return text


class _SlotPids(dict):
    """slot -> `slot_bytes(slot)`, then P (`pid`) and `suffix`."""

    def __init__(self, pid: bytes, suffix: bytes):
        super().__init__()
        self.pid = pid
        self.suffix = suffix

    def __missing__(self, slot: int) -> bytes:
        text = self[slot] = slot_bytes(slot) + self.pid + self.suffix
        return text


def event_size(uuid_start: bytes, after: bytes) -> int:
    """The length of a TrackEvent: its fields up to the slot's bytes (`uuid_start`), the P that
    ends the track uuid, and `after` (any flow id and the packet's sequence_flags) but the flags."""
    return len(uuid_start) + PID_FIELD_SIZE + len(after) - len(_FLAGS)


class _Prefixed(dict):
    """n -> `prefix + varint(n - less) + suffix`, made when first asked for (lengths and slots repeat)."""

    def __init__(self, prefix: bytes, suffix: bytes = b"", less: int = 0):
        super().__init__()
        self.prefix = prefix
        self.suffix = suffix
        self.less = less

    def __missing__(self, n: int) -> bytes:
        text = self[n] = self.prefix + varint(n - self.less) + self.suffix
        return text


def thread_uuid(pid: int, slot: int) -> int:
    """A thread's track uuid, whose varint is `slot_bytes(slot) + pid_bytes(pid)`.

    Unique: below 2^28 for slots below 128, from 2^28 to 2^35 for the others (process uuids
    are from 2^40), each of one slot and pid."""
    shift = 7 * len(slot_bytes(slot))
    return slot | sequence_id(pid) << shift


def slot_bytes(slot: int) -> bytes:
    """The start of a thread uuid's varint: the slot's 7-bit groups, each followed by more."""
    if not 0 <= slot <= MAX_SLOT:
        raise ValueError(f"thread slot {slot}: the .pftrace writer draws up to {MAX_SLOT} threads per rank")
    if slot < 0x80:
        return bytes([slot | 0x80])
    return bytes([slot & 0x7F | 0x80, slot >> 7 | 0x80])


def pid_bytes(pid: int) -> bytes:
    """P: the varint of the process's sequence id, 3 bytes for every pid, which also ends the
    varint of each of its thread uuids."""
    if not 0 < pid <= MAX_PID:
        raise ValueError(f"pid {pid}: the .pftrace writer draws ranks below {MAX_PID}")
    return varint(sequence_id(pid))


BEGIN_CACHE_BYTES = 32 << 20  # encoded begins kept for reuse by the next ranks of a layout
_PLAIN_VALUES = frozenset({str, int})  # arg values whose (key, value) names one encoding (True == 1)
_COLUMN_VALUES = _PLAIN_VALUES | {type(None)}  # None: a field the slice's args do not have (no dict has None values)


class _ArgNames:
    """The arg names' iids of a process and the encodings that hold for them."""

    def __init__(self, arg_names: tuple[str, ...]):
        self.key = arg_names
        self.arg_names = dict(zip(arg_names, count(1)))
        self.annotations = _Annotations(self.arg_names)
        self.shape_formats: dict[ArgsShape, bytes] = {}  # shape -> `shape_format`, kept while these iids are
        self.formats_by_items: dict[tuple, bytes] = {}  # tuple(shape.items) -> `shape_format`, for plain values


class _Interned:
    """One process's interning (iids from 1: its slice names, then separately its arg names, in
    first-use order over its begins in writing order) and the encodings that hold for it.

    Any process with the same tables may reuse these encodings (`_EventEncoder.interned_for`):
    the ranks of a stage; those of the arg names alone (`_ArgNames`) serve any process with
    the same arg names (log ranks of other stages: other slice names, the same arg names).
    """

    def __init__(self, names: tuple[str, ...], args: _ArgNames):
        self.key = (names, args.key)
        self.names = dict(zip(names, count(1)))
        self.name_fields = _NameFields(self.names)  # name -> the fields after the annotations
        self.args = args
        self.arg_names = args.arg_names
        self.annotations = args.annotations
        self.begins: dict[tuple[str, int], bytes] = {}  # (name, id(args)) -> see `begin_heads`
        self.pinned: list[dict[str, Any]] = []  # the args of `begins`
        self.begin_bytes = 0
        self.packet_pieces: tuple[bytes, bytes] | None = None  # see `packet`

    def packet(self, pid: bytes) -> bytes:
        """The packet that starts a process's sequence (`pid`: its P): clears its state and interns every name."""
        head, rest = self.pieces()
        return head + pid + rest

    def pieces(self) -> tuple[bytes, bytes]:
        """`packet` before and after its P, framed by hand around the interned data encoded once:
        TracePacket's trusted_packet_sequence_id (10), interned_data (12), sequence_flags (13)."""
        if self.packet_pieces is None:
            data = interned_data(self.names, self.arg_names)
            rest = b"\x62" + varint(len(data)) + data + b"\x68" + bytes([_CLEARED])
            head = _PACKET + varint(len(_SEQUENCE) + PID_FIELD_SIZE + len(rest)) + _SEQUENCE
            self.packet_pieces = (head, rest)
        return self.packet_pieces

    def forget_begins(self) -> None:
        self.begins.clear()
        self.pinned.clear()
        self.begin_bytes = 0


def interned_data(names: dict[str, int], arg_names: dict[str, int]) -> bytes:
    """InternedData's fields, by hand as protobuf writes them: event_names = 2, then
    debug_annotation_names = 3, each an EventName / DebugAnnotationName (iid = 1, name = 2)."""
    try:
        return b"".join([_message(tag, b"\x08" + varint(iid) + _text_field(b"\x12", name))
                         for tag, table in ((b"\x12", names), (b"\x1a", arg_names)) for name, iid in table.items()])
    except _NotPlain:
        return interned_by_protobuf(names, arg_names)


def interned_by_protobuf(names: dict[str, int], arg_names: dict[str, int]) -> bytes:
    """`interned_data` through Perfetto's protos."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import InternedData

    interned = InternedData()
    for name, iid in names.items():
        interned.event_names.add(iid=iid, name=name)
    for name, iid in arg_names.items():
        interned.debug_annotation_names.add(iid=iid, name=name)
    return interned.SerializeToString()


def interning_tables(names: list[str], args: list[dict[str, Any]] | None, rows: ArgsRows | None,
                     positions: list[int]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(slice names, arg names) in first-use order over the begins at these positions (in
    writing order), each args dict's or shape's keys in its order."""
    slice_names = tuple(dict.fromkeys(map(names.__getitem__, positions)))
    if rows is not None:
        shapes = dict.fromkeys(map(rows.shapes.__getitem__, positions))
        keys = chain.from_iterable([key for key, _, _ in shape.items] for shape in shapes)
    else:
        drawn = list(map(args.__getitem__, positions))
        keys = chain.from_iterable(dict(zip(map(id, drawn), drawn)).values())  # each distinct dict once
    return slice_names, tuple(dict.fromkeys(keys))


MAX_ARG_STATES = 8


class _EventEncoder:
    """Frames the events of one process after another; keeps encodings that depend on content only."""

    def __init__(self) -> None:
        self.interned: _Interned | None = None  # the last process's
        self.arg_states: dict[tuple[str, ...], _ArgNames] = {}  # by arg names: stages alternate between a few
        self.packet_heads = _Prefixed(_PACKET)  # packet length -> its tag and varint
        self.event_heads = _Prefixed(_TRACK_EVENT)  # event length -> its tag and varint
        self.slot_bytes = _SlotBytes()
        self.end_pieces = _EndPieces()
        self.pid = b""  # the P of the process being framed (`start_sequence`)
        self.end_rests = _EndRests(b"", self.end_pieces)
        # a begin's body length (its event's and the sequence flags) -> sequence id field, event tag and length
        self.sequence_event_heads = _Prefixed(b"")
        self.flow_heads = _FlowHeads(b"")  # slot << 2 | flow direction -> its bytes, P and the flow's tag
        self.slot_tails = _SlotPids(b"", _FLAGS)  # slot -> its bytes, P and the sequence flags

    def interned_for(self, key: tuple[tuple[str, ...], tuple[str, ...]]) -> _Interned:
        last = self.interned
        if last is None or last.key != key:
            names, arg_names = key
            args = self.arg_states.get(arg_names)
            if args is None:
                if len(self.arg_states) >= MAX_ARG_STATES:
                    self.arg_states.clear()
                args = self.arg_states[arg_names] = _ArgNames(arg_names)
            self.interned = _Interned(names, args)
        return self.interned

    def start_sequence(self, pid: int) -> bytes:
        """Frame the next events on this process's sequence; its P (`pid_bytes`)."""
        mine = pid_bytes(pid)
        if mine != self.pid:
            self.pid = mine
            self.end_rests = _EndRests(mine, self.end_pieces)
            self.sequence_event_heads = _Prefixed(_SEQUENCE + mine + _TRACK_EVENT, less=len(_FLAGS))
            self.flow_heads = _FlowHeads(mine)
            self.slot_tails = _SlotPids(mine, _FLAGS)
        return mine

    # -- one process

    def process_parts(self, process: Process, shared: bool) -> Iterable[list[bytes]]:
        """The interning packet and every begin and end of a process, framed, in blocks of pieces
        to be joined (`layout_chrome.write_parts`), each read before the next process is encoded;
        `shared`: its layout serves other processes too."""
        layout = process.layout
        columns = layout.cache.get("perfetto")
        if columns is None:
            columns = layout.cache["perfetto"] = _Columns(layout)
        if not columns.size:
            return []
        pid = self.start_sequence(process.pid)
        rows = None if shared else process.arg_rows()
        args = None if rows is not None else process.slice_args
        own = None  # a shared layout's positions whose name or args are not its base's
        if shared and columns.base is not None:
            own = columns.own_positions(process)
        if own is not None and columns.same_tables(process, own):
            interned = self.interned_for(columns.ref_key)
        else:
            interned = self.interned_for(interning_tables(process.names, args, rows, columns.begin_positions))
        if shared:
            parts = self.member_parts(columns, interned, process, pid, own)
            if parts is not None:
                return [parts]
        # the begins' bodies (head, then tail), made for the begins of a block of events at a time
        # (a log's rank: about 250 distinct bytes per begin), framed in writing order
        tails = self.begin_tails(layout, process)
        if rows is not None:
            bodies = self.row_begin_bodies(interned, process.names, rows, tails)
        else:
            heads = self.begin_heads(interned, process.names, args)

            def bodies(positions: list[int]) -> list[bytes]:
                return list(map(operator.add, map(heads.__getitem__, positions), map(tails.__getitem__, positions)))
        packet = [interned.packet(pid)]
        return chain([packet], (self.frame(columns, bodies, k, k + EVENTS_PER_BLOCK)
                                for k in range(0, columns.size, EVENTS_PER_BLOCK)))

    # -- processes drawn with a shared layout (the ranks of a stage in a scheduled trace)
    #
    # Such a process is `P.join(pieces)` (see "slice events" above), 2 pieces a packet and
    # one more at each end:
    #   [the interning packet's head, up to its sequence id tag]
    #   then per event i: [what follows the previous P (the interning packet's rest, or the
    #   previous event's flow id and flags), packet head, timestamp field, sequence id tag]
    #   [track_event tag, event length, fields, track_uuid tag, slot bytes]
    #   and last [the last event's flags].
    # The layout's pieces are those of the last process framed with them (its `base`): the
    # next one replaces, in place, only the pieces around its begins that differ from the
    # base's (another name or args object, another flow). Ranks next to each other share most
    # args (a group's), so few differ but their flows.

    def member_parts(self, columns: _Columns, interned: _Interned, process: Process, pid: bytes,
                     own: tuple[list[int], list[int]] | None) -> list[bytes] | None:
        """A process drawn with a shared layout, in one piece; None when its interning differs
        from the layout's (then its heads are encoded again). `own`: see
        `_Columns.own_positions` (None for the first process)."""
        if columns.pieces is None:
            columns.base = (process.names, process.slice_args)
            columns.ref_key = interned.key
            columns.ref_heads = columns.heads(self, interned, process.names, process.slice_args)
            self.first_pieces(columns, interned)
        elif columns.ref_key != interned.key:
            return None
        if own is None:
            own = columns.own_positions(process)
        self.replace_begins(columns, interned, process, set(own[0]).union(own[1]))
        columns.base = (process.names, process.slice_args)
        return [pid.join(columns.pieces)]

    def first_pieces(self, columns: _Columns, interned: _Interned) -> None:
        """The pieces of the layout's first process, without its flows (see above)."""
        n = columns.size
        between = list(map(self.end_pieces.__getitem__, columns.slots))  # the piece between an event's P's
        heads, slots = columns.ref_heads, list(map(self.slot_bytes.__getitem__, columns.begin_slots))
        sizes = map(operator.add, map(operator.add, map(len, heads), map(len, slots)), repeat(PID_FIELD_SIZE))
        list(map(between.__setitem__, columns.begin_at, map(b"".join, zip(map(self.event_heads.__getitem__, sizes),
                                                                           heads, slots))))
        del slots
        head, rest = interned.pieces()
        packet_heads = map(self.packet_heads.__getitem__, map(
            operator.add, map(operator.add, map(len, columns.stamps), map(len, between)), repeat(_PACKET_FIXED + len(_FLAGS))))
        columns.tails = list(map(operator.add, map(operator.add, packet_heads, columns.stamps), repeat(_SEQUENCE)))
        columns.tails.append(b"")
        columns.begin_after = [0] * n  # position -> the event after its begin
        list(map(columns.begin_after.__setitem__, columns.begin_positions, map(operator.add, columns.begin_at, repeat(1))))
        columns.base_flows = (array("q"), array("q"))
        columns.flows_at = set()
        pieces: list[bytes] = [b""] * (2 * n + 2)
        pieces[0] = head
        pieces[1::2] = list(map(operator.add, [rest] + [_FLAGS] * n, columns.tails))
        pieces[2::2] = between
        columns.pieces = pieces

    def replace_begins(self, columns: _Columns, interned: _Interned, process: Process, own: set[int]) -> None:
        """Make the layout's pieces this process's: replace those of the begins whose name or
        args (positions in `own`) or flow differ from the base's."""
        # flows as columns (positions, codes) of `process.flow_pairs`: no dict per rank
        pairs = process.flow_pairs
        at, codes = pairs[0::2], pairs[1::2]
        base_at, base_codes = columns.base_flows
        if at == base_at:
            # the common case (ranks of a stage): flows at the same begins, about half of them
            # other flows; none changes a packet's length
            differ = list(map(operator.ne, codes, base_codes))
            changed, codes = list(compress(at, differ)), list(compress(codes, differ))
            resized = set()
        else:
            flows, base_flows = dict(zip(at, codes)), dict(zip(base_at, base_codes))
            columns.flows_at = set(flows)
            changed = set(flows).union(base_flows)
            changed = list(compress(changed, map(operator.ne, map(flows.get, changed, repeat(0)),
                                                 map(base_flows.get, changed, repeat(0)))))
            codes = list(map(flows.get, changed, repeat(0)))
            # a flow that comes or goes changes the event's length: its packet is framed again
            resized = set(compress(changed, map(operator.ne, map(operator.not_, codes),
                                                map(operator.not_, map(base_flows.get, changed, repeat(0))))))
        columns.base_flows = (at, pairs[1::2])
        framed = sorted(own.union(resized))
        # the piece of the event after each changed begin: its flow, then that event's tail
        after_at = list(map(columns.begin_after.__getitem__, changed))
        pieces = columns.pieces
        list(map(pieces.__setitem__, map(operator.add, map(operator.add, after_at, after_at), repeat(1)),
                 map(operator.add, flow_afters(codes), map(columns.tails.__getitem__, after_at))))
        if framed:
            self.frame_again(columns, interned, process, framed, own, resized)

    def frame_again(self, columns: _Columns, interned: _Interned, process: Process, positions: list[int],
                    own: set[int], resized: set[int]) -> None:
        """The piece between the P's of the begins at these positions, with this process's name
        and args at the positions in `own`, and its flows; and the packet head of those whose
        packet length changes (a flow that comes or goes: `resized`; or args of another length)."""
        begins = list(map(columns.begin_index.__getitem__, positions))
        mine = [i for i in positions if i in own] if resized else positions  # else they are `own`
        if mine:
            names, args = process.names, process.slice_args
            # not through `begin_heads`' cache: a rank's own args are mostly its own dicts (its peers)
            new_heads = list(map(operator.add, interned.annotations.many(list(map(args.__getitem__, mine))),
                                 map(interned.name_fields.__getitem__, map(names.__getitem__, mine))))
            list(map(columns.ref_heads.__setitem__, map(columns.begin_index.__getitem__, mine), new_heads))
        heads = list(map(columns.ref_heads.__getitem__, begins))
        after_sizes = [_FLOW_AFTER_SIZE if i in columns.flows_at else len(_FLAGS) for i in positions]
        events = list(map(columns.begin_at.__getitem__, begins))
        slots = list(map(self.slot_bytes.__getitem__, map(columns.begin_slots.__getitem__, begins)))
        sizes = map(operator.add, map(operator.add, map(len, heads), map(len, slots)), after_sizes)
        between = list(map(b"".join, zip(map(self.event_heads.__getitem__, map(operator.sub, sizes, repeat(
            len(_FLAGS) - PID_FIELD_SIZE))), heads, slots)))
        pieces = columns.pieces
        between_at = list(map(operator.add, map(operator.add, events, events), repeat(2)))
        old_sizes = list(map(len, map(pieces.__getitem__, between_at)))
        list(map(pieces.__setitem__, between_at, between))
        # the packets whose length changes: a new packet head in the piece before them
        again = list(compress(count(), map(operator.ne, old_sizes, map(len, between))))
        if resized:
            again = sorted(set(again).union(compress(count(), map(resized.__contains__, positions))))
        if not again:
            return
        events = list(map(events.__getitem__, again))
        stamps = list(map(columns.stamps.__getitem__, events))
        packet_sizes = map(operator.add, map(operator.add, map(len, stamps), map(len, map(between.__getitem__, again))),
                           map(operator.add, map(after_sizes.__getitem__, again), repeat(_PACKET_FIXED)))
        tails = list(map(operator.add, map(operator.add, map(self.packet_heads.__getitem__, packet_sizes), stamps),
                         repeat(_SEQUENCE)))
        # the piece before each packet: what follows the previous P (kept), then the new tail
        at = [2 * e + 1 for e in events]
        pieces_before = list(map(pieces.__getitem__, at))
        kept = map(len, map(columns.tails.__getitem__, events))
        list(map(pieces.__setitem__, at, [piece[:len(piece) - old] + tail
                                          for piece, old, tail in zip(pieces_before, kept, tails)]))
        list(map(columns.tails.__setitem__, events, tails))

    def frame(self, columns: _Columns, bodies: Callable[[list[int]], list[bytes]], start: int, stop: int) -> list[bytes]:
        """The pieces of the packets of a layout's events from `start` to `stop` in writing order,
        with the bodies `bodies(positions)` gives for their begins (a head, see `begin_heads`,
        then its tail, see `begin_tails`)."""
        codes = columns.codes[start:stop]
        n = len(columns.layout_slots)
        # each event's packet after its timestamp: an end's by its slot; a begin's from its body
        begins = list(map(operator.ge, codes, repeat(n)))
        made = bodies(list(map(operator.sub, compress(codes, begins), repeat(n))))
        if _pftrace is not None:
            block = _pftrace.frame_block(columns.codes, start, stop, n, columns.layout_slots, self.end_rests, made,
                                         self.sequence_event_heads, self.packet_heads, columns.times)
            if block is not None:
                return [block]
        rests = list(map(self.end_rests.__getitem__, map(columns.layout_slots.__getitem__,
                                                         map(operator.mod, codes, repeat(n)))))
        list(map(rests.__setitem__, compress(count(), begins),
                 map(operator.add, map(self.sequence_event_heads.__getitem__, map(len, made)), made)))
        del made
        parts: list[bytes] = [b""] * (_PIECES_PER_PACKET * len(codes))
        parts[0::_PIECES_PER_PACKET] = list(map(self.packet_heads.__getitem__, map(
            operator.add, columns.stamp_sizes[start:stop], map(len, rests))))
        parts[1::_PIECES_PER_PACKET] = columns.stamps[start:stop]
        parts[2::_PIECES_PER_PACKET] = rests
        return parts

    def begin_tails(self, layout: Layout, process: Process) -> list[bytes]:
        """Per begin (by position), what follows its head: its slot's bytes, P (the track
        uuid's end), any flow id and the sequence flags."""
        slots = layout.slots
        tails = list(map(self.slot_tails.__getitem__, slots))
        pairs = process.flow_pairs  # as `process.flows` has them, with no dict: a later pair wins
        if pairs:
            at, codes = pairs[0::2], pairs[1::2]  # none 0
            # slot bytes, P and flow tag by slot << 2 | direction; then the flow id and the flags
            heads = map(self.flow_heads.__getitem__, map(operator.or_, map(operator.lshift, map(
                slots.__getitem__, at), repeat(2)), map(operator.and_, codes, repeat(3))))
            ids = map(operator.rshift, codes, repeat(2))
            if max(slots) <= MAX_ONE_BYTE_SLOT:  # heads of one length: head, id and flags packed in one call
                flows = map(_FLOW_TAIL.pack, heads, ids, repeat(_FLAGS[0]), repeat(_FLAGS[1]))
            else:
                flows = map(operator.add, heads, map(_FLOW_ID_AND_FLAGS.pack, ids, repeat(_FLAGS[0]), repeat(_FLAGS[1])))
            list(map(tails.__setitem__, at, flows))
        return tails

    def begin_heads(self, interned: _Interned, names: list[str], args: list[dict[str, Any]]) -> list[bytes]:
        """TrackEvent fields 4 (debug annotations), 9 (type) and 10 (name_iid), then the
        track_uuid tag, for each (name, args); each distinct pair is encoded once, the new
        ones together (`new_begins`)."""
        if interned.begin_bytes > BEGIN_CACHE_BYTES:
            interned.forget_begins()
        keys = list(zip(names, map(id, args)))
        heads = list(map(interned.begins.get, keys))
        missing = dict.fromkeys(compress(keys, map(operator.is_, heads, repeat(None))))  # in first-use order
        if not missing:
            return heads
        at = dict(zip(keys, range(len(keys))))  # a key -> where it occurs (any occurrence: same name and dict)
        new = [at[key] for key in missing]
        interned.begins.update(zip(missing, self.new_begins(interned, [names[j] for j in new], [args[j] for j in new])))
        return list(map(interned.begins.__getitem__, keys))

    def row_begin_bodies(self, interned: _Interned, names: list[str], rows: ArgsRows,
                         tails: list[bytes]) -> Callable[[list[int]], list[bytes]]:
        """`bodies(positions)`: `begin_heads` of these positions, each followed by its tail
        (`tails`), from args shapes: each shape's fixed annotations encoded once (here), the own
        fields' ones per value, name fields and tail filled in by the same `%` (one bytes made
        per begin)."""
        # the previous process's formats, if it had the same interning: ranks next to each other share shapes
        # else one of the same items: the ranks of a log have shapes of their own, most of them alike
        previous, formats, alike = interned.args.shape_formats, {}, interned.args.formats_by_items
        if len(alike) >= MAX_ANNOTATION_PIECES:
            alike.clear()
        for shape in dict.fromkeys(rows.shapes):
            text = previous.get(shape)
            if text is None:
                items = tuple(shape.items)
                if _PLAIN_VALUES.issuperset([value.__class__ for _, value, f in items if f < 0]):  # see `_Annotations`
                    text = alike.get(items)
                    if text is None:
                        text = alike[items] = self.shape_format(interned, shape)
                else:
                    text = self.shape_format(interned, shape)
            formats[shape] = text
        interned.args.shape_formats = formats
        # a field no shape names is not encoded (it has no iid)
        arg_names, annotations = interned.arg_names, interned.annotations
        keys = [key if key in arg_names else None for key in OWN_FIELDS]
        shapes, columns, name_fields = rows.shapes, rows.columns, interned.name_fields

        def bodies(positions: list[int]) -> list[bytes]:
            values = [None if key is None else annotations.column_at(key, column, positions)
                      for key, column in zip(keys, columns)]
            names_at = list(map(name_fields.__getitem__, map(names.__getitem__, positions)))
            tails_at = list(map(tails.__getitem__, positions))
            formats_at = list(map(formats.__getitem__, map(shapes.__getitem__, positions)))
            if _pftrace is not None:
                made = _pftrace.format_bodies(formats_at, values, names_at, tails_at)
                if made is not None:
                    return made
            rows = zip(*[repeat(b"") if pieces is None else pieces for pieces in values], names_at, tails_at)
            return list(map(operator.mod, formats_at, rows))

        return bodies

    def shape_format(self, interned: _Interned, shape: ArgsShape) -> bytes:
        """The shape's annotations with a `%b` per own field, a `%.0b` per other field, in
        OWN_FIELDS order; then a `%b` for the name fields (`_NameFields`) and one for the tail."""
        parts = []
        next_field = 0
        for key, value, f in shape.items:
            if f < 0:
                parts.append(interned.annotations.fixed(key, value).replace(b"%", b"%%"))
            else:
                parts.append(b"%.0b" * (f - next_field) + b"%b")
                next_field = f + 1
        parts.append(b"%.0b" * (len(OWN_FIELDS) - next_field) + b"%b%b")
        return b"".join(parts)

    def new_begins(self, interned: _Interned, names: list[str], args: list[dict[str, Any]]) -> list[bytes]:
        interned.pinned.extend(args)  # kept while their encodings are: no other dict gets their ids
        heads = list(map(operator.add, interned.annotations.many(args), map(interned.name_fields.__getitem__, names)))
        interned.begin_bytes += sum(map(len, heads))
        return heads

    def finished(self, layout: Layout) -> None:
        """Free what was encoded for a layout no later process has (each rank of a log has its own).

        Its begins too: args carry the stage, so other layouts rarely share them.
        """
        layout.cache.pop("perfetto", None)
        if self.interned is not None:
            self.interned.forget_begins()


class _NameFields(dict):
    """name -> TrackEvent type (begin), name_iid and the track_uuid tag, made when first asked for."""

    def __init__(self, names: dict[str, int]):
        super().__init__()
        self.names = names

    def __missing__(self, name: str) -> bytes:
        iid = self.names[name]
        text = self[name] = _BEGIN_TYPE + b"\x50" + varint(iid) + _TRACK_UUID
        return text


class _Columns:
    """A layout's events in writing order, as columns: what every process drawn with it shares.

    Events are sorted by (ts, slot, seq), where `seq` numbers them in the order they were
    generated (`generation_order`, or `slot_order` that sorts alike): per thread that is proper
    nesting order (an end at t before a begin at t, a parent's begin before its child's).
    """

    def __init__(self, layout: Layout):
        starts, ends, slots = layout.starts, layout.ends, layout.slots
        n = len(starts)
        # sorted by (ts, slot) as one int per code, ts << slot bits | slot (also for ts < 0), then by
        # generation order: the sort is stable
        slot_bits = max(slots, default=0).bit_length()
        event_times, event_slots = ends + starts, slots + slots  # by code
        keys = list(map(operator.or_, map(operator.lshift, event_times, repeat(slot_bits)), event_slots))
        codes = sorted(slot_order(layout), key=keys.__getitem__)  # n + position for a begin, position for an end
        del keys
        self.times = list(map(event_times.__getitem__, codes))  # per event, in writing order
        del event_times
        self.size = len(codes)
        self.codes = codes
        self.layout_slots = slots
        self.begin_positions = list(map(operator.sub, compress(codes, map(operator.ge, codes, repeat(n))), repeat(n)))
        # a shared layout's framing, made from its first process (see `_EventEncoder.member_parts`)
        self.pieces: list[bytes] | None = None  # the base's
        self.tails: list[bytes] = []  # the base's, per event: packet head, timestamp field, sequence id tag; then b""
        self.begin_after: list[int] = []  # position -> the event after its begin (whose piece starts with its flow)
        self.base_flows: tuple[array, array] = (array("q"), array("q"))  # the base's flows: positions, codes
        self.flows_at: set[int] = set()  # the base's positions with a flow
        self.base: tuple[list, list] | None = None  # the names and args of the last process framed with `pieces`
        self.ref_heads: list[bytes] | None = None  # the base's begins' heads
        self.ref_key: tuple | None = None  # the interning tables of every process framed with `pieces`

    # the timestamp field per event and its length, made when first asked for (the C framing
    # encodes the times itself); remembered per layout only (a log's ranks each have their own times)
    @functools.cached_property
    def stamps(self) -> list[bytes]:
        return timestamp_fields(self.times, ascending=True)

    @functools.cached_property
    def stamp_sizes(self) -> list[int]:
        return ascending_field_sizes(self.times, self.stamps)

    # what a shared layout's processes need besides (`_EventEncoder.member_parts`)
    @functools.cached_property
    def slots(self) -> list[int]:
        """The slot of each event."""
        return list(map((self.layout_slots + self.layout_slots).__getitem__, self.codes))

    @functools.cached_property
    def begin_at(self) -> list[int]:
        """The event index of each begin."""
        return list(compress(count(), map(operator.ge, self.codes, repeat(len(self.layout_slots)))))

    @functools.cached_property
    def begin_slots(self) -> list[int]:
        return list(map(self.slots.__getitem__, self.begin_at))

    @functools.cached_property
    def begin_index(self) -> list[int]:
        """position -> its begin's index in begin order."""
        index = [0] * len(self.begin_positions)
        list(map(index.__setitem__, self.begin_positions, range(len(index))))
        return index

    def own_positions(self, process: Process) -> tuple[list[int], list[int]]:
        """The positions whose name, and those whose args, are not the base process's (other objects)."""
        return tuple([] if mine is theirs else list(compress(count(), map(operator.is_not, mine, theirs)))
                     for mine, theirs in zip((process.names, process.slice_args), self.base))

    def same_tables(self, process: Process, own: tuple[list[int], list[int]]) -> bool:
        """Whether the process's interning tables are the base's (`ref_key`): so when its names at
        its own positions are the same and its args there have the same keys in the same order
        (the tables follow the names and keys in begin order)."""
        (ref_names, ref_args), names, args = self.base, process.names, process.slice_args
        own_names, own_args = own
        if not all(map(operator.eq, map(names.__getitem__, own_names), map(ref_names.__getitem__, own_names))):
            return False
        # the keys of each pair as tuples, compared in C (a dict per position: no Python step each)
        return all(map(operator.eq, map(tuple, map(args.__getitem__, own_args)),
                       map(tuple, map(ref_args.__getitem__, own_args))))

    def heads(self, encoder: _EventEncoder, interned: _Interned, names: list[str], args: list[dict[str, Any]]) -> list[bytes]:
        """The begins' heads, in begin order."""
        positions = self.begin_positions
        return encoder.begin_heads(interned, list(map(names.__getitem__, positions)), list(map(args.__getitem__, positions)))



def flow_afters(codes: list[int]) -> list[bytes]:
    """Per begin, its flow (`code`: see `layout_chrome.flow_of`; 0 for none) and the sequence flags."""
    if not all(codes):
        return [_FLOW_TAGS[code & 3] + _FLOW_ID_AND_FLAGS.pack(code >> 2, *_FLAGS) if code else _FLAGS for code in codes]
    # the flow's tag (2 bytes either way), its id and the flags in one struct call per begin
    return list(map(_FLOW_AFTER.pack, map(_FLOW_TAGS.__getitem__, map(operator.and_, codes, repeat(3))),
                    map(operator.rshift, codes, repeat(2)), repeat(_FLAGS[0]), repeat(_FLAGS[1])))


def slot_order(layout: Layout) -> list[int]:
    """Begins (n + position) and ends (position) with each slot's events in `generation_order`'s
    order among those at the same time (all the sort by (ts, slot) keeps of it), in C.

    On a slot, slices nest properly (`layout_chrome.place_lanes`) and come in drawing order,
    an outer slice before the slices it holds. With no slice of zero duration, events at one
    time on one slot are then ends (innermost first: later in drawing order first) followed by
    begins (outermost first): every end before every begin, the ends in reverse drawing order,
    the begins in drawing order. A slice of zero duration begins before it ends: then
    `generation_order` itself.
    """
    starts, ends = layout.starts, layout.ends
    if not all(map(operator.lt, starts, ends)):
        return generation_order(layout)
    n = len(starts)
    order = range(n) if layout.order is None else layout.order
    codes = list(reversed(order))
    codes += map(operator.add, order, repeat(n))
    return codes


def generation_order(layout: Layout) -> list[int]:
    """Begins (n + position) and ends (position) in the order a thread nests them: a slice's
    begin, then, before the next begin on its slot, the ends of the slices that end by then
    (innermost first), so an end at t comes before a begin at t, a parent's begin before its
    child's, and a slice of no duration ends before the next one begins."""
    starts, ends, slots = layout.starts, layout.ends, layout.slots
    n = len(starts)
    codes: list[int] = []
    stacks: dict[int, list[int]] = defaultdict(list)  # slot -> its open slices, innermost last
    for i in range(n) if layout.order is None else layout.order:
        stack = stacks[slots[i]]
        start = starts[i]
        while stack and ends[stack[-1]] <= start:
            codes.append(stack.pop())
        codes.append(n + i)
        stack.append(i)
    for stack in stacks.values():
        codes.extend(reversed(stack))
    return codes


def timestamp_fields(times: list[int], ascending: bool = False) -> list[bytes]:
    """TracePacket's timestamp field (tag 0x40, then the varint) of each time, encoded by upb in one call.

    A message with one unpacked repeated uint64 field numbered 8 serializes as exactly these
    fields one after another; each is cut out by its length, known from the value's bit length
    (`ascending`: the times are in ascending order, see `ascending_fields`).
    """
    if not times:
        return []
    if min(times) < 0 or max(times) >= 1 << 64:  # not a uint64: as varint() has it
        return [b"\x40" + varint(t) for t in times]
    column = _timestamp_column()()
    column.timestamp.extend(times)
    data = column.SerializeToString()
    if ascending:
        return ascending_fields(times, data)
    ends = list(accumulate(map(_TIMESTAMP_FIELD_SIZE.__getitem__, map(int.bit_length, times))))
    return list(map(data.__getitem__, map(slice, [0, *ends[:-1]], ends)))


def ascending_fields(times: list[int], data: bytes) -> list[bytes]:
    """The timestamp fields of these ascending uint64s, cut out of their column `data`: the
    times of one varint length are a run (found by bisection), whose fields are cut in C, one
    stride apart (`cut_fields`)."""
    fields: list[bytes] = []
    offset = i = 0
    for groups in range(1, 11):  # varints of this many 7-bit groups: values below 2^(7 * groups)
        j = bisect_left(times, 1 << 7 * groups, i)
        if j > i:
            size = 1 + groups  # the tag, then the varint
            fields += cut_fields(data, offset, size, j - i)
            offset, i = offset + size * (j - i), j
    return fields


def ascending_field_sizes(times: list[int], fields: list[bytes]) -> list[int]:
    """The length of each of `timestamp_fields(times, ascending=True)` (`fields`): a run per
    varint length, made without a step per field."""
    if not times or times[0] < 0 or times[-1] >= 1 << 64:
        return list(map(len, fields))
    sizes: list[int] = []
    i = 0
    for groups in range(1, 11):
        j = bisect_left(times, 1 << 7 * groups, i)
        sizes += [1 + groups] * (j - i)
        i = j
    return sizes


FIELDS_PER_UNPACK = 512


@functools.cache
def _fields_struct(size: int, count: int) -> struct.Struct:
    return struct.Struct(b"%ds" % size * count)


def cut_fields(data: bytes, offset: int, size: int, count: int) -> list[bytes]:
    """`count` pieces of `size` bytes of `data` from `offset`, one after another: a struct of
    FIELDS_PER_UNPACK strings unpacks them, a batch per call (about twice as fast as a regex
    match or a slice each)."""
    batch = _fields_struct(size, FIELDS_PER_UNPACK)
    step = size * FIELDS_PER_UNPACK
    whole, rest = divmod(count, FIELDS_PER_UNPACK)
    fields: list[bytes] = []
    for start in range(offset, offset + whole * step, step):
        fields += batch.unpack_from(data, start)
    if rest:
        fields += struct.unpack_from(b"%ds" % size * rest, data, offset + whole * step)
    return fields


# FileDescriptorProto of "et_convert/timestamp_column.proto" (proto2, package et_convert): message
# TimestampColumn { repeated uint64 timestamp = 8; } (proto2: not packed); serialized here so that
# descriptor_pb2 need not be imported (tests compare it with the one built through descriptor_pb2)
TIMESTAMP_COLUMN_FILE = (b'\n!et_convert/timestamp_column.proto\x12\net_convert"$\n\x0fTimestampColumn'
                         b'\x12\x11\n\ttimestamp\x18\x08 \x03(\x04b\x06proto2')


@functools.cache
def _timestamp_column():
    """The message class of TIMESTAMP_COLUMN_FILE (protobuf imported on first use)."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(TIMESTAMP_COLUMN_FILE)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("et_convert.TimestampColumn"))


_TIMESTAMP_FIELD_SIZE = [1 + max(1, (bits + 6) // 7) for bits in range(65)]  # tag + varint, by bit length


PROCESS_UUID_BASE = 1 << 40  # thread track uuids are their tids (< 2^32): process uuids sit above them


def process_uuid(process: Process) -> int:
    return PROCESS_UUID_BASE + process.pid


class _NotPlain(ValueError):
    """A value `descriptor_packets` leaves to protobuf."""


_INT32 = (-(1 << 31), 1 << 31)
_UINT64 = (0, 1 << 64)
_TRACK_DESCRIPTOR = b"\xe2\x03"  # TracePacket.track_descriptor = 60 (message)


def descriptor_packets(plan: Plan) -> list[bytes]:
    """TracePacket's fields of each track descriptor (`add_descriptor_packets`): its sequence id,
    then TrackDescriptor: uuid = 1, process = 3 (ProcessDescriptor: pid = 1, legacy_sort_index = 3,
    process_name = 6) or thread = 4 (ThreadDescriptor: pid = 1, tid = 2, legacy_sort_index = 3,
    thread_name = 5); ints as varints (a negative one as its 64-bit two's complement)."""
    sequence = _SEQUENCE + varint(SEQUENCE_ID) + _TRACK_DESCRIPTOR
    packets = []
    for process in plan.processes:
        pid = _int_field(b"\x08", process.pid, _INT32)
        fields = pid + _int_field(b"\x18", process.rank, _INT32) + _text_field(b"\x32", process.name)
        track = _int_field(b"\x08", process_uuid(process), _UINT64) + _message(b"\x1a", fields)
        packets.append(_message(sequence, track))
        for thread in process.threads:
            fields = (pid + _int_field(b"\x10", thread.tid, _INT64) + _int_field(b"\x18", thread.sort_index, _INT32)
                      + _text_field(b"\x2a", thread.name))
            uuid = _int_field(b"\x08", thread_uuid(process.pid, thread.sort_index), _UINT64)
            packets.append(_message(sequence, uuid + _message(b"\x22", fields)))
    return packets


def _packet(fields: bytes) -> bytes:
    return _message(_PACKET, fields)


def _message(tag: bytes, fields: bytes) -> bytes:
    return tag + varint(len(fields)) + fields


def _int_field(tag: bytes, value: int, bounds: tuple[int, int]) -> bytes:
    if value.__class__ is not int or not bounds[0] <= value < bounds[1]:
        raise _NotPlain(value)
    return tag + varint(value)


def _text_field(tag: bytes, value: str) -> bytes:
    if value.__class__ is not str:
        raise _NotPlain(value)
    try:
        text = value.encode("utf-8")
    except UnicodeEncodeError:
        raise _NotPlain(value) from None
    return tag + varint(len(text)) + text


def add_descriptor_packets(builder, plan: Plan) -> None:
    """The track descriptors through protobuf (`builder`: a `TraceProtoBuilder`), see `descriptor_packets`."""
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


# One DebugAnnotation (TrackEvent field 4) per arg: name_iid = 1 (varint), then the value:
# bool_value = 2 (varint), int_value = 4 (varint, negatives as 64-bit two's complement),
# double_value = 5 (fixed64), string_value = 6 (bytes). Encoded here, not through protobuf
# objects (a log has a distinct args dict per slice); `add_annotations` is the reference the
# tests compare with. Pieces repeat (stage, op, dtype, ...): each distinct one is encoded once.
_BEGIN_TYPE = b"\x48" + bytes([_BEGIN])
_ANNOTATION = b"\x22"
_INT64 = (-(1 << 63), 1 << 63)
MAX_ANNOTATION_PIECES = 1 << 16


class _AnnotationPieces(dict):
    """(key, value) -> its debug annotation, encoded when first asked for."""

    def __init__(self, arg_names: dict[str, int]):
        super().__init__()
        self.arg_names = arg_names

    def __missing__(self, item: tuple[str, Any]) -> bytes:
        text = self[item] = _annotation(self.arg_names[item[0]], item[1])
        return text


class _FieldPieces(dict):
    """value -> its debug annotation under one arg name (`name_iid`), encoded when first asked
    for; b"" for None (a field the slice's args do not have)."""

    def __init__(self, name_iid: int):
        super().__init__({None: b""})
        self.name_iid = name_iid
        self.name_field = b"\x08" + varint(name_iid)

    def __missing__(self, value: Any) -> bytes:
        # a node id or a source (a log's own fields are mostly distinct): `_annotation`'s bytes,
        # with the name field made once
        if value.__class__ is int and 0 <= value < _INT64[1]:
            body = self.name_field + b"\x20" + varint(value)
        elif value.__class__ is str:
            data = value.encode("utf-8")
            body = self.name_field + b"\x32" + varint(len(data)) + data
        else:
            text = self[value] = _annotation(self.name_iid, value)
            return text
        text = self[value] = _ANNOTATION + varint(len(body)) + body
        return text

    def add_many(self, values: list) -> None:
        """Encode these values (distinct, not cached yet, each a str or an int) as `__missing__`
        would, a column at a time: a log's own fields (node ids, sources) are mostly distinct,
        and a Python call per value was most of `_Annotations.column`'s time."""
        kinds = list(map(type, values))
        strs = list(compress(values, map(operator.is_, kinds, repeat(str))))
        ints = list(compress(values, map(operator.is_, kinds, repeat(int))))
        if ints and not (0 <= min(ints) and max(ints) < _INT64[1]):
            list(map(self.__getitem__, ints))  # some negative: each encoded by `__missing__`
            ints = []
        # a piece is a head that depends only on the length of what follows it, then the value's
        # bytes: one head per length, and one concatenation per value
        fixed = len(self.name_field) + 1  # the name field and the value's tag
        if strs:
            datas = list(map(str.encode, strs))
            sizes = list(map(len, datas))
            heads = {n: _ANNOTATION + varint(fixed + len(varint(n)) + n) + self.name_field + b"\x32" + varint(n)
                     for n in set(sizes)}
            self.update(zip(strs, map(operator.add, map(heads.__getitem__, sizes), datas)))
        if ints:
            encoded = varints(ints)
            sizes = list(map(len, encoded))
            heads = {n: _ANNOTATION + varint(fixed + n) + self.name_field + b"\x20" for n in set(sizes)}
            self.update(zip(ints, map(operator.add, map(heads.__getitem__, sizes), encoded)))


class _Annotations:
    """args -> their debug annotations, from pieces encoded once per (key, value).

    A dict whose values are all str or int is looked up item by item in C (`map`): a
    (key, value) pair then names one encoding (no True == 1 or 0.0 == -0.0 between those
    two types); only its new pairs, a few per dict, are encoded in Python.
    """

    def __init__(self, arg_names: dict[str, int]):
        self.arg_names = arg_names
        self.pieces = _AnnotationPieces(arg_names)
        self.field_pieces: dict[str, _FieldPieces] = {}  # see `column`

    def __call__(self, args: dict[str, Any]) -> bytes:
        return self.many([args])[0]

    def many(self, dicts: list[dict[str, Any]]) -> list[bytes]:
        """The annotations of each dict: its items' pieces joined, every lookup and join in C."""
        if not _PLAIN_VALUES.issuperset(map(type, chain.from_iterable(map(dict.values, dicts)))):
            return list(map(self.unplain, dicts))
        if len(self.pieces) >= MAX_ANNOTATION_PIECES:
            self.pieces.clear()
        return list(map(b"".join, map(map, repeat(self.pieces.__getitem__), map(dict.items, dicts))))

    def fixed(self, key: str, value: Any) -> bytes:
        """The piece of one (key, value), from the cache when its type names one encoding."""
        if value.__class__ not in _PLAIN_VALUES:
            return self.piece(key, value)
        return self.pieces[(key, value)]

    def column_at(self, key: str, column: list, positions: list[int]) -> list[bytes]:
        """`column(key, [column[p] for p in positions])`, in C when it is built and takes the values."""
        if _pftrace is not None:
            cache = self.field_cache(key)
            pieces = _pftrace.annotation_pieces(column, positions, cache, cache.name_field)
            if pieces is not None:
                return pieces
        return self.column(key, list(map(column.__getitem__, positions)))

    def column(self, key: str, values: list) -> list[bytes]:
        """The piece of (key, value) for each value; b"" for None (a field the arg does not have)."""
        if not _COLUMN_VALUES.issuperset(map(type, values)):
            return [b"" if value is None else self.piece(key, value) for value in values]
        cache = self.field_cache(key)
        pieces = list(map(cache.get, values))
        if None not in pieces:
            return pieces
        cache.add_many(list(dict.fromkeys(compress(values, map(operator.is_, pieces, repeat(None))))))
        return list(map(cache.__getitem__, values))

    def field_cache(self, key: str) -> "_FieldPieces":
        """value -> piece under `key`: looked up without a (key, value) tuple each; a new one once full."""
        cache = self.field_pieces.get(key)
        if cache is None or len(cache) >= MAX_ANNOTATION_PIECES:
            cache = self.field_pieces[key] = _FieldPieces(self.arg_names[key])
        return cache

    def unplain(self, args: dict[str, Any]) -> bytes:
        """A dict with a value of another type (bool, float): by its own items."""
        if _PLAIN_VALUES.issuperset(map(type, args.values())):
            return self.many([args])[0]
        return b"".join([self.piece(key, value) for key, value in args.items()])

    def piece(self, key: str, value: Any) -> bytes:
        return _annotation(self.arg_names[key], value)


def annotation_bytes(args: dict[str, Any], arg_names: dict[str, int]) -> bytes:
    """The debug annotations of `args`, every key interned in `arg_names`."""
    return _Annotations(arg_names)(args)


def _annotation(name_iid: int, value: Any) -> bytes:
    if value.__class__ is str:  # the most common
        text = value.encode("utf-8")
        body = b"\x32" + varint(len(text)) + text
    elif isinstance(value, bool):
        body = b"\x10" + (b"\x01" if value else b"\x00")
    elif isinstance(value, int) and _INT64[0] <= value < _INT64[1]:
        body = b"\x20" + varint(value)
    elif isinstance(value, int):  # out of int64: as protobuf has it (it refuses)
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

        event = TrackEvent()
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
