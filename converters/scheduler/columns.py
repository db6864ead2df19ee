"""Attributes of many objects, column by column: what the scheduler, and the validator's checks
over every node, read of every node."""

from __future__ import annotations

from operator import attrgetter

try:  # in C (_loop.c) where setup.py built it: one pass over the objects, each slot found once
    from ._loop import columns as _native_columns, distinct as _native_distinct
except ImportError:
    _native_columns = _native_distinct = None


def columns(objects: list, names: tuple[str, ...]) -> tuple[list, ...]:
    """For each name, the list of the objects' values of that attribute (as getattr gives them).
    At most 8 names. A list that keeps its objects' values in columns (`rank_files.SkeletonNodes`)
    gives them: its `column(name)`."""
    column = getattr(objects, "column", None)
    if column is not None:
        return tuple(map(column, names))
    if _native_columns is not None:
        return _native_columns(objects, names)
    return tuple(list(map(attrgetter(name), objects)) for name in names)


def columns_at(objects: list, names: tuple[str, ...], places: list[int]) -> tuple[list, ...]:
    """`columns` of the objects at `places` (positions in `objects`), in that order."""
    column_at = getattr(objects, "column_at", None)
    if column_at is not None:
        return tuple(column_at(name, places) for name in names)
    return columns(list(map(objects.__getitem__, places)), names)


def distinct_at(objects: list, names: tuple[str, ...], places: list[int]) -> tuple[list[int], list[int]]:
    """The objects at `places` told apart by their values of `names` (compared as dict keys):
    (index, firsts), index[j] numbering the j-th one's values in the order they first appear,
    firsts[u] the position in `places` of the first with the u-th. In C (`_loop.distinct`)
    where built, but for a list that keeps its objects' values in columns."""
    if _native_distinct is not None and getattr(objects, "column", None) is None:
        return _native_distinct(objects, names, places)
    keys = list(zip(*columns_at(objects, names, places)))
    first_of = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1)))  # (later writes win: the first)
    firsts = sorted(first_of.values())
    number = {keys[j]: u for u, j in enumerate(firsts)}
    return list(map(number.__getitem__, keys)), firsts
