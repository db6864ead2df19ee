"""What the scheduler reports when the ranks cannot all finish: who waits where, for whom.

The validator reuses this as its deadlock dry run: `schedule()` raises `Deadlock`, whose
`blocked` lists one `Wait` per rank that could not finish and whose `chain` is the wait-for
chain (or cycle) the message describes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import InputError


@dataclass(frozen=True)
class Wait:
    """One rank that cannot go on: the node it is stuck in and what that node waits for.

    `what` is one of:
      "collective" - issued a collective whose other members never issue it
      "recv"       - issued a receive whose send is never issued
      "missing"    - a node depends on a node id that does not exist on this rank
      "cycle"      - nodes of this rank depend on each other in a cycle
    `waits_for` names (rank, node id) pairs: the members that have not issued the collective
    (node id = their matching collective, None when they have none left), the peer of a
    receive (node id = its matching send, or None), or this rank's own nodes for "missing"
    and "cycle" (for "missing" the node id is the one that does not exist).
    """

    rank: int
    node: int  # node id
    name: str
    what: str
    detail: str  # e.g. "tp#3 seq 5 ALL_REDUCE", "recv from rank 2 tag 7"
    waits_for: tuple[tuple[int, int | None], ...]
    group: int | None = None
    seq: int | None = None  # which collective of the group (0-based), for "collective"
    source: str | None = None  # "file:line" of the node, when known

    def phrase(self) -> str:
        ranks = _rank_list([r for r, _ in self.waits_for if r != self.rank])
        head = f"rank {self.rank} waits in {self.detail} (node {self.node} \"{self.name}\")"
        if self.what in ("missing", "cycle"):
            return f"{head}: {_own(self)}"
        return f"{head} for {ranks}" if ranks else head


def _own(wait: Wait) -> str:
    if wait.what == "missing":
        return ", ".join(f"node {n} does not exist" for _, n in wait.waits_for)
    ids = [n for _, n in wait.waits_for]
    return "dependency cycle: " + " waits for ".join(f"node {n}" for n in ids + ids[:1])


def _rank_list(ranks: list[int]) -> str:
    if not ranks:
        return ""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(str(r) for r in ranks[:8])
    more = f" and {len(ranks) - 8} more" if len(ranks) > 8 else ""
    return f"ranks {shown}{more}"


class Deadlock(InputError):
    """The schedule cannot progress. `blocked`: one Wait per stuck rank, by rank.

    `chain`: the Waits along the wait-for chain starting at the lowest stuck rank; `cycle` is
    True when the chain returns to a rank already on it. `finished` lists ranks the chain
    reached that had finished (they will never issue what is waited for).
    """

    def __init__(self, blocked: list[Wait], chain: list[Wait], cycle: bool, finished: list[int], ranks_total: int,
                 truncated: bool = False):
        self.blocked = blocked
        self.chain = chain
        self.cycle = cycle
        self.finished = finished
        self.truncated = truncated  # the chain goes on beyond MAX_CHAIN ranks
        message = "deadlock · " + " · ".join(w.phrase() for w in chain)
        if truncated:
            message += " · ..."
        if cycle:
            message += " · (cycle)"
        for rank in finished:
            message += f" · rank {rank} finished without issuing it"
        # Ranks stuck on their own (a missing node, a dependency cycle) are root causes the
        # chain may not reach: name a few.
        roots = [w for w in blocked if w.what in ("missing", "cycle") and w not in chain]
        for wait in roots[:3]:
            message += " · " + wait.phrase()
        others = len(blocked) - len(chain)
        if others > 0:
            message += f" · {len(blocked)} of {ranks_total} ranks blocked"
        super().__init__(None, message)


MAX_CHAIN = 8  # ranks shown on a wait-for chain


def wait_chain(blocked: dict[int, Wait]) -> tuple[list[Wait], bool, list[int]]:
    """Follow waits from the lowest stuck rank until a rank repeats (cycle) or the chain ends;
    at most MAX_CHAIN + 1 waits (more means the chain was cut)."""
    if not blocked:
        return [], False, []
    chain: list[Wait] = []
    seen: set[int] = set()
    rank = min(blocked)
    while len(chain) <= MAX_CHAIN:
        wait = blocked[rank]
        chain.append(wait)
        seen.add(rank)
        others = [r for r, _ in wait.waits_for if r != wait.rank]
        if not others:
            return chain, False, []
        # Prefer a rank that is itself stuck (the chain goes on) over one that finished.
        nxt = next((r for r in others if r in blocked), None)
        if nxt is None:
            return chain, False, [others[0]]
        if nxt in seen:
            return chain, True, []
        rank = nxt
    return chain, False, []
