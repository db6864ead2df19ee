"""The Megatron reader's fast sub-operation path (one split per list, kinds from a structure
cache, times as int64 columns) reads every list exactly as the general parser does, errors
included, and shares what repeats."""

from __future__ import annotations

import pickle
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import converters as etc
from converters.builders import megatron
from converters.diagnostics import Diagnostics, InputError
from converters.readers import megatron_log
from converters.readers.megatron_log import SubOps
from helpers.megatron_synth import chain, replace_in_op, write_run


def parse_or_error(line: str):
    try:
        return megatron_log.parse_line(line, "r.log", 7)
    except InputError as e:
        return f"error: {e}"


def general(line: str):
    """The line read with every fast path off."""
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(megatron_log, "_templated_record", lambda *args: None)
        patched.setattr(megatron_log, "_timed_sub_ops", lambda text: None)
        patched.setattr(megatron_log, "_plain_string_list", lambda text: None)
        patched.setattr(megatron_log, "_plain_fields", lambda body: None)
        patched.setattr(megatron_log, "_plain_ms", lambda text: None)
        patched.setattr(megatron_log, "_LINE_HEAD", re.compile("(?!)"))  # every line split by _LINE
        return parse_or_error(line)


def step(*items: str) -> str:
    listed = "[" + ", ".join(f"'{item}'" for item in items) + "]"
    return f"rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations={listed})"


TP = "trace_src_func=allreduce,duration={d},timestamp={t},input__shape=[4, 8],input__dtype=torch.float32,func_name=linear_fwd,group=tp,comm_func=allreduce"
EXP = "duration={d},timestamp={t},input__shape=[2, 8],input__dtype=torch.bfloat16,group=exp,comm_func=all_to_all"

LINES = [
    step(TP.format(d="0.3", t="1.5"), TP.format(d="0.25", t="2"), EXP.format(d="0", t="3.125")),  # kinds differ
    step(TP.format(d="0.3", t="1.5"), EXP.format(d="1", t="2.000001"), TP.format(d="0.3", t="2.5")),
    step(TP.format(d="0.3", t="1.5"), TP.format(d="0.3", t="1.5").replace("timestamp=1.5,", "")),  # one has no timestamp
    step(TP.format(d="0.3", t="1.5"), TP.format(d="0.3", t="1.5").replace("duration=0.3,", "")),  # one has no duration
    step("timestamp=1.5,duration=0.3,group=tp"),  # the times the other way round
    step("duration=0.3,timestamp=1.5"),  # nothing but times
    step("duration=0.3,timestamp=1.5,group=tp,zeta=[1, 2]"),  # an unknown key: kept in extras
    step("duration=0.3,timestamp=1.5,group=tp,timestamp=2"),  # a second timestamp
    step("group=tp,duration=0.3,timestamp=1.5,duration=2"),
    step("duration=0.3,timestamp=1.5,group=tp,note=x duration=1"),
    step("duration=0.3,timestamp=1.1234567,group=tp"),  # 7 decimals: the general parser rounds
    step("duration=0.3,timestamp=1.,group=tp"),
    step("duration=0.3,timestamp=12345678901234,group=tp"),  # 14 digits
    step("duration=0.3,timestamp=9223372036854,group=tp"),  # the largest that fits
    step("duration=0.3,timestamp=9223372036854.9,group=tp"),  # too large
    step("duration=9999999999999,timestamp=1,group=tp"),  # too large, and beyond int64 in ns
    step("duration=-1,timestamp=1,group=tp"),
    step("duration=abc,timestamp=1,group=tp"),
    step("duration=0.3,timestamp=1,input__shape=[4, x]"),  # a bad shape: the general parser's error
    step("duration=0.3,timestamp=1,group=tp", "duration=0.3,timestamp=1,input__shape=[4, x]"),
    step("duration=0.3,timestamp=1,input__shape=[4, 8]", "duration=0.3,timestamp=2,input__shape=[4, 8]"),
    step("x=[duration=0.3,timestamp=1],duration=0.2,timestamp=2"),  # times inside brackets are not fields
    step("duration=0.3,timestamp=1,d=a]b"),
    step("d=it''s,duration=0.3,timestamp=1"),
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=['duration=0.3,timestamp=1','duration=0.3,timestamp=2'])",
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=['duration=0.3,timestamp=1',  'duration=0.3,timestamp=2'])",
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=['duration=0.3,timestamp=1\\\\', 'x'])",
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=['duration=0.3,timestamp=1' , 'duration=0.3,timestamp=2'])",
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=[\"duration=0.3,timestamp=1\"])",
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=['duration=0.3,timestamp=1duration=0.3,timestamp=2'])",
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=['duration=0.3,timestamp=1', ''])",
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=['duration=0.3,timestamp=1'] )",
    "rank:0:forward_step(stage_id=0,duration=9,timestamp=10,sub_operations=['duration=0.3,timestamp=1'])",  # no batch_id
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=['duration=0.3,timestamp=1']",  # cut off
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=9,description=a, b,timestamp=10,sub_operations=['duration=0.3,timestamp=1'])",
    # times the split takes but only the general parser reads (or reads to the same value)
    step("duration=0.3,timestamp=00000000000001.5,group=tp"),  # 14 digits, leading zeros
    step("duration=0.3,timestamp=99999999999999999999,group=tp"),
    step("duration=1.,timestamp=2,group=tp"),
    step("duration=.5,timestamp=2,group=tp"),
    step("duration=1..5,timestamp=2,group=tp"),
    step("duration=0.1234567,timestamp=2,group=tp"),
    step("duration=00000000000000.5,timestamp=2,group=tp"),
    step("duration=0.3,timestamp=1.5,group=tp", "duration=0.3,timestamp=2.,group=tp"),
    step("duration=0.3,timestamp=1.,group=tp", "duration=0.3,timestamp=2.5,group=tp"),
    step("duration=0.3,timestamp=1.5.5,group=tp"),
    # around the line: spaces, a line break, a second list marker (the fast path cuts at the first, the general at the last)
    "  " + step("duration=0.3,timestamp=1,group=tp"),
    step("duration=0.3,timestamp=1,group=tp") + " \t",
    step("duration=0.3,timestamp=1,group=tp") + "\n",
    step("duration=0.3,timestamp=1,group=tp").replace("group=tp", "group=t\np"),
    step("duration=0.3,timestamp=1,group=tp") + ")",
    step("duration=0.3,timestamp=1,note=x,sub_operations=[1]"),
    step("duration=0.3,timestamp=1,group=tp", "duration=0.3,timestamp=2,sub_operations=['duration=0.3,timestamp=1'"),
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=[],sub_operations=['duration=0.3,timestamp=1'])",
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=['duration=0.3,timestamp=1'],sub_operations=[])",
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=['duration=0.3,timestamp=1'],"
    "sub_operations=['duration=0.3,timestamp=2'])",
]


@pytest.mark.parametrize("line", LINES)
def test_fast_path_reads_as_the_general_parser(line):
    assert parse_or_error(line) == general(line)


def test_errors_name_the_file_line_and_item():
    line = step(TP.format(d="0.3", t="1.5"), TP.format(d="0.3", t="1.5").replace("timestamp=1.5,", ""))
    assert parse_or_error(line).startswith("error: r.log:7: sub_operations[1]: missing timestamp= (found ")
    assert parse_or_error(step("duration=0.3,timestamp=9223372036854.9")) == (
        "error: r.log:7: sub_operations[0] timestamp: 9223372036854.9 ms is too large (at most 9223372036854 ms)")


def test_repeated_lists_share_their_kinds_and_keep_their_own_times():
    first = megatron_log.parse_line(step(TP.format(d="0.3", t="1.5"), EXP.format(d="0.25", t="2")), "r.log", 1)
    second = megatron_log.parse_line(step(TP.format(d="0.5", t="7"), EXP.format(d="0.125", t="8.000001")), "r.log", 2)
    assert second.sub_ops.kinds is first.sub_ops.kinds
    assert [(s.name, s.group, s.duration_ns, s.stamp_ns) for s in second.sub_ops] == [
        ("linear_fwd", "tp", 500_000, 7_000_000), ("all_to_all", "exp", 125_000, 8_000_001)]
    assert second.sub_ops[1].shape == (2, 8) and second.sub_ops[1].dtype == "torch.bfloat16"


def test_kinds_pickle_with_a_fresh_hash():
    kind = megatron_log.parse_line(step(TP.format(d="0.3", t="1.5")), "r.log", 1).sub_ops.kinds[0]
    again = pickle.loads(pickle.dumps(kind))
    assert again == kind and hash(again) == hash(kind) and {again: 1}[kind] == 1
    subs = pickle.loads(pickle.dumps(SubOps((kind,), *[megatron_log.array("q", [5])] * 2)))
    assert list(subs) == [kind.with_times(5, 5)]


FIELDS = st.sampled_from([
    "group=tp", "group=exp", "comm_func=allreduce", "comm_func=all_to_all", "func_name=linear_fwd",
    "trace_src_func=allreduce", "input__shape=[4, 8]", "input__shape=None", "input__dtype=torch.float16",
    "input__shape=[4, 8", "zeta=1", "duration=2", "timestamp=3", "note=a b", "input__dtype=None",
])
TIME = st.one_of(
    st.from_regex(r"[0-9]{1,14}(\.[0-9]{0,7})?", fullmatch=True),
    st.sampled_from(["0", "1.5", "-1", "1e3", "", " 2"]),
)


@st.composite
def items(draw):
    before = draw(st.lists(FIELDS, max_size=3))
    after = draw(st.lists(FIELDS, max_size=3))
    times = [f"duration={draw(TIME)}", f"timestamp={draw(TIME)}"]
    if draw(st.booleans()):
        times.reverse()
    return ",".join(before + times + after)


@settings(max_examples=300, deadline=None)
@given(st.lists(items(), max_size=4))
def test_any_list_reads_as_the_general_parser(listed):
    line = step(*listed)
    assert parse_or_error(line) == general(line)


@settings(max_examples=300, deadline=None)
@given(st.lists(items(), max_size=4))
def test_any_list_read_knows_its_bounds(listed):
    """SubOps.bounds (earliest stamp, latest stamp, longest duration) as the columns give them."""
    record = parse_or_error(step(*listed))
    if not isinstance(record, str):
        subs = record.sub_ops
        expected = (min(subs.stamps), max(subs.stamps), max(subs.durations)) if subs else None
        assert subs.bounds == expected


def test_lists_the_general_parser_reads_share_their_kinds_too():
    line = 'rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=["duration=0.3,timestamp={t},group=tp"])'
    first = megatron_log.parse_line(line.format(t=1), "r.log", 1)
    second = megatron_log.parse_line(line.format(t=2), "r.log", 2)
    assert second.sub_ops.kinds is first.sub_ops.kinds  # so the builder makes their nodes from one plan
    assert [s.stamp_ns for s in (*first.sub_ops, *second.sub_ops)] == [1_000_000, 2_000_000]


# ---------------------------------------------------------------- the builder's plans

def build(paths, **options):
    diagnostics = Diagnostics()
    trace = etc.read(paths, "megatron-log", diagnostics=diagnostics, **options)
    return trace, diagnostics.messages()


def test_nodes_from_plans_are_the_nodes_made_one_by_one(tmp_path, monkeypatch):
    """Sub-operations built from a repeated sequence's plan equal those described one by one,
    warnings (unknown dtype, unknown group, outside the step) and their counts included."""
    edit = chain(replace_in_op(1, "forward_step", 1, "group=tp", "group=odd"),
                 replace_in_op(2, "backward_step", None, "input__dtype=torch.float32", "input__dtype=torch.weird"))
    paths = write_run(tmp_path, stages=2, tp=2, microbatches=4, edit=edit)
    lines = paths[3].read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if ":forward_step(" in line)  # its sequence has a plan by then
    lines[last] = lines[last].replace("allreduce,duration=0.3,", "allreduce,duration=90.3,", 2)  # starts before its step
    paths[3].write_text("\n".join(lines) + "\n")
    planned, planned_messages = build(paths, tp=2)

    def one_by_one(self, parent, record, deps):
        if record.sub_ops:
            self._add_sub_ops_one_by_one(parent, record, deps, ("never", "used"))

    monkeypatch.setattr(megatron._RankBuilder, "_add_sub_ops", one_by_one)
    described, described_messages = build(paths, tp=2)
    assert planned_messages == described_messages
    assert any("unknown group 'odd'" in m for m in planned_messages)
    assert any("unknown dtype torch.weird" in m for m in planned_messages)
    assert any("lie outside their step" in m for m in planned_messages)
    assert planned.groups == described.groups
    for r in planned.ranks:
        assert planned.ranks[r].nodes == described.ranks[r].nodes


@pytest.mark.parametrize("text", ["3", " 3 ", "-2", "x", "3.0", "", " ", "٣"])
def test_cached_ints_read_and_fail_as_before(text):
    """parse_int's cache returns what the uncached check did, and the same error each time."""
    import re
    for _ in range(2):
        value = text.strip()
        if re.fullmatch(r"-?\d+", value):
            assert megatron_log.parse_int(text, "batch_id", "r.log:7") == int(value)
        else:
            with pytest.raises(InputError, match=r"r.log:7: batch_id: expected an integer, found "):
                megatron_log.parse_int(text, "batch_id", "r.log:7")


def test_cached_values_are_interned_or_none():
    assert megatron_log._none(" None ") is None and megatron_log._none(None) is None
    assert megatron_log._none(" pp") == "pp" and megatron_log._none("pp ") is megatron_log._none("pp")


HEAD_FIELDS = st.sampled_from([
    "stage_id=1", "stage_id=x", "batch_id=2", "batch_id= 3", "batch_id=[4]", "mg_state=warmup", "mg_state=None",
    "duration=0.5", "duration=1e3", "duration= 2", "duration=", "duration=-1", "timestamp=10.25", "timestamp=7",
    "timestamp=99999999999999", "description=a b", "description=x,y", "description=duration=3", "group_kind=pp",
    "input__shape=[2, 3]", "input__shape=[2, x]", "input__shape=None", "input__dtype=torch.float32", "zeta=1",
    "xbatch_id=5", "note='q'",
])


@settings(max_examples=400, deadline=None)
@given(st.lists(HEAD_FIELDS, max_size=9), st.sampled_from(["[]", "['duration=0.3,timestamp=1.5,group=tp']",
                                                           "['duration=0.3,timestamp=1,group=tp'] ", "['x']"]))
def test_any_head_reads_as_the_general_parser(fields, listed):
    """The op head's template path reads any head (keys in any order, repeated, missing, odd
    values) as the general parser does, errors included."""
    line = f"rank:3:forward_step({','.join([*fields, 'sub_operations=' + listed])})"
    assert parse_or_error(line) == general(line)


def test_templated_heads_read_as_the_general_parser():
    """The standard heads (every key, the tracer's order) go through the template path."""
    head = ("stage_id=2,batch_id={b},mg_state=steady,duration={d},description=None,group_kind=pp,"
            "input__shape=[512, 1, 1024],input__dtype=torch.float32,timestamp={t}")
    for b, d, t in [(0, "0.4", "1000026.1"), (17, "12.0", "1000100"), (3, "0", "5.123456")]:
        line = f"rank:5:send_forward({head.format(b=b, d=d, t=t)},sub_operations=[])"
        assert megatron_log._templated_record(*megatron_log._LINE.match(line).groups(), "r.log", 7) is not None
        assert parse_or_error(line) == general(line)
