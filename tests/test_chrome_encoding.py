"""The Chrome JSON writer's fast printer: the same bytes as printing each event dict with orjson."""

from __future__ import annotations

import io

import orjson
from hypothesis import given, settings

from converters.diagnostics import Diagnostics
from converters.model import CollType, ExecutionTrace, Node, NodeKind, Rank
from converters.options import Options
from converters.timeline import Timeline
from converters.writers import chrome
from converters.writers.layout_chrome import FLOW_IN, FLOW_OUT, plan_trace
from test_chrome import big_trace, small_trace
from test_perfetto import random_trace


def shared_trace(tp: int = 2, dp: int = 2, pp: int = 2, per_rank: int = 12) -> tuple[ExecutionTrace, Timeline]:
    """A scheduled-style trace as the builders make it: one node list and one pair of time
    lists per stage, shared by the stage's ranks, which differ only in their groups.

    Stage p starts at p * 1010 ns, where stage 0's second op ends and its third begins: the
    stages have events at equal times (the .pftrace writer interleaves them by time).
    """
    trace = ExecutionTrace()
    trace.timing = "scheduled"
    stages: dict[int, tuple] = {}
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for r in range(tp * dp * pp):
        t, d, p = r % tp, (r // tp) % dp, r // (tp * dp)
        tp_group = trace.add_group("tp", [r - t + i for i in range(tp)])
        dp_group = trace.add_group("dp", [t + tp * (i + dp * p) for i in range(dp)])
        if p not in stages:
            nodes, s, e, now = [], [], [], p * 1010
            for i in range(per_rank):
                if i % 3 == 0:
                    node = Node(i, f"layer{i} fwd", NodeKind.COMPUTE, duration_ns=700, microbatch=i // 6)
                elif i % 3 == 1:
                    node = Node(i, "", NodeKind.COLLECTIVE, duration_ns=300, coll=CollType.ALL_GATHER,
                                size=64 << 20, group=tp_group.id)
                else:
                    node = Node(i, "grads", NodeKind.COLLECTIVE, duration_ns=1001, coll=CollType.ALL_REDUCE,
                                size=1 << 20, group=dp_group.id)
                nodes.append(node)
                s.append(now)
                e.append(now + node.duration_ns)
                now += node.duration_ns + (0 if i % 4 else 10)
            stages[p] = (nodes, tp_group.id, dp_group.id, s, e, r)
        nodes, tp0, dp0, s, e, first = stages[p]
        group_map = None if r == first else {tp0: tp_group.id, dp0: dp_group.id}
        trace.ranks[r] = Rank(r, nodes=nodes, coords={"tp": t, "dp": d, "pp": p}, group_map=group_map)
        starts[r], ends[r] = s, e
    return trace, Timeline(starts, ends, "scheduled")


def reference_json(plan) -> bytes:
    """The plan printed the plain way: a dict per event, one orjson call for the whole trace."""
    events = chrome.metadata_events(plan)
    for process in plan.processes:
        for sl in process.slices():
            event = {"ph": "X", "pid": process.pid, "tid": sl.tid, "ts": sl.start / 1000,
                     "dur": chrome.dur_us(sl.end - sl.start), "name": sl.name, "args": sl.args}
            if sl.flow_dir:
                event["bind_id"] = sl.flow
                if sl.flow_dir != FLOW_IN:
                    event["flow_out"] = True
                if sl.flow_dir != FLOW_OUT:
                    event["flow_in"] = True
            events.append(event)
    document = {"traceEvents": events, "displayTimeUnit": "ms"}
    return orjson.dumps(document)[:-1] + b',"metadata":' + orjson.dumps(plan.metadata, option=orjson.OPT_NON_STR_KEYS) + b"}\n"


def printed(plan) -> bytes:
    out = io.BytesIO()
    chrome.write_plan(plan, out)
    return out.getvalue()


def test_same_bytes_as_plain_printing():
    for trace in (small_trace(), big_trace()):
        plan = plan_trace(trace, Options(ranks="all"), Diagnostics())
        assert printed(plan) == reference_json(plan)


def test_shared_layouts_print_each_rank_with_its_own_pid_args_and_flows():
    trace, timeline = shared_trace()
    plan = plan_trace(trace, Options(ranks="all"), Diagnostics(), timeline)
    # the ranks of a stage share one layout (encoded once), yet every rank keeps its own args and flows
    layouts = {p.rank: id(p.layout) for p in plan.processes}
    assert len(set(layouts.values())) == 2 and layouts[0] == layouts[3] != layouts[4]
    assert plan.processes[0].slice_args[1]["group"] != plan.processes[2].slice_args[1]["group"]
    assert plan.flow_count > 0
    data = printed(plan)
    assert data == reference_json(plan)
    x = [e for e in orjson.loads(data)["traceEvents"] if e["ph"] == "X"]
    assert len(x) == 8 * 12
    assert {e["tid"] // 1000 for e in x} == {e["pid"] for e in x} == set(range(1, 9))
    assert sum(1 for e in x if "bind_id" in e) == sum(len(p.flows) for p in plan.processes) > 0


def test_large_args_are_not_kept_beyond_the_cache_limit(monkeypatch):
    monkeypatch.setattr(chrome, "ARGS_CACHE_BYTES", 100)  # start over almost every rank
    trace, timeline = shared_trace()
    plan = plan_trace(trace, Options(ranks="all"), Diagnostics(), timeline)
    assert printed(plan) == reference_json(plan)


@settings(max_examples=40, deadline=None)
@given(random_trace())
def test_random_traces_print_as_plain_printing(trace):
    plan = plan_trace(trace, Options(ranks="all"), Diagnostics())
    assert printed(plan) == reference_json(plan)
