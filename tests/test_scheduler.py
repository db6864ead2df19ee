"""The scheduler on small traces whose timelines are computed by hand."""

from __future__ import annotations

import random

import pytest
from helpers.scheduler_synth import MiB, coll, compute, recv, send, shared_trace, trace_of

from converters.model import CollType, ExecutionTrace, NodeKind, Rank
from converters.scheduler import Deadlock, schedule
from converters.scheduler.engine import Engine
from converters.scheduler.network import Network
from converters.scheduler.quotient import find_quotient
from converters.scheduler.summary import summarize

ONE_BYTE_PER_NS = 1e9 / 2**30  # bandwidth_gbps that ASTRA-sim reads as exactly 1 byte/ns


def simple_net(latency: int = 1000, **more) -> Network:
    """1 byte/ns, `latency` per step, one chunk, no endpoint delay, free reductions."""
    params = {"bandwidth_gbps": ONE_BYTE_PER_NS, "latency_ns": latency, "chunks": 1,
              "endpoint_delay_ns": 0, "local_mem_gbps": 1e12}
    params.update(more)
    return Network({"default": params})


def test_two_ranks_one_send_recv():
    trace = trace_of({
        0: [compute(0, 1000), send(1, dst=1, size=4000, deps=[0])],
        1: [recv(0, src=0, size=4000)],
    })
    tl = schedule(trace, network=simple_net())
    # The send starts after the compute and takes latency + bytes / bandwidth = 1000 + 4000.
    assert (tl.starts[0][1], tl.ends[0][1]) == (1000, 6000)
    # The receive was posted at 0; its data moves from 1000 to 6000.
    assert (tl.starts[1][0], tl.ends[1][0]) == (1000, 6000)
    assert tl.summary["iteration_time_ns"] == 6000
    assert tl.summary["ranks"]["1"] == {"finish_ns": 6000, "compute_ns": 0, "exposed_comm_ns": 5000, "idle_ns": 1000}


def test_a_late_receive_completes_when_posted():
    # Sends are eager: the data has arrived at 5000, the receive is posted at 9000.
    trace = trace_of({
        0: [send(0, dst=1, size=4000)],
        1: [compute(0, 9000), recv(1, src=0, size=4000, deps=[0])],
    })
    tl = schedule(trace, network=simple_net())
    assert tl.ends[0] == [5000]
    assert (tl.starts[1][1], tl.ends[1][1]) == (9000, 9000)


def test_four_rank_all_reduce_waits_for_the_last_member():
    size = 4 * MiB
    trace = trace_of({r: [compute(0, 1000 * (r + 1)), coll(1, CollType.ALL_REDUCE, size, deps=[0])] for r in range(4)})
    tl = schedule(trace, network=simple_net())
    # Ring: 2(n-1) = 6 steps of latency + (S/n)/bandwidth; reductions are free here.
    cost = 6 * (1000 + size // 4)
    for r in range(4):
        assert (tl.starts[r][1], tl.ends[r][1]) == (4000, 4000 + cost)
    ranks = tl.summary["ranks"]
    assert ranks["0"] == {"finish_ns": 4000 + cost, "compute_ns": 1000, "exposed_comm_ns": cost, "idle_ns": 3000}
    assert ranks["3"]["idle_ns"] == 0
    assert tl.summary["comm"]["all"] == {"ops": 4, "bytes": 4 * size, "busy_ns": 4 * cost}


def test_collective_in_a_group_uses_that_kind_of_link():
    trace = trace_of({r: [coll(0, CollType.ALL_GATHER, 1000, group=1)] for r in range(2)})
    trace.groups[1] = trace.groups.get(1) or trace.add_group("tp", [0, 1])
    net = Network({"default": {"latency_ns": 0, "endpoint_delay_ns": 0},
                   "tp": {"bandwidth_gbps": ONE_BYTE_PER_NS}, "dp": {"bandwidth_gbps": ONE_BYTE_PER_NS / 2}})
    assert schedule(trace, network=net).ends[0] == [1000]  # n-1 = 1 step of the whole input


def test_one_member_collective_is_free():
    trace = trace_of({0: [compute(0, 10), coll(1, CollType.ALL_REDUCE, MiB, deps=[0])]})
    tl = schedule(trace, network=simple_net())
    assert (tl.starts[0][1], tl.ends[0][1]) == (10, 10)


def pipeline_2x2(f: int, b: int, size: int) -> ExecutionTrace:
    """1F1B, 2 stages x 2 microbatches. Stage 0: F0 F1 B0 B1 (warmup 1); stage 1: F0 B0 F1 B1."""
    stage0 = [
        compute(0, f, name="F0"),
        send(1, dst=1, size=size, tag=0, deps=[0], name="send F0"),
        compute(2, f, deps=[0], name="F1"),
        send(3, dst=1, size=size, tag=1, deps=[2], name="send F1"),
        recv(4, src=1, size=size, tag=10, deps=[2], name="recv B0"),
        compute(5, b, deps=[4, 2], name="B0"),
        recv(6, src=1, size=size, tag=11, deps=[5], name="recv B1"),
        compute(7, b, deps=[6], name="B1"),
    ]
    stage1 = [
        recv(0, src=0, size=size, tag=0, name="recv F0"),
        compute(1, f, deps=[0], name="F0"),
        compute(2, b, deps=[1], name="B0"),
        send(3, dst=0, size=size, tag=10, deps=[2], name="send B0"),
        recv(4, src=0, size=size, tag=1, deps=[1], name="recv F1"),
        compute(5, f, deps=[4, 2], name="F1"),
        compute(6, b, deps=[5], name="B1"),
        send(7, dst=0, size=size, tag=11, deps=[6], name="send B1"),
    ]
    return trace_of({0: stage0, 1: stage1})


def test_pipeline_two_stages_two_microbatches():
    f, b, size = 10_000, 20_000, 4000
    p = 1000 + size  # one transfer
    tl = schedule(pipeline_2x2(f, b, size), network=simple_net())
    s0, e0, s1, e1 = tl.starts[0], tl.ends[0], tl.starts[1], tl.ends[1]
    # stage 1: F0 after the activation arrives, B0 right after, F1's input came meanwhile
    assert (s1[1], e1[1]) == (f + p, 2 * f + p)
    assert (s1[2], e1[2]) == (2 * f + p, 2 * f + p + b)
    assert (s1[5], e1[5]) == (2 * f + p + b, 3 * f + p + b)
    assert (s1[6], e1[6]) == (3 * f + p + b, 3 * f + p + 2 * b)
    # stage 0: B0 waits for its gradient; B1 for the last one
    assert (s0[5], e0[5]) == (2 * f + 2 * p + b, 2 * f + 2 * p + 2 * b)
    assert (s0[7], e0[7]) == (3 * f + 2 * p + 2 * b, 3 * f + 2 * p + 3 * b)
    summary = tl.summary
    assert summary["iteration_time_ns"] == 3 * f + 2 * p + 3 * b == 100_000
    # stage 0 computes 2f + 2b; it waits (bubble) for the rest, its own sends overlap compute
    row0 = summary["ranks"]["0"]
    assert row0["compute_ns"] == 2 * f + 2 * b
    assert row0["finish_ns"] == row0["compute_ns"] + row0["exposed_comm_ns"] + row0["idle_ns"]
    path = summary["critical_path"]
    assert sum(path["by_category"].values()) == path["length_ns"] == 100_000


def test_fused_exchange_blocks_neither_side():
    # Each rank sends and receives at once (no dependency between the two): no deadlock.
    trace = trace_of({
        0: [compute(0, 100), send(1, dst=1, size=4000, deps=[0]), recv(2, src=1, size=4000, deps=[0])],
        1: [compute(0, 300), send(1, dst=0, size=4000, deps=[0]), recv(2, src=0, size=4000, deps=[0])],
    })
    tl = schedule(trace, network=simple_net())
    assert tl.ends[0][1] == 100 + 5000 and tl.ends[1][1] == 300 + 5000
    assert tl.ends[0][2] == 300 + 5000 and tl.ends[1][2] == 100 + 5000


def test_one_collective_in_flight_per_rank_receives_exempt():
    # Rank 0 issues a collective and a send that are both ready: the send waits for the
    # collective; a receive that is ready at the same time does not.
    trace = trace_of({
        0: [coll(0, CollType.ALL_REDUCE, 4000), send(1, dst=1, size=1000), recv(2, src=1, size=1000)],
        1: [coll(0, CollType.ALL_REDUCE, 4000), send(1, dst=0, size=1000), recv(2, src=0, size=1000)],
    })
    tl = schedule(trace, network=simple_net())
    ar = 2 * (1000 + 2000)
    assert tl.ends[0][0] == ar
    assert (tl.starts[0][1], tl.ends[0][1]) == (ar, ar + 2000)
    assert tl.ends[0][2] == ar + 2000  # posted at 0, data from rank 1's send


def test_ready_nodes_issue_in_ascending_node_id():
    # Node ids say the order, not the list position.
    nodes = [compute(5, 100, name="second"), compute(2, 100, name="first")]
    tl = schedule(trace_of({0: nodes}), network=simple_net())
    assert tl.starts[0] == [100, 0]


# ---------------------------------------------------------------- deadlocks


def test_collective_a_member_never_issues():
    trace = trace_of({r: [coll(0, CollType.ALL_REDUCE, 1000, name=f"ar {r}")] for r in range(3)})
    trace.ranks[3] = Rank(3, [compute(0, 10)])
    with pytest.raises(Deadlock) as stalled:
        schedule(trace, network=simple_net())
    d = stalled.value
    assert [w.rank for w in d.blocked] == [0, 1, 2]
    first = d.blocked[0]
    assert (first.what, first.node, first.seq, first.group) == ("collective", 0, 0, None)
    assert first.waits_for == ((3, None),)
    assert d.finished == [3]
    assert "rank 0 waits in all ranks seq 0 ALL_REDUCE (node 0 \"ar 0\") for rank 3" in str(d)
    assert "rank 3 finished without issuing it" in str(d)


def test_receive_without_send():
    trace = trace_of({0: [compute(0, 10)], 1: [recv(7, src=0, size=10, tag=3, name="recv x")]})
    with pytest.raises(Deadlock) as stalled:
        schedule(trace, network=simple_net())
    d = stalled.value
    assert [(w.rank, w.node, w.what, w.waits_for) for w in d.blocked] == [(1, 7, "recv", ((0, None),))]
    assert "rank 1 waits in recv from rank 0 tag 3 (node 7 \"recv x\") for rank 0" in str(d)


def test_receive_before_send_on_both_sides_is_a_cycle():
    trace = trace_of({
        0: [recv(0, src=1, size=10), send(1, dst=1, size=10, deps=[0])],
        1: [recv(0, src=0, size=10), send(1, dst=0, size=10, deps=[0])],
    })
    with pytest.raises(Deadlock) as stalled:
        schedule(trace, network=simple_net())
    d = stalled.value
    assert d.cycle
    assert [w.rank for w in d.chain] == [0, 1]
    assert d.blocked[0].waits_for == ((1, 1),)  # rank 1's node 1 is the send it waits for


def test_collectives_in_crossed_order():
    trace = ExecutionTrace()
    a = trace.add_group("tp", [0, 1])
    b = trace.add_group("dp", [0, 1])
    trace.ranks[0] = Rank(0, [coll(0, CollType.ALL_REDUCE, 10, group=a.id), coll(1, CollType.ALL_REDUCE, 10, group=b.id, deps=[0])])
    trace.ranks[1] = Rank(1, [coll(0, CollType.ALL_REDUCE, 10, group=b.id), coll(1, CollType.ALL_REDUCE, 10, group=a.id, deps=[0])])
    with pytest.raises(Deadlock) as stalled:
        schedule(trace, network=simple_net())
    d = stalled.value
    assert d.cycle
    assert [(w.rank, w.group, w.waits_for) for w in d.chain] == [(0, a.id, ((1, 1),)), (1, b.id, ((0, 1),))]


def test_dependency_cycle_and_missing_dependency():
    trace = trace_of({
        0: [compute(0, 10, deps=[2]), compute(1, 10, deps=[0]), compute(2, 10, deps=[1])],
        1: [compute(0, 10), compute(1, 10, deps=[99], name="orphan")],
    })
    with pytest.raises(Deadlock) as stalled:
        schedule(trace, network=simple_net())
    by_rank = {w.rank: w for w in stalled.value.blocked}
    assert by_rank[0].what == "cycle"
    assert sorted(n for _, n in by_rank[0].waits_for) == [0, 1, 2]
    assert (by_rank[1].what, by_rank[1].node, by_rank[1].waits_for) == ("missing", 1, ((1, 99),))
    assert "node 99 does not exist" in str(stalled.value)


def test_deadlock_is_an_input_error_for_the_cli(cli, tmp_path):
    from converters.api import write
    from converters.options import Options

    trace = trace_of({0: [coll(0, CollType.ALL_REDUCE, 10, name="grad sync")], 1: [compute(0, 5)]})
    write(trace, tmp_path / "w", to="chakra", options=Options(force=True))  # the validator would refuse it
    out = tmp_path / "w.json"
    done = cli(tmp_path, "-o", out)  # a timeline needs the scheduler
    assert (done.code, done.stderr.splitlines()[-1]) == (2, (
        'et-convert: error: deadlock · rank 0 waits in all ranks seq 0 ALL_REDUCE (node 0 "grad sync") '
        "for rank 1 · rank 1 finished without issuing it"))
    assert "Traceback" not in done.stderr
    assert not out.exists()


# ---------------------------------------------------------------- determinism and roles


def test_same_input_same_timeline():
    def build(order):
        trace = pipeline_2x2(10_000, 20_000, 4000)
        trace.ranks = {r: trace.ranks[r] for r in order}
        return schedule(trace, network=simple_net())

    first, second = build([0, 1]), build([1, 0])
    assert first.starts == second.starts and first.ends == second.ends
    assert first.summary == second.summary


def role_trace(stages: int = 2, dp: int = 4, microbatches: int = 3) -> ExecutionTrace:
    """dp x stages ranks; ranks of one stage share one node list (rank = d + dp * s)."""
    trace = ExecutionTrace()
    dp_groups = {s: trace.add_group("dp", [d + dp * s for d in range(dp)]) for s in range(stages)}
    programs = []
    for s in range(stages):
        rep = dp * s
        nodes, nid, prev = [], 0, None
        for m in range(microbatches):
            if s > 0:
                nodes.append(recv(nid, src=rep - dp, size=2000, tag=m, deps=[prev] if prev is not None else []))
                prev, nid = nid, nid + 1
            nodes.append(compute(nid, 1000 * (s + 1), deps=[prev] if prev is not None else []))
            prev, nid = nid, nid + 1
            if s < stages - 1:
                nodes.append(send(nid, dst=rep + dp, size=2000, tag=m, deps=[prev]))
                nid += 1
        nodes.append(coll(nid, CollType.ALL_REDUCE, 1 << 16, deps=[prev], group=dp_groups[s].id))
        programs.append(nodes)
    for s in range(stages):
        for d in range(dp):
            r = d + dp * s
            rank = Rank(r, programs[s], coords={"pp": s, "dp": d})
            if d:
                rank.group_map = {}
                rank.peer_map = {p: p + d for p in (dp * (s - 1), dp * (s + 1))}
            trace.ranks[r] = rank
    return trace


def test_representatives_give_every_rank_its_full_schedule():
    trace = role_trace()
    assert find_quotient(trace) is not None
    fast = schedule(trace, network=simple_net())
    assert fast.parameters["representatives"] == 2
    engine = Engine(trace, simple_net())
    starts, ends, cause = engine.run()
    full = summarize(engine, starts, ends, cause)
    assert fast.summary["ranks"] == full["ranks"]
    assert fast.summary["comm"] == full["comm"]
    for r, rank in enumerate(engine.ranks):
        assert fast.starts[rank.rank] == starts[r] and fast.ends[rank.rank] == ends[r]


def test_roles_are_split_until_ranks_of_one_class_see_the_same_classes():
    trace = role_trace()
    # Rank 5 (stage 1) now waits for a send from rank 6, a stage-1 sibling that never sends:
    # rank 5 plays another role than 4, 6 and 7 (and rank 1, whose receiver it is, than 0, 2, 3).
    trace.ranks[5].peer_map = {0: 6}
    quotient = find_quotient(trace)
    assert quotient.classes == [[0, 2, 3], [1], [4, 6, 7], [5]]
    with pytest.raises(Deadlock) as stalled:
        schedule(trace, network=simple_net())
    blocked = {w.rank: w for w in stalled.value.blocked}
    assert sorted(blocked) == [4, 5, 6, 7]  # the others wait for rank 5 in their dp all-reduce
    assert (blocked[5].what, blocked[5].waits_for) == ("recv", ((6, None),))
    assert blocked[4].what == "collective" and blocked[4].waits_for == ((5, 6),)


def test_representatives_refused_when_one_rank_sends_to_two_of_a_class():
    nodes0 = [send(0, dst=1, size=10, tag=0), send(1, dst=2, size=10, tag=0)]
    shared = [recv(0, src=0, size=10, tag=0)]
    trace = trace_of({0: nodes0, 1: shared, 2: shared})
    assert find_quotient(trace) is None  # rank 0's two sends could not be told apart by class
    tl = schedule(trace, network=simple_net())
    assert tl.ends[1] == [1010] and tl.ends[2] == [2020]


def test_shared_program_with_a_deadlock_reports_real_ranks():
    nodes = [recv(0, src=0, size=10)]
    trace = shared_trace(3, nodes)
    for r in (1, 2):
        trace.ranks[r].peer_map = {0: r - 1}
    # rank 0 receives from itself (never sent), 1 from 0, 2 from 1: all blocked
    with pytest.raises(Deadlock) as stalled:
        schedule(trace, network=simple_net())
    assert [w.rank for w in stalled.value.blocked] == [0, 1, 2]


def test_randomised_traces_are_deterministic_and_consistent():
    rng = random.Random(7)
    for _ in range(20):
        n = rng.randint(2, 5)
        programs = {}
        for r in range(n):
            nodes, nid = [], 0
            for step in range(6):
                deps = [nid - 1] if nid and rng.random() < 0.7 else []
                nodes.append(compute(nid, rng.randint(1, 5000), deps=deps))
                nid += 1
                nodes.append(coll(nid, CollType.ALL_REDUCE, rng.randint(1, 1 << 20), deps=[nid - 1]))
                nid += 1
            programs[r] = nodes
        trace = trace_of(programs)
        a = schedule(trace, network=simple_net())
        b = schedule(trace, network=simple_net())
        assert a.starts == b.starts and a.ends == b.ends and a.summary == b.summary
        for r, nodes in programs.items():
            by_id = {node.id: i for i, node in enumerate(nodes)}
            for i, node in enumerate(nodes):
                assert a.ends[r][i] >= a.starts[r][i]
                for dep in node.deps:
                    assert a.starts[r][i] >= a.ends[r][by_id[dep]]
            compute_ends = sorted((a.starts[r][i], a.ends[r][i]) for i, nd in enumerate(nodes) if nd.kind == NodeKind.COMPUTE)
            assert all(x[1] <= y[0] for x, y in zip(compute_ends, compute_ends[1:]))  # one compute stream


def test_equal_programs_in_separate_lists_share_a_representative():
    import copy

    shared = role_trace()
    # Give every rank its own copy of its program, numbered from its own id base (as sets
    # written with one id counter for all ranks are), with groups and peers spelled out.
    trace = ExecutionTrace(groups=shared.groups)
    for r, rank in shared.ranks.items():
        base = 1000 * r
        nodes = []
        for node in rank.nodes:
            mine = copy.copy(node)
            mine.id = node.id + base
            mine.deps = [d + base for d in node.deps]
            mine.group = rank.group_of(node)
            mine.peer = rank.peer_of(node)
            nodes.append(mine)
        trace.ranks[r] = Rank(r, nodes)
    fast = schedule(trace, network=simple_net())
    assert fast.parameters["representatives"] == 2
    full = schedule(shared, network=simple_net())
    assert fast.starts == full.starts and fast.ends == full.ends
    assert fast.summary["ranks"] == full.summary["ranks"]
    # A rank whose durations differ is a class of its own, and so is the rank that feeds it.
    trace.ranks[5].nodes[1].duration_ns += 1
    split = schedule(trace, network=simple_net())
    assert split.parameters["representatives"] == 4
    engine = Engine(trace, simple_net())
    starts, ends, _ = engine.run()
    assert all(split.starts[rank.rank] == starts[r] and split.ends[rank.rank] == ends[r]
               for r, rank in enumerate(engine.ranks))


def test_representatives_with_tp_dp_pp_and_embedding_groups():
    from converters.builders.layout import Layout, add_layout_groups

    layout = Layout(tp=2, dp=2, pp=3)
    trace = ExecutionTrace()
    ids = add_layout_groups(trace, layout, kinds=("tp", "dp", "pp", "embedding"))
    programs = {}
    for s in range(layout.pp):
        rep = layout.rank_of(0, 0, s)
        nodes, nid, prev = [], 0, None
        for m in range(2):
            if s > 0:
                nodes.append(recv(nid, src=layout.prev_stage_rank(rep), size=3000, tag=m, deps=[prev] if prev is not None else []))
                prev, nid = nid, nid + 1
            nodes.append(compute(nid, 1000 * (s + 1) + 7 * m, deps=[prev] if prev is not None else []))
            nodes.append(coll(nid + 1, CollType.ALL_REDUCE, 1 << 16, deps=[nid], group=ids[rep]["tp"]))
            prev, nid = nid + 1, nid + 2
            if s < layout.pp - 1:
                nodes.append(send(nid, dst=layout.next_stage_rank(rep), size=3000, tag=m, deps=[prev]))
                nid += 1
        nodes.append(coll(nid, CollType.ALL_REDUCE, 1 << 20, deps=[prev], group=ids[rep]["dp"]))
        if s in (0, layout.pp - 1):
            nodes.append(coll(nid + 1, CollType.ALL_REDUCE, 1 << 18, deps=[nid], group=ids[rep]["embedding"]))
        programs[s] = (rep, nodes)
    for r in range(layout.world):
        s = layout.coords(r)["pp"]
        rep, nodes = programs[s]
        rank = Rank(r, nodes, coords=layout.coords(r))
        rank.group_map = {ids[rep][k]: ids[r][k] for k in ids[r]}
        rank.peer_map = {p: q for p, q in ((layout.prev_stage_rank(rep), layout.prev_stage_rank(r)),
                                           (layout.next_stage_rank(rep), layout.next_stage_rank(r))) if p is not None}
        trace.ranks[r] = rank
    fast = schedule(trace, network=simple_net())
    assert fast.parameters["representatives"] == 3
    engine = Engine(trace, simple_net())
    starts, ends, cause = engine.run()
    for r, rank in enumerate(engine.ranks):
        assert fast.starts[rank.rank] == starts[r] and fast.ends[rank.rank] == ends[r]
    # the embedding all-reduce waits for the last stage: stage 0 idles until then
    assert fast.ends[0][-1] == fast.ends[layout.rank_of(0, 0, 2)][-1]


def test_representatives_agree_with_every_rank_on_random_wiring():
    rng = random.Random(3)
    agreed = deadlocked = 0
    for _ in range(40):
        trace = role_trace(stages=3, dp=3, microbatches=2)
        if rng.random() < 0.5:
            # consistent wiring: stage s rank d talks to stage s+1 rank perm[s][d] and back
            perms = [rng.sample(range(3), 3) for _ in range(2)]
            for r, rank in trace.ranks.items():
                s, d = divmod(r, 3)
                wiring = {}
                if s < 2:
                    wiring[3 * (s + 1)] = 3 * (s + 1) + perms[s][d]
                if s > 0:
                    wiring[3 * (s - 1)] = 3 * (s - 1) + perms[s - 1].index(d)
                rank.peer_map = wiring
        else:
            # random wiring: often a receive whose send goes elsewhere
            for r, rank in trace.ranks.items():
                s = r // 3
                if rng.random() < 0.3:
                    rank.peer_map = {p: rng.randrange(p, p + 3) for p in (3 * (s - 1), 3 * (s + 1)) if 0 <= p < 9}
        try:
            fast = schedule(trace, network=simple_net())
        except Deadlock as e:
            fast = e
        engine = Engine(trace, simple_net())
        try:
            starts, ends, _ = engine.run()
        except Deadlock as e:
            assert isinstance(fast, Deadlock)
            assert [w.rank for w in fast.blocked] == [w.rank for w in e.blocked]
            deadlocked += 1
            continue
        assert not isinstance(fast, Deadlock)
        for r, rank in enumerate(engine.ranks):
            assert fast.starts[rank.rank] == starts[r] and fast.ends[rank.rank] == ends[r]
        agreed += 1
    assert agreed and deadlocked  # both outcomes were exercised


def test_a_long_wait_chain_is_cut():
    # rank r waits for a message from rank r + 1; the last rank never sends.
    n = 20
    programs = {r: [recv(0, src=r + 1, size=10), send(1, dst=r - 1, size=10, deps=[0])] for r in range(1, n - 1)}
    programs[0] = [recv(0, src=1, size=10)]
    programs[n - 1] = [compute(0, 5)]
    with pytest.raises(Deadlock) as stalled:
        schedule(trace_of(programs), network=simple_net())
    d = stalled.value
    assert len(d.blocked) == n - 1 and len(d.chain) == 8 and d.truncated and not d.cycle
    assert [w.rank for w in d.chain] == list(range(8))
    assert str(d).count("waits in") == 8 and "· ... ·" in str(d)


def test_representatives_on_a_ring_only_when_groups_lie_alike():
    """Ranks 0-3 share one program; their groups [0, 3] and [1, 2] look alike but are 2 and 1
    hops apart on a ring of 5 ranks: with the ring topology they must not share a timeline."""
    trace = ExecutionTrace()
    far = trace.add_group("dp", [0, 3])
    near = trace.add_group("dp", [1, 2])
    nodes = [compute(0, 1000), coll(1, CollType.ALL_REDUCE, MiB, deps=[0], group=far.id)]
    for r in range(4):
        rank = Rank(r, nodes)
        if r in (1, 2):
            rank.group_map = {far.id: near.id}
        trace.ranks[r] = rank
    trace.ranks[4] = Rank(4, [compute(0, 1000)])
    trace.parallel.world = 5
    ring = Network({"default": {"topology": "ring", "chunks": 1}})
    assert find_quotient(trace) is not None
    assert find_quotient(trace, ring_size=5) is None
    timeline = schedule(trace, network=ring)
    engine = Engine(trace, ring)
    _starts, ends, _cause = engine.run()
    for r, rank in enumerate(engine.ranks):
        assert timeline.ends[rank.rank] == ends[r]
    assert timeline.ends[0][1] - timeline.ends[1][1] == 2 * 5000  # 2 steps x 1 more hop x 5 µs


@pytest.mark.parametrize("seed", range(30))
def test_runs_of_compute_nodes_set_at_once_give_the_node_by_node_schedule(seed):
    """The engine sets a run of compute nodes (each the only dependent of the one before) in
    one step; start, end and cause of every node must be what the node-by-node loop gives,
    also with ties (durations 0 and equal ends), nodes of several dependencies and collectives."""
    rng = random.Random(seed)
    ranks = rng.choice((2, 3, 4))
    collectives = rng.randint(0, 4)
    programs = {}
    for r in range(ranks):
        kinds = ["compute"] * rng.randint(3, 30) + ["collective"] * collectives
        rng.shuffle(kinds)
        nodes = []
        for nid, kind in enumerate(kinds):
            deps = sorted(rng.sample(range(nid), min(nid, rng.choice((0, 1, 1, 1, 1, 2, 3))))) if nid else []
            if kind == "compute":
                nodes.append(compute(nid, rng.choice((0, 100, 100, 200, 300)), deps=deps))
            else:
                nodes.append(coll(nid, CollType.ALL_REDUCE, rng.choice((0, 4096)), deps=deps))
        programs[r] = nodes
    trace = trace_of(programs)
    by_runs = Engine(trace, simple_net()).run()
    node_by_node = Engine(trace, simple_net(), runs=False).run()
    assert by_runs == node_by_node


def test_a_run_ending_with_a_collective_keeps_the_cause_of_their_common_dependent():
    """Rank 0 runs computes 0 -> 1 while its collective 2 waits for rank 1; both end at the same
    time and node 3 needs both. Node by node, the collective's end was scheduled first (when it
    started) and node 1's later, so node 1 is node 3's cause: the run must stop before node 1
    rather than schedule node 1's end ahead of the collective's."""
    net = simple_net()
    cost = net.collective_ns(CollType.ALL_REDUCE, 4096, 2, "dp")
    step = cost * 3 // 4
    rank1_compute = 2 * step - cost  # the collective starts then, before node 1 starts
    assert 0 < rank1_compute < step
    trace = ExecutionTrace()
    group = trace.add_group("dp", [0, 1])
    trace.ranks[0] = Rank(0, [compute(0, step), compute(1, step, deps=[0]),
                              coll(2, CollType.ALL_REDUCE, 4096, group=group.id), compute(3, 10, deps=[1, 2])])
    trace.ranks[1] = Rank(1, [compute(0, rank1_compute), coll(1, CollType.ALL_REDUCE, 4096, deps=[0], group=group.id)])
    starts, ends, cause = Engine(trace, net).run()
    assert ends[0][1] == ends[0][2] == 2 * step
    assert cause[0][3] == 1  # node 1 of rank position 0
    assert (starts, ends, cause) == Engine(trace, net, runs=False).run()


def test_memory_nodes_beside_the_compute_stream_count_once_as_busy():
    """Compute 0-1000 then 1000-1500; a memory load (issued at once, beside the stream)
    1000 ns from 0 and a store of 700 ns after the first compute (1000-1700); an all-reduce of
    two ranks (2 steps of 300 ns) after the second compute (1500-2100): busy 0-1700, exposed
    1700-2100."""
    from converters.model import Node

    nodes = [compute(0, 1000), compute(1, 500, deps=[0]),
             Node(2, "load", NodeKind.MEM_LOAD, duration_ns=1000),
             Node(3, "store", NodeKind.MEM_STORE, duration_ns=700, deps=[0]),
             coll(4, CollType.ALL_REDUCE, 0, deps=[1])]
    net = simple_net(latency=300)
    summary = schedule(shared_trace(2, nodes), network=net).summary
    row = summary["ranks"]["0"]
    assert row == {"finish_ns": 2100, "compute_ns": 1700, "exposed_comm_ns": 400, "idle_ns": 0}
