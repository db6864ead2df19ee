"""Clean hand-built models for the validator's tests, and the mutations applied to them.

`pipeline_model(tp, dp, pp, microbatches)` is a small Megatron-like job: every rank runs its
stage's 1F1B program (forward, TP all-reduce, send activations; receive gradients, backward,
TP all-reduce, send gradients), then a DP all-reduce. Program order is the dependency chain.
With `shared=True` the ranks of one stage share one node list (the representative is the
stage's first rank; others map groups and peers through `group_map` / `peer_map`).
"""

from __future__ import annotations

from converters.builders.layout import Layout, add_layout_groups
from converters.builders.pipeline import one_f_one_b
from converters.model import CollType, ExecutionTrace, Node, NodeKind, Parallel, Rank, WireAttr

MiB = 1 << 20
ACT = 1 * MiB
TP_FWD = 2 * MiB
TP_BWD = 4 * MiB
DP = 64 * MiB


def pipeline_model(tp: int = 2, dp: int = 2, pp: int = 2, microbatches: int = 2, shared: bool = False) -> ExecutionTrace:
    layout = Layout(tp=tp, dp=dp, pp=pp)
    trace = ExecutionTrace()
    trace.parallel = Parallel(world=layout.world, tp=tp, dp=dp, pp=pp, microbatches=microbatches)
    trace.source.format = "simai"
    groups = add_layout_groups(trace, layout, kinds=("tp", "dp", "pp"))
    representative: dict[int, int] = {}
    for r in range(layout.world):
        coords = layout.coords(r)
        rank = Rank(r, coords={k: coords[k] for k in ("tp", "dp", "pp")}, source="w.txt")
        stage = coords["pp"]
        if shared and stage in representative:
            rep = representative[stage]
            rank.nodes = trace.ranks[rep].nodes
            rank.group_map = {groups[rep][k]: groups[r][k] for k in groups[r]}
            rank.peer_map = {}
            for nxt in (layout.next_stage_rank(rep), layout.prev_stage_rank(rep)):
                if nxt is not None:
                    mine = layout.next_stage_rank(r) if nxt == layout.next_stage_rank(rep) else layout.prev_stage_rank(r)
                    rank.peer_map[nxt] = mine
        else:
            representative.setdefault(stage, r)
            rank.nodes = _program(layout, r, groups[r], microbatches)
        trace.ranks[r] = rank
    return trace


def _program(layout: Layout, r: int, groups: dict[str, int], microbatches: int) -> list[Node]:
    nodes: list[Node] = []
    line = [10]

    def add(name: str, kind: NodeKind, **fields) -> Node:
        node = Node(len(nodes), name, kind, deps=[len(nodes) - 1] if nodes else [], source=f"w.txt:{line[0]}", **fields)
        line[0] += 1
        nodes.append(node)
        return node

    stage = layout.coords(r)["pp"]
    nxt, prev = layout.next_stage_rank(r), layout.prev_stage_rank(r)
    for step, m in one_f_one_b(layout.pp, stage, microbatches):
        if step == "F":
            if prev is not None:
                add(f"recv act mb{m}", NodeKind.RECV, peer=prev, tag=2 * m, size=ACT, microbatch=m)
            add(f"forward mb{m}", NodeKind.COMPUTE, duration_ns=100_000, microbatch=m)
            if layout.tp > 1:  # no collectives in one-member groups, as the builders make them
                add(f"tp all_reduce fwd mb{m}", NodeKind.COLLECTIVE, coll=CollType.ALL_REDUCE, size=TP_FWD,
                    group=groups["tp"], microbatch=m)
            if nxt is not None:
                add(f"send act mb{m}", NodeKind.SEND, peer=nxt, tag=2 * m, size=ACT, microbatch=m)
        else:
            if nxt is not None:
                add(f"recv grad mb{m}", NodeKind.RECV, peer=nxt, tag=2 * m + 1, size=ACT, microbatch=m)
            add(f"backward mb{m}", NodeKind.COMPUTE, duration_ns=200_000, microbatch=m)
            if layout.tp > 1:
                add(f"tp all_reduce bwd mb{m}", NodeKind.COLLECTIVE, coll=CollType.ALL_REDUCE, size=TP_BWD,
                    group=groups["tp"], microbatch=m)
            if prev is not None:
                add(f"send grad mb{m}", NodeKind.SEND, peer=prev, tag=2 * m + 1, size=ACT, microbatch=m)
    if layout.dp > 1:
        add("dp all_reduce", NodeKind.COLLECTIVE, coll=CollType.ALL_REDUCE, size=DP, group=groups["dp"])
    add("optimizer", NodeKind.COMPUTE, duration_ns=50_000)
    return nodes


# ---------------------------------------------------------------- mutations


def find(trace: ExecutionTrace, rank: int, name: str) -> Node:
    return next(n for n in trace.ranks[rank].nodes if n.name == name)


def drop_node(trace: ExecutionTrace, rank: int, name: str) -> Node:
    """Remove a node; whatever depended on it depends on its dependencies instead."""
    nodes = trace.ranks[rank].nodes
    node = find(trace, rank, name)
    nodes.remove(node)
    for other in nodes:
        if node.id in other.deps:
            other.deps = [d for d in other.deps if d != node.id] + [d for d in node.deps if d not in other.deps]
    return node


def wire_attrs(node: Node, rank: int) -> list[WireAttr]:
    """The attributes our Chakra writer would give `node`, kinds as ASTRA-sim reads them."""
    attrs = [WireAttr("is_cpu_op", "bool_val", False)]
    if node.kind == NodeKind.COLLECTIVE:
        attrs += [WireAttr("comm_type", "int64_val", int(node.coll)), WireAttr("comm_size", "int64_val", node.size)]
        if node.group is not None:
            attrs.append(WireAttr("pg_name", "string_val", str(node.group)))
    elif node.kind in (NodeKind.SEND, NodeKind.RECV):
        src, dst = (rank, node.peer) if node.kind == NodeKind.SEND else (node.peer, rank)
        attrs += [WireAttr("comm_size", "int64_val", node.size), WireAttr("comm_src", "int32_val", src),
                  WireAttr("comm_dst", "int32_val", dst), WireAttr("comm_tag", "int32_val", node.tag)]
    return attrs


# ---------------------------------------------------------------- assertions on findings


def codes(findings) -> list[str]:
    return [f.code for f in findings]


def only(findings, code):
    found = [f for f in findings if f.code == code]
    assert found, f"no {code} in {[f.text() for f in findings]}"
    return found[0]
