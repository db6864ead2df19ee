"""Node positions 0, 1, 2, ... as one int object each, for the lists of positions that every
node of a big set fills (the validator's indices of communication nodes, the scheduler's tables).

Past 256 each int Python makes is a new 28-byte object: a list of a million fresh positions
holds 36 MB, one of these 8 MB.
"""

from __future__ import annotations

_POSITIONS: list[int] = []


def positions(count: int) -> list[int]:
    """A new list [0, 1, ..., count - 1] whose ints are the same objects in every list made here."""
    if len(_POSITIONS) < count:
        _POSITIONS.extend(range(len(_POSITIONS), count))
    return _POSITIONS[:count]
