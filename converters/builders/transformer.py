"""Per-rank node graphs for layer tables (SimAI/AICB, ASTRA-sim 1.0, NeuSight).

The tables describe layers ("rows"): a forward compute and collective, an input-gradient
compute and collective, a weight-gradient compute and collective. The functions here turn
a list of `Op`s (rows already resolved to durations in ns, collective kinds, groups and
sizes) into the nodes of one representative rank, in program order with ids 0..n-1:

- `stage_program`: one pipeline stage of a Megatron-style training iteration (microbatches
  in 1F1B or GPipe order, SEND/RECV between stages, per-iteration rows at the end);
- `transformer_passes`: the ASTRA-sim 1.0 Transformer family (and MODEL, HYBRID_*,
  HYBRID_CUSTOMIZED, SimAI's own reading);
- `data_passes`, `dlrm_passes`, `inference_passes`, `micro_passes`: the other 1.0 loops.

Groups are named by kind ("tp", "dp", ...) here; `Graph.groups` maps a kind to the group id
of the representative rank. Nothing per-rank is stored on nodes, so ranks can share them:
`share_graphs` hands each rank its role's list with its own group ids and peers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..model import CollType, ExecutionTrace, Node, NodeKind, Rank
from .pipeline import schedule_for


@dataclass(frozen=True, slots=True)
class Coll:
    """A collective of a row, resolved: `kind` names the group kind, `size` is in bytes as
    ASTRA-sim reads it (ALL_GATHER: the per-rank input)."""

    coll: CollType
    kind: str
    size: int
    label: str  # the input's own word for it, e.g. "ALLGATHER" or "ALLREDUCE_ASYNC"
    blocking: bool = True


@dataclass(slots=True)
class Op:
    """One row of a table, resolved for building."""

    name: str
    source: str | None
    fwd_ns: int = 0
    fwd: Coll | None = None
    ig_ns: int = 0
    ig: Coll | None = None
    wg_ns: int = 0
    wg: Coll | None = None


@dataclass
class Graph:
    """The node list of one representative rank, built in program order."""

    groups: dict[str, int | None]  # group kind -> group id on the representative rank
    nodes: list[Node] = field(default_factory=list)

    def _add(self, node: Node, deps: list[int]) -> list[int]:
        # Drop an edge that another dependency already implies (one level is enough for the
        # shapes built here), so the graph has the edges a reader would draw, no more.
        wanted = set(deps)
        if len(wanted) > 1:
            implied = {d for e in wanted for d in self.nodes[e].deps}
            wanted -= implied
        node.deps = sorted(wanted)
        self.nodes.append(node)
        return [node.id]

    def compute(self, name: str, ns: int, deps: list[int], source: str | None, mb: int | None = None) -> list[int]:
        """Add a compute node; a zero time adds nothing and passes `deps` on."""
        if ns <= 0:
            return deps
        return self._add(Node(len(self.nodes), name, NodeKind.COMPUTE, ns, source=source, microbatch=mb), deps)

    def collective(self, name: str, c: Coll | None, deps: list[int], source: str | None, mb: int | None = None) -> list[int]:
        if c is None:
            return deps
        node = Node(len(self.nodes), f"{name} {c.label}", NodeKind.COLLECTIVE, coll=c.coll, size=c.size,
                    group=self.groups[c.kind], source=source, microbatch=mb)
        return self._add(node, deps)

    def p2p(self, kind: NodeKind, name: str, peer: int, tag: int, size: int, deps: list[int], mb: int | None) -> int:
        node = Node(len(self.nodes), name, kind, size=size, peer=peer, tag=tag, microbatch=mb)
        return self._add(node, deps)[0]


class Chain:
    """Program order on one rank: what the next operation waits for.

    Blocking work joins the chain; a non-blocking collective hangs off it and is joined only
    by `drain`. A SEND hangs off it too, and the operation after the next RECV waits for both:
    that is how a fused exchange (send_forward + recv_backward) becomes two sibling nodes
    with no edge between them, as Megatron issues them.
    """

    def __init__(self, graph: Graph):
        self.g = graph
        self.last: list[int] = []
        self.sends: list[int] = []
        self.pending: list[int] = []

    def compute(self, name: str, ns: int, source: str | None, mb: int | None = None) -> None:
        self.last = self.g.compute(name, ns, self.last + self.sends, source, mb)
        self.sends = []

    def collective(self, name: str, c: Coll | None, source: str | None, mb: int | None = None) -> None:
        if c is None:
            return
        if c.blocking:
            self.last = self.g.collective(name, c, self.last + self.sends, source, mb)
            self.sends = []
        else:
            self.pending += self.g.collective(name, c, self.last + self.sends, source, mb)

    def send(self, name: str, peer: int, tag: int, size: int, mb: int) -> None:
        self.sends.append(self.g.p2p(NodeKind.SEND, name, peer, tag, size, self.last, mb))

    def recv(self, name: str, peer: int, tag: int, size: int, mb: int) -> None:
        self.last = [self.g.p2p(NodeKind.RECV, name, peer, tag, size, self.last, mb)] + self.sends
        self.sends = []

    def drain(self) -> None:
        """Wait for everything in flight (before the optimizer, at the end of an iteration)."""
        self.last = self.last + self.sends + self.pending
        self.sends, self.pending = [], []


def share_graphs(
    trace: ExecutionTrace,
    world: int,
    role_of: Callable[[int], int],
    representative: dict[int, int],
    graphs: dict[int, list],
    group_ids: dict[int, dict[str, int]],
    coords: Callable[[int], dict[str, int]],
    peers: Callable[[int], list[int | None]] = lambda r: [],
) -> None:
    """Give every rank its role's shared node list and its own group ids and peers."""
    for r in range(world):
        role = role_of(r)
        rep = representative[role]
        rank = Rank(r, nodes=graphs[role], coords=coords(r))
        if r != rep:
            rep_ids, my_ids = group_ids[rep], group_ids[r]
            rank.group_map = {rep_ids[k]: my_ids[k] for k in rep_ids}
            rank.peer_map = {a: b for a, b in zip(peers(rep), peers(r)) if a is not None}
        trace.ranks[r] = rank


# ---------------------------------------------------------------- pipeline stage (SimAI, NeuSight)


@dataclass
class StagePlan:
    """What one pipeline stage runs in one iteration."""

    stage: int
    stages: int
    blocks: list[list[Op]]  # per microbatch: the rows this stage runs, in forward order
    finalize: list[Op]  # once per iteration after the last backward, in order
    prev_peer: int | None  # representative rank of stage s-1
    next_peer: int | None
    p2p_bytes: int
    schedule: str = "1f1b"
    passes: int = 1
    # position in this stage's block -> positions whose forward re-runs before its input gradient
    # (the caller maps the input's layer indices to each stage's own positions)
    recompute: dict[int, list[int]] = field(default_factory=dict)


def p2p_tag(pass_: int, backward: bool, microbatch: int, boundary: int, microbatches: int, stages: int) -> int:
    """Unique per (pass, direction, microbatch, stage boundary s<->s+1)."""
    return ((pass_ * 2 + int(backward)) * microbatches + microbatch) * stages + boundary


def stage_program(graph: Graph, plan: StagePlan) -> list[Node]:
    chain = Chain(graph)
    m_count = len(plan.blocks)
    s, last_stage = plan.stage, plan.stages - 1
    for p in range(plan.passes):
        tag = lambda backward, m, boundary: p2p_tag(p, backward, m, boundary, m_count, plan.stages)  # noqa: E731
        for step, m in schedule_for(plan.schedule, plan.stages, s, m_count):
            rows = plan.blocks[m]
            if step == "F":
                if s > 0:
                    chain.recv(f"recv_forward mb{m}", plan.prev_peer, tag(False, m, s - 1), plan.p2p_bytes, m)
                for op in rows:
                    forward_row(chain, op, m)
                if s < last_stage:
                    chain.send(f"send_forward mb{m}", plan.next_peer, tag(False, m, s), plan.p2p_bytes, m)
            else:
                if s < last_stage:
                    chain.recv(f"recv_backward mb{m}", plan.next_peer, tag(True, m, s), plan.p2p_bytes, m)
                for i in range(len(rows) - 1, -1, -1):
                    for j in plan.recompute.get(i, ()):
                        forward_row(chain, rows[j], m, "recompute")
                    backward_row(chain, rows[i], m)
                if s > 0:
                    chain.send(f"send_backward mb{m}", plan.prev_peer, tag(True, m, s - 1), plan.p2p_bytes, m)
        chain.drain()
        for op in plan.finalize:
            forward_row(chain, op, None)
            backward_row(chain, op, None)
        chain.drain()
    return graph.nodes


def forward_row(chain: Chain, op: Op, mb: int | None, phase: str = "fwd") -> None:
    chain.compute(f"{op.name} {phase}", op.fwd_ns, op.source, mb)
    chain.collective(f"{op.name} {phase}", op.fwd, op.source, mb)


def backward_row(chain: Chain, op: Op, mb: int | None) -> None:
    chain.compute(f"{op.name} ig", op.ig_ns, op.source, mb)
    chain.collective(f"{op.name} ig", op.ig, op.source, mb)
    chain.compute(f"{op.name} wg", op.wg_ns, op.source, mb)
    chain.collective(f"{op.name} wg", op.wg, op.source, mb)


# ---------------------------------------------------------------- ASTRA-sim 1.0 loops (all ranks alike)


def recompute_plan(checkpoints: list[int], initiators: list[int]) -> dict[int, list[int]]:
    """FWD_IN_BCKWD: before the input gradient of initiator i, re-run the forward of rows
    c..i-1, c being the nearest checkpoint at or below i (row 0 when there is none)."""
    plan = {}
    for i in sorted(set(initiators)):
        c = max((k for k in checkpoints if k <= i), default=0)
        if c < i:
            plan[i] = list(range(c, i))
    return plan


def transformer_passes(
    graph: Graph, ops: list[Op], passes: int, ig_blocking: bool, recompute: dict[int, list[int]] | None = None
) -> list[Node]:
    """Forward rows 0..L-1 (compute, blocking collective); backward rows L-1..0 (input-gradient
    compute and collective, weight-gradient compute, non-blocking weight-gradient collective).

    The next row's input gradient waits for this row's input-gradient collective (ASTRA-sim
    1.0 lets it overlap the weight-gradient compute; with `ig_blocking`, as SimAI does, the
    weight-gradient compute waits too). The forward of row i in the next pass waits for row
    i's weight-gradient collective (or compute, when the row has none).
    """
    g = graph
    recompute = recompute or {}
    wg_done: dict[int, list[int]] = {}
    prev: list[int] = []
    for _ in range(passes):
        for i, op in enumerate(ops):
            prev = g.compute(f"{op.name} fwd", op.fwd_ns, prev + wg_done.pop(i, []), op.source)
            prev = g.collective(f"{op.name} fwd", op.fwd, prev, op.source)
        for i in range(len(ops) - 1, -1, -1):
            op = ops[i]
            for j in recompute.get(i, ()):
                r = ops[j]
                prev = g.compute(f"{r.name} recompute", r.fwd_ns, prev, r.source)
                prev = g.collective(f"{r.name} recompute", r.fwd, prev, r.source)
            ig = g.compute(f"{op.name} ig", op.ig_ns, prev, op.source)
            ig_comm = g.collective(f"{op.name} ig", op.ig, ig, op.source)
            wg = g.compute(f"{op.name} wg", op.wg_ns, ig_comm if ig_blocking else ig, op.source)
            wg_done[i] = g.collective(f"{op.name} wg", op.wg, wg, op.source)
            prev = sorted(set(wg + ig_comm))
    return g.nodes


def data_passes(graph: Graph, ops: list[Op], passes: int) -> list[Node]:
    """DATA: forward computes only; backward per row is weight-gradient compute, its
    collective (non-blocking), then the input-gradient compute (none for row 0)."""
    g = graph
    wg_done: dict[int, list[int]] = {}
    prev: list[int] = []
    for _ in range(passes):
        for i, op in enumerate(ops):
            prev = g.compute(f"{op.name} fwd", op.fwd_ns, prev + wg_done.pop(i, []), op.source)
        for i in range(len(ops) - 1, -1, -1):
            op = ops[i]
            wg = g.compute(f"{op.name} wg", op.wg_ns, prev, op.source)
            wg_done[i] = g.collective(f"{op.name} wg", op.wg, wg, op.source)
            prev = g.compute(f"{op.name} ig", op.ig_ns, wg, op.source) if i else wg
    return g.nodes


def inference_passes(graph: Graph, ops: list[Op], passes: int) -> list[Node]:
    """DISTRIBUTED_INFERENCE: forward only, each row's collective blocking."""
    g = graph
    prev: list[int] = []
    for _ in range(passes):
        for op in ops:
            prev = g.compute(f"{op.name} fwd", op.fwd_ns, prev, op.source)
            prev = g.collective(f"{op.name} fwd", op.fwd, prev, op.source)
    return g.nodes


def micro_passes(graph: Graph, op: Op, passes: int) -> list[Node]:
    """MICRO: row 0's weight-gradient collective once per pass, nothing else, no edges."""
    for _ in range(passes):
        graph.collective(f"{op.name} wg", op.wg, [], op.source)
    return graph.nodes


def dlrm_passes(graph: Graph, ops: list[Op], passes: int, last_bottom: int) -> list[Node]:
    """HYBRID_DLRM: row 0 is the embedding; its forward all-to-all overlaps the bottom MLP
    and the first top-MLP row (last_bottom + 1... is the top) waits for it. Backward per row:
    weight-gradient compute, its collective (non-blocking), input-gradient compute; row 0's
    input-gradient all-to-all starts after the first top row's input gradient, and row 0's
    weight gradient waits for it."""
    g = graph
    wg_done: dict[int, list[int]] = {}
    prev: list[int] = []
    top = min(last_bottom + 1, len(ops) - 1)
    for _ in range(passes):
        emb_a2a: list[int] = []
        for i, op in enumerate(ops):
            deps = prev + wg_done.pop(i, [])
            if i == top and i > 0:
                deps = deps + emb_a2a
            prev = g.compute(f"{op.name} fwd", op.fwd_ns, deps, op.source)
            if i == 0:
                emb_a2a = g.collective(f"{op.name} fwd", ops[0].fwd, prev, op.source)
                if emb_a2a == prev:
                    emb_a2a = []
        emb_back: list[int] = []
        for i in range(len(ops) - 1, -1, -1):
            op = ops[i]
            wg = g.compute(f"{op.name} wg", op.wg_ns, prev + (emb_back if i == 0 else []), op.source)
            comm = g.collective(f"{op.name} wg", op.wg, wg, op.source)
            wg_done[i] = comm
            prev = g.compute(f"{op.name} ig", op.ig_ns, wg, op.source) if i else wg
            if i == top and i > 0:
                emb_back = g.collective(f"{ops[0].name} ig", ops[0].ig, prev, ops[0].source)
                if emb_back == prev:
                    emb_back = []
    return g.nodes
