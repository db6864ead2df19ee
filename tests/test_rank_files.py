"""The checks a Chakra set written by workers gets (converters/rank_files.py): per rank on the
workers, across ranks here on communication skeletons. Whenever the whole validator reports
something, the split checks report something too (the set is then gated the local way), on
random jobs clean and broken, deadlocks included; clean jobs stay clean."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from converters import rank_files
from converters.model import COMM_KINDS, CollType, Node, NodeKind, Rank
from converters.options import Options
from converters.rank_files import (CHECKED_ARGS, CROSS_RANK_CHECKS, NEAREST_LIMIT, PER_RANK_CHECKS, RankFacts,
                                   _latest_comm_per_stream, _nearest_comm, _reported_by, from_skeleton, skeleton)
from validator_faults import FAULTS, inject, random_job

ALL_CHECKS = tuple(dict.fromkeys(PER_RANK_CHECKS + CROSS_RANK_CHECKS))
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def split_checks(trace) -> tuple[bool, list | None]:
    """What rank_files.convert decides on: whether a per-rank check reports on a whole rank, and
    the cross-rank checks' partial-set notes on the skeletons (None: an error or a warning)."""
    shell = replace(trace, ranks={})
    per_rank = any(_reported_by(replace(shell, ranks={r: rank}), Options(), PER_RANK_CHECKS) for r, rank in trace.ranks.items())
    skeletons = {r: from_skeleton(RankFacts(replace(rank, nodes=[]), skeleton(rank), True, 0, ""))
                 for r, rank in trace.ranks.items()}
    return per_rank, rank_files._cross_rank_notes(replace(trace, ranks=skeletons), Options())


def split_reports(trace) -> bool:
    per_rank, notes = split_checks(trace)
    return per_rank or notes is None or bool(notes)


def faulty_job(seed: int, fault: str | None) -> tuple:
    """(a random job with `fault` in it, the random generator that made it)."""
    rng = random.Random(seed)
    trace = random_job(rng)
    if fault == "swap":
        swap_two_collectives(trace, rng)
    elif fault is not None:
        inject(trace, fault, rng)
    return trace, rng


def swap_two_collectives(trace, rng: random.Random) -> None:
    """One rank issues two collectives of different groups the other way round: a deadlock
    when another rank is in both groups."""
    for rank in rng.sample(trace.sorted_ranks(), len(trace.ranks)):
        colls = [i for i, n in enumerate(rank.nodes) if n.kind is NodeKind.COLLECTIVE]
        pairs = [(i, j) for i in colls for j in colls if i < j and rank.nodes[i].group != rank.nodes[j].group]
        if pairs:
            i, j = rng.choice(pairs)
            a, b = rank.nodes[i], rank.nodes[j]
            for field in ("name", "coll", "size", "group"):
                va, vb = getattr(a, field), getattr(b, field)
                setattr(a, field, vb)
                setattr(b, field, va)
            return


@PROPERTY
@given(seed=st.integers(0, 2**32 - 1), fault=st.sampled_from((None, "swap", *FAULTS)), by_streams=st.booleans())
def test_split_checks_report_whenever_the_whole_validator_does(seed, fault, by_streams):
    # by_streams: every skeleton made by the stream route (rank_files._latest_comm_per_stream)
    trace, _ = faulty_job(seed, fault)
    whole = _reported_by(trace, Options(), ALL_CHECKS)
    with pytest.MonkeyPatch.context() as patch:
        if by_streams:
            nearest = rank_files._nearest_comm
            patch.setattr(rank_files, "_nearest_comm", lambda nodes, limit=None: None if limit else nearest(nodes))
        split = split_reports(trace)
    assert split == whole or (split and not whole), "the split checks missed a finding"
    if fault is None:
        assert not split  # a clean job is written by the workers


@PROPERTY
@given(seed=st.integers(0, 2**32 - 1), fault=st.sampled_from((None, "swap", *FAULTS)))
def test_a_logs_partial_set_keeps_the_workers_files_only_when_the_whole_validator_finds_just_the_note(seed, fault):
    # a log of some ranks of a job: the whole validator notes it (I024), the gate warns and
    # writes; the workers' files are kept when the split checks find only that note, which
    # must then be all the whole validator finds, in the same words
    from converters.validate import run_checks
    from converters.validate.findings import ERROR, WARNING

    trace, rng = faulty_job(seed, fault)
    trace.source.format = "megatron-log"
    del trace.ranks[rng.choice(sorted(trace.ranks))]
    per_rank, notes = split_checks(trace)
    whole = run_checks(trace)
    if not per_rank and notes is not None:
        assert not [f.text() for f in whole if f.severity in (ERROR, WARNING)]
        assert [n.message for n in notes] == [f.message for f in whole if f.code == "I024"]
        assert notes  # a rank is absent by design
    if fault is None:
        assert not per_rank and notes is not None  # a clean log of some ranks is written by the workers


def _node(trace, rank: int, name: str) -> Node:
    return next(n for n in trace.ranks[rank].nodes if n.name == name)


def _overlap(trace):
    _node(trace, 0, "forward_step mb1").start_ns -= 5_000_000


def _early_receive(trace):
    _node(trace, 4, "recv_forward mb0").start_ns -= 500_000_000


def _fast_send(trace):
    _node(trace, 0, "send_forward mb0").duration_ns = 10


def _fast_sub_operation(trace):
    sub = next(n for n in trace.ranks[3].nodes if n.kind is NodeKind.COLLECTIVE and n.parent is not None and n.size)
    sub.duration_ns = 1


def _offset_clock(trace):
    for n in trace.ranks[4].nodes:
        n.start_ns -= 2_000_000_000


def _sub_operation_outside_its_step(trace):
    sub = next(n for n in trace.ranks[2].nodes if n.parent is not None)
    sub.start_ns -= 50_000_000


@pytest.mark.parametrize("edit, reported", [
    (None, False), (_overlap, True), (_early_receive, True), (_fast_send, True), (_fast_sub_operation, True),
    (_offset_clock, False), (_sub_operation_outside_its_step, True),
], ids=["clean", "overlap", "early-receive", "fast-send", "fast-sub-operation", "clock-offset", "outside-step"])
def test_measured_times_split_between_the_workers_and_the_skeletons(tmp_path, edit, reported):
    # the workers check a rank's own times (overlaps, sub-operations in their steps); the
    # skeletons only what compares ranks (receives after sends) and the bandwidth of each node
    import converters as etc
    from helpers.megatron_synth import write_run

    trace = etc.read(write_run(tmp_path / "logs", stages=4, tp=2, microbatches=4), fmt="megatron-log")
    if edit is not None:
        edit(trace)
    assert _reported_by(trace, Options(), ALL_CHECKS) is reported
    assert split_reports(trace) is reported


def test_the_skeleton_keeps_comm_nodes_and_their_waits_through_compute():
    nodes = [Node(0, "c", NodeKind.COMPUTE), Node(1, "ar", NodeKind.COLLECTIVE, deps=[0], coll=CollType.ALL_REDUCE, size=8),
             Node(2, "c", NodeKind.COMPUTE, deps=[1]), Node(3, "c", NodeKind.COMPUTE, deps=[2, 0]),
             Node(4, "s", NodeKind.SEND, deps=[3], peer=1, tag=0, size=8), Node(5, "r", NodeKind.RECV, ctrl_deps=[1, 3], peer=1, tag=1, size=8)]
    back = from_skeleton(RankFacts(Rank(0), skeleton(Rank(0, nodes=nodes)), True, 0, ""))
    assert [(n.id, n.kind, n.coll, n.deps, n.peer, n.tag, n.size) for n in back.nodes] == [
        (1, NodeKind.COLLECTIVE, CollType.ALL_REDUCE, [], None, None, 8),
        (4, NodeKind.SEND, None, [1], 1, 0, 8), (5, NodeKind.RECV, None, [1], 1, 1, 8)]


def test_skeletons_of_ranks_of_one_role_share_ids_and_dependencies_in_the_client():
    # ranks of one role differ in times, not in structure: their skeleton nodes share each id
    # and each list of dependencies (one object, read-only), and still equal what was sent
    import pickle

    from converters.model import SharedDeps, plain
    from converters.rank_files import SkeletonNode, SkeletonNodes

    def rank(r: int, offset: int) -> Rank:
        return Rank(r, nodes=[
            Node(1000, "ar", NodeKind.COLLECTIVE, duration_ns=5 + offset, coll=CollType.ALL_REDUCE, size=4096, start_ns=offset,
                 microbatch=300),  # past the ints Python keeps one of
            Node(1001, "s", NodeKind.SEND, duration_ns=7, deps=[1000], peer=1, tag=0, size=4096, start_ns=9 + offset),
            Node(1002, "ag", NodeKind.COLLECTIVE, deps=[1000, 1001], coll=CollType.ALL_GATHER, size=4096, start_ns=20 + offset)])

    shared = rank_files.SharedValues()
    a, b = (from_skeleton(RankFacts(Rank(r), pickle.loads(pickle.dumps(skeleton(rank(r, 3 * r)))), True, 0, ""), shared).nodes
            for r in (0, 1))
    assert [(n.id, n.deps, n.duration_ns, n.start_ns, n.microbatch) for n in b] == [
        (1000, [], 8, 3, 300), (1001, [1000], 7, 12, None), (1002, [1000, 1001], 0, 23, None)]
    assert all(x.id is y.id and x.deps is y.deps for x, y in zip(a, b))
    assert b[1].deps[0] is b[0].id  # a dependency is the id object it names
    assert all(type(n.deps) is SharedDeps for n in b[1:])
    # the nodes are made when read, from the skeleton's columns: no object per node is kept
    assert type(b) is SkeletonNodes and len(b) == 3 and b[0] is not b[0] and b[0] == b[0] != b[1]
    assert type(b[0]) is SkeletonNode and (b[0].ctrl_deps, b[0].source, b[0].attrs) == ([], None, None)
    assert [n.id for n in b[1:]] == [n.id for n in b[-2:]] == [1001, 1002] and b[-3].id == 1000
    with pytest.raises(IndexError):
        b[3]
    with pytest.raises(AttributeError):
        b[0].size = 5  # read-only
    stand_in = replace(plain(b[0]), kind=NodeKind.RECV)  # the deadlock check's stand-ins
    assert type(stand_in) is Node and stand_in.kind is NodeKind.RECV and stand_in.size == 4096 and stand_in.id == 1000
    with pytest.raises(TypeError, match="shared by many nodes"):
        b[2].deps.append(5)
    assert pickle.loads(pickle.dumps(b[2].deps)) == [1000, 1001]
    assert type(pickle.loads(pickle.dumps(b[2].deps))) is SharedDeps


def test_positions_are_one_object_each_whatever_list_holds_them():
    from converters.positions import positions

    assert positions(0) == [] and positions(3) == [0, 1, 2]
    long, longer = positions(1000), positions(5000)
    assert longer == list(range(5000))
    assert all(x is y for x, y in zip(long, longer))
    long.append(7)  # each list is the caller's own
    assert len(positions(1000)) == 1000


COMM = st.sampled_from([NodeKind.COLLECTIVE, NodeKind.SEND, NodeKind.RECV])
MAYBE_INT = st.one_of(st.none(), st.integers(-200, 300), st.just(-128), st.integers(1 << 62, 1 << 70))


@st.composite
def comm_nodes(draw):
    """Communication nodes only (each keeps its dependencies as they are), with every field
    drawn: None, small ints, ints beyond int64, args the checks read and others."""
    count = draw(st.integers(0, 12))
    nodes = []
    for i in range(count):
        kind = draw(COMM)
        nodes.append(Node(
            i, draw(st.sampled_from(["ar", "send", "recv", "é"])), kind,
            duration_ns=draw(st.integers(0, 1 << 40)), deps=draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=3)) if i else [],
            coll=draw(st.sampled_from(list(CollType))) if kind is NodeKind.COLLECTIVE else None,
            size=draw(st.one_of(st.integers(0, 1 << 40), st.integers(1 << 63, 1 << 66), st.just(-128))),
            group=draw(MAYBE_INT), peer=draw(MAYBE_INT), tag=draw(MAYBE_INT), start_ns=draw(MAYBE_INT),
            stream=draw(st.sampled_from(["", "tp", "pp"])), parent=draw(MAYBE_INT), microbatch=draw(MAYBE_INT),
            args=draw(st.dictionaries(st.sampled_from(["dtype", "shape", "fused", "op", "stage"]),
                                      st.one_of(st.none(), st.integers(), st.text(max_size=3)), max_size=4)),
        ))
    return nodes


@settings(max_examples=200, deadline=None)
@given(nodes=comm_nodes())
def test_a_skeleton_gives_back_its_nodes_with_the_checked_args(nodes):
    import pickle

    sent = pickle.loads(pickle.dumps(skeleton(Rank(0, nodes=nodes))))  # as it crosses processes
    back = from_skeleton(RankFacts(Rank(0), sent, True, 0, "")).nodes
    fields = ("id", "name", "kind", "duration_ns", "deps", "coll", "size", "group", "peer", "tag", "start_ns",
              "stream", "parent", "microbatch")
    assert [tuple(getattr(n, f) for f in fields) for n in back] == [tuple(getattr(n, f) for f in fields) for n in nodes]
    # a column at a time, as the checks read them, and at places, and told apart as the C does
    from converters.scheduler.columns import _native_distinct, columns, columns_at, distinct_at

    assert list(columns(back, fields + ("args", "ctrl_deps", "source"))) == [
        [getattr(n, f) for n in back] for f in fields + ("args", "ctrl_deps", "source")]
    from converters.model import field_values

    assert [list(field_values(back, f)) for f in ("kind", "group")] == [list(field_values(nodes, f)) for f in ("kind", "group")]
    places = [i for i in range(len(nodes)) if i % 2 == 0]
    assert list(columns_at(back, ("size", "group", "kind"), places)) == list(columns_at(nodes, ("size", "group", "kind"), places))
    if _native_distinct is not None:
        assert distinct_at(back, ("group", "coll", "size"), places) == _native_distinct(nodes, ("group", "coll", "size"), places)
    assert [n.args for n in back] == [{k: n.args[k] for k in CHECKED_ARGS if n.args.get(k) is not None} for n in nodes]
    assert all(n.ctrl_deps == [] and n.source is None for n in back)


@st.composite
def streamed_nodes(draw):
    """Nodes on 1-4 streams, each depending on the node before it on its stream (unless
    `broken`) and on up to 2 earlier nodes of any stream, as compute joins streams in profiler
    traces; a third of them communication nodes."""
    streams = draw(st.integers(1, 4))
    broken = draw(st.booleans())
    nodes, last = [], {}
    for i in range(draw(st.integers(1, 40))):
        stream = f"stream {draw(st.integers(0, streams - 1))}"
        deps = set(draw(st.lists(st.integers(0, i - 1), max_size=2))) if i else set()
        if stream in last and not (broken and draw(st.integers(0, 5)) == 0):
            deps.add(last[stream])
        kind = draw(st.sampled_from([NodeKind.COMPUTE, NodeKind.COMPUTE, NodeKind.COLLECTIVE, NodeKind.SEND]))
        nodes.append(Node(i, f"n{i}", kind, deps=sorted(deps), stream=stream,
                          coll=CollType.ALL_REDUCE if kind is NodeKind.COLLECTIVE else None))
        last[stream] = i
    return nodes, broken


def reached(nodes, deps_of) -> dict[int, set[int]]:
    """Communication node -> every communication node it waits for, through `deps_of`."""
    comm = [n.id for n in nodes if n.kind in COMM_KINDS]
    direct = dict(zip(comm, deps_of))
    out: dict[int, set[int]] = {}
    for c in comm:  # ids in order: a node's dependencies are done before it
        out[c] = set().union(*({d} | out[d] for d in direct[c]))
    return out


@settings(max_examples=300, deadline=None)
@given(case=streamed_nodes())
def test_the_latest_of_each_stream_stand_for_every_communication_node_waited_for(case):
    nodes, broken = case
    nearest = _nearest_comm(nodes)
    latest = _latest_comm_per_stream(nodes)
    if not broken:
        assert latest is not None
    if latest is not None:
        assert reached(nodes, latest) == reached(nodes, nearest)
        streams = {n.stream for n in nodes}
        assert all(len(deps) <= len(streams) for deps in latest)


def test_a_long_join_of_streams_takes_the_stream_route():
    # 3 streams, each node waiting for the one before it on its stream and the last node of the
    # next stream: the nearest communication nodes pile up, the latest per stream stay 3
    nodes, last = [], {}
    for i in range(600):
        stream = f"stream {i % 3}"
        deps = sorted({last[s] for s in (stream, f"stream {(i + 1) % 3}") if s in last})
        kind = NodeKind.COLLECTIVE if i % 2 else NodeKind.COMPUTE
        nodes.append(Node(i, "n", kind, deps=deps, stream=stream, coll=CollType.ALL_REDUCE if i % 2 else None))
        last[stream] = i
    assert _nearest_comm(nodes, NEAREST_LIMIT) is None
    sk = skeleton(Rank(0, nodes=nodes))
    assert max(sk.dep_counts) <= 3 and len(sk.dep_counts) == 300
    assert reached(nodes, _latest_comm_per_stream(nodes)) == reached(nodes, _nearest_comm(nodes))
