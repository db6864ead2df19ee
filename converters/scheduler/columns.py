"""Attributes of many objects, column by column: what the scheduler, and the validator's checks
over every node, read of every node."""

from __future__ import annotations

from operator import attrgetter

try:  # in C (_loop.c) where setup.py built it: one pass over the objects, each slot found once
    from ._loop import columns as _native_columns
except ImportError:
    _native_columns = None


def columns(objects: list, names: tuple[str, ...]) -> tuple[list, ...]:
    """For each name, the list of the objects' values of that attribute (as getattr gives them).
    At most 8 names."""
    if _native_columns is not None:
        return _native_columns(objects, names)
    return tuple(list(map(attrgetter(name), objects)) for name in names)
