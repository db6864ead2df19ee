"""`et-convert stats`: the JSON contract, the text table, network files, deadlocks."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers.scheduler_synth import coll, compute, recv, trace_of

from converters.diagnostics import Diagnostics
from converters.model import CollType
from converters.options import Options


def test_json_contract(cli, samples):
    done = cli("stats", samples / "chakra_data", "--json")
    assert done.code == 0, done.stderr
    stats = orjson.loads(done.stdout)
    assert stats["timing"] == "scheduled"
    assert set(stats["ranks"]) == {"0", "1", "2", "3"}
    for row in stats["ranks"].values():
        assert set(row) >= {"finish_ns", "compute_ns", "exposed_comm_ns", "idle_ns"}
        assert row["finish_ns"] == row["compute_ns"] + row["exposed_comm_ns"] + row["idle_ns"]
    assert stats["iteration_time_ns"] == max(r["finish_ns"] for r in stats["ranks"].values())
    # The reference DATA workload: 45.8 ms of compute per rank, wg all-reduces over all ranks.
    assert stats["ranks"]["0"]["compute_ns"] == 45_800_000
    assert stats["comm"]["all"]["ops"] == 16


def test_network_file_and_overrides_change_the_result(cli, samples):
    base = orjson.loads(cli("stats", samples / "chakra_data", "--json").stdout)
    astra = cli("stats", samples / "chakra_data", "--json", "--network", samples / "network_astra_ring8.toml")
    assert astra.code == 0, astra.stderr
    astra = orjson.loads(astra.stdout)
    assert astra["network"]["source"] == "network_astra_ring8.toml"
    assert astra["network"]["dp"]["chunks"] == 4
    assert astra["iteration_time_ns"] != base["iteration_time_ns"]
    slow = orjson.loads(cli("stats", samples / "chakra_data", "--json", "--net", "bandwidth_gbps=1").stdout)
    assert slow["iteration_time_ns"] > base["iteration_time_ns"]


def test_text_table(cli, samples):
    done = cli("stats", samples / "chakra_data")
    assert done.code == 0, done.stderr
    out = done.stdout
    assert out.startswith("iteration time  46.076 ms  (scheduled, 4 ranks)")
    assert "0-3 " in out  # identical ranks share a row
    assert "critical path" in out and "COMP_NODE_mlp_FWD" in out


def test_bad_network_file_is_one_line_exit_2(cli, samples, tmp_path):
    bad = tmp_path / "n.toml"
    bad.write_text("[default]\nchunks = 0\n")
    done = cli("stats", samples / "chakra_data", "--network", bad)
    assert done.code == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"et-convert: error: {bad}:2: [default] chunks must be a whole number of at least 1, found 0")


def test_deadlock_is_an_error_not_a_traceback(monkeypatch, capsys):
    from converters import stats

    trace = trace_of({0: [coll(0, CollType.ALL_REDUCE, 10)], 1: [compute(0, 5)], 2: [recv(0, src=1, size=4)]})
    monkeypatch.setattr("converters.api.read", lambda *a, **k: trace)
    from converters.scheduler import Deadlock

    with pytest.raises(Deadlock, match="rank 0 waits in all ranks seq 0 ALL_REDUCE"):
        stats.run([], "auto", Options(), Diagnostics(), as_json=True)


def test_measured_timelines_are_summarised_too():
    from converters.stats import stats_of
    from converters.timeline import measured_timeline

    trace = trace_of({0: [compute(0, 100), coll(1, CollType.ALL_REDUCE, 10)]})
    trace.timing = "measured"
    trace.ranks[0].nodes[0].start_ns = 0
    trace.ranks[0].nodes[1].start_ns = 50
    trace.ranks[0].nodes[1].duration_ns = 100
    stats = stats_of(trace, measured_timeline(trace))
    assert stats["timing"] == "measured"
    assert stats["ranks"]["0"] == {"finish_ns": 150, "compute_ns": 100, "exposed_comm_ns": 50, "idle_ns": 0}


def test_deadlock_through_the_cli(cli, tmp_path):
    from converters.api import write

    trace = trace_of({0: [coll(0, CollType.ALL_REDUCE, 10, name="grad sync")], 1: [compute(0, 5)]})
    write(trace, tmp_path / "w", to="chakra", options=Options(force=True))  # the validator would refuse it
    done = cli("stats", tmp_path)
    assert done.code == 2
    assert done.stderr.strip().splitlines()[-1] == (
        'et-convert: error: deadlock · rank 0 waits in all ranks seq 0 ALL_REDUCE (node 0 "grad sync") '
        "for rank 1 · rank 1 finished without issuing it")


def test_headline_names_the_slowest_rank_in_one_unit():
    from converters.scheduler.summary import headline

    summary = {"iteration_time_ns": 14_980_000_000, "ranks": {
        "0": {"finish_ns": 14_980_000_000, "compute_ns": 7_080_000_000, "exposed_comm_ns": 850_000_000,
              "idle_ns": 7_050_000_000},
        "1": {"finish_ns": 14_000_000_000, "compute_ns": 14_000_000_000, "exposed_comm_ns": 0, "idle_ns": 0},
        "2": {"finish_ns": 14_980_000_000, "compute_ns": 1, "exposed_comm_ns": 0, "idle_ns": 14_979_999_999},
    }}
    assert headline(summary) == ("iteration 14.980 s (scheduled; slowest rank 0: compute 7.08 s, exposed comm "
                                 "0.85 s, idle 7.05 s); et-convert stats for more")
    small = {"iteration_time_ns": 900, "ranks": {"3": {"finish_ns": 900, "compute_ns": 600, "exposed_comm_ns": 300,
                                                       "idle_ns": 0}}}
    assert headline(small) == ("iteration 900 ns (scheduled; slowest rank 3: compute 600 ns, exposed comm "
                               "300 ns, idle 0 ns); et-convert stats for more")


def test_a_logged_receive_that_waited_counts_its_wait_as_idle(tmp_path):
    """Logged receives last from their call to their data's arrival; the wait (args wait_ns) is
    the pipeline bubble, idle as in the scheduler's summary, not exposed communication."""
    import converters as etc
    from converters.model import NodeKind
    from converters.stats import stats_of
    from helpers.megatron_synth import write_run

    trace = etc.read(write_run(tmp_path, stages=2, tp=1, microbatches=2))
    last = stats_of(trace, etc.schedule(trace))["ranks"]["1"]
    waits = sum(n.args.get("wait_ns", 0) for n in trace.ranks[1].nodes if n.kind == NodeKind.RECV)
    assert waits > 0
    assert last["idle_ns"] >= waits
    assert last["compute_ns"] + last["exposed_comm_ns"] + last["idle_ns"] == last["finish_ns"]


def test_a_chakra_set_written_from_logs_gives_the_logs_numbers(cli, samples, tmp_path):
    # Its first op starts at 0 µs, which protobuf leaves out: the set still reads back measured,
    # with the steps its sub-operations ran in and its receives' waits (not scheduled anew).
    logs = samples / "megatron_tp2_pp2_dp1"
    assert cli(logs, "--to", "chakra", "-q", "-o", tmp_path / "w").code == 0
    from_logs = orjson.loads(cli("stats", logs, "--json").stdout)
    from_set = orjson.loads(cli("stats", tmp_path, "--json").stdout)
    assert from_set["timing"] == from_logs["timing"] == "measured"
    assert from_set["iteration_time_ns"] == from_logs["iteration_time_ns"] == 194_620_000
    assert from_set["ranks"] == from_logs["ranks"]
    assert from_set["groups"] == from_logs["groups"]
    # the same collectives, but a Chakra set has no log lines to point at
    for slowest in from_logs["slowest_collectives"]:
        slowest["source"] = ""
    assert from_set["slowest_collectives"] == from_logs["slowest_collectives"]
    checked = cli("validate", tmp_path)
    assert checked.code == 0 and "0 errors, 0 warnings" in checked.stdout and "9 checks" in checked.stdout, checked.stdout


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_collective_numbers_follow_their_definitions_on_random_measured_runs(data):
    # members of one instance often start together: ties decide which rank is named
    from converters.stats import slowest_collectives, traffic_by_group
    from converters.timeline import measured_timeline

    world = data.draw(st.integers(2, 4))
    programs = {}
    for r in range(world):
        kinds = data.draw(st.lists(st.sampled_from([None, 1]), max_size=6))  # world or group 1 per collective
        programs[r] = [coll(i, CollType.ALL_REDUCE, data.draw(st.integers(1, 9)), group=g) for i, g in enumerate(kinds)]
        for node in programs[r]:
            node.start_ns, node.duration_ns = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
    trace = trace_of(programs)
    trace.add_group("tp", (0, 1))
    trace.timing = "measured"
    timeline = measured_timeline(trace)
    # the definitions, member by member: the k-th collective of a group on each rank is one instance
    instances: dict = {}
    for r, nodes in programs.items():
        for node in nodes:
            gid = node.group
            k = sum(1 for other in nodes[:nodes.index(node)] if other.group == gid)
            instances.setdefault((gid, k), []).append((r, node.start_ns, node.start_ns + node.duration_ns, node))
    label = {None: "world", 1: trace.groups[1].label}
    traffic: dict = {}
    for (gid, _), members in sorted(instances.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1])):
        row = traffic.setdefault(label[gid], {"instances": 0, "bytes": 0, "span_ns": 0})
        row["instances"] += 1
        row["bytes"] += members[0][3].size
        row["span_ns"] += max(m[2] for m in members) - min(m[1] for m in members)
    slowest = []
    for (gid, k), members in instances.items():
        if len(members) >= 2:
            first = min(members, key=lambda m: (m[1], m[0]))
            last = max(members, key=lambda m: (m[1], -m[0]))
            slowest.append({"group": label[gid], "seq": k, "name": last[3].name, "bytes": last[3].size,
                            "span_ns": max(m[2] for m in members) - first[1], "last_rank": last[0],
                            "wait_ns": last[1] - first[1], "source": ""})
    slowest.sort(key=lambda row: (-row["span_ns"], row["group"], row["seq"]))
    assert traffic_by_group(trace, timeline) == traffic
    assert list(traffic_by_group(trace, timeline)) == list(traffic)
    assert slowest_collectives(trace, timeline, limit=100) == slowest
    assert slowest_collectives(trace, timeline) == slowest[:5]
