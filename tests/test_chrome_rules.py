"""The Perfetto import rules checker finds each kind of broken Chrome trace."""

from __future__ import annotations

import copy
import gzip

import orjson
import pytest

from converters.validate.chrome_rules import check_chrome_bytes, check_chrome_trace


def good() -> dict:
    return {
        "traceEvents": [
            {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "rank 0"}},
            {"ph": "M", "pid": 1, "tid": 1001, "name": "thread_name", "args": {"name": "compute"}},
            {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "rank 1"}},
            {"ph": "M", "pid": 2, "tid": 2001, "name": "thread_name", "args": {"name": "compute"}},
            {"ph": "X", "pid": 1, "tid": 1001, "ts": 0, "dur": 10, "name": "a", "args": {"bytes": 4}},
            {"ph": "X", "pid": 1, "tid": 1001, "ts": 2, "dur": 8, "name": "b", "bind_id": 1, "flow_out": True},
            {"ph": "X", "pid": 1, "tid": 1001, "ts": 10, "dur": 1, "name": "c"},
            {"ph": "X", "pid": 2, "tid": 2001, "ts": 3, "dur": 1, "name": "d", "bind_id": 1, "flow_in": True},
        ],
        "displayTimeUnit": "ms",
    }


def findings_after(change) -> list[str]:
    obj = copy.deepcopy(good())
    change(obj["traceEvents"])
    return check_chrome_trace(obj)


def test_good_trace_is_clean():
    assert check_chrome_trace(good()) == []
    assert check_chrome_trace(good()["traceEvents"]) == []  # array form


@pytest.mark.parametrize(
    "change, rule, words",
    [
        (lambda ev: ev[4].update(pid=0), "pid", "pid must be an integer >= 1"),
        (lambda ev: ev[4].update(tid=0), "tid", "tid 0"),
        (lambda ev: ev[4].update(tid=1), "tid", "tid equals pid"),
        (lambda ev: ev.pop(1), "names", "no thread_name"),
        (lambda ev: ev.pop(0), "names", "no process_name"),
        (lambda ev: ev[1]["args"].update(name=""), "names", "non-empty args.name"),
        (lambda ev: ev[6].update(ts=9, dur=3), "nesting", "overlaps"),
        (lambda ev: ev[6].update(dur=-1), "dur", "negative dur"),
        (lambda ev: ev[6].pop("dur"), "dur", "without a finite dur"),
        (lambda ev: ev.pop(7), "flow", "1 start(s) and 0 end(s)"),
        (lambda ev: ev[6].update(bind_id=1, flow_out=True), "flow", "2 start(s)"),
        (lambda ev: ev[7].update(ts=1), "flow", "starts before the flow's start"),
        (lambda ev: ev[7].pop("flow_in"), "flow", "without flow_in or flow_out"),
        (lambda ev: [e.update(bind_id=2**53) for e in ev[5:8:2]], "flow", "not an integer in [1, 2^53)"),
        (lambda ev: ev[4]["args"].update(x=None), "args", "is null"),
        (lambda ev: ev[4]["args"].update(x={"y": 1}), "args", "nested"),
        (lambda ev: ev[4]["args"].update(x=float("nan")), "json", "NaN"),
    ],
)
def test_each_rule_finds_its_problem(change, rule, words):
    found = findings_after(change)
    assert any(f.startswith(f"{rule}: ") and words in f for f in found), found


def test_flow_chain_with_steps_is_valid():
    obj = good()
    obj["traceEvents"].append({"ph": "X", "pid": 2, "tid": 2001, "ts": 5, "dur": 1, "name": "e", "bind_id": 1,
                               "flow_in": True, "flow_out": True})
    # the middle link starts after the end; that is fine: Perfetto orders the chain by time
    assert check_chrome_trace(obj) == []


def test_v1_flows_need_one_start_and_one_end():
    obj = good()
    obj["traceEvents"].append({"ph": "s", "pid": 1, "tid": 1001, "ts": 1, "cat": "c", "name": "n", "id": 5})
    assert any("v1 flow id 5" in f for f in check_chrome_trace(obj))
    obj["traceEvents"].append({"ph": "f", "bp": "e", "pid": 2, "tid": 2001, "ts": 3, "cat": "c", "name": "n", "id": 5})
    assert check_chrome_trace(obj) == []


def test_bytes_must_be_strict_json_and_may_be_gzip():
    assert check_chrome_bytes(orjson.dumps(good())) == []
    assert check_chrome_bytes(gzip.compress(orjson.dumps(good()))) == []
    text = orjson.dumps(good()).replace(b'"bytes":4', b'"bytes":NaN')
    (finding,) = check_chrome_bytes(text)
    assert finding.startswith("json: not strict JSON")


def test_findings_are_capped_per_rule():
    obj = good()
    obj["traceEvents"] += [{"ph": "X", "pid": 1, "tid": 0, "ts": 20 + i, "dur": 0, "name": "z"} for i in range(30)]
    found = [f for f in check_chrome_trace(obj, max_per_rule=5) if f.startswith("tid: ")]
    assert len(found) == 6
    assert found[-1] == "tid: ... and 25 more"
