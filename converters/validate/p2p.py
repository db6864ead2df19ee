"""Sends and receives: each send meets exactly one receive on (src, dst, tag, size).

Sends and receives are first paired on (src, dst, tag) in program order; a pair whose sizes
(or, for logs, shapes and dtypes) differ is a mismatch, and whatever is left unpaired is an
unmatched send or receive.
"""

from __future__ import annotations

from ..model import Node, NodeKind
from .context import Context
from .findings import Finding, format_bytes

CHECK = "p2p"


def check_p2p(ctx: Context) -> list[Finding]:
    # (src, dst) -> {tag: nodes in issue order}: the sends of rank src to dst, the receives of
    # rank dst from src. Ranks sharing a node list share these tables (one per peer of the
    # list), so each distinct pair of tables is compared once.
    sends: dict[tuple, dict] = {}
    recvs: dict[tuple, dict] = {}
    for shared in ctx.shared:
        send_tables = _by_peer(shared.nodes, shared.sends)
        recv_tables = _by_peer(shared.nodes, shared.recvs)
        for rank in shared.ranks:
            r = rank.rank
            for peer, table in _resolved(rank, send_tables):
                sends[(r, peer)] = table
            for peer, table in _resolved(rank, recv_tables):
                recvs[(peer, r)] = table
    problems: list[tuple[tuple, list[Finding]]] = []
    pair_up: dict[tuple[int, int], bool] = {}  # (id of send table, id of receive table) -> all pair up
    for (src, dst), s_table in sends.items():
        r_table = recvs.get((src, dst), NONE)
        ids = (id(s_table), id(r_table))
        fits = pair_up.get(ids)
        if fits is None:
            fits = pair_up[ids] = _tables_pair_up(s_table, r_table)
        if not fits:
            problems.extend(_check_pair(ctx, src, dst, s_table, r_table))
    for (src, dst), r_table in recvs.items():
        if (src, dst) not in sends:
            problems.extend(_check_pair(ctx, src, dst, NONE, r_table))
    problems.sort(key=lambda item: item[0])
    return [f for _, found in problems for f in found]


NONE: dict = {}


def _by_peer(nodes: list[Node], indices: list[int]) -> dict:
    """A shared list's sends (or receives): peer as the list holds it -> {tag: nodes in issue order}."""
    out: dict = {}
    for i in indices:
        node = nodes[i]
        out.setdefault(node.peer, {}).setdefault(node.tag, []).append(node)
    return out


def _resolved(rank, tables: dict) -> list[tuple]:
    """(this rank's peer, table) for each peer of the shared list; two peers of the list that
    are one peer of this rank get one merged table (nodes back in issue order)."""
    peers = rank.peer_map
    if not peers:
        return list(tables.items())
    out: dict = {}
    for peer, table in tables.items():
        real = peers.get(peer, peer)
        if real in out:
            out[real] = _merged(out[real], table)
        else:
            out[real] = table
    return list(out.items())


def _merged(a: dict, b: dict) -> dict:
    order = {id(n): (n.id, k) for k, n in enumerate(n for nodes in (*a.values(), *b.values()) for n in nodes)}
    merged = {tag: list(nodes) for tag, nodes in a.items()}
    for tag, nodes in b.items():
        merged[tag] = sorted(merged.get(tag, []) + nodes, key=lambda n: order[id(n)])
    return merged


def _tables_pair_up(sends: dict, recvs: dict) -> bool:
    return sends.keys() == recvs.keys() and all(
        len(nodes) == len(recvs[tag]) and not any(map(_differ, nodes, recvs[tag])) for tag, nodes in sends.items())


def _check_pair(ctx: Context, src, dst, sends: dict, recvs: dict) -> list[tuple[tuple, list[Finding]]]:
    out = []
    for tag in sorted({*sends, *recvs}, key=lambda t: -1 if t is None else t):
        key = (src, dst, tag)
        found = _check_key(ctx, key, [(src, n) for n in sends.get(tag, ())], [(dst, n) for n in recvs.get(tag, ())])
        if found:
            out.append((_sort_key(key), found))
    return out


def _check_key(ctx: Context, key: tuple, s_list: list, r_list: list) -> list[Finding]:
    src, dst, tag = key
    present = ctx.trace.ranks
    findings: list[Finding] = []
    for (sr, sn), (rr, rn) in zip(s_list, r_list):
        mismatch = _mismatch(ctx, sr, sn, rr, rn)
        if mismatch:
            findings.append(mismatch)
    for r, node in s_list[len(r_list):]:
        if dst is None:
            continue  # reported by the "nodes" check
        if ctx.never_held(dst):  # a log of some ranks: nothing to pair with
            continue
        findings.append(_unmatched(ctx, "E034", r, node, src, dst, tag, dst not in present))
    for r, node in r_list[len(s_list):]:
        if src is None:
            continue
        if ctx.never_held(src):  # a log of some ranks: nothing to pair with
            continue
        findings.append(_unmatched(ctx, "E035", r, node, src, dst, tag, src not in present))
    return findings


def _differ(s: Node, r: Node) -> bool:
    if s.size != r.size:
        return True
    if s.args and r.args:
        return (s.args.get("shape"), s.args.get("dtype")) != (r.args.get("shape"), r.args.get("dtype"))
    return False


def _sort_key(key: tuple) -> tuple:
    return tuple(-1 if v is None else v for v in key)


def _counterpart(node: Node) -> str:
    """What the other side should be called: recv_forward for send_forward, and so on."""
    name = node.name.split()[0] if node.name else ""
    if node.kind == NodeKind.SEND and "send" in name:
        return name.replace("send", "recv")
    if node.kind == NodeKind.RECV and "recv" in name:
        return name.replace("recv", "send")
    return "receive" if node.kind == NodeKind.SEND else "send"


def _unmatched(ctx: Context, code: str, r: int, node: Node, src, dst, tag, absent: bool) -> Finding:
    other = dst if node.kind == NodeKind.SEND else src
    route = f"{ctx.rank_label(src)} -> {ctx.rank_label(dst)}"
    if absent:
        why = f"rank {other} is not in the set"
    else:
        why = f"no {_counterpart(node)} on rank {other} with tag {tag}"
    return ctx.find(code, CHECK, f"{route} · {why} ({format_bytes(node.size)})",
                    ranks=[r, other], node=node, rank=ctx.trace.ranks[r])


def _mismatch(ctx: Context, sr: int, sn: Node, rr: int, rn: Node) -> Finding | None:
    s_shape, r_shape = sn.args.get("shape"), rn.args.get("shape")
    s_dtype, r_dtype = sn.args.get("dtype"), rn.args.get("dtype")
    if (s_shape is not None and r_shape is not None and s_shape != r_shape) or (
            s_dtype is not None and r_dtype is not None and s_dtype != r_dtype):
        return ctx.find(
            "E037", CHECK,
            f"{_route(ctx, sr, rr, sn)} · {sn.name} sends {_shape(s_shape, s_dtype)}, {rn.name} on rank {rr} "
            f"expects {_shape(r_shape, r_dtype)}",
            ranks=[sr, rr], node=sn, rank=ctx.trace.ranks[sr])
    if sn.size != rn.size:
        return ctx.find(
            "E036", CHECK,
            f"{_route(ctx, sr, rr, sn)} · send of {format_bytes(sn.size)}, receive on rank {rr} of "
            f"{format_bytes(rn.size)}; ASTRA-sim pairs on (src, dst, tag, size), so neither completes",
            ranks=[sr, rr], node=sn, rank=ctx.trace.ranks[sr])
    return None


def _route(ctx: Context, src: int, dst: int, send: Node) -> str:
    return f"{ctx.rank_label(src)} -> {ctx.rank_label(dst)} · tag {send.tag}"


def _shape(shape, dtype) -> str:
    text = str(list(shape)) if isinstance(shape, (list, tuple)) else str(shape)
    return f"{text} {dtype}" if dtype else text
