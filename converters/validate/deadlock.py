"""Deadlock dry run: run the scheduler on the whole set and explain where it stalls.

The scheduler raises `Deadlock` with the wait-for chain (rank → node → waiting for rank →
node); that chain is the finding. Logs that hold only some ranks of a job (and Chakra sets
made from them) cannot be run: absent peers never send, so the dry run is skipped for them.
A set that lost a rank its source had is run: the stall is the point.

The dry run follows ASTRA-sim, not NCCL, where the two differ: a collective of a one-member
group (NCCL returns at once) and an ALL_GATHER of fewer bytes than members never complete in
ASTRA-sim, so the dry run runs a copy of the trace in which each such collective is a receive
nobody sends, and names it for what it is.
A set the validator calls clean then does not stall the simulator.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import chain

from ..builders.one_rank import gathers_too_small, one_rank_collectives
from ..diagnostics import InputError
from ..model import ExecutionTrace, Node, NodeKind, plain
from ..scheduler.deadlock import Deadlock, Wait
from .context import Context
from .findings import Finding
from .groups import never_completing

CHECK = "deadlock"


def check_deadlock(ctx: Context) -> list[Finding] | None:
    if not ctx.trace.ranks or ctx.absent_by_design:
        return None
    try:
        from ..scheduler import dry_run
    except ImportError:  # the scheduler is optional for the other checks
        return None
    shared_of = {id(shared.nodes): shared for shared in ctx.shared}
    trace, never_completes = as_astra_sim_runs_it(
        ctx.trace, lambda nodes: [*chain.from_iterable(never_completing(ctx.trace, shared_of[id(nodes)]))])
    try:
        dry_run(trace, ctx.options)
    except Deadlock as stalled:
        return [_finding(ctx, _named(stalled, never_completes))]
    except InputError as e:
        return [ctx.find("I047", CHECK, f"the scheduler cannot run this input: {e}")]
    return []


def as_astra_sim_runs_it(trace: ExecutionTrace, stuck_in=None) -> tuple[ExecutionTrace, dict[tuple[int, int], str]]:
    """A copy of `trace` whose collectives that ASTRA-sim never completes never complete here
    either; (rank, node id) -> what each one was. `stuck_in(nodes)`: their positions in one of
    the trace's node lists, when already found (else they are found here).

    Each becomes a receive with a negative tag (no send ever has one), which the scheduler
    holds forever, as ASTRA-sim holds the collective. Node lists stay shared where they were.
    """
    stuck: dict[tuple[int, int], str] = {}
    copies: dict[int, tuple[list[Node], list[int]]] = {}  # per distinct list: its copy, the positions changed
    ranks = {}
    for rank_id, rank in trace.ranks.items():
        key = id(rank.nodes)
        if key not in copies:
            positions = (stuck_in(rank.nodes) if stuck_in is not None else
                         [*one_rank_collectives(trace, rank.nodes, rank), *gathers_too_small(trace, rank.nodes, rank)])
            copies[key] = (_never_completing(rank.nodes, positions) if positions else rank.nodes, positions)
        nodes, positions = copies[key]
        if not positions:
            continue
        ranks[rank_id] = replace(rank, nodes=nodes)
        for i in positions:  # named per rank: ranks sharing a list have groups of their own
            node = nodes[i]
            group = trace.groups.get(rank.group_of(node))
            label = group.label if group is not None else "all ranks"
            members = trace.group_size(rank.group_of(node))
            stuck[(rank_id, node.id)] = (f"{node.args['never_completes']} in {label} "
                                         f"({members} member{'' if members == 1 else 's'})")
    if not ranks:
        return trace, stuck
    return replace(trace, ranks={**trace.ranks, **ranks}), stuck


def _never_completing(nodes: list[Node], positions: list[int]) -> list[Node]:
    out = list(nodes)
    for i in positions:
        node = nodes[i]
        what = f"{node.coll.name if node.coll is not None else 'collective'} of {node.size} B"
        out[i] = replace(plain(node), kind=NodeKind.RECV, coll=None, tag=-1 - node.id, size=max(node.size, 1),
                         args={"never_completes": what})
    return out


def _named(stalled: Deadlock, never_completes: dict[tuple[int, int], str]) -> Deadlock:
    """The scheduler's Deadlock with the stand-in receives named as the collectives they were."""
    if not never_completes:
        return stalled

    def named(wait: Wait) -> Wait:
        what = never_completes.get((wait.rank, wait.node))
        if what is None:
            return wait
        return replace(wait, what="collective", detail=f"{what}, which ASTRA-sim never completes", waits_for=())

    stalled.blocked = [named(w) for w in stalled.blocked]
    stalled.chain = [named(w) for w in stalled.chain]
    return stalled


def _finding(ctx: Context, stalled) -> Finding:
    chain = stalled.chain or stalled.blocked[:1]
    parts = [w.phrase() for w in chain]
    if stalled.cycle:
        parts.append("(cycle)")
    for rank in stalled.finished:
        parts.append(f"rank {rank} finished without issuing it")
    blocked = len(stalled.blocked)
    if blocked > len(chain):
        parts.append(f"{blocked} of {len(ctx.trace.ranks)} ranks blocked")
    first = chain[0] if chain else None
    node = None
    if first is not None:
        rank = ctx.trace.ranks.get(first.rank)
        node = next((n for n in rank.nodes if n.id == first.node), None) if rank else None
    ranks = sorted({w.rank for w in chain} | {r for w in chain for r, _ in w.waits_for})
    return ctx.find(
        "E046", CHECK, " · ".join(parts), ranks=ranks, node=node,
        group=ctx.group_field(first.group) if first is not None and first.group is not None else None,
        source=first.source if first is not None else None,
        rank=ctx.trace.ranks.get(first.rank) if first is not None else None)
