"""Collectives across ranks: the k-th collective of every member of a group must be the same.

ASTRA-sim pairs the k-th collective a rank issues in a group with the k-th of every other
member (FORMATS.md §1). We compare, per group, each member's sequence of (type, size, dtype)
in program order. When members disagree, the largest set of members that agree is taken as
the reference (majority vote) and every other set is a culprit; only the first divergence is
reported, because everything after it stalls anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..scheduler.columns import columns_at
from .context import Context
from .findings import Finding, format_bytes, rank_words

CHECK = "collectives"


@dataclass
class _Seq:
    keys: tuple[int, ...]  # interned (type, size, dtype) per collective, in program order
    indices: list[int]  # node index in the list, per collective
    nodes: list  # the node list the indices point into


def check_collectives(ctx: Context) -> list[Finding]:
    interned: dict[tuple, int] = {}
    described: list[tuple] = []
    per_group: dict[int | None, dict[int, _Seq]] = {}
    for shared in ctx.shared:
        by_rep: dict[int | None, tuple[list[int], list[int]]] = {}
        nodes = shared.nodes
        types, sizes, args, groups = columns_at(nodes, ("coll", "size", "args", "group"), shared.colls)
        for i, coll, size, node_args, group in zip(shared.colls, types, sizes, args, groups):
            key = (coll, size, node_args.get("dtype") if node_args else None)
            code = interned.get(key)
            if code is None:
                code = interned[key] = len(described)
                described.append(key)
            lists = by_rep.get(group)
            if lists is None:  # (not setdefault: its default would be two new lists per node)
                lists = by_rep[group] = ([], [])
            lists[0].append(code)
            lists[1].append(i)
        frozen = {rep: _Seq(tuple(k), ix, nodes) for rep, (k, ix) in by_rep.items()}
        for rank in shared.ranks:
            for rep, seq in frozen.items():
                gid = rep if rep is None or rank.group_map is None else rank.group_map.get(rep, rep)
                per_group.setdefault(gid, {})[rank.rank] = seq
    findings: list[Finding] = []
    for gid in sorted(per_group, key=lambda g: -1 if g is None else g):
        findings.extend(_check_group(ctx, gid, per_group[gid], described))
    return findings


def _members(ctx: Context, gid: int | None, issuing: dict[int, _Seq]) -> list[int]:
    """The members whose sequences must agree: present ranks of the group."""
    present = ctx.trace.ranks
    if gid is None:
        return list(ctx.world)
    group = ctx.trace.groups.get(gid)
    if group is None:  # undefined group (reported by "groups"): compare whoever uses it
        return sorted(issuing)
    return [r for r in group.members if r in present]


def _check_group(ctx: Context, gid: int | None, issuing: dict[int, _Seq], described: list[tuple]) -> list[Finding]:
    members = _members(ctx, gid, issuing)
    empty = _Seq((), [], [])
    seqs = {r: issuing.get(r, empty) for r in members}
    first = seqs[members[0]] if members else empty
    if all(s is first or s.keys == first.keys for s in seqs.values()):
        return []
    classes: dict[tuple[int, ...], list[int]] = {}
    for r in members:
        classes.setdefault(seqs[r].keys, []).append(r)
    # Majority: most members; ties go to the longer sequence, then to the lowest rank.
    ordered = sorted(classes.items(), key=lambda kv: (-len(kv[1]), -len(kv[0]), kv[1][0]))
    ref_keys, ref_ranks = ordered[0]
    ref = seqs[ref_ranks[0]]
    findings = []
    for keys, ranks in ordered[1:]:
        note = ""
        if len(ranks) == len(ref_ranks):  # no majority: say which tie-break chose the reference
            rule = "the longer sequence" if len(keys) != len(ref_keys) else "the lowest rank"
            note = f" (no majority: {rule} is taken as reference)"
        findings.append(_diagnose(ctx, gid, ranks, seqs[ranks[0]], ref_ranks, ref, described, note))
    return findings


def _describe(key: tuple) -> str:
    coll, size, dtype = key
    name = coll.name if coll is not None else "untyped collective"
    return f"{name} {format_bytes(size)}" + (f" {dtype}" if dtype else "")


def _diagnose(ctx: Context, gid, ranks: list[int], seq: _Seq, ref_ranks: list[int], ref: _Seq,
              described: list[tuple], note: str) -> Finding:
    c, m = seq.keys, ref.keys
    k = next((i for i, (a, b) in enumerate(zip(c, m)) if a != b), min(len(c), len(m)))
    gap = abs(len(c) - len(m))
    if gap:
        k = _named_gap(seq, ref, k, gap)
    who, others = rank_words(ranks), rank_words(ref_ranks)
    s1, s2 = ("s" if len(ranks) == 1 else ""), ("s" if len(ref_ranks) == 1 else "")

    def node_of(s: _Seq, i: int):
        return s.nodes[s.indices[i]] if i < len(s.indices) else None

    culprit_node, ref_node = node_of(seq, k), node_of(ref, k)
    rank = ctx.trace.ranks.get(ranks[0])

    def finding(code: str, message: str, node=None) -> Finding:
        node = node or culprit_node or ref_node
        return ctx.find(code, CHECK, message + note, ranks=ranks, node=node,
                        group=ctx.group_field(gid), rank=rank)

    if not c:
        return finding("E043", f"{who} never issue{s1} any of the {len(m)} collectives "
                               f"that {others} issue{s2}, first {_describe(described[m[0]])}", ref_node)
    counts = f"({len(c)} collectives, not {len(m)})"
    if len(c) == len(m) - 1 and c[k:] == m[k + 1:]:
        return finding("E040", f"seq {k} · {who} lack{s1} the {_describe(described[m[k]])} "
                               f"that {others} issue{s2} {counts}", ref_node)
    if len(c) == len(m) + 1 and c[k + 1:] == m[k:]:
        return finding("E040", f"seq {k} · {who} issue{s1} an extra "
                               f"{_describe(described[c[k]])} that {others} do{'es' if s2 else ''} not {counts}")
    if len(c) < len(m) and c[k:] == m[k + gap:]:
        return finding("E040", f"seqs {k}-{k + gap - 1} · {who} lack{s1} {gap} collectives that {others} "
                               f"issue{s2}: {_describe_run(described, m[k:k + gap])} {counts}", ref_node)
    if len(c) > len(m) and c[k + gap:] == m[k:]:
        return finding("E040", f"seqs {k}-{k + gap - 1} · {who} issue{s1} {gap} extra collectives that "
                               f"{others} do{'es' if s2 else ''} not: {_describe_run(described, c[k:k + gap])} {counts}")
    if (len(c) == len(m) and k + 1 < len(c) and c[k] == m[k + 1] and c[k + 1] == m[k] and c[k + 2:] == m[k + 2:]):
        return finding("E044", f"seq {k} · {who}: {_describe(described[c[k]])} then {_describe(described[c[k + 1]])}; "
                               f"{others}: the other order")
    if k >= len(c) or k >= len(m):
        return finding("E040", f"{who} issue{s1} {len(c)} collectives, {others} issue{s2} "
                               f"{len(m)}; they agree up to seq {k}")
    mine, theirs = described[c[k]], described[m[k]]
    count = "" if len(c) == len(m) else f"; {len(c)} collectives, not {len(m)}"
    if mine[0] != theirs[0]:
        code, what = "E041", (mine[0].name if mine[0] is not None else "untyped", theirs[0].name if theirs[0] is not None else "untyped")
        return finding(code, f"seq {k} · {who}: {what[0]} {format_bytes(mine[1])}, {others}: {what[1]}{count}")
    if mine[1] != theirs[1]:
        name = mine[0].name if mine[0] is not None else "collective"
        return finding("E042", f"seq {k} · {who}: {name} {format_bytes(mine[1])}, {others}: {format_bytes(theirs[1])}{count}")
    return finding("E045", f"seq {k} · {who}: {_describe(mine)}, {others}: {_describe(theirs)}{count}")


def _describe_run(described: list[tuple], keys: tuple[int, ...]) -> str:
    """`4 × ALL_REDUCE 4194304 B`, or the first three of a mixed run."""
    if len(set(keys)) == 1:
        return f"{len(keys)} × {_describe(described[keys[0]])}"
    return ", ".join(_describe(described[key]) for key in keys[:3]) + (", ..." if len(keys) > 3 else "")


def _named_gap(seq: _Seq, ref: _Seq, k: int, gap: int) -> int:
    """Where `gap` collectives are missing (or extra) when equal neighbours hide them: node names tell.

    Sequences whose lengths differ by `gap` agree on everything before `k`, but when the
    collectives around the gap are alike (a run of identical TP all-reduces) the gap may really
    be earlier; the first position where the nodes' names and microbatches stop agreeing (and
    the rest lines up) is the better answer.
    """
    short, long_ = (seq, ref) if len(seq.keys) < len(ref.keys) else (ref, seq)
    for j in range(min(k, len(short.keys))):
        if _label(short, j) != _label(long_, j):
            if short.keys[j:] == long_.keys[j + gap:]:
                return j
            break
    return k


def _label(s: _Seq, i: int) -> tuple:
    node = s.nodes[s.indices[i]]
    return node.name, node.microbatch
