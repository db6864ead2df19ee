"""Native Perfetto writer: parse the .pftrace back with the same schema and compare with the JSON."""

from __future__ import annotations

from collections import Counter, defaultdict

import orjson
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from converters.diagnostics import Diagnostics
from converters.options import Options
from converters.writers import chrome, perfetto
from test_chrome import big_trace, small_trace

BEGIN, END = pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END


def both(tmp_path, trace_factory=small_trace, **options):
    pf, js = tmp_path / "t.pftrace", tmp_path / "t.json"
    perfetto.write(trace_factory(), pf, Options(**options), Diagnostics())
    chrome.write(trace_factory(), js, Options(**options), Diagnostics())
    trace = pb.Trace()
    trace.ParseFromString(pf.read_bytes())
    return trace, orjson.loads(js.read_bytes())


def decoded(trace: pb.Trace):
    """(names and arg names by (sequence, iid), track descriptors by uuid, track events with their packets)."""
    names, arg_names, tracks, events = {}, {}, {}, []
    for packet in trace.packet:
        seq = packet.trusted_packet_sequence_id
        if packet.HasField("interned_data"):
            names.update({(seq, e.iid): e.name for e in packet.interned_data.event_names})
            arg_names.update({(seq, e.iid): e.name for e in packet.interned_data.debug_annotation_names})
        if packet.HasField("track_descriptor"):
            tracks[packet.track_descriptor.uuid] = packet.track_descriptor
        if packet.HasField("track_event"):
            events.append(packet)
    return names, arg_names, tracks, events


def tid_of(tracks, uuid: int) -> int:
    """The thread id of a thread track (track uuids are the writer's own numbers)."""
    return tracks[uuid].thread.tid


def test_same_slices_names_and_flows_as_json(tmp_path):
    trace, obj = both(tmp_path)
    names, _, tracks, events = decoded(trace)
    x = [e for e in obj["traceEvents"] if e["ph"] == "X"]
    begins = [p.track_event for p in events if p.track_event.type == BEGIN]
    ends = [p.track_event for p in events if p.track_event.type == END]
    assert len(begins) == len(ends) == len(x) == 28
    assert Counter(names[p.trusted_packet_sequence_id, p.track_event.name_iid] for p in events
                   if p.track_event.type == BEGIN) == Counter(e["name"] for e in x)
    json_starts = sum(1 for e in x if e.get("flow_out"))
    json_ends = sum(1 for e in x if e.get("flow_in") and not e.get("flow_out"))
    assert sum(len(b.flow_ids) for b in begins) == sum(1 for e in x if e.get("flow_out")) == json_starts
    assert sum(len(b.terminating_flow_ids) for b in begins) == json_ends == 10
    # same threads: one descriptor per JSON thread, with the same tid and name
    json_threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in obj["traceEvents"] if e["name"] == "thread_name"}
    pf_threads = {(t.thread.pid, t.thread.tid): t.thread.thread_name for t in tracks.values() if t.HasField("thread")}
    assert pf_threads == json_threads
    pf_processes = {t.process.pid: t.process.process_name for t in tracks.values() if t.HasField("process")}
    assert pf_processes == {1: "rank 0 · stage 0", 2: "rank 1 · stage 0", 3: "rank 2 · stage 1", 4: "rank 3 · stage 1"}


def pid_of(tracks, packet) -> int:
    return tracks[packet.track_event.track_uuid].thread.pid


def assert_written_process_by_process(tracks, events) -> None:
    """Each process's events are one block, in pid order, with timestamps ascending inside it
    (Perfetto sorts all packets by time itself; only a track's own order matters)."""
    pids = [pid_of(tracks, p) for p in events]
    blocks = [pid for k, pid in enumerate(pids) if k == 0 or pids[k - 1] != pid]
    assert blocks == sorted(set(pids))
    by_pid = defaultdict(list)
    for pid, p in zip(pids, events):
        by_pid[pid].append(p.timestamp)
    for stamps in by_pid.values():
        assert stamps == sorted(stamps)


def test_slices_nest_per_track_and_times_are_sorted(tmp_path):
    trace, obj = both(tmp_path)
    _, _, tracks, events = decoded(trace)
    assert_written_process_by_process(tracks, events)
    open_per_track = defaultdict(int)
    for p in events:
        uuid = p.track_event.track_uuid
        assert uuid in tracks
        open_per_track[uuid] += 1 if p.track_event.type == BEGIN else -1
        assert open_per_track[uuid] >= 0
    assert set(open_per_track.values()) == {0}
    # a begin and its end give the same ns span as the JSON slice
    spans = []
    stacks = defaultdict(list)
    for p in events:
        ev = p.track_event
        if ev.type == BEGIN:
            stacks[ev.track_uuid].append(p.timestamp)
        else:
            spans.append((tid_of(tracks, ev.track_uuid), stacks[ev.track_uuid].pop(), p.timestamp))
    x = [(e["tid"], round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in obj["traceEvents"] if e["ph"] == "X"]
    assert sorted(spans) == sorted(x)


def test_args_are_debug_annotations(tmp_path):
    trace, _ = both(tmp_path)
    names, arg_names, _, events = decoded(trace)
    def begin_named(name):
        return next(p for p in events if p.track_event.type == BEGIN
                    and names[p.trusted_packet_sequence_id, p.track_event.name_iid] == name)
    ar = begin_named("all_reduce tp 64 MiB")
    args = {}
    for a in ar.track_event.debug_annotations:
        kind = a.WhichOneof("value")
        args[arg_names[ar.trusted_packet_sequence_id, a.name_iid]] = getattr(a, kind)
    assert args["bytes"] == 64 << 20
    assert args["group"] == "tp#1"
    assert args["members"] == "0-1"
    assert args["source"] == "made.log:4"
    fwd = begin_named("forward mb0")
    kinds = {arg_names[fwd.trusted_packet_sequence_id, a.name_iid]: a.WhichOneof("value")
             for a in fwd.track_event.debug_annotations}
    assert kinds["flops"] == "double_value" and kinds["shape"] == "string_value" and kinds["microbatch"] == "int_value"


def test_interned_state_and_sequence(tmp_path):
    """The descriptors on sequence 1; each process on a sequence of its own, started by a packet
    that clears its state and interns every name it uses, from iid 1."""
    trace, _ = both(tmp_path)
    first = trace.packet[0]
    assert first.sequence_flags == pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    assert {p.trusted_packet_sequence_id for p in trace.packet if not p.HasField("track_event")
            and not p.HasField("interned_data")} == {perfetto.SEQUENCE_ID}
    _, _, tracks, events = decoded(trace)
    for p in events:
        assert p.sequence_flags == pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        assert p.trusted_packet_sequence_id == perfetto.sequence_id(tracks[p.track_event.track_uuid].thread.pid)
    assert_interned_before_use(trace)
    interned = [p for p in trace.packet if p.HasField("interned_data")]
    assert [p.sequence_flags for p in interned] == [pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED] * 4
    assert [p.trusted_packet_sequence_id for p in interned] == [perfetto.sequence_id(pid) for pid in (1, 2, 3, 4)]
    # each rank interns exactly the names it uses
    names, arg_names = defaultdict(set), defaultdict(set)
    for p in events:
        if p.track_event.type == BEGIN:
            names[p.trusted_packet_sequence_id].add(p.track_event.name_iid)
            arg_names[p.trusted_packet_sequence_id].update(a.name_iid for a in p.track_event.debug_annotations)
    for p in interned:
        assert {e.iid for e in p.interned_data.event_names} == names[p.trusted_packet_sequence_id]
        assert {e.iid for e in p.interned_data.debug_annotation_names} == arg_names[p.trusted_packet_sequence_id]
    assert [len(p.interned_data.event_names) for p in interned] == [6, 6, 6, 6]


def assert_interned_before_use(trace: pb.Trace) -> None:
    """On each sequence, every name and arg name is interned once, with the next iid (from 1
    after the state is cleared), in a packet before its first use."""
    names, arg_names = defaultdict(dict), defaultdict(dict)
    for p in trace.packet:
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            names[seq], arg_names[seq] = {}, {}
        for table, entries in ((names[seq], p.interned_data.event_names),
                               (arg_names[seq], p.interned_data.debug_annotation_names)):
            for e in entries:
                assert e.iid == len(table) + 1 and e.name not in table.values()
                table[e.iid] = e.name
        if p.HasField("track_event") and p.track_event.type == BEGIN:
            assert p.track_event.name_iid in names[seq]
            assert all(a.name_iid in arg_names[seq] for a in p.track_event.debug_annotations)


def test_deterministic_bytes(tmp_path):
    a, b = tmp_path / "a.pftrace", tmp_path / "b.pftrace"
    perfetto.write(small_trace(), a, Options(), Diagnostics())
    perfetto.write(small_trace(), b, Options(), Diagnostics())
    assert a.read_bytes() == b.read_bytes()


def test_rank_subset_matches_json(tmp_path):
    trace, obj = both(tmp_path, big_trace)
    _, _, tracks, events = decoded(trace)
    pids = {t.process.pid for t in tracks.values() if t.HasField("process")}
    assert pids == {e["pid"] for e in obj["traceEvents"] if e["ph"] == "X"}
    assert len(pids) == 23
    flows = sum(len(p.track_event.flow_ids) + len(p.track_event.terminating_flow_ids) for p in events)
    assert flows == sum(1 for e in obj["traceEvents"] if "bind_id" in e) == 8


def test_api_write_picks_perfetto_by_suffix(tmp_path):
    from converters.api import write

    write(small_trace(), tmp_path / "x.pftrace")
    trace = pb.Trace()
    trace.ParseFromString((tmp_path / "x.pftrace").read_bytes())
    assert sum(1 for p in trace.packet if p.HasField("track_event")) == 56


# ---------------------------------------------------------------- random traces


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from converters.model import CollType, ExecutionTrace, Node, NodeKind, Rank  # noqa: E402
from converters.validate.chrome_rules import check_chrome_trace  # noqa: E402

KINDS = [NodeKind.COMPUTE, NodeKind.COLLECTIVE, NodeKind.SEND, NodeKind.RECV]


@st.composite
def random_trace(draw):
    """2-3 ranks of up to 12 ops with random (often overlapping, often equal) times."""
    trace = ExecutionTrace()
    trace.timing = "measured"
    ranks = draw(st.integers(2, 3))
    group = trace.add_group("tp", list(range(ranks)))
    for r in range(ranks):
        nodes = []
        for i in range(draw(st.integers(0, 12))):
            kind = draw(st.sampled_from(KINDS))
            start = draw(st.integers(0, 40)) * 250
            duration = draw(st.integers(0, 8)) * 250 + draw(st.sampled_from([0, 1, 999]))
            parent = draw(st.one_of(st.none(), st.integers(1, i))) if i else None
            node = Node(i + 1, f"op{i}", kind, duration_ns=duration, start_ns=start, parent=parent, size=4)
            if kind == NodeKind.COLLECTIVE:
                node.coll, node.group = CollType.ALL_REDUCE, group.id
            elif kind in (NodeKind.SEND, NodeKind.RECV):
                node.peer, node.tag = (r + 1) % ranks, 0
            nodes.append(node)
        trace.ranks[r] = Rank(r, nodes=nodes)
    return trace


@settings(max_examples=60, deadline=None)
@given(random_trace())
def test_random_traces_nest_and_agree(tmp_path_factory, trace):
    tmp = tmp_path_factory.mktemp("random")
    js, pf = tmp / "t.json", tmp / "t.pftrace"
    chrome.write(trace, js, Options(), Diagnostics())
    perfetto.write(trace, pf, Options(), Diagnostics())
    obj = orjson.loads(js.read_bytes())
    assert check_chrome_trace(obj) == []
    parsed = pb.Trace()
    parsed.ParseFromString(pf.read_bytes())
    _, _, tracks, events = decoded(parsed)
    assert_written_process_by_process(tracks, events)
    assert_interned_before_use(parsed)
    stacks = defaultdict(list)
    spans = []
    for p in events:
        ev = p.track_event
        if ev.type == BEGIN:
            stacks[ev.track_uuid].append(p.timestamp)
        else:
            start = stacks[ev.track_uuid].pop()
            # a slice ends inside the slice it was opened in
            assert all(start >= outer for outer in stacks[ev.track_uuid])
            spans.append((tid_of(tracks, ev.track_uuid), start, p.timestamp))
    assert all(not s for s in stacks.values())
    x = [(e["tid"], round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in obj["traceEvents"] if e["ph"] == "X"]
    assert sorted(spans) == sorted(x)
    flows_pf = sum(len(p.track_event.flow_ids) + len(p.track_event.terminating_flow_ids) for p in events)
    assert flows_pf == sum(1 for e in obj["traceEvents"] if "bind_id" in e)


def test_hand_encoded_annotations_are_the_bytes_protobuf_writes():
    import random

    from converters.writers.perfetto import add_annotations, annotation_bytes, pb

    names = {f"k{i}": i + 1 for i in range(300)}
    values = [True, False, 0, 1, -1, 127, 128, -(1 << 63), (1 << 63) - 1, 2**40, 0.0, -0.0, -0.5, 1e300,
              float("inf"), "", "abc", "µs ünïcode", [1, 2], None, (3, 4)]
    chooser = random.Random(1)
    for _ in range(2000):
        args = {f"k{chooser.randrange(300)}": chooser.choice(values) for _ in range(chooser.randrange(8))}
        event = pb.TrackEvent()
        add_annotations(event, args, names)
        assert annotation_bytes(args, names) == event.SerializeToString(), args
