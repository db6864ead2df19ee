"""The Megatron survey's shortcuts (a step's sub-operations judged by their earliest and latest
stamp and longest duration, counted one by one only when those bounds reach outside the step)
give what counting every sub-operation gives: the file's reading, its reason, each rank's
earliest start. A file surveyed in shares (workers sharing one log) is the file surveyed whole."""

from __future__ import annotations

import operator
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from converters import model
from converters.builders import megatron
from converters.builders.megatron import STAMP_TOLERANCE_NS
from converters.diagnostics import Diagnostics
from converters.readers.megatron_log import NO_EXTRAS, NO_SUB_OPS, OpRecord, SubOpKind, SubOps

KIND = SubOpKind((4, 8), "torch.float32", "tp", "allreduce", "linear_fwd", "allreduce", NO_EXTRAS)


def counted_reading(records: list[OpRecord]) -> tuple[str, str]:
    """The file's reading as it was first counted: every sub-operation of every step counted under both readings
    (the verdict from the counts is the builder's own)."""
    total = as_end = as_start = 0
    for record in records:
        subs = record.sub_ops
        if not subs:
            continue
        low, high = record.start_ns - STAMP_TOLERANCE_NS, record.end_ns + STAMP_TOLERANCE_NS
        total += len(subs)
        for stamp, duration in zip(subs.stamps, subs.durations):
            as_end += stamp - duration < low or stamp > high
            as_start += stamp < low or stamp + duration > high
    return megatron.reading_of_counts(total, as_end, as_start)


def counted_earliest(records: list[OpRecord], reading: str) -> dict[int, int]:
    earliest: dict[int, int] = {}
    for record in records:
        starts = [record.start_ns]
        if reading == "end":
            starts += map(operator.sub, record.sub_ops.stamps, record.sub_ops.durations)
        else:
            starts += record.sub_ops.stamps
        earliest[record.rank] = min(earliest.get(record.rank, starts[0]), *starts)
    return earliest


TIMES = st.integers(0, 200_000)


@st.composite
def steps(draw):
    """Records of two ranks whose sub-operations lie inside, near or outside their step."""
    records = []
    for line in range(draw(st.integers(1, 8))):
        start, duration = draw(TIMES), draw(st.integers(0, 100_000))
        stage = draw(st.sampled_from((0, 0, 1)))  # a rank's stage may change: the file's problem
        description = draw(st.sampled_from((None, None, "simulation")))
        subs = draw(st.lists(st.tuples(st.integers(start - 30_000, start + duration + 30_000), st.integers(0, 40_000)),
                             max_size=6))
        sub_ops = SubOps((KIND,) * len(subs), array("q", [d for _, d in subs]), array("q", [s for s, _ in subs])) \
            if subs else NO_SUB_OPS
        records.append(OpRecord(line % 3, "forward_step", stage, line, None, duration, start + duration, description,
                                None, None, None, sub_ops, "r.log", line + 1))
    return records


@settings(max_examples=400, deadline=None)
@given(steps())
def test_the_survey_counts_as_every_sub_operation_counted(records):
    survey = megatron.survey_records("r.log", "r.log", records, Diagnostics())
    assert survey.reading == counted_reading(records)
    earliest = counted_earliest(records, survey.reading[0])
    assert {rank: rank_survey.earliest_ns(survey.reading[0]) for rank, rank_survey in survey.ranks.items()} == earliest


@settings(max_examples=300, deadline=None)
@given(steps(), st.integers(1, 3))
def test_a_file_surveyed_in_shares_is_the_file_surveyed_whole(records, n):
    # each of n workers surveys the ranks r with r % n == k; the plan makes them one
    whole = megatron.survey_records("r.log", "r.log", records, Diagnostics())
    shares = []
    for k in range(n):
        share = megatron.survey_records("r.log", "r.log", [r for r in records if r.rank % n == k], Diagnostics())
        share.share = (k, n)
        shares.append(share)
    [joined] = megatron.whole_files(shares)
    assert joined.counts == whole.counts and joined.reading == whole.reading
    assert list(joined.ranks) == list(whole.ranks)  # in the order of their first lines
    for reading in ("end", "start"):
        assert ({r: rank.earliest_ns(reading) for r, rank in joined.ranks.items()}
                == {r: rank.earliest_ns(reading) for r, rank in whole.ranks.items()})
    assert joined.simulation == whole.simulation
    assert str(joined.problem) == str(whole.problem)


# ---------------------------------------------------------------- the sub-operations' shared empty ctrl_deps

def test_sub_operations_share_one_read_only_empty_ctrl_deps(tmp_path):
    import copy
    import pickle

    import pytest

    import converters as etc
    from helpers.megatron_synth import write_run

    trace = etc.read(write_run(tmp_path, stages=2, tp=2, microbatches=2), "megatron-log", tp=2)
    subs = [node for rank in trace.ranks.values() for node in rank.nodes if node.parent is not None]
    assert subs and all(node.ctrl_deps is model.NO_CTRL_DEPS for node in subs)
    assert model.NO_CTRL_DEPS == [] and subs[0].deps + subs[0].ctrl_deps == subs[0].deps
    for change in (lambda deps: deps.append(1), lambda deps: deps.extend([1]), lambda deps: deps.insert(0, 1)):
        with pytest.raises(TypeError):
            change(subs[0].ctrl_deps)
    with pytest.raises(TypeError):
        subs[0].ctrl_deps += [1]
    assert model.NO_CTRL_DEPS == []
    assert pickle.loads(pickle.dumps(subs[0])).ctrl_deps is model.NO_CTRL_DEPS
    assert copy.deepcopy(subs[0]).ctrl_deps is model.NO_CTRL_DEPS


# ---------------------------------------------------------------- planned steps judged by their bounds

def test_planned_steps_inside_or_outside_make_the_nodes_made_one_by_one(tmp_path, monkeypatch):
    """A planned sequence's nodes (made without a check per node when SubOps.bounds fit inside the
    step) equal those described one by one, under both readings, with steps reaching outside."""
    import pytest

    import converters as etc
    from helpers.megatron_synth import write_run

    def build(paths):
        diagnostics = Diagnostics()
        return etc.read(paths, "megatron-log", diagnostics=diagnostics, tp=2), diagnostics.messages()

    def one_by_one(self, parent, record, deps):
        if record.sub_ops:
            self._add_sub_ops_one_by_one(parent, record, deps, ("never", "used"))

    for stamp in ("end", "start"):
        paths = write_run(tmp_path / stamp, stages=2, tp=2, microbatches=4, subop_stamp=stamp)
        lines = paths[1].read_text().splitlines()
        steps = [i for i, line in enumerate(lines) if ":forward_step(" in line]
        lines[steps[-1]] = lines[steps[-1]].replace(",duration=0.", ",duration=40.", 1)  # one step reaches outside
        lines[steps[-2]] = lines[steps[-2]].replace(",duration=0.", ",duration=0.0", 1)  # a tighter one still inside
        paths[1].write_text("\n".join(lines) + "\n")
        planned, planned_messages = build(paths)
        with pytest.MonkeyPatch.context() as patched:
            patched.setattr(megatron._RankBuilder, "_add_sub_ops", one_by_one)
            described, described_messages = build(paths)
        assert set(planned.metadata["subop_timestamps"].values()) == {stamp}
        assert planned_messages == described_messages
        assert any("lie outside their step" in m for m in planned_messages)
        for r in planned.ranks:
            assert planned.ranks[r].nodes == described.ranks[r].nodes


def test_a_record_with_other_sub_operations_is_what_replace_makes():
    from dataclasses import fields, replace

    record = OpRecord(3, "forward_step", 1, 2, "steady", 5, 9, "d", "pp", (2, 3), "torch.float16", NO_SUB_OPS, "r.log", 4,
                      {"zeta": "1"}, "9", "5")
    subs = SubOps((KIND,), array("q", [1]), array("q", [8]))
    made, expected = record.with_sub_ops(subs), replace(record, sub_ops=subs)
    assert made == expected and [getattr(made, f.name) for f in fields(OpRecord)] == [
        getattr(expected, f.name) for f in fields(OpRecord)]
    assert len({getattr(record, f.name) is not None for f in fields(OpRecord)}) == 1  # every field set, so all are compared


def test_the_reading_and_its_reason_from_the_counts():
    assert megatron.reading_of_counts(0, 0, 0) == ("end", "no sub-operations")
    assert megatron.reading_of_counts(10, 1, 3) == (
        "end", "read as start times, 3 of 10 sub-operations would end outside their step")
    assert megatron.reading_of_counts(10, 4, 2) == (
        "start", "read as end times, 4 of 10 sub-operations would start outside their step")
    assert megatron.reading_of_counts(7, 2, 2) == (
        "end", "both readings fit all 7 sub-operations; end times assumed (the tracer's usual stamp)")
