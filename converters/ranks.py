"""Rank lists as people write them: `0-3,8-11`, `96-103`, `68,76,84`.

Used by the writers (`--ranks`, the `source.ranks` attribute of a Chakra set, slice args) and
by the validator (which ranks a set's source held), so both read and print them alike.
"""

from __future__ import annotations

from typing import Iterable


def compact_ranks(ranks: Iterable[int]) -> str:
    """`96-103`, `0-3,8-11`, `68,76,84`: sorted ranks with consecutive runs merged."""
    ranks = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(parts)


def parse_rank_list(text: str) -> set[int]:
    """`0-15,1008` -> those ranks; a ValueError names the part that is neither a rank nor a range."""
    ranks: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"cannot read {part!r}")
        if dash and int(last) < int(first):
            raise ValueError(f"range {part} runs backwards")
        ranks.update(range(int(first), int(last or first) + 1))
    return ranks
