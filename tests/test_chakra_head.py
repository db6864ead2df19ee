"""The Chakra reader's two routes for a Node message give one recipe.

A message protobuf would write exactly so is read by hand up to its start time and its tail
once per distinct tail (`NodeDecoder.recipe_by_head`); anything else goes through protobuf
(`recipe_by_protobuf`). Here random messages, written by protobuf and then bent (bytes changed,
cut or added), must give the same recipe, the same count of non-canonical messages and the same
error whichever route reads them.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from converters._proto import et_def_pb2 as pb
from converters._proto.wire import FramingError, frames, leading_duration, node_head, varint
from converters.diagnostics import InputError
from converters.readers.chakra import NODE_KINDS, NodeDecoder

UINT64 = st.integers(0, (1 << 64) - 1)
IDS = st.one_of(st.integers(0, 1 << 15), UINT64)
ATTRS = st.one_of(
    st.builds(lambda v: pb.AttributeProto(name="comm_type", int64_val=v), st.integers(-2, 12)),
    st.builds(lambda v: pb.AttributeProto(name="comm_size", uint64_val=v), UINT64),
    st.builds(lambda v: pb.AttributeProto(name="pg_name", string_val=v),
              st.sampled_from(["1", "7", "0", "x", "", "012"])),
    st.builds(lambda v: pb.AttributeProto(name="comm_src", int32_val=v), st.integers(-1, 70000)),
    st.builds(lambda v: pb.AttributeProto(name="comm_dst", int32_val=v), st.integers(-1, 70000)),
    st.builds(lambda v: pb.AttributeProto(name="comm_tag", int64_val=v), st.integers(-5, 1 << 40)),
    st.builds(lambda v: pb.AttributeProto(name="microbatch", int64_val=v), st.integers(0, 300)),
    st.builds(lambda v: pb.AttributeProto(name="is_cpu_op", bool_val=v), st.booleans()),
    st.builds(lambda v: pb.AttributeProto(name="tensor_size", int64_list=pb.Int64List(values=v)),
              st.lists(st.integers(-3, 1 << 33), max_size=3)),
)


@st.composite
def node_messages(draw) -> bytes:
    node = pb.Node(
        id=draw(IDS), name=draw(st.text(max_size=140)), type=draw(st.integers(0, 9)),
        ctrl_deps=draw(st.lists(IDS, max_size=3)), data_deps=draw(st.lists(IDS, max_size=40)),
        start_time_micros=draw(st.sampled_from([0, 1, 300, 1 << 40])),
        duration_micros=draw(st.sampled_from([0, 5, 1 << 20])), attr=draw(st.lists(ATTRS, max_size=5)),
    )
    if draw(st.booleans()):
        node.inputs.values = draw(st.text(max_size=5))
    body = node.SerializeToString()
    edit = draw(st.sampled_from(["none", "byte", "cut", "append", "zero id"]))
    if edit == "byte" and body:
        at = draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([draw(st.integers(0, 255))]) + body[at + 1:]
    elif edit == "cut" and body:
        body = body[:draw(st.integers(0, len(body) - 1))]
    elif edit == "append":
        body += draw(st.sampled_from([b"\x08\x05", b"\x30\x00", b"\x22\x01\x01", b"\x98\x01\x01", b"\x12\x01a",
                                      b"\x38\x07"]))  # (a second duration, after the attributes)
    elif edit == "zero id":
        body = b"\x08\x00" + body
    return body


def by_protobuf(body: bytes):
    decoder = NodeDecoder()
    try:
        return decoder.recipe_by_protobuf(body, Path("w.0.et"), 7), decoder.noncanonical
    except InputError as e:
        return str(e), decoder.noncanonical


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_messages())
def test_a_message_read_by_its_head_gives_what_protobuf_gives(body):
    decoder = NodeDecoder()
    fast = decoder.recipe_by_head(body)
    expected, noncanonical = by_protobuf(body)
    if fast is None:
        return  # protobuf reads it (and names what is wrong)
    assert (fast, decoder.noncanonical) == (expected, noncanonical)


def with_other_duration(body: bytes, micros: int) -> bytes | None:
    """The message with its tail's duration_micros set to `micros`; None without a head."""
    head = node_head(body, {})
    if head is None:
        return None
    tail = body[head[6]:]
    _, rest_at = leading_duration(tail)
    return body[:head[6]] + b"\x38" + varint(micros) + tail[rest_at:]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_messages(), st.sampled_from([1, 6, 1 << 20, 1 << 62]))
def test_a_tail_read_after_one_of_another_duration_gives_what_protobuf_gives(body, micros):
    """The decoder decodes the rest of a tail once for all its durations (`NodeDecoder.rests`)."""
    sibling = with_other_duration(body, micros)
    if sibling is None:
        return
    decoder, reference = NodeDecoder(), NodeDecoder()  # (the sibling takes the first shape id in both)
    decoder.recipe_by_head(sibling)
    fast = decoder.recipe_by_head(body)
    if fast is None:
        return
    with contextlib.suppress(InputError):
        reference.recipe_by_protobuf(sibling, Path("w.0.et"), 7)
    assert fast == reference.recipe_by_protobuf(body, Path("w.0.et"), 7)


def test_tails_that_differ_in_their_duration_alone_are_decoded_once():
    node = pb.Node(id=300, name="allreduce", type=7, start_time_micros=7, duration_micros=3,
                   attr=[pb.AttributeProto(name="comm_type", int64_val=0),
                         pb.AttributeProto(name="comm_size", uint64_val=64)])
    decoder = NodeDecoder()
    first = decoder.recipe_by_head(node.SerializeToString())
    node.duration_micros = 700
    second = decoder.recipe_by_head(node.SerializeToString())
    assert len(decoder.tails) == 2 and len(decoder.rests) == 1
    assert (first[0][3], second[0][3]) == (3000, 700_000)  # duration_ns
    assert first[0][6:8] == second[0][6:8] == (0, 64)  # coll, size
    assert second[0][-3] is first[0][-3]  # one attrs list, read-only
    node.duration_micros = 0  # no duration field: no rest to share
    assert decoder.recipe_by_head(node.SerializeToString())[0][3] == 0 and len(decoder.rests) == 1


def test_plain_messages_take_the_head_route_and_odd_ones_do_not():
    node = pb.Node(id=300, name="allreduce", type=7, data_deps=[299, 5], start_time_micros=7, duration_micros=3,
                   attr=[pb.AttributeProto(name="comm_type", int64_val=0),
                         pb.AttributeProto(name="pg_name", string_val="2")])
    body = node.SerializeToString()
    decoder = NodeDecoder()
    values, deps, ctrl_deps, shape, per_rank, spans = decoder.recipe_by_head(body)
    assert values[:4] == (300, "allreduce", 7, 3000) and deps == (299, 5) and ctrl_deps == ()
    assert shape is None and spans is None  # a measured start keeps the rank on its own list
    assert node_head(body, {})[:6] == (300, "allreduce", 7, (), (299, 5), 7)
    assert node_head(b"\x08\x00" + body, {}) is None  # an id of 0 protobuf would not write
    assert node_head(b"\x08\xac\x82\x00" + body[3:], {}) is None  # 300 in three bytes
    assert decoder.recipe_by_head(body + b"\x08\x05") is None  # a second id: protobuf keeps the last


def test_a_node_with_a_bad_attribute_is_named_by_protobuf_route():
    node = pb.Node(id=4, name="ar", type=7, attr=[pb.AttributeProto(name="comm_type", int64_val=42)])
    body = node.SerializeToString()
    assert NodeDecoder().recipe_by_head(body) is None
    with pytest.raises(InputError, match=r"w\.0\.et: byte 7: node 4 'ar': comm_type 42 is not a CollectiveCommType"):
        NodeDecoder().recipe_by_protobuf(body, Path("w.0.et"), 7)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40_000), max_size=6), st.booleans())
def test_frames_find_every_message_whatever_its_prefix_length(lengths, long_prefix):
    # one-byte prefixes (< 128), two-byte ones (a measured run's sub-operations), longer ones;
    # also a two-byte prefix written longer than needed, which protobuf would not write
    data, expected = b"", []
    for length in lengths:
        prefix = varint(length)
        if long_prefix and length < 128:
            prefix = bytes((length | 0x80, 0))
        expected.append((len(data), len(data) + len(prefix), len(data) + len(prefix) + length))
        data += prefix + bytes(length)
    assert list(frames(data)) == expected
    if lengths and lengths[-1]:  # the last message cut short
        with pytest.raises(FramingError, match="truncated"):
            list(frames(data[:-1]))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(node_messages(), min_size=1, max_size=6))
def test_a_tail_of_known_attributes_reads_as_protobuf_reads_it(bodies):
    # the attributes are known from the messages read before (bent ones too); a tail made of
    # them (and a duration) is read by hand, and must give what protobuf gives
    decoder = NodeDecoder()
    for body in bodies:
        decoder.recipe_by_head(body)
    for body in bodies:
        head = node_head(body, {})
        kind = NODE_KINDS.get(head[2]) if head is not None else None
        if kind is not None:
            tail = body[head[6]:]
            by_hand = decoder.known_attributes(head[2], tail)
            if by_hand is not None:
                assert by_hand == decoder.protobuf_tail(head[2], kind, tail)


def test_tails_read_by_hand_and_those_left_to_protobuf():
    decoder = NodeDecoder()
    attr = pb.AttributeProto(name="comm_type", int64_val=0)
    known = pb.Node(duration_micros=5, attr=[attr, attr]).SerializeToString()
    decoder.protobuf_tail(7, NODE_KINDS[7], known)  # the attribute is decoded once
    micros, inputs, outputs, infos = decoder.known_attributes(7, known)
    assert (micros, inputs, outputs, [info[0].value for info in infos]) == (5, None, None, [0, 0])
    assert decoder.known_attributes(7, b"") == (0, None, None, [])
    assert decoder.known_attributes(4, known) is None  # known for another node type only
    other = pb.Node(attr=[pb.AttributeProto(name="comm_type", int64_val=1)]).SerializeToString()
    assert decoder.known_attributes(7, other) is None  # not decoded yet
    with_io = pb.Node(duration_micros=5, inputs=pb.IOInfo(values="x"), attr=[attr]).SerializeToString()
    assert decoder.known_attributes(7, with_io) is None
    assert decoder.known_attributes(7, b"\x38\x85\x00" + known[2:]) is None  # a duration in 2 bytes, not the shortest
    assert decoder.known_attributes(7, known[:-1]) is None  # cut
