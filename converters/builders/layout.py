"""Rank layout and communicator groups in Megatron's default order (tp fastest).

    rank = tp + TP * (dp + DP * pp),   dp = ep + EP * dpe

Groups of a rank: TP = same (dp, pp); DP = same (tp, pp); EP = same (tp, dpe, pp);
DP_EP = same (tp, ep, pp); PP = same (tp, dp); embedding = the first and last stage of a
PP column. See FORMATS.md §5 "Rank layout".
"""

from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import InputError
from ..model import ExecutionTrace


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1  # expert parallelism carved out of DP; must divide dp

    @property
    def world(self) -> int:
        return self.tp * self.dp * self.pp

    def check(self, where: str | None = None) -> None:
        for name in ("tp", "dp", "pp", "ep"):
            if getattr(self, name) < 1:
                raise InputError(where, f"{name} must be at least 1, got {getattr(self, name)}")
        if self.dp % self.ep:
            raise InputError(where, f"ep {self.ep} does not divide dp {self.dp}")

    def coords(self, rank: int) -> dict[str, int]:
        tp = rank % self.tp
        dp = (rank // self.tp) % self.dp
        pp = rank // (self.tp * self.dp)
        return {"tp": tp, "dp": dp, "pp": pp, "ep": dp % self.ep, "dpe": dp // self.ep}

    def rank_of(self, tp: int = 0, dp: int = 0, pp: int = 0) -> int:
        return tp + self.tp * (dp + self.dp * pp)

    def tp_members(self, rank: int) -> list[int]:
        c = self.coords(rank)
        return [self.rank_of(t, c["dp"], c["pp"]) for t in range(self.tp)]

    def dp_members(self, rank: int) -> list[int]:
        c = self.coords(rank)
        return [self.rank_of(c["tp"], d, c["pp"]) for d in range(self.dp)]

    def ep_members(self, rank: int) -> list[int]:
        c = self.coords(rank)
        return [self.rank_of(c["tp"], c["dpe"] * self.ep + e, c["pp"]) for e in range(self.ep)]

    def dp_ep_members(self, rank: int) -> list[int]:
        c = self.coords(rank)
        return [self.rank_of(c["tp"], d * self.ep + c["ep"], c["pp"]) for d in range(self.dp // self.ep)]

    def pp_members(self, rank: int) -> list[int]:
        c = self.coords(rank)
        return [self.rank_of(c["tp"], c["dp"], s) for s in range(self.pp)]

    def embedding_members(self, rank: int) -> list[int]:
        column = self.pp_members(rank)
        return sorted({column[0], column[-1]})

    def members(self, kind: str, rank: int) -> list[int]:
        return {
            "tp": self.tp_members,
            "dp": self.dp_members,
            "ep": self.ep_members,
            "dp_ep": self.dp_ep_members,
            "pp": self.pp_members,
            "embedding": self.embedding_members,
        }[kind](rank)

    def next_stage_rank(self, rank: int) -> int | None:
        c = self.coords(rank)
        return None if c["pp"] + 1 >= self.pp else self.rank_of(c["tp"], c["dp"], c["pp"] + 1)

    def prev_stage_rank(self, rank: int) -> int | None:
        c = self.coords(rank)
        return None if c["pp"] == 0 else self.rank_of(c["tp"], c["dp"], c["pp"] - 1)


def add_layout_groups(trace: ExecutionTrace, layout: Layout, kinds=("tp", "dp", "ep", "dp_ep", "pp")) -> dict[int, dict[str, int]]:
    """Create the groups of every kind for every rank; return rank -> {kind: group id}.

    Groups of size 1 are still created (a rank may issue a collective in them; the writer
    and scheduler treat a one-member collective as free).
    """
    by_rank: dict[int, dict[str, int]] = {}
    for rank in range(layout.world):
        ids = {}
        for kind in kinds:
            members = layout.members(kind, rank)
            group = trace.add_group(kind, members)
            if not group.name:
                group.name = f"{kind}#{group.id}"
            ids[kind] = group.id
        by_rank[rank] = ids
    return by_rank
