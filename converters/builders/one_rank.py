"""Collectives of one-member groups: kept as compute, never written as collectives.

NCCL returns at once from a collective whose communicator holds a single rank; ASTRA-sim never
completes one: the rank stalls there, every rank that waits on it stalls too, and the simulator
still exits 0. Real runs log such collectives whenever a parallel dimension is 1 (Megatron
with TP 1 still all-reduces the embedding and cross-entropy and broadcasts the batch in its TP
group; with DP 1 it still all-reduces gradients in its DP group). So no output of ours carries
one:

- a collective that took time (a measured log or profile) becomes a compute node with that
  time, named as before, its args saying which collective it was: the timeline and the
  iteration time stay what was measured;
- one that took no time (untimed inputs, where the network model gives a one-member group
  nothing to do) is removed, and the nodes that waited on it wait on what it waited on.

`demote_one_rank_collectives` runs after every builder (`converters.api.read`) and before a
Chakra set is written from any input, Chakra sets we rewrite included; only a restored et-json
dump is written as it was (and gated by the validator like any input).
"""

from __future__ import annotations

import operator
from dataclasses import replace
from itertools import compress, count, repeat

from ..diagnostics import Diagnostics
from ..model import CollType, ExecutionTrace, Node, NodeKind, Rank, field_values

ASSUMPTION = ("Collectives of one-member groups are kept as compute nodes with their measured time, or left "
              "out when they took no time: NCCL returns from them at once, ASTRA-sim never completes them.")

KEPT = "one_rank_collectives_kept"  # trace.metadata key: {"count", "first": source of the first}

# Chakra attributes that only make sense on a communication node.
COMM_ATTRS = frozenset({"comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", "comm_priority",
                        "pg_name", "involved_dim"})


def one_rank_collectives(trace: ExecutionTrace, nodes: list[Node], rank: Rank) -> list[int]:
    """Positions in `nodes` (run by `rank`) of the collectives whose group has one member.

    Ranks sharing a node list have groups of the same kinds and sizes, so any of them answers
    for all. A group the trace does not define is left to the validator (E020).
    """
    singles = one_member_groups(trace)
    if not singles:
        return []  # the usual case: no node needs a look (a measured set has hundreds of thousands)
    # in C (a log's rank has hundreds of thousands of nodes): the collectives, then their groups
    collectives = list(compress(count(), map(operator.is_, field_values(nodes, "kind"), repeat(NodeKind.COLLECTIVE))))
    groups = list(field_values(nodes, "group", collectives))
    if rank.group_map is not None:
        groups = map(rank.group_map.get, groups, groups)  # (`rank.group_of`; None maps to None)
    return list(compress(collectives, map(singles.__contains__, groups)))


def one_member_groups(trace: ExecutionTrace) -> set[int | None]:
    """The group ids whose `trace.group_size` is 1 (None: a world of one rank)."""
    singles: set[int | None] = {gid for gid, group in trace.groups.items() if len(group.members) == 1}
    if trace.group_size(None) == 1:
        singles.add(None)
    return singles


def gathers_too_small(trace: ExecutionTrace, nodes: list[Node], rank: Rank) -> list[int]:
    """Positions of ALL_GATHERs of fewer bytes than their group has members.

    ASTRA-sim splits the size among the members in whole bytes; a share of 0 B never finishes,
    and the simulator loops forever (seen on both builds: 3 B in a group of 4, 1 B in a group of 2).
    """
    out = []
    gather = CollType.ALL_GATHER
    # the collective types alone first (in C): all-gathers are a few of the nodes
    for i in list(compress(count(), map(operator.is_, field_values(nodes, "coll"), repeat(gather)))):
        node = nodes[i]
        if node.kind is NodeKind.COLLECTIVE and node.size > 0:
            members = trace.group_size(rank.group_of(node))
            if members is not None and node.size < members:
                out.append(i)
    return out


def demote_one_rank_collectives(trace: ExecutionTrace) -> int:
    """Turn every one-member-group collective into compute, or drop it; return how many changed.

    The count is kept in `trace.metadata[KEPT]` (summed over calls) for `warn_if_kept`.
    """
    if not one_member_groups(trace):
        return 0  # no group has one member: no node needs a look (a measured set has millions)
    changed = 0
    first_source = ""
    seen: set[int] = set()
    for rank in trace.sorted_ranks():
        if id(rank.nodes) in seen:
            continue
        seen.add(id(rank.nodes))
        positions = one_rank_collectives(trace, rank.nodes, rank)
        if not positions:
            continue
        first_source = first_source or rank.nodes[positions[0]].source or (rank.source or "")
        changed += len(positions)
        _rewrite(trace, rank, positions)
    if changed:
        trace.assume(ASSUMPTION)
        kept = trace.metadata.setdefault(KEPT, {"count": 0, "first": first_source})
        kept["count"] += changed
    return changed


def warn_if_kept(trace: ExecutionTrace, diagnostics: Diagnostics) -> None:
    """Warn (once, with the count) that collectives were kept as compute: said where a Chakra set is
    written, the output they change; a timeline draws them as they ran either way."""
    kept = trace.metadata.get(KEPT)
    if kept:
        count, first = kept["count"], kept["first"]
        diagnostics.warn(
            "one-rank-collective",
            "{count} collectives in one-member groups kept as compute (ASTRA-sim never completes a collective of a "
            "one-rank group; NCCL returns at once)" + (" (first at {first})" if first else ""),
            first, count=count)


def _rewrite(trace: ExecutionTrace, rank: Rank, positions: list[int]) -> None:
    nodes = rank.nodes
    dropped: dict[int, list[int]] = {}
    for i in positions:
        node = nodes[i]
        if node.duration_ns > 0:
            _as_compute(trace, rank, node)
        else:
            dropped[node.id] = node.deps + node.ctrl_deps
    if dropped:
        nodes[:] = [n for n in nodes if n.id not in dropped]
        for node in nodes:
            if not dropped.keys().isdisjoint(node.deps) or not dropped.keys().isdisjoint(node.ctrl_deps):
                node.deps = _inherit(node.deps + node.ctrl_deps, dropped)
                node.ctrl_deps = []


def _as_compute(trace: ExecutionTrace, rank: Rank, node: Node) -> None:
    group = trace.groups.get(rank.group_of(node)) if node.group is not None else None
    node.args = {**node.args, "one_rank_collective": node.coll.name if node.coll is not None else "unknown",
                 "bytes": node.size, "group": group.label if group else "all ranks",
                 "note": "a collective of a one-member group, kept as compute: ASTRA-sim never completes it"}
    node.kind = NodeKind.COMPUTE
    node.coll = None
    node.size = 0
    node.group = None
    if node.attrs is not None:
        node.attrs = [a for a in node.attrs if a.name not in COMM_ATTRS]


def _inherit(deps: list[int], dropped: dict[int, list[int]]) -> list[int]:
    """`deps` with every dropped node replaced by its own dependencies, transitively, each once."""
    out: list[int] = []
    stack = list(reversed(deps))
    seen: set[int] = set()
    while stack:
        dep = stack.pop()
        if dep in seen:
            continue
        seen.add(dep)
        if dep in dropped:
            stack.extend(reversed(dropped[dep]))
        else:
            out.append(dep)
    return out


# Where workers keep their ranks (converters/rank_files.py, rank_timelines.py), the pass runs on
# each rank where it is, and what it records is added up here.

def demote_in_rank(rank: Rank, shell: ExecutionTrace) -> tuple[ExecutionTrace, int, str]:
    """The one-member-collective pass on one rank where it is (`shell`: the trace without its
    ranks): the rank as a trace of its own, how many collectives changed, where the first was
    (`record_demoted` adds them up as the pass on the whole model would)."""
    one = replace(shell, ranks={rank.rank: rank}, metadata={}, assumptions=[])
    demoted = demote_one_rank_collectives(one)
    return one, demoted, one.metadata[KEPT]["first"] if demoted else ""


def record_demoted(trace: ExecutionTrace, checked: list) -> None:
    """What `demote_one_rank_collectives` records when it runs on the whole model, from its runs on
    each rank (`checked`: objects with the `demoted` and `first` of `demote_in_rank`)."""
    demoted = [facts for facts in checked if facts.demoted]
    if demoted:
        trace.assume(ASSUMPTION)
        trace.metadata[KEPT] = {"count": sum(f.demoted for f in demoted), "first": demoted[0].first}
