"""The .pftrace writer encodes its head packets and interning packets by hand, and imports no
protobuf to do so: check the bytes against Perfetto's protos, and what the import costs."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

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
from test_perfetto import random_trace

INT32 = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(max_size=12)


def test_enum_values_are_perfettos():
    assert perfetto._BEGIN == pb.TrackEvent.TYPE_SLICE_BEGIN
    assert perfetto._END == pb.TrackEvent.TYPE_SLICE_END
    assert perfetto._NEEDS_STATE == pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    assert perfetto._CLEARED == pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED


def test_pb_is_still_the_modules_attribute():
    assert perfetto.pb is pb
    with pytest.raises(AttributeError):
        perfetto.no_such_name  # noqa: B018


@given(st.integers(-(2**63), 2**64 - 1))
def test_varint_is_protobufs_for_any_int64_or_uint64(n):
    # a TracePacket's timestamp is a uint64; a FieldDescriptorProto's number an int32, whose
    # negative values protobuf writes as an int64's ten bytes
    if n >= 0:
        assert pb.TracePacket(timestamp=n).SerializeToString() == b"\x40" + perfetto.varint(n)
    if -(2**31) <= n < 2**31:
        from google.protobuf import descriptor_pb2

        assert descriptor_pb2.FieldDescriptorProto(number=n).SerializeToString() == b"\x18" + perfetto.varint(n)


def fake_plan(processes) -> SimpleNamespace:
    return SimpleNamespace(processes=[
        SimpleNamespace(pid=pid, name=name, rank=rank,
                        threads=[SimpleNamespace(tid=tid, name=tname, sort_index=slot) for tid, tname, slot in threads])
        for pid, name, rank, threads in processes])


PROCESSES = st.lists(st.tuples(
    st.integers(1, 5000), TEXT, INT32,
    st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), TEXT, st.integers(0, perfetto.MAX_SLOT)), max_size=3)),
    max_size=4)


@settings(max_examples=200, deadline=None)
@given(PROCESSES)
def test_head_packets_are_protobufs(processes):
    plan = fake_plan(processes)
    assert perfetto.head_packets(plan) == perfetto.head_by_protobuf(plan)


def test_head_packets_of_real_plans_are_protobufs():
    trace, timeline = shared_trace()
    for plan in (plan_trace(small_trace(), Options(ranks="all"), Diagnostics()),
                 plan_trace(trace, Options(ranks="all"), Diagnostics(), timeline)):
        assert perfetto.head_packets(plan) == perfetto.head_by_protobuf(plan)


@pytest.mark.parametrize("process", [
    (1, "rank 0", 2**31, []),  # a sort index beyond int32
    (1, "rank 0", 0, [(2**63, "t", 0)]),  # a tid beyond int64
    (1, "rank \ud800", 0, []),  # not UTF-8
    (1, "rank 0", True, []),  # not an int
])
def test_head_packets_leave_other_values_to_protobuf(process):
    """Refused by protobuf as before (or encoded as it encodes them)."""
    plan = fake_plan([process])
    try:
        expected = perfetto.head_by_protobuf(plan)
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            perfetto.head_packets(plan)
    else:
        assert perfetto.head_packets(plan) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXT, unique=True, max_size=200), st.lists(TEXT, unique=True, max_size=5))
def test_interned_data_is_protobufs(names, arg_names):
    names = dict(zip(names, range(1, len(names) + 1)))
    arg_names = dict(zip(arg_names, range(1, len(arg_names) + 1)))
    assert perfetto.interned_data(names, arg_names) == perfetto.interned_by_protobuf(names, arg_names)


def test_timestamp_column_file_is_what_descriptor_pb2_builds():
    from google.protobuf import descriptor_pb2

    file = descriptor_pb2.FileDescriptorProto(name="et_convert/timestamp_column.proto", package="et_convert",
                                              syntax="proto2")
    message = file.message_type.add(name="TimestampColumn")
    message.field.add(name="timestamp", number=8, type=descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED)
    assert file.SerializeToString() == perfetto.TIMESTAMP_COLUMN_FILE


def test_importing_the_writer_loads_no_protobuf():
    """Perfetto's protos took about 0.08 s of CPU to load in the client and in each forked worker;
    protobuf itself is loaded only for the first timestamps."""
    code = ("import sys, converters.writers.perfetto as p; a = sorted(m for m in sys.modules if 'protobuf' in m "
            "or m.startswith('perfetto')); p.timestamp_fields([1, 2]); "
            "b = [m for m in sys.modules if m.startswith('perfetto')]; print(a, b)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] []"


# -- the writing order: `slot_order` (no step per slice) against `generation_order`

def writing_codes(layout, events) -> list[int]:
    """Codes sorted by (ts, slot), stable over `events(layout)`, as `_Columns` sorts them."""
    slot_bits = max(layout.slots, default=0).bit_length()
    keys = [t << slot_bits | s for t, s in zip(layout.ends + layout.starts, layout.slots + layout.slots)]
    return sorted(events(layout), key=keys.__getitem__)


def layouts_of(trace, timeline=None):
    return [p.layout for p in plan_trace(trace, Options(ranks="all"), Diagnostics(), timeline).processes]


@settings(max_examples=300, deadline=None)
@given(random_trace(), st.booleans())
def test_slot_order_sorts_as_generation_order(trace, positive):
    """Many equal starts and ends, nested sub-operations; with `positive`, no slice of zero
    duration (`slot_order`'s own way; with some, it is `generation_order`)."""
    if positive:
        for rank in trace.ranks.values():
            for node in rank.nodes:
                node.duration_ns = max(1, node.duration_ns)
    for layout in layouts_of(trace):
        assert writing_codes(layout, perfetto.slot_order) == writing_codes(layout, perfetto.generation_order)


def test_slot_order_of_shared_layouts():
    trace, timeline = shared_trace()
    for layout in layouts_of(small_trace()) + layouts_of(trace, timeline):
        assert writing_codes(layout, perfetto.slot_order) == writing_codes(layout, perfetto.generation_order)


@given(st.integers(1, 11), st.integers(0, 2000), st.integers(0, 30))
def test_cut_fields_are_slices(size, count, offset):
    data = bytes(range(256)) * ((offset + size * count) // 256 + 1)
    assert perfetto.cut_fields(data, offset, size, count) == [
        data[offset + k * size:offset + (k + 1) * size] for k in range(count)]


def test_flow_tails_packed_in_one_call_are_the_same(monkeypatch):
    """Slots of one byte: a begin's flow head, id and flags packed by one struct; else joined."""
    import io

    def written() -> bytes:
        out = io.BytesIO()
        trace, timeline = shared_trace()
        for tr, tl in ((small_trace(), None), (trace, timeline)):
            perfetto.write_plan(plan_trace(tr, Options(ranks="all"), Diagnostics(), tl), out)
        return out.getvalue()

    packed = written()
    monkeypatch.setattr(perfetto, "MAX_ONE_BYTE_SLOT", -1)
    assert written() == packed


@given(st.integers(1, 20000), st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(), TEXT))
def test_field_pieces_are_annotations(iid, value):
    pieces = perfetto._FieldPieces(iid)
    if isinstance(value, int) and not -(2**63) <= value < 2**63:  # out of int64: refused as protobuf refuses it
        with pytest.raises(ValueError):
            pieces[value]
        return
    assert pieces[value] == (b"" if value is None else perfetto._annotation(iid, value))



@given(st.integers(1, 20000), st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), TEXT, st.text(min_size=200)),
                                       unique=True, max_size=20))
def test_field_pieces_made_a_column_at_a_time_are_annotations(iid, values):
    # `add_many`: the column route of `_Annotations.column` (strings long enough for 2-byte
    # lengths, ints up to int64's ends, negative ones through `__missing__`)
    pieces = perfetto._FieldPieces(iid)
    pieces.add_many(values)
    assert len(pieces) == len(values) + 1  # and None
    assert [pieces[value] for value in values] == [perfetto._annotation(iid, value) for value in values]
