"""The C head reader (`converters/_proto/_head.c`) is `wire.python_node_head`, faster, and its
loop over a measured file's messages is `wire.python_measured_nodes`.

Both must give the same head (or None) for any bytes, and leave the same dependency lists in
the `known` dict they share across a set: on every sample's messages, on protobuf's messages
bent as in test_chakra_head.py, and on byte strings made of the head's own tags and varint
bytes, where the edge cases (cut fields, long varints, zero values, bad UTF-8) are dense. Both
loops must make the same Nodes, stop at the same message and share names alike: on real
measured sets, on framed bent messages and at the edges (long frames, cut frames, times past
64 bits once multiplied).
"""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from converters._proto import et_def_pb2 as pb
from converters._proto import wire
from converters._proto.wire import varint
from converters.model import Node
from converters.readers.chakra import NodeDecoder
from helpers.megatron_synth import write_run
from test_chakra_head import node_messages

SAMPLES = Path(__file__).resolve().parent.parent / "samples"

try:
    from converters._proto._head import measured_columns as c_measured_columns
    from converters._proto._head import measured_nodes as c_measured_nodes
    from converters._proto._head import node_head as c_node_head
except ImportError:
    c_node_head = c_measured_nodes = c_measured_columns = None

needs_c = pytest.mark.skipif(c_node_head is None, reason="the C head reader was not built (no C compiler)")


def same_head(body: bytes, known_py: dict, known_c: dict):
    expected = wire.python_node_head(body, known_py)
    assert c_node_head(body, known_c) == expected
    return expected


def test_the_reader_uses_the_c_head_where_a_compiler_built_it():
    compiler = sysconfig.get_config_var("CC")
    if not compiler or shutil.which(compiler.split()[0]) is None:
        pytest.skip("no C compiler here: the Python head reader is used")
    # setup.py builds it optionally: a build that failed silently would leave reading 6x slower
    assert c_node_head is not None and wire.node_head is c_node_head
    assert wire.measured_nodes is c_measured_nodes


@pytest.fixture(scope="module")
def chakra_files(tmp_path_factory) -> list[Path]:
    """The sample Chakra sets (written by chakra_converter) and et-convert's Chakra sets of a
    measured sample and of a longer synthetic run's logs (start times in every head)."""
    import converters as etc

    folder = tmp_path_factory.mktemp("heads")
    etc.convert(SAMPLES / "megatron_tp2_pp2_dp1", folder / "m", to="chakra")
    etc.convert(write_run(folder / "logs", stages=2, tp=2, microbatches=64), folder / "s", to="chakra")
    return sorted(SAMPLES.rglob("*.et")) + sorted(folder.glob("*.et"))


@pytest.fixture(scope="module")
def measured_set(tmp_path_factory) -> list[Path]:
    """A Chakra set of jittered synthetic logs: every rank's times its own, as measured."""
    import converters as etc

    folder = tmp_path_factory.mktemp("measured")
    etc.convert(write_run(folder / "logs", stages=2, tp=2, microbatches=32, jitter=3), folder / "w", to="chakra")
    return sorted(folder.glob("w.*.et"), key=lambda path: int(path.name.split(".")[1]))


@needs_c
def test_every_message_of_real_sets_gives_the_same_head(chakra_files):
    known_py, known_c = {}, {}
    count = heads = 0
    for path in chakra_files:
        data = path.read_bytes()
        for index, (_, start, end) in enumerate(wire.frames(data)):
            if index:  # the GlobalMetadata is no Node
                heads += same_head(data[start:end], known_py, known_c) is not None
                count += 1
    assert count > 2_000 and heads == count  # every sample node is written as protobuf writes it
    assert known_c == known_py


@needs_c
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_messages())
def test_bent_messages_give_the_same_head(body):
    known_py, known_c = {}, {}
    same_head(body, known_py, known_c)
    assert known_c == known_py


# The head's tags, the tail's first tag, bytes that end or continue a varint, a zero, UTF-8
# pieces (whole and cut): what a random string needs to reach every branch of the head.
PIECES = [b"\x08", b"\x12", b"\x18", b"\x22", b"\x2a", b"\x30", b"\x38", b"\x80", b"\xff", b"\x00", b"\x01",
          b"\x02", b"\x7f", b"ab", b"\xc3\xa9", b"\xc3"]


@needs_c
@settings(max_examples=2000, deadline=None)
@given(st.lists(st.lists(st.sampled_from(PIECES), max_size=14).map(b"".join), min_size=1, max_size=4))
def test_strings_of_head_bytes_give_the_same_heads_in_a_row(bodies):
    """In a row, sharing `known`: a later message finds the lists an earlier one added."""
    known_py, known_c = {}, {}
    for body in bodies:
        same_head(body, known_py, known_c)
    assert known_c == known_py


@needs_c
def test_edges_of_the_head():
    cases = {
        b"": (0, "", 0, (), (), 0, 0),  # an empty message: every field at its default
        b"\x08\x01": (1, "", 0, (), (), 0, 2),
        b"\x08\x00": None,  # a zero protobuf would not write
        b"\x08\x80\x01": (128, "", 0, (), (), 0, 3),
        b"\x08\x80\x00": None,  # 0 in two bytes: not the shortest form
        b"\x08" + b"\xff" * 8 + b"\x7f": ((1 << 63) - 1, "", 0, (), (), 0, 10),  # 9 bytes, 63 bits
        b"\x08" + b"\xff" * 9 + b"\x01": None,  # a tenth byte
        b"\x08\x81": None,  # cut inside the id
        b"\x12\x02ab\x18\x04": (0, "ab", 4, (), (), 0, 6),
        b"\x12\x03ab": None,  # the name runs past the end
        b"\x12\x01\xc3": None,  # not UTF-8
        b"\x2a\x03\x01\x80\x01\x30\x05": (0, "", 0, (), (1, 128), 5, 7),
        b"\x2a\x02\x01\x80\x01": None,  # a varint runs past its field
        b"\x2a\x00": None,  # an empty packed field protobuf would not write
        b"\x18\x00": None,  # type 0 is written by leaving it out
        b"\x38\x05": (0, "", 0, (), (), 0, 0),  # the tail starts at once
    }
    for body, expected in cases.items():
        assert same_head(body, {}, {}) == expected, body


@needs_c
def test_a_list_found_by_a_cut_slice_is_refused_as_in_python():
    """A dependency list known by bytes that a later message holds only in part (its field
    cut by the end) is found, and the head refused after it, in both."""
    known_py, known_c = {b"\x01": (1,)}, {b"\x01": (1,)}
    assert same_head(b"\x2a\x02\x01", known_py, known_c) is None
    assert known_c == known_py == {b"\x01": (1,)}


@needs_c
def test_bad_arguments_are_a_type_error():
    with pytest.raises(TypeError):
        c_node_head(bytearray(b"\x08\x01"), {})
    with pytest.raises(TypeError):
        c_node_head(b"\x08\x01")


# -- the loop over a measured file's messages ------------------------------------------------


def both_loops(data: bytes, pos: int, templates: dict) -> list[tuple]:
    """(where it stopped, the nodes, `known`, `names`) of the Python loop and of the C loop."""
    out = []
    for loop in (wire.python_measured_nodes, c_measured_nodes):
        known, names, nodes = {}, {}, []
        stop = loop(data, pos, known, templates, Node, names, nodes)
        assert all(node.name is names[node.name] for node in nodes)  # one str per distinct name
        out.append((stop, nodes, known, names))
    return out


def learnt(bodies: list[bytes]) -> dict:
    """The reader's templates of these messages' tails."""
    decoder = NodeDecoder()
    for body in bodies:
        decoder.learn_measured_template(body)
    return decoder.measured_templates


@needs_c
def test_measured_sets_read_alike_with_either_loop(measured_set, monkeypatch):
    from converters.readers import chakra

    def read(loop) -> tuple:
        monkeypatch.setattr(chakra, "measured_nodes", loop)
        decoder = NodeDecoder()
        ranks = [chakra.read_rank(path, i, path.read_bytes(), decoder) for i, path in enumerate(measured_set)]
        return [rank.nodes for rank in ranks], decoder.dependencies, decoder.noncanonical

    python = read(wire.python_measured_nodes)
    c = read(c_measured_nodes)
    assert c == python
    nodes = [node for rank in c[0] for node in rank]
    # (a rank's first operation may start at 0, which protobuf leaves out: read as unmeasured)
    assert len(nodes) > 1_500 and sum(node.start_ns is None for node in nodes) <= len(measured_set)
    assert len({node.duration_ns for node in nodes}) > 10  # tails shared whatever the durations


@needs_c
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(node_messages(), max_size=8), st.lists(st.booleans(), max_size=8), st.integers(0, 2))
def test_framed_bent_messages_give_the_same_nodes_and_stop(bodies, forgotten, cut):
    """Templates for most tails (some forgotten); the loops stop at the first message without
    a start time, a template or a whole frame, and at the same byte."""
    templates = learnt(bodies)
    for key, forget in zip(list(templates), forgotten):
        if forget:
            del templates[key]
    data = b"".join(varint(len(body)) + body for body in bodies)
    data = data[:len(data) - cut]
    python, c = both_loops(data, 0, templates)
    assert c == python


@needs_c
def test_edges_of_the_loop():
    def message(start: int, duration: int = 5, size: int = 0) -> bytes:
        return pb.Node(id=3, name="n", type=4, start_time_micros=start, duration_micros=duration,
                       inputs=pb.IOInfo(values="x" * size) if size else None).SerializeToString()

    huge = message(1 << 62, 1 << 62)  # times past 64 bits once in nanoseconds
    two = message(7, size=200)  # a two-byte length prefix
    long = message(7, size=20_000)  # three bytes: the loop leaves it to frames()
    unmeasured = message(0)
    templates = learnt([huge, two, long])
    framed = [varint(len(body)) + body for body in (huge, two, long, unmeasured)]
    data = b"".join(framed)
    python, c = both_loops(data, 0, templates)
    assert c == python and python[0] == len(framed[0]) + len(framed[1])
    assert [(n.start_ns, n.duration_ns) for n in python[1]] == [((1 << 62) * 1000, (1 << 62) * 1000), (7000, 5000)]
    at_unmeasured = len(data) - len(framed[3])
    assert both_loops(data, at_unmeasured, templates)[1][0] == at_unmeasured
    assert both_loops(data[:-1], len(framed[0]), templates)[1][0] == len(framed[0]) + len(framed[1])
    assert both_loops(b"", 0, templates)[1][0] == 0
    with pytest.raises(TypeError):
        c_measured_nodes(data, 0, {}, templates, Node, {})
    with pytest.raises(ValueError):
        c_measured_nodes(data, -1, {}, templates, Node, {}, [])


@needs_c
def test_a_template_with_args_gives_each_node_a_copy():
    """A tail with the attributes decide_timing takes back gives its template the node's args
    (NodeDecoder.give_facts): each node gets its own copy, in either loop."""
    bodies = [pb.Node(id=i, name="recv", type=6, start_time_micros=10 + i, duration_micros=i + 1,
                      attr=[pb.AttributeProto(name="parent", int64_val=0), pb.AttributeProto(name="wait_ns", int64_val=5),
                            pb.AttributeProto(name="stream", string_val="pp")]).SerializeToString() for i in range(4)]
    templates = learnt(bodies)
    (template,) = templates.values()
    data = b"".join(varint(len(body)) + body for body in bodies)
    python, c = both_loops(data, 0, templates)
    assert c == python and len(c[1]) == 4
    assert [(n.parent, n.stream, n.args) for n in c[1]] == [(0, "pp", {"wait_ns": 5})] * 4
    args = [n.args for n in c[1]] + [template[wire.MEASURED_ARG_POSITIONS["args"]]]
    assert len({id(a) for a in args}) == 5  # the template's own and one per node
    c[1][0].args["x"] = 1
    assert c[1][1].args == template[wire.MEASURED_ARG_POSITIONS["args"]] == {"wait_ns": 5}


# -- a measured file's nodes as columns ------------------------------------------------------


def both_column_loops(data: bytes, pos: int, keys: dict) -> list[tuple]:
    """(where it stopped and the key it stopped at, the five columns) of the Python loop and the C loop."""
    out = []
    for loop in (wire.python_measured_columns, c_measured_columns):
        columns = [bytearray() for _ in wire.COLUMNS]
        out.append((loop(data, pos, keys, *columns), columns))
    return out


def numbered_keys(data: bytes, forgotten: list[bool]) -> dict:
    """The keys the Python loop stops at on `data`, numbered (some forgotten again)."""
    keys: dict = {}
    pos = 0
    while (stop := wire.python_measured_columns(data, pos, keys, *(bytearray() for _ in wire.COLUMNS)))[1]:
        keys[stop[1]] = len(keys)
        pos = stop[0]
    for key, forget in zip(list(keys), forgotten):
        if forget:
            del keys[key]
    return keys


PARENTS = st.one_of(  # the attribute the scan cuts out, and some it must not
    st.builds(lambda v: pb.AttributeProto(name="parent", int64_val=v), st.integers(-1, 1 << 62)),
    st.builds(lambda v: pb.AttributeProto(name="parent", int64_val=v, doc_string="d"), st.integers(0, 9)),
    st.builds(lambda v: pb.AttributeProto(name="parent", int32_val=v), st.integers(0, 9)),
    st.builds(lambda v: pb.AttributeProto(name="parents", int64_val=v), st.integers(0, 9)),
)


@st.composite
def measured_bodies(draw) -> bytes:
    """Node messages with start times and parents, or node_messages' bent ones."""
    if draw(st.booleans()):
        return draw(node_messages())
    attrs = draw(st.lists(st.sampled_from([pb.AttributeProto(name="comm_type", int64_val=0),
                                           pb.AttributeProto(name="pg_name", string_val="2"),
                                           pb.AttributeProto(name="wait_ns", int64_val=7)]) | PARENTS, max_size=4))
    return pb.Node(id=draw(st.integers(0, 300)), name=draw(st.sampled_from(["ar", "é", ""])), type=draw(st.integers(4, 7)),
                   data_deps=draw(st.lists(st.integers(0, 1 << 40), max_size=3)),
                   start_time_micros=draw(st.sampled_from([0, 5, (1 << 63) // 1000, 1 << 62])),
                   duration_micros=draw(st.sampled_from([0, 3, (1 << 63) // 1000 + 1])), attr=attrs).SerializeToString()


@needs_c
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(measured_bodies(), max_size=8), st.lists(st.booleans(), max_size=8), st.integers(0, 2))
def test_the_column_loops_give_the_same_columns_and_stop(bodies, forgotten, cut):
    data = b"".join(varint(len(body)) + body for body in bodies)
    data = data[:len(data) - cut]
    keys = numbered_keys(data, forgotten)
    python, c = both_column_loops(data, 0, keys)
    assert c == python


@needs_c
def test_the_column_loop_cuts_out_the_parent_and_keeps_the_rest():
    def body(node_id: int, parent: int | None, start: int = 10, **extra) -> bytes:
        attrs = [pb.AttributeProto(name="pg_name", string_val="2")]
        if parent is not None:
            attrs.append(pb.AttributeProto(name="parent", int64_val=parent))
        return pb.Node(id=node_id, name="n", type=7, start_time_micros=start, duration_micros=3, attr=attrs,
                       **extra).SerializeToString()

    bodies = [body(1, None), body(2, 0), body(3, 300), body(4, 300, start=0), body(5, 1, inputs=pb.IOInfo(values="x"))]
    framed = [varint(len(b)) + b for b in bodies]
    data = b"".join(framed)
    keys = numbered_keys(data, [])
    (stop, key), columns = both_column_loops(data, 0, keys)[1]
    assert len(keys) == 1 and stop == len(data) - len(framed[-1]) and key is None  # inputs: not taken
    start, duration, parent, template, offset = (list(memoryview(c).cast("q")) for c in columns)
    assert (start, duration, parent, template) == ([10_000] * 3 + [0], [3000] * 4, [-1, 0, 300, 300], [0] * 4)
    assert offset == [sum(map(len, framed[:k])) for k in range(4)]
    with pytest.raises(ValueError, match="negative"):
        c_measured_columns(data, -1, keys, *columns)
    with pytest.raises(TypeError):
        c_measured_columns(data, 0, keys, bytearray())


# -- Nodes made by filling their slots ---------------------------------------------------------


def measured_messages(count: int) -> tuple[bytes, dict]:
    """`count` framed measured messages of one tail, and that tail's template."""
    bodies = [pb.Node(id=i + 1, name=f"op{i % 3}", type=4, data_deps=[i] if i else [], start_time_micros=10 * i + 1,
                      duration_micros=i + 2).SerializeToString() for i in range(count)]
    return b"".join(varint(len(body)) + body for body in bodies), learnt(bodies)


@needs_c
def test_the_c_loop_fills_nodes_slots_and_they_equal_nodes_made_by_calling():
    """model.Node is made by storing into its slots (no call); the nodes equal Node(*arguments)."""
    from converters._proto._head import fills

    assert fills(Node)
    data, templates = measured_messages(50)
    called, filled = [], []
    assert c_measured_nodes(data, 0, {}, templates, lambda *a: Node(*a), {}, called) == len(data)
    assert c_measured_nodes(data, 0, {}, templates, Node, {}, filled) == len(data)
    assert filled == called and len(filled) == 50
    assert [(n.id, n.deps, n.start_ns, n.duration_ns) for n in filled[:2]] == [(1, [], 1000, 2000), (2, [1], 11000, 3000)]
    assert all(type(n) is Node for n in filled)
    # fresh lists and args per node, as a call gives them
    assert len({id(n.deps) for n in filled}) == len({id(n.args) for n in filled}) == 50


@needs_c
def test_classes_whose_init_does_more_are_called():
    """A __post_init__, an __init__ of its own, no slots, or not a class: the C loop calls
    `make`, and sees a class whose __init__ is replaced after a first plan was made for it."""
    import dataclasses

    from converters._proto._head import fills

    calls = []

    @dataclasses.dataclass(slots=True)
    class Checked(Node):
        def __post_init__(self):
            calls.append("post")

    @dataclasses.dataclass(slots=True)
    class Own(Node):
        def __init__(self, *arguments):
            calls.append("init")
            Node.__init__(self, *arguments)

    @dataclasses.dataclass(slots=True)
    class Later(Node):
        pass

    Unslotted = dataclasses.make_dataclass("Unslotted", [(f.name, f.type, f) for f in dataclasses.fields(Node)])
    data, templates = measured_messages(3)
    assert not fills(Checked) and not fills(Own) and not fills(Unslotted) and not fills(len)
    assert fills(Later)  # (the last plan made: the one kept)
    generated = Later.__init__

    def init_later(self, *arguments):
        calls.append("later")
        generated(self, *arguments)

    Later.__init__ = init_later  # (Later's plan was made above: the loop must see the change)
    assert not fills(Later)
    for make, call in ((Checked, "post"), (Own, "init"), (Later, "later"), (Unslotted, None)):
        calls.clear()
        nodes = []
        c_measured_nodes(data, 0, {}, templates, make, {}, nodes)
        assert calls == ([call] * 3 if call else []), make
        assert [dataclasses.astuple(n) for n in nodes] == [dataclasses.astuple(n) for n in both_loops(data, 0, templates)[1][1]]
