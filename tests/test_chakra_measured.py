"""The Chakra reader's fast route for measured messages gives what the recipe route gives.

A Node message with a start time keeps its rank on a list of its own, so `NodeDecoder.read_nodes`
makes its Node at once from its head and tail (`measured_values`), and a file whose first nodes
are measured is not split at its per-rank fields (`starts_measured`). Here random files (plain,
measured and bent messages, two ranks with messages in common) are read with and without those
shortcuts: the nodes, the sharing between ranks, the count of non-canonical messages and the
first error must be the same.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_chakra_head import node_messages

from converters._proto import et_def_pb2 as pb
from converters._proto.wire import varint
from converters.diagnostics import InputError
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
    maps, non-canonical count) or the first error's text."""
    decoder = NodeDecoder()
    try:
        ranks = [chakra.read_rank(Path(f"w.{i}.et"), i, data, decoder) for i, data in enumerate(files)]
    except InputError as e:
        return str(e)
    return ([r.nodes for r in ranks], [r.nodes is ranks[0].nodes for r in ranks],
            [(r.group_map, r.peer_map) for r in ranks], decoder.noncanonical, decoder.shared_ranks)


def recipe_route_only(monkeypatch) -> None:
    monkeypatch.setattr(NodeDecoder, "measured_values", lambda self, body: None)
    monkeypatch.setattr(NodeDecoder, "starts_measured", lambda self, data, at: False)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(node_messages(), max_size=12), st.lists(st.integers(0, 11), max_size=12),
       st.lists(st.integers(0, 11), max_size=12), st.integers(0, 3), st.integers(1, 3))
def test_random_files_read_alike_by_both_routes(monkeypatch, messages, picks, third_picks, plain_run, probe):
    # later ranks repeat some of the first rank's messages (the measured cache across ranks),
    # and may stop keeping theirs after `probe` of them (MEASURED_PROBE)
    files = [framed(messages), *(framed([messages[i] for i in p if i < len(messages)]) for p in (picks, third_picks))]
    with monkeypatch.context() as m:
        m.setattr(NodeDecoder, "PLAIN_RUN", plain_run)
        m.setattr(NodeDecoder, "MEASURED_PROBE", probe)
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


def kept_after_each_file(starts: list[int]) -> tuple[list[int], bool]:
    """Files of one 40-node graph measured from these start times: how many measured messages
    the decoder keeps after each, and whether it saw ranks repeat."""
    decoder = NodeDecoder()
    kept = []
    for i, first in enumerate(starts):
        rank = chakra.read_rank(Path(f"w.{i}.et"), i, framed([plain_node(k, first + k) for k in range(40)]), decoder)
        assert [n.start_ns for n in rank.nodes] == [(first + k) * 1000 for k in range(40)]
        kept.append(len(decoder.measured))
    return kept, decoder.measured_ranks_repeat


def test_a_file_that_finds_few_of_its_measured_messages_stops_keeping_them(monkeypatch):
    monkeypatch.setattr(NodeDecoder, "MEASURED_PROBE", 4)
    # the first file keeps all 40; the second and third find none of their first 4 and stop;
    # the fourth finds the second's 4, then none of the next 4, and stops
    assert kept_after_each_file([100, 200, 300, 200]) == ([40, 44, 48, 56], False)


def test_once_a_file_found_most_of_its_measured_messages_every_file_keeps_all(monkeypatch):
    monkeypatch.setattr(NodeDecoder, "MEASURED_PROBE", 4)
    # the second file finds all the first's: ranks repeat, so the third keeps all for the fourth
    assert kept_after_each_file([100, 100, 200, 200]) == ([40, 40, 80, 80], True)
