"""Args printed from shapes and own-field columns (`Process.arg_rows`) equal args printed from dicts.

Both writers take the rows path for a rank with a node list of its own (every rank of a log)
and the dict path otherwise; with rows turned off they must write the same bytes.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.api import read
from converters.diagnostics import Diagnostics
from converters.model import CollType, DisplaySpan, ExecutionTrace, Node, NodeKind, Rank
from converters.options import Options
from converters.writers import chrome, perfetto
from converters.writers.layout_chrome import OWN_FIELDS, args_key, plan_trace
from test_chrome import small_trace

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def written(trace, writer, rows: bool, timeline=None) -> bytes:
    plan = plan_trace(trace, Options(ranks="all"), Diagnostics(), timeline)
    if not rows:
        for process in plan.processes:
            process.make_rows = None
    out = io.BytesIO()
    writer.write_plan(plan, out)
    return out.getvalue()


def assert_rows_change_nothing(trace, timeline=None) -> None:
    plan = plan_trace(trace, Options(ranks="all"), Diagnostics(), timeline)
    for process in plan.processes:
        rows = process.arg_rows()
        if rows is not None:
            from_rows = [shape.args(values) for shape, values in zip(rows.shapes, zip(*rows.columns))]
            assert [list(a.items()) for a in from_rows] == [list(a.items()) for a in process.slice_args]
            assert [list(map(type, a.values())) for a in from_rows] == [list(map(type, a.values())) for a in process.slice_args]
    for writer in (chrome, perfetto):
        assert written(trace, writer, True, timeline) == written(trace, writer, False, timeline)


def test_rows_are_used_for_ranks_with_their_own_nodes():
    plan = plan_trace(small_trace(), Options(ranks="all"), Diagnostics())
    assert all(process.arg_rows() is not None for process in plan.processes)


def test_small_trace():
    assert_rows_change_nothing(small_trace())


@pytest.mark.parametrize("sample", ["megatron_rank4_pp_tp2.log", "megatron_tp1_pp2_dp2", "megatron_rank2_moe_scaling.log",
                                    "pytorch_gloo_4rank", "optimusprime_llama1b_pp8.log"])
def test_samples(sample):
    assert_rows_change_nothing(read(SAMPLES / sample, diagnostics=Diagnostics()))


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True), st.sampled_from(["a", "%", "%b", 'q"', ""]),
                   st.lists(st.integers(0, 3), max_size=2), st.sampled_from([0.0, -0.0, 1.0, 1 << 70, (1, 2), [1, 2]]))
KEYS = st.sampled_from(["stage", "node", "op", "bytes", "tag", "source", "group", "peer", "x%", "wait_ns", "iteration",
                        "microbatch", "sequence", "launched_node", 7])


@st.composite
def odd_trace(draw):
    """Ranks whose nodes share some args dicts, with keys and values of every kind (and keys of the nodes' own fields)."""
    trace = ExecutionTrace()
    trace.timing = "measured"
    ranks = draw(st.integers(1, 3))
    group = trace.add_group("tp", list(range(ranks)))
    shared = [draw(st.dictionaries(KEYS, VALUES, max_size=4)) for _ in range(3)]
    for r in range(ranks):
        # equal args in distinct dicts, as ranks read apart have: shapes made for one rank serve the others
        own = [dict(args) for args in shared]
        nodes = []
        for i in range(draw(st.integers(0, 10))):
            kind = draw(st.sampled_from([NodeKind.COMPUTE, NodeKind.COLLECTIVE, NodeKind.SEND, NodeKind.RECV]))
            node = Node(i + 1, draw(st.sampled_from(["op", "", "a%b"])), kind, duration_ns=draw(st.integers(0, 900)),
                        start_ns=draw(st.integers(0, 4000)), size=draw(st.sampled_from([0, 4, 1 << 20])),
                        microbatch=draw(st.one_of(st.none(), st.integers(0, 2), st.booleans())),
                        source=draw(st.sampled_from([None, "", "f.log:1", 'q"%.log:2'])),
                        args=draw(st.sampled_from(shared + own)))
            if kind == NodeKind.COLLECTIVE:
                node.coll = draw(st.sampled_from([None, CollType.ALL_REDUCE]))
                node.group = draw(st.sampled_from([None, group.id]))
            elif kind != NodeKind.COMPUTE:
                node.peer = (r + 1) % ranks
                node.tag = draw(st.sampled_from([None, 0, 5]))
            nodes.append(node)
        display = [DisplaySpan("cpu", "launch", 100 + 10 * j, 5, {draw(KEYS): draw(VALUES)}, draw(st.sampled_from([None, 1, 2])))
                   for j in range(draw(st.integers(0, 3)))]
        trace.ranks[r] = Rank(r, nodes=nodes, coords={"pp": draw(st.integers(0, 1))}, display=display)
    return trace


@settings(max_examples=80, deadline=None)
@given(odd_trace())
def test_random_traces(trace):
    assert_rows_change_nothing(trace)


def test_args_key_tells_apart_what_prints_apart():
    """Dicts with one key tell shapes apart across ranks only where they print alike."""
    keys = [args_key(args, []) for args in ({"a": 1}, {"a": 1.0}, {"a": True}, {"a": 0.0}, {"a": -0.0}, {"a": "1"})]
    assert None not in keys and len(set(keys)) == len(keys)
    assert args_key({"a": 1}, []) == args_key(dict(a=1), [])
    for unkeyed in ({1: "a"}, {"a": 1 << 70}, {"a": [1]}, {"a": (1,)}, {"a": SubStr("x")}):
        assert args_key(unkeyed, []) is None


def test_args_key_leaves_out_what_columns_print():
    # an iteration's or a wait's value is printed from a column: only where it is and whether it is
    # printed tell shapes apart; a key the node's own fields hide is not printed at all
    def key(args, own=()):
        return args_key(args, list(own))

    assert key({"op": "f", "iteration": 1}) == key({"op": "f", "iteration": 7}) == key({"op": "f", "iteration": 1.5})
    assert key({"op": "f", "iteration": 1}) != key({"op": "f", "iteration": None})  # None is not printed
    assert key({"op": "f", "iteration": None}) == key({"op": "f", "iteration": float("nan")})
    assert key({"op": "f", "iteration": 1}) != key({"iteration": 1, "op": "f"})  # printed in the dict's order
    assert key({"op": "f", "microbatch": 1}, ["node", "microbatch"]) == key({"op": "f", "microbatch": 2}, ["node", "microbatch"])
    assert key({"op": "f", "microbatch": 1}) != key({"op": "f", "microbatch": 2})


def test_a_log_rank_has_a_shape_per_kind_of_op_not_per_iteration(tmp_path):
    from helpers.megatron_synth import write_run

    trace = read(write_run(tmp_path, stages=2, tp=1, microbatches=4, iterations=6), diagnostics=Diagnostics(), tp=1)
    plan = plan_trace(trace, Options(ranks="all"), Diagnostics())
    for process in plan.processes:
        rows = process.arg_rows()
        iterations = {values[OWN_FIELDS.index("iteration")] for values in zip(*rows.columns)}
        assert iterations >= set(range(6))  # every iteration printed from the column
        assert len(set(map(id, rows.shapes))) < len(rows.shapes) // 6
    assert_rows_change_nothing(trace)


class SubStr(str):
    pass


def test_shapes_are_shared_by_ranks_with_equal_args():
    trace = ExecutionTrace()
    trace.timing = "measured"
    for r in range(2):
        args = {"stage": 0, "step": "fwd"}  # a dict per rank
        nodes = [Node(i + 1, "op", NodeKind.COMPUTE, duration_ns=10, start_ns=20 * i, args=args) for i in range(3)]
        trace.ranks[r] = Rank(r, nodes=nodes, coords={"pp": 0})
    plan = plan_trace(trace, Options(ranks="all"), Diagnostics())
    first, second = (process.arg_rows() for process in plan.processes)
    assert first.shapes[0] is second.shapes[0]
    assert_rows_change_nothing(trace)


def test_a_profiler_rank_shares_shapes_among_its_launches_and_collectives():
    # each launch span says the node it launched, each collective its sequence number: columns,
    # so a rank has a shape per kind of slice, not one per launch
    paths = sorted((Path(__file__).resolve().parent / "fixtures" / "kineto_nccl").iterdir())
    trace = read(paths, diagnostics=Diagnostics())
    plan = plan_trace(trace, Options(ranks="all"), Diagnostics())
    for process in plan.processes:
        rows = process.arg_rows()
        launched = [values[OWN_FIELDS.index("launched_node")] for values in zip(*rows.columns)]
        display = trace.ranks[process.rank].display
        assert len(display) > 10 and sum(value is not None for value in launched) == len(display)
        assert len({span.args["launched"] for span in display}) <= 5
        assert len(set(map(id, rows.shapes[-len(display):]))) <= 5  # a shape per text launched
    assert_rows_change_nothing(trace)
