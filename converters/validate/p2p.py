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
    # (src, dst, tag) -> [(rank, node)] in rank order, program order
    sends: dict[tuple, list[tuple[int, Node]]] = {}
    recvs: dict[tuple, list[tuple[int, Node]]] = {}
    for shared in ctx.shared:
        nodes = shared.nodes
        send_nodes = [nodes[i] for i in shared.sends]
        recv_nodes = [nodes[i] for i in shared.recvs]
        for rank in shared.ranks:
            r = rank.rank
            peers = rank.peer_map or {}
            for node in send_nodes:
                peer = node.peer
                sends.setdefault((r, peers.get(peer, peer), node.tag), []).append((r, node))
            for node in recv_nodes:
                peer = node.peer
                recvs.setdefault((peers.get(peer, peer), r, node.tag), []).append((r, node))
    problems: list[tuple[tuple, list[Finding]]] = []
    for key, s_list in sends.items():
        r_list = recvs.get(key, [])
        if len(s_list) != len(r_list) or any(map(_differ, s_list, r_list)):
            problems.append((_sort_key(key), _check_key(ctx, key, s_list, r_list)))
    for key, r_list in recvs.items():
        if key not in sends:
            problems.append((_sort_key(key), _check_key(ctx, key, [], r_list)))
    problems.sort(key=lambda item: item[0])
    return [f for _, found in problems for f in found]


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
        if dst not in present and ctx.partial_ok:
            continue
        findings.append(_unmatched(ctx, "E034", r, node, src, dst, tag, dst not in present))
    for r, node in r_list[len(s_list):]:
        if src is None:
            continue
        if src not in present and ctx.partial_ok:
            continue
        findings.append(_unmatched(ctx, "E035", r, node, src, dst, tag, src not in present))
    return findings


def _differ(send: tuple[int, Node], recv: tuple[int, Node]) -> bool:
    s, r = send[1], recv[1]
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
