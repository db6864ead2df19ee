"""Measured times (logs): what the clock says must be physically possible.

- On one rank, top-level ops of one stream do not overlap (sub-operations sit inside their step; the two
  halves of a fused exchange share their time by design).
- A receive does not end before its send starts. Hosts may have different clocks: for each
  pair of ranks, messages both ways bound the offset between their clocks; only when no
  offset explains every message is it an error (otherwise a note with the offset's bounds).
- Implied bandwidth (bytes / duration) of communication stays below what any link does.

Scaling-mode logs (ranks run one after another on one GPU) have no cross-rank timeline and
no real comm durations: only the per-rank checks apply to them.
"""

from __future__ import annotations

import operator
from itertools import compress, groupby, repeat

from ..model import Node, NodeKind
from ..scheduler.columns import columns, columns_at
from .context import Context, SharedList
from .findings import Finding

CHECK = "timing"
# Logged times have 0.01 ms resolution and start = end − duration rounds twice.
TOLERANCE_NS = 20_000
# No link moves more than this many bytes per ns (GB/s); NVLink 5 is 1.8 TB/s per GPU.
MAX_GBPS = 3_000


def check_timing(ctx: Context) -> list[Finding] | None:
    if ctx.trace.timing != "measured":
        return None
    findings: list[Finding] = []
    for shared in ctx.shared:
        findings.extend(_overlaps(ctx, shared))
    findings.extend(check_timing_across_ranks(ctx))
    return findings


def check_timing_across_ranks(ctx: Context) -> list[Finding] | None:
    """check_timing without what it checks on each rank alone (ops overlapping on a stream,
    sub-operations outside their step): what `converters/rank_files.py` runs on the ranks'
    skeletons once its workers have run the whole check on each rank. The bandwidth check is
    per node but stays here: a world collective has a group of one on a worker's one-rank trace."""
    trace = ctx.trace
    if trace.timing != "measured":
        return None
    if trace.metadata.get("scaling_mode"):
        return []
    return [*_receives_after_sends(ctx), *_bandwidth(ctx)]


def _timed(nodes: list[Node]) -> tuple[list[Node], tuple[list, ...]]:
    """The nodes with a start time, and their columns of `_COLUMNS` (one pass in C)."""
    table = columns(nodes, _COLUMNS)
    if None in table[2]:
        timed = list(map(operator.is_not, table[2], repeat(None)))
        return list(compress(nodes, timed)), tuple(list(compress(column, timed)) for column in table)
    return nodes, table


def _overlaps(ctx: Context, shared: SharedList) -> list[Finding]:
    nodes, table = _timed(shared.nodes)
    _, parents, starts, durations = table
    rank = shared.ranks[0]
    findings: list[Finding] = []
    # Zero-length ops (a receive whose data was already there) cannot overlap anything; nodes
    # measured on different streams (a profiler's GPU streams and threads) run side by side.
    tops = compress(range(len(nodes)), map(operator.is_, parents, repeat(None)))  # in C: most nodes are sub-operations
    top = map(nodes.__getitem__, sorted((k for k in tops if durations[k] > 0), key=lambda k: (starts[k], durations[k])))
    first: tuple[Node, Node] | None = None
    count = 0
    previous_on: dict[str, Node] = {}
    for node in top:
        previous = previous_on.get(node.stream)
        if previous is not None:
            end = previous.start_ns + previous.duration_ns
            if node.start_ns < end - TOLERANCE_NS and not _fused_halves(previous, node):
                count += 1
                first = first or (previous, node)
        if previous is None or node.start_ns + node.duration_ns > previous.start_ns + previous.duration_ns:
            previous_on[node.stream] = node
    if first:
        a, b = first
        overlap = a.start_ns + a.duration_ns - b.start_ns
        more = f" ({count} overlaps)" if count > 1 else ""
        findings.append(ctx.find(
            "E060", CHECK,
            f'{shared.who()}: "{b.name}" starts {_ms(overlap)} before "{a.name}" ends{more}; '
            "is the timestamp an end time (start = timestamp − duration)?",
            ranks=shared.rank_ids, node=b, rank=rank))
    outside = _outside_parents(nodes, table)
    if outside:
        n = outside[0][0]
        findings.append(ctx.find(
            "W061", CHECK,
            f'{shared.who()}: sub-operation lies outside its step "{outside[0][1].name}"'
            + (f" ({len(outside)} like it)" if len(outside) > 1 else ""),
            ranks=shared.rank_ids, node=n, rank=rank))
    return findings


def _fused_halves(a: Node, b: Node) -> bool:
    return (a.args.get("fused") is not None and a.args.get("fused") == b.args.get("fused")
            and a.start_ns == b.start_ns and a.duration_ns == b.duration_ns)


def _outside_parents(nodes: list[Node], table: tuple[list, ...] | None = None) -> list[tuple[Node, Node]]:
    """(sub-operation, its step) for each sub-operation that lies outside its step, in node
    order; a sub-operation whose step is not among `nodes` is left out. `table`: the nodes'
    columns of `_COLUMNS`, when read already. A measured log has hundreds of thousands of
    sub-operations, in runs of one step each: the columns are read in C, and each run is held
    against its step by its earliest start and latest end (only a run that leaves its step is
    looked at sub-operation by sub-operation)."""
    ids, parents, all_starts, durations = table or columns(nodes, _COLUMNS)
    index_of = dict(zip(ids, range(len(ids))))  # (the last node of an id, as a dict of nodes keeps it)
    is_sub = list(map(operator.is_not, parents, repeat(None)))
    subs = list(compress(range(len(nodes)), is_sub))
    starts = list(compress(all_starts, is_sub))
    ends = list(map(operator.add, starts, compress(durations, is_sub)))
    outside = []
    at = 0
    for parent_id, run in groupby(compress(parents, is_sub)):
        begin, at = at, at + len(list(run))
        k = index_of.get(parent_id)
        parent = _ANY_TIME if k is None else nodes[k]
        earliest = parent.start_ns - TOLERANCE_NS
        latest = parent.start_ns + parent.duration_ns + TOLERANCE_NS
        if min(starts[begin:at]) < earliest or max(ends[begin:at]) > latest:
            outside.extend((nodes[subs[i]], parent) for i in range(begin, at) if starts[i] < earliest or ends[i] > latest)
    return outside


_COLUMNS = ("id", "parent", "start_ns", "duration_ns")  # what the per-rank timing checks read of every node
# the step of a sub-operation whose step is missing: it holds any time
_ANY_TIME = Node(-1, "", NodeKind.COMPUTE, duration_ns=1 << 64, start_ns=-(1 << 63))


def _receives_after_sends(ctx: Context) -> list[Finding]:
    sends: dict[tuple, list[Node]] = {}
    recvs: dict[tuple, list[tuple[int, Node]]] = {}
    for shared in ctx.shared:
        nodes = shared.nodes
        send_columns, recv_columns = (columns_at(nodes, ("peer", "tag", "start_ns"), places)
                                      for places in (shared.sends, shared.recvs))
        for rank in shared.ranks:
            real_peer = rank.real_peer
            for i, peer, tag, start in zip(shared.sends, *send_columns):
                if start is not None:
                    sends.setdefault((rank.rank, real_peer(peer), tag), []).append(nodes[i])
            for i, peer, tag, start in zip(shared.recvs, *recv_columns):
                if start is not None:
                    recvs.setdefault((real_peer(peer), rank.rank, tag), []).append((rank.rank, nodes[i]))
    # (a, b) with a < b -> [upper bound on clock_b − clock_a, lower bound, worst a→b, worst b→a]
    bounds: dict[tuple[int, int], list] = {}
    for key, received in recvs.items():
        src, dst, _ = key
        for send, (_, recv) in zip(sends.get(key, []), received):
            slack = recv.start_ns + recv.duration_ns - send.start_ns  # recv end − send start
            a, b = min(src, dst), max(src, dst)
            entry = bounds.setdefault((a, b), [None, None, None, None])
            if src == a:  # δ ≤ slack
                if entry[0] is None or slack < entry[0]:
                    entry[0], entry[2] = slack, (send, recv)
            else:  # δ ≥ −slack
                if entry[1] is None or -slack > entry[1]:
                    entry[1], entry[3] = -slack, (send, recv)
    findings: list[Finding] = []
    for (a, b), (upper, lower, worst_ab, worst_ba) in sorted(bounds.items()):
        broken_ab = upper is not None and upper < -TOLERANCE_NS
        broken_ba = lower is not None and lower > TOLERANCE_NS
        if not (broken_ab or broken_ba):
            continue
        send, recv = worst_ab if broken_ab else worst_ba
        src, dst = (a, b) if broken_ab else (b, a)
        late = -(upper if broken_ab else -lower)
        if upper is not None and lower is not None and lower > upper + TOLERANCE_NS:
            findings.append(ctx.find(
                "E062", CHECK,
                f'rank {dst}\'s "{recv.name}" ends {_ms(late)} before rank {src}\'s "{send.name}" starts, '
                "and no clock offset between the two hosts explains the messages both ways",
                ranks=[src, dst], node=recv, rank=ctx.trace.ranks[dst]))
        else:
            low = "-inf" if lower is None else _ms(lower)
            high = "+inf" if upper is None else _ms(upper)
            findings.append(ctx.find(
                "I063", CHECK,
                f'rank {dst}\'s "{recv.name}" ends {_ms(late)} before rank {src}\'s "{send.name}" starts: '
                f"the clocks of ranks {a} and {b} differ (rank {b} − rank {a} between {low} and {high})",
                ranks=[a, b], node=recv, rank=ctx.trace.ranks[dst]))
    return findings


def _bandwidth(ctx: Context) -> list[Finding]:
    first: Node | None = None
    first_rank = None
    count = 0
    best = 0.0
    for shared in ctx.shared:
        nodes = shared.nodes
        # Receives are left out: one whose data was already there may finish almost at once.
        places = [*shared.sends, *shared.colls]
        for i, duration, size, start in zip(places, *columns_at(nodes, ("duration_ns", "size", "start_ns"), places)):
            if duration <= 0 or size <= 0 or start is None:
                continue
            gbps = size / duration
            if gbps > MAX_GBPS:
                n = nodes[i]
                if n.kind == NodeKind.COLLECTIVE and _group_size(ctx, shared.ranks[0].group_of(n)) <= 1:
                    continue  # a one-member collective moves nothing
                count += len(shared.ranks)
                if first is None:
                    first, first_rank, best = n, shared.ranks[0], gbps
    if first is None:
        return []
    more = f" ({count} ops like it)" if count > 1 else ""
    return [ctx.find(
        "W064", CHECK,
        f'{ctx.rank_label(first_rank.rank)}: "{first.name}" moves {first.size} B in {_ms(first.duration_ns)} = {best:,.0f} GB/s, '
        f"more than any link ({MAX_GBPS} GB/s){more}; are the durations in the right unit?",
        ranks=[first_rank.rank], node=first, rank=first_rank)]


def _group_size(ctx: Context, gid: int | None) -> int:
    if gid is None:
        return len(ctx.world)
    group = ctx.trace.groups.get(gid)
    return len(group.members) if group else 2


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms"
