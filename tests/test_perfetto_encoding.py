"""The .pftrace writer frames packets by hand: check the bytes against protobuf's own encoding."""

from __future__ import annotations

import io
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from converters.diagnostics import Diagnostics
from converters.options import Options
from converters.writers import perfetto
from converters.writers.layout_chrome import plan_trace
from test_chrome import small_trace
from test_chrome_encoding import shared_trace
from test_perfetto import decoded, random_trace

BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN


@given(st.integers(0, 2**64 - 1))
def test_varint_is_protobufs(n):
    assert b"\x40" + perfetto.varint(n) == pb.TracePacket(timestamp=n).SerializeToString()


@pytest.mark.parametrize("pid", [1, 2, 127, 128, 1025, 16383, 16384, perfetto.MAX_PID])
@pytest.mark.parametrize("slot", [0, 1, 2, 127, 128, 999, perfetto.MAX_SLOT])
def test_thread_uuid_varint_is_slot_bytes_then_pid_bytes(pid, slot):
    uuid = perfetto.thread_uuid(pid, slot)
    encoded = pb.TrackEvent(track_uuid=uuid).SerializeToString()
    assert encoded == b"\x58" + perfetto.slot_bytes(slot) + perfetto.pid_bytes(pid)
    assert len(perfetto.pid_bytes(pid)) == perfetto.PID_FIELD_SIZE
    # the pid bytes are the varint of the sequence id: one P serves both (see "slice events")
    assert pb.TracePacket(trusted_packet_sequence_id=perfetto.sequence_id(pid)).SerializeToString() == (
        b"\x50" + perfetto.pid_bytes(pid))


def test_thread_uuids_are_unique_and_below_process_uuids():
    pids = [1, 2, 127, 128, 16383, 16384, perfetto.MAX_PID]
    slots = [0, 1, 127, 128, 999, perfetto.MAX_SLOT]
    uuids = {perfetto.thread_uuid(pid, slot) for pid in pids for slot in slots}
    assert len(uuids) == len(pids) * len(slots)
    assert max(uuids) < perfetto.PROCESS_UUID_BASE


def test_pid_and_slot_beyond_the_uuid_scheme_are_refused():
    with pytest.raises(ValueError, match="ranks below"):
        perfetto.pid_bytes(perfetto.MAX_PID + 1)
    with pytest.raises(ValueError, match="threads per rank"):
        perfetto.slot_bytes(perfetto.MAX_SLOT + 1)


def written(trace, timeline=None) -> bytes:
    out = io.BytesIO()
    perfetto.write_plan(plan_trace(trace, Options(ranks="all"), Diagnostics(), timeline), out)
    return out.getvalue()


def test_hand_framed_packets_are_what_protobuf_would_write():
    """Parsing and serializing again gives the same bytes: same fields, order and lengths."""
    trace, timeline = shared_trace()
    for data in (written(small_trace()), written(trace, timeline)):
        parsed = pb.Trace()
        parsed.ParseFromString(data)
        assert parsed.SerializeToString() == data


def test_shared_layouts_keep_each_ranks_track_args_and_flows():
    trace, timeline = shared_trace()
    plan = plan_trace(trace, Options(ranks="all"), Diagnostics(), timeline)
    parsed = pb.Trace()
    parsed.ParseFromString(written(trace, timeline))
    names, arg_names, tracks, events = decoded(parsed)
    thread_of = {uuid: (t.thread.pid, t.thread.tid) for uuid, t in tracks.items() if t.HasField("thread")}
    begins = defaultdict(list)  # (pid, tid) -> (ts, name, group arg, flow ids)
    for packet in events:
        event = packet.track_event
        if event.type == BEGIN:
            seq = packet.trusted_packet_sequence_id
            args = {arg_names[seq, a.name_iid]: a for a in event.debug_annotations}
            group = args["group"].string_value if "group" in args else None
            flows = tuple(event.flow_ids) + tuple(event.terminating_flow_ids)
            begins[thread_of[event.track_uuid]].append((packet.timestamp, names[seq, event.name_iid], group, flows))
    expected = defaultdict(list)
    for process in plan.processes:
        for sl in process.slices():
            expected[(process.pid, sl.tid)].append((sl.start, sl.name, sl.args.get("group"), (sl.flow,) if sl.flow else ()))
    assert begins == expected
    assert sum(1 for v in expected.values() for e in v if e[3]) == sum(len(p.flows) for p in plan.processes) > 0


def test_events_are_in_time_then_thread_order_per_process():
    """Process after process; inside one, timestamps ascend, and at one timestamp tids do."""
    trace, timeline = shared_trace()
    parsed = pb.Trace()
    parsed.ParseFromString(written(trace, timeline))
    _, _, tracks, events = decoded(parsed)
    keys = [(tracks[p.track_event.track_uuid].thread.pid, p.timestamp, tracks[p.track_event.track_uuid].thread.tid)
            for p in events]
    assert keys == sorted(keys)
    assert len({k[0] for k in keys}) == len(trace.ranks)


@settings(max_examples=40, deadline=None)
@given(random_trace())
def test_random_traces_reserialize_identically(trace):
    data = written(trace)
    parsed = pb.Trace()
    parsed.ParseFromString(data)
    assert parsed.SerializeToString() == data


def test_args_are_built_one_process_at_a_time():
    """Memory does not grow with the rank count: a process's args are built when it is written
    and freed before the next one's, and nothing is left cached on the layouts afterwards."""
    trace, timeline = shared_trace()
    for tr, tl in ((small_trace(), None), (trace, timeline)):
        plan = plan_trace(tr, Options(ranks="all"), Diagnostics(), tl)
        held = []  # at each build (as dicts or as rows): how many processes hold their args
        for process in plan.processes:
            def counting(make=process.make_args):
                held.append(sum(p.made_args is not None for p in plan.processes))
                return make()

            def counting_rows(make=process.make_rows):
                rows = make()
                if rows is not None:
                    held.append(sum(p.made_args is not None for p in plan.processes))
                return rows
            process.make_args = counting
            process.make_rows = counting_rows
        perfetto.write_plan(plan, io.BytesIO())
        assert held == [0] * len(plan.processes)
        assert all(p.made_args is None for p in plan.processes)
        assert all("perfetto" not in p.layout.cache for p in plan.processes)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1)), max_size=20))
def test_timestamp_fields_are_varints_one_by_one(times):
    assert perfetto.timestamp_fields(times) == [b"\x40" + perfetto.varint(t) for t in times]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1),
                          st.sampled_from([0, 127, 128, 2**14 - 1, 2**14, 2**63, 2**64 - 1])), max_size=30))
def test_timestamp_fields_of_ascending_times_are_varints_one_by_one(times):
    times.sort()
    assert perfetto.timestamp_fields(times, ascending=True) == [b"\x40" + perfetto.varint(t) for t in times]


def test_timestamp_fields_beyond_uint64_as_varint_has_them():
    assert perfetto.timestamp_fields([2**64, 5]) == [b"\x40" + perfetto.varint(2**64), b"\x40\x05"]


def test_annotations_of_many_dicts_are_each_dicts_own_whatever_was_cached():
    """`_Annotations.many` and `column` cache pieces by value: True, 1 and 1.0 (equal keys in a
    dict) still encode each as its own type, in any order of first use."""
    names = {"a": 1, "b": 2, "c": 3}

    def reference(args):  # protobuf's bytes
        event = pb.TrackEvent()
        perfetto.add_annotations(event, args, names)
        return event.SerializeToString()

    dicts = [{"a": 1, "b": "x"}, {"a": True, "b": "x"}, {"a": 1.0, "c": 7}, {"a": 1, "c": 7}, {}, {"b": "%"},
             {"c": -3, "a": 0}, {"a": False}, {"a": 0}]
    for order in (dicts, dicts[::-1]):
        annotations = perfetto._Annotations(names)
        many = annotations.many(order)
        one_by_one = [annotations.many([args])[0] for args in order]
        assert many == one_by_one == list(map(reference, order))
        for key in names:
            column = [args.get(key) for args in order]
            assert annotations.column(key, column) == [b"" if value is None else reference({key: value})
                                                       for value in column]
