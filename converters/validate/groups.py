"""Communicator groups and the set of ranks: defined, consistent, complete."""

from __future__ import annotations

from collections import Counter

from ..builders.one_rank import gathers_too_small, one_rank_collectives
from ..model import ExecutionTrace, Node
from ..scheduler.columns import columns_at
from .context import SIMULATOR_FORMATS, Context, SharedList
from .findings import Finding, format_ranks, rank_words

# Group kinds whose size the parallel configuration fixes.
_SIZE_OF_KIND = {
    "tp": lambda p: p.tp,
    "dp": lambda p: p.dp,
    "pp": lambda p: p.pp,
    "ep": lambda p: p.ep,
    "dp_ep": lambda p: p.dp // p.ep if p.ep and p.dp % p.ep == 0 else None,
}


def used_groups(ctx: Context) -> dict[int, tuple[list[int], Node, int]]:
    """Group id -> (ranks that communicate in it, first node, number of nodes), over all ranks."""
    used: dict[int, tuple[list[int], Node, int]] = {}
    for shared in ctx.shared:
        nodes = shared.nodes
        comm = (*shared.colls, *shared.sends, *shared.recvs)
        groups, = columns_at(nodes, ("group",), comm)  # (counted in C: logs are mostly these)
        counts = Counter(groups)
        per_rep = {gid: (nodes[comm[groups.index(gid)]], counts[gid]) for gid in dict.fromkeys(groups) if gid is not None}
        for rank in shared.ranks:
            for node, count in per_rep.values():
                gid = rank.group_of(node)
                ranks, first, total = used.get(gid, ([], node, 0))
                ranks.append(rank.rank)
                used[gid] = (ranks, first, total + count)
    return dict(sorted(used.items()))


def check_groups(ctx: Context) -> list[Finding]:
    trace = ctx.trace
    findings: list[Finding] = []
    for gid, (ranks, node, count) in used_groups(ctx).items():
        group = trace.groups.get(gid)
        nodes = "1 node" if count == 1 else f"{count} nodes"
        if group is None:
            where = ("the group file does not define it" if trace.groups else
                     "there is no comm_group.json beside the set (name one with `et-convert validate --groups FILE`)")
            findings.append(ctx.find(
                "E020", "groups",
                f"{rank_words(ranks)} communicate{'s' if len(ranks) == 1 else ''} in pg_name {gid} ({nodes}), but {where}",
                ranks=ranks, node=node, group=ctx.group_field(gid), rank=trace.ranks[ranks[0]]))
            continue
        members = set(group.members)
        outsiders = [r for r in ranks if r not in members]
        if outsiders:
            findings.append(ctx.find(
                "E021", "groups",
                f"{rank_words(outsiders)} communicate{'s' if len(outsiders) == 1 else ''} in {group.label} but "
                f"{'is not a member' if len(outsiders) == 1 else 'are not members'}",
                ranks=outsiders, node=node, group=ctx.group_field(gid), rank=trace.ranks[outsiders[0]]))
    findings.extend(_collectives_astra_sim_never_completes(ctx))
    findings.extend(_parallel_sizes(ctx))
    return findings


def _collectives_astra_sim_never_completes(ctx: Context) -> list[Finding]:
    """E026: collectives in groups of one rank (NCCL returns at once; ASTRA-sim never completes them);
    E027: all-gathers of fewer bytes than members (ASTRA-sim loops forever)."""
    findings = []
    for gid, (ranks, node, count) in _by_group(ctx, lambda shared: never_completing(ctx.trace, shared)[0]).items():
        findings.append(ctx.find(
            "E026", "groups",
            f"{rank_words(ranks)}: {_what(node, count)} in the one-member group {ctx.group_label(gid)}; ASTRA-sim "
            "never completes a collective of a one-rank group (NCCL returns at once): the rank stalls there "
            "(et-convert --to chakra keeps such collectives as compute)",
            ranks=ranks, node=node, group=ctx.group_field(gid), rank=ctx.trace.ranks[ranks[0]]))
    for gid, (ranks, node, count) in _by_group(ctx, lambda shared: never_completing(ctx.trace, shared)[1]).items():
        members = ctx.trace.group_size(gid)
        findings.append(ctx.find(
            "E027", "groups",
            f"{rank_words(ranks)}: {_what(node, count)} of {node.size} B in {ctx.group_label(gid)} of {members} "
            "members; ASTRA-sim splits it in whole bytes per member, a share of 0 B never finishes and the "
            f"simulator runs forever (sizes must be at least {members} B)",
            ranks=ranks, node=node, group=ctx.group_field(gid), rank=ctx.trace.ranks[ranks[0]]))
    return findings


def _what(node: Node, count: int) -> str:
    what = node.coll.name if node.coll is not None else "collective"
    return what + (f" (and {count - 1} more)" if count > 1 else "")


def never_completing(trace: ExecutionTrace, shared: SharedList) -> tuple[list[int], list[int]]:
    """(positions of collectives of one-member groups, of all-gathers too small) in a shared
    list, found on its first rank (`builders/one_rank.py`) once for the groups and deadlock
    checks: each is a pass over every node."""
    if shared.stuck is None:
        rank = shared.ranks[0]
        shared.stuck = (one_rank_collectives(trace, shared.nodes, rank), gathers_too_small(trace, shared.nodes, rank))
    return shared.stuck


def _by_group(ctx: Context, positions_in) -> dict[int | None, tuple[list[int], Node, int]]:
    """Group id -> (ranks, first node, count) of the collectives at `positions_in(shared)` of each node list."""
    by_group: dict[int | None, tuple[list[int], Node, int]] = {}
    for shared in ctx.shared:
        positions = positions_in(shared)
        if not positions:
            continue
        for n, rank in enumerate(shared.ranks):
            for i in positions:
                node = shared.nodes[i]
                gid = rank.group_of(node)
                ranks, first, count = by_group.get(gid, ([], node, 0))
                if not ranks or ranks[-1] != rank.rank:
                    ranks.append(rank.rank)
                by_group[gid] = (ranks, first, count + (n == 0))  # nodes counted once per shared list
    return by_group


def _parallel_sizes(ctx: Context) -> list[Finding]:
    p = ctx.trace.parallel
    if p.world <= 0:
        return []
    findings: list[Finding] = []
    product = p.tp * p.cp * p.dp * p.pp
    if product != p.world:
        cp = f" · cp {p.cp}" if p.cp != 1 else ""
        findings.append(ctx.find(
            "E022", "groups", f"world {p.world} ≠ tp {p.tp}{cp} · dp {p.dp} · pp {p.pp} = {product}"))
        return findings
    wrong: dict[str, list] = {}
    for group in ctx.trace.groups.values():
        size_of = _SIZE_OF_KIND.get(group.kind)
        expected = size_of(p) if size_of else None
        if expected and len(group.members) != expected:
            wrong.setdefault(group.kind, []).append((group, expected))
    for kind, groups in sorted(wrong.items()):
        group, expected = groups[0]
        more = f" ({len(groups)} {kind} groups like it)" if len(groups) > 1 else ""
        findings.append(ctx.find(
            "E022", "groups",
            f"{group.label} has {len(group.members)} members; {kind} = {expected} in the parallel configuration{more}",
            group=ctx.group_field(group.id), ranks=group.members))
    return findings


def check_rank_set(ctx: Context) -> list[Finding]:
    missing = ctx.missing
    if not missing:
        return []
    findings: list[Finding] = []
    if ctx.absent_by_design:
        findings.append(_partial_source(ctx))
    member_of: dict[int, list[str]] = {}
    for group in ctx.trace.groups.values():
        for r in group.members:
            if r not in ctx.trace.ranks:
                member_of.setdefault(r, []).append(group.label)
    for r in missing:
        if ctx.never_held(r):
            continue
        name = ctx.rank_file(r)
        what = f"rank {r} is missing" + (f" (no {name})" if name else "")
        groups = member_of.get(r, [])
        waits = f"; {', '.join(groups[:4])}{' ...' if len(groups) > 4 else ''} would wait for it" if groups else ""
        findings.append(ctx.find(
            "E023", "rank-set", f"{what}; present: {format_ranks(ctx.world)}{waits}", ranks=[r]))
    return findings


def _partial_source(ctx: Context) -> Finding:
    """The note (for a log) or warning (for a Chakra set made from one) that the source held only some ranks."""
    present = ctx.world
    if ctx.trace.source.format in SIMULATOR_FORMATS:
        held = sorted(ctx.source_ranks or ())
        source = "only these" if held == present else f"only {rank_words(held)}"
        return ctx.find(
            "W025", "rank-set",
            f"the set holds {rank_words(present)} of {len(ctx.expected)} (converted from a log of {source}); "
            "a simulator would wait forever for the absent ranks' messages and collectives")
    return ctx.find(
        "I024", "rank-set",
        f"the input holds {rank_words(present)} of {len(ctx.expected)}; cross-rank checks cover only these")
