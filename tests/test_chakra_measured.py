"""The Chakra reader's route for measured files gives what the recipe route gives.

A file one of whose first messages has a start time (`starts_measured`) shares no list with
another rank, so it is not split at its per-rank fields and `NodeDecoder.read_measured_nodes`
makes its Nodes at once from their heads and their tails' templates (in C where it was built:
test_head_c.py holds it to the Python loop). Here random files (plain, measured and bent
messages, ranks with messages in common) are read with and without that route: the nodes, the
sharing between ranks, the count of non-canonical messages and the first error must be the same.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_chakra_head import node_messages

from converters._proto import et_def_pb2 as pb
from converters._proto.wire import varint
from converters.diagnostics import Diagnostics, InputError
from converters.options import Options
from converters.readers import chakra
from converters.readers.chakra import NodeDecoder

METADATA = pb.GlobalMetadata(version="0.0.4").SerializeToString()


def framed(messages: list[bytes]) -> bytes:
    return b"".join(varint(len(m)) + m for m in [METADATA, *messages])


def plain_node(node_id: int, start: int, group: str = "3", duration: int = 5) -> bytes:
    return pb.Node(id=node_id, name=f"n{node_id}", type=7, data_deps=[node_id - 1] if node_id else [],
                   start_time_micros=start, duration_micros=duration,
                   attr=[pb.AttributeProto(name="comm_type", int64_val=0),
                         pb.AttributeProto(name="pg_name", string_val=group)]).SerializeToString()


def read_both_ways(files: list[bytes], monkeypatch) -> tuple:
    """What the reader gives for these rank files: (nodes per rank, which ranks share a list,
    maps, non-canonical count) or the first error's text. (The facts a set declared measured
    gives its nodes are for `load` to give: see the tests at the end.)"""
    decoder = NodeDecoder(give_facts=False)
    try:
        ranks = [chakra.read_rank(Path(f"w.{i}.et"), i, data, decoder) for i, data in enumerate(files)]
    except InputError as e:
        return str(e)
    return ([r.nodes for r in ranks], [r.nodes is ranks[0].nodes for r in ranks],
            [(r.group_map, r.peer_map) for r in ranks], decoder.noncanonical, decoder.shared_ranks)


def recipe_route_only(monkeypatch) -> None:
    monkeypatch.setattr(NodeDecoder, "starts_measured", lambda self, data, at: False)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(node_messages(), max_size=12), st.lists(st.integers(0, 11), max_size=12),
       st.lists(st.integers(0, 11), max_size=12), st.integers(1, 8))
def test_random_files_read_alike_by_both_routes(monkeypatch, messages, picks, third_picks, lookahead):
    # later ranks repeat some of the first rank's messages (templates and recipes found again)
    files = [framed(messages), *(framed([messages[i] for i in p if i < len(messages)]) for p in (picks, third_picks))]
    with monkeypatch.context() as m:
        m.setattr(NodeDecoder, "MEASURED_LOOKAHEAD", lookahead)
        fast = read_both_ways(files, m)
    with monkeypatch.context() as m:
        recipe_route_only(m)
        slow = read_both_ways(files, m)
    assert fast == slow


def test_measured_files_take_the_fast_route_and_plain_ones_still_share(monkeypatch):
    measured = [framed([plain_node(i, 100 + i) for i in range(20)]), framed([plain_node(i, 100 + i, "4") for i in range(20)])]
    plain = [framed([plain_node(i, 0) for i in range(20)]), framed([plain_node(i, 0, "4") for i in range(20)])]
    calls = []

    class CountedSplits:
        def __getattr__(self, name):
            return getattr(pattern, name)

        def split(self, data):
            calls.append(len(data))
            return pattern.split(data)

    pattern = chakra.PER_RANK_FIELD
    monkeypatch.setattr(chakra, "PER_RANK_FIELD", CountedSplits())
    nodes, shared, maps, _, shared_ranks = read_both_ways(measured, monkeypatch)
    assert calls == [] and shared == [True, False] and shared_ranks == 0  # never split, never shared
    assert [n.start_ns for n in nodes[0]] == [(100 + i) * 1000 for i in range(20)] and nodes[1][3].group == 4
    assert nodes[0][0].deps == [] and nodes[0][1].deps == [0] and nodes[0][1].deps is not nodes[1][1].deps
    nodes, shared, maps, _, shared_ranks = read_both_ways(plain, monkeypatch)
    assert shared == [True, True] and maps[1] == ({3: 4}, None) and shared_ranks == 1


def test_a_duration_written_twice_is_read_as_protobuf_reads_it(monkeypatch):
    # protobuf takes the last value of a field written twice, and would not write these bytes
    head = pb.Node(id=1, name="n1", type=7, data_deps=[0], start_time_micros=300).SerializeToString()
    twice = head + b"\x38\x05" + plain_node(1, 0, duration=7)[len(head) - 3:]  # (the start's 3 bytes are not there)
    assert twice[len(head):len(head) + 4] == b"\x38\x05\x38\x07"
    files = [framed([plain_node(0, 100), twice, plain_node(2, 300) + b"\x38\x07"])]
    fast = read_both_ways(files, monkeypatch)
    with monkeypatch.context() as m:
        recipe_route_only(m)
        slow = read_both_ways(files, m)
    assert fast == slow
    assert [n.duration_ns for n in fast[0][0]] == [5000, 7000, 7000] and fast[3] == 2


def test_an_error_after_measured_nodes_is_named_as_before(monkeypatch):
    bad = pb.Node(id=9, name="ar", type=7, start_time_micros=3,
                  attr=[pb.AttributeProto(name="comm_type", int64_val=42)]).SerializeToString()
    data = framed([plain_node(i, 100 + i) for i in range(5)] + [bad])
    result = read_both_ways([data], monkeypatch)
    assert "node 9 'ar': comm_type 42 is not a CollectiveCommType" in result
    cut = framed([plain_node(i, 100 + i) for i in range(5)])[:-3]
    assert read_both_ways([cut], monkeypatch) == "w.0.et: byte 187: truncated Node message (wanted 45 bytes, 42 left)"


def test_measured_messages_share_templates_and_names_whatever_their_durations_and_ranks():
    # a rank's first operation at 0 µs (protobuf leaves it out) and durations all different
    files = [framed([plain_node(k, first + k if k else 0, duration=k + 1) for k in range(40)]) for first in (100, 900)]
    decoder = NodeDecoder()
    ranks = [chakra.read_rank(Path(f"w.{i}.et"), i, data, decoder) for i, data in enumerate(files)]
    assert [n.duration_ns for n in ranks[1].nodes] == [(k + 1) * 1000 for k in range(40)]
    assert [n.start_ns for n in ranks[1].nodes] == [None] + [(900 + k) * 1000 for k in range(1, 40)]
    # one template: the tails differ in their durations only (the message at 0 takes the recipe route)
    assert list(decoder.measured_templates.values()).count(None) == 0 and len(decoder.measured_templates) == 1
    assert len(decoder.recipes) == 1
    assert ranks[1].nodes[5].name is ranks[0].nodes[5].name and ranks[1].nodes[5].name == "n5"
    assert ranks[1].nodes[5].attrs is ranks[0].nodes[5].attrs and ranks[1].nodes[5].args == {}
    assert ranks[1].nodes[5].args is not ranks[1].nodes[6].args


def test_a_file_measured_only_after_its_lookahead_takes_the_recipe_route(monkeypatch):
    monkeypatch.setattr(NodeDecoder, "MEASURED_LOOKAHEAD", 3)
    late = framed([plain_node(k, 0 if k < 3 else 100 + k) for k in range(10)])
    early = framed([plain_node(k, 0 if k < 2 else 100 + k) for k in range(10)])
    decoder = NodeDecoder()
    chakra.read_rank(Path("w.0.et"), 0, late, decoder)
    assert len(decoder.recipes) == 10 and not decoder.measured_templates
    decoder = NodeDecoder()
    chakra.read_rank(Path("w.0.et"), 0, early, decoder)
    assert len(decoder.recipes) == 2 and len(decoder.measured_templates) == 1


def test_a_long_measured_message_with_a_new_tail_is_read_once_and_the_loop_goes_on(monkeypatch):
    """A message of 16 KiB or more is past the C loop's frames: the reader learns the
    message's new tail, starts the loop again at it, the loop stops there again, and the
    message is read by the reader. The nodes are those of the recipe route, and the messages
    after it take the loop again."""
    long = pb.Node(id=3, name="big", type=4, data_deps=[2], start_time_micros=103, duration_micros=9,
                   inputs=pb.IOInfo(values="x" * 20_000)).SerializeToString()
    files = [framed([plain_node(i, 100 + i) for i in range(3)] + [long] + [plain_node(i, 100 + i) for i in range(4, 9)])]
    learnt = []
    learn = NodeDecoder.learn_measured_template
    monkeypatch.setattr(NodeDecoder, "learn_measured_template", lambda self, body: learnt.append(len(body)) or learn(self, body))
    fast = read_both_ways(files, monkeypatch)
    assert set(learnt) == {len(plain_node(0, 100)), len(long)}  # the nodes after it: made in the loop
    with monkeypatch.context() as m:
        recipe_route_only(m)
        assert read_both_ways(files, m) == fast
    assert [(n.id, n.start_ns) for n in fast[0][0]] == [(i, (100 + i) * 1000) for i in range(9)]
    assert fast[0][0][3].inputs[0] == "x" * 20_000


# -- a set of ours declared measured: its templates give the nodes their facts -----------------

FACTS = st.one_of(  # what decide_timing takes back, in the kinds the writer gives them and others
    st.builds(lambda v: pb.AttributeProto(name="parent", int64_val=v), st.integers(0, 40)),
    st.builds(lambda v: pb.AttributeProto(name="parent", string_val=v), st.sampled_from(["3", "x"])),
    st.builds(lambda v: pb.AttributeProto(name="stream", string_val=v), st.sampled_from(["", "cpu", "stream 7"])),
    st.builds(lambda v: pb.AttributeProto(name="wait_ns", int64_val=v), st.integers(0, 1 << 40)),
    st.builds(lambda v: pb.AttributeProto(name="fused", string_val=v), st.sampled_from(["send_forward_recv_backward"])),
    st.builds(lambda v: pb.AttributeProto(name="pg_name", string_val=v), st.sampled_from(["1", "2"])),
)


def declared_metadata(declared: bool) -> bytes:
    said = [pb.AttributeProto(name="timing", string_val="measured"), pb.AttributeProto(name="time_origin_ns", int64_val=7)]
    return pb.GlobalMetadata(version="0.0.4", attr=said if declared else []).SerializeToString()


@st.composite
def measured_files(draw) -> list[tuple[bool, list[bytes]]]:
    """Ranks' (declared, node messages): measured starts (the first may be at 0, left out)."""
    ranks = []
    for _ in range(draw(st.integers(1, 3))):
        messages = [pb.Node(id=i, name=f"n{i % 3}", type=draw(st.sampled_from([4, 5, 6, 7])),
                            data_deps=[i - 1] if i else [], start_time_micros=draw(st.integers(0, 3)) and 100 + i,
                            duration_micros=draw(st.integers(0, 9)),
                            attr=draw(st.lists(FACTS, max_size=4))).SerializeToString()
                    for i in range(draw(st.integers(0, 12)))]
        ranks.append((draw(st.booleans()) or draw(st.booleans()), messages))
    return ranks


def loaded(folder: Path, ranks: list[tuple[bool, list[bytes]]]) -> tuple:
    for r, (declared, messages) in enumerate(ranks):
        (folder / f"w.{r}.et").write_bytes(b"".join(varint(len(m)) + m for m in [declared_metadata(declared), *messages]))
    trace = chakra.load(sorted(folder.glob("w.*.et")), Options(), Diagnostics())
    return trace.timing, trace.time_origin_ns, [rank.nodes for rank in trace.ranks.values()]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(ranks=measured_files())
def test_a_measured_set_loads_alike_by_both_routes(ranks, tmp_path_factory, monkeypatch):
    """The measured route's templates give a set declared measured by every rank its nodes'
    parent, stream and kept args, and decide_timing visits only the other nodes; a set some
    rank does not declare so is read again without. Either way as the recipe route, which
    decide_timing visits node by node."""
    fast = loaded(tmp_path_factory.mktemp("fast"), ranks)
    with monkeypatch.context() as m:
        recipe_route_only(m)
        slow = loaded(tmp_path_factory.mktemp("slow"), ranks)
    assert fast == slow


def test_only_the_nodes_no_template_made_are_visited_and_a_mixed_set_is_read_without_facts(tmp_path, monkeypatch):
    def node(i: int, start: int) -> bytes:
        return pb.Node(id=i, name="recv", type=6, start_time_micros=start, duration_micros=2,
                       attr=[pb.AttributeProto(name="parent", int64_val=0),
                             pb.AttributeProto(name="wait_ns", int64_val=5)]).SerializeToString()

    messages = [node(0, 0)] + [node(i, 100 + i) for i in range(1, 30)]
    visited, decoders = [], []
    decide, init = chakra.decide_timing, NodeDecoder.__init__
    monkeypatch.setattr(chakra, "decide_timing", lambda trace, pending=None: visited.append(
        sum(map(len, pending))) or decide(trace, pending))
    monkeypatch.setattr(NodeDecoder, "__init__", lambda self, **kw: decoders.append(kw) or init(self, **kw))
    timing, _, (nodes, other) = loaded(tmp_path, [(True, messages), (True, messages)])
    assert (timing, visited, decoders) == ("measured", [2], [{}])  # each rank's first node: no start time
    assert [(n.start_ns, n.parent, n.args) for n in nodes[:2]] == [(0, 0, {"wait_ns": 5}), (101_000, 0, {"wait_ns": 5})]
    assert nodes[1].args is not nodes[2].args is not other[2].args  # each node its own
    visited.clear(), decoders.clear()
    timing, _, (nodes, other) = loaded(tmp_path, [(True, messages), (False, messages)])
    assert (timing, visited, decoders) == ("none", [2], [{}, {"give_facts": False}])
    assert [(n.start_ns, n.parent, n.args) for n in nodes[:2]] == [(None, None, {}), (101_000, None, {})]
    visited.clear(), decoders.clear()  # the first rank read does not declare it: no template gives facts
    assert loaded(tmp_path, [(False, messages), (True, messages)]) == (timing, 0, [nodes, other])
    assert (visited, decoders) == ([2], [{}])
