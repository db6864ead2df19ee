"""The planner's fast paths (lanes, drawing order, two-member flows) equal the plain definitions."""

import random

from converters.model import CollType, ExecutionTrace, Node, NodeKind, Rank
from converters.timeline import Timeline
from converters.writers.layout_chrome import drawing_order, place_lanes, plan_trace, thread_slots


def reference_order(starts, ends, parents):
    keys = sorted(zip(starts, [s - e for s, e in zip(starts, ends)], [p >= 0 for p in parents], range(len(starts))))
    return [k[3] for k in keys]


def reference_lanes(order, starts, ends, parents, bases):
    """(base, k) per position: the definition, one lane's stack at a time."""
    def fits(stack, start, end):
        while stack and stack[-1] <= start:
            stack.pop()
        if stack and end > stack[-1]:
            return False
        stack.append(end)
        return True

    lanes, lane_of = {}, [None] * len(starts)
    for i in order:
        start, end, p, placed = starts[i], ends[i], parents[i], None
        if p >= 0 and lane_of[p] is not None and starts[p] <= start and end <= ends[p]:
            base, k = lane_of[p]
            if fits(lanes[base][k], start, end):
                placed = lane_of[p]
        if placed is None:
            stacks = lanes.setdefault(bases[i], [])
            for k, stack in enumerate(stacks):
                if fits(stack, start, end):
                    placed = (bases[i], k)
                    break
            else:
                stacks.append([end])
                placed = (bases[i], len(stacks) - 1)
        lane_of[i] = placed
    return lane_of


def random_slices(rng, n, sorted_starts):
    starts = [rng.randrange(0, 40) for _ in range(n)]
    if sorted_starts:
        starts.sort()
    ends = [s + rng.choice((0, 1, 2, 5, 10, 30)) for s in starts]
    parents = [rng.randrange(-1, n) if rng.random() < 0.5 else -1 for _ in range(n)]
    parents = [-1 if p == i else p for i, p in enumerate(parents)]
    bases = [rng.choice(("compute", "tp", "dp")) for _ in range(n)]
    return starts, ends, parents, bases


def test_drawing_order_and_lanes_equal_the_definitions():
    rng = random.Random(7)
    for trial in range(600):
        n = rng.randrange(0, 40)
        starts, ends, parents, bases = random_slices(rng, n, sorted_starts=trial % 2 == 0)
        order = drawing_order(starts, ends, parents)
        assert order == reference_order(starts, ends, parents)
        lane_of, lanes = place_lanes(order, starts, ends, parents, bases)
        expected = reference_lanes(order, starts, ends, parents, bases)
        got = [next((b, lanes[b].index(lane)) for b in lanes if lane in lanes[b]) for lane in lane_of]
        assert got == expected
        threads, slot_of = thread_slots(lanes, 0)
        assert sorted(slot_of) == list(range(1, len(threads) + 1))


def test_two_member_collectives_flow_from_the_earlier_member():
    """TP-2 pairs take the fast path: the member that starts first (then lower rank) gets FLOW_OUT."""
    trace = ExecutionTrace()
    group = trace.add_group("tp", [0, 1])
    nodes = {r: [Node(k, "ar", NodeKind.COLLECTIVE, coll=CollType.ALL_REDUCE, size=64, group=group.id) for k in range(3)]
             for r in (0, 1)}
    for r in (0, 1):
        trace.ranks[r] = Rank(r, nodes=nodes[r])
    starts = {0: [0, 10, 20], 1: [5, 10, 15]}
    ends = {r: [s + 3 for s in starts[r]] for r in starts}
    plan = plan_trace(trace, None, None, Timeline(starts, ends, "scheduled"))
    flows = {p.rank: p.flows for p in plan.processes}
    assert plan.flow_count == 3
    assert flows[0] == {0: 1 << 2 | 1, 1: 2 << 2 | 1, 2: 3 << 2 | 2}
    assert flows[1] == {0: 1 << 2 | 2, 1: 2 << 2 | 2, 2: 3 << 2 | 1}


def test_a_member_with_fewer_collectives_leaves_the_later_instances_to_the_others():
    """A rank whose log was cut short has fewer collectives in a group: its instances k = 0, 1
    chain all three ranks, instance 2 only the other two (k_th_collectives: ragged members)."""
    trace = ExecutionTrace()
    group = trace.add_group("dp", [0, 1, 2])
    counts = {0: 3, 1: 2, 2: 3}
    for r, count in counts.items():
        trace.ranks[r] = Rank(r, nodes=[Node(k, "ar", NodeKind.COLLECTIVE, coll=CollType.ALL_REDUCE, size=64,
                                             group=group.id) for k in range(count)])
    starts = {0: [0, 10, 20], 1: [1, 11], 2: [2, 12, 22]}
    ends = {r: [s + 3 for s in starts[r]] for r in starts}
    plan = plan_trace(trace, None, None, Timeline(starts, ends, "scheduled"))
    flows = {p.rank: p.flows for p in plan.processes}
    out, step, into = 1, 3, 2
    assert plan.flow_count == 3
    assert flows[0] == {0: 1 << 2 | out, 1: 2 << 2 | out, 2: 3 << 2 | out}
    assert flows[1] == {0: 1 << 2 | step, 1: 2 << 2 | step}
    assert flows[2] == {0: 1 << 2 | into, 1: 2 << 2 | into, 2: 3 << 2 | into}
