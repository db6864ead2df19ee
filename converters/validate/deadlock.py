"""Deadlock dry run: run the scheduler on the whole set and explain where it stalls.

The scheduler raises `Deadlock` with the wait-for chain (rank → node → waiting for rank →
node); that chain is the finding. Logs that hold only some ranks of a job (and Chakra sets
made from them) cannot be run: absent peers never send, so the dry run is skipped for them.
A set that lost a rank its source had is run: the stall is the point.
"""

from __future__ import annotations

from ..diagnostics import InputError
from .context import Context
from .findings import Finding

CHECK = "deadlock"


def check_deadlock(ctx: Context) -> list[Finding] | None:
    if not ctx.trace.ranks or ctx.absent_by_design:
        return None
    try:
        from ..scheduler import schedule
        from ..scheduler.deadlock import Deadlock
    except ImportError:  # the scheduler is optional for the other checks
        return None
    try:
        schedule(ctx.trace, ctx.options)
    except Deadlock as stalled:
        return [_finding(ctx, stalled)]
    except InputError as e:
        return [ctx.find("I047", CHECK, f"the scheduler cannot run this input: {e}")]
    return []


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
