"""Random small multi-rank jobs in the model, and the faults injected into them.

`random_job(rng)` builds a job that runs: 2-6 ranks, communicator groups of 2 or more members,
collectives, sends with their receives and compute, every rank's nodes in the order of one
global sequence of steps (so the job cannot deadlock), each node depending on the one before
it on its rank and on a few random earlier ones. `inject(trace, fault, rng)` breaks it one
way and says which findings `validate` must then report. Used by the property tests
(tests/test_validator_faults.py) and by `benchmarks/validator_faults.py`, which measures the
validator's false-positive and false-negative rates over many seeds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from converters.model import CollType, ExecutionTrace, Node, NodeKind, Parallel, Rank

COLLECTIVES = [CollType.ALL_REDUCE, CollType.ALL_GATHER, CollType.REDUCE_SCATTER, CollType.ALL_TO_ALL]
FAULTS = ("drop-collective", "change-size", "remove-recv")


@dataclass
class Expected:
    """What `validate` must report for one injected fault."""

    required: str  # the code naming the fault (a rank left without any collective of its group: E043)
    ranks: set[int]  # the ranks the fault is on: some finding of `required` names one of them
    group: int | None = None  # the group it is in, for collectives
    allowed: set[str] = field(default_factory=set)  # codes that follow from it (a simulator would hang)


def random_job(rng: random.Random) -> ExecutionTrace:
    world = rng.randint(2, 6)
    trace = ExecutionTrace(parallel=Parallel(world=world, dp=world))
    for _ in range(rng.randint(1, 3)):
        trace.add_group("", rng.sample(range(world), rng.randint(2, world)))
    programs: dict[int, list[Node]] = {r: [] for r in range(world)}

    def add(rank: int, node: Node) -> None:
        nodes = programs[rank]
        node.id = len(nodes)
        if nodes:  # after the node before it, and maybe after some earlier ones
            node.deps = sorted({node.id - 1, *rng.sample(range(node.id), min(node.id, rng.randint(0, 2)))})
        nodes.append(node)

    for step in range(rng.randint(1, 12)):
        what = rng.choice(("collective", "p2p", "compute"))
        if what == "collective":
            group = trace.groups[rng.choice(sorted(trace.groups))]
            coll, size = rng.choice(COLLECTIVES), rng.randint(1, 1 << 30)
            for r in group.members:
                add(r, Node(0, f"{coll.name.lower()} {step}", NodeKind.COLLECTIVE, coll=coll, size=size, group=group.id))
        elif what == "p2p":
            src, dst = rng.sample(range(world), 2)
            size = rng.randint(1, 1 << 30)
            add(src, Node(0, f"send {step}", NodeKind.SEND, size=size, peer=dst, tag=step))
            add(dst, Node(0, f"recv {step}", NodeKind.RECV, size=size, peer=src, tag=step))
        else:
            add(rng.randrange(world), Node(0, f"compute {step}", NodeKind.COMPUTE, duration_ns=1000 * rng.randint(1, 10**4)))
    trace.ranks = {r: Rank(r, nodes) for r, nodes in programs.items()}
    return trace


def inject(trace: ExecutionTrace, fault: str, rng: random.Random) -> Expected | None:
    """Break `trace` in place; None when it has nothing to break that way."""
    kind = NodeKind.RECV if fault == "remove-recv" else NodeKind.COLLECTIVE
    candidates = [(rank, node) for rank in trace.sorted_ranks() for node in rank.nodes if node.kind == kind]
    if not candidates:
        return None
    rank, node = rng.choice(candidates)
    if fault == "change-size":
        node.size += rng.randint(1, node.size)
        return Expected("E042", {rank.rank}, node.group)
    remove(rank, node)
    if fault == "remove-recv":
        return Expected("E034", {node.peer})  # the sender's send has no receive
    # The other members wait in that collective for ever: the dry run's deadlock follows.
    others = any(n.kind == kind and n.group == node.group for n in rank.nodes)
    return Expected("E040" if others else "E043", {rank.rank}, node.group, allowed={"E046"})


def remove(rank: Rank, gone: Node) -> None:
    """Take `gone` out of its rank's program; what waited for it waits for what it waited for."""
    rank.nodes.remove(gone)
    for node in rank.nodes:
        if gone.id in node.deps:
            node.deps = sorted((set(node.deps) - {gone.id}) | set(gone.deps))


def judge(findings, expected: Expected | None) -> tuple[bool, list]:
    """(found the fault, findings that are not about it): a clean job expects no findings."""
    if expected is None:
        return True, list(findings)
    hits = [f for f in findings if f.code == expected.required and names_the_fault(f, expected)]
    extra = [f for f in findings if f.code != expected.required and f.code not in expected.allowed]
    return bool(hits), extra


def names_the_fault(finding, expected: Expected) -> bool:
    if expected.group is not None and (finding.group or {}).get("id") != expected.group:
        return False
    members = len(finding.group["members"]) if finding.group else 0
    return members == 2 or bool(expected.ranks & set(finding.ranks))  # of two, neither is the majority
