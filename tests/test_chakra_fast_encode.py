"""The Chakra writer's hand-written node fields and cached attribute entries are protobuf's bytes.

`RankEncoder.node_fields` writes a Node's fields 1-9 itself, and `encode_node` makes the attribute
entries once per combination of the values they depend on; both must give what protobuf gives
for the same node, including the warnings' counts (which count nodes, not combinations).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from converters._proto import et_def_pb2 as pb
from converters._proto.wire import varint
from converters.diagnostics import Diagnostics
from converters.model import CollType, ExecutionTrace, Node, NodeKind, Rank, WireAttr
from converters.writers import chakra as writer

KINDS = list(NodeKind)
NAMES = st.sampled_from(["", "fwd", "all_reduce/tp", "naïve ✓", "x" * 200])
TIMES = st.one_of(st.none(), st.integers(-5_000, 5_000), st.integers(0, 1 << 62))


def protobuf_fields(encoder: writer.RankEncoder, new_id: int, node: Node, index: dict[int, int]) -> bytes:
    """Fields 1-9 of `node` as protobuf writes them (the writer's code before the hand encoding)."""
    deps = writer.RankEncoder(encoder.trace, Diagnostics()).new_deps(node, index)
    start = max(node.start_ns, 0) // 1000 if node.start_ns is not None else 0
    return encoder.node_message(new_id, node, deps, start, writer.duration_micros(node)).SerializeToString()


@st.composite
def node_lists(draw):
    count = draw(st.integers(1, 12))
    ids = draw(st.lists(st.integers(0, 1 << 40), min_size=count, max_size=count, unique=True))
    if draw(st.booleans()):
        ids = list(range(count))
    pool = ids + [99_999_999]  # a dependency on a node that is not in the list
    nodes = []
    for new_id in ids:
        kind = draw(st.sampled_from(KINDS))
        nodes.append(Node(
            new_id, draw(NAMES), kind, duration_ns=draw(st.integers(-10, 1 << 50)),
            deps=draw(st.lists(st.sampled_from(pool), max_size=3)),
            ctrl_deps=draw(st.lists(st.sampled_from(pool), max_size=2)),
            coll=draw(st.sampled_from([None, *CollType])) if kind is NodeKind.COLLECTIVE else None,
            size=draw(st.integers(0, 1 << 40)), group=draw(st.sampled_from([None, 1, 2])),
            peer=draw(st.sampled_from([None, 0, 3])), tag=draw(st.sampled_from([None, 0, 5])),
            start_ns=draw(TIMES), microbatch=draw(st.sampled_from([None, 0, 7])),
            inputs=draw(st.sampled_from([None, ("", "", ""), ("a", "[[1, 2]]", "float")])),
            outputs=draw(st.sampled_from([None, ("b", "[]", "")])),
            attrs=draw(st.sampled_from([None, [], [WireAttr("comm_size", "uint64_val", 8), WireAttr("k", "string_val", "v")]])),
        ))
    return nodes


def measured_trace(nodes: list[Node]) -> ExecutionTrace:
    trace = ExecutionTrace()
    trace.timing = "measured"
    trace.add_group("tp", [0, 3])
    trace.add_group("dp", [0, 5])
    trace.ranks[0] = Rank(0, nodes=nodes)
    return trace


@settings(max_examples=300, deadline=None)
@given(node_lists())
def test_hand_written_fields_are_protobufs(nodes):
    encoder = writer.RankEncoder(measured_trace(nodes), Diagnostics())
    index = {}
    for i, node in enumerate(nodes):
        index.setdefault(node.id, i)
    for i, node in enumerate(nodes):
        assert encoder.node_fields(i, node, index) == protobuf_fields(encoder, i, node, index)


@settings(max_examples=200, deadline=None)
@given(node_lists())
def test_each_node_decodes_to_what_it_holds_and_counts_are_per_node(nodes):
    trace = measured_trace(nodes + nodes)  # the same combinations twice: the second time from the cache
    encoder = writer.RankEncoder(trace, Diagnostics())
    data = b"".join(encoder.rank_chunks(trace.ranks[0]))
    counts_twice = encoder.counts()
    single = writer.RankEncoder(measured_trace(nodes), Diagnostics())
    b"".join(single.rank_chunks(single.trace.ranks[0]))
    once = single.counts()
    assert counts_twice[1:] == tuple(2 * c for c in once[1:])  # zero size, untyped, no peer: per node
    length, position = _length(data, 0)
    position += length  # past the GlobalMetadata
    decoded = []
    while position < len(data):
        length, position = _length(data, position)
        node = pb.Node()
        node.ParseFromString(data[position:position + length])
        assert node.SerializeToString() == data[position:position + length]  # protobuf's canonical bytes
        decoded.append(node)
        position += length
    assert [n.name for n in decoded] == [n.name for n in nodes + nodes]
    assert [n.id for n in decoded] == list(range(2 * len(nodes)))


def _length(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def test_varint_matches_protobuf():
    for value in [0, 1, 127, 128, 16383, 16384, (1 << 21) - 1, 1 << 21, (1 << 28) + 5, 1 << 42, (1 << 64) - 1]:
        assert varint(value) == pb.Node(id=value).SerializeToString()[1:] or value == 0
