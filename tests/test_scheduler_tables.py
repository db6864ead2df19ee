"""The scheduler's fast tables and event order against plain per-node rules.

`Program` keeps its per-node tables in compact forms (types and queues as bytes, the only
dependent of a node in `next_of`, run links as bytes); the loop keeps its ends as a heap of
distinct times with a bucket per time; the quotient looks at each distinct pair of values once.
These tests compare each with the obvious per-node computation, and pin the schedules of
random traces full of ties to what the engine gave before these forms (digests below).
"""

from __future__ import annotations

import hashlib
import json
import random

import pytest
from helpers.scheduler_synth import coll, compute, recv, send

from converters.model import CollType, ExecutionTrace, Node, NodeKind, Rank
from converters.scheduler import schedule
from converters.scheduler.engine import T_COLL, T_COMPUTE, T_OTHER, T_RECV, T_SEND, Engine, Program, _types_of
from converters.scheduler.network import Network
from converters.scheduler.quotient import _real_group, _zip_views

_PLAIN_TYPE = {NodeKind.COMPUTE: T_COMPUTE, NodeKind.COLLECTIVE: T_COLL, NodeKind.SEND: T_SEND, NodeKind.RECV: T_RECV}


def _random_nodes(rng: random.Random, count: int, contiguous: bool) -> list[Node]:
    """Nodes with 0..3 dependencies (some repeated, some missing), ids contiguous or not."""
    ids = list(range(5, 5 + count)) if contiguous else sorted(rng.sample(range(10 * count), count))
    if not contiguous and rng.random() < 0.3:
        rng.shuffle(ids)  # not ascending either
    kinds = (NodeKind.COMPUTE, NodeKind.COMPUTE, NodeKind.COMPUTE, NodeKind.COLLECTIVE, NodeKind.SEND,
             NodeKind.RECV, NodeKind.METADATA, NodeKind.MEM_LOAD)
    nodes = []
    for place, nid in enumerate(ids):
        deps = []
        for _ in range(rng.choice((0, 1, 1, 1, 1, 2, 3))):
            roll = rng.random()
            if roll < 0.05:
                deps.append(10**6 + place)  # missing
            elif place and roll < 0.6:
                deps.append(ids[place - 1])  # a chain
            elif place:
                deps.append(ids[rng.randrange(place)])
        if deps and rng.random() < 0.1:
            deps.append(deps[0])  # a repeated dependency counts once
        nodes.append(Node(nid, f"n{nid}", rng.choice(kinds), duration_ns=rng.choice((-5, 0, 100, 300)), deps=deps))
    return nodes


def _plain_tables(nodes: list[Node]):
    """Dependents, dependency counts and missing dependencies, one node at a time."""
    index = {}
    for i, node in enumerate(nodes):
        index.setdefault(node.id, i)
    dependents = [[] for _ in nodes]
    ndeps = [0] * len(nodes)
    missing = {}
    for i, node in enumerate(nodes):
        seen = set()
        for dep in node.deps:
            j = index.get(dep)
            if j is None:
                missing.setdefault(i, []).append(dep)
                ndeps[i] += 1
            elif j not in seen:
                seen.add(j)
                dependents[j].append(i)
                ndeps[i] += 1
    return dependents, ndeps, missing


@pytest.mark.parametrize("seed", range(40))
def test_program_tables_are_the_per_node_ones(seed):
    rng = random.Random(seed)
    nodes = _random_nodes(rng, rng.randint(0, 60), contiguous=seed % 2 == 0)
    prog = Program(nodes)
    dependents, ndeps, missing = _plain_tables(nodes)
    assert [prog.dependents(j) for j in range(len(nodes))] == dependents
    assert list(prog.ndeps) == ndeps
    assert prog.missing == missing
    assert list(prog.types) == [_PLAIN_TYPE.get(n.kind, T_OTHER) for n in nodes]
    assert prog.durations == [max(n.duration_ns, 0) for n in nodes]
    assert prog.roots() == [i for i, n in enumerate(ndeps) if n == 0]
    order = [i for i in prog.by_prio if prog.types[i] == T_COMPUTE]
    assert prog.compute_order == order
    linked = [dependents[a] == [b] and ndeps[b] == 1 for a, b in zip(order, order[1:])] + [False]
    assert list(prog.links()) == linked


def _structure(prog: Program) -> dict:
    return {name: getattr(prog, name) for name in ("types", *Program._STRUCTURE) if name != "index_of"} | {
        "index": [prog.index_of.get(n.id) for n in prog.nodes]}


def _variant(rng: random.Random, nodes: list[Node], change: str) -> list[Node]:
    """A copy of `nodes` with other durations (and peers), or with one id, kind or dependency changed."""
    copy = [Node(n.id, n.name, n.kind, duration_ns=rng.choice((-5, 0, 7, 300)), deps=list(n.deps), peer=rng.randrange(9))
            for n in nodes]
    if change and copy:
        node = rng.choice(copy)
        if change == "id":
            node.id += 10**7
        elif change == "kind":
            node.kind = NodeKind.COMPUTE if node.kind != NodeKind.COMPUTE else NodeKind.RECV
        else:
            node.deps = node.deps + [copy[0].id] if node.deps else [10**6]
    return copy


@pytest.mark.parametrize("seed", range(40))
def test_programs_of_one_structure_share_tables(seed):
    """A program whose ids, types and dependencies equal an earlier one's takes that one's tables;
    they are the tables it would build; its nodes and durations stay its own. Any other
    difference builds its own."""
    rng = random.Random(seed)
    nodes = _random_nodes(rng, rng.randint(0, 40), contiguous=seed % 2 == 0)
    shapes = {}
    first = Program(nodes, shapes)
    for change in ("", "", "id", "kind", "deps"):
        other_nodes = _variant(rng, nodes, change)
        other = Program(other_nodes, shapes)
        alone = Program(other_nodes)
        assert _structure(other) == _structure(alone)
        assert other.nodes is other_nodes and other.durations == alone.durations
        shared = not change or not nodes
        assert (other.next_of is first.next_of) == shared


def test_types_of_kinds_that_are_no_node_kind():
    """Plain ints, values past NodeKind's, negative ones and strings: the per-node rule."""
    kinds = [4, NodeKind.SEND, 9, 0, 300, "compute", None, 7]
    assert list(_types_of(kinds)) == [T_COMPUTE, T_SEND, T_OTHER, T_OTHER, T_OTHER, T_OTHER, T_OTHER, T_COLL]
    nodes = [Node(i, "n", kind) for i, kind in enumerate(kinds)]
    assert list(Program(nodes).types) == list(_types_of(kinds))
    assert list(_types_of([-1])) == [T_COLL]  # as the list index of before: the last value
    assert _types_of([]) == b""


def _views_one_by_one(rep: Rank, rank: Rank, comm: list[int]):
    """The quotient's group and peer views of a rank, one communication node at a time."""
    groups, peers = {}, {}
    for i in comm:
        node, mine = rep.nodes[i], rank.nodes[i]
        if node.kind == NodeKind.COLLECTIVE:
            gid = rank.group_of(mine)
            real = ("world",) if gid is None else gid
            if groups.setdefault(node.group, real) != real:
                return None
        else:
            real = rank.peer_of(mine)
            if peers.setdefault((int(node.kind), node.peer, node.tag), real) != real:
                return None
    return groups, peers


@pytest.mark.parametrize("seed", range(30))
def test_zip_views_are_the_node_by_node_views(seed):
    rng = random.Random(seed)
    count = rng.randint(1, 40)
    rep_nodes, rank_nodes = [], []
    for nid in range(count):
        kind = rng.choice((NodeKind.COLLECTIVE, NodeKind.SEND, NodeKind.RECV))
        if kind == NodeKind.COLLECTIVE:
            rep_group = rng.choice((None, 1, 2, 3))
            mine = rep_group if rng.random() < 0.8 else rng.choice((None, 1, 2, 4))
            rep_nodes.append(Node(nid, "c", kind, group=rep_group))
            rank_nodes.append(Node(nid, "c", kind, group=mine))
        else:
            peer, tag = rng.choice((0, 1, 2)), rng.choice((0, 1))
            mine = peer if rng.random() < 0.8 else rng.choice((0, 1, 3))
            rep_nodes.append(Node(nid, "p", kind, peer=peer, tag=tag))
            rank_nodes.append(Node(nid, "p", kind, peer=mine, tag=tag))
    rep = Rank(0, rep_nodes)
    rank = Rank(1, rank_nodes)
    if seed % 3 == 0:
        rank.group_map = {1: 11, 2: 12}
        rank.peer_map = {0: 5}
    comm = list(range(count))
    colls = [i for i in comm if rep_nodes[i].kind == NodeKind.COLLECTIVE]
    p2ps = [i for i in comm if rep_nodes[i].kind != NodeKind.COLLECTIVE]
    rep_groups = [rep_nodes[i].group for i in colls]
    rep_peers = [(int(rep_nodes[i].kind), rep_nodes[i].peer, rep_nodes[i].tag) for i in p2ps]
    expected = _views_one_by_one(rep, rank, comm)
    got = _zip_views(rank, colls, rep_groups, p2ps, rep_peers)
    if expected is None:
        assert got is None
    else:
        assert got is not None
        assert list(got[0].items()) == list(expected[0].items())  # same order too
        assert list(got[1].items()) == list(expected[1].items())
    assert _real_group(rank, None) == ("world",) and rank.real_peer(None) is None


def _net() -> Network:
    return Network({"default": {"bandwidth_gbps": 1e9 / 2**30, "latency_ns": 100, "chunks": 1,
                                "endpoint_delay_ns": 0, "local_mem_gbps": 1e12}})


def _tied_trace(seed: int) -> ExecutionTrace:
    """Ranks of compute chains, collectives in two groups, sends and receives; durations from a
    few round values, so that many nodes end at the same time."""
    rng = random.Random(seed)
    ranks = rng.randint(2, 6)
    trace = ExecutionTrace()
    halves = [trace.add_group("dp", list(range(0, ranks, 2))), trace.add_group("tp", list(range(1, ranks, 2)))]
    for r in range(ranks):
        group = halves[r % 2].id
        nodes, nid, prev = [], 0, None
        for step in range(4):
            for _ in range(rng.randint(1, 5)):
                nodes.append(compute(nid, rng.choice((0, 100, 200)), deps=[prev] if prev is not None else []))
                prev, nid = nid, nid + 1
            if ranks > 1 and r + 1 < ranks:
                nodes.append(send(nid, dst=r + 1, size=rng.choice((0, 100)), tag=step, deps=[prev]))
                nid += 1
            if r > 0:
                nodes.append(recv(nid, src=r - 1, size=100, tag=step, deps=[prev]))
                prev, nid = nid, nid + 1
            nodes.append(coll(nid, CollType.ALL_REDUCE, rng.choice((0, 100)), deps=[prev], group=group))
            prev, nid = nid, nid + 1
        trace.ranks[r] = Rank(r, nodes)
    trace.parallel.world = ranks
    return trace


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


# What the engine gave before the compact tables and the bucketed ends (commit 60489ea).
_BEFORE = {0: "1776df263f526408", 1: "6b04eac62df9c439", 2: "97cfa6684369eded", 3: "9bb728ed7553670f",
           4: "30008bbfba202459", 5: "dd3e05e96a38184d", 6: "8c1a90ff32ed3096", 7: "0c4883322df2800a"}


@pytest.mark.parametrize("seed", sorted(_BEFORE))
def test_schedules_with_many_ties_are_what_they_were(seed):
    trace = _tied_trace(seed)
    starts, ends, cause = Engine(trace, _net()).run()
    timeline = schedule(trace, network=_net())
    assert _digest([starts, ends, cause, timeline.summary]) == _BEFORE[seed]
    assert (starts, ends, cause) == Engine(trace, _net(), runs=False).run()


def _replica_trace(seed: int) -> ExecutionTrace:
    """Pipeline stages of data-parallel replicas: the replicas of a stage have one structure
    (ids, kinds, dependencies) but their own node lists, durations and peers."""
    rng = random.Random(seed)
    stages, dp = rng.randint(1, 3), rng.randint(2, 4)
    trace = ExecutionTrace()
    for s in range(stages):
        group = trace.add_group("dp", [d + dp * s for d in range(dp)]).id
        for d in range(dp):
            r = d + dp * s
            nodes, nid, prev = [], 0, None
            for m in range(3):
                if s > 0:
                    nodes.append(recv(nid, src=r - dp, size=100, tag=m, deps=[prev] if prev is not None else []))
                    prev, nid = nid, nid + 1
                for _ in range(4):
                    nodes.append(compute(nid, rng.choice((0, 100, 200, 300)), deps=[prev] if prev is not None else []))
                    prev, nid = nid, nid + 1
                if s < stages - 1:
                    nodes.append(send(nid, dst=r + dp, size=rng.choice((0, 100)), tag=m, deps=[prev]))
                    nid += 1
            nodes.append(coll(nid, CollType.ALL_REDUCE, 100, deps=[prev], group=group))
            nodes.append(coll(nid + 1, CollType.ALL_REDUCE, 100, deps=[prev, nid], group=group))
            trace.ranks[r] = Rank(r, nodes)
    trace.parallel.world = stages * dp
    return trace


@pytest.mark.parametrize("seed", range(12))
def test_replicas_sharing_tables_schedule_as_with_their_own(seed):
    """The engine builds one set of tables per structure; the schedule is the one of programs
    that each built their own."""
    trace = _replica_trace(seed)
    shared = Engine(trace, _net())
    assert shared.progs[0].next_of is shared.progs[1].next_of  # replicas of stage 0
    alone = Engine(trace, _net())
    alone.progs = [Program(rank.nodes) for rank in alone.ranks]
    assert shared.run() == alone.run()
    assert shared.run() == Engine(trace, _net(), runs=False).run()
