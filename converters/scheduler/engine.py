"""The event loop that gives every node of every rank a start and an end.

Rules (ASTRA-sim's, so that our timelines agree with what it would compute):
- Each rank has one compute stream and one communication slot. At most one collective or
  send is in flight per rank; receives, metadata and memory nodes need no slot.
- A node is ready when every node in its `deps` has finished. Among ready nodes that want the
  same stream, the one first in program order (ascending node id) goes first.
- The k-th collective a rank issues in a group meets the k-th of every other member: the
  instance starts when the last member issues it and ends for all members together. Group
  None means every rank of the trace. Several collectives issued together run one after
  another in issue order, as they do in ASTRA-sim (measured; see network.py).
- With a ring network (`topology = "ring"`) a collective costs what its members' places on the
  ring of all ranks (0 .. highest rank) make it cost, and a send what its hops do; ranks of one
  role are then only run once when their groups and peers lie alike on the ring.
- Sends are eager: a send occupies its rank's slot for the transfer time and then completes,
  whether or not the receive was posted. The k-th send on (src, dst, tag) meets the k-th
  receive; the receive ends at max(its issue, the send's end). A fused exchange (a send and a
  receive with no dependency between them) therefore never blocks either side.
- Collective starts shown in the timeline are the instance starts (waiting for the other
  members shows as idle time); a receive starts when its data starts to move.

Ranks that share one node list also share the per-list tables (dependents, issue order) so
that a 1024-rank job of 16 pipeline stages builds 16 tables, not 1024; node lists of their own
that are equal in ids, types and dependencies (data-parallel replicas whose measured durations
differ) share them too, and keep only their nodes and durations (`Program`). When ranks of one role
are bound to behave alike, the loop runs only one representative per role (quotient.py);
`Engine(trace, network)` without a quotient runs every rank.

Speed: a run of compute nodes, each the only dependent of the one before, is set in one step
once its first node starts ahead of every other compute node of its rank (Program._find_runs):
one event per run instead of one per node, the same starts, ends and causes to the nanosecond
(`Engine(..., runs=False)` gives the node-by-node loop the tests compare with). A program's
tables avoid a Python object per node where they can (types, queues and run links are bytes;
`next_of` holds a node's only dependent), and the ends to come are a heap of distinct times
with a bucket of nodes per time (ints compare faster than tuples; the members of a collective
end together under one entry). tests/test_scheduler_tables.py checks each form against the
plain per-node rule.

The loop in C (`_loop.c`, built by setup.py where a compiler is) follows `Engine._python_run`
step for step, runs of compute nodes included; what needs Python (groups, costs, channel
keys) is looked up before it runs, once per distinct collective and per send or receive
(`_talk_tables`), and handed over one rank at a time (`_native_inputs`); the loop adds
up what the summary needs (merged communication stretches, traffic per group and type). It
declines, and the Python loop runs, wherever the Python loop would raise or stall: its error
or deadlock report is then the same as without the C module. tests/test_scheduler_c.py holds
the two loops to the same starts, ends, causes and summary.

For every node the loop also records its *cause*, the node whose end let it start (its last
dependency, the previous node on its stream, the last member to issue a collective, or the
send of a receive); following causes back from the last node gives the critical path.
"""

from __future__ import annotations

import heapq
from collections import deque
from itertools import accumulate, compress
from typing import Any, Iterator

from ..diagnostics import InputError
from ..model import CollType, ExecutionTrace, Node, NodeKind, Rank
from ..positions import positions
from .columns import columns, distinct_at
from .deadlock import MAX_CHAIN, Deadlock, Wait, wait_chain
from .network import Network, ring_distance, ring_hops
from .quotient import WORLD, Quotient

try:  # the loop in C (_loop.c), which setup.py builds where it can; else the Python loop runs
    from . import _loop
except ImportError:
    _loop = None

# What a node needs to run.
T_COMPUTE, T_COLL, T_SEND, T_RECV, T_OTHER = 0, 1, 2, 3, 4
_TYPE_OF = {
    NodeKind.COMPUTE: T_COMPUTE,
    NodeKind.COLLECTIVE: T_COLL,
    NodeKind.SEND: T_SEND,
    NodeKind.RECV: T_RECV,
}
# The same by NodeKind value: indexing a list with an IntEnum is several times faster than
# hashing it (Enum.__hash__ is Python code).
_TYPE_BY_VALUE = [_TYPE_OF.get(value, T_OTHER) for value in range(max(NodeKind) + 1)]
# Which per-rank queue a ready node waits in: the compute stream, the communication slot, or
# none (issued at once).
Q_COMPUTE, Q_COMM, Q_FREE = 0, 1, 2
_QUEUE_BY_TYPE = (Q_COMPUTE, Q_COMM, Q_COMM, Q_FREE, Q_FREE)  # indexed by T_*
# Node states.
S_WAITING, S_READY, S_ISSUED, S_DONE = 0, 1, 2, 3


def _table(value_of) -> bytes:
    """A `bytes.translate` table: byte v becomes value_of(v)."""
    return bytes(value_of(v) for v in range(256))


# A program's types are one byte per node, so that tables over them (queues, which nodes
# compute, which talk) are made by `bytes.translate` and `compress` without a Python step per node.
_TYPE_TABLE = _table(lambda v: _TYPE_BY_VALUE[v] if v < len(_TYPE_BY_VALUE) else T_OTHER)  # NodeKind value -> T_*
_QUEUE_TABLE = _table(lambda t: _QUEUE_BY_TYPE[t] if t < len(_QUEUE_BY_TYPE) else Q_FREE)  # T_* -> Q_*
IS_COMPUTE = _table(lambda t: t == T_COMPUTE)  # T_* -> 1 for compute nodes
IS_TALK = _table(lambda t: t in (T_COLL, T_SEND, T_RECV))  # T_* -> 1 for communication nodes
IS_COLL_OR_SEND = _table(lambda t: t in (T_COLL, T_SEND))  # T_* -> 1 for nodes that use the comm slot
IS_COLL = _table(lambda t: t == T_COLL)  # T_* -> 1 for collectives
IS_P2P = _table(lambda t: t in (T_SEND, T_RECV))  # T_* -> 1 for sends and receives


def indices(types: bytes, table: bytes) -> list[int]:
    """Positions whose type the table maps to 1."""
    return list(compress(positions(len(types)), types.translate(table)))


_DONE_BYTES = bytes([S_DONE]) * 256  # slices of it mark a run's nodes done

NO_CAUSE = -1
NO_DEPENDENT, SEVERAL = -1, -2  # Program.next_of


class _LookupRefused(Exception):
    """A communication node's group, peer or cost lookup raised before the C loop ran."""


class _Contiguous:
    """Node id -> index for ids base, base + 1, ... (the `get` of a dict that is not built)."""

    __slots__ = ("base", "count")

    def __init__(self, base: int, count: int):
        self.base, self.count = base, count

    def get(self, nid: int, default=None):
        j = nid - self.base
        return j if 0 <= j < self.count else default


class Program:
    """What every rank running one node list has in common.

    The tables that a list's ids, types and dependencies decide (its *structure*) are built
    once per distinct structure: ranks of one stage or data-parallel replicas often differ only
    in durations and peers, and comparing three lists costs a fraction of building the tables.
    `shapes` (types -> (ids, dependencies, program) of the programs already built) is where a
    new program looks for an equal structure; None builds every table.
    """

    __slots__ = ("nodes", "types", "queue", "durations", "ndeps", "next_of", "more", "prio", "by_prio", "missing",
                 "index_of", "compute_order", "linked", "ascending", "_roots")

    # The tables copied from a program of equal structure.
    _STRUCTURE = ("queue", "ndeps", "next_of", "more", "prio", "by_prio", "missing", "index_of", "compute_order",
                  "linked", "ascending", "_roots")

    def __init__(self, nodes: list[Node], shapes: dict[bytes, list[tuple[list, list, Program]]] | None = None):
        self.nodes = nodes
        ids, deps, kinds, durations = columns(nodes, ("id", "deps", "kind", "duration_ns"))
        self.types = types = _types_of(kinds)
        # A negative time would run the clock back.
        if durations and min(durations) < 0:  # (durations are ints: 0 needs no change)
            durations = [d if d > 0 else 0 for d in durations]
        self.durations = durations
        if shapes is not None:
            same = shapes.setdefault(types, [])
            for other_ids, other_deps, other in same:
                if other_ids == ids and other_deps == deps:
                    for name in self._STRUCTURE:
                        setattr(self, name, getattr(other, name))
                    self.types = other.types
                    return
            same.append((ids, deps, self))
        self._build(ids, deps)

    def _build(self, ids: list[int], deps_of: list[list[int]]) -> None:
        """The structure's tables."""
        types = self.types
        count = len(ids)
        # Sets written with one id counter per rank number their nodes base, base + 1, ...:
        # then a dependency's index is its id - base and no table is needed.
        base = ids[0] if ids else 0
        contiguous = ids == list(range(base, base + count))
        index_of: dict[int, int] = {}
        if not contiguous:
            for i, nid in enumerate(ids):
                index_of.setdefault(nid, i)
        self.index_of = _Contiguous(base, count) if contiguous else index_of
        self.queue = types.translate(_QUEUE_TABLE)
        self.next_of, self.more, self.ndeps, self.missing = dependents(deps_of, base, None if contiguous else index_of)
        # Issue order: ascending node id (ties: position), as ASTRA-sim's feeder does.
        self.ascending = contiguous or all(a < b for a, b in zip(ids, ids[1:]))
        if self.ascending:
            self.by_prio = positions(count)
            self.prio = self.by_prio
        else:
            self.by_prio = sorted(positions(count), key=lambda i: (ids[i], i))
            self.prio = [0] * count
            for p, i in enumerate(self.by_prio):
                self.prio[i] = p
        self._find_runs()
        self._roots = self._find_roots()

    def _find_runs(self) -> None:
        """Runs of compute nodes that, once the first starts, run back to back.

        `compute_order` lists the compute nodes in issue order; `links()[c]` says the node at
        place c + 1 continues the node at place c: its only dependency is that node and it is
        that node's only dependent. When a run's first node starts and every compute node before it in issue
        order has started, nothing else can take the compute stream until the run ends (every
        other compute node comes later in issue order), and the run's inner ends release only
        the next node of the run: the loop then sets the whole run at once and keeps one
        event, at its end (`run_from`).
        """
        types = self.types
        if self.ascending:
            order = indices(types, IS_COMPUTE)
        else:
            order = [i for i in self.by_prio if types[i] == T_COMPUTE]
        self.compute_order = order
        self.linked = None  # (made when the Python loop first needs it: the C loop reads the links itself)

    def links(self) -> bytes:
        """One byte per place in `compute_order`: 1 where the next place continues the run, so
        that a run's end is found by `bytes.find` (memchr). The last place is never linked."""
        if self.linked is None:
            order, ndeps, next_of = self.compute_order, self.ndeps, self.next_of
            self.linked = bytes([next_of[a] == b and ndeps[b] == 1 for a, b in zip(order, order[1:])] + [False])
        return self.linked

    def run_from(self, place: int) -> int:
        """The last place of the run that starts at `place`. The last node kept must have no
        dependent with several dependencies (whose cause depends on the order of events at one
        time), else the run stops one node earlier."""
        end = self.links().find(0, place)
        if end > place:
            j = self.compute_order[end]
            k = self.next_of[j]
            if (self.ndeps[k] > 1) if k >= 0 else (k == SEVERAL and any(self.ndeps[d] > 1 for d in self.more[j])):
                end -= 1
        return end

    def roots(self) -> list[int]:
        """Indices of the nodes without dependencies, ascending (shared: never change it)."""
        return self._roots

    def _find_roots(self) -> list[int]:
        """The roots (a few: found by C-level scans)."""
        ndeps, found, i = self.ndeps, [], -1
        for _ in range(ndeps.count(0)):
            i = ndeps.index(0, i + 1)
            found.append(i)
        return found

    def dependents(self, j: int) -> list[int]:
        """Indices of the nodes that depend on node j, ascending."""
        k = self.next_of[j]
        return [k] if k >= 0 else self.more.get(j, [])


def dependents(deps_of: list, base: int, index_of: dict[int, int] | None) -> tuple[list[int], dict, list[int], dict]:
    """(next_of, more, ndeps, missing) of a program whose nodes depend on `deps_of`'s ids, which
    are node indices plus `base` (index_of None: ids base, base + 1, ...) or index_of's keys.

    Most nodes have one dependent (the next of a chain) or none, so `next_of[j]` holds the only
    one's index (or NO_DEPENDENT, or SEVERAL and then `more[j]` lists them, ascending): no list
    object per node. `ndeps[i]` counts node i's distinct dependencies, and `missing[i]` lists
    those that do not exist (counted too: they can never be satisfied). In C where it was built
    (_loop.dependents); the Python below is its specification."""
    places = positions(len(deps_of))  # the tables' ints shared, not made per node
    if _loop is not None:
        found = _loop.dependents(deps_of, places, base, index_of)
        if found is not None:
            return found
    count = len(deps_of)
    next_of = [NO_DEPENDENT] * count
    more: dict[int, list[int]] = {}
    ndeps = [0] * count
    missing: dict[int, list[int]] = {}
    for i, deps in zip(places, deps_of):
        if not deps:
            continue
        if len(deps) == 1 and index_of is None:  # (most nodes: the rule below, without its set)
            j = deps[0] - base
            if 0 <= j < count:
                _add_dependent(next_of, more, j, i)
            else:
                missing[i] = [deps[0]]
            ndeps[i] = 1
            continue
        seen = set()
        for dep in deps:
            j = dep - base if index_of is None else index_of.get(dep)
            if j is None or not 0 <= j < count:
                missing.setdefault(i, []).append(dep)
                ndeps[i] += 1
            elif j not in seen:
                seen.add(j)
                _add_dependent(next_of, more, j, i)
                ndeps[i] += 1
    return next_of, more, ndeps, missing


def _add_dependent(next_of: list[int], more: dict[int, list[int]], j: int, i: int) -> None:
    """Record that node i depends on node j."""
    k = next_of[j]
    if k == NO_DEPENDENT:
        next_of[j] = i
    else:
        if k >= 0:
            more[j] = [k]
            next_of[j] = SEVERAL
        more[j].append(i)


def _types_of(kinds: list) -> bytes:
    """T_* of every node kind, one byte each (kinds are NodeKind members: their values are bytes)."""
    try:
        return bytes(kinds).translate(_TYPE_TABLE)
    except (ValueError, TypeError):  # a kind that is no NodeKind
        pass
    try:
        return bytes([_TYPE_BY_VALUE[kind] for kind in kinds])
    except (IndexError, TypeError):
        return bytes([_TYPE_OF.get(kind, T_OTHER) for kind in kinds])


class Engine:
    """One scheduling run over all ranks of a trace."""

    def __init__(self, trace: ExecutionTrace, network: Network, quotient: Quotient | None = None,
                 runs: bool = True, native: bool = True, timeline: bool = True):
        self.trace = trace
        self.runs = runs  # set runs of compute nodes at once (Program._find_runs); False: node by node
        # The loop in C where it was built (_loop.c); False, or runs=False, runs the Python loop.
        self.native = native and runs
        # False: only whether every node can run (the dry run); the C loop then makes no
        # per-node lists and `run` gives empty ones (the Python loop makes them regardless).
        self.timeline = timeline
        # Set by the C loop for summary.py, per position: when its communication ran (merged
        # stretches) and its traffic per (group, type) as (first node, count, bytes, busy ns).
        self.talking: list[list[tuple[int, int]]] | None = None
        self.traffic: list[list[tuple[int, int, int, int]]] | None = None
        self.net = network
        self.q = quotient
        # With a quotient only the representatives run; position r is then class r.
        self.ranks: list[Rank] = quotient.reps if quotient else trace.sorted_ranks()
        self.rank_ids = [r.rank for r in self.ranks]
        self.pos_of = {r: i for i, r in enumerate(self.rank_ids)}
        programs: dict[int, Program] = {}
        shapes: dict[bytes, list[tuple[list, list, Program]]] = {}  # see Program
        self.progs: list[Program] = []
        for rank in self.ranks:
            key = id(rank.nodes)
            if key not in programs:
                programs[key] = Program(rank.nodes, shapes)
            self.progs.append(programs[key])
        self.unique_programs = len(programs)
        # ASTRA-sim's ring holds one NPU per rank file: ranks 0 .. highest.
        self.ring_size = max(trace.ranks, default=0) + 1
        self.world = tuple(range(len(self.ranks)))
        self._members: dict[int | None, tuple[int, ...]] = {None: self.world}
        self._coll_cache: list[dict[Any, tuple]] = [{} for _ in self.ranks]

    def class_members(self, r: int) -> list[int]:
        """The real ranks whose timeline is position r's."""
        return self.q.classes[r] if self.q else [self.rank_ids[r]]

    # ------------------------------------------------------------------ helpers

    def members(self, gid: int | None, rank: Rank, node: Node) -> tuple[int, ...]:
        """Rank positions of the group's members."""
        cached = self._members.get(gid)
        if cached is not None:
            return cached
        group = self.trace.groups.get(gid)
        if group is None:
            raise InputError(node.source, f"rank {rank.rank} node {node.id} \"{node.name}\" uses group {gid}, which is not defined")
        positions = []
        for m in group.members:
            p = self.pos_of.get(m)
            if p is None:
                raise InputError(node.source, f"group {group.label} names rank {m}, which is not in the trace")
            positions.append(p)
        cached = self._members[gid] = tuple(positions)
        return cached

    def coll_info(self, r: int, node: Node) -> tuple[Any, int, int, str, tuple[int, ...] | None, dict]:
        """(instance key, issuers needed, group size, group kind, ring hops or None, costs) of a
        collective on position r; `costs` caches the cost by (collective, size)."""
        cache = self._coll_cache[r]
        info = cache.get(node.group)
        if info is None:
            rank = self.ranks[r]
            gid = rank.group_of(node)
            kind = self.kind_of(gid, node)
            if self.q is not None:
                key = self.q.group_class[WORLD if gid is None else gid]
                info = (key, self.q.needed[key], self.q.size[key], kind, self.hops_of(gid, self.q.size[key], kind), {})
            else:
                members = self.members(gid, rank, node)
                if len(members) > 1 and r not in members:
                    raise InputError(node.source, f"rank {rank.rank} node {node.id} \"{node.name}\" is a collective in "
                                     f"group {self.trace.groups[gid].label}, which does not include rank {rank.rank}")
                info = (gid, len(members), len(members), kind, self.hops_of(gid, len(members), kind), {})
            cache[node.group] = info
        return info

    def hops_of(self, gid: int | None, size: int, kind: str) -> tuple[int, ...] | None:
        """The group's ring edge lengths when its kind's network is a ring of all ranks."""
        if not self.net.on_ring(kind, size):
            return None
        members = tuple(sorted(self.trace.ranks)) if gid is None else self.trace.groups[gid].members
        return ring_hops(members, self.ring_size)

    def send_ns(self, r: int, node: Node) -> int:
        rank = self.ranks[r]
        kind = self.kind_of(rank.group_of(node), node)
        hops = ring_distance(rank.rank, rank.peer_of(node), self.ring_size) if self.net.on_ring(kind) else 1
        return self.net.p2p_ns(node.size, kind, hops)

    def channel_key(self, r: int, node: Node, sending: bool) -> tuple:
        """(src, dst, tag) of a send or receive on position r; ranks, or classes with a quotient."""
        rank = self.ranks[r]
        peer = rank.peer_of(node)
        if self.q is not None:
            me, peer = r, self.q.class_of[peer]
        else:
            me = rank.rank
        return (me, peer, node.tag) if sending else (peer, me, node.tag)

    def kind_of(self, gid: int | None, node: Node) -> str:
        if gid is None:
            return "pp" if node.kind in (NodeKind.SEND, NodeKind.RECV) else "all"
        return self.trace.group_kind(gid) or "default"

    # ------------------------------------------------------------------ the loop

    def run(self) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
        """(starts, ends, cause) per rank position; raise Deadlock when a rank cannot finish."""
        if self.native and _loop is not None:
            done = self._native_run()
            if done is not None:
                return done
        return self._python_run()

    def _native_run(self) -> tuple[list[list[int]], list[list[int]], list[list[int]]] | None:
        """The loop in C (_loop.c), or None where the Python loop must run: a node whose group or
        peer it would refuse when it met it, a rank that cannot finish (the report is made in
        Python), a time past 62 bits."""
        progs = self.progs
        stride = max((len(p.nodes) for p in progs), default=0) + 1
        groups: dict[Any, int] = {}
        channels: dict[tuple, int] = {}
        firsts: list[list[int]] = []
        try:
            out = _loop.run(self._native_inputs(groups, channels, firsts), len(progs), stride, groups, channels,
                            self.timeline)
        except _LookupRefused:
            return None
        if out is None:
            return None
        self.stride = stride
        self.state = [bytearray([S_DONE]) * len(p.nodes) for p in progs]
        self.done = [len(p.nodes) for p in progs]
        self._pending_instances, self._recvs_waiting = {}, {}
        if out is True:
            return [], [], []
        starts, ends, cause, self.computing, self.talking, traffic = out
        if None not in traffic:  # (a sum past 64 bits: summary.py sums in Python)
            self.traffic = [[(i, *sums) for i, sums in zip(first, classes)] for first, classes in zip(firsts, traffic)]
        return starts, ends, cause

    def _native_inputs(self, groups: dict, channels: dict, firsts: list[list[int]]) -> Iterator[tuple]:
        """Per rank position, its program's tables and those of its communication nodes
        (`_talk_tables`), one position at a time (the C loop copies each before it takes the
        next); `groups` and `channels` number what the nodes use, `firsts` gets each position's
        first node of each traffic class. A lookup that raises ends it with _LookupRefused: the
        Python loop raises it only if it reaches the node (a deadlock can come first)."""
        for r, prog in enumerate(self.progs):
            try:
                talk, first = self._talk_tables(r, prog, groups, channels)
            except Exception as error:  # noqa: BLE001 (whatever it is, the Python loop meets it, or not)
                raise _LookupRefused from error
            firsts.append(first)
            ascending = prog.ascending
            yield (prog.types, prog.queue, prog.durations, prog.ndeps, prog.next_of, prog.more,
                   None if ascending else prog.prio, None if ascending else prog.by_prio, prog.compute_order,
                   prog.roots(), *talk)

    def _talk_tables(self, r: int, prog: Program, groups: dict, channels: dict) -> tuple[tuple[list, ...], list[int]]:
        """Position r's communication nodes, and for each a row of what the Python loop looks up
        when it issues it: a collective's instance group (numbered in `groups`), issuers needed
        and cost, a send's or receive's channel (numbered in `channels`) and a send's cost; and
        for the summary its traffic class (summary._gather_traffic's gathering by group and
        type; -1 for a receive) and bytes. (positions, row of each, rows), and the first node
        of each class. Collectives alike in group, collective and size share a row: a log's
        are nearly every node, and distinct_at tells them apart without a Python step each."""
        nodes, types = prog.nodes, prog.types
        colls = indices(types, IS_COLL)
        index, leaders = distinct_at(nodes, ("group", "coll", "size"), colls)
        rows: list[tuple[int, int, int, int, int]] = []
        first: list[int] = []
        by_group: dict[Any, tuple] = {}  # node.group -> (number, needed, costs, coll_info, class)
        for j in leaders:
            node = nodes[colls[j]]
            found = by_group.get(node.group)
            if found is None:
                info = self.coll_info(r, node)
                first.append(colls[j])
                found = by_group[node.group] = (groups.setdefault(info[0], len(groups)), info[1], info[5], info,
                                                len(first) - 1)
            number, needed, costs, info, kind = found
            ns = costs.get((node.coll, node.size))
            if ns is None:
                ns = costs[(node.coll, node.size)] = self.net.collective_ns(node.coll, node.size, *info[2:5])
            rows.append((number, needed, ns, kind, node.size))
        p2p = indices(types, IS_P2P)
        classes: dict[tuple, int] = {}  # (node.group, type) -> class of sends
        send_costs: dict[tuple, int] = {}  # (as issue_send caches them)
        for i in p2p:
            node = nodes[i]
            sending = types[i] == T_SEND
            channel = channels.setdefault(self.channel_key(r, node, sending), len(channels))
            index.append(len(rows))
            if not sending:
                rows.append((channel, 0, 0, -1, 0))
                continue
            kind = classes.get((node.group, T_SEND))
            if kind is None:
                first.append(i)
                kind = classes[(node.group, T_SEND)] = len(first) - 1
            ns = send_costs.get((node.group, node.peer, node.size))
            if ns is None:
                ns = send_costs[(node.group, node.peer, node.size)] = self.send_ns(r, node)
            rows.append((channel, 0, ns, kind, node.size))
        return (colls + p2p, index, rows), first

    def _python_run(self) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
        """The loop in Python: the specification _loop.c follows."""
        ranks, progs, net, runs = self.ranks, self.progs, self.net, self.runs
        nranks = len(ranks)
        stride = self.stride = max((len(p.nodes) for p in progs), default=0) + 1

        state = [bytearray(len(p.nodes)) for p in progs]
        remaining = [list(p.ndeps) for p in progs]
        starts = [[0] * len(p.nodes) for p in progs]
        ends = [[0] * len(p.nodes) for p in progs]
        cause = [[NO_CAUSE] * len(p.nodes) for p in progs]
        # Per rank: heaps of ready priorities for the compute stream, the comm slot, and the rest.
        queues: list[tuple[list[int], list[int], list[int]]] = [([], [], []) for _ in ranks]
        busy = [[False, False] for _ in ranks]  # compute stream, comm slot
        last = [[NO_CAUSE, NO_CAUSE] for _ in ranks]  # encoded node that last freed each
        done = [0] * nranks
        # Per rank: when its compute stream is busy, as [start, end] in time order (the summary's
        # compute time without sorting every node).
        computing: list[list[list[int]]] = [[] for _ in ranks]
        first_unstarted = [0] * nranks  # per rank: place in compute_order of the first compute node not started
        coll_count: list[dict[Any, int]] = [{} for _ in ranks]
        instances: dict[tuple[Any, int], list] = {}  # (gid, k) -> [needed, entries, cost, cause]
        # (src, dst, tag) -> the sends that wait for their receive, or the receives that wait for
        # their send, in issue order; a channel with nothing waiting has no entry (most meet at
        # once: a job holds tens of thousands of channels, and two deques each filled the caches).
        sends_waiting: dict[tuple[Any, Any, Any], deque] = {}
        recvs_waiting: dict[tuple[Any, Any, Any], deque] = {}
        # Ends to come: a heap of distinct times, and per time the nodes that end then, as
        # rank position, node index, ... in the order they were set (ties end in that order;
        # the members of a collective all end at once: one heap entry).
        times: list[int] = []
        ending: dict[int, list[int]] = {}
        push = heapq.heappush
        pop = heapq.heappop
        coll_info, coll_cache = self.coll_info, self._coll_cache
        channel_key = self.channel_key

        send_ns_of: list[dict[tuple, int]] = [{} for _ in ranks]  # per position: (group, peer, size) -> ns
        send_ns = self.send_ns

        def finish_recv(r: int, i: int, posted: int, sent: int, arrived: int, sr: int, si: int) -> None:
            starts[r][i] = sent if sent > posted else posted
            end = ends[r][i] = arrived if arrived > posted else posted
            if arrived >= posted:
                cause[r][i] = sr * stride + si
            bucket = ending.get(end)
            if bucket is None:
                ending[end] = [r, i]
                push(times, end)
            else:
                bucket += (r, i)

        def issue_collective(r: int, i: int, t: int, node: Node) -> None:
            gkey, needed, size, kind, hops, costs = coll_cache[r].get(node.group) or coll_info(r, node)
            cost_key = (node.coll, node.size)
            cost = costs.get(cost_key)
            if cost is None:
                cost = costs[cost_key] = net.collective_ns(node.coll, node.size, size, kind, hops)
            if needed <= 1:
                # This rank is the only issuer the instance waits for (a group whose members
                # are all of this representative's class, or of one member): it starts now,
                # ends after its cost, its cause stays its own; no other rank ever looks up
                # this group's instances, so none is made.
                starts[r][i] = t
                end = ends[r][i] = t + cost if cost > 0 else t
                bucket = ending.get(end)
                if bucket is None:
                    ending[end] = [r, i]
                    push(times, end)
                else:
                    bucket += (r, i)
                return
            counts = coll_count[r]
            k = counts.get(gkey, 0)
            counts[gkey] = k + 1
            key = (gkey, k)
            inst = instances.get(key)
            if inst is None:
                inst = instances[key] = [needed, [], 0, NO_CAUSE]
            entries = inst[1]
            entries.append((r, i))
            if cost > inst[2]:
                inst[2] = cost
            inst[3] = cause[r][i]  # the last member to issue decides the start
            if len(entries) >= inst[0]:
                del instances[key]
                end = t + inst[2]
                how = inst[3]
                bucket = ending.get(end)
                if bucket is None:
                    bucket = ending[end] = []
                    push(times, end)
                for r2, i2 in entries:
                    starts[r2][i2] = t
                    ends[r2][i2] = end
                    cause[r2][i2] = how
                    bucket += (r2, i2)

        def issue_send(r: int, i: int, t: int, node: Node) -> None:
            # The cost depends on the rank's group and peer for the node's and its size only.
            costs = send_ns_of[r]
            cost_key = (node.group, node.peer, node.size)
            cost = costs.get(cost_key)
            if cost is None:
                cost = costs[cost_key] = send_ns(r, node)
            starts[r][i] = t
            end = ends[r][i] = t + cost
            bucket = ending.get(end)
            if bucket is None:
                ending[end] = [r, i]
                push(times, end)
            else:
                bucket += (r, i)
            key = channel_key(r, node, True)
            recvs = recvs_waiting.get(key)
            if recvs is not None:
                r2, i2, posted = recvs.popleft()
                if not recvs:
                    del recvs_waiting[key]
                finish_recv(r2, i2, posted, t, end, r, i)
            else:
                sends = sends_waiting.get(key)
                if sends is None:
                    sends = sends_waiting[key] = deque()
                sends.append((t, end, r, i))

        def post_recv(r: int, i: int, t: int, node: Node) -> None:
            key = channel_key(r, node, False)
            sends = sends_waiting.get(key)
            if sends is not None:
                sent, arrived, r2, i2 = sends.popleft()
                if not sends:
                    del sends_waiting[key]
                finish_recv(r, i, t, sent, arrived, r2, i2)
            else:
                recvs = recvs_waiting.get(key)
                if recvs is None:
                    recvs = recvs_waiting[key] = deque()
                recvs.append((r, i, t))

        def run_compute(r: int, prog: Program, c: int, i: int, end: int) -> tuple[int, int]:
            """Start the rest of the run of compute nodes that node i (place c) begins, one
            after another from `end`; the last node and its end, for the one event kept."""
            order, durations = prog.compute_order, prog.durations
            last_place = prog.run_from(c)
            # A last node of no duration would end at the time it starts: node by node, its end
            # comes in a later batch of that time than the one that starts it; kept here, it would
            # be released with that batch, and a rank could then issue a collective in an earlier
            # batch than the node-by-node loop (another member's cause). It starts on its own.
            while last_place > c and not durations[order[last_place]]:
                last_place -= 1
            if last_place > c and prog.ascending and order[last_place] - i == last_place - c:
                # The run is nodes i .. last: set it with slices.
                last = order[last_place]
                # The run's inner nodes never reach a queue or the event heap (each is its
                # predecessor's only dependent), so their `remaining` stays unread.
                times = list(accumulate(durations[i + 1:last + 1], initial=end))
                sr = state[r]
                starts[r][i + 1:last + 1] = times[:-1]
                ends[r][i + 1:last + 1] = times[1:]
                base = r * stride
                cause[r][i + 1:last + 1] = range(base + i, base + last)
                sr[i:last] = _DONE_BYTES[:last - i] if last - i <= len(_DONE_BYTES) else bytes([S_DONE]) * (last - i)
                sr[last] = S_ISSUED
                done[r] += last_place - c
                i, end = last, times[-1]
            elif last_place > c:
                st, en, ca, sr = starts[r], ends[r], cause[r], state[r]
                base = r * stride
                for place in range(c + 1, last_place + 1):
                    j = order[place]
                    sr[i] = S_DONE
                    st[j] = end
                    ca[j] = base + i
                    sr[j] = S_ISSUED
                    end = en[j] = end + durations[j]
                    i = j
                done[r] += last_place - c
            # Places already started further on (they were ready earlier) are skipped too.
            sr = state[r]
            place, count = last_place + 1, len(order)
            while place < count and sr[order[place]] >= S_ISSUED:
                place += 1
            first_unstarted[r] = place
            return i, end

        def issue(r: int, t: int) -> None:
            """Start what rank position r can start at time t: every waiting receive, metadata
            and memory node (they need no stream), then the first ready compute node if the
            compute stream is free, then the first ready collective or send if the slot is."""
            comp_q, comm_q, free_q = queues[r]
            prog = progs[r]
            if free_q:
                by_prio, types, sr, st = prog.by_prio, prog.types, state[r], starts[r]
                while free_q:
                    i = by_prio[pop(free_q)]
                    sr[i] = S_ISSUED
                    st[i] = t
                    if types[i] == T_RECV:
                        post_recv(r, i, t, prog.nodes[i])
                    else:
                        end = ends[r][i] = t + prog.durations[i]
                        bucket = ending.get(end)
                        if bucket is None:
                            ending[end] = [r, i]
                            push(times, end)
                        else:
                            bucket += (r, i)
            busy_r = busy[r]
            # A node's cause: its last dependency if it became ready just now, else the node
            # that freed its stream. Until it is issued, a queued node's cause is the node of its
            # rank that readied it (release), which ended when it became ready; a root's is
            # NO_CAUSE, ready at 0. (No table of ready times: a list per rank filled the caches.)
            if comp_q and not busy_r[Q_COMPUTE]:
                busy_r[Q_COMPUTE] = True
                i = prog.by_prio[pop(comp_q)]
                state[r][i] = S_ISSUED
                starts[r][i] = t
                freed_by = last[r][Q_COMPUTE]
                if freed_by != NO_CAUSE:
                    readied_by = cause[r][i]
                    if (ends[r][readied_by - r * stride] if readied_by >= 0 else 0) != t:
                        cause[r][i] = freed_by
                end = ends[r][i] = t + prog.durations[i]
                c = first_unstarted[r]
                if runs and prog.compute_order[c] == i:  # every compute node before it has started
                    i, end = run_compute(r, prog, c, i, end)
                if end > t:  # the stream's busy time, touching stretches joined
                    stretches = computing[r]
                    if stretches and stretches[-1][1] == t:
                        stretches[-1][1] = end
                    else:
                        stretches.append([t, end])
                bucket = ending.get(end)
                if bucket is None:
                    ending[end] = [r, i]
                    push(times, end)
                else:
                    bucket += (r, i)
            if comm_q and not busy_r[Q_COMM]:
                busy_r[Q_COMM] = True
                i = prog.by_prio[pop(comm_q)]
                state[r][i] = S_ISSUED
                freed_by = last[r][Q_COMM]
                if freed_by != NO_CAUSE:
                    readied_by = cause[r][i]
                    if (ends[r][readied_by - r * stride] if readied_by >= 0 else 0) != t:
                        cause[r][i] = freed_by
                if prog.types[i] == T_COLL:
                    issue_collective(r, i, t, prog.nodes[i])
                else:
                    issue_send(r, i, t, prog.nodes[i])

        for r, prog in enumerate(progs):
            queue, prio, sr = prog.queue, prog.prio, state[r]
            for i in prog.roots():
                sr[i] = S_READY
                push(queues[r][queue[i]], prio[i])
        for r in range(nranks):
            issue(r, 0)

        def release(r: int, i: int, t: int) -> None:
            """Node i of position r ends at t: free its stream, ready its dependents."""
            prog = progs[r]
            state[r][i] = S_DONE
            done[r] += 1
            queue = prog.queue
            enc = r * stride + i
            q = queue[i]
            if q != Q_FREE:
                busy[r][q] = False
                last[r][q] = enc
            d = prog.next_of[i]
            if d == NO_DEPENDENT:
                return
            rem = remaining[r]
            for d in (d,) if d >= 0 else prog.more[i]:
                rem[d] -= 1
                if rem[d] == 0:
                    state[r][d] = S_READY
                    cause[r][d] = enc
                    push(queues[r][queue[d]], prog.prio[d])

        # Every node ending at t is released before any rank issues at t; ranks then issue in
        # position order.
        dirty_flag = [False] * nranks
        while times:
            t = pop(times)
            batch = ending.pop(t)
            if len(batch) == 2:  # the only end at t (the usual case)
                r, i = batch
                release(r, i, t)
                issue(r, t)
                continue
            dirty = []
            for k in range(0, len(batch), 2):
                r = batch[k]
                release(r, batch[k + 1], t)
                if not dirty_flag[r]:
                    dirty_flag[r] = True
                    dirty.append(r)
            dirty.sort()
            for r in dirty:
                dirty_flag[r] = False
                issue(r, t)

        self.state = state
        self.done = done
        self.computing = computing
        self._pending_instances = instances
        self._recvs_waiting = recvs_waiting
        if any(done[r] < len(progs[r].nodes) for r in range(nranks)):
            raise self.deadlock(state)
        return starts, ends, cause

    # ------------------------------------------------------------------ deadlock report

    def deadlock(self, state) -> Deadlock:
        blocked: dict[int, Wait] = {}
        waiting_in: dict[tuple[int, int], tuple[Any, int]] = {}  # (r, i) -> (gid, k)
        for (gid, k), inst in self._pending_instances.items():
            for r, i in inst[1]:
                waiting_in[(r, i)] = (gid, k)
        waiting_recv = {}
        for key, recvs in self._recvs_waiting.items():
            for r, i, _posted in recvs:
                waiting_recv[(r, i)] = key
        for r, prog in enumerate(self.progs):
            if self.done[r] == len(prog.nodes):
                continue
            blocked[self.rank_ids[r]] = self._wait_of(r, prog, state[r], waiting_in, waiting_recv)
        ordered = [blocked[r] for r in sorted(blocked)]
        chain, cycle, finished = wait_chain(blocked)
        truncated = len(chain) > MAX_CHAIN
        chain = chain[:MAX_CHAIN]
        finished = [f for f in finished if f in self.pos_of]
        return Deadlock(ordered, chain, cycle, finished, len(self.ranks), truncated)

    def _wait_of(self, r, prog: Program, st, waiting_in, waiting_recv) -> Wait:
        rank = self.ranks[r]
        issued = [i for i in prog.by_prio if st[i] == S_ISSUED and ((r, i) in waiting_in or (r, i) in waiting_recv)]
        if issued:
            # A collective holds the slot, so it is what the rank waits in first.
            i = next((i for i in issued if (r, i) in waiting_in), issued[0])
            node = prog.nodes[i]
            if (r, i) in waiting_in:
                gid, k = waiting_in[(r, i)]
                return self._collective_wait(r, i, node, gid, k)
            src, _dst, tag = waiting_recv[(r, i)]
            send = self._matching_send(src, rank.rank, tag)
            return Wait(rank.rank, node.id, node.name, "recv", f"recv from rank {src} tag {tag}",
                        ((src, send),), source=node.source)
        # Nothing in flight: some node waits for a node that does not exist, or for itself.
        for i in prog.by_prio:
            if i in prog.missing and st[i] != S_DONE:
                node = prog.nodes[i]
                return Wait(rank.rank, node.id, node.name, "missing", "deps",
                            tuple((rank.rank, d) for d in prog.missing[i]), source=node.source)
        cycle = _find_cycle(prog, st)
        node = prog.nodes[cycle[0]]
        return Wait(rank.rank, node.id, node.name, "cycle", "deps",
                    tuple((rank.rank, prog.nodes[j].id) for j in cycle), source=node.source)

    def _collective_wait(self, r, i, node, gid, k) -> Wait:
        rank = self.ranks[r]
        members = self._members.get(gid, self.world)
        issued = {r2 for r2, _ in self._pending_of(gid, k)}
        missing = []
        for m in members:
            if m in issued:
                continue
            missing.append((self.rank_ids[m], self._kth_collective(m, gid, k)))
        label = self.trace.groups[gid].label if gid is not None and gid in self.trace.groups else "all ranks"
        coll = node.coll.name if isinstance(node.coll, CollType) else "collective"
        return Wait(rank.rank, node.id, node.name, "collective", f"{label} seq {k} {coll}",
                    tuple(missing), group=gid, seq=k, source=node.source)

    def _pending_of(self, gid, k):
        inst = self._pending_instances.get((gid, k))
        return inst[1] if inst else []

    def _kth_collective(self, m: int, gid, k: int) -> int | None:
        cache = self.__dict__.setdefault("_kth_cache", {})
        key = (m, gid, k)
        if key not in cache:
            cache[key] = self._find_kth_collective(m, gid, k)
        return cache[key]

    def _find_kth_collective(self, m: int, gid, k: int) -> int | None:
        rank, prog = self.ranks[m], self.progs[m]
        seen = 0
        for i in prog.by_prio:
            node = prog.nodes[i]
            if prog.types[i] == T_COLL and rank.group_of(node) == gid:
                if seen == k:
                    return node.id
                seen += 1
        return None

    def _matching_send(self, src: int, dst: int, tag) -> int | None:
        p = self.pos_of.get(src)
        if p is None:
            return None
        rank, prog = self.ranks[p], self.progs[p]
        for i in prog.by_prio:
            node = prog.nodes[i]
            if prog.types[i] == T_SEND and self.state[p][i] != S_DONE and rank.peer_of(node) == dst and node.tag == tag:
                return node.id
        return None


def _find_cycle(prog: Program, st) -> list[int]:
    """Indices of a dependency cycle among the unfinished nodes (depth-first search)."""
    nodes = prog.nodes
    colour = {}
    for start in prog.by_prio:
        if st[start] == S_DONE or start in colour:
            continue
        stack = [(start, iter(nodes[start].deps))]
        path = [start]
        colour[start] = 1
        while stack:
            i, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[i] = 2
                stack.pop()
                path.pop()
                continue
            j = prog.index_of.get(nxt)
            if j is None or st[j] == S_DONE:
                continue
            if colour.get(j) == 1:
                cycle = path[path.index(j):]
                return cycle  # each node waits for the next one
            if j not in colour:
                colour[j] = 1
                stack.append((j, iter(nodes[j].deps)))
                path.append(j)
    return [prog.by_prio[0]]
