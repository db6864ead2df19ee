"""Tiny traces built directly in the model, for the scheduler's tests and benchmark."""

from __future__ import annotations

from converters.model import CollType, ExecutionTrace, Node, NodeKind, Rank
from converters.options import Options

MiB = 1 << 20

# The calibration network of issue 3: ring of 8, 50 GB/s, 500 ns, 4 chunks.
ASTRA_NET = {"bandwidth_gbps": 50, "latency_ns": 500, "chunks": 4}


def astra_options() -> Options:
    return Options(network_overrides=dict(ASTRA_NET))


def compute(nid: int, ns: int, deps=(), name: str | None = None) -> Node:
    return Node(nid, name or f"compute {nid}", NodeKind.COMPUTE, duration_ns=ns, deps=list(deps))


def coll(nid: int, kind: CollType, size: int, deps=(), group: int | None = None, name: str | None = None) -> Node:
    return Node(nid, name or f"{kind.name.lower()} {nid}", NodeKind.COLLECTIVE, coll=kind, size=size,
                deps=list(deps), group=group)


def send(nid: int, dst: int, size: int, tag: int = 0, deps=(), name: str | None = None) -> Node:
    return Node(nid, name or f"send {nid}", NodeKind.SEND, size=size, peer=dst, tag=tag, deps=list(deps))


def recv(nid: int, src: int, size: int, tag: int = 0, deps=(), name: str | None = None) -> Node:
    return Node(nid, name or f"recv {nid}", NodeKind.RECV, size=size, peer=src, tag=tag, deps=list(deps))


def trace_of(programs: dict[int, list[Node]]) -> ExecutionTrace:
    trace = ExecutionTrace()
    for r, nodes in programs.items():
        trace.ranks[r] = Rank(r, nodes)
    trace.parallel.world = len(programs)
    return trace


def shared_trace(n: int, nodes: list[Node]) -> ExecutionTrace:
    """n ranks running one shared node list."""
    trace = ExecutionTrace()
    for r in range(n):
        trace.ranks[r] = Rank(r, nodes)
    trace.parallel.world = n
    return trace


def data_workload(rows: list[tuple[int, int]], n: int = 8) -> ExecutionTrace:
    """ASTRA-sim's DATA policy for one pass, per FORMATS.md §5: forward over the rows, then per
    row from the last: weight-grad compute -> weight-grad all-reduce (non-blocking) ->
    input-grad compute (none for row 0, which has no input to pass a gradient to).

    `rows` = (compute ns used for fwd, ig and wg alike, all-reduce bytes).
    """
    nodes: list[Node] = []
    nid = 0
    prev = None
    for i, (ns, _size) in enumerate(rows):
        nodes.append(compute(nid, ns, [prev] if prev is not None else [], name=f"fwd {i}"))
        prev = nid
        nid += 1
    for i in reversed(range(len(rows))):
        ns, size = rows[i]
        nodes.append(compute(nid, ns, [prev], name=f"wg {i}"))
        wg = nid
        nid += 1
        nodes.append(coll(nid, CollType.ALL_REDUCE, size, [wg], name=f"wg all_reduce {i}"))
        nid += 1
        prev = wg
        if i > 0:
            nodes.append(compute(nid, ns, [wg], name=f"ig {i}"))
            prev = nid
            nid += 1
    return shared_trace(n, nodes)
