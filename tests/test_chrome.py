"""Chrome JSON writer: layout, names, times, args, flows, rank subsets, determinism."""

from __future__ import annotations

import gzip
from collections import Counter, defaultdict

import orjson
import pytest

from converters.diagnostics import Diagnostics, UsageError
from converters.model import CollType, ExecutionTrace, Node, NodeKind, Rank
from converters.options import Options
from converters.timeline import Timeline
from converters.validate.chrome_rules import check_chrome_bytes, check_chrome_trace
from converters.writers import chrome
from converters.ranks import compact_ranks
from converters.writers.layout_chrome import format_bytes, parse_ranks

MIB = 1 << 20


def small_trace() -> ExecutionTrace:
    """4 ranks, TP 2 x PP 2, measured times.

    Every rank: `forward mb0` [0, 1 ms] with a TP all-reduce sub-op inside it; stage 0 sends
    to stage 1, stage 1 receives; two TP all-gathers on the tp thread that overlap without
    nesting (the second must move to "tp 2"); a sub-op that sticks out of its parent (goes to
    its comm thread); a DP all-reduce on "dp". Times are odd so µs formatting shows.
    """
    t = ExecutionTrace()
    t.timing = "measured"
    t.parallel.world, t.parallel.tp, t.parallel.pp = 4, 2, 2
    t.source.format = "test"
    t.source.files = ["made.log"]
    t.units = {"time": "ms"}
    t.assume("backward time = 2 x forward (test)")
    tp_groups = {0: t.add_group("tp", [0, 1]), 1: t.add_group("tp", [2, 3])}
    dp_groups = {r: t.add_group("dp", [r]) for r in range(4)}  # DP 1: a group of one
    for r in range(4):
        stage, tp = divmod(r, 2)
        rank = Rank(r, coords={"tp": tp, "pp": stage, "dp": 0})
        tpg = tp_groups[stage].id
        nodes = [
            Node(1, "forward mb0", NodeKind.COMPUTE, duration_ns=1_000_000, start_ns=1_234_567, microbatch=0,
                 source="made.log:3", args={"shape": [2048, 2, 5120], "none": None, "nan": float("nan"), "flops": 1.5}),
            Node(2, "all_reduce tp", NodeKind.COLLECTIVE, duration_ns=100_000, start_ns=1_400_000 + 1000 * r,
                 coll=CollType.ALL_REDUCE, size=64 * MIB, group=tpg, parent=1, source="made.log:4"),
            Node(3, "all_gather tp", NodeKind.COLLECTIVE, duration_ns=300_000, start_ns=2_500_000 + 10 * r,
                 coll=CollType.ALL_GATHER, size=4 * MIB, group=tpg),
            Node(4, "all_gather tp", NodeKind.COLLECTIVE, duration_ns=300_000, start_ns=2_600_000 + 10 * r,
                 coll=CollType.ALL_GATHER, size=4 * MIB, group=tpg),
            Node(5, "reduce_scatter tp", NodeKind.COLLECTIVE, duration_ns=200_000, start_ns=2_100_000,
                 coll=CollType.REDUCE_SCATTER, size=MIB, group=tpg, parent=1),
        ]
        if stage == 0:
            nodes.append(Node(6, "send_forward", NodeKind.SEND, duration_ns=50_000, start_ns=3_000_000 + r,
                              peer=r + 2, tag=7, size=3 * MIB // 2, microbatch=0))
        else:
            nodes.append(Node(6, "recv_forward", NodeKind.RECV, duration_ns=80_000, start_ns=2_990_000 + r,
                              peer=r - 2, tag=7, size=3 * MIB // 2, microbatch=0))
        nodes.append(Node(7, "dp_allreduce", NodeKind.COLLECTIVE, duration_ns=10_000, start_ns=4_000_000,
                          coll=CollType.ALL_REDUCE, size=1000, group=dp_groups[r].id))
        rank.nodes = nodes
        t.ranks[r] = rank
    return t


def write_json(tmp_path, trace, name="t.json", **options) -> dict:
    out = tmp_path / name
    chrome.write(trace, out, Options(**options), Diagnostics())
    data = out.read_bytes()
    assert check_chrome_bytes(data) == []
    return orjson.loads(gzip.decompress(data) if name.endswith(".gz") else data)


def slices(obj) -> list[dict]:
    return [e for e in obj["traceEvents"] if e["ph"] == "X"]


def thread_names(obj) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in obj["traceEvents"] if e["name"] == "thread_name"}


def by_node(obj, pid: int, node: int) -> dict:
    (event,) = [e for e in slices(obj) if e["pid"] == pid and e["args"]["node"] == node]
    return event


# ---------------------------------------------------------------- layout


def test_object_form_and_strict_json(tmp_path):
    obj = write_json(tmp_path, small_trace())
    assert set(obj) == {"traceEvents", "displayTimeUnit", "metadata"}
    assert obj["displayTimeUnit"] == "ms"
    assert len(slices(obj)) == 4 * 7
    assert check_chrome_trace(obj) == []


def test_pids_tids_and_process_names(tmp_path):
    obj = write_json(tmp_path, small_trace())
    names = {e["pid"]: e["args"]["name"] for e in obj["traceEvents"] if e["name"] == "process_name"}
    assert names == {1: "rank 0 · stage 0", 2: "rank 1 · stage 0", 3: "rank 2 · stage 1", 4: "rank 3 · stage 1"}
    sort_index = {e["pid"]: e["args"]["sort_index"] for e in obj["traceEvents"] if e["name"] == "process_sort_index"}
    assert sort_index == {1: 0, 2: 1, 3: 2, 4: 3}
    tids = [e["tid"] for e in obj["traceEvents"] if "tid" in e]
    assert all(tid != 0 for tid in tids)
    assert all(e["tid"] != e["pid"] for e in obj["traceEvents"] if "tid" in e)
    # tids are unique across the whole trace
    assert len({tid for (_, tid) in thread_names(obj)}) == len(thread_names(obj))


def test_thread_order(tmp_path):
    obj = write_json(tmp_path, small_trace())
    order = {}
    for e in obj["traceEvents"]:
        if e["name"] == "thread_sort_index":
            order[(e["pid"], e["tid"])] = e["args"]["sort_index"]
    names = thread_names(obj)
    rank0 = sorted((order[k], names[k]) for k in names if k[0] == 1)
    assert [n for _, n in rank0] == ["compute", "tp", "tp 2", "dp", "pp send"]
    rank2 = sorted((order[k], names[k]) for k in names if k[0] == 3)
    assert [n for _, n in rank2] == ["compute", "tp", "tp 2", "dp", "pp recv"]


def test_sub_op_nests_on_parent_thread_else_on_comm_thread(tmp_path):
    obj = write_json(tmp_path, small_trace())
    names = thread_names(obj)
    parent = by_node(obj, 1, 1)
    inside = by_node(obj, 1, 2)
    sticking_out = by_node(obj, 1, 5)
    assert names[(1, parent["tid"])] == "compute"
    assert inside["tid"] == parent["tid"]
    assert names[(1, sticking_out["tid"])] == "tp"


def test_overlapping_ops_move_to_overflow_thread(tmp_path):
    obj = write_json(tmp_path, small_trace())
    names = thread_names(obj)
    assert names[(1, by_node(obj, 1, 3)["tid"])] == "tp"
    assert names[(1, by_node(obj, 1, 4)["tid"])] == "tp 2"


def test_times_are_microseconds_with_three_decimals(tmp_path):
    trace = small_trace()
    text = (tmp_path / "t.json")
    chrome.write(trace, text, Options(), Diagnostics())
    raw = text.read_bytes()
    obj = orjson.loads(raw)
    forward = by_node(obj, 1, 1)
    # origin = earliest start over all ranks = 1_234_567 ns -> forward starts at 0
    assert forward["ts"] == 0 and forward["dur"] == 1000
    send = by_node(obj, 1, 6)
    assert send["ts"] == pytest.approx(1765.433)
    assert b'"ts":1765.433' in raw
    assert obj["metadata"]["time_origin_ns"] == 1_234_567
    # children never end after their parents once printed
    child = by_node(obj, 2, 2)
    assert child["ts"] == 166.433  # 1_401_000 - 1_234_567 ns
    assert round(child["ts"] * 1000) + round(child["dur"] * 1000) <= round(forward["ts"] * 1000) + round(forward["dur"] * 1000)


def test_slice_names_and_args(tmp_path):
    obj = write_json(tmp_path, small_trace())
    ar = by_node(obj, 2, 2)
    assert ar["name"] == "all_reduce tp 64 MiB"
    assert ar["args"]["bytes"] == 64 * MIB
    assert ar["args"]["group"] == "tp#1"
    assert ar["args"]["members"] == "0-1"
    assert ar["args"]["stage"] == 0
    assert ar["args"]["source"] == "made.log:4"
    assert ar["args"]["op"] == "all_reduce"
    fwd = by_node(obj, 1, 1)
    assert fwd["name"] == "forward mb0"
    assert fwd["args"]["microbatch"] == 0
    assert fwd["args"]["shape"] == "[2048, 2, 5120]"
    assert fwd["args"]["flops"] == 1.5
    assert "none" not in fwd["args"] and "nan" not in fwd["args"]
    send = by_node(obj, 1, 6)
    assert send["name"] == "send_forward 1.5 MiB"
    assert send["args"]["peer"] == 2 and send["args"]["tag"] == 7


def test_metadata(tmp_path):
    meta = write_json(tmp_path, small_trace())["metadata"]
    assert meta["et_convert.version"]
    assert meta["source.format"] == "test"
    assert meta["source.files"] == ["made.log"]
    assert meta["units"] == {"time": "ms"}
    assert meta["parallel"]["tp"] == 2 and meta["parallel"]["pp"] == 2
    assert meta["timing"] == "measured"
    assert meta["assumptions"] == ["backward time = 2 x forward (test)"]
    assert meta["ranks_drawn"] == "0-3"


def test_scheduled_timeline_metadata_and_given_timeline(tmp_path):
    trace = small_trace()
    trace.timing = "none"  # no measured times: the writer must use the timeline it is given
    starts = {r: [10_000 * i for i in range(len(trace.ranks[r].nodes))] for r in trace.ranks}
    ends = {r: [s + 5_000 for s in starts[r]] for r in trace.ranks}
    timeline = Timeline(starts, ends, "scheduled", summary={"iteration_ns": 65_000}, parameters={"bandwidth_GBps": 100})
    out = tmp_path / "s.json"
    chrome.write(trace, out, Options(), Diagnostics(), timeline=timeline)
    obj = orjson.loads(out.read_bytes())
    assert check_chrome_trace(obj) == []
    assert obj["metadata"]["timing"] == "scheduled"
    assert obj["metadata"]["network"] == {"bandwidth_GBps": 100}
    assert obj["metadata"]["summary"] == {"iteration_ns": 65_000}
    assert by_node(obj, 1, 2)["ts"] == 10.0


# ---------------------------------------------------------------- flows


def flow_links(obj) -> dict[int, list[tuple[str, int]]]:
    links = defaultdict(list)
    for e in slices(obj):
        if "bind_id" in e:
            kind = "step" if e.get("flow_in") and e.get("flow_out") else "out" if e.get("flow_out") else "in"
            links[e["bind_id"]].append((kind, e["pid"] - 1, e["args"]["node"]))
    return links


def test_send_recv_flow_has_both_ends(tmp_path):
    links = flow_links(write_json(tmp_path, small_trace()))
    p2p = [v for v in links.values() if any(node == 6 for _, _, node in v)]
    assert len(p2p) == 2
    for link in p2p:
        kinds = sorted(kind for kind, _, _ in link)
        assert kinds == ["in", "out"]
        # the recv is posted first (2_990_000 + r) so the flow starts there: Perfetto draws earlier -> later
        (out_rank,) = [rank for kind, rank, _ in link if kind == "out"]
        assert out_rank in (2, 3)
    pairs = sorted(tuple(sorted(rank for _, rank, _ in link)) for link in p2p)
    assert pairs == [(0, 2), (1, 3)]


def test_collective_instances_chain_members(tmp_path):
    obj = write_json(tmp_path, small_trace())
    links = flow_links(obj)
    coll = [v for v in links.values() if not any(node == 6 for _, _, node in v)]
    # 4 TP collectives per rank x 2 TP groups; DP groups have one member each: no flow
    assert len(coll) == 8
    for link in coll:
        assert sorted(kind for kind, _, _ in link) == ["in", "out"]
        assert len({node for _, _, node in link}) == 1  # k-th with k-th
    ids = list(links)
    assert len(ids) == len(set(ids)) == 10
    assert all(0 < i < 2**53 for i in ids)


def test_chain_of_more_members_uses_steps(tmp_path):
    trace = ExecutionTrace()
    trace.timing = "measured"
    group = trace.add_group("dp", [0, 1, 2])
    for r in range(3):
        trace.ranks[r] = Rank(r, nodes=[Node(1, "grads", NodeKind.COLLECTIVE, duration_ns=100, start_ns=30 - 10 * r,
                                             coll=CollType.ALL_REDUCE, size=8, group=group.id)])
    obj = write_json(tmp_path, trace)
    (link,) = flow_links(obj).values()
    # members enter in order rank 2, 1, 0
    assert link == [("in", 0, 1), ("step", 1, 1), ("out", 2, 1)]


# ---------------------------------------------------------------- outputs


def test_deterministic_bytes_and_gzip(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    chrome.write(small_trace(), a, Options(), Diagnostics())
    chrome.write(small_trace(), b, Options(), Diagnostics())
    assert a.read_bytes() == b.read_bytes()
    ga, gb = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    chrome.write(small_trace(), ga, Options(), Diagnostics())
    chrome.write(small_trace(), gb, Options(), Diagnostics())
    assert ga.read_bytes() == gb.read_bytes()
    assert gzip.decompress(ga.read_bytes()) == a.read_bytes()


def test_api_write_picks_chrome_by_suffix(tmp_path):
    from converters.api import write

    write(small_trace(), tmp_path / "x.json.gz")
    assert check_chrome_bytes((tmp_path / "x.json.gz").read_bytes()) == []


# ---------------------------------------------------------------- --ranks


def test_ranks_option_draws_subset_and_only_their_flows(tmp_path):
    obj = write_json(tmp_path, small_trace(), ranks="0,2")
    assert {e["pid"] for e in slices(obj)} == {1, 3}
    links = flow_links(obj)
    # the send 0 -> 2 survives; every TP collective has only one drawn member
    assert len(links) == 1
    assert sorted(rank for _, rank, _ in next(iter(links.values()))) == [0, 2]
    assert obj["metadata"]["ranks_drawn"] == "0,2"


def test_ranks_option_errors():
    with pytest.raises(UsageError, match="no rank 9"):
        parse_ranks("0-3,9", [0, 1, 2, 3])
    with pytest.raises(UsageError, match="cannot read 'x'"):
        parse_ranks("x", [0, 1])
    assert parse_ranks("all", [0, 1, 5]) == [0, 1, 5]
    assert parse_ranks(" 1-2 ,0", [0, 1, 2, 3]) == [0, 1, 2]


def big_trace(tp=8, pp=16, dp=2) -> ExecutionTrace:
    """tp*pp*dp ranks, each one compute node and one TP all-reduce (measured times)."""
    trace = ExecutionTrace()
    trace.timing = "measured"
    world = tp * pp * dp
    for r in range(world):
        t, d, p = r % tp, (r // tp) % dp, r // (tp * dp)
        group = trace.add_group("tp", [r - t + i for i in range(tp)])
        trace.ranks[r] = Rank(r, coords={"tp": t, "dp": d, "pp": p}, nodes=[
            Node(1, "forward", NodeKind.COMPUTE, duration_ns=1000, start_ns=0),
            Node(2, "all_reduce", NodeKind.COLLECTIVE, duration_ns=100, start_ns=1000 + r,
                 coll=CollType.ALL_REDUCE, size=MIB, group=group.id),
        ])
    return trace


def test_default_subset_above_64_ranks_warns_once(tmp_path):
    diagnostics = Diagnostics()
    out = tmp_path / "big.json"
    chrome.write(big_trace(), out, Options(), diagnostics)
    obj = orjson.loads(out.read_bytes())
    assert check_chrome_trace(obj) == []
    drawn = sorted({e["pid"] - 1 for e in slices(obj)})
    stage_firsts = [p * 16 for p in range(16)]
    assert drawn == sorted(set(range(8)) | set(stage_firsts))
    (message,) = diagnostics.messages()
    assert "drawing 23 of 256 ranks" in message and "--ranks all" in message
    # only rank 0's TP group has more than one drawn member: one chain
    assert len(flow_links(obj)) == 1


def test_ranks_all_draws_everything(tmp_path):
    obj = write_json(tmp_path, big_trace(tp=4, pp=2, dp=9), ranks="all")
    assert len({e["pid"] for e in slices(obj)}) == 72
    assert len(flow_links(obj)) == 18


def test_large_output_warns(tmp_path, monkeypatch):
    monkeypatch.setattr(chrome, "LARGE_JSON", 1000)
    diagnostics = Diagnostics()
    chrome.write(small_trace(), tmp_path / "t.json", Options(), diagnostics)
    (message,) = diagnostics.messages()
    assert ".pftrace" in message and "--ranks" in message


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_the_size_warning_states_the_json_written(tmp_path, samples, monkeypatch, suffix):
    """The chrome-large warning gives the size of the JSON written (before gzip)."""
    from converters.api import read

    monkeypatch.setattr(chrome, "LARGE_JSON", 1_000_000)
    trace = read(samples / "simai_tp8_pp16_1024gpu.txt")
    out = tmp_path / f"s{suffix}"
    diagnostics = Diagnostics()
    chrome.write(trace, out, Options(), diagnostics)
    data = gzip.decompress(out.read_bytes()) if suffix == ".json.gz" else out.read_bytes()
    slices = sum(1 for e in orjson.loads(data)["traceEvents"] if e["ph"] == "X")
    [message] = [m for m in diagnostics.messages() if "GB of JSON" in m]
    assert f"s{suffix}: {len(data) / 1e9:.1f} GB of JSON ({slices:,} slices)" in message
    monkeypatch.setattr(chrome, "LARGE_JSON", len(data))  # not above it: no warning
    diagnostics = Diagnostics()
    chrome.write(trace, out, Options(), diagnostics)
    assert not any("GB of JSON" in m for m in diagnostics.messages())


# ---------------------------------------------------------------- helpers


def test_format_helpers():
    assert format_bytes(64 * MIB) == "64 MiB"
    assert format_bytes(3 * MIB // 2) == "1.5 MiB"
    assert format_bytes(4096) == "4 KiB"
    assert format_bytes(100) == "100 B"
    assert format_bytes(1 << 30) == "1 GiB"
    assert compact_ranks([103, 96, 97, 98, 99, 100, 101, 102]) == "96-103"
    assert compact_ranks([0, 1, 2, 3, 8, 9, 10, 11]) == "0-3,8-11"
    assert compact_ranks([68, 76, 84]) == "68,76,84"


def test_every_node_drawn_once(tmp_path):
    obj = write_json(tmp_path, small_trace())
    counts = Counter((e["pid"], e["args"]["node"]) for e in slices(obj))
    assert set(counts.values()) == {1}
    assert len(counts) == 28


def perfetto_text_ns(text: str) -> int:
    """How Perfetto's tokenizer reads a µs number's text: move the point 3 places, cut the rest."""
    whole, _, frac = text.partition(".")
    return int(whole + (frac + "000")[:3])


def test_durations_read_back_exactly_both_ways():
    for ns in list(range(0, 5000)) + [1_234_567, 999_999_999, 4_500_000_000_001, 86_400_000_000_123]:
        text = orjson.dumps(chrome.dur_us(ns)).decode()
        assert perfetto_text_ns(text) == ns, text
        assert int(float(text) * 1000.0) == ns, text  # importers that read a double and truncate


def shared_trace() -> ExecutionTrace:
    """4 ranks in 2 stages sharing one node list per stage (group_map / peer_map), scheduled times."""
    t = ExecutionTrace()
    t.timing = "scheduled"
    tp = {0: t.add_group("tp", [0, 1]), 1: t.add_group("tp", [2, 3])}
    stage_nodes = {
        0: [Node(1, "fwd", NodeKind.COMPUTE, duration_ns=100),
            Node(2, "ar", NodeKind.COLLECTIVE, duration_ns=10, coll=CollType.ALL_REDUCE, size=8, group=tp[0].id),
            Node(3, "send", NodeKind.SEND, duration_ns=10, peer=2, tag=1, size=8)],
        1: [Node(1, "recv", NodeKind.RECV, duration_ns=10, peer=0, tag=1, size=8),
            Node(2, "fwd", NodeKind.COMPUTE, duration_ns=100),
            Node(3, "ar", NodeKind.COLLECTIVE, duration_ns=10, coll=CollType.ALL_REDUCE, size=8, group=tp[1].id)],
    }
    times = {0: ([0, 100, 110], [100, 110, 120]), 1: ([105, 115, 215], [115, 215, 225])}
    starts, ends = {}, {}
    for r in range(4):
        stage = r // 2
        rep = 2 * stage
        t.ranks[r] = Rank(r, nodes=stage_nodes[stage], coords={"pp": stage, "tp": r % 2},
                          group_map=None if r == rep else {tp[stage].id: tp[stage].id},
                          peer_map=None if r == rep else {2: 3, 0: 1})
        starts[r], ends[r] = times[stage]  # the same list objects for both ranks of a stage
    return t, Timeline(starts, ends, "scheduled")


def test_shared_node_lists_map_peers_and_groups(tmp_path):
    trace, timeline = shared_trace()
    out = tmp_path / "shared.json"
    chrome.write(trace, out, Options(), Diagnostics(), timeline=timeline)
    obj = orjson.loads(out.read_bytes())
    assert check_chrome_trace(obj) == []
    assert by_node(obj, 2, 3)["args"]["peer"] == 3  # rank 1 sends to rank 3, not rank 2
    assert by_node(obj, 4, 1)["args"]["peer"] == 1
    assert by_node(obj, 3, 3)["args"]["members"] == "2-3"
    links = flow_links(obj)
    pairs = sorted(tuple(sorted(rank for _, rank, _ in link)) for link in links.values())
    assert pairs == [(0, 1), (0, 2), (1, 3), (2, 3)]


def test_sub_op_follows_parent_to_overflow_thread_and_extra_streams_sort_last(tmp_path):
    trace = ExecutionTrace()
    trace.timing = "measured"
    trace.ranks[0] = Rank(0, nodes=[
        Node(1, "a", NodeKind.COMPUTE, duration_ns=100, start_ns=0),
        Node(2, "b", NodeKind.COMPUTE, duration_ns=100, start_ns=50),  # overlaps a: compute 2
        Node(3, "b.sub", NodeKind.COLLECTIVE, duration_ns=10, start_ns=120, parent=2, coll=CollType.ALL_REDUCE, size=4),
        Node(4, "copy", NodeKind.MEM_LOAD, duration_ns=10, start_ns=0, stream="zeta"),
        Node(5, "h2d", NodeKind.MEM_LOAD, duration_ns=10, start_ns=0, stream="alpha"),
    ])
    obj = write_json(tmp_path, trace)
    names = thread_names(obj)
    assert names[(1, by_node(obj, 1, 2)["tid"])] == "compute 2"
    assert by_node(obj, 1, 3)["tid"] == by_node(obj, 1, 2)["tid"]
    order = sorted((e["args"]["sort_index"], names[(e["pid"], e["tid"])]) for e in obj["traceEvents"]
                   if e["name"] == "thread_sort_index")
    assert [n for _, n in order] == ["compute", "compute 2", "alpha", "zeta"]


def test_empty_trace_is_valid(tmp_path):
    trace = ExecutionTrace()
    trace.timing = "measured"
    trace.ranks[0] = Rank(0)
    obj = write_json(tmp_path, trace)
    assert slices(obj) == []


def test_reader_metadata_with_int_keys_and_paths_is_written(tmp_path):
    from pathlib import Path

    trace = small_trace()
    trace.metadata = {"stage2rank": {0: 0, 1: 2}, "file": Path("a/b.log")}
    meta = write_json(tmp_path, trace)["metadata"]
    assert meta["details"] == {"stage2rank": {"0": 0, "1": 2}, "file": "a/b.log"}


def test_default_subset_without_groups_or_stages_takes_the_first_64(tmp_path):
    trace = ExecutionTrace()
    trace.timing = "measured"
    for r in range(100):
        trace.ranks[r] = Rank(r, nodes=[Node(1, "f", NodeKind.COMPUTE, duration_ns=10, start_ns=0)])
    diagnostics = Diagnostics()
    out = tmp_path / "t.json"
    chrome.write(trace, out, Options(), diagnostics)
    assert {e["pid"] for e in slices(orjson.loads(out.read_bytes()))} == set(range(1, 65))
    (message,) = diagnostics.messages()
    assert message.startswith("drawing 64 of 100 ranks (0-63: the first 64 ranks)")
